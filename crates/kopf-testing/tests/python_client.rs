//! Compatibility: the Python `kubernetes` client against the fake API server.
//!
//! Uses the interpreter in `KOPF_TEST_PYTHON` (`.ci/run` makes a venv with the client),
//! else `python3` if it can import `kubernetes`. Without one the test fails saying so,
//! unless `KOPF_SKIP_PYTHON_TESTS=1` is set (then it prints that it is skipped).

mod common;

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

fn python() -> Option<String> {
    if let Ok(p) = std::env::var("KOPF_TEST_PYTHON") {
        return Some(p);
    }
    let ok = Command::new("python3")
        .args(["-c", "import kubernetes"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then(|| "python3".to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_kubernetes_client_crud_watch_patch_delete() {
    let Some(py) = python() else {
        if std::env::var("KOPF_SKIP_PYTHON_TESTS").as_deref() == Ok("1") {
            eprintln!(
                "SKIPPED: no Python with the `kubernetes` package (KOPF_SKIP_PYTHON_TESTS=1)"
            );
            return;
        }
        panic!(
            "no Python with the `kubernetes` package: set KOPF_TEST_PYTHON to one (`.ci/run` makes a venv), or set KOPF_SKIP_PYTHON_TESTS=1"
        );
    };
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
    let Some(py) = python() else {
        if std::env::var("KOPF_SKIP_PYTHON_TESTS").as_deref() == Ok("1") {
            eprintln!(
                "SKIPPED: no Python with the `kubernetes` package (KOPF_SKIP_PYTHON_TESTS=1)"
            );
            return;
        }
        panic!(
            "no Python with the `kubernetes` package: set KOPF_TEST_PYTHON (`.ci/run` makes a venv), or set KOPF_SKIP_PYTHON_TESTS=1"
        );
    };
    let has_kopf = Command::new(&py)
        .args(["-c", "import kopf"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_kopf {
        if std::env::var("KOPF_SKIP_PYTHON_TESTS").as_deref() == Ok("1") {
            eprintln!("SKIPPED: {py} has no `kopf` package (KOPF_SKIP_PYTHON_TESTS=1)");
            return;
        }
        panic!(
            "{py} has no `kopf` package: `pip install kopf` into it, or set KOPF_SKIP_PYTHON_TESTS=1"
        );
    }
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
