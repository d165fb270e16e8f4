//! Invariants: what must hold at the end of every simulated run, over the final state of
//! the cluster and the run's history. [`kopf_contract`] is Kopf's promise to handlers;
//! users add their own with [`Invariant::new`].

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use kopf_core::causes::Reason;

use super::history::{Event, HandlerRun, History, RunOutcome};

/// Kopf's annotation of the last handled state (the diff base).
const DIFF_BASE: &str = "kopf.zalando.org/last-handled-configuration";
/// Kopf's finalizer (on every handled object while the operator has delete handlers).
pub const FINALIZER: &str = kopf_core::finalizers::DEFAULT_FINALIZER;
/// The prefix of Kopf's annotations.
const KOPF_PREFIX: &str = "kopf.zalando.org/";

/// What the invariants of a run look at.
#[derive(Debug, Clone)]
pub struct World {
    /// Every object the fake API server holds at the end of the run.
    pub objects: Vec<Value>,
    /// What happened, in order.
    pub history: History,
    /// The objects the scenario created.
    pub created: Vec<Created>,
    /// Whether the operator has create handlers for the scenario's resource.
    pub create_handlers: bool,
    /// Whether the operator has delete handlers that need Kopf's finalizer, for the
    /// scenario's resource.
    pub delete_handlers: bool,
    /// Whether the operator has changing handlers (create, update, delete, resume, field)
    /// for the scenario's resource: only they make Kopf store a diff base.
    pub changing_handlers: bool,
}

/// An object the scenario created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// `namespace/name`.
    pub object: String,
    /// Its uid.
    pub uid: String,
    /// Whether the scenario deleted it.
    pub deleted: bool,
    /// Whether it carried Kopf's finalizer when the scenario deleted it.
    pub finalized: bool,
}

impl World {
    /// The stored object with this uid, if it still exists.
    pub fn stored(&self, uid: &str) -> Option<&Value> {
        self.objects
            .iter()
            .find(|o| o["metadata"]["uid"].as_str() == Some(uid))
    }

    /// The stored objects of a kind (`"ConfigMap"`).
    pub fn stored_of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> {
        self.objects.iter().filter(move |o| o["kind"] == kind)
    }

    /// The scenario's objects that should still exist.
    pub fn survivors(&self) -> impl Iterator<Item = &Created> {
        self.created.iter().filter(|c| !c.deleted)
    }

    /// The handler attempts on the object with this uid, oldest first.
    pub fn runs_of<'a>(&'a self, uid: &'a str) -> impl Iterator<Item = &'a HandlerRun> {
        self.history.handler_runs().filter(move |r| r.uid == uid)
    }
}

/// A named check of a run's [`World`]: `Ok`, or what is wrong, one line per object.
#[derive(Clone)]
pub struct Invariant {
    name: String,
    check: Check,
}

type Check = Arc<dyn Fn(&World) -> Result<(), Vec<String>> + Send + Sync>;

impl std::fmt::Debug for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Invariant({:?})", self.name)
    }
}

impl Invariant {
    /// An invariant of the user's: `check` returns what is wrong, one line per object.
    ///
    /// ```
    /// use kopf::testing::sim::Invariant;
    ///
    /// // No ConfigMap of the run has more than one owner.
    /// let one_owner = Invariant::new("one owner per ConfigMap", |world| {
    ///     let bad: Vec<String> = world
    ///         .stored_of_kind("ConfigMap")
    ///         .filter(|cm| cm["metadata"]["ownerReferences"].as_array().is_some_and(|o| o.len() > 1))
    ///         .map(|cm| format!("{}: several owners", cm["metadata"]["name"]))
    ///         .collect();
    ///     if bad.is_empty() { Ok(()) } else { Err(bad) }
    /// });
    /// assert_eq!(one_owner.name(), "one owner per ConfigMap");
    /// ```
    pub fn new(
        name: &str,
        check: impl Fn(&World) -> Result<(), Vec<String>> + Send + Sync + 'static,
    ) -> Self {
        Invariant {
            name: name.into(),
            check: Arc::new(check),
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks a world.
    pub fn check(&self, world: &World) -> Result<(), Vec<String>> {
        (self.check)(world)
    }
}

/// Kopf's promise to handlers, as invariants (it assumes that the handlers' filters accept
/// the scenario's objects):
///
/// - **`created objects handled`**: every surviving object had a create handler run (when
///   the operator has one), and each handler's last result is stored in `status.<id>`;
/// - **`latest change handled`**: every surviving object's diff base is its current spec,
///   with no handler progress left over (the diff base where Kopf keeps it by default, the
///   `kopf.zalando.org/last-handled-configuration` annotation: drop this invariant for an
///   operator that stores it elsewhere);
/// - **`finalizer first`**: with delete handlers, no other handler ran on an object before
///   it carried Kopf's finalizer, and every handled survivor still carries it (without it,
///   its deletion would skip the delete handlers);
/// - **`deleted objects gone`**: no object the scenario deleted is left (no finalizer left
///   behind);
/// - **`delete handlers ran`**: every deleted object that a handler saw had its delete
///   handlers run (when the operator has them);
/// - **`no unexplained re-run`**: a handler succeeded twice for the same cause only when a
///   kill, a failed request about the object or a change of it came between.
pub fn kopf_contract() -> Vec<Invariant> {
    vec![
        Invariant::new("created objects handled", created_handled),
        Invariant::new("latest change handled", latest_change_handled),
        Invariant::new("finalizer first", finalizer_first),
        Invariant::new("deleted objects gone", deleted_gone),
        Invariant::new("delete handlers ran", delete_handlers_ran),
        Invariant::new("no unexplained re-run", no_unexplained_rerun),
    ]
}

fn verdict(bad: Vec<String>) -> Result<(), Vec<String>> {
    if bad.is_empty() { Ok(()) } else { Err(bad) }
}

fn created_handled(world: &World) -> Result<(), Vec<String>> {
    let mut bad = Vec::new();
    for created in world.survivors() {
        let Some(stored) = world.stored(&created.uid) else {
            bad.push(format!("{}: missing from the server", created.object));
            continue;
        };
        let runs: Vec<&HandlerRun> = world.runs_of(&created.uid).collect();
        if world.create_handlers && !runs.iter().any(|r| r.reason == Reason::Create) {
            bad.push(format!("{}: no create handler ran", created.object));
        }
        for (handler, last) in last_outcomes(&runs) {
            if let RunOutcome::Succeeded(Some(value)) = last
                && !value.is_null()
                && stored["status"][handler] != *value
            {
                bad.push(format!(
                    "{}: handler '{handler}' returned {value}, status.{handler} is {}",
                    created.object, stored["status"][handler]
                ));
            }
        }
    }
    verdict(bad)
}

/// Each handler's last outcome (interrupted attempts aside).
fn last_outcomes<'a>(runs: &[&'a HandlerRun]) -> BTreeMap<&'a str, &'a RunOutcome> {
    runs.iter()
        .filter(|r| r.outcome != RunOutcome::Interrupted)
        .map(|r| (r.handler.as_str(), &r.outcome))
        .collect()
}

fn latest_change_handled(world: &World) -> Result<(), Vec<String>> {
    if !world.changing_handlers {
        return Ok(()); // nothing stores a diff base
    }
    let mut bad = Vec::new();
    for created in world.survivors() {
        let Some(stored) = world.stored(&created.uid) else {
            continue; // "created objects handled" says so
        };
        let annotations = &stored["metadata"]["annotations"];
        let base = annotations[DIFF_BASE]
            .as_str()
            .and_then(|b| serde_json::from_str::<Value>(b).ok());
        match base {
            None => bad.push(format!("{}: no diff base stored", created.object)),
            Some(base) if base["spec"] != stored["spec"] => bad.push(format!(
                "{}: the last handled spec is {}, the spec is {}",
                created.object, base["spec"], stored["spec"]
            )),
            Some(_) => {}
        }
        let left: Vec<&String> = annotations
            .as_object()
            .into_iter()
            .flat_map(|a| a.keys())
            .filter(|k| k.starts_with(KOPF_PREFIX) && k.as_str() != DIFF_BASE)
            .collect();
        let progress = &stored["status"]["kopf"]["progress"];
        if !left.is_empty() || progress.as_object().is_some_and(|p| !p.is_empty()) {
            bad.push(format!(
                "{}: progress left over: annotations {left:?}, status.kopf.progress {progress}",
                created.object
            ));
        }
    }
    verdict(bad)
}

fn finalizer_first(world: &World) -> Result<(), Vec<String>> {
    if !world.delete_handlers {
        return Ok(());
    }
    let created: std::collections::BTreeSet<&str> =
        world.created.iter().map(|c| c.uid.as_str()).collect();
    let mut bad: Vec<String> = world
        .history
        .handler_runs()
        .filter(|r| matches!(r.reason, Reason::Create | Reason::Update | Reason::Resume))
        .filter(|r| created.contains(r.uid.as_str()) && !r.finalized)
        .map(|r| {
            format!(
                "{}: handler '{}' ran before the finalizer was on",
                r.object, r.handler
            )
        })
        .collect();
    for created in world.survivors() {
        let handled = world
            .runs_of(&created.uid)
            .any(|r| matches!(r.outcome, RunOutcome::Succeeded(_)));
        let stored = world.stored(&created.uid);
        let kept = stored.is_some_and(|o| {
            o["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
        });
        if handled && stored.is_some() && !kept {
            bad.push(format!(
                "{}: handled, but without the finalizer",
                created.object
            ));
        }
    }
    verdict(bad)
}

fn deleted_gone(world: &World) -> Result<(), Vec<String>> {
    let bad = world
        .created
        .iter()
        .filter(|c| c.deleted)
        .filter_map(|c| {
            let stored = world.stored(&c.uid)?;
            Some(format!(
                "{}: still there, finalizers {}",
                c.object, stored["metadata"]["finalizers"]
            ))
        })
        .collect();
    verdict(bad)
}

fn delete_handlers_ran(world: &World) -> Result<(), Vec<String>> {
    if !world.delete_handlers {
        return Ok(());
    }
    let bad = world
        .created
        .iter()
        .filter(|c| c.deleted)
        .filter_map(|c| {
            let runs: Vec<&HandlerRun> = world.runs_of(&c.uid).collect();
            // Handled, or held by the finalizer when it was deleted.
            let seen = c.finalized
                || runs.iter().any(|r| {
                    r.reason != Reason::Delete && matches!(r.outcome, RunOutcome::Succeeded(_))
                });
            let deleted = runs
                .iter()
                .any(|r| r.reason == Reason::Delete && r.outcome != RunOutcome::Interrupted);
            (seen && !deleted)
                .then(|| format!("{}: handled, deleted, no delete handler ran", c.object))
        })
        .collect();
    verdict(bad)
}

fn no_unexplained_rerun(world: &World) -> Result<(), Vec<String>> {
    let entries = &world.history.entries;
    // The last success of each handler for each cause (update: for each spec), by index.
    let mut last: BTreeMap<(String, String, &'static str, String), usize> = BTreeMap::new();
    let mut bad = Vec::new();
    for (at, entry) in entries.iter().enumerate() {
        let Event::Handler(run) = &entry.event else {
            continue;
        };
        if !matches!(run.outcome, RunOutcome::Succeeded(_))
            || !matches!(run.reason, Reason::Create | Reason::Update | Reason::Delete)
        {
            continue;
        }
        let spec = match run.reason {
            Reason::Update => run.spec.to_string(),
            _ => String::new(),
        };
        let key = (
            run.uid.clone(),
            run.handler.clone(),
            run.reason.purpose(),
            spec,
        );
        if let Some(before) = last.insert(key, at)
            && !explained(&entries[before + 1..at], &run.object)
        {
            bad.push(format!(
                "{}: handler '{}' ({}) succeeded again at {:.3}s with no kill, failed request \
                 or change between",
                run.object,
                run.handler,
                run.reason.purpose(),
                entry.at.as_secs_f64()
            ));
        }
    }
    verdict(bad)
}

/// Whether something between two runs explains a re-run: a kill, a failed request about
/// the object, or a step of the scenario about it.
fn explained(between: &[super::history::Entry], object: &str) -> bool {
    between.iter().any(|e| match &e.event {
        Event::Killed { .. } => true,
        Event::Request(r) => r.outcome.failed() && format!("{}/{}", r.namespace, r.name) == object,
        Event::Step { what, .. } => {
            what.ends_with(&format!(" {object}")) || what.contains(&format!(" {object} "))
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::sim::history::Entry;
    use serde_json::json;

    fn world(created: Vec<Created>, runs: Vec<HandlerRun>) -> World {
        World {
            objects: Vec::new(),
            history: History {
                entries: runs
                    .into_iter()
                    .map(|run| Entry {
                        at: std::time::Duration::ZERO,
                        event: Event::Handler(run),
                    })
                    .collect(),
            },
            created,
            create_handlers: false,
            delete_handlers: true,
            changing_handlers: true,
        }
    }

    fn deleted(finalized: bool) -> Created {
        Created {
            object: "default/a".into(),
            uid: "u1".into(),
            deleted: true,
            finalized,
        }
    }

    fn run(reason: Reason, finalized: bool) -> HandlerRun {
        HandlerRun {
            instance: 1,
            handler: "h".into(),
            reason,
            uid: "u1".into(),
            object: "default/a".into(),
            spec: json!({}),
            retry: 0,
            finalized,
            outcome: RunOutcome::Succeeded(None),
        }
    }

    #[test]
    fn an_object_deleted_with_the_finalizer_needs_its_delete_handler() {
        let missing = world(vec![deleted(true)], vec![]);
        let bad = delete_handlers_ran(&missing).expect_err("no delete handler ran");
        assert_eq!(bad, ["default/a: handled, deleted, no delete handler ran"]);
        let ran = world(vec![deleted(true)], vec![run(Reason::Delete, true)]);
        assert_eq!(delete_handlers_ran(&ran), Ok(()));
        // Deleted before the operator got to it (no finalizer, nothing ran): nothing owed.
        assert_eq!(
            delete_handlers_ran(&world(vec![deleted(false)], vec![])),
            Ok(())
        );
    }

    #[test]
    fn only_the_scenarios_objects_changing_handlers_need_the_finalizer_first() {
        let early = world(vec![deleted(true)], vec![run(Reason::Create, false)]);
        let bad = finalizer_first(&early).expect_err("created before the finalizer");
        assert_eq!(
            bad,
            ["default/a: handler 'h' ran before the finalizer was on"]
        );
        // A timer, a daemon or an activity (noop), or another object, is not held to it.
        let mut timer = run(Reason::Noop, false);
        assert_eq!(
            finalizer_first(&world(vec![deleted(true)], vec![timer.clone()])),
            Ok(())
        );
        timer.reason = Reason::Create;
        timer.uid = "another".into();
        assert_eq!(
            finalizer_first(&world(vec![deleted(true)], vec![timer])),
            Ok(())
        );
    }
}
