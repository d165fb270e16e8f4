//! A cluster for end-to-end tests of operator binaries: a new kind cluster, the fake API
//! server as a separate process (`kopf fake-apiserver`), the cluster of the current
//! kubeconfig context, or (feature `testcontainers`) a container serving the API (see
//! `ContainerCluster`); with a kubeconfig file for the operators, a `kubectl` helper and a
//! kube client.
//!
//! ```no_run
//! use kopf_testing::{Cluster, ClusterKind};
//! # async fn demo() -> Result<(), kopf_testing::ClusterError> {
//! let cluster = Cluster::builder(ClusterKind::Fake)
//!     .kopf_binary("target/debug/kopf")
//!     .start()
//!     .await?;
//! cluster.apply_file("examples/crd.yaml").await?;
//! let names = cluster.kubectl(["get", "namespaces", "-o", "name"]).await?;
//! assert!(names.contains("namespace/default"));
//! cluster.teardown().await?;
//! # Ok(()) }
//! ```
//!
//! Every kubectl call gets `--kubeconfig` and a `--cache-dir` of the cluster's own, so that
//! discovery cached for another cluster (or another server version) is never used.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::e2e::runner::{OperatorRunner, RunnerError};

#[cfg(feature = "testcontainers")]
mod container;
#[cfg(feature = "testcontainers")]
pub use container::ContainerCluster;

/// Where kind's installation is explained.
pub const KIND_INSTALL_URL: &str = "https://kind.sigs.k8s.io/docs/user/quick-start/#installation";

/// How long one kubectl call may take.
const KUBECTL_TIMEOUT: Duration = Duration::from_secs(60);

/// Which cluster to run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClusterKind {
    /// A new cluster made with the kind CLI (needs `kind` and Docker or Podman), deleted at
    /// teardown.
    Kind,
    /// `kopf fake-apiserver` as a child process (needs the `kopf` binary).
    Fake,
    /// The cluster of the current kubeconfig context (`KUBECONFIG` or `~/.kube/config`).
    Current,
    /// A container serving the API, started with testcontainers (feature `testcontainers`,
    /// a Docker engine): see `Cluster::container`.
    Container,
}

impl ClusterKind {
    /// The name on command lines: `kind`, `fake`, `current`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterKind::Kind => "kind",
            ClusterKind::Fake => "fake",
            ClusterKind::Current => "current",
            ClusterKind::Container => "container",
        }
    }
}

impl fmt::Display for ClusterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ClusterKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "kind" => Ok(ClusterKind::Kind),
            "fake" => Ok(ClusterKind::Fake),
            "current" => Ok(ClusterKind::Current),
            "container" => Ok(ClusterKind::Container),
            other => Err(format!(
                "unknown cluster kind {other:?} (expected kind, fake, current or container)"
            )),
        }
    }
}

/// Errors of [`Cluster`].
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A program the cluster kind needs is not on the PATH.
    #[error("{tool} is not installed ({hint})")]
    Missing {
        /// The program.
        tool: String,
        /// How to get it, or what to do instead.
        hint: String,
    },
    /// Docker or Podman is installed, but does not answer.
    #[error("{runtime} is installed but not usable: {detail}")]
    ContainerRuntime {
        /// `docker` or `podman`.
        runtime: String,
        /// What it said, and what to do.
        detail: String,
    },
    /// A command could not be started.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line (without the kubeconfig and cache flags).
        command: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line (without the kubeconfig and cache flags).
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr (and stdout, when stderr is empty).
        stderr: String,
    },
    /// A command took too long (it was killed).
    #[error("`{command}` did not finish within {timeout:?}")]
    Timeout {
        /// The command line.
        command: String,
        /// How long it had.
        timeout: Duration,
    },
    /// The current kubeconfig context is missing or its cluster does not answer.
    #[error("the cluster of the current kubeconfig context is not usable: {detail}")]
    Unreachable {
        /// What went wrong.
        detail: String,
    },
    /// The fake API server process did not start.
    #[error("the fake API server (`kopf fake-apiserver`) did not start: {0}")]
    Fake(#[source] RunnerError),
    /// The container of a container cluster could not be started, read or removed.
    #[error("the cluster's container ({image}): {detail}")]
    Container {
        /// The image (or the container's id).
        image: String,
        /// What went wrong.
        detail: String,
    },
    /// No kube client could be made from the cluster's kubeconfig.
    #[error("no kube client for the kubeconfig {kubeconfig}: {detail}")]
    Client {
        /// The kubeconfig file.
        kubeconfig: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// A file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Finds an executable file named `name` in a PATH-like list of directories.
pub fn find_program(name: &str, search_path: &OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(search_path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The programs a cluster kind needs, found on the search path.
#[derive(Debug, Clone)]
pub struct Tools {
    /// `kubectl`.
    pub kubectl: PathBuf,
    /// `kind` (kind clusters only).
    pub kind: Option<PathBuf>,
    /// `docker` or `podman` (kind clusters only).
    pub container_runtime: Option<PathBuf>,
}

/// Options of a cluster; [`start`](Self::start) makes it.
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    kind: ClusterKind,
    kopf_binary: Option<PathBuf>,
    search_path: Option<OsString>,
    name: Option<String>,
    kind_wait: Duration,
    simulate_pods: bool,
    #[cfg(feature = "testcontainers")]
    container: Option<ContainerCluster>,
}

impl ClusterBuilder {
    /// The `kopf` binary (crate `kopf-cli`) for the fake cluster (default: `kopf` on the
    /// search path).
    pub fn kopf_binary(mut self, path: impl AsRef<Path>) -> Self {
        self.kopf_binary = Some(path.as_ref().to_owned());
        self
    }

    /// Where to look for kubectl, kind, docker, podman and kopf (default: `$PATH`).
    pub fn search_path(mut self, path: impl AsRef<OsStr>) -> Self {
        self.search_path = Some(path.as_ref().to_owned());
        self
    }

    /// The kind cluster's name (default: `kopf-e2e-` and a random suffix).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How long `kind create cluster` waits for the control plane (default 120 s).
    pub fn kind_wait(mut self, wait: Duration) -> Self {
        self.kind_wait = wait;
        self
    }

    /// The fake cluster simulates Pods (`kopf fake-apiserver --simulate-pods`: they run, and
    /// containers' `echo` scripts print into their logs). Other kinds have their kubelets.
    pub fn simulate_pods(mut self) -> Self {
        self.simulate_pods = true;
        self
    }

    fn search_path_value(&self) -> OsString {
        self.search_path
            .clone()
            .or_else(|| std::env::var_os("PATH"))
            .unwrap_or_default()
    }

    fn find(&self, name: &str) -> Option<PathBuf> {
        find_program(name, &self.search_path_value())
    }

    /// Checks that the programs this cluster kind needs are installed (and, for kind, that
    /// Docker or Podman answers), without starting anything: fails fast with a clear
    /// message. [`start`](Self::start) does this first.
    pub async fn check_tools(&self) -> Result<Tools, ClusterError> {
        let mut tools = Tools {
            kubectl: PathBuf::new(),
            kind: None,
            container_runtime: None,
        };
        if self.kind == ClusterKind::Kind {
            let kind = self.find("kind").ok_or_else(|| ClusterError::Missing {
                tool: "kind".into(),
                hint: format!(
                    "no `kind` on the PATH; install it: {KIND_INSTALL_URL}; or use the fake API server instead (`--cluster fake`), which runs the same scenarios without a container runtime"
                ),
            })?;
            let runtime = self
                .find("docker")
                .or_else(|| self.find("podman"))
                .ok_or_else(|| ClusterError::Missing {
                    tool: "Docker".into(),
                    hint: "kind runs its nodes in containers and found neither `docker` nor `podman` on the PATH; install one (https://docs.docker.com/engine/install/), or use the fake API server instead (`--cluster fake`)".into(),
                })?;
            check_container_runtime(&runtime).await?;
            tools.kind = Some(kind);
            tools.container_runtime = Some(runtime);
        }
        tools.kubectl = self.find("kubectl").ok_or_else(|| ClusterError::Missing {
            tool: "kubectl".into(),
            hint: "no `kubectl` on the PATH; install it: https://kubernetes.io/docs/tasks/tools/"
                .into(),
        })?;
        Ok(tools)
    }

    /// Starts (or connects to) the cluster and writes its kubeconfig into a new temporary
    /// directory.
    pub async fn start(self) -> Result<Cluster, ClusterError> {
        let tools = self.check_tools().await?;
        let dir = std::env::temp_dir().join(format!("kopf-e2e-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(dir.join("cache")).map_err(|source| ClusterError::Io {
            what: format!("creating {}", dir.display()),
            source,
        })?;
        let mut cluster = Cluster {
            kind: self.kind,
            kubeconfig: dir.join("kubeconfig"),
            cache_dir: dir.join("cache"),
            dir,
            kubectl: tools.kubectl.clone(),
            backend: Backend::Current,
            description: String::new(),
            torn_down: false,
        };
        // On failure, `cluster` is dropped: the directory goes, a fake server is killed.
        match self.kind {
            ClusterKind::Fake => self.start_fake(&mut cluster).await?,
            ClusterKind::Kind => self.start_kind(&mut cluster, &tools).await?,
            ClusterKind::Current => self.connect_current(&mut cluster).await?,
            ClusterKind::Container => self.start_container(&mut cluster).await?,
        }
        tracing::info!(cluster = %cluster.description, kubeconfig = %cluster.kubeconfig.display(), "cluster ready");
        Ok(cluster)
    }

    async fn start_fake(&self, cluster: &mut Cluster) -> Result<(), ClusterError> {
        let kopf = match &self.kopf_binary {
            Some(p) => p.clone(),
            None => self.find("kopf").ok_or_else(|| ClusterError::Missing {
                tool: "kopf".into(),
                hint: "the fake cluster runs `kopf fake-apiserver`: build it with `cargo build -p kopf-cli` and pass target/debug/kopf as the kopf binary".into(),
            })?,
        };
        if !kopf.is_file() {
            return Err(ClusterError::Missing {
                tool: "kopf".into(),
                hint: format!(
                    "no file {}; the fake cluster runs `kopf fake-apiserver`: build it with `cargo build -p kopf-cli`",
                    kopf.display()
                ),
            });
        }
        let mut command = OperatorRunner::command(&kopf)
            .args(["fake-apiserver", "--port", "0", "--kubeconfig"])
            .arg(&cluster.kubeconfig)
            .name("fake-apiserver");
        if self.simulate_pods {
            command = command.arg("--simulate-pods");
        }
        let mut server = command.start().map_err(ClusterError::Fake)?;
        const LISTENING: &str = "listening on http://";
        server
            .wait_for_log(LISTENING, Duration::from_secs(30))
            .await
            .map_err(ClusterError::Fake)?;
        let url = server
            .lines()
            .iter()
            .find_map(|l| {
                l.split_once("listening on ")
                    .map(|(_, u)| u.trim().to_string())
            })
            .unwrap_or_default();
        cluster.description = format!("the fake API server at {url} (pid {})", server.pid());
        cluster.backend = Backend::Fake(Box::new(server));
        Ok(())
    }

    #[cfg(not(feature = "testcontainers"))]
    async fn start_container(&self, _cluster: &mut Cluster) -> Result<(), ClusterError> {
        Err(ClusterError::Missing {
            tool: "the `testcontainers` feature of kopf-testing".into(),
            hint: "a container cluster needs it, and a Docker engine: enable it in Cargo.toml"
                .into(),
        })
    }

    async fn start_kind(&self, cluster: &mut Cluster, tools: &Tools) -> Result<(), ClusterError> {
        let Some(kind) = tools.kind.clone() else {
            return Err(ClusterError::Missing {
                tool: "kind".into(),
                hint: KIND_INSTALL_URL.into(),
            });
        };
        let podman = tools
            .container_runtime
            .as_ref()
            .and_then(|p| p.file_name())
            .is_some_and(|n| n == "podman");
        let name = self.name.clone().unwrap_or_else(|| {
            let id = uuid::Uuid::new_v4().simple().to_string();
            format!("kopf-e2e-{}", &id[..8])
        });
        let mut create = Command::new(&kind);
        create
            .args(["create", "cluster", "--name", &name, "--kubeconfig"])
            .arg(&cluster.kubeconfig)
            .arg("--wait")
            .arg(format!("{}s", self.kind_wait.as_secs()));
        if podman {
            create.env("KIND_EXPERIMENTAL_PROVIDER", "podman");
        }
        // Set before creating: a half-created cluster is deleted at teardown too.
        cluster.backend = Backend::Kind {
            kind: kind.clone(),
            name: name.clone(),
            podman,
        };
        cluster.description = format!("the kind cluster {name}");
        tracing::info!(cluster = %name, "creating a kind cluster");
        let timeout = self.kind_wait + Duration::from_secs(300);
        if let Err(e) = run(
            create,
            &format!("kind create cluster --name {name}"),
            None,
            timeout,
        )
        .await
        {
            cluster.delete_kind().await;
            cluster.torn_down = true;
            return Err(e);
        }
        Ok(())
    }

    async fn connect_current(&self, cluster: &mut Cluster) -> Result<(), ClusterError> {
        // One self-contained file with the current context only (KUBECONFIG may list
        // several files); it holds credentials: readable by the owner only.
        let mut view = Command::new(&cluster.kubectl);
        view.args(["config", "view", "--raw", "--flatten", "--minify"]);
        let config = run(view, "kubectl config view --raw --flatten --minify", None, KUBECTL_TIMEOUT)
            .await
            .map_err(|e| ClusterError::Unreachable {
                detail: format!(
                    "no current context in KUBECONFIG or ~/.kube/config ({e}); set one with `kubectl config use-context`, or use the fake API server instead (`--cluster fake`)"
                ),
            })?;
        write_private(&cluster.kubeconfig, &config)?;
        let context = cluster
            .kubectl(["config", "current-context"])
            .await
            .map(|c| c.trim().to_string())
            .map_err(|e| ClusterError::Unreachable {
                detail: e.to_string(),
            })?;
        let unreachable = |e: ClusterError| ClusterError::Unreachable {
            detail: format!("context {context}: {e}"),
        };
        cluster
            .kubectl(["version", "-o", "json"])
            .await
            .map_err(unreachable)?;
        cluster
            .kubectl(["get", "namespaces", "-o", "name"])
            .await
            .map_err(unreachable)?;
        cluster.description = format!("the current context {context}");
        Ok(())
    }
}

/// Checks that `docker info` (or `podman info`) answers.
async fn check_container_runtime(runtime: &Path) -> Result<(), ClusterError> {
    let name = runtime
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "docker".into());
    let mut info = Command::new(runtime);
    info.args(["info", "--format", "{{.ServerVersion}}"]);
    match run(info, &format!("{name} info"), None, Duration::from_secs(30)).await {
        Ok(_) => Ok(()),
        Err(e) => Err(ClusterError::ContainerRuntime {
            runtime: name,
            detail: format!(
                "{e}; start its daemon (or check the permissions of its socket), or use the fake API server instead (`--cluster fake`)"
            ),
        }),
    }
}

fn write_private(path: &Path, text: &str) -> Result<(), ClusterError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|source| ClusterError::Io {
            what: format!("writing {}", path.display()),
            source,
        })
}

/// Runs a command to its end (killed after `timeout`); its stdout, or an error with stderr.
async fn run(
    mut cmd: Command,
    display: &str,
    input: Option<&str>,
    timeout: Duration,
) -> Result<String, ClusterError> {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|source| ClusterError::Spawn {
        command: display.into(),
        source,
    })?;
    let stdin = child.stdin.take();
    let write = async move {
        if let (Some(mut stdin), Some(text)) = (stdin, input) {
            // A failed write shows as the command's own error (it stopped reading).
            let _ = stdin.write_all(text.as_bytes()).await;
        }
    };
    let (_, output) = tokio::time::timeout(timeout, async {
        tokio::join!(write, child.wait_with_output())
    })
    .await
    .map_err(|_| ClusterError::Timeout {
        command: display.into(),
        timeout,
    })?;
    let output = output.map_err(|source| ClusterError::Spawn {
        command: display.into(),
        source,
    })?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    Err(ClusterError::Command {
        command: display.into(),
        status: output.status.to_string(),
        stderr: if stderr.is_empty() {
            stdout.trim().to_string()
        } else {
            stderr
        },
    })
}

enum Backend {
    Fake(Box<OperatorRunner>),
    Kind {
        kind: PathBuf,
        name: String,
        podman: bool,
    },
    Current,
    #[cfg(feature = "testcontainers")]
    Container(Box<container::Running>),
}

/// A running cluster (or a connection to one). [`teardown`](Self::teardown) stops or
/// deletes what was started; dropping it without a teardown kills a fake server and starts
/// the deletion of a kind cluster without waiting for it.
pub struct Cluster {
    kind: ClusterKind,
    dir: PathBuf,
    kubeconfig: PathBuf,
    cache_dir: PathBuf,
    kubectl: PathBuf,
    backend: Backend,
    description: String,
    torn_down: bool,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("kind", &self.kind)
            .field("description", &self.description)
            .field("kubeconfig", &self.kubeconfig)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Options for a cluster of this kind.
    pub fn builder(kind: ClusterKind) -> ClusterBuilder {
        ClusterBuilder {
            kind,
            kopf_binary: None,
            search_path: None,
            name: None,
            kind_wait: Duration::from_secs(120),
            simulate_pods: false,
            #[cfg(feature = "testcontainers")]
            container: None,
        }
    }

    /// Starts a cluster of this kind with the default options (`kopf` from the PATH for
    /// the fake one).
    pub async fn start(kind: ClusterKind) -> Result<Self, ClusterError> {
        Self::builder(kind).start().await
    }

    /// A kube client for the cluster, from its kubeconfig.
    pub async fn client(&self) -> Result<kube::Client, ClusterError> {
        let failed = |detail: String| ClusterError::Client {
            kubeconfig: self.kubeconfig.clone(),
            detail,
        };
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .map_err(|e| failed(e.to_string()))?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| failed(e.to_string()))?;
        kube::Client::try_from(config).map_err(|e| failed(e.to_string()))
    }

    /// Which kind of cluster this is.
    pub fn kind(&self) -> ClusterKind {
        self.kind
    }

    /// What it is, for messages: "the fake API server at http://127.0.0.1:PORT (pid N)",
    /// "the kind cluster NAME", "the current context NAME".
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The kubeconfig file of the cluster (give it to operators as `KUBECONFIG`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The fake API server's process (its request log is in its output), for a fake cluster.
    pub fn fake_server(&self) -> Option<&OperatorRunner> {
        match &self.backend {
            Backend::Fake(server) => Some(server),
            _ => None,
        }
    }

    /// A kubectl command for this cluster (`--kubeconfig`, `--cache-dir` set), to run as
    /// the caller likes.
    pub fn kubectl_command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache_dir)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig);
        cmd
    }

    /// Runs kubectl with these arguments; its stdout, or an error with its stderr.
    pub async fn kubectl<I, S>(&self, args: I) -> Result<String, ClusterError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.kubectl_input(args, None).await
    }

    /// Runs kubectl with `input` on its stdin (e.g. `apply -f -`).
    pub async fn kubectl_with_input<I, S>(
        &self,
        args: I,
        input: &str,
    ) -> Result<String, ClusterError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.kubectl_input(args, Some(input)).await
    }

    async fn kubectl_input<I, S>(
        &self,
        args: I,
        input: Option<&str>,
    ) -> Result<String, ClusterError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let display = std::iter::once("kubectl".to_string())
            .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect::<Vec<_>>()
            .join(" ");
        run(
            self.kubectl_command(&args),
            &display,
            input,
            KUBECTL_TIMEOUT,
        )
        .await
    }

    /// `kubectl apply -f FILE`.
    pub async fn apply_file(&self, path: impl AsRef<Path>) -> Result<String, ClusterError> {
        let path = path.as_ref();
        self.kubectl([OsStr::new("apply"), OsStr::new("-f"), path.as_os_str()])
            .await
    }

    /// `kubectl apply -f -` with this YAML or JSON.
    pub async fn apply_yaml(&self, yaml: &str) -> Result<String, ClusterError> {
        self.kubectl_with_input(["apply", "-f", "-"], yaml).await
    }

    /// Stops the fake server or deletes the kind cluster, and removes the temporary files.
    pub async fn teardown(mut self) -> Result<(), ClusterError> {
        self.torn_down = true;
        let result = match &mut self.backend {
            Backend::Fake(server) => match server.stop(Duration::from_secs(10)).await {
                Ok(_) => Ok(()),
                Err(e) => Err(ClusterError::Fake(e)),
            },
            Backend::Kind { kind, name, podman } => {
                let mut delete = Command::new(&*kind);
                delete
                    .args(["delete", "cluster", "--name", name.as_str(), "--kubeconfig"])
                    .arg(&self.kubeconfig);
                if *podman {
                    delete.env("KIND_EXPERIMENTAL_PROVIDER", "podman");
                }
                let display = format!("kind delete cluster --name {name}");
                run(delete, &display, None, Duration::from_secs(300))
                    .await
                    .map(|_| ())
            }
            Backend::Current => Ok(()),
            #[cfg(feature = "testcontainers")]
            Backend::Container(_) => match std::mem::replace(&mut self.backend, Backend::Current) {
                Backend::Container(running) => running.remove().await,
                _ => Ok(()),
            },
        };
        let _ = std::fs::remove_dir_all(&self.dir);
        result
    }

    async fn delete_kind(&self) {
        if let Backend::Kind { kind, name, podman } = &self.backend {
            let mut delete = Command::new(kind);
            delete.args(["delete", "cluster", "--name", name.as_str()]);
            if *podman {
                delete.env("KIND_EXPERIMENTAL_PROVIDER", "podman");
            }
            if let Err(e) = run(
                delete,
                "kind delete cluster",
                None,
                Duration::from_secs(300),
            )
            .await
            {
                tracing::warn!(cluster = %name, error = %e, "cannot delete the kind cluster");
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if self.torn_down {
            return;
        }
        if let Backend::Kind { kind, name, podman } = &self.backend {
            // No runtime to wait on here: start the deletion and let it run on its own.
            let mut delete = std::process::Command::new(kind);
            delete
                .args(["delete", "cluster", "--name", name.as_str()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            if *podman {
                delete.env("KIND_EXPERIMENTAL_PROVIDER", "podman");
            }
            match delete.spawn() {
                Ok(_) => {
                    tracing::warn!(cluster = %name, "the cluster was not torn down; deleting it in the background")
                }
                Err(e) => {
                    tracing::warn!(cluster = %name, error = %e, "the cluster was not torn down and cannot be deleted; run `kind delete cluster --name {name}`")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_path() -> (PathBuf, OsString) {
        let dir =
            std::env::temp_dir().join(format!("kopf-empty-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.clone().into_os_string();
        (dir, path)
    }

    #[tokio::test]
    async fn kind_without_kind_on_the_path_fails_at_once_with_a_clear_message() {
        let (dir, path) = empty_path();
        let started = std::time::Instant::now();
        let err = Cluster::builder(ClusterKind::Kind)
            .search_path(&path)
            .start()
            .await
            .expect_err("no kind");
        let _ = std::fs::remove_dir_all(dir);
        assert!(matches!(err, ClusterError::Missing { .. }), "{err}");
        let text = err.to_string();
        assert!(text.starts_with("kind is not installed"), "{text}");
        assert!(text.contains(KIND_INSTALL_URL), "{text}");
        assert!(text.contains("--cluster fake"), "{text}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn kind_without_a_container_runtime_says_so() {
        let (dir, path) = empty_path();
        let kind = dir.join("kind");
        std::fs::write(&kind, "#!/bin/sh\nexit 0\n").expect("fake kind");
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&kind, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let err = Cluster::builder(ClusterKind::Kind)
            .search_path(&path)
            .check_tools()
            .await
            .expect_err("no docker");
        let _ = std::fs::remove_dir_all(dir);
        assert!(
            err.to_string().starts_with("Docker is not installed"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn the_fake_cluster_needs_the_kopf_binary() {
        let err = Cluster::builder(ClusterKind::Fake)
            .kopf_binary("/nonexistent/kopf")
            .start()
            .await
            .expect_err("no kopf");
        // Without kubectl on this machine, that is reported first; either is clear.
        let text = err.to_string();
        assert!(
            text.starts_with("kopf is not installed (no file /nonexistent/kopf;")
                || text.starts_with("kubectl is not installed"),
            "{text}"
        );
    }

    #[cfg(not(feature = "testcontainers"))]
    #[tokio::test]
    async fn a_container_cluster_needs_the_testcontainers_feature() {
        let err = Cluster::start(ClusterKind::Container)
            .await
            .expect_err("no feature");
        // Without kubectl on this machine, that is reported first; either is clear.
        let text = err.to_string();
        assert!(
            text.starts_with("the `testcontainers` feature of kopf-testing is not installed")
                || text.starts_with("kubectl is not installed"),
            "{text}"
        );
    }

    #[test]
    fn cluster_kinds_parse_and_print() {
        for kind in [
            ClusterKind::Kind,
            ClusterKind::Fake,
            ClusterKind::Current,
            ClusterKind::Container,
        ] {
            assert_eq!(kind.to_string().parse::<ClusterKind>(), Ok(kind));
        }
        assert!("docker".parse::<ClusterKind>().is_err());
    }
}
