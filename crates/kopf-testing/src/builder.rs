//! The builder of [`FakeApiServer`]: its options, and the start (the listener, the HTTP
//! or HTTPS serving task, the bootstrap endpoints, the pod simulator).

use super::*;

/// Options for starting a server.
#[derive(Debug, Clone)]
pub struct FakeApiServerBuilder {
    pub(crate) port: u16,
    pub(crate) tls: bool,
    pub(crate) settings: Settings,
    pub(crate) pods: Option<PodSimulation>,
}

impl FakeApiServerBuilder {
    /// The TCP port on 127.0.0.1 (0 = any free port; the default).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Serve HTTPS (true) as kube-apiserver does, with a CA generated at start (see
    /// [`FakeApiServer::ca_pem`]; the kubeconfig and [`FakeApiServer::client`] trust it), or
    /// plain HTTP (false, the default).
    pub fn tls(mut self, on: bool) -> Self {
        self.tls = on;
        self
    }

    /// The version reported by `/version` (the minor selects kubectl's version).
    pub fn version(mut self, major: &str, minor: &str) -> Self {
        self.settings.version = VersionInfo {
            major: major.into(),
            minor: minor.into(),
            git_version: format!("v{major}.{minor}.0"),
        };
        self
    }

    /// How many changes are retained for watches and consistent lists.
    pub fn history_limit(mut self, n: usize) -> Self {
        self.settings.history_limit = n;
        self
    }

    /// Interval between watch bookmarks.
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.settings.bookmark_interval = d;
        self
    }

    /// Watch duration when clients give no `timeoutSeconds`.
    pub fn default_watch_timeout(mut self, d: Duration) -> Self {
        self.settings.default_watch_timeout = Some(d);
        self
    }

    /// Delay between CRD creation and its `Established` condition.
    pub fn crd_establish_delay(mut self, d: Duration) -> Self {
        self.settings.crd_establish_delay = d;
        self
    }

    /// The longest a deleted, scheduled Pod stays Terminating before the simulated kubelet
    /// confirms it (default 1 s; the Pod's own grace period applies when shorter).
    pub fn pod_termination_cap(mut self, d: Duration) -> Self {
        self.settings.pod_termination_cap = d;
        self
    }

    /// Simulates the scheduler and the kubelets for Pods (off by default): new Pods are
    /// bound to a simulated Node, then become `Running` and ready; Jobs' Pods end
    /// `Succeeded`; deleted Pods' containers stop. See [`PodSimulation`] for the stages and
    /// their delays.
    ///
    /// ```
    /// # async fn f() -> Result<(), kopf_testing::FakeError> {
    /// use kopf_testing::{FakeApiServer, PodSimulation};
    /// let server = FakeApiServer::builder()
    ///     .simulate_pods(PodSimulation::default())
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn simulate_pods(mut self, simulation: PodSimulation) -> Self {
        self.pods = Some(simulation);
        self
    }

    /// Serve aggregated discovery (true, the default) or only legacy documents.
    pub fn aggregated_discovery(mut self, on: bool) -> Self {
        self.settings.aggregated_discovery = on;
        self
    }

    /// Honour KEP-5866 `shardSelector` on lists and watches (true, the default, as
    /// Kubernetes 1.36 with the `ShardedListAndWatch` feature gate), or ignore it as older
    /// servers do (false): every object is sent and lists carry no `metadata.shardInfo`.
    pub fn sharded_list_and_watch(mut self, on: bool) -> Self {
        self.settings.sharded_list_and_watch = on;
        self
    }

    /// Where a webhook's `clientConfig.service` (`namespace`/`name`, `port`, 443 by default)
    /// is reached: `address` is `host:port`, e.g. a test webhook server on 127.0.0.1. The
    /// fake has no service network: calls to unmapped services fail as unreachable. The
    /// server's certificate must be valid for `<name>.<namespace>.svc`.
    pub fn webhook_service(
        mut self,
        namespace: &str,
        name: &str,
        port: u16,
        address: impl Into<String>,
    ) -> Self {
        self.settings
            .webhook_services
            .insert(ServiceRef::new(namespace, name, port), address.into());
        self
    }

    /// Starts the server.
    pub async fn start(self) -> Result<FakeApiServer, FakeError> {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| FakeError::Bind {
                addr: addr.to_string(),
                source,
            })?;
        let local = listener.local_addr().map_err(|source| FakeError::Bind {
            addr: addr.to_string(),
            source,
        })?;
        let shared = Shared::new(self.settings);
        *lock(&shared.address) = local.to_string();
        lock(&shared.state).bootstrap_endpoints(&local.ip().to_string(), local.port());
        if let Some(pods) = self.pods {
            apiserver::simulation::spawn(&shared, pods);
        }
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let app = in_process::router(shared.clone());
        let close_tx = shared.close_tx.clone();
        let stopped = async move {
            let _ = stop_rx.await;
            // End open watch streams so the graceful shutdown can complete.
            let _ = close_tx.send(None);
        };
        let tls = self.tls.then(ServingTls::generate).transpose()?;
        let task = apiserver::tls::spawn_serving(listener, app, tls.as_ref(), stopped);
        let scheme = if tls.is_some() { "https" } else { "http" };
        tracing::info!(url = %format!("{scheme}://{local}"), "fake API server listening");
        Ok(FakeApiServer {
            shared,
            tls,
            addr: local,
            in_process: false,
            stop: Some(stop_tx),
            task: Some(task),
        })
    }
}
