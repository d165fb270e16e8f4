//! Type-specific defaults and validation on create and update: namespaces, services, pods,
//! deployments, events, webhook configurations, CRDs and custom resources by their schema.

use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::cel;
use crate::apiserver::error::{ApiError, ApiResult, cause};
use crate::apiserver::schema;

use super::crd::validate_crd;
use super::defaults;
use super::meta::{meta_mut, meta_str};
use super::objectmeta;
use super::state::State;
use super::webhook_configs;

impl State {
    /// Type-specific defaults and validation (namespaces, services, pods, CRDs, custom resources).
    pub(super) fn validate_and_default(
        &mut self,
        def: &ResourceDef,
        old: Option<&Value>,
        obj: &mut Value,
        warnings: &mut Vec<String>,
        field_validation: Option<&str>,
        validate: bool,
    ) -> ApiResult<()> {
        let name = meta_str(obj, "name").unwrap_or("").to_string();
        if def.is_custom()
            && let Some(schema) = &def.schema
        {
            unknown_fields(def, schema, obj, field_validation, warnings)?;
        }
        if old.is_none() {
            defaults::apply_create_defaults(def, obj);
        }
        if validate {
            let causes = objectmeta::validate_meta(def, obj, old.is_none(), warnings);
            if !causes.is_empty() {
                return Err(ApiError::invalid(&def.group, &def.kind, &name, causes));
            }
        }
        self.by_kind(def, old, obj, &name, validate)?;
        if def.is_custom()
            && let Some(schema) = &def.schema
        {
            schema_rules(def, schema, &name, old, obj, warnings, validate)?;
        }
        if validate {
            objectmeta::check_stored_size(obj)?;
        }
        Ok(())
    }

    /// The defaults and checks of one built-in kind.
    fn by_kind(
        &mut self,
        def: &ResourceDef,
        old: Option<&Value>,
        obj: &mut Value,
        name: &str,
        validate: bool,
    ) -> ApiResult<()> {
        let create = old.is_none();
        match (def.group.as_str(), def.plural.as_str()) {
            ("", "namespaces") => namespace_defaults(obj, name, create),
            ("", "services") if create => {
                let ip = format!(
                    "10.96.{}.{}",
                    self.ip_counter / 250,
                    self.ip_counter % 250 + 1
                );
                self.ip_counter += 1;
                service_defaults(obj, &ip);
            }
            ("", "pods") if create => pod_defaults(obj),
            ("apps", "deployments") if create => deployment_defaults(obj),
            ("" | "events.k8s.io", "events") if create && validate => {
                validate_event(obj, def.group == "events.k8s.io")?;
            }
            (
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations" | "mutatingwebhookconfigurations",
            ) => {
                let mutating = def.plural == "mutatingwebhookconfigurations";
                webhook_configs::default_configuration(obj, mutating);
                if validate {
                    webhook_configs::validate_configuration(obj, &def.kind, mutating)?;
                }
            }
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                if validate {
                    validate_crd(obj)?;
                }
                if create {
                    crd_status(obj);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Fields a custom resource's schema does not know, as `fieldValidation` says: refused
/// (`Strict`), ignored (`Ignore`) or warned about (`Warn`, the default).
fn unknown_fields(
    def: &ResourceDef,
    schema: &Value,
    obj: &Value,
    field_validation: Option<&str>,
    warnings: &mut Vec<String>,
) -> ApiResult<()> {
    let unknown = schema::unknown_fields(obj, schema);
    match field_validation.unwrap_or("Warn") {
        "Strict" if !unknown.is_empty() => {
            let list: Vec<String> = unknown
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect();
            Err(ApiError::bad_request(format!(
                "{}.{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
                def.kind,
                def.group,
                def.version,
                def.kind,
                list.join(", ")
            )))
        }
        "Ignore" => Ok(()),
        _ => {
            warnings.extend(unknown.iter().map(|f| format!("unknown field \"{f}\"")));
            Ok(())
        }
    }
}

/// A custom resource pruned and defaulted by its schema, then checked against it and its
/// CEL rules.
fn schema_rules(
    def: &ResourceDef,
    schema: &Value,
    name: &str,
    old: Option<&Value>,
    obj: &mut Value,
    warnings: &mut Vec<String>,
    validate: bool,
) -> ApiResult<()> {
    schema::prune_and_default(obj, schema);
    if !validate {
        return Ok(());
    }
    let mut errors = schema::validate(obj, schema);
    let rules = cel::validate_rules(schema, obj, old, &errors);
    warnings.extend(rules.warnings);
    errors.extend(rules.errors);
    if errors.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        &def.group,
        &def.kind,
        name,
        errors
            .into_iter()
            .map(|e| cause(&e.reason, &e.field, e.message))
            .collect(),
    ))
}

/// A namespace's name label; on create its `kubernetes` finalizer and phase.
fn namespace_defaults(obj: &mut Value, name: &str, create: bool) {
    let labels = meta_mut(obj).entry("labels").or_insert_with(|| json!({}));
    labels["kubernetes.io/metadata.name"] = Value::String(name.to_string());
    if create {
        if obj.pointer("/spec/finalizers").is_none() {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
        }
        obj["status"] = json!({"phase": "Active"});
    }
}

/// A new Service's type, affinity, cluster IP (`ip` unless given), port protocols and
/// target ports, and its status.
fn service_defaults(obj: &mut Value, ip: &str) {
    let spec = obj
        .as_object_mut()
        .map(|o| o.entry("spec").or_insert_with(|| json!({})));
    if let Some(spec) = spec.and_then(Value::as_object_mut) {
        spec.entry("type").or_insert_with(|| json!("ClusterIP"));
        spec.entry("sessionAffinity")
            .or_insert_with(|| json!("None"));
        if spec.get("type") != Some(&json!("ExternalName")) {
            spec.entry("clusterIP").or_insert_with(|| json!(ip));
            let cip = spec.get("clusterIP").cloned().unwrap_or(json!(ip));
            spec.entry("clusterIPs").or_insert_with(|| json!([cip]));
        }
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for p in ports {
                if let Some(p) = p.as_object_mut() {
                    p.entry("protocol").or_insert_with(|| json!("TCP"));
                    if let Some(port) = p.get("port").cloned() {
                        p.entry("targetPort").or_insert(port);
                    }
                }
            }
        }
    }
    obj["status"] = json!({"loadBalancer": {}});
}

/// A new Pod's spec and container defaults, and its first status.
fn pod_defaults(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("restartPolicy")
            .or_insert_with(|| json!("Always"));
        spec.entry("dnsPolicy")
            .or_insert_with(|| json!("ClusterFirst"));
        spec.entry("schedulerName")
            .or_insert_with(|| json!("default-scheduler"));
        spec.entry("terminationGracePeriodSeconds")
            .or_insert_with(|| json!(30));
        spec.entry("enableServiceLinks")
            .or_insert_with(|| json!(true));
        if let Some(cs) = spec.get_mut("containers").and_then(Value::as_array_mut) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                c.entry("terminationMessagePath")
                    .or_insert_with(|| json!("/dev/termination-log"));
                c.entry("terminationMessagePolicy")
                    .or_insert_with(|| json!("File"));
                let latest = c
                    .get("image")
                    .and_then(Value::as_str)
                    .is_some_and(|i| !i.contains(':') || i.ends_with(":latest"));
                c.entry("imagePullPolicy")
                    .or_insert_with(|| json!(if latest { "Always" } else { "IfNotPresent" }));
            }
        }
    }
    obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
}

/// A new Deployment's spec defaults.
fn deployment_defaults(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("replicas").or_insert_with(|| json!(1));
        spec.entry("revisionHistoryLimit")
            .or_insert_with(|| json!(10));
        spec.entry("progressDeadlineSeconds")
            .or_insert_with(|| json!(600));
        spec.entry("strategy").or_insert_with(|| {
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        });
    }
}

/// A new CRD's first status: no accepted names yet, the storage version stored.
fn crd_status(obj: &mut Value) {
    let storage = obj
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        })
        .and_then(|v| v.get("name"))
        .cloned()
        .unwrap_or(Value::Null);
    obj["status"] = json!({
        "acceptedNames": {"plural": "", "kind": ""},
        "storedVersions": [storage],
    });
}

/// Validates an Event (stored in the core/v1 shape) as the API server does for the view it
/// was written through.
fn validate_event(ev: &Value, events_v1: bool) -> ApiResult<()> {
    let name = meta_str(ev, "name").unwrap_or("").to_string();
    let s = |f: &str| ev.get(f).and_then(Value::as_str).unwrap_or("");
    let (f_component, f_note, f_regarding) = if events_v1 {
        ("reportingController", "note", "regarding")
    } else {
        ("reportingComponent", "message", "involvedObject")
    };
    let mut causes = Vec::new();
    let has_time = ev.get("eventTime").is_some_and(|t| !t.is_null());
    if events_v1 && !has_time {
        causes.push(cause("FieldValueRequired", "eventTime", "Required value"));
    }
    if has_time {
        if s("reportingComponent").is_empty() {
            causes.push(cause("FieldValueRequired", f_component, "Required value"));
        }
        for (field, limit) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
            let v = s(field);
            if v.is_empty() {
                causes.push(cause("FieldValueRequired", field, "Required value"));
            } else if v.len() > limit {
                causes.push(cause(
                    "FieldValueInvalid",
                    field,
                    format!("Invalid value: \"\": can have at most {limit} characters"),
                ));
            }
        }
        if s("message").len() > 1024 {
            causes.push(cause(
                "FieldValueInvalid",
                f_note,
                "Invalid value: \"\": can have at most 1024 characters",
            ));
        }
    } else {
        let ns = meta_str(ev, "namespace").unwrap_or("");
        let involved = ev
            .pointer("/involvedObject/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let ok = if involved.is_empty() {
            ns.is_empty() || ns == "default"
        } else {
            ns == involved
        };
        if !ok {
            causes.push(cause(
                "FieldValueInvalid",
                &format!("{f_regarding}.namespace"),
                format!("Invalid value: \"{involved}\": does not match event.namespace"),
            ));
        }
    }
    if events_v1 {
        let t = s("type");
        if t != "Normal" && t != "Warning" {
            causes.push(cause(
                "FieldValueInvalid",
                "type",
                format!("Invalid value: \"{t}\": has invalid value: {t}"),
            ));
        }
        if ev
            .get("source")
            .is_some_and(|v| v.as_object().is_some_and(|m| !m.is_empty()))
        {
            causes.push(cause(
                "FieldValueInvalid",
                "deprecatedSource",
                "Invalid value: \"object\": deprecatedSource is deprecated, do not use it",
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        let group = if events_v1 { "events.k8s.io" } else { "" };
        Err(ApiError::invalid(group, "Event", &name, causes))
    }
}
