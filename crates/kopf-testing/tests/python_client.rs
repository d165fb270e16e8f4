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
