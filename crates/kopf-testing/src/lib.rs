#![warn(missing_docs)]
//! # kopf-testing
//!
//! An in-memory Kubernetes API server that real clients accept — kubectl, kube-rs
//! (`Api`, `watcher`, discovery), the Python `kubernetes` client, Python Kopf — served over
//! plain HTTP or HTTPS ([`FakeApiServerBuilder::tls`]) on loopback. Use it to test operators without a cluster, or run it standalone
//! with `kopf fake-apiserver`.
//!
//! It keeps one global resourceVersion, a bounded change history (watches resume from any
//! retained RV, older ones get `410 Expired`), list pagination, label/field selectors,
//! bookmarks, status subresources, generation, finalizers and deletion, namespaces,
//! CustomResourceDefinitions that register endpoints, discovery and OpenAPI v3, garbage
//! collection by ownerReferences, and the four patch types. It logs and counts every
//! request and can inject faults.
//!
//! It calls admission webhooks (`MutatingWebhookConfiguration`,
//! `ValidatingWebhookConfiguration`) and CRD conversion webhooks over HTTPS, verified
//! against their `caBundle`, as kube-apiserver does — see the `admission` and `conversion`
//! notes below and [`webhook`]. Every call is recorded ([`FakeApiServer::webhook_calls`]).
//! Webhooks given as `clientConfig.service` are reached through
//! [`FakeApiServerBuilder::webhook_service`].
//!
//! **Admission.** On create, update, patch and delete (subresources included) the webhooks
//! whose rules, `matchPolicy`, `namespaceSelector` and `objectSelector` match are called:
//! mutating ones in order (by configuration name, then list order) with their JSON patches
//! applied, then schema defaulting and validation, then validating ones in parallel, then
//! storage; nothing is stored when one rejects. Denials and failures (`failurePolicy`) answer
//! as kube-apiserver does; webhook warnings become `Warning` headers; dry runs send
//! `dryRun: true`. The state is not locked while webhooks run; a write that finds the object
//! changed afterwards starts over (PATCH) or gets 409 (PUT with a resourceVersion). Not
//! implemented: `reinvocationPolicy: IfNeeded`, `matchConditions` (CEL), CONNECT, the
//! `/scale` subresource, and deletions the server makes itself (garbage collection,
//! namespace/CRD cleanup) or writes through [`FakeApiServer::apply_object`], which bypass
//! admission.
//!
//! **Conversion.** CRDs with `spec.conversion.strategy: Webhook` store objects in the
//! storage version and convert them by webhook (`ConversionReview` v1) for reads (get, list
//! and watch, one review per list), for writes through other versions and for admission
//! webhooks that match another version; `strategy: None` only rewrites `apiVersion`.
//!
//! ```no_run
//! use kopf_testing::FakeApiServer;
//! use kube::api::{Api, PostParams};
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let server = FakeApiServer::start().await?;
//! let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("c1".into());
//! cms.create(&PostParams::default(), &cm).await?;
//! assert_eq!(server.counters().get("create", "configmaps", ""), 1);
//! server.shutdown().await;
//! # Ok(()) }
//! ```

pub mod apiserver;
mod builder;
#[cfg(feature = "runners")]
pub mod e2e;
mod in_process;

// The module paths from before the split into `apiserver` and `e2e`, kept for users.
pub use apiserver::http as server;
pub use apiserver::managed_fields as managed;
pub use apiserver::semantics as state;
pub use apiserver::semantics::events;
pub use apiserver::storage as store;
pub use apiserver::tables as table;
pub use apiserver::webhooks::client as webhook;
pub use apiserver::{catalog, control, discovery, error, patch, protobuf, schema, selectors};
pub use builder::FakeApiServerBuilder;
#[cfg(feature = "runners")]
pub use e2e::{cluster, runner};

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use apiserver::control::{
    CONTROL_PREFIX, Counters, FaultRule, LatencyRule, RequestPattern, RequestRecord,
};
pub use apiserver::http::{OpenWatch, Settings, VersionInfo};
pub use apiserver::simulation::PodSimulation;
pub use apiserver::webhooks::{ServiceRef, WebhookCall, WebhookOutcome};
#[cfg(feature = "testcontainers")]
pub use e2e::cluster::ContainerCluster;
#[cfg(feature = "runners")]
pub use e2e::cluster::{Cluster, ClusterBuilder, ClusterError, ClusterKind};
#[cfg(feature = "runners")]
pub use e2e::runner::{OperatorRunner, RunnerBuilder, RunnerError, Signal};

use apiserver::http::Shared;
use apiserver::semantics::{PatchType, WriteOptions};
use apiserver::sync::lock;
use apiserver::tls::ServingTls;

/// Errors of the fake API server's Rust API.
#[derive(Debug, thiserror::Error)]
pub enum FakeError {
    /// Binding or serving failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Building a kube client failed.
    #[error("cannot build a kube client for {url}: {reason}")]
    Client {
        /// The server URL.
        url: String,
        /// The cause.
        reason: String,
    },
    /// The serving certificates of [`FakeApiServerBuilder::tls`] could not be made.
    #[error(transparent)]
    Tls(#[from] apiserver::tls::TlsError),
    /// Writing the kubeconfig failed.
    #[error("cannot write the kubeconfig to {path}: {source}")]
    Kubeconfig {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A manifest could not be read, parsed or stored.
    #[error("manifest {source_name}, document {document}: {reason}")]
    Manifest {
        /// The file (or `<inline>`).
        source_name: String,
        /// The 1-based document index.
        document: usize,
        /// What went wrong (the server's answer).
        reason: String,
    },
}

/// An in-memory Kubernetes API server on 127.0.0.1. Stops on drop or [`shutdown`](Self::shutdown).
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kopf_testing::{FakeApiServer, FaultRule, RequestPattern};
/// use kube::api::{Api, PostParams};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let server = FakeApiServer::start().await?;           // a random port on 127.0.0.1
/// let configmaps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
///
/// // The next create of a configmap fails with a 503, as a struggling API server would.
/// server.inject_fault(FaultRule::new(
///     RequestPattern::any().verb("create").resource("configmaps"),
///     503,
///     1,
/// ));
/// let cm: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}}))?;
/// assert!(configmaps.create(&PostParams::default(), &cm).await.is_err());
/// configmaps.create(&PostParams::default(), &cm).await?;
///
/// // Every request is logged and counted.
/// assert_eq!(server.counters().get("create", "configmaps", ""), 2);
/// server.write_kubeconfig("/tmp/kopf-doc-kubeconfig")?;   // for kubectl, Python...
/// # Ok(())
/// # }
/// # tokio::runtime::Runtime::new().expect("runtime").block_on(demo()).expect("demo");
/// ```
pub struct FakeApiServer {
    shared: Arc<Shared>,
    tls: Option<ServingTls>,
    addr: SocketAddr,
    in_process: bool,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl FakeApiServer {
    /// Options for a server.
    pub fn builder() -> FakeApiServerBuilder {
        FakeApiServerBuilder {
            port: 0,
            tls: false,
            settings: Settings::default(),
            pods: None,
        }
    }

    /// Starts a server on a random port with default settings.
    pub async fn start() -> Result<Self, FakeError> {
        Self::builder().start().await
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://127.0.0.1:PORT` (`https://` with [`FakeApiServerBuilder::tls`]).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The CA certificate (PEM) that signed the serving certificate, when serving HTTPS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(ServingTls::ca_pem)
    }

    /// The same CA certificate, DER (for `kube::Config::root_cert`).
    pub fn ca_der(&self) -> Option<&[u8]> {
        self.tls.as_ref().map(|t| t.ca_der().as_ref())
    }

    /// A kube client for this server (with kube's own retries off: every answer, an injected
    /// fault too, reaches the caller); in process for a server started
    /// [`in_process`](Self::in_process).
    pub fn client(&self) -> kube::Client {
        // Building a client for a loopback URL cannot fail; fall back loudly if it ever does.
        match self.try_client() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "building a kube client failed");
                unreachable!("a kube client for a loopback URL must build: {e}")
            }
        }
    }

    /// A kube client for this server, reporting failures.
    pub fn try_client(&self) -> Result<kube::Client, FakeError> {
        if self.in_process {
            return Ok(self.client_in_process());
        }
        let url = self.url();
        let uri: axum::http::Uri =
            url.parse()
                .map_err(|e: axum::http::uri::InvalidUri| FakeError::Client {
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
        let mut config = kube::Config::new(uri);
        config.root_cert = self.tls.as_ref().map(|t| vec![t.ca_der().to_vec()]);
        // Every answer reaches the caller: a test that injects a 503 sees the 503 (kube's
        // default would retry it silently).
        config.default_retry = false;
        kube::Client::try_from(config).map_err(|e| FakeError::Client {
            url,
            reason: e.to_string(),
        })
    }

    /// The kubeconfig YAML for this server (context `fake`, namespace `default`; with TLS,
    /// the CA as `certificate-authority-data`).
    pub fn kubeconfig(&self) -> String {
        use base64::Engine;
        let ca = self.ca_pem().map_or(String::new(), |pem| {
            let data = base64::engine::general_purpose::STANDARD.encode(pem);
            format!("\n    certificate-authority-data: {data}")
        });
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}{ca}\nusers:\n- name: fake\n  user:\n    token: fake-token\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\npreferences: {{}}\n",
            url = self.url()
        )
    }

    /// Writes the kubeconfig to a file.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<(), FakeError> {
        let path = path.as_ref();
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(|source| FakeError::Kubeconfig {
                path: path.display().to_string(),
                source,
            })?;
        }
        std::fs::write(path, self.kubeconfig()).map_err(|source| FakeError::Kubeconfig {
            path: path.display().to_string(),
            source,
        })
    }

    /// Stores the objects of a multi-document YAML (or JSON) text: CRDs first, then the
    /// rest; existing objects are merge-patched. Returns the number of objects applied.
    pub fn apply_yaml(&self, source_name: &str, text: &str) -> Result<usize, FakeError> {
        let docs: Vec<Value> =
            serde_saphyr::from_multiple::<Value>(text).map_err(|e| FakeError::Manifest {
                source_name: source_name.into(),
                document: 0,
                reason: format!("not valid YAML: {e}"),
            })?;
        let mut indexed: Vec<(usize, Value)> = Vec::new();
        for (i, doc) in docs.into_iter().enumerate() {
            if doc.is_null() {
                continue;
            }
            if doc.get("kind").and_then(Value::as_str) == Some("List") {
                for item in doc
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
                {
                    indexed.push((i + 1, item));
                }
            } else {
                indexed.push((i + 1, doc));
            }
        }
        indexed.sort_by_key(|(_, d)| {
            d.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition")
        });
        let count = indexed.len();
        for (doc_no, doc) in indexed {
            self.apply_object(doc)
                .map_err(|reason| FakeError::Manifest {
                    source_name: source_name.into(),
                    document: doc_no,
                    reason,
                })?;
        }
        Ok(count)
    }

    /// Reads and applies a manifest file (see [`apply_yaml`](Self::apply_yaml)).
    pub fn apply_file(&self, path: impl AsRef<Path>) -> Result<usize, FakeError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| FakeError::Manifest {
            source_name: path.display().to_string(),
            document: 0,
            reason: format!("cannot read the file: {e}"),
        })?;
        self.apply_yaml(&path.display().to_string(), &text)
    }

    /// Creates or merge-patches one object given as JSON.
    pub fn apply_object(&self, obj: Value) -> Result<Value, String> {
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .ok_or("apiVersion is missing")?
            .to_string();
        let kind = obj
            .get("kind")
            .and_then(Value::as_str)
            .ok_or("kind is missing")?
            .to_string();
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), api_version.clone()),
        };
        let mut state = lock(&self.shared.state);
        let def = state
            .defs()
            .into_iter()
            .find(|d| d.group == group && d.version == version && d.kind == kind)
            .cloned()
            .ok_or_else(|| {
                format!("no resource of kind {kind} is served in {api_version} (is its CRD applied first?)")
            })?;
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{kind}: metadata.name is missing"))?
            .to_string();
        let ns = if def.namespaced {
            Some(
                obj.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default")
                    .to_string(),
            )
        } else {
            None
        };
        let opts = WriteOptions {
            field_manager: Some("kopf-fake-apply".into()),
            ..Default::default()
        };
        let result = match state.get(&def, ns.as_deref(), &name) {
            Ok(_) => state.patch(
                &def,
                ns.as_deref(),
                &name,
                None,
                PatchType::Merge,
                obj.to_string().as_bytes(),
                &opts,
            ),
            Err(_) => state.create(&def, ns.as_deref(), obj, &opts),
        };
        drop(state);
        self.shared.schedule_establish();
        result.map(|w| w.body.into_value()).map_err(|e| e.message)
    }

    /// The request log, in arrival order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.intro).log.clone()
    }

    /// Clears the request log.
    pub fn clear_requests(&self) {
        lock(&self.shared.intro).log.clear();
    }

    /// The request counters.
    pub fn counters(&self) -> Counters {
        lock(&self.shared.intro).counters.clone()
    }

    /// Resets the request counters.
    pub fn reset_counters(&self) {
        lock(&self.shared.intro).counters = Counters::default();
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        lock(&self.shared.state).store.rv()
    }

    /// The open watch streams.
    pub fn watches(&self) -> Vec<OpenWatch> {
        lock(&self.shared.intro).watches.clone()
    }

    /// A snapshot of every stored object.
    pub fn objects(&self) -> Vec<Value> {
        let state = lock(&self.shared.state);
        state
            .store
            .resources()
            .iter()
            .flat_map(|r| state.store.list(r, None))
            .map(|(_, o)| (*o).clone())
            .collect()
    }

    /// Fails matching requests with an error status (see [`FaultRule`]): the next `count`
    /// requests that match the pattern get the code (and a `Retry-After` if the rule has one)
    /// instead of being served.
    ///
    /// ```
    /// # use kopf_testing::{FaultRule, RequestPattern};
    /// # fn demo(server: &kopf_testing::FakeApiServer) {
    /// // One 500 on the next PATCH of any object's status.
    /// server.inject_fault(FaultRule::new(RequestPattern::any().verb("patch").subresource("status"), 500, 1));
    /// // Two 429s, come back after 1 s, on listing pods.
    /// server.inject_fault(FaultRule::new(RequestPattern::any().verb("list").resource("pods"), 429, 2).retry_after(1));
    /// # }
    /// ```
    ///
    /// # Panics
    ///
    /// When the rule's code is not an HTTP error status (400–599, see [`FaultRule::check`]):
    /// a test asking for an impossible answer is a mistake in the test.
    pub fn inject_fault(&self, rule: FaultRule) {
        if let Err(e) = rule.check() {
            panic!("inject_fault: {e}");
        }
        lock(&self.shared.faults).responses.push(rule);
    }

    /// Delays matching requests.
    pub fn add_latency(&self, pattern: RequestPattern, delay: Duration) {
        lock(&self.shared.faults).latency.push(LatencyRule {
            pattern,
            millis: delay.as_millis() as u64,
        });
    }

    /// Delays every watch event by `delay`.
    pub fn set_watch_event_delay(&self, delay: Duration) {
        lock(&self.shared.faults).watch_event_delay = delay;
    }

    /// The next watch of `resource` (plural; None = any) gets a 410 ERROR event and closes.
    pub fn expire_next_watch(&self, resource: Option<&str>) {
        lock(&self.shared.faults)
            .expire_next_watch
            .push(resource.map(str::to_string));
    }

    /// Forgets the change history up to `upto` (None = the current RV): older RVs get 410.
    pub fn compact_history(&self, upto: Option<u64>) {
        lock(&self.shared.state).store.compact(upto);
    }

    /// Ends open watch streams cleanly (of one resource plural, or all).
    pub fn close_watches(&self, resource: Option<&str>) {
        let _ = self.shared.close_tx.send(resource.map(str::to_string));
    }

    /// Appends lines to a container's log, as the simulated kubelet would have them from the
    /// container: `GET .../pods/{pod}/log?container=...` serves them (stamped with the
    /// time they were appended), and follow streams get them at once.
    ///
    /// ```
    /// # async fn f() -> Result<(), kopf_testing::FakeError> {
    /// let server = kopf_testing::FakeApiServer::start().await?;
    /// server.append_log("default", "trainer-0", "main", &["epoch 1", "accuracy=0.93"]);
    /// # Ok(()) }
    /// ```
    pub fn append_log(&self, namespace: &str, pod: &str, container: &str, lines: &[&str]) {
        let key = (
            namespace.to_string(),
            pod.to_string(),
            container.to_string(),
        );
        self.shared.kubelet.append(&key, lines);
    }

    /// Restarts a container of a Pod: a new instance with an empty log (the old one is
    /// served with `previous=true`), the Pod's `status.containerStatuses` with the new
    /// `restartCount` (a watch event), and the follow streams of the old instance end.
    /// Returns the new restart count.
    pub fn restart_container(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<u32, String> {
        let key = (
            namespace.to_string(),
            pod.to_string(),
            container.to_string(),
        );
        // The status first, then the old instance's streams end (a client that reads the
        // Pod when its stream ends sees the new container).
        let restart = self.shared.kubelet.restart_count(&key) + 1;
        let mut state = lock(&self.shared.state);
        let def = state.find("", "v1", "pods").ok_or("pods are not served")?;
        let current = state
            .get(&def, Some(namespace), pod)
            .map_err(|e| e.message)?;
        let now = apiserver::semantics::now();
        let kubelet = &self.shared.kubelet;
        let others = |name: &str| {
            let key = (namespace.to_string(), pod.to_string(), name.to_string());
            u64::from(kubelet.restart_count(&key))
        };
        let statuses = apiserver::simulation::stages::restarted_statuses(
            &current,
            container,
            u64::from(restart),
            &now,
            &others,
        );
        let patch =
            serde_json::json!({"status": {"phase": "Running", "containerStatuses": statuses}});
        state
            .patch(
                &def,
                Some(namespace),
                pod,
                Some("status"),
                PatchType::Merge,
                patch.to_string().as_bytes(),
                &WriteOptions::default(),
            )
            .map_err(|e| e.message)?;
        drop(state);
        Ok(self.shared.kubelet.restart(&key))
    }

    /// A container exits (as after its command ended): its follow streams end, and new ones
    /// send its lines and end at once, until [`restart_container`](Self::restart_container).
    pub fn terminate_container(&self, namespace: &str, pod: &str, container: &str) {
        let key = (
            namespace.to_string(),
            pod.to_string(),
            container.to_string(),
        );
        self.shared.kubelet.terminate(&key);
    }

    /// Ends every open follow stream of container logs cleanly, while the containers keep
    /// running (as a kubelet's log rotation or a proxy's timeout does): clients must
    /// reconnect, and not see lines twice.
    pub fn drop_log_streams(&self) {
        self.shared.kubelet.drop_streams();
    }

    /// Removes every fault, delay and pending expiry.
    pub fn clear_faults(&self) {
        *lock(&self.shared.faults) = apiserver::control::Faults::default();
    }

    /// Every admission and conversion webhook call so far, in order (see [`WebhookCall`]).
    pub fn webhook_calls(&self) -> Vec<WebhookCall> {
        lock(&self.shared.webhooks.calls).clone()
    }

    /// Forgets the recorded webhook calls.
    pub fn clear_webhook_calls(&self) {
        lock(&self.shared.webhooks.calls).clear();
    }

    /// Maps a webhook service to an address at run time (see
    /// [`FakeApiServerBuilder::webhook_service`]); `None` removes the mapping.
    pub fn set_webhook_service(
        &self,
        namespace: &str,
        name: &str,
        port: u16,
        address: Option<&str>,
    ) {
        let key = ServiceRef::new(namespace, name, port);
        let mut settings = lock(&self.shared.settings);
        match address {
            Some(a) => {
                settings.webhook_services.insert(key, a.to_string());
            }
            None => {
                settings.webhook_services.remove(&key);
            }
        }
    }

    /// Changes the reported version at run time.
    pub fn set_version(&self, major: &str, minor: &str) {
        lock(&self.shared.settings).version = VersionInfo {
            major: major.into(),
            minor: minor.into(),
            git_version: format!("v{major}.{minor}.0"),
        };
    }

    /// Stops serving and waits for the server task to end.
    pub async fn shutdown(mut self) {
        self.stop_now();
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }

    fn stop_now(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if self.in_process {
            self.end_watches();
        }
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.stop_now();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
