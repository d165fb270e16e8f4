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

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::ApiError;
use crate::apiserver::schema;
use crate::apiserver::selectors::LabelSelector;
use crate::apiserver::semantics::webhook_configs::{GROUP, strings};
use crate::apiserver::semantics::{
    DeleteOptions, PatchTarget, PatchType, State, WriteOptions, Written, rv_of,
};
use crate::apiserver::webhooks::client::{self, WebhookCall, WebhookOutcome};
use crate::apiserver::webhooks::conversion::{self, CrdConversion};
use crate::apiserver::webhooks::host::Host;

/// How often a write starts over when the object changed while webhooks were called.
const ATTEMPTS: usize = 5;

/// A write that failed, with the warnings the webhooks gave before.
#[derive(Debug)]
pub(crate) struct Rejected {
    /// The error for the client.
    pub error: ApiError,
    /// `Warning` headers for the client.
    pub warnings: Vec<String>,
}

impl From<ApiError> for Rejected {
    fn from(error: ApiError) -> Self {
        Rejected {
            error,
            warnings: Vec::new(),
        }
    }
}

/// An admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Configurations

/// One webhook of a stored configuration.
#[derive(Debug, Clone)]
struct Webhook {
    mutating: bool,
    configuration: String,
    name: String,
    client_config: Value,
    rules: Vec<Value>,
    ignore_failures: bool,
    exact: bool,
    namespace_selector: Value,
    object_selector: Value,
    side_effects: String,
    timeout: Duration,
    review_versions: Vec<String>,
}

fn webhooks_of(config: &Value, mutating: bool) -> Vec<Webhook> {
    let configuration = config
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let list = config
        .get("webhooks")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    list.iter()
        .map(|w| {
            let s = |k: &str| w.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            Webhook {
                mutating,
                configuration: configuration.clone(),
                name: s("name"),
                client_config: w.get("clientConfig").cloned().unwrap_or(Value::Null),
                rules: w
                    .get("rules")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                ignore_failures: s("failurePolicy") == "Ignore",
                exact: s("matchPolicy") == "Exact",
                namespace_selector: w.get("namespaceSelector").cloned().unwrap_or(Value::Null),
                object_selector: w.get("objectSelector").cloned().unwrap_or(Value::Null),
                side_effects: s("sideEffects"),
                timeout: Duration::from_secs(
                    w.get("timeoutSeconds")
                        .and_then(Value::as_u64)
                        .unwrap_or(10)
                        .clamp(1, 30),
                ),
                review_versions: strings(w.get("admissionReviewVersions")),
            }
        })
        .collect()
}

/// kube-apiserver's `rules.Matcher`: operation, group, version, resource/subresource, scope.
fn rule_matches(rule: &Value, op: Operation, def: &ResourceDef, sub: &str) -> bool {
    let any_of =
        |key: &str, want: &str| strings(rule.get(key)).iter().any(|v| v == "*" || v == want);
    if !any_of("operations", op.as_str())
        || !any_of("apiGroups", &def.group)
        || !any_of("apiVersions", &def.version)
    {
        return false;
    }
    let resource = strings(rule.get("resources")).iter().any(|r| {
        let (res, rsub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        (res == "*" || res == def.plural) && (rsub == "*" || rsub == sub)
    });
    if !resource {
        return false;
    }
    match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "Cluster" => !def.namespaced,
        "Namespaced" => def.namespaced,
        _ => true,
    }
}

/// Webhook configurations are exempt from webhooks (so that a broken webhook can be fixed).
fn exempt(def: &ResourceDef) -> bool {
    def.group == GROUP
        && matches!(
            def.plural.as_str(),
            "validatingwebhookconfigurations" | "mutatingwebhookconfigurations"
        )
}

/// A webhook whose rules match a request, with the version it sees the object in.
#[derive(Debug, Clone)]
struct Hook {
    webhook: Webhook,
    target: ResourceDef,
}

/// What a write must go through: the matching webhooks and the CRD's conversion.
struct Plan {
    mutating: Vec<Hook>,
    validating: Vec<Hook>,
    namespace_labels: Option<Map<String, Value>>,
    conversion: Option<CrdConversion>,
}

impl Plan {
    fn new(
        state: &State,
        def: &ResourceDef,
        sub: Option<&str>,
        op: Operation,
        namespace: Option<&str>,
    ) -> Plan {
        let mut mutating = Vec::new();
        let mut validating = Vec::new();
        let configs = |plural: &str| {
            state
                .store
                .list(&(GROUP.to_string(), plural.to_string()), None)
        };
        let has_configs = !exempt(def)
            && (state
                .store
                .count(&(GROUP.into(), "mutatingwebhookconfigurations".into()))
                > 0
                || state
                    .store
                    .count(&(GROUP.into(), "validatingwebhookconfigurations".into()))
                    > 0);
        if has_configs {
            let sub = sub.unwrap_or("");
            let equivalents: Vec<ResourceDef> = state
                .defs()
                .into_iter()
                .filter(|d| {
                    d.group == def.group
                        && d.plural == def.plural
                        && d.version != def.version
                        && d.crd == def.crd
                })
                .cloned()
                .collect();
            for (plural, is_mutating) in [
                ("mutatingwebhookconfigurations", true),
                ("validatingwebhookconfigurations", false),
            ] {
                for (_, config) in configs(plural) {
                    for webhook in webhooks_of(&config, is_mutating) {
                        let matches = |d: &ResourceDef| {
                            webhook.rules.iter().any(|r| rule_matches(r, op, d, sub))
                        };
                        let target = if matches(def) {
                            Some(def.clone())
                        } else if webhook.exact {
                            None
                        } else {
                            equivalents.iter().find(|d| matches(d)).cloned()
                        };
                        if let Some(target) = target {
                            let hook = Hook { webhook, target };
                            if is_mutating {
                                mutating.push(hook);
                            } else {
                                validating.push(hook);
                            }
                        }
                    }
                }
            }
        }
        let namespace_labels = match namespace {
            Some(ns) if def.namespaced && !(mutating.is_empty() && validating.is_empty()) => state
                .store
                .get(
                    &(String::new(), "namespaces".into()),
                    &(String::new(), ns.to_string()),
                )
                .and_then(|n| {
                    n.pointer("/metadata/labels")
                        .and_then(Value::as_object)
                        .cloned()
                }),
            _ => None,
        };
        Plan {
            mutating,
            validating,
            namespace_labels,
            conversion: CrdConversion::lookup(state, def),
        }
    }

    fn has_hooks(&self) -> bool {
        !self.mutating.is_empty() || !self.validating.is_empty()
    }

    /// The CRD's conversion when it is by webhook.
    fn webhook_conversion(&self) -> Option<&CrdConversion> {
        self.conversion.as_ref().filter(|c| c.uses_webhook())
    }

    /// Whether objects written through `def` are converted before they are stored.
    fn converts_writes(&self, def: &ResourceDef) -> bool {
        self.webhook_conversion()
            .is_some_and(|c| c.storage_version != def.version)
    }
}

// ---------------------------------------------------------------------------------------------
// Calls

/// What one webhook answered.
enum Answer {
    /// Allowed, with a JSON patch (mutating webhooks) on the object in the hook's version.
    Allowed(Option<Vec<u8>>),
    /// Denied: the client's error.
    Denied(ApiError),
    /// Failed under `failurePolicy: Fail`: the client's error.
    Failed(ApiError),
    /// Failed under `Ignore`, or not called (selectors).
    Skipped,
}

/// One admission request in progress.
struct Admission<'a> {
    host: &'a dyn Host,
    plan: Plan,
    def: &'a ResourceDef,
    sub: Option<&'a str>,
    namespace: Option<&'a str>,
    dry_run: bool,
    options: Value,
    warnings: Vec<String>,
}

fn labels(obj: Option<&Value>) -> Option<&Map<String, Value>> {
    obj.and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
}

fn selector_matches(spec: &Value, labels: Option<&Map<String, Value>>, what: &str) -> bool {
    match LabelSelector::from_spec(spec) {
        Ok(sel) => sel.matches(labels),
        Err(e) => {
            tracing::warn!(error = %e, "a webhook's {what} cannot be parsed: the webhook is skipped");
            false
        }
    }
}

fn kind_of(def: &ResourceDef) -> Value {
    json!({"group": def.group, "version": def.version, "kind": def.kind})
}

fn resource_of(def: &ResourceDef) -> Value {
    json!({"group": def.group, "version": def.version, "resource": def.plural})
}

fn gvr(def: &ResourceDef) -> String {
    format!("{}/{}", def.api_version(), def.plural)
}

fn write_options_json(kind: &str, opts: &WriteOptions) -> Value {
    let mut o = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if opts.dry_run {
        o["dryRun"] = json!(["All"]);
    }
    if let Some(m) = opts.field_manager.as_deref().filter(|m| !m.is_empty()) {
        o["fieldManager"] = json!(m);
    }
    if let Some(v) = &opts.field_validation {
        o["fieldValidation"] = json!(v);
    }
    o
}

fn delete_options_json(opts: &DeleteOptions) -> Value {
    let mut o = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
    if opts.dry_run {
        o["dryRun"] = json!(["All"]);
    }
    if let Some(g) = opts.grace_period {
        o["gracePeriodSeconds"] = json!(g);
    }
    if let Some(p) = &opts.propagation {
        o["propagationPolicy"] = json!(p);
    }
    if let Some(b) = opts.orphan_dependents {
        o["orphanDependents"] = json!(b);
    }
    let mut pre = Map::new();
    if let Some(u) = &opts.precondition_uid {
        pre.insert("uid".into(), json!(u));
    }
    if let Some(rv) = &opts.precondition_rv {
        pre.insert("resourceVersion".into(), json!(rv));
    }
    if !pre.is_empty() {
        o["preconditions"] = Value::Object(pre);
    }
    o
}

/// Why a call failed: the text after `failed calling webhook "<name>": `.
fn verify_response(answer: &Value, uid: &str, mutating: bool) -> Result<(bool, Value), String> {
    let av = answer
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = answer.get("kind").and_then(Value::as_str).unwrap_or("");
    if av != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(format!(
            "received invalid webhook response: expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {av}, Kind={kind}"
        ));
    }
    let response = answer
        .get("response")
        .filter(|r| r.is_object())
        .ok_or("received invalid webhook response: webhook response was absent")?;
    let got = response.get("uid").and_then(Value::as_str).unwrap_or("");
    if got != uid {
        return Err(format!(
            "received invalid webhook response: expected response.uid={uid:?}, got {got:?}"
        ));
    }
    let has_patch = response
        .get("patch")
        .and_then(Value::as_str)
        .is_some_and(|p| !p.is_empty());
    if has_patch {
        if !mutating {
            return Err(
                "received invalid webhook response: validating webhooks may not return patches"
                    .into(),
            );
        }
        match response.get("patchType").and_then(Value::as_str) {
            None | Some("") => {
                return Err("received invalid webhook response: webhook returned response.patch but not response.patchType".into());
            }
            Some("JSONPatch") => {}
            Some(other) => {
                return Err(format!(
                    "received invalid webhook response: webhook returned invalid response.patchType of {other:?}"
                ));
            }
        }
    }
    let allowed = response
        .get("allowed")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok((allowed, response.clone()))
}

/// kube-apiserver's `ToStatusErr` for a denial.
fn denial(name: &str, status: Option<&Value>) -> ApiError {
    let status = status.cloned().unwrap_or(Value::Null);
    let s = |k: &str| {
        status
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(400);
    let denied = format!("admission webhook \"{name}\" denied the request");
    let message = if !s("message").is_empty() {
        format!("{denied}: {}", s("message"))
    } else if !s("reason").is_empty() {
        format!("{denied}: {}", s("reason"))
    } else {
        format!("{denied} without explanation")
    };
    let reason = match s("reason") {
        r if r.is_empty() => ApiError::reason_for_code(code).to_string(),
        r => r,
    };
    let mut e = ApiError::new(code, &reason, message);
    if let Some(d) = status.get("details").filter(|d| d.is_object()) {
        e = e.with_details(d.clone());
    }
    e
}

impl<'a> Admission<'a> {
    fn new(
        host: &'a dyn Host,
        plan: Plan,
        def: &'a ResourceDef,
        sub: Option<&'a str>,
        namespace: Option<&'a str>,
        dry_run: bool,
        options: Value,
    ) -> Self {
        Admission {
            host,
            plan,
            def,
            sub,
            namespace,
            dry_run,
            options,
            warnings: Vec::new(),
        }
    }

    fn reject(&self, error: ApiError) -> Rejected {
        Rejected {
            error,
            warnings: self.warnings.clone(),
        }
    }

    /// Converts an object of this request's resource to another version.
    async fn convert(&self, obj: Value, version: &str) -> Result<Value, ApiError> {
        match &self.plan.conversion {
            Some(c) => conversion::convert_one(self.host, c, obj, version).await,
            None => Ok(obj),
        }
    }

    /// Whether a hook's selectors match the request's objects.
    fn selected(&self, hook: &Hook, object: Option<&Value>, old: Option<&Value>) -> bool {
        let w = &hook.webhook;
        let is_namespace = self.def.group.is_empty() && self.def.plural == "namespaces";
        let ns_ok = if is_namespace {
            let own = labels(object).or(labels(old));
            selector_matches(&w.namespace_selector, own, "namespaceSelector")
        } else if self.def.namespaced {
            selector_matches(
                &w.namespace_selector,
                self.plan.namespace_labels.as_ref(),
                "namespaceSelector",
            )
        } else {
            true
        };
        if !ns_ok {
            return false;
        }
        let empty = LabelSelector::from_spec(&w.object_selector).is_ok_and(|s| s.is_empty());
        empty
            || (object.is_some()
                && selector_matches(&w.object_selector, labels(object), "objectSelector"))
            || (old.is_some()
                && selector_matches(&w.object_selector, labels(old), "objectSelector"))
    }

    /// Calls one webhook (if its selectors match) with the objects in the request's version.
    async fn call(
        &self,
        hook: &Hook,
        op: Operation,
        name: &str,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> (Answer, Vec<String>) {
        if !self.selected(hook, object, old) {
            return (Answer::Skipped, Vec::new());
        }
        let w = &hook.webhook;
        if self.dry_run && !matches!(w.side_effects.as_str(), "None" | "NoneOnDryRun") {
            return (
                Answer::Failed(ApiError::bad_request(format!(
                    "admission webhook {:?} does not support dry run",
                    w.name
                ))),
                Vec::new(),
            );
        }
        let converted = self.def.version != hook.target.version;
        let (object, old) = if converted {
            let o = match object {
                Some(o) => match self.convert(o.clone(), &hook.target.version).await {
                    Ok(c) => Some(c),
                    Err(e) => return (Answer::Failed(e), Vec::new()),
                },
                None => None,
            };
            let p = match old {
                Some(o) => match self.convert(o.clone(), &hook.target.version).await {
                    Ok(c) => Some(c),
                    Err(e) => return (Answer::Failed(e), Vec::new()),
                },
                None => None,
            };
            (o, p)
        } else {
            (object.cloned(), old.cloned())
        };
        let uid = uuid::Uuid::new_v4().to_string();
        let mut request = json!({
            "uid": uid,
            "kind": kind_of(&hook.target),
            "resource": resource_of(&hook.target),
            "requestKind": kind_of(self.def),
            "requestResource": resource_of(self.def),
            "operation": op.as_str(),
            "userInfo": {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object.unwrap_or(Value::Null),
            "oldObject": old.unwrap_or(Value::Null),
            "dryRun": self.dry_run,
            "options": self.options,
        });
        if let Some(sub) = self.sub.filter(|s| !s.is_empty()) {
            request["subResource"] = json!(sub);
            request["requestSubResource"] = json!(sub);
        }
        if !name.is_empty() {
            request["name"] = json!(name);
        }
        if let Some(ns) = self
            .namespace
            .filter(|n| !n.is_empty() && self.def.namespaced)
        {
            request["namespace"] = json!(ns);
        }
        let review = json!({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request});
        let started = Instant::now();
        let result: Result<(bool, Value), String> = if !w.review_versions.iter().any(|v| v == "v1")
        {
            Err(format!(
                "webhook does not accept known AdmissionReview versions: {:?}",
                w.review_versions
            ))
        } else {
            let services = self.host.services();
            match client::post_json(
                self.host.client(),
                &services,
                &w.client_config,
                w.timeout,
                &review,
            )
            .await
            {
                Ok(answer) => verify_response(&answer, &uid, w.mutating),
                Err(e) => Err(format!("failed to call webhook: {e}")),
            }
        };
        let duration = started.elapsed();
        let mut warnings = Vec::new();
        let (answer, outcome) = match result {
            Ok((allowed, response)) => {
                warnings = strings(response.get("warnings"));
                if allowed {
                    let patch = response
                        .get("patch")
                        .and_then(Value::as_str)
                        .filter(|p| !p.is_empty() && w.mutating);
                    match patch {
                        Some(p) => match base64::engine::general_purpose::STANDARD.decode(p) {
                            Ok(bytes) => (Answer::Allowed(Some(bytes)), WebhookOutcome::Patched),
                            Err(e) => {
                                let why = format!(
                                    "received invalid webhook response: the patch is not valid base64: {e}"
                                );
                                self.failure(w, why)
                            }
                        },
                        None => (Answer::Allowed(None), WebhookOutcome::Allowed),
                    }
                } else {
                    let e = denial(&w.name, response.get("status"));
                    let outcome = WebhookOutcome::Denied {
                        code: e.code,
                        message: e.message.clone(),
                    };
                    (Answer::Denied(e), outcome)
                }
            }
            Err(why) => self.failure(w, why),
        };
        self.host.client().record(WebhookCall {
            configuration_kind: if w.mutating {
                "MutatingWebhookConfiguration"
            } else {
                "ValidatingWebhookConfiguration"
            }
            .into(),
            configuration: w.configuration.clone(),
            webhook: w.name.clone(),
            operation: op.as_str().into(),
            resource: gvr(&hook.target),
            subresource: self.sub.unwrap_or("").to_string(),
            namespace: if self.def.namespaced {
                self.namespace.unwrap_or("").to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
            dry_run: self.dry_run,
            uid,
            outcome,
            duration,
        });
        (answer, warnings)
    }

    fn failure(&self, w: &Webhook, why: String) -> (Answer, WebhookOutcome) {
        let message = format!("failed calling webhook {:?}: {why}", w.name);
        if w.ignore_failures {
            (Answer::Skipped, WebhookOutcome::Ignored { error: message })
        } else {
            (
                Answer::Failed(ApiError::internal(message.clone())),
                WebhookOutcome::Failed { error: message },
            )
        }
    }

    /// Runs the mutating webhooks in order on `object` (the request's version, defaulted);
    /// returns the mutated object when any webhook patched it.
    async fn mutate(
        &mut self,
        op: Operation,
        name: &str,
        object: Option<Value>,
        old: Option<&Value>,
    ) -> Result<Option<Value>, Rejected> {
        let hooks = self.plan.mutating.clone();
        let mut current = object;
        let mut changed = false;
        for hook in &hooks {
            let (answer, warnings) = self.call(hook, op, name, current.as_ref(), old).await;
            self.warnings.extend(warnings);
            match answer {
                Answer::Allowed(Some(patch)) => {
                    // DELETE has no object to patch: patches are ignored.
                    let Some(obj) = current.take() else { continue };
                    let in_target = if hook.target.version != self.def.version {
                        self.convert(obj, &hook.target.version)
                            .await
                            .map_err(|e| self.reject(e))?
                    } else {
                        obj
                    };
                    let patched = crate::apiserver::patch::apply_json_patch(&in_target, &patch)
                        .map_err(|e| self.reject(ApiError::internal(e.to_string())))?;
                    let mut back = if hook.target.version != self.def.version {
                        self.convert(patched, &self.def.version)
                            .await
                            .map_err(|e| self.reject(e))?
                    } else {
                        patched
                    };
                    if self.def.is_custom()
                        && let Some(schema) = &self.def.schema
                    {
                        schema::prune_and_default(&mut back, schema);
                    }
                    current = Some(back);
                    changed = true;
                }
                Answer::Allowed(None) | Answer::Skipped => {}
                Answer::Denied(e) | Answer::Failed(e) => return Err(self.reject(e)),
            }
        }
        Ok(if changed { current } else { None })
    }

    /// Runs the validating webhooks in parallel; the first failure in order wins.
    async fn validate(
        &mut self,
        op: Operation,
        name: &str,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), Rejected> {
        if self.plan.validating.is_empty() {
            return Ok(());
        }
        let calls = self
            .plan
            .validating
            .iter()
            .map(|h| self.call(h, op, name, object, old));
        let answers = futures::future::join_all(calls).await;
        let mut first = None;
        for (answer, warnings) in answers {
            self.warnings.extend(warnings);
            if let Answer::Denied(e) | Answer::Failed(e) = answer
                && first.is_none()
            {
                first = Some(e);
            }
        }
        match first {
            Some(e) => Err(self.reject(e)),
            None => Ok(()),
        }
    }

    /// The resource definition a write is committed with: the storage version's when the
    /// object is converted for storage.
    fn commit_def(&self) -> ResourceDef {
        match self.plan.webhook_conversion() {
            Some(c) if self.plan.converts_writes(self.def) => c.storage_def(self.def),
            _ => self.def.clone(),
        }
    }

    /// Converts a finished object of the request's version to the storage version.
    async fn to_storage(&self, obj: Value) -> Result<Value, Rejected> {
        match self.plan.webhook_conversion() {
            Some(c) if self.plan.converts_writes(self.def) => {
                let version = c.storage_version.clone();
                self.convert(obj, &version)
                    .await
                    .map_err(|e| self.reject(e))
            }
            _ => Ok(obj),
        }
    }

    /// Converts the body of a committed write back to the request's version.
    async fn answer_from_storage(&self, mut w: Written) -> Result<Written, Rejected> {
        if self.plan.converts_writes(self.def)
            && w.body.get("kind").and_then(Value::as_str) == Some(self.def.kind.as_str())
        {
            let converted = self
                .convert(w.body, &self.def.version)
                .await
                .map_err(|e| self.reject(e))?;
            w.body = State::present(self.def, &converted);
        }
        w.warnings.extend(self.warnings.iter().cloned());
        Ok(w)
    }

    /// The stored object in the request's version (converted by webhook when needed).
    async fn old_in_request_version(&self, raw: &Arc<Value>) -> Result<Value, Rejected> {
        match self.plan.webhook_conversion() {
            Some(c) if c.needs_webhook(raw, &self.def.version) => self
                .convert((**raw).clone(), &self.def.version)
                .await
                .map_err(|e| self.reject(e)),
            _ => Ok((**raw).clone()),
        }
    }
}

/// Whether a write needs the staged path: webhooks to call or objects to convert.
fn staged(plan: &Plan, def: &ResourceDef, old: Option<&Value>) -> bool {
    plan.has_hooks()
        || plan.converts_writes(def)
        || old.is_some_and(|o| {
            plan.webhook_conversion()
                .is_some_and(|c| c.needs_webhook(o, &def.version))
        })
}

// ---------------------------------------------------------------------------------------------
// The writes

/// POST through admission.
pub(crate) async fn create(
    host: &dyn Host,
    def: &ResourceDef,
    namespace: Option<&str>,
    body: Value,
    opts: &WriteOptions,
) -> Result<Written, Rejected> {
    let generated = body
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    let mut warnings = Vec::new();
    let (plan, candidate) = {
        let mut state = host.state();
        let plan = Plan::new(&state, def, None, Operation::Create, namespace);
        if !staged(&plan, def, None) {
            return state.create(def, namespace, body, opts).map_err(Into::into);
        }
        let prepared = state.create_prepare(def, namespace, body)?;
        let candidate =
            state.create_finish(def, namespace, prepared, opts, &mut warnings, false)?;
        (plan, candidate)
    };
    let options = write_options_json("CreateOptions", opts);
    let mut adm = Admission::new(host, plan, def, None, namespace, opts.dry_run, options);
    // What admission sees of a create: no uid or creationTimestamp yet, no generated name.
    let mut view = State::present(def, &candidate);
    if let Some(m) = view.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("uid");
        m.insert("creationTimestamp".into(), Value::Null);
        if generated {
            m.remove("name");
        }
    }
    let name = if generated {
        String::new()
    } else {
        view.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mutated = adm
        .mutate(Operation::Create, &name, Some(view.clone()), None)
        .await?
        .unwrap_or(view);
    let validated = {
        let mut state = host.state();
        let mut obj = mutated;
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            m.remove("uid");
            m.remove("creationTimestamp");
        }
        let prepared = state
            .create_prepare(def, namespace, obj)
            .map_err(|e| adm.reject(e))?;
        state
            .create_finish(def, namespace, prepared, opts, &mut warnings, true)
            .map_err(|e| adm.reject(e))?
    };
    let view = State::present(def, &validated);
    let name = view
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    adm.validate(Operation::Create, &name, Some(&view), None)
        .await?;
    let stored = adm.to_storage(validated).await?;
    let commit_def = adm.commit_def();
    let w = host
        .state()
        .create_commit(&commit_def, namespace, stored, warnings, opts.dry_run)
        .map_err(|e| adm.reject(e))?;
    adm.answer_from_storage(w).await
}

/// The body of a PUT or PATCH.
pub(crate) enum Edit<'b> {
    /// PUT with the decoded object.
    Put(Value),
    /// PATCH with its type and raw body.
    Patch(PatchType, &'b [u8]),
}

/// PUT or PATCH through admission.
pub(crate) async fn update(
    host: &dyn Host,
    def: &ResourceDef,
    namespace: Option<&str>,
    name: &str,
    sub: Option<&str>,
    change: Edit<'_>,
    opts: &WriteOptions,
) -> Result<Written, Rejected> {
    let explicit_rv = match &change {
        Edit::Put(body) => body
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty()),
        Edit::Patch(..) => false,
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        // Stage 1: the stored object and what applies to the request.
        let (stage1, creation) = {
            let mut state = host.state();
            let existing = state.get_stored(def, namespace, name).ok();
            let creates = existing.is_none()
                && matches!(change, Edit::Patch(PatchType::Apply, _))
                && sub.is_none();
            let op = if creates {
                Operation::Create
            } else {
                Operation::Update
            };
            let plan = Plan::new(&state, def, sub, op, namespace);
            if !staged(&plan, def, existing.as_deref()) {
                return match &change {
                    Edit::Put(body) => state.update(def, namespace, name, sub, body.clone(), opts),
                    Edit::Patch(pt, body) => {
                        state.patch(def, namespace, name, sub, *pt, body, opts)
                    }
                }
                .map_err(Into::into);
            }
            match (existing, &change) {
                (Some(old_raw), _) => (Some((plan, old_raw)), None),
                // PUT of a missing object: the ordinary path answers it.
                (None, Edit::Put(body)) => {
                    return state
                        .update(def, namespace, name, sub, body.clone(), opts)
                        .map_err(Into::into);
                }
                (None, Edit::Patch(pt, body)) => {
                    match State::patch_target(def, namespace, name, sub, *pt, body, opts, None)? {
                        PatchTarget::Create(applied, opts) => (None, Some((applied, opts))),
                        PatchTarget::Update(..) => {
                            return Err(ApiError::not_found(&def.group, &def.plural, name).into());
                        }
                    }
                }
            }
        };
        let (plan, old_raw) = match (stage1, creation) {
            (Some(found), _) => found,
            (None, Some((applied, opts))) => {
                return create(host, def, namespace, applied, &opts).await;
            }
            (None, None) => return Err(ApiError::not_found(&def.group, &def.plural, name).into()),
        };
        let seen_rv = rv_of(&old_raw);
        let is_put = matches!(change, Edit::Put(_));
        let options = write_options_json("UpdateOptions", opts);
        let mut adm = Admission::new(host, plan, def, sub, namespace, opts.dry_run, options);
        let old = adm.old_in_request_version(&old_raw).await?;
        let changed_meanwhile = |state: &State| -> bool {
            state
                .get_stored(def, namespace, name)
                .map(|o| rv_of(&o))
                .ok()
                != Some(seen_rv)
        };
        let conflict = || ApiError::stale(&def.group, &def.plural, name);
        // Stage 2: the new object, defaulted, for the mutating webhooks.
        let mut warnings = Vec::new();
        let (new, write_opts, candidate) = {
            let mut state = host.state();
            if changed_meanwhile(&state) {
                if explicit_rv || attempt >= ATTEMPTS {
                    return Err(conflict().into());
                }
                continue;
            }
            let (new, write_opts) = match &change {
                Edit::Put(body) => {
                    let (_, new) = state.update_target(def, namespace, name, body.clone())?;
                    (new, opts.clone())
                }
                Edit::Patch(pt, body) => {
                    let current = State::present(def, &old);
                    match State::patch_target(
                        def,
                        namespace,
                        name,
                        sub,
                        *pt,
                        body,
                        opts,
                        Some(&current),
                    )? {
                        PatchTarget::Update(new, o) => (new, o),
                        PatchTarget::Create(..) => {
                            return Err(ApiError::internal(
                                "a patch of an existing object became a create",
                            )
                            .into());
                        }
                    }
                }
            };
            let prepared = state.over_prepare(def, &old, new.clone(), sub)?;
            let candidate =
                state.over_finish(def, &old, prepared, sub, &write_opts, &mut warnings, false)?;
            (new, write_opts, candidate)
        };
        let view = State::present(def, &candidate);
        let old_view = State::present(def, &old);
        let mutated = adm
            .mutate(Operation::Update, name, Some(view), Some(&old_view))
            .await?;
        // Stage 3: validation of the (mutated) object.
        let validated = {
            let mut state = host.state();
            if changed_meanwhile(&state) {
                if explicit_rv || attempt >= ATTEMPTS {
                    return Err(adm.reject(conflict()));
                }
                continue;
            }
            let new = match mutated {
                Some(m) => State::normalise_body(def, namespace, m).map_err(|e| adm.reject(e))?,
                None => new,
            };
            let prepared = state
                .over_prepare(def, &old, new, sub)
                .map_err(|e| adm.reject(e))?;
            state
                .over_finish(def, &old, prepared, sub, &write_opts, &mut warnings, true)
                .map_err(|e| adm.reject(e))?
        };
        let view = State::present(def, &validated);
        adm.validate(Operation::Update, name, Some(&view), Some(&old_view))
            .await?;
        let stored = adm.to_storage(validated).await?;
        let commit_def = adm.commit_def();
        // Stage 4: commit unless the object changed meanwhile.
        let w = {
            let mut state = host.state();
            if changed_meanwhile(&state) {
                if (explicit_rv && is_put) || attempt >= ATTEMPTS {
                    return Err(adm.reject(conflict()));
                }
                continue;
            }
            state
                .over_commit(&commit_def, &old_raw, stored, warnings, write_opts.dry_run)
                .map_err(|e| adm.reject(e))?
        };
        return adm.answer_from_storage(w).await;
    }
}

/// DELETE through admission; also returns the deleted object as the request's version
/// presents it.
pub(crate) async fn delete(
    host: &dyn Host,
    def: &ResourceDef,
    namespace: Option<&str>,
    name: &str,
    opts: &DeleteOptions,
) -> Result<Written, Rejected> {
    delete_one(host, def, namespace, name, opts, false)
        .await
        .map(|(w, _)| w)
}

async fn delete_one(
    host: &dyn Host,
    def: &ResourceDef,
    namespace: Option<&str>,
    name: &str,
    opts: &DeleteOptions,
    want_old: bool,
) -> Result<(Written, Option<Value>), Rejected> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (plan, old_raw) = {
            let mut state = host.state();
            let existing = state.get_stored(def, namespace, name).ok();
            let plan = Plan::new(&state, def, None, Operation::Delete, namespace);
            if !staged(&plan, def, existing.as_deref()) {
                let old = existing
                    .filter(|_| want_old)
                    .map(|o| State::present(def, &o));
                return state
                    .delete(def, namespace, name, opts)
                    .map(|w| (w, old))
                    .map_err(Into::into);
            }
            let old_raw = state.get_stored(def, namespace, name)?;
            State::delete_preconditions(def, &old_raw, name, opts)?;
            (plan, old_raw)
        };
        let seen_rv = rv_of(&old_raw);
        let options = delete_options_json(opts);
        let mut adm = Admission::new(host, plan, def, None, namespace, opts.dry_run, options);
        let old = adm.old_in_request_version(&old_raw).await?;
        let old_view = State::present(def, &old);
        adm.mutate(Operation::Delete, name, None, Some(&old_view))
            .await?;
        adm.validate(Operation::Delete, name, None, Some(&old_view))
            .await?;
        let commit_def = adm.commit_def();
        let w = {
            let mut state = host.state();
            let now = state.get_stored(def, namespace, name).map(|o| rv_of(&o));
            match now {
                Ok(rv) if rv == seen_rv => {}
                Ok(_) if attempt < ATTEMPTS => continue,
                Ok(_) => {
                    return Err(adm.reject(ApiError::stale(&def.group, &def.plural, name)));
                }
                Err(e) => return Err(adm.reject(e)),
            }
            state
                .delete(&commit_def, namespace, name, opts)
                .map_err(|e| adm.reject(e))?
        };
        return adm
            .answer_from_storage(w)
            .await
            .map(|w| (w, Some(old_view)));
    }
}

/// DELETE on a collection through admission: one admission per object.
pub(crate) async fn delete_collection(
    host: &dyn Host,
    def: &ResourceDef,
    namespace: Option<&str>,
    matching: &(dyn Fn(&Value) -> bool + Sync),
    opts: &DeleteOptions,
) -> Result<(Value, Vec<String>), Rejected> {
    let targets: Vec<(String, String)> = {
        let mut state = host.state();
        let plan = Plan::new(&state, def, None, Operation::Delete, namespace);
        if !plan.has_hooks() && plan.webhook_conversion().is_none() {
            return state
                .delete_collection(def, namespace, matching, opts)
                .map(|list| (list, Vec::new()))
                .map_err(Into::into);
        }
        let scope = if def.namespaced { namespace } else { None };
        state
            .store
            .list(&State::res_key(def), scope)
            .into_iter()
            .filter(|(_, o)| matching(o))
            .map(|(k, _)| k)
            .collect()
    };
    let mut items = Vec::new();
    let mut warnings = Vec::new();
    for (ns, name) in targets {
        let ns = (!ns.is_empty()).then_some(ns.as_str());
        match delete_one(host, def, ns, &name, opts, true).await {
            Ok((w, old)) => {
                warnings.extend(w.warnings);
                if w.body.get("kind") == Some(&json!("Status")) {
                    if let Some(old) = old {
                        items.push(old);
                    }
                } else {
                    items.push(w.body);
                }
            }
            Err(r) if r.error.code == 404 => warnings.extend(r.warnings),
            Err(mut r) => {
                warnings.append(&mut r.warnings);
                return Err(Rejected {
                    error: r.error,
                    warnings,
                });
            }
        }
    }
    let rv = host.state().store.rv();
    let list = json!({
        "kind": format!("{}List", def.kind),
        "apiVersion": def.api_version(),
        "metadata": {"resourceVersion": rv.to_string()},
        "items": items,
    });
    Ok((list, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(group: &str, version: &str, plural: &str, namespaced: bool) -> ResourceDef {
        crate::apiserver::catalog::builtins()
            .into_iter()
            .next()
            .map(|mut d| {
                d.group = group.into();
                d.version = version.into();
                d.plural = plural.into();
                d.namespaced = namespaced;
                d
            })
            .expect("a builtin")
    }

    #[test]
    fn rules() {
        let pods = def("", "v1", "pods", true);
        let rule = |res: &str| json!({"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": [res]});
        assert!(rule_matches(&rule("pods"), Operation::Create, &pods, ""));
        assert!(!rule_matches(
            &rule("pods"),
            Operation::Create,
            &pods,
            "status"
        ));
        assert!(!rule_matches(&rule("pods"), Operation::Update, &pods, ""));
        assert!(rule_matches(&rule("*"), Operation::Create, &pods, ""));
        assert!(!rule_matches(
            &rule("*"),
            Operation::Create,
            &pods,
            "status"
        ));
        assert!(rule_matches(
            &rule("*/*"),
            Operation::Create,
            &pods,
            "status"
        ));
        assert!(rule_matches(
            &rule("pods/*"),
            Operation::Create,
            &pods,
            "status"
        ));
        assert!(rule_matches(&rule("pods/*"), Operation::Create, &pods, ""));
        assert!(rule_matches(
            &rule("pods/status"),
            Operation::Create,
            &pods,
            "status"
        ));
        assert!(rule_matches(
            &rule("*/status"),
            Operation::Create,
            &pods,
            "status"
        ));
        assert!(!rule_matches(
            &rule("configmaps"),
            Operation::Create,
            &pods,
            ""
        ));
        let mut scoped = rule("*");
        scoped["scope"] = json!("Cluster");
        assert!(!rule_matches(&scoped, Operation::Create, &pods, ""));
        scoped["scope"] = json!("Namespaced");
        assert!(rule_matches(&scoped, Operation::Create, &pods, ""));
        let any = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]});
        assert!(rule_matches(&any, Operation::Delete, &pods, ""));
    }

    #[test]
    fn denials() {
        let e = denial(
            "w.kopf.dev",
            Some(&json!({"code": 403, "message": "no", "reason": "Forbidden"})),
        );
        assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
        assert_eq!(
            e.message,
            "admission webhook \"w.kopf.dev\" denied the request: no"
        );
        let e = denial("w.kopf.dev", Some(&json!({"code": 200})));
        assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
        assert_eq!(
            e.message,
            "admission webhook \"w.kopf.dev\" denied the request without explanation"
        );
    }
}
