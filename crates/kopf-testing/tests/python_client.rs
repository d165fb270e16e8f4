//! Compatibility: the Python `kubernetes` client and Python Kopf 1.45 against the fake API
//! server.
//!
//! The interpreter is `KOPF_TEST_PYTHON` if set; otherwise a venv under the target directory
//! (`target/python-venv`), created on first use with `python3 -m venv` and given
//! `kubernetes` and `kopf==1.45.*` from PyPI. Without Python 3 (with `venv` and `pip`) or
//! without access to PyPI the tests fail and say what is missing; to leave them out on
//! purpose, `cargo test --workspace -- --skip python_` (cargo then reports them as filtered
//! out, not as passed).

mod common;

use std::path::PathBuf;
use std::process::Command;

use kopf_testing::FakeApiServer;

const SCRIPT: &str = r#"
import sys
from kubernetes import client, config, watch

config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
ns = "default"

cm = v1.create_namespaced_config_map(ns, {"metadata": {"name": "pyc", "labels": {"e2e": "true"}}, "data": {"a": "b"}})
rv = cm.metadata.resource_version
listed = v1.list_namespaced_config_map(ns, label_selector="e2e=true")
assert [i.metadata.name for i in listed.items] == ["pyc"], listed.items
v1.patch_namespaced_config_map("pyc", ns, {"data": {"a": "c"}})
v1.delete_namespaced_config_map("pyc", ns)

seen = []
for ev in watch.Watch().stream(v1.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=2):
    seen.append((ev["type"], ev["object"].metadata.name))
assert seen == [("MODIFIED", "pyc"), ("DELETED", "pyc")], seen

co = client.CustomObjectsApi()
body = {"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "pyx"}, "spec": {"field": "v"}}
co.create_namespaced_custom_object("kopf.dev", "v1", ns, "kopfexamples", body)
co.patch_namespaced_custom_object("kopf.dev", "v1", ns, "kopfexamples", "pyx", {"spec": {"field": "w"}})
co.patch_namespaced_custom_object_status("kopf.dev", "v1", ns, "kopfexamples", "pyx", {"status": {"ok": True}})
got = co.get_namespaced_custom_object("kopf.dev", "v1", ns, "kopfexamples", "pyx")
assert got["spec"]["field"] == "w" and got["status"]["ok"] is True, got
items = co.list_namespaced_custom_object("kopf.dev", "v1", ns, "kopfexamples")["items"]
assert [i["metadata"]["name"] for i in items] == ["pyx"], items
co.delete_namespaced_custom_object("kopf.dev", "v1", ns, "kopfexamples", "pyx")
try:
    v1.read_namespaced_config_map("pyc", ns)
    raise SystemExit("pyc should be gone")
except client.exceptions.ApiException as e:
    assert e.status == 404, e
print("python client: ok")
"#;

/// What the tests need from PyPI.
const PACKAGES: [&str; 2] = ["kubernetes>=31,<40", "kopf==1.45.*"];

/// The Python interpreter with `kubernetes` and `kopf`: `KOPF_TEST_PYTHON`, or the venv
/// under the target directory (made once, the first time it is needed).
fn python() -> PathBuf {
    match kopf_testing::e2e::python::interpreter(&PACKAGES) {
        Ok(p) => p,
        Err(e) => panic!(
            "{e}\n(to leave the Python tests out on purpose: cargo test --workspace -- --skip python_)"
        ),
    }
}

/// Runs the Python client's scenario against a server (plain HTTP or HTTPS).
async fn client_scenario(server: FakeApiServer) {
    let py = python();
    server.apply_object(common::kopfexample_crd()).expect("crd");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let script = dir.path().join("check.py");
    std::fs::write(&script, SCRIPT).expect("script");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(py)
            .arg(&script)
            .arg(&kubeconfig)
            .env("TMPDIR", dir.path())
            .output()
            .expect("python runs")
    })
    .await
    .expect("join");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("python client: ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_kubernetes_client_crud_watch_patch_delete() {
    client_scenario(FakeApiServer::start().await.expect("start")).await;
}

/// The same over HTTPS: the client verifies the fake's certificate with the kubeconfig's
/// `certificate-authority-data`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_kubernetes_client_over_https() {
    let server = FakeApiServer::builder()
        .tls(true)
        .start()
        .await
        .expect("start");
    assert!(server.url().starts_with("https://"));
    client_scenario(server).await;
}

const KOPF_OPERATOR: &str = r#"
import kopf

@kopf.on.create('kopfexamples')
def create_fn(spec, **kwargs):
    return {'message': 'hello world'}

@kopf.on.delete('kopfexamples')
def delete_fn(**kwargs):
    pass
"#;

/// Python Kopf 1.45 (the framework we are compatible with) runs its first example against
/// the fake server: finalizer added with a JSON patch guarded by `test`, status written via
/// `/status`, deletion handled and the finalizer released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_kopf_runs_example_01_against_the_fake_server() {
    use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
    use kube::core::{ApiResource, GroupVersionKind};
    let py = python();
    let server = FakeApiServer::start().await.expect("start");
    server.apply_object(common::kopfexample_crd()).expect("crd");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let script = dir.path().join("example.py");
    std::fs::write(&script, KOPF_OPERATOR).expect("script");
    let log_path = dir.path().join("kopf.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut child = Command::new(&py)
        .args([
            "-m",
            "kopf",
            "run",
            "--standalone",
            "--all-namespaces",
            "--verbose",
        ])
        .arg(&script)
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", dir.path())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("kopf starts");
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &ar);
    // Kopf must be watching before the object appears (so it is a creation, not a resume).
    for _ in 0..100 {
        if server
            .watches()
            .iter()
            .any(|w| w.resource.ends_with("/kopfexamples"))
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let obj: DynamicObject = serde_json::from_value(common::kex("k1")).expect("obj");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create");
    let mut status = serde_json::Value::Null;
    for _ in 0..100 {
        let o = api.get("k1").await.expect("get");
        status = o.data["status"].clone();
        if status["create_fn"]["message"] == "hello world" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        status["create_fn"]["message"],
        "hello world",
        "log: {}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    let o = api.get("k1").await.expect("get");
    assert_eq!(
        o.metadata.finalizers.as_deref(),
        Some(&["kopf.zalando.org/KopfFinalizerMarker".to_string()][..])
    );
    api.delete("k1", &DeleteParams::default())
        .await
        .expect("delete");
    let mut gone = false;
    for _ in 0..100 {
        if api.get_opt("k1").await.expect("get").is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(gone, "Kopf released the finalizer; log:\n{log}");
    assert!(log.contains("Handler 'create_fn' succeeded"), "{log}");
    assert!(log.contains("Handler 'delete_fn' succeeded"), "{log}");
    assert!(!log.contains("Traceback"), "{log}");
    // The finalizer was added with a JSON patch starting with a resourceVersion test.
    let finalizer_patch = server
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH" && r.body.contains("KopfFinalizerMarker"))
        .expect("finalizer patch");
    assert_eq!(finalizer_patch.patch_type, "json");
    assert!(finalizer_patch.body.contains("\"test\""));
}

/// Python Kopf's admission example (its example 17: `kopf.WebhookAutoServer`, Kopf managing
/// the webhook configurations, its validating and mutating handlers without the ones that
/// need a cluster's client certificates). `WebhookAutoServer` first reads the API server's
/// certificate with a TLS handshake to the kubeconfig's host and port (cluster detection,
/// whatever the URL's scheme), then serves with a self-signed certificate it generates (a
/// CA certificate, put in the `caBundle` as is).
const KOPF_ADMISSION: &str = r#"
import re

# oscrypto 1.3.0 (the last release on PyPI; certbuilder and certvalidator use it) reads the
# OpenSSL version with one digit per part and fails on OpenSSL 3.0.10 and later ("Error
# detecting the version of libcrypto"); its fix is unreleased. The same pattern with whole
# numbers, for its import only.
_search = re.search
def _whole_numbers(pattern, string, flags=0):
    if pattern == '\\b(\\d\\.\\d\\.\\d[a-z]*)\\b':
        pattern = '\\b(\\d+\\.\\d+\\.\\d+[a-z]*)\\b'
    return _search(pattern, string, flags)
re.search = _whole_numbers
try:
    import oscrypto.asymmetric
finally:
    re.search = _search

import kopf

@kopf.on.startup()
def config(settings: kopf.OperatorSettings, **_):
    settings.admission.server = kopf.WebhookAutoServer()
    settings.admission.managed = 'auto.kopf.dev'

@kopf.on.validate('kex')
def validate1(spec, dryrun, **_):
    if not dryrun and spec.get('field') == 'wrong':
        raise kopf.AdmissionError("Meh! I don't like it. Change the field.")

@kopf.on.validate('kex', field='spec.field', value='not-allowed')
def validate2(**_):
    raise kopf.AdmissionError("I'm too lazy anyway. Go away!", code=555)

@kopf.on.mutate('kex', labels={'somelabel': 'somevalue'})
def mutate1(patch: kopf.Patch, **_):
    patch.spec['injected'] = 123
"#;

/// Python Kopf's admission example against the fake over plain HTTP (the default) or HTTPS:
/// its cluster detection completes (the plain port answers its TLS handshake too), Kopf's
/// own self-signed certificate is trusted by the fake's webhook client as kube-apiserver
/// trusts it, objects are refused by the validating handlers with their codes, and only the
/// labelled one is mutated.
async fn kopf_admission_example(tls: bool) {
    use kopf_testing::WebhookOutcome;
    use kube::api::{Api, DynamicObject, PostParams};
    use kube::core::{ApiResource, GroupVersionKind};
    let py = match kopf_testing::e2e::python::interpreter(&[
        PACKAGES[0],
        PACKAGES[1],
        "certbuilder==0.14.*",
        "certvalidator==0.11.*",
    ]) {
        Ok(p) => p,
        Err(e) => panic!("{e}\n(to leave the Python tests out: -- --skip python_)"),
    };
    let server = FakeApiServer::builder()
        .tls(tls)
        .start()
        .await
        .expect("start");
    server.apply_object(common::kopfexample_crd()).expect("crd");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let script = dir.path().join("admission.py");
    std::fs::write(&script, KOPF_ADMISSION).expect("script");
    let log_path = dir.path().join("kopf.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut child = Command::new(&py)
        .args([
            "-m",
            "kopf",
            "run",
            "--standalone",
            "--all-namespaces",
            "--verbose",
        ])
        .arg(&script)
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", dir.path())
        .env("TMPDIR", dir.path())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("kopf starts");
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    // Kopf writes both configurations with its certificate in the caBundle.
    let managed = |kind: &str| {
        server.objects().into_iter().find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"] == "auto.kopf.dev"
                && o.pointer("/webhooks/0/clientConfig/caBundle").is_some()
        })
    };
    let mut ready = false;
    for _ in 0..300 {
        if managed("ValidatingWebhookConfiguration").is_some()
            && managed("MutatingWebhookConfiguration").is_some()
        {
            ready = true;
            break;
        }
        if child.try_wait().ok().flatten().is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    if !ready {
        let _ = child.kill();
        let _ = child.wait();
        panic!("Kopf did not configure its webhooks; log:\n{}", read_log());
    }
    let validating = managed("ValidatingWebhookConfiguration").expect("configuration");
    let url = validating
        .pointer("/webhooks/0/clientConfig/url")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_string();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &ar);
    let object = |name: &str, field: &str, labelled: bool| -> DynamicObject {
        let mut o = common::kex(name);
        o["spec"]["field"] = field.into();
        if labelled {
            o["metadata"]["labels"] = serde_json::json!({"somelabel": "somevalue"});
        }
        serde_json::from_value(o).expect("obj")
    };
    let pp = PostParams::default();
    let wrong = api.create(&pp, &object("wrong", "wrong", false)).await;
    let lazy = api.create(&pp, &object("lazy", "not-allowed", false)).await;
    let labelled = api.create(&pp, &object("labelled", "value", true)).await;
    let plain = api.create(&pp, &object("plain", "value", false)).await;
    let _ = child.kill();
    let _ = child.wait();
    let log = read_log();
    let calls = server.webhook_calls();
    let refusal = |result: Result<DynamicObject, kube::Error>| match result {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => {
            panic!("an object was not refused: {other:?}\ncalls: {calls:?}\nlog:\n{log}")
        }
    };
    // `kopf.AdmissionError`'s code is 500 unless given.
    let (code, message) = refusal(wrong);
    assert_eq!(code, 500, "{message}\nlog:\n{log}");
    assert!(
        message.contains("Meh! I don't like it. Change the field."),
        "{message}"
    );
    let (code, message) = refusal(lazy);
    assert_eq!(code, 555, "{message}");
    assert!(
        message.contains("I'm too lazy anyway. Go away!"),
        "{message}"
    );
    let labelled = labelled.unwrap_or_else(|e| panic!("{e}\ncalls: {calls:?}\nlog:\n{log}"));
    assert_eq!(labelled.data["spec"]["injected"], 123, "mutated by Kopf");
    let plain = plain.unwrap_or_else(|e| panic!("{e}\ncalls: {calls:?}\nlog:\n{log}"));
    assert!(plain.data["spec"].get("injected").is_none(), "not labelled");
    assert!(url.starts_with("https://localhost:"), "{url}");
    assert!(
        calls
            .iter()
            .any(|c| matches!(c.outcome, WebhookOutcome::Denied { code: 555, .. })),
        "{calls:?}"
    );
    assert!(
        calls.iter().any(|c| c.outcome == WebhookOutcome::Patched),
        "{calls:?}"
    );
    assert!(
        !calls
            .iter()
            .any(|c| matches!(c.outcome, WebhookOutcome::Failed { .. })),
        "{calls:?}"
    );
    // The detection read the certificate and found no known local cluster.
    assert!(log.contains("Cluster detection failed"), "{log}");
    assert!(!log.contains("Traceback"), "{log}");
}

/// The default server (plain HTTP), as a user starts it: Kopf's cluster detection gets its
/// TLS handshake answered on the plain port (it used to fail there with `SSLError:
/// WRONG_VERSION_NUMBER` and stop the operator).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_kopf_admission_example_on_the_default_plain_http_server() {
    kopf_admission_example(false).await;
}

/// Over HTTPS (`tls(true)`), as on a cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_kopf_admission_webhooks_over_https_with_its_own_certificate() {
    kopf_admission_example(true).await;
}
