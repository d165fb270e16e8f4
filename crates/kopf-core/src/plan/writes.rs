//! The writes of a plan, in the order that never loses a handler's outcome, each rendered
//! against the object as the write before it left it: the policy of the applier, as values.
//! The applier (in kopf-watch) sends the [`WriteStep`]s that [`Writes::next`] gives, handles
//! each one's refusals (409, 422, a failed guard), and reports what the API server stored
//! with [`Writes::stored`].
//!
//! The rules:
//! * At most one PATCH per endpoint.
//! * The write that claims the cause (the diff-base) is the last one: `/status` (the
//!   handlers' results) first, then the object (progress records, the diff-base, the
//!   finalizer). If anything fails in between, the cause is not claimed and its handlers run
//!   again.
//! * With the diff-base in the status ([`PatchPlan::status_claims`]), the results and the
//!   diff-base are one `/status` PATCH (atomic): the object's changes go first.
//! * Adding the finalizer is a cycle of its own (the finalizer step of `processing`): its
//!   plan has nothing else to store, so the finalizer is stored before any result.
//! * Without a status subresource, everything is one object PATCH.
//! * A request is rendered against the object as observed, or as the write before it
//!   returned it when it is guarded (its `resourceVersion` test is then our own write's).
//!
//! ```
//! use kopf_core::plan::{PatchPlan, PatchRequest, Stored};
//! use serde_json::json;
//!
//! let body = json!({"metadata": {"name": "x", "resourceVersion": "7"}});
//! let mut plan = PatchPlan::new();
//! plan.status_result("create_fn", json!({"message": "hello"}));
//! plan.diff_base(&json!({"metadata": {"annotations": {"last-handled": "{}"}}}));
//! let mut writes = plan.writes(&body, true);
//! let first = writes.next().expect("the results");
//! assert!(matches!(first.request, PatchRequest::MergeStatus(_)) && first.results);
//! writes.stored(Stored::Object(json!({"metadata": {"name": "x", "resourceVersion": "8"}})));
//! let second = writes.next().expect("the diff-base");
//! assert!(matches!(second.request, PatchRequest::MergeObject(_)) && !second.results);
//! writes.stored(Stored::Object(json!({"metadata": {"name": "x", "resourceVersion": "9"}})));
//! assert!(writes.next().is_none());
//! assert_eq!(writes.rv(), Some(9));
//! ```

use std::borrow::Cow;

use serde_json::Value;

use super::{FinalizerEdit, PatchPlan, PatchRequest};

/// How a step is sent and what a refusal of it means (the applier's part).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// A merge patch: a `409` is a conflict inside the API server, the same patch is sent
    /// again.
    Merge,
    /// Changed conditions (with the endpoint's other changes): one JSON patch guarded by a
    /// test of the list it was computed from; when another writer changed the list, the plan
    /// is rendered again on the fresh object.
    Conditions,
    /// A finalizer change (with the object's other changes): one JSON patch guarded by a
    /// `resourceVersion` test; a failed test means that the object changed meanwhile.
    Finalizer {
        /// A deleted object's release: retried on the object as it is now (the deletion was
        /// handled); other finalizer changes wait for the newer state.
        releasing: bool,
    },
}

/// One write of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteStep {
    /// The request.
    pub request: PatchRequest,
    /// How it is sent.
    pub kind: WriteKind,
    /// Whether the handlers' results travel in it: a `422` then refuses them (their handlers
    /// are blamed), and what the server stored is compared with them. The guarded finalizer
    /// write does neither: its refusals are failures with the server's words.
    pub results: bool,
}

/// What the API server stored for the step just sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    /// The object as the write returned it (merge patches and conditions writes).
    Object(Value),
    /// The resourceVersion that the guarded finalizer write left (None: nothing was left to
    /// write).
    Version(Option<u64>),
}

/// Which endpoint a write goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Status,
    Object,
}

/// The writes of one plan for one observed object, step by step: see the
/// [module](self) for the rules.
#[derive(Debug, Clone)]
pub struct Writes<'a> {
    plan: &'a PatchPlan,
    /// The object as observed (the cycle's).
    body: &'a Value,
    status_subresource: bool,
    /// The endpoints in their order; `at` is the next one.
    order: [Endpoint; 2],
    at: usize,
    /// What the next request is rendered against.
    base: Cow<'a, Value>,
    /// The resourceVersion our writes left so far.
    rv: Option<u64>,
    /// The step sent last and not answered yet.
    sent: Option<(Endpoint, WriteKind)>,
    /// The plan releases the deleted object (removes the finalizer).
    releasing: bool,
}

impl PatchPlan {
    /// Whether the object's write goes before the `/status` write: when the status carries
    /// the diff-base (the claim is the last write); only with a status subresource.
    pub(super) fn object_first(&self, status_subresource: bool) -> bool {
        status_subresource && self.status_claims
    }

    /// The plan's writes for `body` (as observed), in order: see [`Writes`].
    pub fn writes<'a>(&'a self, body: &'a Value, status_subresource: bool) -> Writes<'a> {
        let object_first = self.object_first(status_subresource)
            && self.object_request(body, status_subresource).is_some();
        let (order, rv) = if object_first {
            // The object's write is always sent; the status write's version, if it has
            // none, is the one the object's write left.
            ([Endpoint::Object, Endpoint::Status], resource_version(body))
        } else {
            ([Endpoint::Status, Endpoint::Object], None)
        };
        Writes {
            plan: self,
            body,
            status_subresource,
            order,
            at: 0,
            base: Cow::Borrowed(body),
            rv,
            sent: None,
            releasing: matches!(self.finalizer, Some(FinalizerEdit::Remove(_)))
                && crate::finalizers::is_deleting(body),
        }
    }
}

impl Writes<'_> {
    /// The next write, rendered against [`base`](Self::base); None when all are sent (an
    /// endpoint with nothing to change is skipped).
    #[allow(clippy::should_implement_trait)] // each step needs the answer of the one before
    pub fn next(&mut self) -> Option<WriteStep> {
        while let Some(&endpoint) = self.order.get(self.at) {
            self.at += 1;
            let request = match endpoint {
                Endpoint::Status => self
                    .plan
                    .status_request(&self.base, self.status_subresource),
                Endpoint::Object => self
                    .plan
                    .object_request(&self.base, self.status_subresource),
            };
            let Some(request) = request else {
                continue;
            };
            let kind = self.kind(&request);
            self.sent = Some((endpoint, kind));
            return Some(WriteStep {
                request,
                kind,
                results: endpoint == Endpoint::Status || !self.status_subresource,
            });
        }
        None
    }

    fn kind(&self, request: &PatchRequest) -> WriteKind {
        match request {
            PatchRequest::MergeStatus(_) | PatchRequest::MergeObject(_) => WriteKind::Merge,
            PatchRequest::JsonStatus(_) => WriteKind::Conditions,
            // Without a status subresource, the conditions go with the object, guarded.
            PatchRequest::JsonObject(_)
                if !self.status_subresource
                    && !self.releasing
                    && self.plan.conditions_for(&self.base).is_some() =>
            {
                WriteKind::Conditions
            }
            PatchRequest::JsonObject(_) => WriteKind::Finalizer {
                releasing: self.releasing,
            },
        }
    }

    /// The object the next request is (and the step just given was) rendered against: the
    /// guarded writes re-render on a fresh object from it.
    pub fn base(&self) -> &Value {
        &self.base
    }

    /// What the API server stored for the step just sent: the base of the next one.
    pub fn stored(&mut self, stored: Stored) {
        let Some((endpoint, kind)) = self.sent.take() else {
            return;
        };
        match stored {
            Stored::Object(object) => {
                let written = resource_version(&object);
                // The status write after the object's: its own version, else the object's.
                self.rv = if endpoint == Endpoint::Status && self.order[0] == Endpoint::Object {
                    written.or(self.rv)
                } else {
                    written
                };
                // A guarded object write after the status write tests what the status
                // write saw (its resourceVersion is our own write's).
                if endpoint == Endpoint::Object
                    || kind == WriteKind::Conditions
                    || self.plan.finalizer.is_some()
                {
                    self.base = Cow::Owned(object);
                }
            }
            Stored::Version(version) => {
                self.rv = version.or(self.rv);
                if self.at < self.order.len() {
                    self.base = Cow::Owned(self.after_finalizer(version));
                }
            }
        }
    }

    /// The object as the guarded finalizer write left it (that write returns only a
    /// version): the plan's changes, with the status not written yet.
    fn after_finalizer(&self, version: Option<u64>) -> Value {
        let mut base = self.plan.preview(self.body);
        if let Some(m) = base.as_object_mut() {
            match self.body.get("status") {
                Some(status) => m.insert("status".into(), status.clone()),
                None => m.remove("status"),
            };
        }
        if let Some(rv) = version
            && let Some(meta) = base.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        base
    }

    /// The resourceVersion that the writes left (None: nothing was written): the worker
    /// waits for it before it takes a newer state.
    pub fn rv(&self) -> Option<u64> {
        self.rv
    }
}

fn resource_version(body: &Value) -> Option<u64> {
    body.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions::{ConditionStatus, Intent};
    use proptest::prelude::*;
    use serde_json::json;

    const F: &str = "kopf.zalando.org/KopfFinalizerMarker";

    /// The API server as the applier sees it: stores a step, bumps the resourceVersion, and
    /// answers as the applier reports it.
    struct Server {
        object: Value,
        rv: u64,
    }

    impl Server {
        fn new(body: &Value) -> Self {
            Server {
                object: body.clone(),
                rv: resource_version(body).expect("a resourceVersion"),
            }
        }

        fn write(&mut self, step: &WriteStep) -> Stored {
            match &step.request {
                PatchRequest::MergeStatus(p) | PatchRequest::MergeObject(p) => {
                    kopf_diff::apply_merge_patch(&mut self.object, p)
                }
                PatchRequest::JsonStatus(ops) | PatchRequest::JsonObject(ops) => {
                    let patch: json_patch::Patch =
                        serde_json::from_value(Value::Array(ops.clone())).expect("a JSON patch");
                    json_patch::patch(&mut self.object, &patch).expect("the guard holds");
                }
            }
            self.rv += 1;
            self.object["metadata"]["resourceVersion"] = json!(self.rv.to_string());
            match step.kind {
                WriteKind::Finalizer { .. } => Stored::Version(Some(self.rv)),
                _ => Stored::Object(self.object.clone()),
            }
        }
    }

    /// The steps sent, the object as stored after each, and the version the writes left.
    fn run(plan: &PatchPlan, body: &Value, ss: bool) -> (Vec<WriteStep>, Vec<Value>, Option<u64>) {
        let mut server = Server::new(body);
        let mut writes = plan.writes(body, ss);
        let (mut steps, mut stored) = (Vec::new(), Vec::new());
        while let Some(step) = writes.next() {
            assert!(steps.len() < 2, "at most one write per endpoint");
            writes.stored(server.write(&step));
            stored.push(server.object.clone());
            steps.push(step);
        }
        (steps, stored, writes.rv())
    }

    fn body() -> Value {
        json!({"metadata": {"name": "x", "resourceVersion": "1", "finalizers": [F]}})
    }

    #[test]
    fn results_first_then_the_claim_against_what_the_status_write_returned() {
        let mut plan = PatchPlan::new();
        plan.status_result("create_fn", json!(1));
        plan.diff_base(&json!({"metadata": {"annotations": {"last": "x"}}}));
        plan.finalizer(FinalizerEdit::Remove(F.into()));
        let (steps, _, rv) = run(&plan, &body(), true);
        assert_eq!(steps[0].request.endpoint(), "status");
        assert!(steps[0].results && steps[0].kind == WriteKind::Merge);
        let PatchRequest::JsonObject(ops) = &steps[1].request else {
            panic!("a guarded JSON patch: {steps:?}");
        };
        assert_eq!(ops[0]["value"], "2", "the status write's version is tested");
        assert_eq!(steps[1].kind, WriteKind::Finalizer { releasing: false });
        assert!(!steps[1].results);
        assert_eq!(rv, Some(3));
    }

    #[test]
    fn the_claim_in_the_status_goes_last_after_the_object() {
        let mut plan = PatchPlan::new();
        plan.status_result("create_fn", json!(1));
        plan.merge(&json!({"metadata": {"annotations": {"progress": "y"}}}));
        plan.diff_base(&json!({"status": {"last": "x"}}));
        let (steps, _, rv) = run(&plan, &body(), true);
        let endpoints: Vec<_> = steps.iter().map(|s| s.request.endpoint()).collect();
        assert_eq!(endpoints, ["object", "status"]);
        assert!(!steps[0].results && steps[1].results);
        assert_eq!(rv, Some(3));
        // The requests of the plan are in the same order.
        let requests: Vec<_> = plan.requests(&body(), true);
        assert_eq!(requests[0].endpoint(), "object");
    }

    #[test]
    fn after_a_guarded_object_write_the_status_goes_against_the_plan_without_its_status() {
        let body = json!({"metadata": {"name": "x", "resourceVersion": "1"}, "status": {"old": 1}});
        let mut plan = PatchPlan::new();
        plan.finalizer(FinalizerEdit::Add(F.into()));
        plan.diff_base(&json!({"status": {"last": "x"}}));
        let mut writes = plan.writes(&body, true);
        let first = writes.next().expect("the finalizer first");
        assert_eq!(first.kind, WriteKind::Finalizer { releasing: false });
        writes.stored(Stored::Version(Some(5)));
        assert_eq!(writes.base()["metadata"]["resourceVersion"], "5");
        assert_eq!(writes.base()["status"], json!({"old": 1}));
        let second = writes.next().expect("the claim");
        assert_eq!(
            second.request,
            PatchRequest::MergeStatus(json!({"status": {"last": "x"}}))
        );
        assert!(writes.next().is_none());
        assert_eq!(
            writes.rv(),
            Some(5),
            "the status write answered nothing yet"
        );

        // Nothing left to write for the finalizer: the version is the object's as observed.
        let mut writes = plan.writes(&body, true);
        writes.next();
        writes.stored(Stored::Version(None));
        assert_eq!(writes.rv(), Some(1));
    }

    #[test]
    fn kinds_follow_the_request_and_the_object() {
        let deleting = json!({"metadata": {"name": "x", "resourceVersion": "1", "finalizers": [F],
            "deletionTimestamp": "2024-01-01T00:00:00Z"}});
        let mut release = PatchPlan::new();
        release.finalizer(FinalizerEdit::Remove(F.into()));
        let (steps, _, _) = run(&release, &deleting, true);
        assert_eq!(steps[0].kind, WriteKind::Finalizer { releasing: true });

        // Without a status subresource: one object write with the results, conditions guarded.
        let mut plan = PatchPlan::new();
        plan.status_result("create_fn", json!(1));
        plan.conditions(vec![Intent::set(
            "Ready",
            ConditionStatus::True,
            "Done",
            "",
        )]);
        let (steps, stored, _) = run(&plan, &body(), false);
        assert_eq!(steps.len(), 1);
        assert!(steps[0].results && steps[0].kind == WriteKind::Conditions);
        assert_eq!(stored[0]["status"]["create_fn"], 1);
        assert_eq!(stored[0]["status"]["conditions"][0]["type"], "Ready");
    }

    /// A plan and an object, as the property test draws them.
    #[derive(Debug, Clone)]
    struct Case {
        results: Vec<(&'static str, i64)>,
        stored_result: bool,
        /// 0: no diff-base, 1: in an annotation, 2: in the status.
        claim: u8,
        progress: bool,
        /// 0: no finalizer change, 1: add, 2: remove.
        finalizer: u8,
        has_finalizer: bool,
        deleting: bool,
        conditions: bool,
        listed: bool,
        status_subresource: bool,
    }

    fn cases() -> impl Strategy<Value = Case> {
        (
            (proptest::option::of(0i64..3), proptest::option::of(0i64..3)),
            any::<bool>(),
            0u8..3,
            any::<bool>(),
            0u8..3,
            (any::<bool>(), any::<bool>()),
            (any::<bool>(), any::<bool>()),
            any::<bool>(),
        )
            .prop_map(
                |(
                    (a, b),
                    stored_result,
                    claim,
                    progress,
                    finalizer,
                    (has_finalizer, deleting),
                    (conditions, listed),
                    status_subresource,
                )| Case {
                    results: [("a", a), ("b", b)]
                        .into_iter()
                        .filter_map(|(id, v)| v.map(|v| (id, v)))
                        .collect(),
                    stored_result,
                    claim,
                    progress,
                    finalizer,
                    has_finalizer,
                    deleting,
                    conditions,
                    listed,
                    status_subresource,
                },
            )
    }

    impl Case {
        fn body(&self) -> Value {
            let mut body = json!({"metadata": {"name": "x", "resourceVersion": "10"}});
            if self.has_finalizer {
                body["metadata"]["finalizers"] = json!(["other", F]);
            }
            if self.deleting {
                body["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
            }
            if self.stored_result || self.listed {
                body["status"] = json!({"a": 0});
            }
            if self.listed {
                body["status"]["conditions"] = json!([{"type": "Other", "status": "True",
                    "reason": "X", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z"}]);
            }
            body
        }

        fn plan(&self) -> PatchPlan {
            let mut plan = PatchPlan::new();
            for (id, v) in &self.results {
                plan.status_result(id, json!(v));
            }
            if self.progress {
                plan.merge(&json!({"metadata": {"annotations": {"progress": "p"}}}));
            }
            match self.claim {
                1 => plan.diff_base(&json!({"metadata": {"annotations": {"claim": "c"}}})),
                2 => plan.diff_base(&json!({"status": {"claim": "c"}})),
                _ => {}
            }
            match self.finalizer {
                1 => plan.finalizer(FinalizerEdit::Add(F.into())),
                2 => plan.finalizer(FinalizerEdit::Remove(F.into())),
                _ => {}
            }
            if self.conditions {
                plan.conditions(vec![Intent::set(
                    "Ready",
                    ConditionStatus::True,
                    "Done",
                    "",
                )]);
                let now = "2024-01-01T00:00:00Z".parse().expect("a time");
                plan.condition_clock(Some(1), now);
            }
            plan
        }
    }

    fn claimed(object: &Value) -> bool {
        object.pointer("/metadata/annotations/claim").is_some()
            || object.pointer("/status/claim").is_some()
    }

    fn without_version(mut object: Value) -> Value {
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        object
    }

    proptest! {
        /// Whatever the plan and the object: at most one write per endpoint; once the claim
        /// (the diff-base) is stored, every result is stored too, and it is stored by the
        /// last write; the results travel only in writes that say so; and in the end the
        /// object is as the plan previews it.
        #[test]
        fn writes_never_claim_before_the_results(case in cases()) {
            let body = case.body();
            let plan = case.plan();
            let (steps, stored, _) = run(&plan, &body, case.status_subresource);
            let all_results = |o: &Value| {
                case.results.iter().all(|(id, v)| o.pointer(&format!("/status/{id}")) == Some(&json!(v)))
            };
            for (i, object) in stored.iter().enumerate() {
                if claimed(object) {
                    prop_assert!(all_results(object), "claimed before the results: {steps:?}");
                }
                let before = if i == 0 { &body } else { &stored[i - 1] };
                let results_sent = case.results.iter().any(|(id, _)| {
                    before.pointer(&format!("/status/{id}")) != object.pointer(&format!("/status/{id}"))
                });
                prop_assert!(!results_sent || steps[i].results, "{steps:?}");
            }
            if case.claim > 0 {
                prop_assert_eq!(
                    stored.iter().position(claimed),
                    Some(stored.len() - 1),
                    "the claim is stored by the last write: {:?}",
                    steps
                );
            }
            let mut expected = plan.preview(&body);
            if let Some(edit) = plan.finalizer_edit() {
                let ops: json_patch::Patch =
                    serde_json::from_value(Value::Array(edit.ops(&body))).expect("a JSON patch");
                json_patch::patch(&mut expected, &ops).expect("the guard holds");
            }
            let last = stored.last().cloned().unwrap_or_else(|| body.clone());
            prop_assert_eq!(without_version(last), without_version(expected));
        }
    }
}
