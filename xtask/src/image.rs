//! `cargo xtask image [--example NAME] [--profile release|dev|...] [--no-testcontainers]`
//!
//! Builds the container image of an example operator with `deploy/Dockerfile` and runs it
//! as a cluster would, against the project's fake API server:
//!
//! 1. docker: the CLI and its daemon answer (else: how to install and start them, exit 1);
//! 2. binaries: `cargo build --profile P -p kopf --example NAME` and `-p kopf-cli --bin kopf`
//!    (for `dev`: `cargo test --workspace --no-run` and `cargo build -p kopf-cli`, as CI built
//!    them);
//! 3. base: the runtime base image, made here if absent (`docker import` of the shared
//!    libraries `ldd` lists, a `nonroot` user and the CA bundle; tagged by a hash of the
//!    libraries, so it is made once) since no registry is reachable;
//! 4. image: `docker build --target prebuilt` of the Dockerfile with the binary;
//! 5. cluster: `kopf fake-apiserver` on the host (127.0.0.1, a free port), `examples/crd.yaml`
//!    applied;
//! 6. run: the image in a container on the host network, read-only, all capabilities
//!    dropped, user 65532, with the cluster's kubeconfig mounted and named by `KUBECONFIG`
//!    (kube's in-cluster configuration speaks HTTPS only, the fake API server HTTP only);
//! 7. handle: `examples/obj.yaml` applied; waits until the handler wrote `status.create_fn`
//!    and the liveness endpoint answers 200;
//! 8. stop: `docker stop` (SIGTERM): exit status 0 within the grace period;
//! 9. size: the image's size;
//! 10. testcontainers: the `container` test of kopf-testing (feature `testcontainers`) with
//!     an image of the `kopf` binary as the cluster (`cargo test -p kopf-testing --features
//!     testcontainers --test container`), unless `--no-testcontainers`.
//!
//! Each step prints a line when it starts and one with its duration when it ends.

mod docker;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kopf_testing::{Cluster, ClusterKind};

use crate::cargo::Workspace;
use docker::Docker;

/// Options of `cargo xtask image`.
#[derive(Debug, clap::Args)]
pub struct ImageArgs {
    /// The example of crates/kopf/examples to put in the image.
    #[arg(long, default_value = "minimal")]
    example: String,
    /// The cargo profile of the binary: `release` (the workspace's, fat LTO: what a real
    /// image ships, about 12 minutes from scratch on 2 cores) or a cheaper one (`dev`: the
    /// binaries `cargo test` already built, as CI does).
    #[arg(long, default_value = "release")]
    profile: String,
    /// Do not run kopf-testing's testcontainers test.
    #[arg(long)]
    no_testcontainers: bool,
    /// How long to wait for the handler's status.
    #[arg(long, default_value_t = 60)]
    timeout_secs: u64,
}

/// Numbered progress lines with the duration of each step.
struct Progress {
    total: usize,
    done: usize,
    started: Instant,
    step_started: Instant,
}

impl Progress {
    fn new(total: usize) -> Self {
        let now = Instant::now();
        Self {
            total,
            done: 0,
            started: now,
            step_started: now,
        }
    }

    fn start(&mut self, what: &str) {
        self.done += 1;
        self.step_started = Instant::now();
        println!("[{}/{}] {what} ...", self.done, self.total);
    }

    fn finish(&self, outcome: &str) {
        println!(
            "[{}/{}]   {outcome} ({:.1} s)",
            self.done,
            self.total,
            self.step_started.elapsed().as_secs_f64()
        );
    }
}

/// The directory of a profile's output under the target directory.
fn profile_dir(profile: &str) -> &str {
    match profile {
        "dev" | "test" => "debug",
        "bench" => "release",
        other => other,
    }
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

pub async fn run(args: ImageArgs) -> Result<()> {
    let total = if args.no_testcontainers { 9 } else { 10 };
    let mut progress = Progress::new(total);

    progress.start("docker: the CLI and its daemon");
    let docker = Docker::connect().await?;
    progress.finish(&format!(
        "engine {}, {}",
        docker.server_version,
        docker.builder_name()
    ));

    let ws = Workspace::locate()?;
    let example_src = ws
        .root
        .join("crates/kopf/examples")
        .join(format!("{}.rs", args.example));
    if !example_src.is_file() {
        bail!("no example {:?} ({})", args.example, example_src.display());
    }
    progress.start(&format!(
        "binaries: example {} and kopf, profile {}",
        args.example, args.profile
    ));
    build(&ws.root, &args.profile, &args.example)?;
    let out_dir = ws.target.join(profile_dir(&args.profile));
    let operator_bin = out_dir.join("examples").join(&args.example);
    let kopf_bin = out_dir.join("kopf");
    for bin in [&operator_bin, &kopf_bin] {
        if !bin.is_file() {
            bail!("cargo built no {}", bin.display());
        }
    }
    progress.finish(&format!(
        "{} ({})",
        operator_bin.display(),
        megabytes(std::fs::metadata(&operator_bin)?.len())
    ));

    progress.start("base: the runtime base image (made here: no registry)");
    let mut libraries = docker::shared_libraries(&operator_bin).await?;
    libraries.extend(docker::shared_libraries(&kopf_bin).await?);
    let base = docker::base_tag(&libraries);
    let made = docker.ensure_base(&base, &libraries).await?;
    progress.finish(&format!(
        "{base} {} ({} libraries, {})",
        if made { "made" } else { "cached" },
        libraries.len(),
        megabytes(docker.image_size(&base).await?)
    ));

    let tag_suffix = if args.profile == "release" {
        "latest".to_string()
    } else {
        args.profile.clone()
    };
    let image = format!("kopf-rs-{}:{tag_suffix}", args.example);
    let dockerfile = ws.root.join("deploy/Dockerfile");
    progress.start(&format!(
        "image: {image} from deploy/Dockerfile (--target prebuilt)"
    ));
    docker
        .build_prebuilt(&dockerfile, &operator_bin, &base, &image)
        .await?;
    progress.finish("built");

    progress.start("cluster: kopf fake-apiserver on 127.0.0.1, examples/crd.yaml");
    let cluster = Cluster::builder(ClusterKind::Fake)
        .kopf_binary(&kopf_bin)
        .start()
        .await?;
    cluster
        .apply_file(ws.root.join("examples/crd.yaml"))
        .await?;
    progress.finish(cluster.description());

    let outcome = run_container(&docker, &image, &cluster, &ws.root, &args, &mut progress).await;
    let teardown = cluster.teardown().await;
    outcome?;
    teardown?;

    progress.start("size");
    let size = docker.image_size(&image).await?;
    progress.finish(&format!(
        "{image}: {} (base {base}: {})",
        megabytes(size),
        megabytes(docker.image_size(&base).await?)
    ));

    if !args.no_testcontainers {
        let kopf_image = format!("kopf-rs-kopf:{tag_suffix}");
        progress.start(&format!(
            "testcontainers: kopf-testing's `container` test, the cluster in {kopf_image}"
        ));
        docker
            .build_prebuilt(&dockerfile, &kopf_bin, &base, &kopf_image)
            .await?;
        let test_args = [
            "test",
            "--locked",
            "-p",
            "kopf-testing",
            "--features",
            "testcontainers",
            "--test",
            "container",
        ];
        let operator = operator_bin.to_string_lossy().into_owned();
        crate::cargo::run_with_env(
            &ws.root,
            &test_args,
            &[
                ("KOPF_TEST_FAKE_APISERVER_IMAGE", kopf_image.as_str()),
                ("KOPF_TEST_OPERATOR_BINARY", operator.as_str()),
            ],
            "image",
        )?;
        progress.finish("passed");
    }
    println!(
        "image: all {} steps passed in {:.1} s; {image} is {}",
        progress.total,
        progress.started.elapsed().as_secs_f64(),
        megabytes(size)
    );
    Ok(())
}

/// Builds the example and the `kopf` binary. For `dev`, with the commands of `cargo xtask
/// e2e` and CI (`cargo test --workspace --no-run`, `cargo build -p kopf-cli`), whose
/// binaries are then used as they are: a build of these two packages alone unifies other
/// features and would compile again (2 minutes here). For other profiles, one build each.
fn build(root: &Path, profile: &str, example: &str) -> Result<()> {
    if profile == "dev" {
        crate::cargo::run(
            root,
            &["test", "--workspace", "--no-run", "--locked"],
            "image",
        )?;
        return crate::cargo::run(root, &["build", "--locked", "-p", "kopf-cli"], "image");
    }
    crate::cargo::run(
        root,
        &[
            "build",
            "--locked",
            "--profile",
            profile,
            "-p",
            "kopf",
            "--example",
            example,
        ],
        "image",
    )?;
    crate::cargo::run(
        root,
        &[
            "build",
            "--locked",
            "--profile",
            profile,
            "-p",
            "kopf-cli",
            "--bin",
            "kopf",
        ],
        "image",
    )
}

/// A free TCP port on 127.0.0.1 (free when asked: the container binds it right after).
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Steps 6 to 8: the container started, the object handled, the container stopped. The
/// container is removed whatever happens.
async fn run_container(
    docker: &Docker,
    image: &str,
    cluster: &Cluster,
    root: &Path,
    args: &ImageArgs,
    progress: &mut Progress,
) -> Result<()> {
    // The kubeconfig, readable by the container's user (65532): a copy in a directory of
    // our own.
    let dir = tempfile::tempdir().context("a directory for the container's kubeconfig")?;
    let kubeconfig: PathBuf = dir.path().join("kubeconfig");
    std::fs::copy(cluster.kubeconfig(), &kubeconfig).context("copying the kubeconfig")?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o644))?;
    }
    let name = format!("kopf-image-{}", std::process::id());
    let liveness = free_port()?;
    let metrics = free_port()?;

    progress.start(&format!(
        "run: {name} (host network, read-only, no capabilities)"
    ));
    let mount = format!(
        "type=bind,source={},target=/var/run/kopf/kubeconfig,readonly",
        kubeconfig.display()
    );
    let liveness_url = format!("http://127.0.0.1:{liveness}/healthz");
    let metrics_addr = format!("127.0.0.1:{metrics}");
    docker
        .run([
            "run",
            "--detach",
            "--name",
            &name,
            "--network",
            "host",
            "--read-only",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--mount",
            &mount,
            "--env",
            "KUBECONFIG=/var/run/kopf/kubeconfig",
            image,
            "run",
            "--all-namespaces",
            "--liveness",
            &liveness_url,
            "--metrics",
            &metrics_addr,
        ])
        .await?;
    let outcome = handle_and_stop(docker, &name, cluster, root, args, liveness, progress).await;
    if outcome.is_err() {
        // The operator logs on stderr; both streams are shown.
        match docker
            .command(["logs", "--tail", "60", &name])
            .output()
            .await
        {
            Ok(out) => eprintln!(
                "the container's last log lines:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("cannot read the container's logs: {e}"),
        }
    }
    if let Err(e) = docker.run(["rm", "--force", &name]).await {
        eprintln!("warning: cannot remove the container {name}: {e:#}");
    }
    outcome
}

async fn handle_and_stop(
    docker: &Docker,
    name: &str,
    cluster: &Cluster,
    root: &Path,
    args: &ImageArgs,
    liveness: u16,
    progress: &mut Progress,
) -> Result<()> {
    let state = docker
        .run([
            "inspect",
            "--format",
            "{{.State.Status}} {{.Config.User}}",
            name,
        ])
        .await?;
    progress.finish(&format!("container {}", state.trim()));

    progress.start("handle: examples/obj.yaml, until the handler wrote status.create_fn");
    cluster.apply_file(root.join("examples/obj.yaml")).await?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let written = loop {
        let value = cluster
            .kubectl([
                "get",
                "kopfexamples",
                "kopf-example-1",
                "-o",
                "jsonpath={.status.create_fn}",
            ])
            .await?;
        if !value.trim().is_empty() {
            break value;
        }
        let running = docker
            .run(["inspect", "--format", "{{.State.Running}}", name])
            .await?;
        if running.trim() != "true" {
            bail!("the container stopped before the handler wrote status.create_fn");
        }
        if Instant::now() > deadline {
            bail!(
                "no status.create_fn on kopf-example-1 after {} s",
                args.timeout_secs
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let health = http_status(liveness, "/healthz").await?;
    if health != 200 {
        bail!("the liveness endpoint answered {health}, not 200");
    }
    progress.finish(&format!(
        "status.create_fn = {}; /healthz 200",
        written.trim()
    ));

    progress.start("stop: SIGTERM (docker stop), exit status 0");
    docker.run(["stop", "--time", "40", name]).await?;
    let code = docker
        .run(["inspect", "--format", "{{.State.ExitCode}}", name])
        .await?;
    if code.trim() != "0" {
        bail!("the operator exited with status {} on SIGTERM", code.trim());
    }
    progress.finish("exit status 0");
    Ok(())
}

/// The status code of `GET path` on 127.0.0.1:port (HTTP/1.0, no client library).
async fn http_status(port: u16, path: &str) -> Result<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .with_context(|| format!("connecting to the liveness endpoint on port {port}"))?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .context("the liveness endpoint did not answer within 10 s")??;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("not an HTTP answer: {text:?}"))
}
