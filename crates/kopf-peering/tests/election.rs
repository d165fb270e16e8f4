//! Leader election against the fake API server, with scaled timings (lease 2 s, renew 1 s,
//! retry 0.2 s): one leader at a time, take-over after a kill, hand-over after a graceful
//! stop, a partitioned leader that stands by before its lease can be taken, a lost race,
//! and the metrics.

mod common;

use std::time::{Duration, Instant};

use kopf_core::gate::{Gate, GateState};
use kopf_core::metrics::Metrics;
use kopf_peering::{LeaderElection, LeaderElector, Leadership};
use kopf_testing::{FakeApiServer, FaultRule, RequestPattern};
use serde_json::Value;
use tokio::sync::watch;

const LEASE: Duration = Duration::from_secs(2);
const RENEW: Duration = Duration::from_secs(1);
const RETRY: Duration = Duration::from_millis(200);

/// One replica's elector, running until stopped or killed.
struct Replica {
    identity: String,
    gate: Gate,
    leadership: watch::Receiver<Leadership>,
    metrics: Metrics,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), kopf_peering::PeeringError>>,
}

impl Replica {
    fn start(server: &FakeApiServer, identity: &str) -> Replica {
        let settings = LeaderElection::new("op-leader")
            .namespace("default")
            .identity(identity)
            .timings(LEASE, RENEW, RETRY);
        let (control, gate) = Gate::channel();
        let metrics = Metrics::new();
        let elector = LeaderElector::new(common::client_of(server, identity), settings, control)
            .expect("valid settings")
            .metrics(metrics.clone());
        let leadership = elector.leadership();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(elector.run(async move {
            let _ = stopped.await;
        }));
        Replica {
            identity: identity.into(),
            gate,
            leadership,
            metrics,
            stop: Some(stop),
            task,
        }
    }

    fn leads(&self) -> bool {
        *self.leadership.borrow() == Leadership::Leading
    }

    /// A graceful stop: the lease is released.
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task
            .await
            .expect("joined")
            .expect("the elector ends cleanly");
    }

    /// As SIGKILL: nothing more is sent, nothing is released.
    fn kill(self) {
        self.task.abort();
    }
}

async fn lease(server: &FakeApiServer) -> Value {
    common::lease_spec(server, "op-leader")
        .await
        .expect("the lease")
}

/// Waits until one of `replicas` leads; its index.
async fn leader_among(replicas: &[&Replica], within: Duration) -> usize {
    let start = Instant::now();
    loop {
        if let Some(i) = replicas.iter().position(|r| r.leads()) {
            return i;
        }
        assert!(
            start.elapsed() < within,
            "nobody leads after {:?}",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn one_replica_of_three_leads_and_the_others_stand_by() {
    let server = FakeApiServer::start()
        .await
        .expect("the fake server starts");
    let replicas: Vec<Replica> = ["a", "b", "c"]
        .iter()
        .map(|id| Replica::start(&server, id))
        .collect();
    let all: Vec<&Replica> = replicas.iter().collect();
    let leader = leader_among(&all, Duration::from_secs(5)).await;
    // For 3 lease durations, sampled: never two leaders, the same one all along, and the
    // gates agree with the leadership.
    let start = Instant::now();
    while start.elapsed() < 3 * LEASE {
        let leading: Vec<&str> = replicas
            .iter()
            .filter(|r| r.leads())
            .map(|r| r.identity.as_str())
            .collect();
        assert_eq!(leading, [replicas[leader].identity.as_str()]);
        for (i, r) in replicas.iter().enumerate() {
            if i != leader {
                assert!(
                    matches!(r.gate.state(), GateState::Standby { .. }),
                    "{}: {:?}",
                    r.identity,
                    r.gate.state()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(replicas[leader].gate.is_open());
    let spec = lease(&server).await;
    assert_eq!(spec["holderIdentity"], replicas[leader].identity.as_str());
    assert_eq!(spec["leaseDurationSeconds"], 2);
    assert_eq!(spec["leaseTransitions"], 0, "{spec}");
    // Renewals: about one PUT per retry period, all from the leader.
    let puts: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path.contains("/leases/"))
        .collect();
    assert!(
        puts.iter().all(|r| r
            .user_agent
            .ends_with(&format!("/{}", replicas[leader].identity))),
        "only the leader writes: {:?}",
        puts.iter().map(|r| &r.user_agent).collect::<Vec<_>>()
    );
    let expected = (3 * LEASE).as_secs_f64() / RETRY.as_secs_f64();
    assert!(
        (puts.len() as f64) >= expected * 0.5 && (puts.len() as f64) <= expected * 1.2,
        "{} renewals in {:?} at a retry period of {RETRY:?}",
        puts.len(),
        3 * LEASE
    );
    let text = replicas[leader].metrics.encode();
    assert!(
        text.contains(r#"kopf_leader_is_leader{lease="default/op-leader"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"kopf_leader_transitions_total{lease="default/op-leader"} 1"#),
        "{text}"
    );
    for r in replicas {
        r.stop().await;
    }
}

#[tokio::test]
async fn a_killed_leader_is_replaced_after_the_lease_duration() {
    let server = FakeApiServer::start()
        .await
        .expect("the fake server starts");
    let a = Replica::start(&server, "a");
    leader_among(&[&a], Duration::from_secs(5)).await;
    let b = Replica::start(&server, "b");
    let c = Replica::start(&server, "c");
    tokio::time::sleep(4 * RETRY).await;
    assert!(!b.leads() && !c.leads());
    let killed = Instant::now();
    a.kill();
    let next = leader_among(&[&b, &c], LEASE + 2 * RETRY + Duration::from_secs(2)).await;
    let took = killed.elapsed();
    // The standbys saw the record change last at most one retry period (plus jitter)
    // before the kill.
    assert!(
        took >= LEASE - RETRY.mul_f64(1.3),
        "taken over after {took:?}: before the lease could expire"
    );
    assert!(
        took < LEASE + 2 * RETRY + Duration::from_millis(500),
        "taken over after {took:?}: later than lease duration + 2 × retry period"
    );
    let spec = lease(&server).await;
    assert_eq!(spec["leaseTransitions"], 1, "{spec}");
    assert_eq!(spec["holderIdentity"], ["b", "c"][next]);
    b.stop().await;
    c.stop().await;
}

#[tokio::test]
async fn a_graceful_stop_releases_the_lease_and_a_standby_leads_within_a_retry_period() {
    let server = FakeApiServer::start()
        .await
        .expect("the fake server starts");
    let a = Replica::start(&server, "a");
    leader_among(&[&a], Duration::from_secs(5)).await;
    let b = Replica::start(&server, "b");
    tokio::time::sleep(3 * RETRY).await;
    assert!(!b.leads());
    let stopped = Instant::now();
    a.stop().await;
    let released = lease(&server).await;
    // Released, unless b was already quicker.
    if released["holderIdentity"] != "b" {
        assert_eq!(released["holderIdentity"], "", "{released}");
        assert_eq!(released["leaseDurationSeconds"], 1, "{released}");
    }
    leader_among(&[&b], RETRY * 3).await;
    let took = stopped.elapsed();
    assert!(
        took < RETRY.mul_f64(1.2) + Duration::from_millis(300),
        "handed over after {took:?}"
    );
    assert_eq!(lease(&server).await["leaseTransitions"], 1);
    b.stop().await;
}

#[tokio::test]
async fn a_partitioned_leader_stands_by_before_its_lease_can_be_taken() {
    let server = FakeApiServer::start()
        .await
        .expect("the fake server starts");
    let a = Replica::start(&server, "a");
    leader_among(&[&a], Duration::from_secs(5)).await;
    let b = Replica::start(&server, "b");
    tokio::time::sleep(3 * RETRY).await;
    // From now on, every request of a is answered 503; b is not affected.
    let partitioned = Instant::now();
    server.inject_fault(FaultRule {
        count: None,
        ..FaultRule::new(RequestPattern::any().user_agent("test/a"), 503, 1)
    });
    let mut demoted = None;
    let mut taken = None;
    while taken.is_none() {
        if demoted.is_none() && !a.leads() {
            demoted = Some(partitioned.elapsed());
            assert!(
                matches!(a.gate.state(), GateState::Standby { .. }),
                "the gate closes with the leadership: {:?}",
                a.gate.state()
            );
        }
        if b.leads() {
            taken = Some(partitioned.elapsed());
            assert!(
                !a.leads() && !a.gate.is_open(),
                "b leads while a still acts"
            );
        }
        assert!(
            partitioned.elapsed() < LEASE + Duration::from_secs(3),
            "b never took over"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (demoted, taken) = (demoted.expect("a stood by"), taken.expect("b leads"));
    assert!(
        demoted <= RENEW + RETRY.mul_f64(1.5),
        "a stood by {demoted:?} after the partition (renew deadline {RENEW:?})"
    );
    assert!(
        taken >= LEASE - RETRY.mul_f64(1.3),
        "b took over after {taken:?}"
    );
    assert!(demoted < taken, "{demoted:?} < {taken:?}");
    let failures = a.metrics.encode();
    assert!(
        failures.contains(r#"kopf_leader_renew_failures_total{lease="default/op-leader"}"#)
            && failures.contains(r#"kopf_leader_is_leader{lease="default/op-leader"} 0"#),
        "{failures}"
    );
    // Healed: a stays on standby behind b.
    server.clear_faults();
    tokio::time::sleep(5 * RETRY).await;
    assert!(b.leads() && !a.leads());
    a.kill();
    b.stop().await;
}

#[tokio::test]
async fn of_two_candidates_racing_for_a_free_lease_one_wins() {
    let server = FakeApiServer::start()
        .await
        .expect("the fake server starts");
    for round in 0..3 {
        let a = Replica::start(&server, &format!("a{round}"));
        let b = Replica::start(&server, &format!("b{round}"));
        let all = [&a, &b];
        leader_among(&all, Duration::from_secs(5)).await;
        tokio::time::sleep(5 * RETRY).await;
        assert_eq!(
            all.iter().filter(|r| r.leads()).count(),
            1,
            "round {round}: exactly one leads"
        );
        a.stop().await;
        b.stop().await;
    }
    // The creation race of the first round and the take-over races later: 409s happened or
    // not, but the lease always names one holder, and the last stop released it.
    assert_eq!(lease(&server).await["holderIdentity"], "");
}
