//! The `admission` example end to end: its webhook server registers itself in the fake API
//! server (managed configurations, CRD conversion), and the fake server calls it as
//! kube-apiserver would, for kube-rs and for kubectl.

#[path = "../examples/admission.rs"]
#[allow(dead_code)]
mod example;

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::process::Stdio;

use base64::Engine as _;

use common::{Running, eventually};
use kopf::{
    AdmissionError, Operator,
    handler::Spec,
    webhooks::{WebhookOptions, WebhookServer},
};
use kopf_testing::FakeApiServer;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn admission_crd() -> Value {
    let path = format!(
        "{}/../../examples/admission-crd.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("admission-crd.yaml");
    serde_saphyr::from_str(&text).expect("YAML")
}

fn kex(server: &FakeApiServer, version: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", version, "KopfExample"),
        "kopfexamples",
    );
    Api::namespaced_with(server.client(), "default", &ar)
}

fn obj(version: &str, name: &str, labels: Value, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": format!("kopf.dev/{version}"), "kind": "KopfExample",
        "metadata": {"name": name, "labels": labels}, "spec": spec,
    }))
    .expect("a KopfExample")
}

/// A local server on a free port of 127.0.0.1 (the generated certificate has that SAN).
fn local() -> WebhookServer {
    WebhookServer::new()
        .addr(IpAddr::V4(Ipv4Addr::LOCALHOST))
        .port(0)
}

async fn configured(server: &FakeApiServer, kind: &str, webhooks: usize) {
    let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
    let ar = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> = Api::all_with(server.client(), &ar);
    eventually(
        &format!("the {kind} with {webhooks} webhook(s)"),
        async || {
            api.get_opt("kopf.dev").await.ok().flatten().and_then(|c| {
                c.data
                    .get("webhooks")
                    .and_then(Value::as_array)
                    .map(Vec::len)
            }) == Some(webhooks)
        },
    )
    .await;
}

async fn start_example(server: &FakeApiServer) -> Running {
    server.apply_object(admission_crd()).expect("the CRD");
    // Webhook handlers watch nothing: do not wait for a watch.
    let running = Running::start_with(
        server,
        example::operator().webhook_server(local()),
        std::time::Duration::from_secs(70),
        false,
    )
    .await;
    configured(server, "ValidatingWebhookConfiguration", 1).await;
    configured(server, "MutatingWebhookConfiguration", 1).await;
    running
}

fn message(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message.clone()),
        other => (0, other.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_mutation_and_conversion_through_the_fake_api_server() {
    let server = FakeApiServer::start().await.expect("start");
    let running = start_example(&server).await;
    let v1 = kex(&server, "v1");

    // Invalid: the validating handler's message, with its code.
    let err = v1
        .create(
            &PostParams::default(),
            &obj("v1", "bad", json!({}), json!({})),
        )
        .await
        .expect_err("denied");
    let (code, text) = message(&err);
    assert_eq!(code, 422, "{text}");
    assert!(
        text.contains(
            r#"admission webhook "check-field.kopf.dev" denied the request: spec.field is required"#
        ),
        "{text}"
    );
    assert!(v1.get_opt("bad").await.expect("get").is_none());

    // Valid: the mutating handler's label and default are on the stored object.
    v1.create(
        &PostParams::default(),
        &obj(
            "v1",
            "good",
            json!({}),
            json!({"field": "x", "items": ["a", "b"]}),
        ),
    )
    .await
    .expect("admitted");
    let stored = v1.get("good").await.expect("get");
    assert_eq!(
        stored
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kopf.dev/checked")),
        Some(&"yes".to_string())
    );
    assert_eq!(stored.data["spec"]["duration"], "1m");

    // Conversion: stored as v1, served as v2, and written as v2, served as v1.
    let v2 = kex(&server, "v2");
    let as_v2 = v2.get("good").await.expect("get v2");
    assert_eq!(
        as_v2.types.as_ref().map(|t| t.api_version.as_str()),
        Some("kopf.dev/v2")
    );
    assert_eq!(
        as_v2.data["spec"]["items"],
        json!([{"name": "a"}, {"name": "b"}])
    );
    v2.create(
        &PostParams::default(),
        &obj(
            "v2",
            "from-v2",
            json!({}),
            json!({"field": "y", "items": [{"name": "c"}]}),
        ),
    )
    .await
    .expect("created as v2");
    let as_v1 = v1.get("from-v2").await.expect("get v1");
    assert_eq!(as_v1.data["spec"]["items"], json!(["c"]));
    let listed = v2.list(&Default::default()).await.expect("list v2");
    assert_eq!(listed.items.len(), 2);
    assert!(
        listed
            .items
            .iter()
            .all(|o| o.data["spec"]["items"][0].get("name").is_some())
    );

    running.stop().await;
    server.shutdown().await;
}

async fn strict(Spec(spec): Spec) -> Result<(), AdmissionError> {
    match spec.get("field") {
        Some(_) => Ok(()),
        None => Err(AdmissionError::with_code("spec.field is required", 400)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_webhook_down_fail_rejects_and_ignore_admits() {
    let server = FakeApiServer::start().await.expect("start");
    server.apply_object(common::crd()).expect("crd");
    let op = Operator::new()
        .on_validate_with(
            "kopfexamples",
            "fail",
            strict,
            WebhookOptions::new().label("policy", "fail").persistent(),
        )
        .on_validate_with(
            "kopfexamples",
            "ignore",
            strict,
            WebhookOptions::new()
                .label("policy", "ignore")
                .persistent()
                .ignore_failures(),
        )
        .on_validate("kopfexamples", "transient", strict)
        .webhook_server(local())
        .webhooks_managed("kopf.dev");
    let running = Running::start_with(&server, op, std::time::Duration::from_secs(70), false).await;
    configured(&server, "ValidatingWebhookConfiguration", 3).await;
    let v1 = kex(&server, "v1");
    // Up: both deny an object without spec.field.
    for policy in ["fail", "ignore"] {
        let err = v1
            .create(
                &PostParams::default(),
                &obj(
                    "v1",
                    &format!("up-{policy}"),
                    json!({"policy": policy}),
                    json!({}),
                ),
            )
            .await
            .expect_err("denied while up");
        assert_eq!(message(&err).0, 400, "{policy}");
    }
    // Down: the persistent entries stay, the transient one is gone.
    running.stop().await;
    configured(&server, "ValidatingWebhookConfiguration", 2).await;
    let err = v1
        .create(
            &PostParams::default(),
            &obj("v1", "down-fail", json!({"policy": "fail"}), json!({})),
        )
        .await
        .expect_err("Fail rejects");
    let (code, text) = message(&err);
    assert_eq!(code, 500, "{text}");
    assert!(
        text.contains(r#"failed calling webhook "fail.kopf.dev""#),
        "{text}"
    );
    v1.create(
        &PostParams::default(),
        &obj("v1", "down-ignore", json!({"policy": "ignore"}), json!({})),
    )
    .await
    .expect("Ignore admits");
    // Objects no webhook selects were never concerned.
    v1.create(
        &PostParams::default(),
        &obj("v1", "other", json!({}), json!({})),
    )
    .await
    .expect("not selected");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_bundle_fails_the_tls_verification() {
    let server = FakeApiServer::start().await.expect("start");
    let running = start_example(&server).await;
    let v1 = kex(&server, "v1");
    // The generated CA verifies: the handler's own denial comes back.
    let err = v1
        .create(
            &PostParams::default(),
            &obj("v1", "a", json!({}), json!({})),
        )
        .await
        .expect_err("denied");
    assert_eq!(message(&err).0, 422);
    // Another CA in caBundle: the fake server cannot verify the webhook's certificate.
    let other = kopf::webhooks::tls::Tls::load(&kopf::webhooks::tls::TlsSettings {
        source: kopf::webhooks::tls::CertSource::SelfSigned {
            sans: vec!["127.0.0.1".into()],
        },
        check_interval: std::time::Duration::from_secs(60),
    })
    .expect("another CA");
    let bundle = base64::engine::general_purpose::STANDARD.encode(other.ca_bundle());
    let gvk = GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
    );
    let api: Api<DynamicObject> = Api::all_with(server.client(), &ApiResource::from_gvk(&gvk));
    let mut config = api.get("kopf.dev").await.expect("config");
    config.data["webhooks"][0]["clientConfig"]["caBundle"] = json!(bundle);
    api.replace("kopf.dev", &PostParams::default(), &config)
        .await
        .expect("replace");
    let err = v1
        .create(
            &PostParams::default(),
            &obj("v1", "b", json!({}), json!({"field": "x"})),
        )
        .await
        .expect_err("the call fails");
    let (code, text) = message(&err);
    assert_eq!(code, 500, "{text}");
    assert!(text.contains("failed calling webhook"), "{text}");
    running.stop().await;
    server.shutdown().await;
}

/// kubectl, as a new user runs it, against the fake server with the example's webhooks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_denials_warnings_mutations_and_conversions() {
    let kubectl = which_kubectl();
    let server = FakeApiServer::start().await.expect("start");
    let running = start_example(&server).await;
    let home = tempfile::tempdir().expect("home");
    let kubeconfig = home.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let run = async |args: &[&str], stdin: Option<&str>| {
        let mut cmd = tokio::process::Command::new(&kubectl);
        cmd.args(args)
            .arg(format!(
                "--cache-dir={}",
                home.path().join("cache").display()
            ))
            .env("HOME", home.path())
            .env("KUBECONFIG", &kubeconfig)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl starts");
        if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            input.write_all(text.as_bytes()).await.expect("stdin");
        }
        let out = child.wait_with_output().await.expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let bad = r#"{"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "bad", "namespace": "default"}, "spec": {}}"#;
    let (ok, _, err) = run(&["apply", "-f", "-"], Some(bad)).await;
    assert!(!ok);
    assert!(
        err.contains(
            r#"admission webhook "check-field.kopf.dev" denied the request: spec.field is required"#
        ),
        "{err}"
    );
    let empty = r#"{"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "empty", "namespace": "default"}, "spec": {"field": "x"}}"#;
    let (ok, out, err) = run(&["apply", "-f", "-"], Some(empty)).await;
    assert!(ok, "{out}{err}");
    assert!(
        err.contains("Warning: empty: spec.items is empty; nothing to do"),
        "{err}"
    );
    let (ok, out, err) = run(
        &[
            "get",
            "kopfexamples.v1.kopf.dev",
            "empty",
            "-n",
            "default",
            "-o",
            "json",
        ],
        None,
    )
    .await;
    assert!(ok, "{err}");
    let got: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(got["metadata"]["labels"]["kopf.dev/checked"], "yes");
    assert_eq!(got["spec"]["duration"], "1m");
    let listed = r#"{"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "listed", "namespace": "default"}, "spec": {"field": "x", "items": ["a"]}}"#;
    let (ok, _, err) = run(&["apply", "-f", "-"], Some(listed)).await;
    assert!(ok, "{err}");
    let (ok, out, err) = run(
        &[
            "get",
            "kopfexamples.v2.kopf.dev",
            "listed",
            "-n",
            "default",
            "-o",
            "json",
        ],
        None,
    )
    .await;
    assert!(ok, "{err}");
    let got: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(got["apiVersion"], "kopf.dev/v2");
    assert_eq!(got["spec"]["items"], json!([{"name": "a"}]));
    running.stop().await;
    server.shutdown().await;
}

/// `KOPF_TEST_KUBECTL` (as kopf-testing's kubectl tests), or the `kubectl` on the PATH.
fn which_kubectl() -> std::path::PathBuf {
    if let Some(given) = std::env::var_os("KOPF_TEST_KUBECTL") {
        return given.into();
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join("kubectl"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "kubectl is not on the PATH; install it (a prerequisite of the tests), or leave this test out: cargo test --workspace -- --skip kubectl"
            )
        })
}
