//! A cluster in a container, started with testcontainers (feature `testcontainers`): the
//! project's fake API server packaged in an image (built locally, no registry needed), or
//! k3s for users with a registry. It is a [`Cluster`] like the others: a kubeconfig, the
//! `kubectl` helper, [`Cluster::client`], [`Cluster::teardown`] (which removes the
//! container; dropping the cluster removes it too).
//!
//! ```no_run
//! use kopf_testing::{Cluster, ContainerCluster};
//! # async fn demo() -> Result<(), kopf_testing::ClusterError> {
//! // An image whose entrypoint is a kopf-rs binary (an operator's, or `kopf`): it has the
//! // `fake-apiserver` command. `cargo xtask image` builds `kopf-rs-kopf:latest`.
//! let cluster = Cluster::container(ContainerCluster::fake_apiserver("kopf-rs-kopf:latest")).await?;
//! cluster.apply_file("examples/crd.yaml").await?;
//! let client = cluster.client().await?;
//! # let _ = client;
//! cluster.teardown().await?;
//! # Ok(()) }
//! ```
//!
//! The fake API server's container runs on the host network: the server listens on
//! 127.0.0.1 only, on a free port it picks and prints (`listening on http://...`), which the
//! kubeconfig then names. k3s runs privileged with its port 6443 published on a free host
//! port; its kubeconfig is read from the container (not tried on the machine this was
//! written on: no registry there).

use std::time::Duration;

use testcontainers::core::{ContainerPort, ExecCommand, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use super::{Backend, Cluster, ClusterBuilder, ClusterError, ClusterKind, write_private};

/// What the fake API server prints once it serves.
const LISTENING: &str = "listening on http://";
/// What k3s logs when its node is ready for workloads.
const K3S_READY: &str = "Node controller sync successful";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Flavor {
    FakeApiServer,
    K3s,
}

/// Which container serves the cluster's API; given to
/// [`Cluster::container`](crate::Cluster::container).
#[derive(Debug, Clone)]
pub struct ContainerCluster {
    name: String,
    tag: String,
    flavor: Flavor,
    args: Vec<String>,
    startup_timeout: Duration,
}

impl ContainerCluster {
    /// A kopf-rs binary's `fake-apiserver` command in the image `image` (`NAME[:TAG]`,
    /// `latest` by default), whose entrypoint is the binary (as `deploy/Dockerfile` makes
    /// it). Used as it is locally; pulled only when absent.
    pub fn fake_apiserver(image: &str) -> Self {
        let (name, tag) = split_image(image);
        Self {
            name,
            tag,
            flavor: Flavor::FakeApiServer,
            args: Vec::new(),
            startup_timeout: Duration::from_secs(60),
        }
    }

    /// k3s (`rancher/k3s:TAG`, e.g. `v1.33.1-k3s1`): a real Kubernetes API server, pulled
    /// from the registry when absent. Runs privileged.
    pub fn k3s(tag: &str) -> Self {
        Self {
            name: "rancher/k3s".into(),
            tag: tag.into(),
            flavor: Flavor::K3s,
            args: Vec::new(),
            startup_timeout: Duration::from_secs(180),
        }
    }

    /// More arguments for the server (after `fake-apiserver --port 0`, or `server ...` for
    /// k3s), e.g. `["--kube-version", "1.33"]`.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// How long the server may take to serve (default 60 s, 180 s for k3s).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// The image, as `NAME:TAG`.
    pub fn image(&self) -> String {
        format!("{}:{}", self.name, self.tag)
    }

    fn failed(&self, what: &str, e: impl std::fmt::Display) -> ClusterError {
        ClusterError::Container {
            image: self.image(),
            detail: format!("{what}: {e}"),
        }
    }

    /// Starts the container; the kubeconfig (YAML) for its API and the container.
    pub(crate) async fn start(&self) -> Result<(String, Running), ClusterError> {
        match self.flavor {
            Flavor::FakeApiServer => self.start_fake().await,
            Flavor::K3s => self.start_k3s().await,
        }
    }

    async fn start_fake(&self) -> Result<(String, Running), ClusterError> {
        let mut cmd = vec!["fake-apiserver".to_string(), "--port".into(), "0".into()];
        cmd.extend(self.args.iter().cloned());
        let container = GenericImage::new(self.name.as_str(), self.tag.as_str())
            .with_wait_for(WaitFor::message_on_stdout(LISTENING))
            .with_network("host")
            .with_cmd(cmd)
            .with_startup_timeout(self.startup_timeout)
            .start()
            .await
            .map_err(|e| {
                self.failed(
                    "starting the container (is the Docker engine running? is the image built?)",
                    e,
                )
            })?;
        let stdout = container
            .stdout_to_vec()
            .await
            .map_err(|e| self.failed("reading its output", e))?;
        let stdout = String::from_utf8_lossy(&stdout);
        let url = stdout
            .lines()
            .find_map(|l| l.split_once("listening on ").map(|(_, u)| u.trim()))
            .ok_or_else(|| self.failed("no URL in its output", stdout.trim()))?;
        let description = format!(
            "the fake API server at {url} in a container of {}",
            self.image()
        );
        Ok((kubeconfig(url), Running::new(container, description)))
    }

    async fn start_k3s(&self) -> Result<(String, Running), ClusterError> {
        let mut cmd = vec![
            "server".to_string(),
            "--disable=traefik,metrics-server".into(),
            "--tls-san=127.0.0.1".into(),
        ];
        cmd.extend(self.args.iter().cloned());
        let container = GenericImage::new(self.name.as_str(), self.tag.as_str())
            .with_exposed_port(ContainerPort::Tcp(6443))
            .with_wait_for(WaitFor::message_on_stderr(K3S_READY))
            .with_privileged(true)
            .with_cmd(cmd)
            .with_startup_timeout(self.startup_timeout)
            .start()
            .await
            .map_err(|e| self.failed("starting the container", e))?;
        let port = container
            .get_host_port_ipv4(ContainerPort::Tcp(6443))
            .await
            .map_err(|e| self.failed("its published API port", e))?;
        let mut cat = container
            .exec(ExecCommand::new(["cat", "/etc/rancher/k3s/k3s.yaml"]))
            .await
            .map_err(|e| self.failed("reading its kubeconfig", e))?;
        let text = cat
            .stdout_to_vec()
            .await
            .map_err(|e| self.failed("reading its kubeconfig", e))?;
        let text = String::from_utf8_lossy(&text).replace(
            "https://127.0.0.1:6443",
            &format!("https://127.0.0.1:{port}"),
        );
        let description = format!(
            "k3s at https://127.0.0.1:{port} in a container of {}",
            self.image()
        );
        Ok((text, Running::new(container, description)))
    }
}

impl ClusterBuilder {
    /// The container of a [`ClusterKind::Container`] cluster.
    pub fn container(mut self, container: ContainerCluster) -> Self {
        self.container = Some(container);
        self
    }

    pub(super) async fn start_container(&self, cluster: &mut Cluster) -> Result<(), ClusterError> {
        let spec = self
            .container
            .as_ref()
            .ok_or_else(|| ClusterError::Missing {
                tool: "a container image".into(),
                hint: "give one with `ClusterBuilder::container` or use `Cluster::container`"
                    .into(),
            })?;
        let (kubeconfig, running) = spec.start().await?;
        cluster.description = running.description.clone();
        // Set first: on a failure below, the dropped cluster removes the container.
        cluster.backend = Backend::Container(Box::new(running));
        write_private(&cluster.kubeconfig, &kubeconfig)
    }
}

impl Cluster {
    /// Starts a cluster in a container (the fake API server's image, or k3s) and writes its
    /// kubeconfig; kubectl must be on the PATH, as for the other kinds.
    pub async fn container(container: ContainerCluster) -> Result<Cluster, ClusterError> {
        Cluster::builder(ClusterKind::Container)
            .container(container)
            .start()
            .await
    }
}

/// `NAME[:TAG]` split (a registry's `host:port/` prefix is part of the name).
fn split_image(image: &str) -> (String, String) {
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name.into(), tag.into()),
        _ => (image.into(), "latest".into()),
    }
}

/// The kubeconfig of the fake API server at `url` (as `kopf fake-apiserver` writes it).
fn kubeconfig(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\nusers:\n- name: fake\n  user:\n    token: fake-token\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\npreferences: {{}}\n"
    )
}

/// A running container of a cluster.
pub(crate) struct Running {
    container: ContainerAsync<GenericImage>,
    pub(crate) description: String,
}

impl Running {
    fn new(container: ContainerAsync<GenericImage>, description: String) -> Self {
        Self {
            container,
            description,
        }
    }

    /// Stops and removes the container.
    pub(crate) async fn remove(self) -> Result<(), ClusterError> {
        let id = self.container.id().to_string();
        self.container
            .rm()
            .await
            .map_err(|e| ClusterError::Container {
                image: id,
                detail: format!("removing the container: {e}"),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_split_into_name_and_tag() {
        let split = |s| {
            let (n, t) = split_image(s);
            format!("{n} {t}")
        };
        assert_eq!(split("kopf-rs-kopf:dev"), "kopf-rs-kopf dev");
        assert_eq!(split("kopf-rs-kopf"), "kopf-rs-kopf latest");
        assert_eq!(split("localhost:5000/kopf"), "localhost:5000/kopf latest");
        assert_eq!(split("localhost:5000/kopf:1"), "localhost:5000/kopf 1");
        assert_eq!(
            ContainerCluster::k3s("v1.33.1-k3s1").image(),
            "rancher/k3s:v1.33.1-k3s1"
        );
    }

    #[test]
    fn the_kubeconfig_names_the_url() {
        let text = kubeconfig("http://127.0.0.1:41234");
        let parsed = kube::config::Kubeconfig::from_yaml(&text).expect("yaml");
        assert_eq!(
            parsed.clusters[0]
                .cluster
                .as_ref()
                .and_then(|c| c.server.as_deref()),
            Some("http://127.0.0.1:41234")
        );
    }
}
