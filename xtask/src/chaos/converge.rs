//! The quiet phase and what it leaves: waiting until every object converged, then gathering
//! the evidence (objects, handler log, request log, timeline) for the checks.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kopf_testing::FakeApiServer;
use serde_json::Value;

use super::checks;
use super::evidence::{Evidence, HandlerLog, ObjectFacts, Request, RunOutput, Timeline};
use super::plan::Plan;
use super::supervisor::Supervisor;

/// How often the operator's liveness is looked at.
pub(super) const POLL: Duration = Duration::from_millis(250);
/// How often the objects are looked at for convergence (a snapshot reads the whole log).
pub(super) const LOOK: Duration = Duration::from_secs(1);
/// Converged twice in a row this far apart.
pub(super) const SETTLE: Duration = Duration::from_secs(2);
/// The most requests about one object a run accepts (faults, kills and retries included).
pub(super) const REQUEST_BOUND: usize = 40;

/// The `kopfexamples` stored now.
pub(super) fn stored_objects(server: &FakeApiServer) -> Vec<Value> {
    server
        .objects()
        .into_iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("KopfExample"))
        .collect()
}

/// What became of each planned object, from the recorded operations.
pub(super) fn object_facts(plan: &Plan, timeline: &Timeline) -> Vec<ObjectFacts> {
    let mut updated: HashMap<usize, Vec<i64>> = HashMap::new();
    for (i, value) in &timeline.updated {
        updated.entry(*i).or_default().push(*value);
    }
    let deleted: HashSet<usize> = timeline.deleted.iter().copied().collect();
    plan.objects
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let mut values = vec![o.values[0]];
            values.extend(updated.get(&i).into_iter().flatten());
            ObjectFacts {
                name: o.name.clone(),
                uid: timeline.uids.get(&o.name).cloned(),
                values,
                deleted: deleted.contains(&i),
            }
        })
        .collect()
}

/// The state-based invariants on a snapshot (no request log: that is for the end).
pub(super) fn snapshot_converged(
    plan: &Plan,
    server: &FakeApiServer,
    timeline: &Timeline,
    log_path: &Path,
) -> Result<bool> {
    let text = std::fs::read_to_string(log_path).unwrap_or_default();
    let ev = Evidence {
        timeline: timeline.clone(),
        objects: object_facts(plan, timeline),
        log: HandlerLog::parse(&text)?,
        final_objects: stored_objects(server),
        ..Default::default()
    };
    Ok([
        checks::status_written(&ev),
        checks::handled(&ev),
        checks::finalizer_kept(&ev),
        checks::deleted_gone(&ev),
        checks::no_stuck_finalizer(&ev),
    ]
    .iter()
    .all(|r| r.ok))
}

/// Waits until the state invariants hold twice in a row [`SETTLE`] apart, or the deadline;
/// restarts the operator if it exits by itself meanwhile.
pub(super) async fn converge(
    plan: &Plan,
    server: &FakeApiServer,
    operator: &mut Supervisor,
    timeline: &RefCell<Timeline>,
    deadline: Duration,
) -> Result<bool> {
    let started = Instant::now();
    let mut since: Option<Instant> = None;
    let mut last_look: Option<Instant> = None;
    let mut last_report = Instant::now();
    while started.elapsed() < deadline {
        operator.check(timeline).await?;
        tokio::time::sleep(POLL).await;
        if last_look.is_some_and(|t| t.elapsed() < LOOK) {
            continue;
        }
        last_look = Some(Instant::now());
        let now = snapshot_converged(plan, server, &timeline.borrow(), &operator.log_path)?;
        match (now, since) {
            (true, Some(t)) if t.elapsed() >= SETTLE => return Ok(true),
            (true, None) => since = Some(Instant::now()),
            (true, Some(_)) => {}
            (false, _) => since = None,
        }
        if last_report.elapsed() >= Duration::from_secs(15) {
            last_report = Instant::now();
            println!(
                "chaos: quiet for {:.0} s, not converged yet",
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(false)
}

/// Everything the checks need, at the end.
pub(super) fn gather(
    plan: &Plan,
    server: &FakeApiServer,
    timeline: &Timeline,
    log_path: &Path,
    outputs: Vec<RunOutput>,
    replicas: usize,
) -> Result<Evidence> {
    let text = std::fs::read_to_string(log_path)
        .with_context(|| format!("reading the handler log {}", log_path.display()))?;
    let log = HandlerLog::parse(&text)?;
    let user_agent = log
        .starts
        .first()
        .map(|s| s.user_agent.clone())
        .context("the handler log has no start line: the operator never ran")?;
    let requests = server
        .requests()
        .iter()
        .filter(|r| r.user_agent == user_agent)
        .map(Request::from_record)
        .collect::<Result<Vec<_>>>()?;
    Ok(Evidence {
        timeline: timeline.clone(),
        objects: object_facts(plan, timeline),
        log,
        requests,
        final_objects: stored_objects(server),
        outputs,
        request_bound: REQUEST_BOUND,
        replicas,
    })
}
