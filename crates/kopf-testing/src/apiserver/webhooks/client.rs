//! Calling webhooks over HTTPS as kube-apiserver does, for admission and CRD conversion.
//!
//! * `clientConfig.url` must be `https://`; the server certificate is verified against
//!   `clientConfig.caBundle` (base64 of one or more PEM certificates) and nothing else: a
//!   fresh rustls configuration (the *ring* provider) whose roots are exactly those
//!   certificates, cached per bundle. Without a bundle there are no roots, so every call
//!   fails verification. Host names are verified as usual (IP SANs for IP URLs). As in Go's
//!   `crypto/x509`, a server certificate that is itself one of the bundle's certificates is
//!   trusted when it is valid now and for the host, even if it is a CA certificate (Python
//!   Kopf's self-signed webhook certificates are).
//! * `clientConfig.service{namespace,name,path,port}`: the fake has no service network, so
//!   a service is reached at the address the server maps it to
//!   ([`FakeApiServerBuilder::webhook_service`](crate::FakeApiServerBuilder::webhook_service));
//!   the certificate must be valid for `<name>.<namespace>.svc`. Without a mapping the call
//!   fails as `service "<name>" not found`.
//! * Every call is a `POST <url>?timeout=<N>s` with a JSON body, bounded by that timeout.
//!
//! Each call is recorded as a [`WebhookCall`] (see
//! [`FakeApiServer::webhook_calls`](crate::FakeApiServer::webhook_calls)) and logged.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde::Serialize;
use serde_json::Value;

use crate::apiserver::sync::lock;
use crate::apiserver::webhooks::trust::GoLikeVerifier;

/// A Service named by a webhook's `clientConfig.service`: namespace, name and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ServiceRef {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// The Service port (`clientConfig.service.port`, 443 by default).
    pub port: u16,
}

impl ServiceRef {
    /// A service reference.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, port: u16) -> Self {
        ServiceRef {
            namespace: namespace.into(),
            name: name.into(),
            port,
        }
    }
}

/// What came of one webhook call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum WebhookOutcome {
    /// The webhook allowed the request and changed nothing.
    Allowed,
    /// A mutating webhook allowed the request and returned a patch, which was applied.
    Patched,
    /// The webhook denied the request; the client got this code and message.
    Denied {
        /// The HTTP code the client got.
        code: u16,
        /// The message the client got.
        message: String,
    },
    /// The call failed (unreachable, TLS, timeout, bad response) and the request failed
    /// with it (`failurePolicy: Fail`, and every failed conversion).
    Failed {
        /// Why the call failed.
        error: String,
    },
    /// The call failed and `failurePolicy: Ignore` let the request proceed.
    Ignored {
        /// Why the call failed.
        error: String,
    },
    /// A conversion webhook converted this many objects.
    Converted {
        /// The number of objects converted.
        objects: usize,
    },
}

impl WebhookOutcome {
    /// A short name: `allowed`, `patched`, `denied`, `failed`, `ignored`, `converted`.
    pub fn as_str(&self) -> &'static str {
        match self {
            WebhookOutcome::Allowed => "allowed",
            WebhookOutcome::Patched => "patched",
            WebhookOutcome::Denied { .. } => "denied",
            WebhookOutcome::Failed { .. } => "failed",
            WebhookOutcome::Ignored { .. } => "ignored",
            WebhookOutcome::Converted { .. } => "converted",
        }
    }
}

/// One call of an admission or conversion webhook.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookCall {
    /// `MutatingWebhookConfiguration`, `ValidatingWebhookConfiguration`, or
    /// `CustomResourceDefinition` for conversion webhooks.
    pub configuration_kind: String,
    /// The name of the configuration (or of the CRD).
    pub configuration: String,
    /// The webhook's name (for conversion webhooks: the CRD's name).
    pub webhook: String,
    /// `CREATE`, `UPDATE`, `DELETE`, or `CONVERT` for conversion webhooks.
    pub operation: String,
    /// The resource as the webhook saw it, `group/version/plural` (`v1/configmaps` for
    /// the core group); for conversions the desired `apiVersion` and the plural.
    pub resource: String,
    /// The subresource, empty for none.
    pub subresource: String,
    /// The object's namespace, empty for none.
    pub namespace: String,
    /// The object's name (empty for a create with `generateName`; for conversions of
    /// several objects, empty).
    pub name: String,
    /// Whether the request was a dry run.
    pub dry_run: bool,
    /// The review's `request.uid`.
    pub uid: String,
    /// What came of it.
    pub outcome: WebhookOutcome,
    /// How long the call took (connection, request and response); serialised as
    /// `durationMillis`.
    #[serde(rename = "durationMillis", serialize_with = "millis")]
    pub duration: Duration,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// Why a webhook could not be called or answered unusably.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum CallError {
    /// The transport failed: `Post "<url>": <why>` as Go's HTTP client says it.
    #[error("Post \"{url}\": {reason}")]
    Transport {
        /// The URL with the timeout parameter.
        url: String,
        /// Why.
        reason: String,
    },
    /// The client configuration cannot be used.
    #[error("{0}")]
    Config(String),
}

/// State of the webhook client kept by the server: TLS configurations per CA bundle and
/// the call log.
#[derive(Default)]
pub(crate) struct WebhookRuntime {
    tls: Mutex<HashMap<String, Result<Arc<rustls::ClientConfig>, String>>>,
    pub calls: Mutex<Vec<WebhookCall>>,
}

impl WebhookRuntime {
    /// Records a call and logs it.
    pub fn record(&self, call: WebhookCall) {
        let ms = call.duration.as_secs_f64() * 1000.0;
        match &call.outcome {
            WebhookOutcome::Failed { error } | WebhookOutcome::Ignored { error } => {
                tracing::warn!(
                    configuration = %call.configuration, webhook = %call.webhook,
                    operation = %call.operation, resource = %call.resource,
                    namespace = %call.namespace, name = %call.name,
                    outcome = call.outcome.as_str(), duration_ms = ms, error = %error,
                    "webhook call failed"
                );
            }
            outcome => {
                tracing::info!(
                    configuration = %call.configuration, webhook = %call.webhook,
                    operation = %call.operation, resource = %call.resource,
                    namespace = %call.namespace, name = %call.name,
                    outcome = outcome.as_str(), duration_ms = ms,
                    "webhook called"
                );
            }
        }
        lock(&self.calls).push(call);
    }

    /// The rustls configuration trusting exactly the certificates of a CA bundle.
    fn tls_config(&self, ca_bundle: &str) -> Result<Arc<rustls::ClientConfig>, String> {
        let mut cache = lock(&self.tls);
        if let Some(cached) = cache.get(ca_bundle) {
            return cached.clone();
        }
        let built = build_tls_config(ca_bundle);
        cache.insert(ca_bundle.to_string(), built.clone());
        built
    }
}

fn build_tls_config(ca_bundle: &str) -> Result<Arc<rustls::ClientConfig>, String> {
    use base64::Engine;
    let mut roots = Vec::new();
    let compact: String = ca_bundle.chars().filter(|c| !c.is_whitespace()).collect();
    if !compact.is_empty() {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .map_err(|e| format!("the caBundle is not valid base64: {e}"))?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            roots.push(cert.map_err(|e| format!("the caBundle is not valid PEM: {e}"))?);
        }
        if roots.is_empty() {
            return Err("unable to load root certificates: no certificates in the caBundle".into());
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot configure TLS: {e}"))?;
    let config = if roots.is_empty() {
        // No roots: every certificate is refused as signed by an unknown authority.
        builder
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth()
    } else {
        // Go's trust (a server certificate that is one of the roots is accepted).
        let verifier = GoLikeVerifier::new(roots, provider)?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth()
    };
    Ok(Arc::new(config))
}

/// Where a client configuration points.
struct Endpoint {
    /// The URL for messages, with the query.
    url: String,
    /// Where to connect: host and port.
    connect: (String, u16),
    /// The name the certificate must be valid for.
    server_name: String,
    /// The Host header.
    authority: String,
    /// The request target.
    path_and_query: String,
}

fn with_timeout_param(path: &str, timeout: Duration) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}timeout={}s", timeout.as_secs())
}

fn endpoint(
    client_config: &Value,
    services: &BTreeMap<ServiceRef, String>,
    timeout: Duration,
) -> Result<Endpoint, CallError> {
    if let Some(url) = client_config.get("url").and_then(Value::as_str) {
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| CallError::Config(format!("invalid webhook URL {url:?}: {e}")))?;
        if uri.scheme_str() != Some("https") {
            return Err(CallError::Config(format!(
                "invalid webhook URL {url:?}: 'https' is the only allowed URL scheme"
            )));
        }
        let host = uri
            .host()
            .ok_or_else(|| CallError::Config(format!("invalid webhook URL {url:?}: no host")))?;
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(443);
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let path_and_query = with_timeout_param(path, timeout);
        let authority = uri
            .authority()
            .map_or_else(|| host.to_string(), |a| a.to_string());
        return Ok(Endpoint {
            url: format!("https://{authority}{path_and_query}"),
            connect: (bare.clone(), port),
            server_name: bare,
            authority,
            path_and_query,
        });
    }
    if let Some(svc) = client_config.get("service") {
        let s = |k: &str| svc.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let (namespace, name) = (s("namespace"), s("name"));
        let port = svc
            .get("port")
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(443);
        let path = match svc.get("path").and_then(Value::as_str) {
            Some(p) if !p.is_empty() => p.to_string(),
            _ => "/".to_string(),
        };
        let host = format!("{name}.{namespace}.svc");
        let path_and_query = with_timeout_param(&path, timeout);
        let url = format!("https://{host}:{port}{path_and_query}");
        let target = services
            .get(&ServiceRef::new(namespace.as_str(), name.as_str(), port))
            .ok_or_else(|| CallError::Transport {
                url: url.clone(),
                reason: format!("service \"{name}\" not found"),
            })?;
        let (thost, tport) = split_host_port(target).ok_or_else(|| CallError::Transport {
            url: url.clone(),
            reason: format!("the address {target:?} mapped to service \"{name}\" is not host:port"),
        })?;
        return Ok(Endpoint {
            url,
            connect: (thost, tport),
            server_name: host.clone(),
            authority: format!("{host}:{port}"),
            path_and_query,
        });
    }
    Err(CallError::Config(
        "the clientConfig has neither url nor service".into(),
    ))
}

fn split_host_port(s: &str) -> Option<(String, u16)> {
    let (host, port) = s.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_string(), port.parse().ok()?))
}

fn io_reason(e: &std::io::Error) -> String {
    if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return tls_reason(tls);
    }
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connect: connection refused".into(),
        std::io::ErrorKind::ConnectionReset => "read: connection reset by peer".into(),
        _ => e.to_string(),
    }
}

fn tls_reason(e: &rustls::Error) -> String {
    use rustls::CertificateError;
    match e {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "tls: failed to verify certificate: x509: certificate signed by unknown authority"
                .into()
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!("tls: failed to verify certificate: x509: {e}"),
        rustls::Error::InvalidCertificate(_) => {
            format!("tls: failed to verify certificate: {e}")
        }
        other => format!("tls: {other}"),
    }
}

/// POSTs a JSON body to a webhook and returns the decoded JSON answer.
pub(crate) async fn post_json(
    runtime: &WebhookRuntime,
    services: &BTreeMap<ServiceRef, String>,
    client_config: &Value,
    timeout: Duration,
    body: &Value,
) -> Result<Value, CallError> {
    let ep = endpoint(client_config, services, timeout)?;
    let ca_bundle = client_config
        .get("caBundle")
        .and_then(Value::as_str)
        .unwrap_or("");
    let tls = runtime
        .tls_config(ca_bundle)
        .map_err(|reason| CallError::Transport {
            url: ep.url.clone(),
            reason,
        })?;
    let url = ep.url.clone();
    let payload = Bytes::from(body.to_string());
    match tokio::time::timeout(timeout, exchange(ep, tls, payload)).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(reason)) => Err(CallError::Transport { url, reason }),
        Err(_) => Err(CallError::Transport {
            url,
            reason: "context deadline exceeded".into(),
        }),
    }
}

async fn exchange(
    ep: Endpoint,
    tls: Arc<rustls::ClientConfig>,
    payload: Bytes,
) -> Result<Value, String> {
    let (host, port) = &ep.connect;
    let tcp = tokio::net::TcpStream::connect((host.as_str(), *port))
        .await
        .map_err(|e| format!("dial tcp {host}:{port}: {}", io_reason(&e)))?;
    let _ = tcp.set_nodelay(true);
    let server_name = ServerName::try_from(ep.server_name.clone())
        .map_err(|e| format!("invalid server name {:?}: {e}", ep.server_name))?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(server_name, tcp)
        .await
        .map_err(|e| io_reason(&e))?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "webhook connection ended with an error");
        }
    });
    let req = hyper::Request::post(ep.path_and_query.as_str())
        .header(header::HOST, ep.authority.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, */*")
        .header(header::USER_AGENT, "kube-apiserver-admission")
        .body(Full::new(payload))
        .map_err(|e| e.to_string())?;
    let result = async {
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            let text = text.trim();
            return Err(if text.is_empty() {
                format!(
                    "the server responded with the status code {} but did not return more information",
                    status.as_u16()
                )
            } else {
                format!(
                    "the server responded with the status code {}: {}",
                    status.as_u16(),
                    text.chars().take(512).collect::<String>()
                )
            });
        }
        serde_json::from_slice::<Value>(&bytes)
            .map_err(|e| format!("the response could not be decoded as JSON: {e}"))
    }
    .await;
    driver.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn endpoints() {
        let services = BTreeMap::from([(
            ServiceRef::new("ns", "svc", 8443),
            "127.0.0.1:9999".to_string(),
        )]);
        let t = Duration::from_secs(7);
        let ep = endpoint(
            &json!({"url": "https://127.0.0.1:8443/v?x=1"}),
            &services,
            t,
        )
        .expect("url endpoint");
        assert_eq!(ep.url, "https://127.0.0.1:8443/v?x=1&timeout=7s");
        assert_eq!(ep.connect, ("127.0.0.1".to_string(), 8443));
        assert_eq!(ep.server_name, "127.0.0.1");
        let ep = endpoint(
            &json!({"service": {"namespace": "ns", "name": "svc", "port": 8443, "path": "/m"}}),
            &services,
            t,
        )
        .expect("service endpoint");
        assert_eq!(ep.url, "https://svc.ns.svc:8443/m?timeout=7s");
        assert_eq!(ep.connect, ("127.0.0.1".to_string(), 9999));
        assert_eq!(ep.server_name, "svc.ns.svc");
        let missing = endpoint(
            &json!({"service": {"namespace": "ns", "name": "other"}}),
            &services,
            t,
        );
        match missing {
            Err(e) => assert_eq!(
                e.to_string(),
                "Post \"https://other.ns.svc:443/?timeout=7s\": service \"other\" not found"
            ),
            Ok(_) => panic!("an unmapped service must fail"),
        }
        assert!(endpoint(&json!({"url": "http://x/"}), &services, t).is_err());
    }

    #[test]
    fn bad_bundles() {
        assert!(build_tls_config("not base64!").is_err());
        assert!(build_tls_config("aGVsbG8=").is_err());
        assert!(build_tls_config("").is_ok());
    }
}
