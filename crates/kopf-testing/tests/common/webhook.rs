//! A small HTTPS webhook server for tests: a generated CA, a leaf certificate signed by it
//! (SAN 127.0.0.1 and a service name), hyper over tokio-rustls, and a handler per test.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use http_body_util::{BodyExt, Full};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};

/// A CA and a server certificate signed by it.
pub struct Pki {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The server certificate, DER.
    pub cert: CertificateDer<'static>,
    /// The server key, PKCS#8 DER.
    pub key: Vec<u8>,
}

impl Pki {
    /// A fresh CA and a leaf for `sans` (IP addresses or DNS names).
    pub fn new(sans: &[&str]) -> Pki {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(
            DnType::CommonName,
            format!("test CA {}", uuid::Uuid::new_v4()),
        );
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf_key = KeyPair::generate().expect("leaf key");
        let mut leaf_params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .expect("leaf params");
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "test webhook");
        leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = leaf_params
            .signed_by(&leaf_key, &issuer)
            .expect("leaf certificate");
        Pki {
            ca_pem: ca_cert.pem(),
            cert: leaf.der().clone(),
            key: leaf_key.serialize_der(),
        }
    }

    /// `caBundle`: the CA certificate as base64 of PEM.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.ca_pem.as_bytes())
    }
}

/// What the handler answers: a JSON body after an optional delay.
pub struct Reply {
    pub delay: Option<Duration>,
    pub body: Value,
}

impl From<Value> for Reply {
    fn from(body: Value) -> Self {
        Reply { delay: None, body }
    }
}

/// A request handler: the path and the decoded JSON body.
pub type Handler = Arc<dyn Fn(&str, &Value) -> Reply + Send + Sync>;

/// A running test webhook server.
pub struct TestWebhook {
    pub addr: SocketAddr,
    pub pki: Pki,
    /// Every request received: (path with query, body).
    pub requests: Arc<Mutex<Vec<(String, Value)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestWebhook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestWebhook {
    /// Starts a server on 127.0.0.1 with a certificate for 127.0.0.1 and `svc.ns.svc`.
    pub async fn start(handler: Handler) -> TestWebhook {
        Self::start_with(Pki::new(&["127.0.0.1", "hooks.webhooks.svc"]), handler).await
    }

    /// Starts a server with the given certificates.
    pub async fn start_with(pki: Pki, handler: Handler) -> TestWebhook {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![pki.cert.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.key.clone())),
            )
            .expect("server certificate");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let requests: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let handler = handler.clone();
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    // Failed handshakes (clients that reject the certificate) end here.
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let handler = handler.clone();
                            let recorded = recorded.clone();
                            async move {
                                let path = req
                                    .uri()
                                    .path_and_query()
                                    .map(|p| p.to_string())
                                    .unwrap_or_default();
                                let body = req.into_body().collect().await?.to_bytes();
                                let value: Value =
                                    serde_json::from_slice(&body).unwrap_or(Value::Null);
                                recorded
                                    .lock()
                                    .expect("lock")
                                    .push((path.clone(), value.clone()));
                                let reply = handler(&path, &value);
                                if let Some(d) = reply.delay {
                                    tokio::time::sleep(d).await;
                                }
                                let resp = hyper::Response::builder()
                                    .header("content-type", "application/json")
                                    .body(Full::new(bytes::Bytes::from(reply.body.to_string())))
                                    .expect("response");
                                Ok::<_, hyper::Error>(resp)
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        TestWebhook {
            addr,
            pki,
            requests,
            task,
        }
    }

    /// `https://127.0.0.1:PORT<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// A `clientConfig` with the URL and this server's CA.
    pub fn client_config(&self, path: &str) -> Value {
        json!({"url": self.url(path), "caBundle": self.pki.ca_bundle()})
    }

    /// The bodies received on a path (without the query).
    pub fn bodies(&self, path: &str) -> Vec<Value> {
        self.requests
            .lock()
            .expect("lock")
            .iter()
            .filter(|(p, _)| p.split('?').next() == Some(path))
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// All received (path, body) pairs.
    pub fn all(&self) -> Vec<(String, Value)> {
        self.requests.lock().expect("lock").clone()
    }
}

/// The answer to an AdmissionReview: `response` gets the request's uid.
pub fn admission_response(review: &Value, allowed: bool, extra: Value) -> Value {
    let mut response = json!({"uid": review["request"]["uid"], "allowed": allowed});
    if let (Some(r), Some(e)) = (response.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            r.insert(k.clone(), v.clone());
        }
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// A JSON patch as `response.patch` (base64) with `patchType`.
pub fn patch_fields(ops: Value) -> Value {
    json!({"patchType": "JSONPatch",
        "patch": base64::engine::general_purpose::STANDARD.encode(ops.to_string())})
}

/// A webhook configuration object.
pub fn configuration(mutating: bool, name: &str, webhooks: Vec<Value>) -> Value {
    let kind = if mutating {
        "MutatingWebhookConfiguration"
    } else {
        "ValidatingWebhookConfiguration"
    };
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        "metadata": {"name": name}, "webhooks": webhooks})
}

/// One webhook: its name, client config and rules; `extra` is merged in.
pub fn webhook(name: &str, client_config: Value, rules: Value, extra: Value) -> Value {
    let mut w = json!({"name": name, "clientConfig": client_config, "rules": rules,
        "sideEffects": "None", "admissionReviewVersions": ["v1"]});
    if let (Some(o), Some(e)) = (w.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            o.insert(k.clone(), v.clone());
        }
    }
    w
}

/// A rule for operations on resources of a group/version.
pub fn rule(ops: &[&str], group: &str, version: &str, resources: &[&str]) -> Value {
    json!([{"operations": ops, "apiGroups": [group], "apiVersions": [version], "resources": resources}])
}

// ---------------------------------------------------------------------------------------------
// A conversion webhook for a KopfExample CRD with v1 (storage, `spec.field`) and v2
// (`spec.value`).

/// The conversion: v1 `spec.field` ⇄ v2 `spec.value`; labels pass unchanged.
pub fn convert(obj: &Value, desired: &str) -> Value {
    let mut out = obj.clone();
    let spec = obj.get("spec").cloned().unwrap_or(json!({}));
    let (from, to) = if desired == "kopf.dev/v2" {
        ("field", "value")
    } else {
        ("value", "field")
    };
    let mut new_spec = json!({});
    if let Some(v) = spec.get(from) {
        new_spec[to] = v.clone();
    }
    out["spec"] = new_spec;
    out["apiVersion"] = json!(desired);
    out
}

pub fn conversion_handler(fail: Arc<AtomicBool>) -> Handler {
    Arc::new(move |path: &str, review: &Value| {
        if path.starts_with("/admit") {
            return admission_response(review, true, json!({})).into();
        }
        let req = &review["request"];
        let desired = req["desiredAPIVersion"].as_str().unwrap_or("");
        let result = if fail.load(Ordering::SeqCst) {
            json!({"status": "Failure", "message": "the converter is broken"})
        } else {
            json!({"status": "Success"})
        };
        let objects: Vec<Value> = req["objects"]
            .as_array()
            .map(|a| a.iter().map(|o| convert(o, desired)).collect())
            .unwrap_or_default();
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": {"uid": req["uid"], "result": result, "convertedObjects": objects}})
        .into()
    })
}

pub fn conversion_crd(hook: &TestWebhook) -> Value {
    let schema = |prop: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {prop: {"type": "string"}}}}}})
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "kopfexamples.kopf.dev"},
        "spec": {
            "group": "kopf.dev", "scope": "Namespaced",
            "names": {"kind": "KopfExample", "plural": "kopfexamples", "singular": "kopfexample"},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": schema("field")},
                {"name": "v2", "served": true, "storage": false, "schema": schema("value")},
            ],
            "conversion": {"strategy": "Webhook", "webhook": {
                "clientConfig": hook.client_config("/convert"),
                "conversionReviewVersions": ["v1"]}},
        },
    })
}
