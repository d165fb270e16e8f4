//! PATCH: what each of the four patch types makes of the stored object, server-side apply
//! included.

use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult, cause};
use crate::apiserver::managed_fields;
use crate::apiserver::patch::{self, PatchError};

use super::meta::{meta_mut, meta_str, now};
use super::options::{PatchTarget, PatchType, WriteOptions, Written};
use super::state::State;

fn check_apply_manager(def: &ResourceDef, name: &str, opts: &WriteOptions) -> ApiResult<()> {
    if opts.field_manager.as_deref().is_none_or(str::is_empty) {
        return Err(ApiError::invalid(
            &def.group,
            &def.kind,
            name,
            vec![cause(
                "FieldValueRequired",
                "fieldManager",
                "Required value: is required for apply patch",
            )],
        ));
    }
    Ok(())
}

/// An apply patch's body (YAML or JSON): a mapping, of the request's group and version.
fn parse_apply_body(def: &ResourceDef, body: &[u8]) -> ApiResult<Value> {
    let parsed = match serde_json::from_slice::<Value>(body) {
        Ok(v) => v,
        Err(_) => {
            let text = std::str::from_utf8(body)
                .map_err(|_| ApiError::bad_request("error decoding YAML: invalid UTF-8"))?;
            serde_saphyr::from_str::<Value>(text)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
        }
    };
    if !parsed.is_object() {
        let kind = super::objectmeta::json_kind(&parsed);
        if !parsed.is_null() {
            return Err(ApiError::bad_request(format!(
                "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"
            )));
        }
    }
    let version = parsed
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let expected = def.api_version();
    // Events are served in two groups and stored in the core shape.
    let events = def.plural == "events" && matches!(version, "v1" | "events.k8s.io/v1");
    if version != expected && !events {
        return Err(ApiError::bad_request(format!(
            "Incorrect version specified in apply patch. Specified patch version: {version}, expected: {expected}"
        )));
    }
    Ok(parsed)
}

impl State {
    /// PATCH an object with one of the four patch types.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        patch_type: PatchType,
        body: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        let existing = self
            .store
            .get(&Self::res_key(def), &Self::key_of(def, namespace, name));
        self.patch_stored(
            def,
            namespace,
            name,
            subresource,
            patch_type,
            body,
            opts,
            existing,
        )
    }

    /// [`State::patch`] of `existing`, the stored object the caller has just read under
    /// the same lock (stored objects are parsed from their text on every read).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch_stored(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        patch_type: PatchType,
        body: &[u8],
        opts: &WriteOptions,
        existing: Option<std::sync::Arc<Value>>,
    ) -> ApiResult<Written> {
        let current = existing.as_ref().map(|o| Self::present(def, o));
        let target = Self::patch_target(
            def,
            namespace,
            name,
            subresource,
            patch_type,
            body,
            opts,
            current,
        )?;
        match (target, existing) {
            (PatchTarget::Create(applied, opts), _) => self.create(def, namespace, applied, &opts),
            (PatchTarget::Update(new, opts), Some(old)) => {
                self.write_over(def, &old, new, subresource, &opts)
            }
            (PatchTarget::Update(..), None) => {
                Err(ApiError::not_found(&def.group, &def.plural, name))
            }
        }
    }

    /// What a PATCH amounts to: the patched object (from `current`, the stored object as
    /// the request's version presents it), or a create when an apply patch meets no object.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch_target(
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        patch_type: PatchType,
        body: &[u8],
        opts: &WriteOptions,
        current: Option<Value>,
    ) -> ApiResult<PatchTarget> {
        if patch_type != PatchType::Apply && opts.force.is_some() {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![cause(
                    "FieldValueForbidden",
                    "force",
                    "Forbidden: may not be specified for non-apply patch",
                )],
            ));
        }
        if patch_type == PatchType::Strategic && (def.is_custom() || def.group == "events.k8s.io") {
            return Err(ApiError::unsupported_media_type(&[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ]));
        }
        let current = match current {
            Some(o) => o,
            None if patch_type == PatchType::Apply && subresource.is_none() => {
                let applied = parse_apply_body(def, body)?;
                check_apply_manager(def, name, opts)?;
                let mut applied = applied;
                if meta_str(&applied, "name").is_none() {
                    meta_mut(&mut applied).insert("name".into(), json!(name));
                }
                let opts = WriteOptions {
                    apply: true,
                    ..opts.clone()
                };
                return Ok(PatchTarget::Create(applied, opts));
            }
            None => return Err(ApiError::not_found(&def.group, &def.plural, name)),
        };
        let patched = match patch_type {
            PatchType::Merge => patch::merge_patch_into(current, body),
            PatchType::Json => patch::json_patch_into(current, body),
            PatchType::Strategic => patch::apply_strategic_merge_patch(&current, body, &def.kind),
            PatchType::Apply => Ok(Self::apply_onto(
                def,
                name,
                subresource,
                body,
                opts,
                &current,
            )?),
        };
        let new = patched.map_err(|e| match e {
            PatchError::Malformed(m) => ApiError::bad_request(m),
            PatchError::Apply(m) => ApiError::new(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
            )
            .with_details(json!({"causes": [{"reason": "FieldValueInvalid", "message": m, "field": "patch"}]})),
        })?;
        if let Err(e) = super::objectmeta::check_types(def, &new) {
            return Err(super::objectmeta::patch_decode_error(&new, &e));
        }
        let new = Self::normalise_body(def, namespace, new)?;
        let opts = WriteOptions {
            apply: patch_type == PatchType::Apply,
            ..opts.clone()
        };
        Ok(PatchTarget::Update(new, opts))
    }

    /// A server-side apply onto the stored object: the merged object, or 409 with the
    /// conflicts when fields other managers own would change (and `force` is not set).
    fn apply_onto(
        def: &ResourceDef,
        name: &str,
        subresource: Option<&str>,
        body: &[u8],
        opts: &WriteOptions,
        current: &Value,
    ) -> ApiResult<Value> {
        check_apply_manager(def, name, opts)?;
        let applied = parse_apply_body(def, body)?;
        if let Some(n) = meta_str(&applied, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        let manager = opts.field_manager.clone().unwrap_or_default();
        let force = opts.force.unwrap_or(false);
        managed_fields::apply(
            current,
            &applied,
            def,
            &manager,
            force,
            subresource,
            &now(),
        )
        .map_err(|conflicts| {
            let causes: Vec<Value> = conflicts
                .iter()
                .map(|c| json!({"reason": "FieldManagerConflict", "message": c.describe(), "field": c.field}))
                .collect();
            let mut details = json!({"name": name, "kind": def.plural, "causes": causes});
            if !def.group.is_empty() {
                details["group"] = json!(def.group);
            }
            ApiError::new(409, "Conflict", managed_fields::conflict_message(&conflicts))
                .with_details(details)
        })
    }
}
