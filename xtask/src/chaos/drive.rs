//! The chaos phase: the planned creations, updates and deletions, kills and faults, each
//! driven at its moment and recorded in the timeline.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kopf_testing::{FakeApiServer, FaultRule, RequestPattern};
use kube::api::{Api, DeleteParams, DynamicObject};
use serde_json::{Value, json};

use super::converge::POLL;
use super::evidence::{Timeline, now_micros};
use super::plan::{Action, Endpoint, Fault, NAMESPACE, Plan, RESOURCE};
use super::supervisor::Supervisor;

/// Sleeps until `at` after `started`.
pub(super) async fn sleep_until(started: Instant, at: Duration) {
    tokio::time::sleep_until((started + at).into()).await;
}

/// The objects' creations, updates and deletions, at their planned moments.
pub(super) async fn drive_load(
    plan: &Plan,
    server: &FakeApiServer,
    api: &Api<DynamicObject>,
    timeline: &RefCell<Timeline>,
    started: Instant,
) -> Result<()> {
    let mut last_report = Instant::now();
    for (done, op) in plan.ops.iter().enumerate() {
        sleep_until(started, op.at).await;
        let object = &plan.objects[op.object];
        let body = |value: i64| {
            json!({
                "apiVersion": "kopf.dev/v1",
                "kind": "KopfExample",
                "metadata": {"name": object.name, "namespace": NAMESPACE},
                "spec": {"value": value},
            })
        };
        match op.action {
            Action::Create(value) => match server.apply_object(body(value)) {
                Ok(stored) => {
                    let uid = stored
                        .pointer("/metadata/uid")
                        .and_then(Value::as_str)
                        .context("a created object without a uid")?;
                    timeline
                        .borrow_mut()
                        .uids
                        .insert(object.name.clone(), uid.to_string());
                }
                Err(e) => fail_op(timeline, format!("creating {}: {e}", object.name)),
            },
            Action::Update(value) => {
                let Some(uid) = timeline.borrow().uids.get(&object.name).cloned() else {
                    continue; // its creation failed (recorded)
                };
                match server.apply_object(body(value)) {
                    Ok(stored)
                        if stored.pointer("/metadata/uid").and_then(Value::as_str)
                            == Some(&uid) =>
                    {
                        timeline.borrow_mut().updated.push((op.object, value));
                    }
                    Ok(_) => bail!(
                        "updating {} re-created it: the plan deleted it too early",
                        object.name
                    ),
                    Err(e) => fail_op(
                        timeline,
                        format!("updating {} to {value}: {e}", object.name),
                    ),
                }
            }
            Action::Delete => {
                if !timeline.borrow().uids.contains_key(&object.name) {
                    continue;
                }
                match delete(api, &object.name).await {
                    Ok(()) => timeline.borrow_mut().deleted.push(op.object),
                    Err(e) => fail_op(timeline, format!("deleting {}: {e:#}", object.name)),
                }
            }
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            let t = timeline.borrow();
            println!(
                "chaos: {:>5.1} s: {}/{} operations, {} kills, {} faults",
                started.elapsed().as_secs_f64(),
                done + 1,
                plan.ops.len(),
                t.kills.len(),
                t.fault_kinds.values().sum::<usize>()
            );
        }
    }
    Ok(())
}

/// Records a failed operation of the load.
pub(super) fn fail_op(timeline: &RefCell<Timeline>, text: String) {
    println!("chaos: warning: {text}");
    timeline.borrow_mut().failed_ops.push((now_micros(), text));
}

/// Deletes an object over HTTP, retrying transient failures a few times.
pub(super) async fn delete(api: &Api<DynamicObject>, name: &str) -> Result<()> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => bail!("it is already gone"),
            Err(e) if attempt < 5 => {
                println!("chaos: deleting {name} failed ({e}); again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The kills at their planned moments, each of the replica it aims at (with several: the
/// leader, or another), restarted at once or after its pause; between them, and until the
/// load and the faults are done, a process that exited by itself is recorded and restarted.
pub(super) async fn drive_kills(
    plan: &Plan,
    operator: &mut Supervisor,
    timeline: &RefCell<Timeline>,
    started: Instant,
    finished: &Cell<usize>,
) -> Result<()> {
    for kill in &plan.kills {
        while started.elapsed() < kill.at {
            operator.check(timeline).await?;
            tokio::time::sleep(POLL.min(kill.at.saturating_sub(started.elapsed()))).await;
        }
        let slot = operator.target(kill);
        operator.kill(slot, timeline).await?;
        if !kill.pause.is_zero() {
            tokio::time::sleep(kill.pause).await;
        }
        operator.start(slot, timeline)?;
    }
    while finished.get() < 2 || started.elapsed() < plan.duration {
        operator.check(timeline).await?;
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Records an injected fault.
pub(super) fn record_fault(timeline: &RefCell<Timeline>, text: String) {
    timeline.borrow_mut().faults.push((now_micros(), text));
}

/// The faults at their planned moments.
pub(super) async fn drive_faults(
    plan: &Plan,
    server: &FakeApiServer,
    timeline: &RefCell<Timeline>,
    started: Instant,
) {
    let patches = || RequestPattern::any().verb("patch").resource(RESOURCE);
    for f in &plan.faults {
        sleep_until(started, f.at).await;
        record_fault(timeline, f.fault.to_string());
        *timeline
            .borrow_mut()
            .fault_kinds
            .entry(f.fault.kind())
            .or_default() += 1;
        match f.fault {
            Fault::Error {
                code,
                endpoint,
                count,
            } => {
                let pattern = match endpoint {
                    Endpoint::Object => patches().subresource(""),
                    Endpoint::Status => patches().subresource("status"),
                };
                server.inject_fault(FaultRule::new(pattern, code, count));
            }
            Fault::Throttle { count } => {
                server.inject_fault(FaultRule::new(patches(), 429, count).retry_after(1));
            }
            Fault::Latency { millis, window } => {
                server.add_latency(patches(), Duration::from_millis(millis));
                tokio::time::sleep(window).await;
                // The fake server removes delays only all together, with the other faults.
                server.clear_faults();
                record_fault(timeline, "latency over (all faults cleared)".into());
            }
            Fault::ExpireWatch => server.expire_next_watch(Some(RESOURCE)),
            Fault::CloseWatches => server.close_watches(Some(RESOURCE)),
        }
    }
}
