//! The webhook server over HTTPS: certificate verification against the generated CA,
//! answers to bad and good reviews, a panicking handler, and the graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kopf_admission::review::Reviewer;
use kopf_admission::server::router;
use kopf_admission::tls::{CertSource, Tls, TlsSettings};
use kopf_admission::{AdmissionError, WebhookHandler, WebhookKind, WebhookOptions};
use kopf_core::extract::{IntoHandler, Spec};
use kopf_core::handler::{Extensions, HandlerError};
use kopf_watch::Discovered;
use kube::core::ApiResource;
use serde_json::{Value, json};

fn tls() -> Tls {
    Tls::load(&TlsSettings {
        source: CertSource::SelfSigned {
            sans: vec!["127.0.0.1".into(), "webhooks.example".into()],
        },
        check_interval: Duration::from_secs(60),
    })
    .expect("a generated certificate")
}

async fn require_field(Spec(spec): Spec) -> Result<(), AdmissionError> {
    spec.get("field")
        .map(|_| ())
        .ok_or_else(|| AdmissionError::with_code("spec.field is required", 422))
}

async fn boom() -> Result<(), HandlerError> {
    panic!("the handler broke")
}

fn reviewer() -> Reviewer {
    let d = Discovered {
        api_resource: ApiResource {
            group: "kopf.dev".into(),
            version: "v1".into(),
            api_version: "kopf.dev/v1".into(),
            kind: "KopfExample".into(),
            plural: "kopfexamples".into(),
        },
        singular: "kopfexample".into(),
        short_names: vec![],
        namespaced: true,
        verbs: vec![],
        status_subresource: true,
        preferred: true,
    };
    let h = |id: &str, f: Arc<dyn kopf_core::handler::Handler>| {
        (
            WebhookHandler::new(
                WebhookKind::Validating,
                "kopfexamples",
                id,
                f,
                WebhookOptions::new(),
            ),
            vec![d.clone()],
        )
    };
    Reviewer::new(
        vec![
            h("check", require_field.into_handler()),
            h("boom", boom.into_handler()),
        ],
        Extensions::default(),
    )
}

struct Served {
    port: u16,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

async fn serve(tls: &Tls) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let tls = tls.clone();
    let routes = router(reviewer(), vec![], "");
    let task = tokio::spawn(async move {
        kopf_admission::https::serve(listener, &tls, routes, async {
            let _ = rx.await;
        })
        .await
        .expect("serves");
    });
    Served { port, stop, task }
}

/// A client trusting exactly `ca` (PEM).
fn client(
    ca: &[u8],
) -> Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca) {
        roots.add(cert.expect("PEM")).expect("a root");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build();
    Client::builder(TokioExecutor::new()).build(https)
}

async fn post(ca: &[u8], url: &str, body: Vec<u8>) -> Result<(u16, Value), String> {
    let request = hyper::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let response = client(ca)
        .request(request)
        .await
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

fn review(resource: &str, spec: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "kopf.dev", "version": "v1", "kind": "KopfExample"},
            "resource": {"group": "kopf.dev", "version": "v1", "resource": resource},
            "name": "x", "namespace": "default", "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
                       "metadata": {"name": "x"}, "spec": spec},
        }
    }))
    .expect("JSON")
}

#[tokio::test]
async fn reviews_over_https_verified_against_the_generated_ca() {
    let tls = tls();
    let served = serve(&tls).await;
    let ca = tls.ca_bundle();
    let base = format!("https://127.0.0.1:{}", served.port);

    // Malformed: 400 with a clear message.
    let (status, body) = post(&ca, &format!("{base}/check"), b"{not json".to_vec())
        .await
        .expect("answered");
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .unwrap_or("")
            .contains("malformed AdmissionReview"),
        "{body}"
    );
    // Unknown resource: denied with a message.
    let (status, body) = post(&ca, &format!("{base}/check"), review("pods", json!({})))
        .await
        .expect("answered");
    assert_eq!(status, 200);
    assert_eq!(body["response"]["allowed"], false);
    assert!(
        body["response"]["status"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("no admission handler"),
        "{body}"
    );
    // The handler's denial, then an admission.
    let (_, body) = post(
        &ca,
        &format!("{base}/check"),
        review("kopfexamples", json!({})),
    )
    .await
    .expect("answered");
    assert_eq!(
        body["response"]["status"]["message"],
        "spec.field is required"
    );
    assert_eq!(body["response"]["status"]["code"], 422);
    // A panicking handler denies its review; the server keeps serving.
    let (status, body) = post(
        &ca,
        &format!("{base}/boom"),
        review("kopfexamples", json!({})),
    )
    .await
    .expect("answered");
    assert_eq!(status, 200);
    assert_eq!(body["response"]["allowed"], false);
    assert!(
        body["response"]["status"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("panicked"),
        "{body}"
    );
    let (_, body) = post(
        &ca,
        &format!("{base}/check"),
        review("kopfexamples", json!({"field": 1})),
    )
    .await
    .expect("answered");
    assert_eq!(body["response"]["allowed"], true);
    let (status, _) = post(&ca, &format!("{base}/healthz"), vec![])
        .await
        .expect("answered");
    assert_eq!(status, 405, "healthz is a GET");

    // Another CA does not verify the server's certificate.
    let other = tls_other();
    let failed = post(
        &other,
        &format!("{base}/check"),
        review("kopfexamples", json!({})),
    )
    .await
    .expect_err("not trusted");
    assert!(failed.contains("UnknownIssuer"), "{failed}");

    let _ = served.stop.send(());
    served.task.await.expect("stopped");
    assert!(
        post(
            &ca,
            &format!("{base}/check"),
            review("kopfexamples", json!({}))
        )
        .await
        .is_err(),
        "the listener is closed after the shutdown"
    );
}

fn tls_other() -> Vec<u8> {
    tls().ca_bundle()
}

#[tokio::test]
async fn reloaded_certificate_files_are_served_to_new_connections() {
    let dir = tempfile::tempdir().expect("dir");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let write = |names: Vec<String>| {
        let pair = rcgen::generate_simple_self_signed(names).expect("a pair");
        std::fs::write(&cert, pair.cert.pem()).expect("cert");
        std::fs::write(&key, pair.signing_key.serialize_pem()).expect("key");
        pair.cert.pem().into_bytes()
    };
    let first = write(vec!["127.0.0.1".into()]);
    let tls = Tls::load(&TlsSettings {
        source: CertSource::Files {
            cert: cert.clone(),
            key: key.clone(),
            ca: None,
        },
        check_interval: Duration::from_millis(50),
    })
    .expect("loaded");
    assert_eq!(tls.ca_bundle(), first);
    let mut changes = tls.subscribe();
    let served = serve(&tls).await;
    let url = format!("https://127.0.0.1:{}/check", served.port);
    post(&first, &url, review("kopfexamples", json!({"field": 1})))
        .await
        .expect("the first certificate verifies");
    // Different contents, and a later modification time.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = write(vec!["127.0.0.1".into()]);
    tokio::time::timeout(Duration::from_secs(10), changes.changed())
        .await
        .expect("the CA bundle changed in time")
        .expect("still watching");
    assert_eq!(tls.ca_bundle(), second);
    post(&second, &url, review("kopfexamples", json!({"field": 1})))
        .await
        .expect("the second certificate verifies");
    assert!(
        post(&first, &url, review("kopfexamples", json!({})))
            .await
            .is_err()
    );
    // A broken rewrite keeps the second certificate in service.
    std::fs::write(&key, "garbage").expect("write");
    tokio::time::sleep(Duration::from_millis(300)).await;
    post(&second, &url, review("kopfexamples", json!({"field": 1})))
        .await
        .expect("still the second certificate");
    let _ = served.stop.send(());
    served.task.await.expect("stopped");
}
