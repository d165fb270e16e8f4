//! Peering against the fake API server: the keep-alive on the wire, pauses for higher and
//! same priorities, dead peers removed, blockers that expire, the exit, the modes.

use std::time::{Duration, Instant};

use kopf_core::gate::{Gate, GateState};
use kopf_peering::{PEERING_YAML, Peering, PeeringMode, PeeringSettings, SamePriority, isoformat};
use kopf_testing::{FakeApiServer, RequestRecord};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

const PATH: &str = "/apis/kopf.dev/v1/clusterkopfpeerings/default";

/// A server with the peering resources and their `default` objects.
async fn server() -> FakeApiServer {
    let server = FakeApiServer::start()
        .await
        .expect("the fake server starts");
    server
        .apply_yaml("peering.yaml", PEERING_YAML)
        .expect("the peering resources apply");
    server
}

fn api(server: &FakeApiServer) -> Api<DynamicObject> {
    let ar = kopf_peering::resource(&PeeringSettings::default());
    Api::all_with(server.client(), &ar)
}

/// Another peer's entry, written as a test client (not through peering).
async fn write_entry(server: &FakeApiServer, id: &str, entry: Value) {
    api(server)
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {id: entry}})),
        )
        .await
        .expect("the entry is written");
}

async fn status(server: &FakeApiServer) -> Value {
    api(server)
        .get("default")
        .await
        .expect("the peering object")
        .data
        .get("status")
        .cloned()
        .unwrap_or(Value::Null)
}

fn live_entry(priority: i64, lifetime: u64) -> Value {
    json!({"priority": priority, "lifetime": lifetime, "lastseen": isoformat(jiff::Timestamp::now())})
}

/// A running peering, stopped (and joined) by [`Running::stop`].
struct Running {
    gate: Gate,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), kopf_peering::PeeringError>>,
}

impl Running {
    fn start(server: &FakeApiServer, settings: PeeringSettings) -> Running {
        let (control, gate) = Gate::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let peering = Peering::new(server.client(), settings, control);
        let task = tokio::spawn(peering.run(async move {
            let _ = stopped.await;
        }));
        Running {
            gate,
            stop: Some(stop),
            task,
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("peering stops promptly")
            .expect("joined")
            .expect("peering ends without an error");
    }
}

/// Waits until `check` holds (or fails the test after `within`, saying what).
async fn until(what: &str, within: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {within:?} waiting for {what}");
}

/// Waits until the gate is paused for a reason that contains `needle`; the reason.
async fn paused_for(gate: &Gate, needle: &str, within: Duration) -> String {
    let mut gate = gate.clone();
    let waited = tokio::time::timeout(within, async {
        loop {
            if let GateState::Paused { reason } = gate.state()
                && reason.contains(needle)
            {
                return reason;
            }
            gate.changed().await;
        }
    })
    .await;
    match waited {
        Ok(reason) => reason,
        Err(_) => panic!(
            "not paused for {needle:?} within {within:?}; the gate: {:?}",
            gate.state()
        ),
    }
}

fn patches(server: &FakeApiServer) -> Vec<RequestRecord> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path == PATH)
        .collect()
}

fn settings(id: &str, priority: i64) -> PeeringSettings {
    PeeringSettings::default().identity(id).priority(priority)
}

#[tokio::test]
async fn keepalives_and_the_exit_are_kopfs_patches() {
    let server = server().await;
    let running = Running::start(&server, settings("rs@host/20261122050457/abc", 100));
    until("the first keep-alive", Duration::from_secs(5), async || {
        !patches(&server).is_empty()
    })
    .await;
    let first = patches(&server).remove(0);
    assert_eq!(first.content_type, "application/merge-patch+json");
    // Kopf's body, key for key and in Kopf's order; only the time differs run to run.
    let lastseen = serde_json::from_str::<Value>(&first.body).expect("JSON")["status"]
        ["rs@host/20261122050457/abc"]["lastseen"]
        .as_str()
        .expect("lastseen")
        .to_string();
    assert!(
        kopf_peering::parse_time(&lastseen).is_some() && lastseen.ends_with("+00:00"),
        "{lastseen}"
    );
    assert_eq!(
        first.body.replace(&lastseen, "<lastseen>"),
        r#"{"status":{"rs@host/20261122050457/abc":{"priority":100,"lifetime":60,"lastseen":"<lastseen>"}}}"#
    );
    assert!(running.gate.is_open(), "alone: active");
    running.stop().await;
    let last = patches(&server).pop().expect("the exit's PATCH");
    assert_eq!(
        last.body,
        r#"{"status":{"rs@host/20261122050457/abc":null}}"#
    );
    assert_eq!(status(&server).await, json!({}), "the entry is gone");
}

#[tokio::test]
async fn a_higher_priority_pauses_and_its_removal_resumes() {
    let server = server().await;
    write_entry(&server, "py@laptop", live_entry(200, 60)).await;
    let running = Running::start(&server, settings("rs", 100));
    let mut gate = running.gate.clone();
    let reason = paused_for(&gate, "in favour of", Duration::from_secs(5)).await;
    assert!(
        reason.contains("py@laptop") && reason.contains("priority 200"),
        "{reason}"
    );
    // A lower priority does not block.
    write_entry(&server, "low", live_entry(1, 60)).await;
    write_entry(&server, "py@laptop", Value::Null).await;
    tokio::time::timeout(Duration::from_secs(5), gate.opened())
        .await
        .expect("resumed when the higher priority is gone");
    running.stop().await;
    let left: Vec<String> = status(&server)
        .await
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(
        left,
        vec!["low".to_string()],
        "only the other peer's entry stays"
    );
}

#[tokio::test]
async fn the_same_priority_pauses_everybody_unless_told_otherwise() {
    let server = server().await;
    write_entry(&server, "twin", live_entry(5, 60)).await;
    let strict = Running::start(&server, settings("rs-strict", 5));
    let reason = paused_for(&strict.gate, "same priority", Duration::from_secs(5)).await;
    assert!(
        reason.contains("same priority") && reason.contains("twin"),
        "{reason}"
    );
    strict.stop().await;

    let relaxed = Running::start(
        &server,
        settings("rs-sharded", 5).same_priority(SamePriority::Ignore),
    );
    until(
        "the keep-alive of the relaxed one",
        Duration::from_secs(5),
        async || status(&server).await.get("rs-sharded").is_some(),
    )
    .await;
    // Its own keep-alive came back through the watch: it has decided, and stays active.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(relaxed.gate.state(), GateState::Open);
    relaxed.stop().await;
}

#[tokio::test]
async fn a_blocker_that_stops_writing_expires_and_is_removed() {
    let server = server().await;
    // Alive for 2 s by its clock and by ours, then silent.
    write_entry(&server, "crashed", live_entry(200, 2)).await;
    let running = Running::start(&server, settings("rs", 100));
    let mut gate = running.gate.clone();
    paused_for(&gate, "crashed", Duration::from_secs(5)).await;
    let paused_at = Instant::now();
    // Nothing else happens: the recheck at its deadline touches our entry, the watch brings
    // the object back, and the blocker is dead by both rules.
    tokio::time::timeout(Duration::from_secs(8), gate.opened())
        .await
        .expect("resumed once the blocker expired");
    assert!(
        paused_at.elapsed() < Duration::from_secs(6),
        "resumed {:?} after the pause",
        paused_at.elapsed()
    );
    until(
        "the dead entry removed",
        Duration::from_secs(5),
        async || status(&server).await.get("crashed").is_none(),
    )
    .await;
    let removal = patches(&server)
        .into_iter()
        .find(|r| r.body.contains(r#""crashed":null"#))
        .expect("a PATCH removed the dead peer");
    assert_eq!(removal.body, r#"{"status":{"crashed":null}}"#);
    running.stop().await;
}

#[tokio::test]
async fn an_entry_that_keeps_changing_is_alive_whatever_its_clock_says() {
    let server = server().await;
    // A peer whose clock is an hour behind: dead by its clock, but it keeps writing.
    let behind = || {
        let t = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
        json!({"priority": 200, "lifetime": 2, "lastseen": isoformat(t)})
    };
    write_entry(&server, "slow-clock", behind()).await;
    let running = Running::start(&server, settings("rs", 100));
    paused_for(&running.gate, "slow-clock", Duration::from_secs(5)).await;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        write_entry(&server, "slow-clock", behind()).await;
        assert!(!running.gate.is_open(), "a peer that keeps writing blocks");
        assert!(
            status(&server).await.get("slow-clock").is_some(),
            "a peer that keeps writing is never removed"
        );
    }
    running.stop().await;
}

#[tokio::test]
async fn auto_mode_without_the_resources_is_standalone() {
    let server = FakeApiServer::start().await.expect("start");
    let (control, gate) = Gate::channel();
    let peering = Peering::new(server.client(), settings("rs", 0), control);
    tokio::time::timeout(Duration::from_secs(5), peering.run(std::future::pending()))
        .await
        .expect("returns at once")
        .expect("no error");
    assert!(gate.is_open());
    assert!(
        server.requests().iter().all(|r| r.method == "GET"),
        "only discovery: {:?}",
        server
            .requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn mandatory_peering_waits_for_its_object() {
    let server = FakeApiServer::start().await.expect("start");
    // The resources without their objects.
    let crds: Vec<&str> = PEERING_YAML.split("\n---\n").take(2).collect();
    server
        .apply_yaml("crds", &crds.join("\n---\n"))
        .expect("the CRDs apply");
    let running = Running::start(
        &server,
        settings("rs", 0).mode(PeeringMode::Mandatory).name("team"),
    );
    let mut gate = running.gate.clone();
    let reason = paused_for(&gate, "does not exist", Duration::from_secs(5)).await;
    assert!(
        reason.contains("\"team\"") && reason.contains("does not exist"),
        "{reason}"
    );
    let ar: ApiResource = kopf_peering::resource(&PeeringSettings::default());
    server
        .apply_object(
            json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": {"name": "team"}}),
        )
        .expect("the object is created");
    tokio::time::timeout(Duration::from_secs(5), gate.opened())
        .await
        .expect("active once the object exists");
    running.stop().await;
}

#[tokio::test]
async fn freeze_peers_and_resume_by_hand() {
    let server = server().await;
    let running = Running::start(&server, settings("rs", 100));
    until(
        "the operator's keep-alive",
        Duration::from_secs(5),
        async || status(&server).await.get("rs").is_some(),
    )
    .await;
    let person = PeeringSettings::default()
        .identity("ops@laptop")
        .priority(200);
    kopf_peering::freeze(&server.client(), &person, Duration::from_secs(600))
        .await
        .expect("freeze");
    let frozen = patches(&server)
        .into_iter()
        .find(|r| r.body.contains("ops@laptop"))
        .expect("the freeze's PATCH");
    assert!(
        frozen
            .body
            .starts_with(r#"{"status":{"ops@laptop":{"lastseen":"#)
            || frozen.body.contains(r#""priority":200"#),
        "{}",
        frozen.body
    );
    let mut gate = running.gate.clone();
    let reason = paused_for(&gate, "in favour of", Duration::from_secs(5)).await;
    assert!(reason.contains("ops@laptop"), "{reason}");

    let listed = kopf_peering::peers(&server.client(), &PeeringSettings::default())
        .await
        .expect("peers");
    let ids: Vec<(&str, bool)> = listed
        .iter()
        .map(|l| (l.identity.as_str(), l.alive))
        .collect();
    assert_eq!(
        ids,
        vec![("ops@laptop", true), ("rs", true)],
        "highest priority first"
    );

    kopf_peering::resume(&server.client(), &person)
        .await
        .expect("resume");
    tokio::time::timeout(Duration::from_secs(5), gate.opened())
        .await
        .expect("active again after resume");
    running.stop().await;
    assert!(
        kopf_peering::peers(&server.client(), &PeeringSettings::default())
            .await
            .expect("peers")
            .is_empty()
    );
}
