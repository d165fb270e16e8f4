//! Shard coordination against the fake API server, with scaled timings (lease 2 s, renew
//! 1 s, retry 0.2 s): a range given up is released only after the engines acknowledge it;
//! a partitioned replica drops its ranges before another can take them; a replica of
//! another shard count waits for the old count's leases to expire.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kopf_core::gate::{Gate, GateState};
use kopf_core::shards::{ScopeControl, ScopeObserver};
use kopf_peering::{ShardCoordinator, Sharding};
use kopf_testing::{FakeApiServer, FaultRule, RequestPattern};

const LEASE: Duration = Duration::from_secs(2);
const RENEW: Duration = Duration::from_secs(1);
const RETRY: Duration = Duration::from_millis(200);

/// One replica's coordinator, and an engine's view of its scope.
struct Replica {
    scope: ScopeControl,
    observer: ScopeObserver,
    gate: Gate,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), kopf_peering::PeeringError>>,
}

impl Replica {
    fn start(server: &FakeApiServer, who: &str, count: u32) -> Replica {
        let settings = Sharding::new("g", count)
            .namespace("default")
            .identity(who)
            .timings(LEASE, RENEW, RETRY);
        let scope = ScopeControl::new(count);
        let observer = scope.observer();
        let (control, gate) = Gate::channel();
        let coordinator = ShardCoordinator::new(
            common::client_of(server, who),
            settings,
            scope.clone(),
            control,
        )
        .expect("valid settings");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(coordinator.run(async move {
            let _ = stopped.await;
        }));
        Replica {
            scope,
            observer,
            gate,
            stop: Some(stop),
            task,
        }
    }

    fn held(&self) -> BTreeSet<u32> {
        self.scope.scope().held
    }

    /// The engine adopts whatever the scope is now.
    fn ack(&self) {
        self.observer.ack(self.observer.scope().epoch);
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.expect("joined").expect("ends cleanly");
    }
}

async fn holder(server: &FakeApiServer, name: &str) -> Option<String> {
    common::lease_spec(server, name).await?["holderIdentity"]
        .as_str()
        .map(str::to_string)
}

async fn until(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < within, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_range_given_up_is_released_only_once_the_engines_stopped_its_work() {
    let server = FakeApiServer::start()
        .await
        .expect("the fake server starts");
    let a = Replica::start(&server, "a", 2);
    until("a serves both ranges", Duration::from_secs(3), || {
        a.held().len() == 2
    })
    .await;
    assert!(a.gate.is_open());
    a.ack();
    let b = Replica::start(&server, "b", 2);
    // a gives one range up (out of its scope) but its engine has not adopted that yet.
    until("a gives a range up", Duration::from_secs(3), || {
        a.held().len() == 1
    })
    .await;
    let given: u32 = 1 - *a.held().iter().next().expect("one range");
    let name = format!("g-2-{given}");
    tokio::time::sleep(5 * RETRY).await;
    assert_eq!(
        holder(&server, &name).await.as_deref(),
        Some("a"),
        "not released before the engine is done with it"
    );
    assert!(b.held().is_empty(), "b waits");
    a.ack();
    until("b serves the range", Duration::from_secs(3), || {
        b.held() == BTreeSet::from([given])
    })
    .await;
    assert_eq!(holder(&server, &name).await.as_deref(), Some("b"));
    b.ack();
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_partitioned_replica_drops_its_ranges_before_another_can_take_them() {
    let server = FakeApiServer::start()
        .await
        .expect("the fake server starts");
    let a = Replica::start(&server, "a", 2);
    let b = Replica::start(&server, "b", 2);
    until("one range each", Duration::from_secs(5), || {
        a.ack();
        b.ack();
        a.held().len() == 1 && b.held().len() == 1
    })
    .await;
    server.inject_fault(FaultRule {
        count: None,
        ..FaultRule::new(RequestPattern::any().user_agent("test/a"), 503, 1)
    });
    let cut = Instant::now();
    let mut dropped = None;
    while b.held().len() < 2 {
        b.ack();
        if dropped.is_none() && a.held().is_empty() {
            dropped = Some(cut.elapsed());
            assert!(
                matches!(a.gate.state(), GateState::Paused { .. }),
                "{:?}",
                a.gate.state()
            );
        }
        assert!(
            cut.elapsed() < LEASE + Duration::from_secs(3),
            "b never took over"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let taken = cut.elapsed();
    let dropped = dropped.expect("a dropped its range before b took it");
    assert!(
        dropped <= RENEW + RETRY.mul_f64(1.5),
        "dropped after {dropped:?}"
    );
    assert!(taken >= LEASE - RETRY.mul_f64(1.3), "taken after {taken:?}");
    server.clear_faults();
    a.task.abort();
    b.stop().await;
}

#[tokio::test]
async fn another_shard_count_waits_for_the_old_leases_to_go() {
    let server = FakeApiServer::start()
        .await
        .expect("the fake server starts");
    let old = Replica::start(&server, "old", 2);
    until("the old count serves", Duration::from_secs(3), || {
        old.ack();
        old.held().len() == 2
    })
    .await;
    let new = Replica::start(&server, "new", 3);
    tokio::time::sleep(LEASE).await;
    assert!(
        new.held().is_empty(),
        "no range of 3 while ranges of 2 are live"
    );
    old.stop().await;
    until("the new count serves", Duration::from_secs(3), || {
        new.ack();
        new.held().len() == 3
    })
    .await;
    new.stop().await;
}
