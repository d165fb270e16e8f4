//! DELETE: preconditions, graceful deletion (finalizers, Pods, namespaces, CRDs), removal,
//! collections, and the simulated kubelet that confirms Pod terminations.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult, cause};
use crate::apiserver::storage::{ObjKey, ResKey};

use super::crd::CRD_CLEANUP_FINALIZER;
use super::meta::{finalizers, meta, meta_mut, meta_str, now};
use super::namespaces::PROTECTED_NAMESPACES;
use super::options::{DeleteOptions, Written};
use super::state::State;

/// The grace period of a Pod deletion: 0 for unscheduled and finished Pods (deleted at
/// once), else the requested period, `spec.terminationGracePeriodSeconds`, or 30;
/// negative values become 1.
fn pod_grace_period(pod: &Value, requested: Option<i64>) -> i64 {
    let scheduled = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !scheduled || finished {
        return 0;
    }
    let grace = requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30);
    if grace < 0 { 1 } else { grace }
}

/// A DELETE's propagation policy: given, or from `orphanDependents`, or Background.
fn propagation_policy(def: &ResourceDef, name: &str, opts: &DeleteOptions) -> ApiResult<String> {
    let policy = opts.propagation.clone().unwrap_or_else(|| {
        if opts.orphan_dependents == Some(true) {
            "Orphan".into()
        } else {
            "Background".into()
        }
    });
    if ["Orphan", "Background", "Foreground"].contains(&policy.as_str()) {
        return Ok(policy);
    }
    Err(ApiError::invalid(
        &def.group,
        &def.kind,
        name,
        vec![cause(
            "FieldValueNotSupported",
            "propagationPolicy",
            format!(
                "Unsupported value: \"{policy}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
            ),
        )],
    ))
}

/// A CRD being deleted: the cleanup finalizer and the Terminating condition.
fn crd_terminating(new: &mut Value) {
    let m = meta_mut(new);
    let fins = m.entry("finalizers").or_insert_with(|| json!([]));
    if let Some(a) = fins.as_array_mut()
        && !a.iter().any(|f| f == CRD_CLEANUP_FINALIZER)
    {
        a.push(json!(CRD_CLEANUP_FINALIZER));
    }
    let conds = new
        .as_object_mut()
        .map(|o| o.entry("status").or_insert_with(|| json!({})));
    if let Some(status) = conds.and_then(Value::as_object_mut) {
        let list = status.entry("conditions").or_insert_with(|| json!([]));
        if let Some(list) = list.as_array_mut() {
            list.retain(|c| c.get("type") != Some(&json!("Terminating")));
            list.push(json!({"type": "Terminating", "status": "True", "lastTransitionTime": now(),
                "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress"}));
        }
    }
}

impl State {
    /// DELETE one object.
    pub fn delete(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Written> {
        let old = self.get_stored(def, namespace, name)?;
        Self::delete_preconditions(def, &old, name, opts)?;
        let is_namespace = def.group.is_empty() && def.plural == "namespaces";
        if is_namespace && PROTECTED_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(
                "",
                "namespaces",
                name,
                "this namespace may not be deleted",
            ));
        }
        let policy = propagation_policy(def, name, opts)?;
        let is_crd = def.group == "apiextensions.k8s.io";
        let pod_grace = if def.group.is_empty() && def.plural == "pods" {
            pod_grace_period(&old, opts.grace_period)
        } else {
            0
        };
        let graceful = !finalizers(&old).is_empty() || is_namespace || is_crd || pod_grace > 0;
        let res = Self::res_key(def);
        let key = Self::key_of(def, namespace, name);
        if opts.dry_run {
            return Ok(Written::ok(Self::present(def, &old)));
        }
        if graceful {
            if meta(&old).get("deletionTimestamp").is_some() {
                return Ok(Written::ok(Self::present(def, &old)));
            }
            let mut new = (*old).clone();
            self.mark_deleted(def, &mut new, pod_grace, &res, &key);
            if is_crd {
                crd_terminating(&mut new);
            }
            if is_namespace {
                new["status"] = json!({"phase": "Terminating"});
            }
            let stored = self.store.put(&res, &key, new);
            let body = Self::present(def, &stored);
            self.reconcile();
            let code = if opts.orphan_dependents == Some(false) {
                202
            } else {
                200
            };
            // The object may be gone already (e.g. an empty namespace).
            return Ok(Written {
                code,
                body: body.into(),
                warnings: Vec::new(),
            });
        }
        let last = self.remove_object(def, &res, &key, &policy);
        self.reconcile();
        let body = if def.return_deleted_object {
            last.map(|l| Self::present(def, &l)).unwrap_or(Value::Null)
        } else {
            let mut details =
                json!({"name": name, "kind": def.plural, "uid": meta_str(&old, "uid")});
            if !def.group.is_empty() {
                details["group"] = json!(def.group);
            }
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
        };
        Ok(Written::ok(body))
    }

    /// A graceful deletion begins: the deletion timestamp (now plus the Pod's grace) and
    /// grace period, the kubelet's confirmation scheduled for a Pod, the generation bumped.
    fn mark_deleted(
        &mut self,
        def: &ResourceDef,
        new: &mut Value,
        pod_grace: i64,
        res: &ResKey,
        key: &ObjKey,
    ) {
        let m = meta_mut(new);
        let deadline = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_secs(pod_grace))
            .unwrap_or_else(|_| jiff::Timestamp::now());
        m.insert(
            "deletionTimestamp".into(),
            json!(deadline.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        );
        m.insert("deletionGracePeriodSeconds".into(), json!(pod_grace));
        if pod_grace > 0 {
            // The simulated kubelet confirms the termination after the grace period
            // (capped by the server setting).
            let wait = std::time::Duration::from_secs(pod_grace as u64)
                .min(self.config.pod_termination_cap);
            self.to_reap.push((res.clone(), key.clone(), wait));
        }
        if def.generation {
            let g = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
            if g > 0 {
                m.insert("generation".into(), json!(g + 1));
            }
        }
    }

    /// The preconditions (uid, resourceVersion) of a DELETE, checked against the stored object.
    pub(crate) fn delete_preconditions(
        def: &ResourceDef,
        old: &Value,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<()> {
        if let Some(uid) = &opts.precondition_uid
            && Some(uid.as_str()) != meta_str(old, "uid")
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(old, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_rv
            && Some(rv.as_str()) != meta_str(old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(old, "resourceVersion").unwrap_or("")
                ),
            ));
        }
        Ok(())
    }

    /// Removes an object now and applies the garbage-collection policy to its dependents.
    pub(super) fn remove_object(
        &mut self,
        def: &ResourceDef,
        res: &ResKey,
        key: &ObjKey,
        policy: &str,
    ) -> Option<Arc<Value>> {
        let uid = self
            .store
            .get(res, key)
            .and_then(|o| meta_str(&o, "uid").map(str::to_string));
        if policy == "Foreground"
            && let Some(uid) = &uid
        {
            self.collect_dependents(uid, "Background");
        }
        let last = self.store.remove(res, key);
        if def.group == "apiextensions.k8s.io" {
            self.unregister_crd(&key.1);
        }
        if policy != "Foreground"
            && let Some(uid) = &uid
        {
            self.collect_dependents(uid, policy);
        }
        last
    }

    /// DELETE on a collection: deletes every matching object; returns them as a list.
    pub fn delete_collection(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        matching: &dyn Fn(&Value) -> bool,
        opts: &DeleteOptions,
    ) -> ApiResult<Value> {
        let res = Self::res_key(def);
        let ns = if def.namespaced { namespace } else { None };
        let targets: Vec<(ObjKey, Arc<Value>)> = self
            .store
            .list(&res, ns)
            .into_iter()
            .filter(|(_, o)| matching(o))
            .collect();
        let mut items = Vec::new();
        for (key, obj) in targets {
            let ns = (!key.0.is_empty()).then_some(key.0.as_str());
            match self.delete(def, ns, &key.1, opts) {
                Ok(w) if w.body.value().get("kind") == Some(&json!("Status")) => {
                    items.push(Self::present(def, &obj))
                }
                Ok(w) => items.push(w.body.into_value()),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(json!({
            "kind": format!("{}List", def.kind),
            "apiVersion": def.api_version(),
            "metadata": {"resourceVersion": self.store.rv().to_string()},
            "items": items,
        }))
    }

    /// The simulated kubelet: removes a terminating Pod whose grace period is over; one that
    /// finalizers still hold gets a grace period of 0 (as the kubelet's final DELETE with
    /// `gracePeriodSeconds=0` sets it), so that the update removing its last finalizer
    /// removes it.
    pub fn reap(&mut self, res: &ResKey, key: &ObjKey) {
        let Some(obj) = self.store.get(res, key) else {
            return;
        };
        if meta(&obj).get("deletionTimestamp").is_none() {
            return;
        }
        if finalizers(&obj).is_empty() {
            self.store.remove(res, key);
            self.reconcile();
            return;
        }
        if meta(&obj).get("deletionGracePeriodSeconds") != Some(&json!(0)) {
            let mut held = Arc::unwrap_or_clone(obj);
            meta_mut(&mut held).insert("deletionGracePeriodSeconds".into(), json!(0));
            self.store.put(res, key, held);
        }
    }
}
