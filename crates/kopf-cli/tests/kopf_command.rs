//! The `kopf` command as a user runs it: its help, `kopf run` and `kopf rbac` of an operator
//! binary, a cargo package or a cargo project directory (built first), and the refusal of
//! what is not a kopf-rs operator. The operators are the `hello` example of this crate (on
//! `kopf::run!()`) and the workspace's `examples/my-operator` package.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use kopf_testing::{OperatorRunner, Signal};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn kopf() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kopf"));
    command
        .current_dir(root())
        .env_remove("RUST_LOG")
        .env_remove("KUBECONFIG");
    command
}

/// The `hello` example, built once per test process.
fn hello() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-q", "-p", "kopf-cli", "--example", "hello"])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the hello example");
    });
    Path::new(env!("CARGO_BIN_EXE_kopf"))
        .parent()
        .expect("target/<profile>")
        .join("examples/hello")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The error line of a `kopf` that failed (exit status 1).
fn refusal(output: &Output) -> String {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: ") || l.starts_with("Error: "))
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {stderr}");
    errors[0].to_string()
}

#[test]
fn the_help_describes_the_commands_as_they_are() {
    let out = kopf().arg("--help").output().expect("runs");
    assert!(out.status.success());
    let help = text(&out.stdout);
    for expected in [
        "kopf-rs: Kubernetes operators in a few lines of Rust.",
        "run             Build if need be, check and run a kopf-rs operator",
        "rbac            Print the RBAC manifests",
        "fake-apiserver  Run the in-memory Kubernetes API server",
    ] {
        assert!(help.contains(expected), "{expected}: {help}");
    }
    assert!(
        !help.contains("later"),
        "nothing promised for later: {help}"
    );
    let out = kopf().args(["run", "--help"]).output().expect("runs");
    let help = text(&out.stdout);
    assert!(
        help.contains("Usage: kopf run [OPTIONS] <OPERATOR>")
            && help.contains("the name of a cargo package of the workspace here")
            && help.contains("the directory of a cargo project"),
        "{help}"
    );
}

#[test]
fn what_is_not_a_kopf_rs_operator_is_refused_with_what_was_expected() {
    let expected = "expected an operator built with kopf-rs: its binary, a cargo package";
    let line = refusal(
        &kopf()
            .args(["run", "crates/kopf-cli/src/main.rs", "-A"])
            .output()
            .expect("runs"),
    );
    assert!(
        line.contains("crates/kopf-cli/src/main.rs is not an executable (a Rust source file")
            && line.contains(expected)
            && !line.contains("Permission denied"),
        "{line}"
    );
    let line = refusal(
        &kopf()
            .args(["run", "/bin/true", "-A"])
            .output()
            .expect("runs"),
    );
    assert!(
        line.contains("/bin/true is not a kopf-rs operator: `true __kopf-probe` ended with exit status: 0 without a kopf-rs operator's answer")
            && line.contains(expected),
        "{line}"
    );
    let line = refusal(
        &kopf()
            .args(["rbac", "no-such-operator"])
            .output()
            .expect("runs"),
    );
    assert!(
        line.contains("no-such-operator is neither a file, a package of the cargo workspace here")
            && line.contains("my-operator")
            && line.contains("nor a program on PATH"),
        "{line}"
    );
    let line = refusal(&kopf().args(["rbac", "kopf"]).output().expect("runs"));
    assert!(
        line.contains("the cargo package kopf has no binary"),
        "{line}"
    );
    let line = refusal(&kopf().args(["rbac", "."]).output().expect("runs"));
    assert!(
        line.contains("is a cargo workspace without a package of its own")
            && line.contains("my-operator"),
        "{line}"
    );
    let line = refusal(&kopf().args(["rbac", "crates"]).output().expect("runs"));
    assert!(
        line.contains("crates is a directory without a Cargo.toml"),
        "{line}"
    );
}

#[test]
fn an_operator_binary_gets_its_options() {
    let hello = hello();
    let version = env!("CARGO_PKG_VERSION");
    // The operator's own name and version, from its package (kopf::run!()).
    let out = Command::new(&hello)
        .arg("--version")
        .output()
        .expect("runs");
    assert_eq!(
        text(&out.stdout),
        format!("kopf-cli {version} (kopf-rs {version})\n")
    );
    let out = kopf()
        .arg("rbac")
        .arg(&hello)
        .args(["--name", "greeter", "--apply", "examples/crd.yaml"])
        .output()
        .expect("runs");
    let rbac = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        rbac.contains("name: greeter") && rbac.contains("- kopfexamples"),
        "{rbac}"
    );
    assert_eq!(text(&out.stderr), "", "a path given: nothing to say");
    // Without the CRD: what to do, for `rbac`.
    let line = refusal(&kopf().arg("rbac").arg(&hello).output().expect("runs"));
    assert!(
        line.contains(r#"no served resource matches "kopfexamples""#)
            && line.contains("`rbac --apply crd.yaml`")
            && line.contains("`rbac --cluster`"),
        "{line}"
    );
}

#[tokio::test]
async fn an_operator_runs_in_place_of_kopf() {
    let hello = hello();
    let mut op = OperatorRunner::command(env!("CARGO_BIN_EXE_kopf"))
        .current_dir(root())
        .arg("run")
        .args(["--fake", "--apply", "examples/crd.yaml", "--apply"])
        .arg("examples/obj.yaml")
        .arg(&hello)
        .arg("-v")
        .env_remove("RUST_LOG")
        .start()
        .expect("starts");
    op.wait_for_log("Handler 'hello_fn' succeeded", Duration::from_secs(30))
        .await
        .expect("the handler ran");
    assert!(
        op.has_logged("kubectl get kopfexamples"),
        "the banner names the resource: {}",
        op.logs()
    );
    // The operator is the process: the signal reaches it.
    op.signal(Signal::Term).await.expect("SIGTERM");
    let status = op.wait(Duration::from_secs(30)).await.expect("exits");
    assert!(status.success(), "{status}: {}", op.logs());
    assert!(op.has_logged("Stop requested"), "{}", op.logs());
}

#[test]
fn a_cargo_package_or_project_is_built_then_run() {
    // A package of the workspace, by name: built, checked, run. Its CRD comes from its
    // type (`Operator::crd::<Greeting>()`): `rbac` resolves it with no `--apply`.
    let out = kopf().args(["rbac", "my-operator"]).output().expect("runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rbac = text(&out.stdout);
    assert!(
        rbac.contains("- greetings") && rbac.contains("- greetings/status"),
        "{rbac}"
    );
    let stderr = text(&out.stderr);
    let running = stderr
        .lines()
        .find(|l| l.starts_with("kopf: running my-operator "))
        .unwrap_or_else(|| panic!("says what it runs: {stderr}"));
    let binary = PathBuf::from(running.split(" from ").nth(1).expect("a path"));
    assert!(binary.ends_with("my-operator"), "{running}");

    // Its CRD, from the binary that was built (and through the kopf command: the same).
    let crd = Command::new(&binary).arg("crd").output().expect("runs");
    let through_kopf = kopf().args(["crd", "my-operator"]).output().expect("runs");
    assert_eq!(
        text(&through_kopf.stdout),
        text(&crd.stdout),
        "{}",
        text(&through_kopf.stderr)
    );
    assert!(crd.status.success(), "{}", text(&crd.stderr));
    assert!(
        text(&crd.stdout).contains("name: greetings.example.com"),
        "{}",
        text(&crd.stdout)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let crd_path = dir.path().join("crd.yaml");
    std::fs::write(&crd_path, &crd.stdout).expect("write");

    // The project's directory, with the CRD given as a file (as for an operator that
    // declares none).
    let out = kopf()
        .args(["rbac", "examples/my-operator", "--apply"])
        .arg(&crd_path)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), rbac, "the same rules");
    assert!(
        text(&out.stderr).contains("kopf: running my-operator "),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freeze_peers_and_resume_write_kopfs_entries() {
    let server = kopf_testing::FakeApiServer::start().await.expect("start");
    server
        .apply_yaml("peering.yaml", kopf::peering::PEERING_YAML)
        .expect("the peering resources");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let run = |args: &[&str]| {
        let out = kopf()
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .expect("runs");
        assert!(out.status.success(), "kopf {args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let said = run(&[
        "freeze",
        "-P",
        "default",
        "-A",
        "-t",
        "600",
        "-p",
        "200",
        "-i",
        "ops@laptop",
    ]);
    assert!(
        said.contains("below priority 200") && said.contains("600 s"),
        "{said}"
    );
    let entry = server
        .objects()
        .into_iter()
        .find(|o| o["kind"] == "ClusterKopfPeering")
        .expect("the peering object")["status"]["ops@laptop"]
        .clone();
    assert_eq!(
        (entry["priority"].clone(), entry["lifetime"].clone()),
        (200.into(), 600.into())
    );
    let freeze = server
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH" && r.body.contains("ops@laptop"))
        .expect("the freeze's PATCH");
    assert!(
        freeze
            .body
            .starts_with(r#"{"status":{"ops@laptop":{"priority":200,"lifetime":600,"lastseen":""#),
        "{}",
        freeze.body
    );

    let table = run(&["peers"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("IDENTITY") && lines[0].contains("STATE"),
        "{table}"
    );
    assert!(
        lines.len() == 2 && lines[1].starts_with("ops@laptop") && lines[1].ends_with("alive"),
        "{table}"
    );

    let said = run(&["resume", "-P", "default", "-i", "ops@laptop"]);
    assert!(said.contains("removed"), "{said}");
    assert_eq!(
        run(&["peers"]).lines().count(),
        1,
        "only the header is left"
    );
}
