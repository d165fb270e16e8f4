//! Admission webhooks (`admissionregistration.k8s.io/v1`), called on writes as
//! kube-apiserver calls them.
//!
//! Stored `MutatingWebhookConfiguration`s and `ValidatingWebhookConfiguration`s are
//! defaulted and validated as by kube-apiserver (`failurePolicy: Fail`, `matchPolicy:
//! Equivalent`, `timeoutSeconds: 10` (1–30), empty selectors, rule `scope: "*"`, service
//! port 443, `reinvocationPolicy: Never`; `sideEffects` must be `None|NoneOnDryRun`,
//! `admissionReviewVersions` must name `v1` or `v1beta1`, names must have three segments).
//!
//! On every create, update (PUT), patch (any type, also creating applies) and delete —
//! subresource writes included, with `subResource` set — the webhooks whose `rules`
//! (operations, apiGroups, apiVersions, resources with `*`, `*/*`, `plural/sub`, scope) match
//! are called, when `namespaceSelector` (the Namespace's labels; the object's own for
//! Namespaces; not applied to other cluster-scoped objects) and `objectSelector` (the
//! object's or the old object's labels) match too. With `matchPolicy: Equivalent` a rule
//! for another served version of the same resource matches as well, and the webhook sees
//! the object in the rule's version (converted by the CRD's conversion).
//!
//! The order is kube-apiserver's: the request's object is decoded and defaulted; mutating
//! webhooks are called one after the other (by configuration name, then list order), each
//! seeing the previous one's result, their JSON patches applied and the object defaulted
//! again; then the object is validated; then the validating webhooks are called in
//! parallel; then it is stored. A denial, a failed call under `failurePolicy: Fail` or an
//! invalid object stores nothing. The state is never locked while a webhook is called: the
//! write is computed, the lock released, the webhooks called, and the result committed only
//! if the stored object has not changed meanwhile — PATCH (and PUT without a
//! resourceVersion) starts over, PUT with a resourceVersion gets its 409 Conflict.
//!
//! Requests are `AdmissionReview` `admission.k8s.io/v1` with a fresh uid, `userInfo`
//! `system:admin` (groups `system:masters`, `system:authenticated`), `options` as
//! Create/Update/DeleteOptions and `dryRun`. Answers must be AdmissionReview v1 with the
//! same uid; patches only from mutating webhooks, only `patchType: JSONPatch`. A denial
//! answers `admission webhook "<name>" denied the request: <message>` with the webhook's
//! code (at least 400); a failed call answers 500 `Internal error occurred: failed calling
//! webhook "<name>": failed to call webhook: <why>` (or proceeds under `Ignore`). Warnings
//! of every webhook become `Warning` headers. Dry runs call webhooks with `dryRun: true`
//! and fail with 400 for webhooks whose `sideEffects` is not `None`/`NoneOnDryRun`.
//!
//! Not implemented: `reinvocationPolicy: IfNeeded` (never reinvoked), `matchConditions`
//! (CEL; ignored, so such webhooks match by their rules alone), CONNECT operations, the
//! `/scale` subresource, and deletions the server makes by itself (garbage collection,
//! namespace and CRD cleanup, the simulated kubelet) as well as writes through the Rust API
//! ([`FakeApiServer::apply_object`](crate::FakeApiServer::apply_object)), which bypass
//! admission. Webhook configurations themselves are never subject to webhooks (as
//! upstream).

mod call;
mod policy;
mod review;
mod writes;

pub(crate) use call::Rejected;
pub(crate) use writes::{Edit, create, delete, delete_collection, update};
