//! POST: normalising a request body and creating an object in three steps (prepare,
//! finish, commit) that admission can run apart.

use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult, cause};
use crate::apiserver::managed_fields;

use super::events;
use super::meta::{meta_mut, meta_str, now, random_suffix};
use super::objectmeta;
use super::options::{WriteOptions, Written};
use super::state::State;

impl State {
    /// Normalises a request body: an object with apiVersion/kind of the resource and the
    /// namespace of the URL.
    pub(crate) fn normalise_body(
        def: &ResourceDef,
        namespace: Option<&str>,
        mut body: Value,
    ) -> ApiResult<Value> {
        objectmeta::check_types(def, &body)?;
        if def.group == "events.k8s.io" && def.plural == "events" {
            body = events::to_core(&body);
        }
        let expected_av = if def.group == "events.k8s.io" {
            "v1".to_string()
        } else {
            def.api_version()
        };
        if let Some(kind) = body.get("kind").and_then(Value::as_str)
            && kind != def.kind
            && !kind.is_empty()
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the kind of the resource ({})",
                def.kind
            )));
        }
        if let Some(av) = body.get("apiVersion").and_then(Value::as_str)
            && !av.is_empty()
            && av != def.api_version()
            && av != expected_av
        {
            // Custom resources with several versions may be written through any served version.
            let same_group = av.split('/').next() == Some(def.group.as_str());
            if !(def.is_custom() && same_group) {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({av}) does not match the expected API version ({})",
                    def.api_version()
                )));
            }
        }
        body["apiVersion"] = Value::String(expected_av);
        body["kind"] = Value::String(def.kind.clone());
        super::defaults::merge_string_data(def, &mut body);
        let m = meta_mut(&mut body);
        objectmeta::normalise_nulls(m);
        if def.namespaced {
            let url_ns = namespace.unwrap_or("");
            match m.get("namespace").and_then(Value::as_str) {
                Some(ns) if !ns.is_empty() && ns != url_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    m.insert("namespace".into(), Value::String(url_ns.to_string()));
                }
            }
        } else {
            m.remove("namespace");
        }
        Ok(body)
    }

    /// POST: create an object.
    pub fn create(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        let obj = self.create_prepare(def, namespace, body)?;
        let mut warnings = Vec::new();
        let obj = self.create_finish(def, namespace, obj, opts, &mut warnings, true)?;
        self.create_commit(def, namespace, obj, warnings, opts.dry_run)
    }

    /// The first step of a create: the normalised body with the server-set metadata (name,
    /// uid, creationTimestamp, generation), in an existing, active namespace, before
    /// defaulting and validation.
    pub(crate) fn create_prepare(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        body: Value,
    ) -> ApiResult<Value> {
        let mut obj = Self::normalise_body(def, namespace, body)?;
        if def.namespaced && namespace.is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(
                "the namespace of the object must be given in the URL",
            ));
        }
        let m = meta_mut(&mut obj);
        if m.get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let name = match m.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match m.get("generateName").and_then(Value::as_str) {
                Some(g) if !g.is_empty() => {
                    let base: String = g.chars().take(58).collect();
                    let mut name = format!("{base}{}", random_suffix());
                    let res = Self::res_key(def);
                    for _ in 0..8 {
                        let key = Self::key_of(def, namespace, &name);
                        if !self.store.contains(&res, &key) {
                            break;
                        }
                        name = format!("{base}{}", random_suffix());
                    }
                    name
                }
                _ => {
                    return Err(ApiError::invalid(
                        &def.group,
                        &def.kind,
                        "",
                        vec![cause(
                            "FieldValueRequired",
                            "metadata.name",
                            "Required value: name or generateName is required",
                        )],
                    ));
                }
            },
        };
        let m = meta_mut(&mut obj);
        m.insert("name".into(), Value::String(name.clone()));
        m.insert(
            "uid".into(),
            Value::String(uuid::Uuid::new_v4().to_string()),
        );
        m.insert("creationTimestamp".into(), Value::String(now()));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("selfLink");
        if def.generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        if def.namespaced {
            self.check_namespace_for_create(def, namespace.unwrap_or(""), &name)?;
        }
        if def.status
            && def.is_custom()
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
        Ok(obj)
    }

    /// The second step of a create: defaults, validation (unless `validate` is false: the
    /// object mutating admission webhooks see is defaulted, not validated), managedFields.
    pub(crate) fn create_finish(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        mut obj: Value,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
        validate: bool,
    ) -> ApiResult<Value> {
        let name = meta_str(&obj, "name").unwrap_or("").to_string();
        self.validate_and_default(
            def,
            None,
            &mut obj,
            warnings,
            opts.field_validation.as_deref(),
            validate,
        )?;
        if !validate {
            return Ok(obj);
        }
        let manager = managed_fields::manager_name(opts.field_manager.as_deref(), &opts.user_agent);
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        if opts.apply {
            let applied = obj.clone();
            if let Ok(with_fields) =
                managed_fields::apply(&obj, &applied, def, &manager, true, None, &now())
            {
                obj = with_fields;
            }
        } else {
            managed_fields::record_update(None, &mut obj, def, &manager, None, &now());
        }
        let res = Self::res_key(def);
        let key = Self::key_of(def, namespace, &name);
        if self.store.contains(&res, &key) {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        Ok(obj)
    }

    /// The last step of a create: stores the finished object (unless `dry_run`).
    pub(crate) fn create_commit(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        obj: Value,
        warnings: Vec<String>,
        dry_run: bool,
    ) -> ApiResult<Written> {
        let name = meta_str(&obj, "name").unwrap_or("").to_string();
        let res = Self::res_key(def);
        let key = Self::key_of(def, namespace, &name);
        if self.store.contains(&res, &key) {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        if dry_run {
            return Ok(Written {
                code: 201,
                body: Self::present(def, &obj).into(),
                warnings,
            });
        }
        let (_, body) = self.put_presenting(def, &res, &key, obj);
        if def.group == "apiextensions.k8s.io" && self.config.establish_immediately {
            self.establish_crd(&name);
        } else if def.group == "apiextensions.k8s.io" {
            self.to_establish.push(name.clone());
        }
        Ok(Written {
            code: 201,
            body,
            warnings,
        })
    }
}
