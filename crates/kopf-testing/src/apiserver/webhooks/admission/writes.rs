//! The writes through admission: create, update (PUT and PATCH) and delete, staged so that
//! the state is never locked while a webhook is called, and started over (or answered
//! 409) when the object changed meanwhile.

use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::ApiError;
use crate::apiserver::semantics::{
    DeleteOptions, PatchTarget, PatchType, State, WriteOptions, Written, rv_of,
};
use crate::apiserver::webhooks::host::Host;

use super::call::{Admission, Rejected};
use super::policy::{Operation, Plan};
use super::review::{delete_options_json, write_options_json};

/// How often a write starts over when the object changed while webhooks were called.
const ATTEMPTS: usize = 5;

/// Whether a write needs the staged path: webhooks to call or objects to convert.
fn staged(plan: &Plan, def: &ResourceDef, old: Option<&Value>) -> bool {
    plan.has_hooks()
        || plan.converts_writes(def)
        || old.is_some_and(|o| {
            plan.webhook_conversion()
                .is_some_and(|c| c.needs_webhook(o, &def.version))
        })
}

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
                        state.patch_stored(def, namespace, name, sub, *pt, body, opts, existing)
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
                        Some(current),
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
                if w.body.value().get("kind") == Some(&json!("Status")) {
                    if let Some(old) = old {
                        items.push(old);
                    }
                } else {
                    items.push(w.body.into_value());
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
