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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_kubernetes_client_crud_watch_patch_delete() {
    let py = python();
    let server = FakeApiServer::start().await.expect("start");
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
