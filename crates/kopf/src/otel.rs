//! OpenTelemetry traces (the `otel` feature): the operator's processing cycles and handler
//! calls exported as spans over OTLP/HTTP (protobuf), configured by the standard `OTEL_*`
//! environment variables.
//!
//! Export is on when an endpoint is configured (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT`), unless `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none`. With no endpoint, no layer is installed: nothing is
//! exported and nothing is slowed. [`crate::logging::init`] does all this for `run`; the
//! functions here are for operators and tests that set up their own subscriber.
//!
//! The spans (see docs/observability.md):
//!
//! * `cycle` (the engine's per-object span, `object` in `tracing`): `namespace`, `name`,
//!   `kind`, `uid`, `resource`, then `reason` (`create`, `update`, `delete`, `resume`,
//!   `noop`...) and `outcome` (`done`, `pending` with `delay`, `failed`...);
//! * `handler`, a child of its cycle: `handler` (the id), `retry` (0 on the first
//!   attempt), `outcome` (`succeeded`, `failed-temporary` with `delay`,
//!   `failed-permanent`, `skipped`) and an error status with the error's message on
//!   failure. A handler's own spans are its children.
//!
//! The exporter's requests go through the workspace's hyper client with rustls (ring), on
//! a thread of their own (`kopf-otel`), so exporting never waits for the operator's
//! runtime, nor the operator for the collector.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
const TRACES_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT";
const TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
const TRACES_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE";
const CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CERTIFICATE";
/// Where spans go when no endpoint is configured (the specification's default).
const DEFAULT_URL: &str = "http://localhost:4318/v1/traces";
/// The OTLP exporter's default timeout of a request (the specification's 10 s).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why OpenTelemetry export could not be set up (the operator runs on without it).
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    /// A protocol other than `http/protobuf` was asked for.
    #[error(
        "{var}={value:?} is not supported: kopf-rs exports OTLP over HTTP (`http/protobuf`, usually port 4318)"
    )]
    Protocol {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// The CA certificates for an `https` endpoint cannot be loaded.
    #[error("cannot load the CA certificates for the OTLP endpoint{}: {source}", .path.as_deref().map(|p| format!(" from {p}")).unwrap_or_default())]
    Certificates {
        /// The file of `OTEL_EXPORTER_OTLP_(TRACES_)CERTIFICATE`, if given.
        path: Option<String>,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The TLS settings cannot be built.
    #[error("cannot configure TLS for the OTLP endpoint: {0}")]
    Tls(#[source] rustls::Error),
    /// The exporter's thread cannot start.
    #[error("cannot start the OTLP exporter's thread: {0}")]
    Thread(#[source] std::io::Error),
    /// The exporter refuses its configuration.
    #[error("cannot build the OTLP span exporter: {0}")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
}

/// What the environment says about trace export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Config {
    /// Export to this URL (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces`).
    Endpoint(String),
    /// No endpoint is configured: nothing is exported.
    NoEndpoint,
    /// Switched off by `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
    Disabled(&'static str),
}

impl Config {
    /// Reads the standard variables.
    ///
    /// ```
    /// // With no OTEL_* variables set, nothing is exported.
    /// # if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
    /// #     && std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none() {
    /// assert_eq!(kopf::otel::Config::from_env(), kopf::otel::Config::NoEndpoint);
    /// # }
    /// ```
    pub fn from_env() -> Config {
        Config::from_vars(|name| std::env::var(name).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Config {
        let set = |name: &str| {
            var(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Config::Disabled("OTEL_SDK_DISABLED=true");
        }
        if set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none")) {
            return Config::Disabled("OTEL_TRACES_EXPORTER=none");
        }
        match traces_url(&set) {
            Some(url) => Config::Endpoint(url),
            None => Config::NoEndpoint,
        }
    }
}

/// The URL spans are sent to, as the specification says: the traces endpoint as it is, or
/// the general one with `/v1/traces` added.
fn traces_url(set: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    set(TRACES_ENDPOINT)
        .or_else(|| set(ENDPOINT).map(|base| format!("{}/v1/traces", base.trim_end_matches('/'))))
}

/// Builds a tracer provider that exports over OTLP/HTTP as the `OTEL_*` variables say
/// (endpoint, headers, timeout, compression, sampler, batch sizes, resource attributes;
/// `service.name` defaults to the executable's name). Spans are batched and sent from
/// threads of the exporter's own.
///
/// ```no_run
/// use tracing_subscriber::layer::SubscriberExt;
///
/// # fn demo() -> Result<(), kopf::otel::OtelError> {
/// // SAFETY (of the example): set before any thread reads the environment.
/// unsafe { std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318") };
/// let provider = kopf::otel::provider_from_env()?;
/// let subscriber = tracing_subscriber::registry().with(kopf::otel::layer(&provider));
/// kopf::tracing::subscriber::with_default(subscriber, || { /* spans go to the collector */ });
/// provider.shutdown().ok();
/// # Ok(()) }
/// ```
pub fn provider_from_env() -> Result<SdkTracerProvider, OtelError> {
    provider_from_vars(&|name| std::env::var(name).ok())
}

/// [`provider_from_env`] with the variables `var` gives.
fn provider_from_vars(
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<SdkTracerProvider, OtelError> {
    let var = |name: &str| {
        var(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    for name in [TRACES_PROTOCOL, PROTOCOL] {
        if let Some(value) = var(name) {
            if value != "http/protobuf" {
                return Err(OtelError::Protocol { var: name, value });
            }
            break;
        }
    }
    let url = traces_url(&var).unwrap_or_else(|| DEFAULT_URL.to_string());
    let timeout = [TRACES_TIMEOUT, TIMEOUT]
        .into_iter()
        .find_map(|name| var(name)?.parse::<u64>().ok())
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
    let ca = var(TRACES_CERTIFICATE).or_else(|| var(CERTIFICATE));
    let client = Client::new(connector(url.starts_with("https:"), ca)?, timeout)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(timeout)
        .with_http_client(client)
        .build()
        .map_err(OtelError::Exporter)?;
    // The SDK reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; without a name in
    // either, the service is the executable.
    let mut resource = Resource::builder();
    if let Some(name) = var("OTEL_SERVICE_NAME") {
        resource = resource.with_service_name(name);
    } else if !var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name=")) {
        resource = resource.with_service_name(executable_name());
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

/// The name of the running executable (the default `service.name`).
fn executable_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "kopf-operator".to_string())
}

/// Keeps the engine's plain `object` log spans (single log lines, daemons' lifetimes, raw
/// event handlers) out of the export: of the `object` spans, only a cycle's (the one with
/// an `otel.name`, see kopf-watch's `cycle_span`) is a span worth a trace.
fn exported(meta: &tracing::Metadata<'_>) -> bool {
    !(meta.is_span() && meta.name() == "object" && meta.fields().field("otel.name").is_none())
}

/// The exporting layer of a subscriber: kopf's cycle and handler spans (and every other
/// span the subscriber records, e.g. the handlers' own) go to `provider`'s tracer.
///
/// ```
/// use opentelemetry_sdk::trace::SdkTracerProvider;
/// use tracing_subscriber::layer::SubscriberExt;
///
/// let provider = SdkTracerProvider::builder().build();
/// let subscriber = tracing_subscriber::registry().with(kopf::otel::layer(&provider));
/// kopf::tracing::subscriber::with_default(subscriber, || {
///     let _span = kopf::tracing::info_span!("work").entered();
/// });
/// ```
pub fn layer<S>(provider: &SdkTracerProvider) -> impl Layer<S> + use<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let filter = tracing_subscriber::filter::filter_fn(exported);
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("kopf"))
        // Only when exporting: no clock reads on every poll of every span, no thread names.
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_filter(filter)
}

/// An exporter that keeps the finished spans in memory, for tests: give it to a provider
/// (`SdkTracerProvider::builder().with_simple_exporter(collected.clone())`), the provider
/// to [`layer`], the layer to the operator (`OperatorTest::layer`), then read
/// [`spans`](Self::spans).
///
/// ```
/// use opentelemetry_sdk::trace::SdkTracerProvider;
/// use tracing_subscriber::layer::SubscriberExt;
///
/// let collected = kopf::otel::CollectedSpans::default();
/// let provider = SdkTracerProvider::builder().with_simple_exporter(collected.clone()).build();
/// let subscriber = tracing_subscriber::registry().with(kopf::otel::layer(&provider));
/// kopf::tracing::subscriber::with_default(subscriber, || {
///     let _span = kopf::tracing::info_span!("handler", handler = "create_fn").entered();
/// });
/// assert_eq!(collected.spans()[0].name, "handler");
/// ```
#[derive(Debug, Clone, Default)]
pub struct CollectedSpans(Arc<Mutex<Vec<opentelemetry_sdk::trace::SpanData>>>);

impl CollectedSpans {
    /// The spans finished so far, in the order they ended.
    pub fn spans(&self) -> Vec<opentelemetry_sdk::trace::SpanData> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl opentelemetry_sdk::trace::SpanExporter for CollectedSpans {
    fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> impl std::future::Future<Output = opentelemetry_sdk::error::OTelSdkResult> + Send {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(batch);
        std::future::ready(Ok(()))
    }
}

/// The provider of the operator's subscriber, for [`flush`] and [`shutdown`].
static INSTALLED: Mutex<Option<SdkTracerProvider>> = Mutex::new(None);

/// What [`from_env`] set up for the operator's subscriber.
pub(crate) struct Setup<L> {
    /// The exporting layer (None: nothing is exported).
    pub(crate) layer: Option<L>,
    /// Its provider, to [`install`] once the subscriber is in place.
    pub(crate) provider: Option<SdkTracerProvider>,
    /// The level of [`Self::note`]: INFO, or WARN when the setup failed.
    pub(crate) level: tracing::Level,
    /// The line that says whether spans are exported, and where.
    pub(crate) note: String,
}

/// Sets up export for the operator's subscriber ([`crate::logging::init`]): the layer when
/// an endpoint is configured, and the line to log about it once the subscriber is in place.
pub(crate) fn from_env<S>() -> Setup<impl Layer<S>>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    use tracing::Level;
    let off = |note: String| Setup {
        layer: None,
        provider: None,
        level: Level::INFO,
        note,
    };
    let endpoint = match Config::from_env() {
        Config::Endpoint(endpoint) => endpoint,
        Config::NoEndpoint => {
            return off(format!(
                "OpenTelemetry: no spans are exported ({TRACES_ENDPOINT} or {ENDPOINT} is not set)."
            ));
        }
        Config::Disabled(why) => {
            return off(format!("OpenTelemetry: no spans are exported ({why})."));
        }
    };
    match provider_from_env() {
        Ok(provider) => Setup {
            layer: Some(layer(&provider)),
            provider: Some(provider),
            level: Level::INFO,
            note: format!("OpenTelemetry: exporting spans to {endpoint} (OTLP/HTTP)."),
        },
        Err(error) => Setup {
            level: Level::WARN,
            ..off(format!("OpenTelemetry: {error}; no spans are exported."))
        },
    }
}

/// Makes `provider` the one [`flush`] and [`shutdown`] act on, and OpenTelemetry's global
/// one (for code that uses the `opentelemetry` API directly).
pub(crate) fn install(provider: Option<SdkTracerProvider>) {
    if let Some(provider) = provider {
        opentelemetry::global::set_tracer_provider(provider.clone());
        *INSTALLED.lock().unwrap_or_else(|e| e.into_inner()) = Some(provider);
    }
}

/// Waits (up to `wait`) until the spans ended so far are exported.
pub(crate) fn flush(wait: Duration) {
    let provider = INSTALLED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(provider) = provider {
        bounded(wait, move || {
            let _ = provider.force_flush();
        });
    }
}

/// Exports the spans ended so far (waiting up to `wait`) and stops the exporter: spans
/// that end later are not exported. The operator calls it when its run returns.
pub(crate) fn shutdown(wait: Duration) {
    let provider = INSTALLED.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(provider) = provider {
        bounded(wait, move || {
            let _ = provider.shutdown_with_timeout(wait);
        });
    }
}

/// Runs `f` on a thread of its own and waits for it up to `wait` (an unreachable collector
/// does not hold the operator's exit longer).
fn bounded(wait: Duration, f: impl FnOnce() + Send + 'static) {
    let (done, finished) = std::sync::mpsc::sync_channel::<()>(1);
    let spawned = std::thread::Builder::new()
        .name("kopf-otel-flush".into())
        .spawn(move || {
            f();
            let _ = done.send(());
        });
    if spawned.is_ok() {
        let _ = finished.recv_timeout(wait);
    }
}

type Connector = hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>;

/// The TLS (rustls with ring) or plain HTTP connector of the exporter: the CA file's
/// certificates if one is given, else the system's (required only for `https`).
fn connector(https: bool, ca: Option<String>) -> Result<Connector, OtelError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = |roots: rustls::RootCertStore| {
        rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map(|b| b.with_root_certificates(roots).with_no_client_auth())
            .map_err(OtelError::Tls)
    };
    let builder = hyper_rustls::HttpsConnectorBuilder::new();
    let builder = match ca {
        Some(path) => builder.with_tls_config(config(roots_from(&path)?)?),
        None => match builder.with_provider_and_native_roots(provider.clone()) {
            Ok(builder) => builder,
            Err(source) if https => {
                return Err(OtelError::Certificates { path: None, source });
            }
            // Plain HTTP needs no roots.
            Err(_) => hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(config(rustls::RootCertStore::empty())?),
        },
    };
    Ok(builder.https_or_http().enable_http1().build())
}

/// The certificates of a PEM file.
fn roots_from(path: &str) -> Result<rustls::RootCertStore, OtelError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let failed = |source: std::io::Error| OtelError::Certificates {
        path: Some(path.to_string()),
        source,
    };
    let mut roots = rustls::RootCertStore::empty();
    let certs =
        CertificateDer::pem_file_iter(path).map_err(|e| failed(std::io::Error::other(e)))?;
    for cert in certs {
        let cert = cert.map_err(|e| failed(std::io::Error::other(e)))?;
        roots
            .add(cert)
            .map_err(|e| failed(std::io::Error::other(e)))?;
    }
    if roots.is_empty() {
        return Err(failed(std::io::Error::other("no certificate in the file")));
    }
    Ok(roots)
}

/// The most of a collector's answer that is read (it is a few bytes, or an error message).
const MAX_RESPONSE: usize = 4 * 1024 * 1024;

/// The exporter's HTTP client: hyper's, driven by a runtime of its own on a thread of its
/// own (`kopf-otel`), so that the SDK's export thread (which knows no Tokio) can use it, and
/// a busy or stopping operator runtime does not hold the export.
#[derive(Debug, Clone)]
struct Client {
    inner: hyper_util::client::legacy::Client<Connector, http_body_util::Full<Bytes>>,
    timeout: Duration,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl Client {
    fn new(connector: Connector, timeout: Duration) -> Result<Client, OtelError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kopf-otel")
            .enable_all()
            .build()
            .map_err(OtelError::Thread)?;
        let inner =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector);
        Ok(Client {
            inner,
            timeout,
            runtime: Arc::new(runtime),
        })
    }

    /// Sends one request and reads the answer, within the timeout.
    async fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        use http_body_util::BodyExt;
        let (parts, body) = request.into_parts();
        let request = Request::from_parts(parts, http_body_util::Full::new(body));
        let exchange = async {
            let response = self.inner.request(request).await?;
            let (parts, body) = response.into_parts();
            let body = http_body_util::Limited::new(body, MAX_RESPONSE)
                .collect()
                .await?
                .to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("no answer within {:?}", self.timeout).into()),
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.clone();
        self.runtime
            .spawn(async move { client.send(request).await })
            .await
            .map_err(|e| Box::new(e) as HttpError)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Config {
        Config::from_vars(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn an_endpoint_switches_export_on_and_the_standard_switches_turn_it_off() {
        assert_eq!(config(&[]), Config::NoEndpoint);
        assert_eq!(config(&[(ENDPOINT, " ")]), Config::NoEndpoint);
        assert_eq!(
            config(&[(ENDPOINT, "http://collector:4318/")]),
            Config::Endpoint("http://collector:4318/v1/traces".into())
        );
        assert_eq!(
            config(&[
                (ENDPOINT, "http://collector:4318"),
                (TRACES_ENDPOINT, "http://traces:4318/v1/traces")
            ]),
            Config::Endpoint("http://traces:4318/v1/traces".into())
        );
        assert!(matches!(
            config(&[(ENDPOINT, "http://c:4318"), ("OTEL_SDK_DISABLED", "TRUE")]),
            Config::Disabled(_)
        ));
        assert!(matches!(
            config(&[
                (ENDPOINT, "http://c:4318"),
                ("OTEL_TRACES_EXPORTER", "none")
            ]),
            Config::Disabled(_)
        ));
    }

    #[test]
    fn other_protocols_than_http_protobuf_are_refused() {
        let vars = [(ENDPOINT, "http://c:4317"), (PROTOCOL, "grpc")];
        let error = provider_from_vars(&|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
        .err();
        assert!(
            matches!(&error, Some(OtelError::Protocol { var: PROTOCOL, value }) if value == "grpc"),
            "{error:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn spans_go_to_the_collector_over_http_and_the_shutdown_sends_the_last() {
        use tracing_subscriber::layer::SubscriberExt;
        type Seen = Arc<Mutex<Vec<(String, Vec<u8>)>>>;
        let seen: Seen = Arc::default();
        let record = seen.clone();
        let collector = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
                    let kind = headers
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    record
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((kind, body.to_vec()));
                    axum::http::StatusCode::OK
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let address = listener.local_addr().expect("an address");
        let server = tokio::spawn(async move { axum::serve(listener, collector).await });
        let vars = [
            (ENDPOINT.to_string(), format!("http://{address}")),
            ("OTEL_SERVICE_NAME".to_string(), "the-operator".to_string()),
        ];
        let provider = provider_from_vars(&|name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
        .expect("a provider");
        let subscriber = tracing_subscriber::registry().with(layer(&provider));
        tracing::subscriber::with_default(subscriber, || {
            let _cycle = tracing::info_span!("object", name = "a", otel.name = "cycle").entered();
        });
        // The batch is sent at the shutdown (a blocking call: not on the test's runtime).
        tokio::task::spawn_blocking(move || provider.shutdown())
            .await
            .expect("no panic")
            .expect("the provider shuts down");
        server.abort();
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(seen.len(), 1, "one request");
        let (kind, body) = &seen[0];
        assert_eq!(kind, "application/x-protobuf");
        let has = |text: &[u8]| body.windows(text.len()).any(|w| w == text);
        assert!(has(b"cycle") && has(b"the-operator"), "{body:?}");
    }

    #[test]
    fn only_the_cycle_spans_of_the_object_spans_are_exported() {
        use tracing_subscriber::layer::SubscriberExt;
        let exporter = CollectedSpans::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry().with(layer(&provider));
        tracing::subscriber::with_default(subscriber, || {
            let _plain = tracing::info_span!("object", name = "a").entered();
            let _cycle = tracing::info_span!("object", name = "a", otel.name = "cycle").entered();
            let _handler = tracing::info_span!("handler", handler = "h").entered();
        });
        let spans = exporter.spans();
        let mut names: Vec<_> = spans.iter().map(|s| s.name.to_string()).collect();
        names.sort();
        assert_eq!(names, ["cycle", "handler"]);
    }
}
