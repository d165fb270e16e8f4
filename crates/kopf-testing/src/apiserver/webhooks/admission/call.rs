//! Calling: one admission in progress calls the mutating webhooks in order and the
//! validating ones in parallel, converts objects to the versions they see, and records
//! every call.

use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::ApiError;
use crate::apiserver::schema;
use crate::apiserver::selectors::LabelSelector;
use crate::apiserver::semantics::webhook_configs::strings;
use crate::apiserver::semantics::{State, Written};
use crate::apiserver::webhooks::client::{self, WebhookCall, WebhookOutcome};
use crate::apiserver::webhooks::conversion;
use crate::apiserver::webhooks::host::Host;

use super::policy::{Hook, Operation, Plan, Webhook, labels, selector_matches};
use super::review::{denial, gvr, kind_of, resource_of, verify_response};

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
pub(super) struct Admission<'a> {
    host: &'a dyn Host,
    plan: Plan,
    def: &'a ResourceDef,
    sub: Option<&'a str>,
    namespace: Option<&'a str>,
    dry_run: bool,
    options: Value,
    warnings: Vec<String>,
}

impl<'a> Admission<'a> {
    pub(super) fn new(
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

    pub(super) fn reject(&self, error: ApiError) -> Rejected {
        Rejected {
            error,
            warnings: self.warnings.clone(),
        }
    }

    /// Converts an object of this request's resource to another version.
    pub(super) async fn convert(&self, obj: Value, version: &str) -> Result<Value, ApiError> {
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
    pub(super) async fn mutate(
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
    pub(super) async fn validate(
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
    pub(super) fn commit_def(&self) -> ResourceDef {
        match self.plan.webhook_conversion() {
            Some(c) if self.plan.converts_writes(self.def) => c.storage_def(self.def),
            _ => self.def.clone(),
        }
    }

    /// Converts a finished object of the request's version to the storage version.
    pub(super) async fn to_storage(&self, obj: Value) -> Result<Value, Rejected> {
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
    pub(super) async fn answer_from_storage(&self, mut w: Written) -> Result<Written, Rejected> {
        if self.plan.converts_writes(self.def)
            && w.body.value().get("kind").and_then(Value::as_str) == Some(self.def.kind.as_str())
        {
            let converted = self
                .convert(w.body.into_value(), &self.def.version)
                .await
                .map_err(|e| self.reject(e))?;
            w.body = State::present(self.def, &converted).into();
        }
        w.warnings.extend(self.warnings.iter().cloned());
        Ok(w)
    }

    /// The stored object in the request's version (converted by webhook when needed).
    pub(super) async fn old_in_request_version(&self, raw: &Arc<Value>) -> Result<Value, Rejected> {
        match self.plan.webhook_conversion() {
            Some(c) if c.needs_webhook(raw, &self.def.version) => self
                .convert((**raw).clone(), &self.def.version)
                .await
                .map_err(|e| self.reject(e)),
            _ => Ok((**raw).clone()),
        }
    }
}
