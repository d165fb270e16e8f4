//! One processing cycle of one object: detect the cause, keep the finalizer right, run every
//! ready handler, and fold all outcomes into one [`PatchPlan`].
//!
//! Unlike Kopf's default (one handler per cycle, a PATCH per handler), all ready handlers run
//! in the same cycle; a cycle in which they all finish writes no progress records, only the
//! results, the new diff-base and (on deletion) the finalizer removal.

use std::time::Duration;

use jiff::Timestamp;
use kopf_diff::essence::{self, EssenceSettings};
use kopf_diff::{Diff, diff, reduce, resolve};
use serde_json::{Value, json};

use crate::causes::{ChangingCause, EventKind, Reason, detect};
use crate::events::EventSpec;
use crate::finalizers;
use crate::handler::{Cause, EventsHandle, HandlerSpec, PatchHandle};
use crate::layers::{self, Attempt, HandlerCall};
use crate::plan::PatchPlan;
use crate::progress::{ProgressRecord, ProgressStorage, format_time, parse_time};

/// Which of the ready handlers run in one cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lifecycle {
    /// All ready handlers (kopf-rs's default: one PATCH per endpoint per cycle).
    #[default]
    AllAtOnce,
    /// One handler per cycle, the one with the fewest retries (Kopf's default `asap`).
    Asap,
    /// One handler per cycle, in registration order.
    OneByOne,
}

/// Where the engine keeps its state on objects, and how a cycle picks its handlers.
#[derive(Debug, Clone)]
pub struct Persistence {
    /// The diff-base annotation and essence rules.
    pub essence: EssenceSettings,
    /// Progress annotations.
    pub progress: ProgressStorage,
    /// The finalizer name.
    pub finalizer: String,
    /// Which ready handlers run per cycle.
    pub lifecycle: Lifecycle,
}

impl Default for Persistence {
    fn default() -> Self {
        Persistence {
            essence: EssenceSettings::default(),
            progress: ProgressStorage::default(),
            finalizer: finalizers::DEFAULT_FINALIZER.into(),
            lifecycle: Lifecycle::default(),
        }
    }
}

impl Persistence {
    /// The same settings with the handlers' fields tracked in the essence.
    pub fn tracking(&self, handlers: &[HandlerSpec]) -> Persistence {
        let mut p = self.clone();
        for h in handlers {
            if let Some(f) = &h.field
                && !p.essence.tracked_fields.contains(f)
            {
                p.essence.tracked_fields.push(f.clone());
            }
        }
        p
    }

    fn touch_key(&self) -> String {
        format!("{}/touch-dummy", self.progress.keys.prefix)
    }
}

/// How one handler ended in this cycle.
#[derive(Debug, Clone, PartialEq)]
pub enum HandlerOutcome {
    /// Returned successfully.
    Succeeded,
    /// Will be retried.
    Retrying {
        /// The error.
        message: String,
    },
    /// Failed for good.
    Failed {
        /// The error.
        message: String,
    },
}

/// What a cycle produced.
#[derive(Debug, Clone)]
pub struct CycleOutcome {
    /// The detected cause.
    pub reason: Reason,
    /// Everything to write.
    pub plan: PatchPlan,
    /// Run another cycle after this long even without new events (retries).
    pub delay: Option<Duration>,
    /// All handlers of the cause finished (or none matched).
    pub done: bool,
    /// Handlers that ran, with their outcomes.
    pub ran: Vec<(String, HandlerOutcome)>,
    /// Why the stored diff-base was ignored, if it was unreadable.
    pub corrupt_diffbase: Option<String>,
    /// The finalizer change this cycle sends, if any.
    pub finalizer: Option<FinalizerChange>,
    /// Events to post about the object: the handlers' own, and warnings about failures.
    pub events: Vec<EventSpec>,
}

/// A change of the operator's finalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizerChange {
    /// Added: handlers (or daemons) need it.
    Added,
    /// Removed: the object is released (deletion handled) or no handler needs it.
    Removed,
}

fn selected<'a>(
    handlers: &'a [HandlerSpec],
    cause: &ChangingCause,
    body: &Value,
) -> Vec<&'a HandlerSpec> {
    handlers
        .iter()
        .filter(|h| h.matches(body))
        .filter(|h| match (&h.field, h.reason, cause.reason) {
            // Resume handlers join the first cycle of listed objects.
            (_, _, Reason::Resume) => h.initial,
            (_, _, Reason::Delete) if h.initial && cause.initial => {
                h.deleted || h.reason == Some(Reason::Delete)
            }
            (_, Some(r), reason) if r == reason => true,
            (_, _, Reason::Update) if h.initial && cause.initial => true,
            // Field handlers fire for creation and updates where the field value differs.
            (Some(field), None, Reason::Create | Reason::Update) => {
                !reduce(&diff(cause.old.as_ref(), Some(&cause.new)), field).is_empty()
            }
            _ => false,
        })
        .collect()
}

fn handler_cause(
    h: &HandlerSpec,
    cause: &ChangingCause,
    body: &Value,
    record: &ProgressRecord,
) -> Cause {
    let full: Diff = if cause.reason == Reason::Update || cause.reason == Reason::Create {
        diff(cause.old.as_ref(), Some(&cause.new))
    } else {
        cause.diff.clone()
    };
    let (d, old, new) = match &h.field {
        Some(field) => (
            reduce(&full, field),
            resolve(cause.old.as_ref(), field).cloned(),
            resolve(Some(&cause.new), field).cloned(),
        ),
        None => (full, cause.old.clone(), Some(cause.new.clone())),
    };
    Cause {
        reason: cause.reason,
        body: body.clone(),
        diff: d,
        old,
        new,
        retry: record.retries.unwrap_or(0),
        started: record
            .started
            .clone()
            .unwrap_or_else(|| format_time(Timestamp::now())),
        patch: PatchHandle::default(),
        events: EventsHandle::default(),
    }
}

/// Runs one cycle for one object.
pub async fn process(
    event: EventKind,
    body: &Value,
    initial: bool,
    handlers: &[HandlerSpec],
    persistence: &Persistence,
) -> CycleOutcome {
    let persistence = persistence.tracking(handlers);
    let cause = detect(
        event,
        body,
        &persistence.essence,
        &persistence.finalizer,
        initial,
    );
    let mut out = CycleOutcome {
        reason: cause.reason,
        plan: PatchPlan::new(),
        delay: None,
        done: false,
        ran: Vec::new(),
        corrupt_diffbase: cause.corrupt_diffbase.clone(),
        finalizer: None,
        events: Vec::new(),
    };
    if matches!(cause.reason, Reason::Gone | Reason::Free) {
        out.done = true;
        return out;
    }
    let deleting = cause.reason == Reason::Delete;
    // Filters are evaluated before any work: only handlers relevant to this object count.
    let requires_finalizer = handlers
        .iter()
        .any(|h| h.requires_finalizer && h.matches(body));
    let has_finalizer = finalizers::has(body, &persistence.finalizer);
    // Unlike Kopf (a cycle of its own), the finalizer change travels with this cycle's
    // other object changes in one JSON patch guarded by the resourceVersion test.
    if !deleting && requires_finalizer && !has_finalizer {
        out.plan
            .json_ops(finalizers::add_ops(body, &persistence.finalizer));
    }
    if !deleting && !requires_finalizer && has_finalizer {
        out.plan
            .json_ops(finalizers::remove_ops(body, &persistence.finalizer));
    }
    if cause.reason == Reason::Noop {
        out.done = true;
        return out;
    }
    let now = Timestamp::now();
    let chosen = selected(handlers, &cause, body);
    // With a one-per-cycle lifecycle, only the picked ready handler runs now.
    let ready: Vec<(usize, u32)> = chosen
        .iter()
        .enumerate()
        .filter_map(|(i, h)| {
            let rec = persistence
                .progress
                .fetch(&h.id, body)
                .and_then(Result::ok)
                .unwrap_or_default();
            (!rec.is_finished() && rec.is_awake(now)).then_some((i, rec.retries.unwrap_or(0)))
        })
        .collect();
    let picked: Option<usize> = match persistence.lifecycle {
        Lifecycle::AllAtOnce => None,
        Lifecycle::OneByOne => ready.first().map(|(i, _)| *i),
        Lifecycle::Asap => ready.iter().min_by_key(|(_, r)| *r).map(|(i, _)| *i),
    };
    let mut all_done = true;
    let mut ran_records: Vec<(String, ProgressRecord)> = Vec::new();
    let mut delays: Vec<Duration> = Vec::new();
    let mut current = body.clone();
    for (index, h) in chosen.iter().enumerate() {
        let stored = persistence.progress.fetch(&h.id, body).and_then(Result::ok);
        let mut record = stored.clone().unwrap_or_default();
        if record.is_finished() {
            continue;
        }
        if !record.is_awake(now) {
            all_done = false;
            if let Some(d) = record.delayed.as_deref().and_then(parse_time) {
                delays.push(Duration::from_secs_f64(
                    (d.as_millisecond() - now.as_millisecond()).max(0) as f64 / 1000.0,
                ));
            }
            continue;
        }
        if picked.is_some_and(|p| p != index) {
            // Not this cycle's handler: it runs in the next cycle, at once.
            all_done = false;
            delays.push(Duration::ZERO);
            continue;
        }
        record.started.get_or_insert_with(|| format_time(now));
        record.purpose = Some(cause.reason.purpose().to_string());
        // The handler runs through the layer stack: filter, progress, retry, timeout, invoke.
        let call = HandlerCall {
            spec: (*h).clone(),
            cause: handler_cause(h, &cause, &current, &record),
            record: record.clone(),
            now,
        };
        let Attempt::Done {
            outcome: called,
            record: next,
            retry_in,
        } = layers::stack(call).await
        else {
            continue;
        };
        record = next;
        out.events.extend(called.events);
        let outcome = match (called.result, retry_in) {
            (Ok(value), _) => {
                if let Some(v) = value {
                    out.plan.status_result(&h.id, v);
                }
                out.plan.merge(&called.patch);
                HandlerOutcome::Succeeded
            }
            (Err(e), Some(d)) => {
                all_done = false;
                delays.push(d);
                let message = e.to_string();
                out.events.push(EventSpec::warning(
                    "Logging",
                    format!("Handler '{}' failed temporarily: {message}", h.id),
                ));
                HandlerOutcome::Retrying { message }
            }
            (Err(e), None) => {
                let message = e.to_string();
                out.events.push(EventSpec::warning(
                    "Logging",
                    format!("Handler '{}' failed permanently: {message}", h.id),
                ));
                HandlerOutcome::Failed { message }
            }
        };
        // Records are written only if the cause stays unfinished (below); finished handlers'
        // records matter then too, so that they are not run again.
        ran_records.push((h.id.clone(), record));
        out.ran.push((h.id.clone(), outcome));
        current = out.plan.preview(body);
    }
    if all_done {
        for h in &chosen {
            persistence
                .progress
                .purge(&h.id, body, out.plan.merge_patch_mut());
        }
        if deleting {
            out.plan
                .json_ops(finalizers::remove_ops(body, &persistence.finalizer));
        } else {
            let stored = essence::stored(body, &persistence.essence).and_then(Result::ok);
            if stored.as_ref() != Some(&cause.new) {
                let key = persistence.essence.annotation();
                out.plan.merge(
                    &json!({"metadata": {"annotations": {key: essence::encode(&cause.new)}}}),
                );
            }
        }
        out.done = true;
    } else {
        for (id, record) in &ran_records {
            persistence
                .progress
                .store(id, record, body, out.plan.merge_patch_mut());
        }
        // Unfinished handlers whose records did not change still need a first record.
        for h in &chosen {
            if persistence.progress.fetch(&h.id, body).is_none()
                && !out.ran.iter().any(|(id, _)| id == &h.id)
            {
                let rec = ProgressRecord {
                    started: Some(format_time(now)),
                    purpose: Some(cause.reason.purpose().into()),
                    retries: Some(0),
                    success: Some(false),
                    failure: Some(false),
                    ..Default::default()
                };
                persistence
                    .progress
                    .store(&h.id, &rec, body, out.plan.merge_patch_mut());
            }
        }
        out.delay = delays.into_iter().min();
    }
    // A real change also clears the touch annotation.
    let touch = persistence.touch_key();
    if !out
        .plan
        .effective(body)
        .as_object()
        .is_none_or(serde_json::Map::is_empty)
        && body
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(&touch))
            .is_some()
    {
        out.plan
            .merge(&json!({"metadata": {"annotations": {touch: null}}}));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::HandlerError;
    use crate::plan::PatchRequest;

    fn kex() -> Value {
        json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {"name": "k", "namespace": "default", "resourceVersion": "5", "labels": {"a": "b"}},
            "spec": {"field": "value"}})
    }

    fn create_fn() -> HandlerSpec {
        HandlerSpec::new("create_fn", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!({"message": "hello world"})))
        })
    }

    #[tokio::test]
    async fn creation_writes_result_and_diffbase_in_one_patch_per_endpoint() {
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            &[create_fn()],
            &Persistence::default(),
        )
        .await;
        assert_eq!(out.reason, Reason::Create);
        assert!(out.done);
        let reqs = out.plan.requests(&kex(), true);
        assert_eq!(reqs.len(), 2, "{reqs:?}");
        assert_eq!(
            reqs[0],
            PatchRequest::MergeObject(json!({"metadata": {"annotations": {
                "kopf.zalando.org/last-handled-configuration": "{\"spec\":{\"field\":\"value\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}\n"}}}))
        );
        assert_eq!(
            reqs[1],
            PatchRequest::MergeStatus(json!({"status": {"create_fn": {"message": "hello world"}}}))
        );
    }

    #[tokio::test]
    async fn temporary_errors_store_progress_and_retry_later() {
        let flaky = HandlerSpec::new("flaky", Some(Reason::Create), |c: Cause| async move {
            if c.retry == 0 {
                Err(HandlerError::temporary("not yet", Duration::from_secs(5)))
            } else {
                Ok(None)
            }
        });
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            std::slice::from_ref(&flaky),
            &Persistence::default(),
        )
        .await;
        assert!(!out.done);
        assert_eq!(out.delay, Some(Duration::from_secs(5)));
        let patch = out.plan.effective(&kex());
        let record: ProgressRecord = serde_json::from_str(
            patch["metadata"]["annotations"]["kopf.zalando.org/flaky"]
                .as_str()
                .unwrap_or("{}"),
        )
        .unwrap_or_default();
        assert_eq!(record.retries, Some(1));
        assert_eq!(record.message.as_deref(), Some("not yet"));
        assert_eq!(record.purpose.as_deref(), Some("create"));
        // The stored record survives a restart: the next cycle sees retry=1 once awake.
        let mut body = out.plan.preview(&kex());
        let mut rec = record.clone();
        rec.delayed = Some(format_time(Timestamp::now()));
        body["metadata"]["annotations"]["kopf.zalando.org/flaky"] = json!(rec.encode());
        let second = process(
            EventKind::Modified,
            &body,
            false,
            &[flaky],
            &Persistence::default(),
        )
        .await;
        assert!(second.done);
        let patch = second.plan.effective(&body);
        assert_eq!(
            patch["metadata"]["annotations"]["kopf.zalando.org/flaky"],
            Value::Null,
            "purged"
        );
        assert!(
            patch["metadata"]["annotations"]["kopf.zalando.org/last-handled-configuration"]
                .is_string()
        );
    }

    #[tokio::test]
    async fn finalizer_first_then_delete_handler_releases() {
        let del = HandlerSpec::new("delete_fn", Some(Reason::Delete), |_c: Cause| async {
            Ok(None)
        });
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            std::slice::from_ref(&del),
            &Persistence::default(),
        )
        .await;
        // The finalizer and the diff-base go together in one guarded JSON patch.
        let reqs = out.plan.requests(&kex(), true);
        assert!(
            matches!(reqs.as_slice(), [PatchRequest::JsonObject(ops)]
                if ops[1]["path"] == "/metadata/finalizers" && ops[2]["path"] == "/metadata/annotations"),
            "{reqs:?}"
        );
        let mut deleting = kex();
        deleting["metadata"]["finalizers"] = json!([finalizers::DEFAULT_FINALIZER]);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let out = process(
            EventKind::Modified,
            &deleting,
            false,
            &[del],
            &Persistence::default(),
        )
        .await;
        assert_eq!(out.reason, Reason::Delete);
        let reqs = out.plan.requests(&deleting, true);
        assert!(
            matches!(reqs.as_slice(), [PatchRequest::JsonObject(ops)] if ops[1] == json!({"op": "remove", "path": "/metadata/finalizers"})),
            "{reqs:?}"
        );
    }

    #[tokio::test]
    async fn panics_and_field_handlers() {
        let boom = HandlerSpec::new("boom", Some(Reason::Update), |_c: Cause| async {
            panic!("kaboom")
        });
        let mut field = HandlerSpec::new("field_fn/spec.field", None, |c: Cause| async move {
            Ok(Some(json!({"old": c.old, "new": c.new})))
        });
        field.field = Some(vec!["spec".into(), "field".into()]);
        let mut body = kex();
        body["metadata"]["annotations"] = json!({"kopf.zalando.org/last-handled-configuration": "{\"spec\":{\"field\":\"old\"},\"metadata\":{\"labels\":{\"a\":\"b\"}}}\n"});
        let out = process(
            EventKind::Modified,
            &body,
            false,
            &[boom, field],
            &Persistence::default(),
        )
        .await;
        assert_eq!(out.reason, Reason::Update);
        assert!(
            matches!(&out.ran[0].1, HandlerOutcome::Retrying { message } if message.contains("panicked"))
        );
        assert_eq!(out.ran[1].1, HandlerOutcome::Succeeded);
        assert_eq!(
            out.plan.preview(&body)["status"]["field_fn/spec.field"],
            json!({"old": "old", "new": "value"})
        );
    }

    #[tokio::test]
    async fn timeouts_cancel_a_running_handler() {
        let mut slow = HandlerSpec::new("slow", Some(Reason::Create), |_c: Cause| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(None)
        });
        slow.timeout = Some(Duration::from_millis(100));
        let started = std::time::Instant::now();
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            &[slow],
            &Persistence::default(),
        )
        .await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "cancelled at the deadline"
        );
        assert!(
            matches!(&out.ran[0].1, HandlerOutcome::Failed { message } if message.contains("timed out"))
        );
        assert!(out.done, "a permanent failure finishes the cause");
    }

    #[tokio::test]
    async fn filters_select_handlers_and_the_finalizer() {
        use crate::handler::MetaFilter;
        use std::sync::Arc;
        let mut labelled = HandlerSpec::new("labelled", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(1)))
        });
        labelled.labels = vec![("a".into(), MetaFilter::Value("b".into()))];
        let mut absent = HandlerSpec::new("absent", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(2)))
        });
        absent.annotations = vec![("skip".into(), MetaFilter::Present)];
        let mut when = HandlerSpec::new("when", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(3)))
        });
        when.when = Some(Arc::new(|b: &Value| b["spec"]["field"] == "value"));
        let mut del = HandlerSpec::new("del", Some(Reason::Delete), |_c: Cause| async { Ok(None) });
        del.labels = vec![("a".into(), MetaFilter::Absent)];
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            &[labelled, absent, when, del],
            &Persistence::default(),
        )
        .await;
        let ran: Vec<&str> = out.ran.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ran, vec!["labelled", "when"]);
        assert_eq!(
            out.finalizer, None,
            "the delete handler does not match, so no finalizer"
        );
    }

    #[tokio::test]
    async fn asap_lifecycle_runs_one_handler_per_cycle() {
        let a = HandlerSpec::new("a", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(1)))
        });
        let b = HandlerSpec::new("b", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(2)))
        });
        let persistence = Persistence {
            lifecycle: Lifecycle::Asap,
            ..Default::default()
        };
        let out = process(
            EventKind::Added,
            &kex(),
            false,
            &[a.clone(), b.clone()],
            &persistence,
        )
        .await;
        assert_eq!(out.ran.len(), 1);
        assert!(!out.done);
        assert_eq!(
            out.delay,
            Some(Duration::ZERO),
            "the next cycle follows at once"
        );
        // The next cycle (on the patched body) runs the other one and completes the cause.
        let mut body = out.plan.preview(&kex());
        body["metadata"]["resourceVersion"] = json!("6");
        let second = process(EventKind::Modified, &body, false, &[a, b], &persistence).await;
        assert_eq!(second.ran.len(), 1);
        assert_ne!(second.ran[0].0, out.ran[0].0);
        assert!(second.done);
    }

    #[tokio::test]
    async fn succeeded_handlers_are_not_rerun_while_others_retry() {
        let ok = HandlerSpec::new("ok", Some(Reason::Create), |_c: Cause| async {
            Ok(Some(json!(1)))
        });
        let later = HandlerSpec::new("later", Some(Reason::Create), |c: Cause| async move {
            if c.retry == 0 {
                Err(HandlerError::temporary("wait", Duration::ZERO))
            } else {
                Ok(None)
            }
        });
        let first = process(
            EventKind::Added,
            &kex(),
            false,
            &[ok.clone(), later.clone()],
            &Persistence::default(),
        )
        .await;
        assert!(!first.done);
        let body = first.plan.preview(&kex());
        let second = process(
            EventKind::Modified,
            &body,
            false,
            &[ok, later],
            &Persistence::default(),
        )
        .await;
        let ran: Vec<&str> = second.ran.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ran, vec!["later"], "the succeeded handler is not run again");
        assert!(second.done);
    }
}
