//! Python Kopf 1.45 and kopf-rs in one peering, on the fake API server: they read each
//! other's entries, and pause for each other by priority.
//!
//! Python comes from `KOPF_TEST_PYTHON` or a venv made on first use under the target
//! directory (see `kopf_testing::e2e::python`); to leave this test out on purpose:
//! `cargo test -- --skip python_`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kopf_core::gate::Gate;
use kopf_peering::{PEERING_YAML, Peering, PeeringSettings};
use kopf_testing::FakeApiServer;
use serde_json::Value;

const PATH: &str = "/apis/kopf.dev/v1/clusterkopfpeerings/default";

/// A Python Kopf operator with one handler (on ConfigMaps: peering is what is tested).
const OPERATOR: &str = r#"
import kopf

@kopf.on.create('configmaps')
def create_fn(**_):
    return {'message': 'hello'}
"#;

fn python() -> std::path::PathBuf {
    match kopf_testing::e2e::python::interpreter(&["kopf==1.45.*"]) {
        Ok(p) => p,
        Err(e) => panic!(
            "{e}\n(to leave the Python tests out on purpose: cargo test --workspace -- --skip python_)"
        ),
    }
}

/// A child process killed when dropped (a failing assertion must not leave Kopf running).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kopf(python: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(python);
    cmd.args(["-m", "kopf"])
        .args(args)
        .env("KUBECONFIG", dir.join("kubeconfig"))
        .env("HOME", dir)
        .env_remove("POD_ID");
    cmd
}

/// The identities in the peering `default`.
async fn peers(server: &FakeApiServer) -> Vec<String> {
    kopf_peering::peers(&server.client(), &PeeringSettings::default())
        .await
        .expect("the peering object")
        .into_iter()
        .map(|l| l.identity)
        .collect()
}

async fn until(what: &str, within: Duration, log: &Path, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "timed out after {within:?} waiting for {what}; Kopf's log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// A kopf-rs peering running until its sender is dropped or fired.
fn start_rs(
    server: &FakeApiServer,
    id: &str,
    priority: i64,
) -> (
    Gate,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), kopf_peering::PeeringError>>,
) {
    let (control, gate) = Gate::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let settings = PeeringSettings::default().identity(id).priority(priority);
    let task = tokio::spawn(
        Peering::new(server.client(), settings, control).run(async move {
            let _ = stopped.await;
        }),
    );
    (gate, stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_kopf_and_kopf_rs_pause_for_each_other_by_priority() {
    let python = python();
    let server = FakeApiServer::start().await.expect("start");
    server
        .apply_yaml("peering.yaml", PEERING_YAML)
        .expect("the peering resources");
    let dir = tempfile::tempdir().expect("tempdir");
    server
        .write_kubeconfig(dir.path().join("kubeconfig"))
        .expect("kubeconfig");
    std::fs::write(dir.path().join("operator.py"), OPERATOR).expect("script");
    let log_path = dir.path().join("kopf.log");
    let log = std::fs::File::create(&log_path).expect("log");
    let _kopf = Killed(
        kopf(
            &python,
            dir.path(),
            &["run", "--all-namespaces", "--verbose", "--priority", "0"],
        )
        .arg(dir.path().join("operator.py"))
        .env("POD_ID", "python-kopf")
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("Python Kopf starts"),
    );
    let kopf_log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // Python's keep-alive, as Python writes it.
    until(
        "Python Kopf's keep-alive",
        Duration::from_secs(60),
        &log_path,
        async || peers(&server).await.contains(&"python-kopf".to_string()),
    )
    .await;
    let python_patch = server
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH" && r.path == PATH && r.body.contains("python-kopf"))
        .expect("Python's keep-alive PATCH");

    // kopf-rs at a higher priority: active; Python pauses in its favour.
    let (gate, stop, task) = start_rs(&server, "kopf-rs", 100);
    until(
        "Python Kopf pausing for kopf-rs",
        Duration::from_secs(20),
        &log_path,
        async || kopf_log().contains("Pausing operations in favour of"),
    )
    .await;
    let log_now = kopf_log();
    let line = log_now
        .lines()
        .find(|l| l.contains("Pausing operations in favour of"))
        .unwrap_or_default();
    assert!(
        line.contains("kopf-rs") && line.contains("priority=100"),
        "{line}"
    );
    assert!(
        gate.is_open(),
        "kopf-rs does not pause for a lower priority"
    );

    // The two keep-alives are the same PATCH, but for Python's JSON spacing.
    let ours = server
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH" && r.path == PATH && r.body.contains("kopf-rs"))
        .expect("kopf-rs's keep-alive PATCH");
    assert_eq!(ours.content_type, python_patch.content_type);
    let normal = |body: &str, id: &str| {
        let lastseen = serde_json::from_str::<Value>(body).expect("JSON")["status"][id]["lastseen"]
            .as_str()
            .expect("lastseen")
            .to_string();
        assert!(lastseen.ends_with("+00:00"), "{lastseen}");
        body.replace(&lastseen, "<lastseen>")
            .replace(", ", ",")
            .replace(": ", ":")
            .replace(id, "<id>")
    };
    assert_eq!(
        normal(&python_patch.body, "python-kopf"),
        r#"{"status":{"<id>":{"priority":0,"lifetime":60,"lastseen":"<lastseen>"}}}"#,
        "Python Kopf's keep-alive"
    );
    assert_eq!(
        normal(&ours.body, "kopf-rs"),
        r#"{"status":{"<id>":{"priority":100,"lifetime":60,"lastseen":"<lastseen>"}}}"#,
        "kopf-rs's keep-alive"
    );

    // kopf-rs exits (its entry removed): Python resumes.
    let _ = stop.send(());
    task.await.expect("joined").expect("peering ends cleanly");
    until(
        "Python Kopf resuming",
        Duration::from_secs(20),
        &log_path,
        async || kopf_log().contains("Resuming operations after the pause"),
    )
    .await;

    // Python's `kopf freeze` at a higher priority pauses kopf-rs, until it expires.
    let (gate, stop, task) = start_rs(&server, "kopf-rs", 100);
    let frozen = kopf(
        &python,
        dir.path(),
        &[
            "freeze",
            "--all-namespaces",
            "--peering",
            "default",
            "--lifetime",
            "3",
            "--priority",
            "200",
        ],
    )
    .stdout(Stdio::null())
    .output()
    .expect("kopf freeze runs");
    assert!(
        frozen.status.success(),
        "kopf freeze: {}",
        String::from_utf8_lossy(&frozen.stderr)
    );
    let mut watching = gate.clone();
    let reason = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let kopf_core::gate::GateState::Paused { reason } = watching.state()
                && reason.contains("in favour of")
            {
                return reason;
            }
            watching.changed().await;
        }
    })
    .await
    .expect("kopf-rs pauses for Python's freeze");
    assert!(reason.contains("priority 200"), "{reason}");
    tokio::time::timeout(Duration::from_secs(15), watching.opened())
        .await
        .expect("kopf-rs resumes once the freeze expired");
    let _ = stop.send(());
    task.await.expect("joined").expect("peering ends cleanly");
    assert!(
        !kopf_log().contains("Traceback"),
        "Python Kopf failed:\n{}",
        kopf_log()
    );
}
