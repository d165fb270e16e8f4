//! The invariants of a chaos run, one function each, over the [`Evidence`] of the run (the
//! leadership rows of several replicas are in [`leaders`]; the table in [`super::table`]).
//!
//! What Kopf promises, and so what is checked:
//!
//! - every surviving object ends with its handlers' results in its status, for its latest
//!   spec (intermediate values may be skipped: Kopf handles the latest state of an object,
//!   and updates that come while a handler runs are merged into one);
//! - every surviving object that a handler saw keeps Kopf's finalizer, and every deleted
//!   object goes, with no finalizer left behind;
//! - an object of which any handler ran gets its delete handler before it goes (objects
//!   deleted before the operator got to them are fine);
//! - handlers run at least once per cause, and again only when a crash or a failed write
//!   lost their outcome (a duplicate with neither a kill of the process that ran it nor a
//!   failed request about the object between the two runs is a violation; with several
//!   replicas, a change of leader explains one too, and one run by two different live
//!   leaders with neither a kill nor a change of leader between is flagged as such);
//! - with several replicas: one leader at a time (the intervals from [`leaders`]), and
//!   handlers run only by a replica while it leads;
//! - no panic, no exit but the kills, and a bounded number of requests per object.

use std::collections::BTreeMap;

use serde_json::Value;

use super::evidence::{Call, Cause, Completion, Evidence, Micros, ObjectFacts};
use super::leaders::{self, handlers_on_leaders, one_leader};
use super::table::Row;

/// Kopf's finalizer: on every object of which a handler ran, while a delete handler exists.
pub const FINALIZER: &str = "kopf.zalando.org/KopfFinalizerMarker";

/// Every invariant, in the order of the table (with several replicas, the leadership rows
/// last).
pub fn check_all(ev: &Evidence) -> Vec<Row> {
    let mut rows = vec![
        status_written(ev),
        handled(ev),
        finalizer_kept(ev),
        deleted_gone(ev),
        no_stuck_finalizer(ev),
        delete_handlers(ev),
        duplicates(ev),
        no_panic(ev),
        no_unexpected_exit(ev),
        requests_per_object(ev),
    ];
    if ev.replicas > 1 {
        rows.push(one_leader(ev));
        rows.push(handlers_on_leaders(ev));
    }
    rows
}

/// The objects that should still exist at the end.
fn survivors(ev: &Evidence) -> impl Iterator<Item = &ObjectFacts> {
    ev.objects.iter().filter(|o| o.uid.is_some() && !o.deleted)
}

/// A JSON number at a pointer, as i64.
fn number_at(object: &Value, pointer: &str) -> Option<i64> {
    object.pointer(pointer).and_then(Value::as_i64)
}

/// Every surviving object has `status.create_fn.value` (one of its values), and its latest
/// spec value in `status.update_fn.value` (or in `status.create_fn.value` when the create
/// handler already saw it and no update followed).
pub fn status_written(ev: &Evidence) -> Row {
    let stored_by_name = ev.stored_by_name();
    let mut bad = Vec::new();
    let mut total = 0;
    for o in survivors(ev) {
        total += 1;
        let Some(stored) = stored_by_name.get(o.name.as_str()) else {
            bad.push(format!("{}: missing from the server", o.name));
            continue;
        };
        let last = *o.values.last().unwrap_or(&0);
        let create = number_at(stored, "/status/create_fn/value");
        let update = number_at(stored, "/status/update_fn/value");
        let problem = match (create, update) {
            (None, _) => Some(format!(
                "no status.create_fn (status: {})",
                stored.get("status").unwrap_or(&Value::Null)
            )),
            (Some(c), _) if !o.values.contains(&c) => Some(format!(
                "status.create_fn.value is {c}, not one of its values {:?}",
                o.values
            )),
            (Some(_), Some(u)) if u == last => None,
            (Some(c), None) if c == last => None,
            (Some(_), Some(u)) => Some(format!(
                "status.update_fn.value is {u}, its spec.value is {last}"
            )),
            (Some(c), None) => Some(format!(
                "no status.update_fn, and status.create_fn.value is {c}; its spec.value is {last}"
            )),
        };
        if let Some(p) = problem {
            bad.push(format!("{}: {p}", o.name));
        }
    }
    Row::new(
        "final status written (survivors)",
        format!("{total} of {total}"),
        format!("{} of {total}", total - bad.len()),
        bad.is_empty(),
    )
    .with(bad)
}

/// The log has, for every surviving object, a create call and a call (create or update)
/// with its latest spec value. Intermediate values nobody handled are counted, not failed.
pub fn handled(ev: &Evidence) -> Row {
    let by_uid = ev.calls_by_uid();
    let mut bad = Vec::new();
    let (mut total, mut skipped) = (0, 0);
    for o in survivors(ev) {
        total += 1;
        let uid = o.uid.as_deref().unwrap_or_default();
        let calls = by_uid.get(uid).map_or(&[][..], Vec::as_slice);
        let last = o.values.last().copied();
        let has_create = calls.iter().any(|c| c.cause == Cause::Create);
        let has_last = calls
            .iter()
            .any(|c| c.cause != Cause::Delete && c.value == last);
        if !has_create {
            bad.push(format!("{}: create_fn never ran", o.name));
        }
        if !has_last {
            bad.push(format!(
                "{}: no handler ran for its latest spec.value {}",
                o.name,
                last.unwrap_or_default()
            ));
        }
        skipped += o
            .values
            .iter()
            .filter(|v| Some(**v) != last && !calls.iter().any(|c| c.value == Some(**v)))
            .count();
    }
    let failed = bad.len();
    let mut row = Row::new(
        "create and latest update handled (survivors)",
        format!("{total} of {total}"),
        format!("{} of {total}", total - count_objects(&bad)),
        failed == 0,
    )
    .with(bad);
    if skipped > 0 {
        row.seen += &format!(" ({skipped} older values merged)");
    }
    row
}

/// The number of distinct objects (the text before the first `:`) in detail lines.
fn count_objects(details: &[String]) -> usize {
    let mut names: Vec<&str> = details
        .iter()
        .map(|d| d.split(':').next().unwrap_or(d))
        .collect();
    names.dedup();
    names.len()
}

/// Every surviving object of which any handler ran carries Kopf's finalizer (without it, a
/// deletion would skip `delete_fn`).
pub fn finalizer_kept(ev: &Evidence) -> Row {
    let stored_by_name = ev.stored_by_name();
    let by_uid = ev.calls_by_uid();
    let mut bad = Vec::new();
    let mut total = 0;
    for o in survivors(ev) {
        let uid = o.uid.as_deref().unwrap_or_default();
        let (Some(stored), Some(calls)) = (stored_by_name.get(o.name.as_str()), by_uid.get(uid))
        else {
            continue; // missing (another row says so), or never handled
        };
        total += 1;
        let finalizers = stored.pointer("/metadata/finalizers");
        let has = finalizers
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER));
        if !has {
            bad.push(format!(
                "{}: finalizers {} after {}",
                o.name,
                finalizers.unwrap_or(&Value::Null),
                describe_calls(calls, &ev.timeline)
            ));
        }
    }
    Row::new(
        "finalizer on handled survivors",
        format!("{total} of {total}"),
        format!("{} of {total}", total - bad.len()),
        bad.is_empty(),
    )
    .with(bad)
}

/// Every object whose deletion the server accepted is gone.
pub fn deleted_gone(ev: &Evidence) -> Row {
    let stored_by_name = ev.stored_by_name();
    let deleted: Vec<&ObjectFacts> = ev.objects.iter().filter(|o| o.deleted).collect();
    let bad: Vec<String> = deleted
        .iter()
        .filter_map(|o| {
            stored_by_name.get(o.name.as_str()).map(|stored| {
                format!(
                    "{}: still there (finalizers {}, deletionTimestamp {})",
                    o.name,
                    stored
                        .pointer("/metadata/finalizers")
                        .unwrap_or(&Value::Null),
                    stored
                        .pointer("/metadata/deletionTimestamp")
                        .unwrap_or(&Value::Null)
                )
            })
        })
        .collect();
    Row::new(
        "deleted objects gone",
        format!("{} of {}", deleted.len(), deleted.len()),
        format!("{} of {}", deleted.len() - bad.len(), deleted.len()),
        bad.is_empty(),
    )
    .with(bad)
}

/// No object is left with a `deletionTimestamp` (a finalizer nobody released).
pub fn no_stuck_finalizer(ev: &Evidence) -> Row {
    let bad: Vec<String> = ev
        .final_objects
        .iter()
        .filter(|o| o.pointer("/metadata/deletionTimestamp").is_some())
        .map(|o| {
            format!(
                "{}: deletionTimestamp {}, finalizers {}",
                o.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("?"),
                o.pointer("/metadata/deletionTimestamp")
                    .unwrap_or(&Value::Null),
                o.pointer("/metadata/finalizers").unwrap_or(&Value::Null)
            )
        })
        .collect();
    Row::new(
        "no stuck finalizer",
        "0",
        bad.len().to_string(),
        bad.is_empty(),
    )
    .with(bad)
}

/// For every deleted object of which any handler ran, `delete_fn` ran, after the others.
/// Deleted objects of which no handler ran are counted apart (they went before the operator
/// got to them).
pub fn delete_handlers(ev: &Evidence) -> Row {
    let by_uid = ev.calls_by_uid();
    let mut bad = Vec::new();
    let (mut handled, mut untouched) = (0, 0);
    for o in ev.objects.iter().filter(|o| o.deleted) {
        let Some(uid) = o.uid.as_deref() else {
            continue;
        };
        let calls = by_uid.get(uid).map_or(&[][..], Vec::as_slice);
        if calls.is_empty() {
            untouched += 1;
            continue;
        }
        handled += 1;
        let last_delete = calls
            .iter()
            .filter(|c| c.cause == Cause::Delete)
            .map(|c| c.micros)
            .max();
        let last_other = calls
            .iter()
            .filter(|c| c.cause != Cause::Delete)
            .max_by_key(|c| c.micros);
        match (last_delete, last_other) {
            (None, _) => bad.push(format!(
                "{}: delete_fn never ran, though {} did",
                o.name,
                describe_calls(calls, &ev.timeline)
            )),
            (Some(d), Some(c)) if c.micros > d => bad.push(format!(
                "{}: {}_fn ran at {}, after delete_fn at {}",
                o.name,
                c.cause,
                ev.timeline.at(c.micros),
                ev.timeline.at(d)
            )),
            _ => {}
        }
    }
    let mut row = Row::new(
        "delete_fn ran (deleted objects with handlers)",
        format!("{handled} of {handled}"),
        format!("{} of {handled}", handled - bad.len()),
        bad.is_empty(),
    )
    .with(bad);
    row.seen += &format!(" (+{untouched} never handled)");
    row
}

/// `create_fn (value 10) at 3.2 s, ...` for messages.
fn describe_calls(calls: &[&Call], timeline: &super::evidence::Timeline) -> String {
    calls
        .iter()
        .map(|c| {
            format!(
                "{}_fn ({}) at {}",
                c.cause,
                c.value.map_or("-".into(), |v| v.to_string()),
                timeline.at(c.micros)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One repeated handler run: the same uid, cause and value as an earlier run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// The object.
    pub name: String,
    /// The handler.
    pub cause: Cause,
    /// `spec.value`.
    pub value: Option<i64>,
    /// The earlier run.
    pub first: Micros,
    /// This run.
    pub again: Micros,
    /// Why it ran again: a kill of the process of the first run, a leadership change, or a
    /// failed request about the object in between; None: unexplained.
    pub explanation: Option<String>,
    /// Unexplained, by two different processes both alive (and so both leading) at the
    /// second run: (the first's pid, the second's pid).
    pub two_leaders: Option<(u32, u32)>,
}

/// Why a handler that began with the call `a` ran again with the call `b` (the same object,
/// cause and value), looking only at what came after `a` and before the cause was
/// completely stored (its diff-base written, or its finalizer released, with a success): a
/// kill or a failure after that explains nothing, the cause was handled for good. In order:
///
/// - a kill of the process that ran `a` (a kill of another replica, a standby, explains
///   nothing);
/// - a leadership change (several replicas only): a replica began to lead while the process
///   of `a` did not (it had lost the lead, or was gone);
/// - a failed request of the operator about the object (its paths, `/status` included),
///   only when the same process ran both: two processes running one cause with neither a
///   kill nor a change of leader between them were two leaders at once.
pub fn explain(ev: &Evidence, a: &Call, b: &Call) -> Option<String> {
    let t = &ev.timeline;
    let (name, cause, value, first) = (a.name.as_str(), a.cause, a.value, a.micros);
    let completes = |c: Completion| match (cause, c) {
        (Cause::Delete, Completion::Released) => true,
        (Cause::Create | Cause::Update, Completion::Handled(v)) => Some(v) == value,
        _ => false,
    };
    let until = ev
        .requests
        .iter()
        .filter(|r| {
            r.name == name
                && r.resource == "kopfexamples"
                && r.micros > first
                && (200..300).contains(&r.status)
                && r.completes.is_some_and(completes)
        })
        .map(|r| r.micros)
        .min()
        .unwrap_or(b.micros)
        .min(b.micros);
    if let Some(k) = t
        .kills
        .iter()
        .find(|k| k.pid == a.pid && k.micros > first && k.micros < until)
    {
        return Some(format!("kill #{} at {}", k.n, t.at(k.micros)));
    }
    let all = if ev.replicas > 1 {
        leaders::intervals(ev)
    } else {
        Vec::new()
    };
    if let Some(l) = all.iter().find(|l| {
        l.from > first
            && l.from < until
            && !all
                .iter()
                .any(|o| o != *l && o.pid == a.pid && o.from <= l.from && l.from < o.to)
    }) {
        return Some(format!(
            "takeover: {} (pid {}) leads from {}",
            l.name,
            l.pid,
            t.at(l.from)
        ));
    }
    if a.pid != b.pid {
        return None;
    }
    ev.requests
        .iter()
        .find(|r| {
            r.name == name
                && r.resource == "kopfexamples"
                && r.micros > first
                && r.micros < until
                && r.failed()
        })
        .map(|r| format!("{} at {}", r.describe(), t.at(r.micros)))
}

/// Every repeated run in the log, with its explanation.
pub fn find_duplicates(ev: &Evidence) -> Vec<Duplicate> {
    let mut groups: BTreeMap<(&str, Cause, Option<i64>), Vec<&Call>> = BTreeMap::new();
    for c in &ev.log.calls {
        groups
            .entry((&c.uid, c.cause, c.value))
            .or_default()
            .push(c);
    }
    let mut found = Vec::new();
    for runs in groups.values_mut().filter(|runs| runs.len() > 1) {
        runs.sort_by_key(|c| c.micros);
        for pair in runs.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let explanation = explain(ev, a, b);
            let two_leaders =
                (explanation.is_none() && a.pid != b.pid && leaders::alive(ev, a.pid, b.micros))
                    .then_some((a.pid, b.pid));
            found.push(Duplicate {
                name: a.name.clone(),
                cause: a.cause,
                value: a.value,
                first: a.micros,
                again: b.micros,
                explanation,
                two_leaders,
            });
        }
    }
    found.sort_by_key(|d| d.again);
    found
}

/// Handlers ran again only where a kill or a failed request explains it.
pub fn duplicates(ev: &Evidence) -> Row {
    let all = find_duplicates(ev);
    let unexplained = all.iter().filter(|d| d.explanation.is_none()).count();
    let t = &ev.timeline;
    let details = all
        .iter()
        .map(|d| {
            format!(
                "{}: {}_fn ({}) at {} and again at {}: {}",
                d.name,
                d.cause,
                d.value.map_or("-".into(), |v| v.to_string()),
                t.at(d.first),
                t.at(d.again),
                match (&d.explanation, d.two_leaders) {
                    (Some(e), _) => e.clone(),
                    (None, Some((p, q))) => format!(
                        "UNEXPLAINED: two live leaders (pid {p}, then pid {q} while {p} still ran)"
                    ),
                    (None, None) => "UNEXPLAINED".into(),
                }
            )
        })
        .collect();
    let by = |prefix: &str| {
        all.iter()
            .filter(|d| {
                d.explanation
                    .as_deref()
                    .is_some_and(|e| e.starts_with(prefix))
            })
            .count()
    };
    let (by_kill, by_takeover) = (by("kill #"), by("takeover: "));
    let takeovers = if ev.replicas > 1 {
        format!(", {by_takeover} after a takeover")
    } else {
        String::new()
    };
    let two_leaders = all.iter().filter(|d| d.two_leaders.is_some()).count();
    Row::new(
        "duplicate runs explained",
        "0 unexplained",
        format!(
            "{} unexplained{} ({} duplicates: {} after a kill{takeovers}, {} after a failed request)",
            unexplained,
            if two_leaders > 0 {
                format!(", {two_leaders} by two live leaders")
            } else {
                String::new()
            },
            all.len(),
            by_kill,
            all.len() - unexplained - by_kill - by_takeover
        ),
        unexplained == 0,
    )
    .with(details)
}

/// No operator process panicked (its captured output, every run).
pub fn no_panic(ev: &Evidence) -> Row {
    let bad: Vec<String> = ev
        .outputs
        .iter()
        .flat_map(|run| {
            run.lines
                .iter()
                .filter(|l| l.contains("panicked"))
                .map(move |l| format!("{} (pid {}): {l}", run.name, run.pid))
        })
        .collect();
    Row::new("no panic", "0", bad.len().to_string(), bad.is_empty()).with(bad)
}

/// The operator exited only when it was killed (or stopped at the end).
pub fn no_unexpected_exit(ev: &Evidence) -> Row {
    let t = &ev.timeline;
    let bad: Vec<String> = t
        .exits
        .iter()
        .map(|(at, pid, status)| format!("pid {pid} exited by itself at {} ({status})", t.at(*at)))
        .collect();
    Row::new(
        "no exit but the kills",
        "0",
        bad.len().to_string(),
        bad.is_empty(),
    )
    .with(bad)
}

/// The operator's requests about each object (its paths, `/status` included): the mean
/// over the created objects and the maximum, bounded.
pub fn requests_per_object(ev: &Evidence) -> Row {
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for r in ev
        .requests
        .iter()
        .filter(|r| r.resource == "kopfexamples" && !r.name.is_empty())
    {
        *per.entry(&r.name).or_default() += 1;
    }
    let created = ev.objects.iter().filter(|o| o.uid.is_some()).count();
    let total: usize = per.values().sum();
    let (max_name, max) = per
        .iter()
        .max_by_key(|(_, n)| **n)
        .map_or(("-", 0), |(name, n)| (*name, *n));
    let mean = if created == 0 {
        0.0
    } else {
        total as f64 / created as f64
    };
    let bound = ev.request_bound;
    let mut row = Row::new(
        "requests per object",
        format!("max <= {bound}"),
        format!("max {max} ({max_name}), mean {mean:.1}"),
        max <= bound,
    );
    if max > bound {
        let mut over: Vec<String> = per
            .iter()
            .filter(|(_, n)| **n > bound)
            .map(|(name, n)| format!("{name}: {n} requests"))
            .collect();
        over.sort();
        row.details = over;
    }
    row
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::evidence::{
        HandlerLog, KillRecord, Request, RunOutput, Timeline, completion,
    };
    use super::super::table::render;
    use super::*;

    const T0: Micros = 1_000_000_000_000;

    /// `t` seconds after the start.
    fn at(t: f64) -> Micros {
        T0 + (t * 1e6) as Micros
    }

    fn call(t: f64, pid: u32, cause: Cause, n: usize, value: i64) -> Call {
        Call {
            micros: at(t),
            pid,
            cause,
            uid: format!("uid-{n}"),
            name: format!("obj-{n}"),
            value: Some(value),
        }
    }

    fn facts(n: usize, values: &[i64], deleted: bool) -> ObjectFacts {
        ObjectFacts {
            name: format!("obj-{n}"),
            uid: Some(format!("uid-{n}")),
            values: values.to_vec(),
            deleted,
        }
    }

    fn stored(n: usize, status: Value) -> Value {
        json!({"metadata": {"name": format!("obj-{n}"), "uid": format!("uid-{n}"),
                            "finalizers": [FINALIZER]},
               "spec": {}, "status": status})
    }

    fn request(t: f64, n: usize, sub: &str, status: u16) -> Request {
        Request {
            micros: at(t),
            method: "PATCH".into(),
            path: format!("/apis/kopf.dev/v1/namespaces/default/kopfexamples/obj-{n}{sub}"),
            status,
            namespace: "default".into(),
            name: format!("obj-{n}"),
            resource: "kopfexamples".into(),
            completes: None,
        }
    }

    /// A run that went right: obj-0 created (10), updated (11, 12: 11 merged away), obj-1
    /// created and deleted, obj-2 deleted before any handler ran.
    fn good() -> Evidence {
        Evidence {
            timeline: Timeline {
                t0: T0,
                kills: vec![KillRecord {
                    n: 1,
                    micros: at(5.0),
                    pid: 7,
                }],
                ..Default::default()
            },
            objects: vec![
                facts(0, &[10, 11, 12], false),
                facts(1, &[20], true),
                facts(2, &[30], true),
            ],
            log: HandlerLog {
                calls: vec![
                    call(1.0, 7, Cause::Create, 0, 10),
                    call(2.0, 7, Cause::Create, 1, 20),
                    call(3.0, 7, Cause::Delete, 1, 20),
                    call(4.0, 7, Cause::Update, 0, 12),
                    // Killed mid-handler, run again by the next process.
                    call(6.0, 8, Cause::Update, 0, 12),
                ],
                ..Default::default()
            },
            requests: vec![
                request(1.2, 0, "", 200),
                request(1.3, 0, "/status", 200),
                request(6.3, 0, "/status", 200),
            ],
            final_objects: vec![stored(
                0,
                json!({"create_fn": {"value": 10}, "update_fn": {"value": 12}}),
            )],
            outputs: vec![RunOutput {
                name: "chaos#1".into(),
                pid: 7,
                lines: vec!["INFO handler succeeded".into()],
            }],
            request_bound: 40,
            replicas: 1,
        }
    }

    fn failing(rows: &[Row]) -> Vec<&'static str> {
        rows.iter().filter(|r| !r.ok).map(|r| r.name).collect()
    }

    #[test]
    fn a_good_run_passes_everything() {
        let rows = check_all(&good());
        assert_eq!(failing(&rows), Vec::<&str>::new(), "{}", render(&rows));
        let dup = duplicates(&good());
        assert_eq!(dup.details.len(), 1);
        assert!(
            dup.details[0].ends_with("kill #1 at 5.000 s"),
            "{:?}",
            dup.details
        );
        assert!(handled(&good()).seen.contains("1 older values merged"));
        assert!(delete_handlers(&good()).seen.contains("+1 never handled"));
    }

    #[test]
    fn the_create_value_alone_is_fine_when_the_create_handler_saw_the_last_spec() {
        let mut ev = good();
        ev.final_objects = vec![stored(0, json!({"create_fn": {"value": 12}}))];
        ev.log.calls.retain(|c| c.cause != Cause::Update);
        ev.log.calls[0].value = Some(12);
        assert!(status_written(&ev).ok, "{:?}", status_written(&ev));
        assert!(handled(&ev).ok, "{:?}", handled(&ev));
    }

    #[test]
    fn a_lost_create_result_fails_the_status() {
        let mut ev = good();
        ev.final_objects = vec![stored(0, json!({"update_fn": {"value": 12}}))];
        let row = status_written(&ev);
        assert!(!row.ok);
        assert!(
            row.details[0].starts_with("obj-0: no status.create_fn"),
            "{row:?}"
        );
        // A stale update result too.
        ev.final_objects = vec![stored(
            0,
            json!({"create_fn": {"value": 10}, "update_fn": {"value": 11}}),
        )];
        assert!(status_written(&ev).details[0].contains("update_fn.value is 11"));
        // And a missing object.
        ev.final_objects.clear();
        assert!(status_written(&ev).details[0].contains("missing"));
    }

    #[test]
    fn an_unhandled_last_value_fails() {
        let mut ev = good();
        ev.log
            .calls
            .retain(|c| !(c.uid == "uid-0" && c.cause == Cause::Update));
        let row = handled(&ev);
        assert!(!row.ok);
        assert_eq!(
            row.details,
            vec!["obj-0: no handler ran for its latest spec.value 12"]
        );
        ev.log.calls.retain(|c| c.uid != "uid-0");
        let row = handled(&ev);
        assert_eq!(row.seen, "0 of 1 (2 older values merged)");
        assert!(row.details[0].contains("create_fn never ran"));
    }

    #[test]
    fn a_handled_survivor_without_the_finalizer_fails() {
        let mut ev = good();
        ev.final_objects[0]["metadata"]["finalizers"] = json!([]);
        let row = finalizer_kept(&ev);
        assert!(!row.ok);
        assert_eq!(row.seen, "0 of 1");
        assert!(
            row.details[0].starts_with("obj-0: finalizers [] after create_fn (10) at 1.000 s"),
            "{row:?}"
        );
        // A survivor no handler ran for needs none.
        ev.log.calls.retain(|c| c.uid != "uid-0");
        assert!(finalizer_kept(&ev).ok);
    }

    #[test]
    fn a_deleted_object_still_there_fails_and_a_stuck_finalizer_too() {
        let mut ev = good();
        ev.final_objects.push(json!({"metadata": {"name": "obj-1",
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"]}}));
        assert!(!deleted_gone(&ev).ok);
        let row = no_stuck_finalizer(&ev);
        assert!(!row.ok);
        assert!(
            row.details[0].starts_with("obj-1: deletionTimestamp"),
            "{row:?}"
        );
    }

    #[test]
    fn a_lost_delete_handler_fails() {
        let mut ev = good();
        ev.log.calls.retain(|c| c.cause != Cause::Delete);
        let row = delete_handlers(&ev);
        assert!(!row.ok);
        assert_eq!(row.seen, "0 of 1 (+1 never handled)");
        assert!(
            row.details[0]
                .starts_with("obj-1: delete_fn never ran, though create_fn (20) at 2.000 s")
        );
    }

    #[test]
    fn a_create_after_the_delete_handler_fails() {
        let mut ev = good();
        ev.log.calls.push(call(3.5, 7, Cause::Create, 1, 20));
        let row = delete_handlers(&ev);
        assert!(!row.ok);
        assert!(row.details[0].contains("create_fn ran at 3.500 s, after delete_fn at 3.000 s"));
    }

    #[test]
    fn duplicates_are_explained_by_kills_or_failed_requests_on_the_object_only() {
        let mut ev = good();
        // obj-0's create ran twice by the same process, with no kill in between.
        ev.log.calls.push(call(1.6, 7, Cause::Create, 0, 10));
        let row = duplicates(&ev);
        assert!(!row.ok, "{row:?}");
        assert!(
            row.details.iter().any(|d| d.ends_with("UNEXPLAINED")),
            "{row:?}"
        );
        // A failed request about another object does not explain it.
        ev.requests.push(request(1.4, 1, "/status", 500));
        assert!(!duplicates(&ev).ok);
        // A failed /status PATCH of this object does.
        ev.requests.push(request(1.5, 0, "/status", 503));
        let row = duplicates(&ev);
        assert!(row.ok, "{row:?}");
        assert!(
            row.details[0].ends_with("PATCH /apis/kopf.dev/v1/namespaces/default/kopfexamples/obj-0/status answered 503 at 1.500 s"),
            "{row:?}"
        );
        // So does one never answered; a success does not.
        let mut ev2 = good();
        ev2.log.calls.push(call(1.6, 7, Cause::Create, 0, 10));
        ev2.requests.push(request(1.4, 0, "", 0));
        assert!(duplicates(&ev2).details[0].contains("got no answer"));
        // Outside the interval, nothing counts.
        let mut ev3 = good();
        ev3.log.calls.push(call(1.6, 7, Cause::Create, 0, 10));
        ev3.requests.push(request(0.5, 0, "", 500));
        ev3.requests.push(request(1.7, 0, "", 500));
        assert!(!duplicates(&ev3).ok);
        // A kill after the creation was stored for good (its diff-base written) explains
        // nothing; one before it does.
        let mut ev4 = good();
        ev4.log.calls.push(call(1.6, 7, Cause::Create, 0, 10));
        ev4.timeline.kills.push(KillRecord {
            n: 2,
            micros: at(1.3),
            pid: 7,
        });
        let mut stored = request(1.2, 0, "", 200);
        stored.completes = Some(Completion::Handled(10));
        ev4.requests.push(stored);
        assert!(!duplicates(&ev4).ok, "the kill came after the diff-base");
        ev4.requests.last_mut().expect("pushed").micros = at(1.4);
        assert!(duplicates(&ev4).ok, "the kill came before the diff-base");
    }

    /// An operator's log line at `t` seconds.
    fn log_line(t: f64, text: &str) -> String {
        let ts = jiff::Timestamp::from_microsecond(at(t)).expect("a time");
        format!(
            "[{},{:03}] kopf_peering.elect [INFO    ] {text}",
            ts.strftime("%Y-%m-%d %H:%M:%S"),
            ts.subsec_millisecond()
        )
    }

    /// `good()` with three replicas: pid 7 leads from 0.5 s until its kill at 5 s, pid 8
    /// from 5.8 s until the stop at 10 s, pid 9 stands by.
    fn replicated() -> Evidence {
        let mut ev = good();
        ev.replicas = 3;
        ev.timeline.starts = vec![(at(0.0), 7), (at(0.0), 8), (at(0.0), 9)];
        ev.timeline.stops = vec![(at(10.0), 9), (at(10.0), 8)];
        ev.outputs = vec![
            RunOutput {
                name: "chaos#1".into(),
                pid: 7,
                lines: vec![log_line(0.5, leaders::LEADS)],
            },
            RunOutput {
                name: "chaos#2".into(),
                pid: 8,
                lines: vec![log_line(5.8, leaders::LEADS)],
            },
            RunOutput {
                name: "chaos#3".into(),
                pid: 9,
                lines: vec![],
            },
        ];
        ev
    }

    #[test]
    fn replicas_one_leader_at_a_time_and_handlers_on_the_leader_only() {
        let ev = replicated();
        let rows = check_all(&ev);
        assert_eq!(rows.len(), 12);
        assert_eq!(failing(&rows), Vec::<&str>::new(), "{}", render(&rows));
        assert_eq!(leaders::takeovers(&ev).len(), 1);
        // A kill of a standby explains no duplicate; the takeover at 5.8 s, after pid 7 lost
        // the lead, does.
        let mut ev2 = replicated();
        ev2.timeline.kills[0].pid = 9;
        ev2.timeline.stops.push((at(10.0), 7));
        ev2.outputs[0].lines.push(log_line(5.5, leaders::LOST));
        assert!(one_leader(&ev2).ok, "{:?}", one_leader(&ev2));
        let dup = duplicates(&ev2);
        assert!(dup.ok, "{dup:?}");
        assert!(dup.details[0].contains("takeover: chaos#2 (pid 8) leads from 5.800 s"));
        // pid 8 leads at 3 s while pid 7 still leads: two leaders, and the create of obj-0
        // run by both is a duplicate by two live leaders that no failed request excuses.
        let mut ev3 = replicated();
        ev3.outputs[1].lines = vec![log_line(3.0, leaders::LEADS)];
        ev3.log.calls.push(call(3.5, 8, Cause::Create, 0, 10));
        ev3.requests.push(request(1.5, 0, "/status", 503));
        let rows = check_all(&ev3);
        assert_eq!(
            failing(&rows),
            vec!["duplicate runs explained", "one leader at a time"],
            "{}",
            render(&rows)
        );
        let dup = duplicates(&ev3);
        assert!(dup.seen.contains("1 by two live leaders"), "{dup:?}");
        assert!(
            dup.details
                .iter()
                .any(|d| d.contains("two live leaders (pid 7, then pid 8")),
            "{dup:?}"
        );
        let row = one_leader(&ev3);
        assert!(
            row.details[0].starts_with("chaos#2: chaos#2 (pid 8) led from 3.000 s"),
            "{row:?}"
        );
        // One that lost the lead before the other took it is fine; a standby's handler is not.
        let mut ev4 = replicated();
        ev4.outputs[2].lines = vec![log_line(0.2, leaders::LEADS), log_line(0.4, leaders::LOST)];
        assert!(one_leader(&ev4).ok, "{:?}", one_leader(&ev4));
        ev4.log.calls.push(call(2.5, 9, Cause::Create, 2, 30));
        let row = handlers_on_leaders(&ev4);
        assert!(!row.ok);
        assert!(row.details[0].contains("by pid 9 at 2.500 s"), "{row:?}");
    }

    #[test]
    fn the_completions_of_patches_are_read_from_their_bodies() {
        let merge = r#"{"metadata":{"annotations":{"kopf.zalando.org/last-handled-configuration":"{\"spec\":{\"value\":160}}\n"}}}"#;
        assert_eq!(completion(merge), Some(Completion::Handled(160)));
        let release = r#"[{"op":"test","path":"/metadata/resourceVersion","value":"293"},{"op":"remove","path":"/metadata/finalizers"}]"#;
        assert_eq!(completion(release), Some(Completion::Released));
        let add = r#"[{"op":"test","path":"/metadata/resourceVersion","value":"3"},{"op":"add","path":"/metadata/finalizers","value":["f"]}]"#;
        assert_eq!(completion(add), None);
        assert_eq!(completion(r#"{"status":{"create_fn":{"value":1}}}"#), None);
    }

    #[test]
    fn a_panic_fails() {
        let mut ev = good();
        ev.outputs[0]
            .lines
            .push("thread 'tokio-runtime-worker' panicked at src/x.rs:1:1:".into());
        let row = no_panic(&ev);
        assert!(!row.ok);
        assert!(
            row.details[0].starts_with("chaos#1 (pid 7): thread"),
            "{row:?}"
        );
    }

    #[test]
    fn an_exit_by_itself_fails() {
        let mut ev = good();
        ev.timeline
            .exits
            .push((at(9.0), 8, "exit status: 1".into()));
        let row = no_unexpected_exit(&ev);
        assert!(!row.ok);
        assert_eq!(
            row.details,
            vec!["pid 8 exited by itself at 9.000 s (exit status: 1)"]
        );
    }

    #[test]
    fn too_many_requests_about_one_object_fail() {
        let mut ev = good();
        let row = requests_per_object(&ev);
        assert!(row.ok);
        // 3 requests about obj-0, over 3 created objects.
        assert_eq!(row.seen, "max 3 (obj-0), mean 1.0");
        ev.request_bound = 2;
        let row = requests_per_object(&ev);
        assert!(!row.ok);
        assert_eq!(row.details, vec!["obj-0: 3 requests"]);
    }

    #[test]
    fn the_table_shows_every_row_and_the_details_of_failures() {
        let mut ev = good();
        ev.final_objects.clear();
        let text = render(&check_all(&ev));
        assert!(text.starts_with("invariant"), "{text}");
        assert!(text.contains("final status written (survivors)"), "{text}");
        assert!(text.contains("FAIL"), "{text}");
        assert!(
            text.contains("  - obj-0: missing from the server"),
            "{text}"
        );
        assert_eq!(
            text.lines()
                .filter(|l| l.ends_with("OK") || l.ends_with("FAIL"))
                .count(),
            10
        );
    }
}
