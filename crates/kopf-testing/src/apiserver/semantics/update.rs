//! PUT, and the steps every write over a stored object takes (prepare, finish, commit):
//! resourceVersion checks, server-owned metadata, subresources, managedFields, generation.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult, cause};
use crate::apiserver::kinds;
use crate::apiserver::managed_fields;

use super::meta::{
    finalizers, meta, meta_mut, meta_str, now, same_content_without_meta, same_without_volatile,
};
use super::options::{WriteOptions, Written};
use super::state::State;

impl State {
    /// PUT: replace an object (also PUT on `/status`).
    pub fn update(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        let (old, new) = self.update_target(def, namespace, name, body)?;
        self.write_over(def, &old, new, subresource, opts)
    }

    /// The stored object a PUT replaces and the normalised new object (checked for the name
    /// and, for custom resources and CRDs, a resourceVersion).
    pub(crate) fn update_target(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        body: Value,
    ) -> ApiResult<(Arc<Value>, Value)> {
        let new = Self::normalise_body(def, namespace, body)?;
        match meta_str(&new, "name") {
            Some(n) if n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => {}
        }
        let old = self.get_stored(def, namespace, name)?;
        if meta_str(&new, "resourceVersion").is_none_or(str::is_empty)
            && (def.is_custom() || def.group == "apiextensions.k8s.io")
        {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                name,
                vec![cause(
                    "FieldValueInvalid",
                    "metadata.resourceVersion",
                    "Invalid value: 0x0: must be specified for an update",
                )],
            ));
        }
        Ok((old, new))
    }

    /// Common update path of PUT and PATCH.
    pub(super) fn write_over(
        &mut self,
        def: &ResourceDef,
        old: &Value,
        new: Value,
        subresource: Option<&str>,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        let new = self.over_prepare(def, old, new, subresource)?;
        let mut warnings = Vec::new();
        let new = self.over_finish(def, old, new, subresource, opts, &mut warnings, true)?;
        self.over_commit(def, old, new, warnings, opts.dry_run)
    }

    /// The first step of an update: checks the resourceVersion, uid and name, restores the
    /// server-owned metadata and what the subresource may not change.
    pub(crate) fn over_prepare(
        &self,
        def: &ResourceDef,
        old: &Value,
        mut new: Value,
        subresource: Option<&str>,
    ) -> ApiResult<Value> {
        let name = meta_str(old, "name").unwrap_or("").to_string();
        check_identity(def, old, &new, &name)?;
        keep_server_metadata(old, &mut new);
        let part = subresource.and_then(|s| kinds::written_part(&def.group, &def.plural, s));
        if let Some(part) = part {
            // Only .status changes through /status, and what other subresources write
            // through theirs (the managedFields an apply computed are kept for the next step).
            let mut merged = kinds::with_part_of(old, &new, part);
            if let Some(fields) = meta(&new).get("managedFields").cloned() {
                meta_mut(&mut merged).insert("managedFields".into(), fields);
            }
            new = merged;
        } else if def.status {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
        }
        if meta(old).get("deletionTimestamp").is_some() {
            no_new_finalizers(def, old, &new, &name)?;
        }
        Ok(new)
    }

    /// The second step of an update: defaults, validation (unless `validate` is false),
    /// managedFields and generation.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn over_finish(
        &mut self,
        def: &ResourceDef,
        old: &Value,
        mut new: Value,
        subresource: Option<&str>,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
        validate: bool,
    ) -> ApiResult<Value> {
        let applied_fields = if opts.apply {
            meta(&new).get("managedFields").cloned()
        } else {
            None
        };
        self.validate_and_default(
            def,
            Some(old),
            &mut new,
            warnings,
            opts.field_validation.as_deref(),
            validate,
        )?;
        if !validate {
            return Ok(new);
        }
        let old_meta = meta(old);
        match applied_fields {
            Some(fields) => {
                meta_mut(&mut new).insert("managedFields".into(), fields);
            }
            None => {
                let manager =
                    managed_fields::manager_name(opts.field_manager.as_deref(), &opts.user_agent);
                managed_fields::record_update(
                    Some(old),
                    &mut new,
                    def,
                    &manager,
                    subresource,
                    &now(),
                );
            }
        }
        if def.generation && !same_content_without_meta(&new, old, def.status) {
            let g = meta(old)
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        {
            // Keep the stored RV for the no-op comparison.
            let m = meta_mut(&mut new);
            if let Some(rv) = old_meta.get("resourceVersion") {
                m.insert("resourceVersion".into(), rv.clone());
            }
        }
        Ok(new)
    }

    /// The last step of an update: stores the finished object (unless it changes nothing or
    /// `dry_run`), or removes it when it leaves a deleted object without finalizers.
    pub(crate) fn over_commit(
        &mut self,
        def: &ResourceDef,
        old: &Value,
        new: Value,
        warnings: Vec<String>,
        dry_run: bool,
    ) -> ApiResult<Written> {
        let name = meta_str(old, "name").unwrap_or("").to_string();
        let res = Self::res_key(def);
        let key = Self::key_of(def, meta_str(old, "namespace"), &name);
        let terminating = meta(&new).get("deletionTimestamp").is_some();
        // As kube's `ShouldDeleteDuringUpdate`: not while a grace period runs (a Pod waiting
        // for its kubelet is written to, e.g. its containers' states, and stays).
        let in_grace = meta(old)
            .get("deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .is_some_and(|g| g > 0);
        let deletes = terminating && !in_grace && finalizers(&new).is_empty() && {
            // A namespace also waits for its spec.finalizers.
            !(def.group.is_empty() && def.plural == "namespaces")
                || new
                    .pointer("/spec/finalizers")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty)
        };
        if !deletes && same_without_volatile(&new, old) {
            return Ok(Written {
                code: 200,
                body: Self::present(def, old).into(),
                warnings,
            });
        }
        if dry_run {
            return Ok(Written {
                code: 200,
                body: Self::present(def, &new).into(),
                warnings,
            });
        }
        if deletes {
            // Watchers see one DELETED event carrying the last stored state.
            let body = Self::present(def, &new);
            self.remove_object(def, &res, &key, "Background");
            self.reconcile();
            return Ok(Written {
                code: 200,
                body: body.into(),
                warnings,
            });
        }
        let (stored, body) = self.put_presenting(def, &res, &key, new);
        if def.group == "apiextensions.k8s.io" && self.crds.contains_key(&name) {
            self.register_crd(&stored);
        }
        if terminating {
            self.reconcile();
        }
        Ok(Written {
            code: 200,
            body,
            warnings,
        })
    }
}

/// An update's resourceVersion (if given) is the stored one; its uid and name are unchanged.
fn check_identity(def: &ResourceDef, old: &Value, new: &Value, name: &str) -> ApiResult<()> {
    match meta_str(new, "resourceVersion") {
        Some(rv) if !rv.is_empty() && Some(rv) != meta_str(old, "resourceVersion") => {
            return Err(ApiError::stale(&def.group, &def.plural, name));
        }
        _ => {}
    }
    let immutable = |field: &str, value: &str| {
        ApiError::invalid(
            &def.group,
            &def.kind,
            name,
            vec![cause(
                "FieldValueInvalid",
                &format!("metadata.{field}"),
                format!("Invalid value: \"{value}\": field is immutable"),
            )],
        )
    };
    if let Some(uid) = meta_str(new, "uid")
        && !uid.is_empty()
        && Some(uid) != meta_str(old, "uid")
    {
        return Err(immutable("uid", uid));
    }
    if let Some(n) = meta_str(new, "name")
        && n != name
    {
        return Err(immutable("name", n));
    }
    Ok(())
}

/// Server-owned metadata comes from the stored object.
fn keep_server_metadata(old: &Value, new: &mut Value) {
    let old_meta = meta(old);
    let m = meta_mut(new);
    for field in [
        "uid",
        "name",
        "namespace",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old_meta.get(field) {
            Some(v) => m.insert(field.into(), v.clone()),
            None => m.remove(field),
        };
    }
    m.remove("selfLink");
}

/// An object being deleted gets no new finalizers.
fn no_new_finalizers(def: &ResourceDef, old: &Value, new: &Value, name: &str) -> ApiResult<()> {
    let before = finalizers(old);
    let added: Vec<String> = finalizers(new)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        &def.group,
        &def.kind,
        name,
        vec![cause(
            "FieldValueForbidden",
            "metadata.finalizers",
            format!(
                "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
            ),
        )],
    ))
}
