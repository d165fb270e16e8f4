//! The webhook server: its settings ([`WebhookServer`]), its routes, and its life with the
//! operator ([`Admission::start`] → [`Running::stop`]).
//!
//! Routes (below the base path): `POST /<handler-id>` reviews with that handler,
//! `POST /` with every handler of the resource, `POST /convert/<crd>` converts objects of a
//! CRD, `GET /healthz` answers `ok`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kopf_core::handler::Extensions;
use kopf_watch::Discovered;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::conversion::{Converter, convert};
use crate::handlers::WebhookHandler;
use crate::managed::{self, ClientConfig, Endpoint, ManagedError};
use crate::review::Reviewer;
use crate::tls::{CertSource, Tls, TlsError, TlsSettings};

/// The default port of the webhook server (Kubernetes' customary webhook port).
pub const DEFAULT_PORT: u16 = 9443;

/// Settings of the webhook server, with defaults for local development: all interfaces,
/// port 9443, a self-signed certificate for `localhost`/`127.0.0.1`, URLs
/// `https://localhost:9443/<handler-id>`.
///
/// ```
/// use kopf_admission::WebhookServer;
///
/// let server = WebhookServer::new()
///     .port(8443)
///     .host("operator.example.svc")
///     .cert_files("/certs/tls.crt", "/certs/tls.key");
/// # let _ = server;
/// ```
#[derive(Debug, Clone)]
pub struct WebhookServer {
    /// The address to listen on (default: all interfaces).
    pub addr: IpAddr,
    /// The port (default 9443; 0 picks a free one).
    pub port: u16,
    /// The host name in the webhook URLs (default: `addr`, or `localhost` for all interfaces).
    pub host: Option<String>,
    /// The base path of every route (default: none).
    pub path: String,
    /// A PEM certificate and key (reloaded when they change); None generates a CA and a
    /// certificate signed by it at start.
    pub cert: Option<(PathBuf, PathBuf)>,
    /// A PEM CA bundle for `caBundle` (default: the certificate file itself, or the
    /// generated CA).
    pub ca: Option<PathBuf>,
    /// More subject alternative names for the generated certificate.
    pub extra_sans: Vec<String>,
    /// Reach the server through this Service (`namespace`, `name`, `port`) instead of a URL.
    pub service: Option<(String, String, u16)>,
    /// Writes the CA bundle (PEM) to this file, e.g. for `curl --cacert`.
    pub cadump: Option<PathBuf>,
    /// How often the certificate files are checked for changes.
    pub check_interval: Duration,
}

impl Default for WebhookServer {
    fn default() -> Self {
        WebhookServer {
            addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: DEFAULT_PORT,
            host: None,
            path: String::new(),
            cert: None,
            ca: None,
            extra_sans: Vec::new(),
            service: None,
            cadump: None,
            check_interval: Duration::from_secs(10),
        }
    }
}

impl WebhookServer {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Listens on this address.
    pub fn addr(mut self, addr: IpAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Listens on this port (0: any free one).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// The host name the API server uses in the URLs (also a SAN of the generated
    /// certificate).
    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    /// The base path of the routes.
    pub fn path(mut self, path: impl Into<String>) -> Self {
        let p: String = path.into();
        self.path = format!("/{}", p.trim_matches('/'))
            .trim_end_matches('/')
            .to_string();
        self
    }

    /// Serves this certificate and key (PEM files, reloaded when they change).
    pub fn cert_files(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert = Some((cert.into(), key.into()));
        self
    }

    /// The CA bundle file for `caBundle`.
    pub fn ca_file(mut self, ca: impl Into<PathBuf>) -> Self {
        self.ca = Some(ca.into());
        self
    }

    /// Adds a subject alternative name to the generated certificate.
    pub fn extra_san(mut self, san: impl Into<String>) -> Self {
        self.extra_sans.push(san.into());
        self
    }

    /// The API server reaches the webhooks through a Service.
    pub fn service(mut self, namespace: &str, name: &str, port: u16) -> Self {
        self.service = Some((namespace.into(), name.into(), port));
        self
    }

    /// Writes the CA bundle to a file.
    pub fn cadump(mut self, path: impl Into<PathBuf>) -> Self {
        self.cadump = Some(path.into());
        self
    }

    fn url_host(&self) -> String {
        match &self.host {
            Some(h) => h.clone(),
            None if self.addr.is_unspecified() => "localhost".into(),
            None => self.addr.to_string(),
        }
    }

    fn tls_settings(&self) -> TlsSettings {
        let source = match &self.cert {
            Some((cert, key)) => CertSource::Files {
                cert: cert.clone(),
                key: key.clone(),
                ca: self.ca.clone(),
            },
            None => {
                let mut sans = vec![self.url_host()];
                if !self.addr.is_unspecified() {
                    sans.push(self.addr.to_string());
                }
                if let Some((ns, name, _)) = &self.service {
                    sans.push(format!("{name}.{ns}.svc"));
                }
                sans.extend(self.extra_sans.iter().cloned());
                sans.dedup();
                CertSource::SelfSigned { sans }
            }
        };
        TlsSettings {
            source,
            check_interval: self.check_interval,
        }
    }

    fn client_config(&self, port: u16, ca: Vec<u8>) -> ClientConfig {
        let endpoint = match &self.service {
            Some((namespace, name, svc_port)) => Endpoint::Service {
                namespace: namespace.clone(),
                name: name.clone(),
                port: *svc_port,
                path: if self.path.is_empty() {
                    "/".into()
                } else {
                    self.path.clone()
                },
            },
            None => {
                let host = self.url_host();
                let host = if host.contains(':') && !host.starts_with('[') {
                    format!("[{host}]")
                } else {
                    host
                };
                Endpoint::Url(format!("https://{host}:{port}{}", self.path))
            }
        };
        ClientConfig {
            endpoint,
            ca_bundle: Some(ca),
        }
    }
}

/// What the operator configures: the server, and the name of the managed configurations.
#[derive(Debug, Clone, Default)]
pub struct AdmissionSettings {
    /// The server.
    pub server: WebhookServer,
    /// Create and keep patched the Validating/MutatingWebhookConfigurations of this name
    /// (and the CRDs' conversion stanzas); None leaves the cluster alone.
    pub managed: Option<String>,
}

/// Failures to start the webhooks.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A handler's resource is not served.
    #[error("the admission handler {id:?} is for {selector}, which is not served: {source}")]
    Resource {
        /// The handler id.
        id: String,
        /// Its selector.
        selector: String,
        /// Why.
        source: kopf_watch::WatchError,
    },
    /// Discovery failed.
    #[error("cannot discover the resources of the admission handlers: {0}")]
    Discovery(#[source] kopf_watch::WatchError),
    /// The certificate could not be loaded or generated.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The port is taken or not allowed.
    #[error(
        "cannot listen on {addr} for the webhooks: {source}; choose another --webhook-port (0 picks a free one)"
    )]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The managed configurations could not be written.
    #[error(transparent)]
    Managed(#[from] ManagedError),
    /// The CA bundle could not be written to the cadump file.
    #[error("cannot write the CA bundle to {path}: {source}")]
    Cadump {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

struct AppState {
    reviewer: Reviewer,
    converters: Vec<Converter>,
}

/// The webhook routes for a reviewer and converters (without TLS; for tests and custom
/// servers).
pub fn router(reviewer: Reviewer, converters: Vec<Converter>, base: &str) -> Router {
    let state = Arc::new(AppState {
        reviewer,
        converters,
    });
    let routes = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/convert/{crd}", post(conversion))
        .route("/", post(review_all))
        .route("/{*id}", post(review_one))
        .layer(DefaultBodyLimit::max(16 * 1024 * 1024))
        .with_state(state);
    if base.is_empty() || base == "/" {
        routes
    } else {
        Router::new().nest(base, routes)
    }
}

fn json(code: StatusCode, body: &impl serde::Serialize) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

fn bad_request(message: &str) -> Response {
    tracing::warn!("Rejected a webhook request: {message}");
    json(
        StatusCode::BAD_REQUEST,
        &serde_json::json!({"error": message}),
    )
}

async fn review_all(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    match state.reviewer.review(&body, None).await {
        Ok(review) => json(StatusCode::OK, &review),
        Err(e) => bad_request(&e.0),
    }
}

async fn review_one(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    match state.reviewer.review(&body, Some(&id)).await {
        Ok(review) => json(StatusCode::OK, &review),
        Err(e) => bad_request(&e.0),
    }
}

async fn conversion(
    State(state): State<Arc<AppState>>,
    Path(crd): Path<String>,
    body: Bytes,
) -> Response {
    match convert(&state.converters, &crd, &body) {
        Ok(review) => json(StatusCode::OK, &review),
        Err(e) => bad_request(&e.0),
    }
}

/// The webhooks of an operator, ready to start.
#[derive(Clone, Default)]
pub struct Admission {
    /// Where and how to serve.
    pub settings: AdmissionSettings,
    /// The admission handlers.
    pub handlers: Vec<WebhookHandler>,
    /// The CRD converters.
    pub converters: Vec<Converter>,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("settings", &self.settings)
            .field("handlers", &self.handlers)
            .field("converters", &self.converters)
            .finish()
    }
}

/// The serving webhook server.
pub struct Running {
    addr: SocketAddr,
    client_config: Arc<std::sync::Mutex<ClientConfig>>,
    reviewer: Reviewer,
    managed: Option<String>,
    client: kube::Client,
    stop: Option<oneshot::Sender<()>>,
    server: JoinHandle<()>,
    watcher: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").field("addr", &self.addr).finish()
    }
}

impl Admission {
    /// Whether there is anything to serve.
    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty() && self.converters.is_empty()
    }

    /// Resolves the handlers' resources, loads or generates the certificate, starts
    /// serving, and (with `managed`) creates and patches the webhook configurations and
    /// the converters' CRDs. `discovered` is what the API server serves.
    pub async fn start(
        self,
        client: kube::Client,
        discovered: &[Discovered],
        extensions: Extensions,
    ) -> Result<Running, SetupError> {
        let reviewer = Reviewer::new(resolve(self.handlers, discovered)?, extensions);
        let server = &self.settings.server;
        let tls = Tls::load(&server.tls_settings())?;
        let bind = SocketAddr::new(server.addr, server.port);
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|source| SetupError::Bind { addr: bind, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| SetupError::Bind { addr: bind, source })?;
        let ca = tls.ca_bundle();
        if let Some(path) = &server.cadump {
            std::fs::write(path, &ca).map_err(|source| SetupError::Cadump {
                path: path.clone(),
                source,
            })?;
        }
        let cc = server.client_config(addr.port(), ca);
        let routes = router(reviewer.clone(), self.converters.clone(), &server.path);
        let (stop, task) = spawn_serving(listener, tls.clone(), routes);
        tracing::info!(
            "Serving {} admission handler(s) and {} converter(s) at {}.",
            reviewer.handlers().len(),
            self.converters.len(),
            match &cc.endpoint {
                Endpoint::Url(u) => u.clone(),
                Endpoint::Service {
                    namespace, name, ..
                } => format!("service {namespace}/{name} (listening on {addr})"),
            }
        );
        let client_config = Arc::new(std::sync::Mutex::new(cc.clone()));
        let mut watcher = None;
        if let Some(name) = &self.settings.managed {
            managed::create(&client, &reviewer, name).await?;
            managed::patch(&client, &reviewer, &cc, name, false).await?;
            managed::patch_conversions(&client, &self.converters, &cc).await?;
            let managed = Managed {
                client: client.clone(),
                reviewer: reviewer.clone(),
                name: name.clone(),
                converters: self.converters.clone(),
                shared: client_config.clone(),
                settings: self.settings.server.clone(),
                port: addr.port(),
            };
            let changes = tls.subscribe();
            watcher = Some(tokio::spawn(managed.repatch_on_new_ca(tls, changes)));
        }
        Ok(Running {
            addr,
            client_config,
            reviewer,
            managed: self.settings.managed,
            client,
            stop: Some(stop),
            server: task,
            watcher,
        })
    }
}

/// Each handler with the served resources its selector resolves to.
fn resolve(
    handlers: Vec<WebhookHandler>,
    discovered: &[Discovered],
) -> Result<Vec<(WebhookHandler, Vec<Discovered>)>, SetupError> {
    let mut resolved = Vec::with_capacity(handlers.len());
    for h in handlers {
        let resources = h
            .selector
            .resolve(discovered)
            .map_err(|source| SetupError::Resource {
                id: h.id.clone(),
                selector: format!("{:?}", h.selector),
                source,
            })?;
        resolved.push((h, resources));
    }
    Ok(resolved)
}

/// Serves `routes` over TLS on `listener` in a task of its own, until the sender is used
/// or dropped.
fn spawn_serving(
    listener: tokio::net::TcpListener,
    tls: Tls,
    routes: Router,
) -> (oneshot::Sender<()>, JoinHandle<()>) {
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stop_rx.await;
        };
        if let Err(e) = crate::https::serve(listener, &tls, routes, shutdown).await {
            tracing::error!("The webhook server failed: {e}");
        }
    });
    (stop_tx, task)
}

/// What re-patching the managed webhook configurations and CRDs needs.
struct Managed {
    client: kube::Client,
    reviewer: Reviewer,
    name: String,
    converters: Vec<Converter>,
    /// The client configuration `Running` reports, updated with each new CA bundle.
    shared: Arc<std::sync::Mutex<ClientConfig>>,
    settings: WebhookServer,
    port: u16,
}

impl Managed {
    /// Re-patches when the certificate files bring a new CA bundle (`tls` is kept alive
    /// meanwhile: it watches the files).
    async fn repatch_on_new_ca(self, tls: Tls, mut changes: watch::Receiver<Vec<u8>>) {
        let _keep = tls;
        while changes.changed().await.is_ok() {
            let ca = changes.borrow_and_update().clone();
            let cc = self.settings.client_config(self.port, ca);
            if let Ok(mut shared) = self.shared.lock() {
                *shared = cc.clone();
            }
            tracing::info!("The webhook CA bundle changed: patching the configurations.");
            let patched = async {
                managed::patch(&self.client, &self.reviewer, &cc, &self.name, false).await?;
                managed::patch_conversions(&self.client, &self.converters, &cc).await
            };
            if let Err(e) = patched.await {
                tracing::error!("{e}");
            }
        }
    }
}

impl Running {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The client configuration of the managed entries (endpoint and CA bundle).
    pub fn client_config(&self) -> ClientConfig {
        self.client_config
            .lock()
            .map(|c| c.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Removes the non-persistent webhooks from the managed configurations, then stops
    /// the server (requests in flight finish).
    pub async fn stop(mut self) {
        if let Some(w) = self.watcher.take() {
            w.abort();
        }
        if let Some(name) = &self.managed {
            let cc = self.client_config();
            match managed::patch(&self.client, &self.reviewer, &cc, name, true).await {
                Ok(()) => tracing::info!("Removed the non-persistent webhooks from {name:?}."),
                Err(e) => tracing::warn!("Cannot remove the webhooks on exit: {e}"),
            }
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.server).await;
    }
}
