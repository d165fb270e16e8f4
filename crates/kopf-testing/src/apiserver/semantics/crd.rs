//! CustomResourceDefinitions: validation (`spec.conversion` included), establishing and
//! serving their resources, and removing their objects when they are deleted.

use serde_json::{Value, json};

use crate::apiserver::catalog;
use crate::apiserver::error::{ApiError, ApiResult, Cause, cause};
use crate::apiserver::storage::{ObjKey, ResKey};

use super::meta::{
    finalizers, is_valid_dns_label, is_valid_dns_subdomain, meta, meta_mut, meta_str, now,
};
use super::options::DeleteOptions;
use super::state::State;
use super::webhook_configs;

/// The finalizer apiextensions puts on CRDs while their objects are removed.
pub const CRD_CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// Validates a CustomResourceDefinition body.
pub(super) fn validate_crd(crd: &Value) -> ApiResult<()> {
    let name = meta_str(crd, "name").unwrap_or("").to_string();
    let mut causes = Vec::new();
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let plural = crd
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = crd
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    if group.is_empty() {
        causes.push(cause("FieldValueRequired", "spec.group", "Required value"));
    } else if !is_valid_dns_subdomain(group) || !group.contains('.') {
        causes.push(cause(
            "FieldValueInvalid",
            "spec.group",
            format!("Invalid value: \"{group}\": should be a domain with at least one dot"),
        ));
    }
    if plural.is_empty() {
        causes.push(cause(
            "FieldValueRequired",
            "spec.names.plural",
            "Required value",
        ));
    } else if !is_valid_dns_label(plural) {
        causes.push(cause(
            "FieldValueInvalid",
            "spec.names.plural",
            format!("Invalid value: \"{plural}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"),
        ));
    }
    if kind.is_empty() {
        causes.push(cause(
            "FieldValueRequired",
            "spec.names.kind",
            "Required value",
        ));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(cause(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    match crd.pointer("/spec/scope").and_then(Value::as_str) {
        Some("Namespaced") | Some("Cluster") => {}
        Some(other) => causes.push(cause(
            "FieldValueNotSupported",
            "spec.scope",
            format!(
                "Unsupported value: \"{other}\": supported values: \"Cluster\", \"Namespaced\""
            ),
        )),
        None => causes.push(cause("FieldValueRequired", "spec.scope", "Required value")),
    }
    causes.extend(validate_crd_versions(crd));
    causes.extend(validate_crd_conversion(crd));
    causes.extend(crate::apiserver::cel::check_crd(crd));
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            &name,
            causes,
        ))
    }
}

/// Validates `spec.versions` of a CRD: exactly one storage version, each with a schema.
fn validate_crd_versions(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    match crd.pointer("/spec/versions").and_then(Value::as_array) {
        Some(versions) if !versions.is_empty() => {
            let storage = versions
                .iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .count();
            if storage != 1 {
                causes.push(cause(
                    "FieldValueInvalid",
                    "spec.versions",
                    format!("Invalid value: {}: must have exactly one version marked as storage version", storage),
                ));
            }
            for (i, v) in versions.iter().enumerate() {
                if v.pointer("/schema/openAPIV3Schema").is_none() {
                    causes.push(cause(
                        "FieldValueRequired",
                        &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                        "Required value: schemas are required",
                    ));
                }
            }
        }
        _ => causes.push(cause(
            "FieldValueInvalid",
            "spec.versions",
            "Invalid value: null: must have exactly one version marked as storage version",
        )),
    }
    causes
}

/// Validates `spec.conversion` of a CRD.
pub(crate) fn validate_crd_conversion(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(conversion) = crd.pointer("/spec/conversion").filter(|c| !c.is_null()) else {
        return causes;
    };
    let strategy = conversion
        .get("strategy")
        .and_then(Value::as_str)
        .unwrap_or("");
    let webhook = conversion.get("webhook").filter(|w| !w.is_null());
    match strategy {
        "None" => {
            if webhook.is_some() {
                causes.push(cause(
                    "FieldValueForbidden",
                    "spec.conversion.webhook",
                    "Forbidden: should not be set when strategy is not set to Webhook",
                ));
            }
        }
        "Webhook" => match webhook {
            None => causes.push(cause(
                "FieldValueRequired",
                "spec.conversion.webhook",
                "Required value: required when strategy is set to Webhook",
            )),
            Some(w) => {
                match w.get("clientConfig").filter(|c| !c.is_null()) {
                    None => causes.push(cause(
                        "FieldValueRequired",
                        "spec.conversion.webhook.clientConfig",
                        "Required value: required when strategy is set to Webhook",
                    )),
                    Some(cc) => causes.extend(webhook_configs::validate_client_config(
                        cc,
                        "spec.conversion.webhook.clientConfig",
                    )),
                }
                let versions: Vec<&str> = w
                    .get("conversionReviewVersions")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if versions.is_empty() {
                    causes.push(cause(
                        "FieldValueRequired",
                        "spec.conversion.webhook.conversionReviewVersions",
                        "Required value: must include at least one of v1, v1beta1",
                    ));
                } else if !versions.iter().any(|v| *v == "v1" || *v == "v1beta1") {
                    causes.push(cause(
                        "FieldValueInvalid",
                        "spec.conversion.webhook.conversionReviewVersions",
                        format!(
                            "Invalid value: []string{{{}}}: must include at least one of v1, v1beta1",
                            versions
                                .iter()
                                .map(|v| format!("{v:?}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            }
        },
        "" => causes.push(cause(
            "FieldValueRequired",
            "spec.conversion.strategy",
            "Required value",
        )),
        other => causes.push(cause(
            "FieldValueNotSupported",
            "spec.conversion.strategy",
            format!("Unsupported value: \"{other}\": supported values: \"None\", \"Webhook\""),
        )),
    }
    causes
}

impl State {
    /// Marks a CRD NamesAccepted and Established and starts serving its resources.
    pub fn establish_crd(&mut self, name: &str) {
        let res: ResKey = (
            "apiextensions.k8s.io".into(),
            "customresourcedefinitions".into(),
        );
        let key: ObjKey = (String::new(), name.to_string());
        let Some(crd) = self.store.get(&res, &key) else {
            return;
        };
        if meta(&crd).get("deletionTimestamp").is_some() {
            return;
        }
        let mut new = (*crd).clone();
        let names = new.pointer("/spec/names").cloned().unwrap_or(json!({}));
        let mut accepted = names.clone();
        if let Some(kind) = names.get("kind").and_then(Value::as_str) {
            if accepted.get("singular").is_none() {
                accepted["singular"] = json!(kind.to_lowercase());
            }
            if accepted.get("listKind").is_none() {
                accepted["listKind"] = json!(format!("{kind}List"));
            }
        }
        let t = now();
        new["status"]["acceptedNames"] = accepted;
        new["status"]["conditions"] = json!([
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": t,
             "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": t,
             "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
        ]);
        let stored = self.store.put(&res, &key, new);
        self.register_crd(&stored);
    }

    pub(super) fn register_crd(&mut self, crd: &Value) {
        let name = meta_str(crd, "name").unwrap_or("").to_string();
        match catalog::from_crd(crd) {
            Ok(defs) => {
                self.crds.insert(name, defs);
                self.catalog_generation += 1;
                self.sync_apiservices();
            }
            Err(e) => tracing::warn!(crd = %name, error = %e, "cannot serve a CRD"),
        }
    }

    pub(super) fn unregister_crd(&mut self, name: &str) {
        if self.crds.remove(name).is_some() {
            self.catalog_generation += 1;
            self.sync_apiservices();
        }
    }

    pub(super) fn finalize_crd(&mut self, crd: &Value) -> bool {
        let name = meta_str(crd, "name").unwrap_or("").to_string();
        let mut changed = false;
        let defs = self.crds.get(&name).cloned().unwrap_or_default();
        if let Some(def) = defs.first() {
            let res = Self::res_key(def);
            let objects = self.store.list(&res, None);
            if !objects.is_empty() {
                for (key, obj) in objects {
                    if meta(&obj).get("deletionTimestamp").is_none() {
                        let ns = (!key.0.is_empty()).then_some(key.0.clone());
                        if let Err(e) =
                            self.delete(def, ns.as_deref(), &key.1, &DeleteOptions::default())
                        {
                            tracing::debug!(error = %e, "CRD cleanup could not delete an object");
                        }
                        changed = true;
                    }
                }
                if self.store.count(&res) > 0 {
                    return changed;
                }
            }
        }
        // Nothing left: drop our finalizer; the object goes when no finalizers remain.
        let res: ResKey = (
            "apiextensions.k8s.io".into(),
            "customresourcedefinitions".into(),
        );
        let key: ObjKey = (String::new(), name.clone());
        let mut new = crd.clone();
        if let Some(fins) = meta_mut(&mut new)
            .get_mut("finalizers")
            .and_then(Value::as_array_mut)
        {
            fins.retain(|f| f != CRD_CLEANUP_FINALIZER);
        }
        if finalizers(&new).is_empty() {
            self.store.remove(&res, &key);
            self.unregister_crd(&name);
        } else {
            self.store.put(&res, &key, new);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_strategies() {
        let crd = |c: Value| json!({"spec": {"conversion": c}});
        assert!(validate_crd_conversion(&crd(json!({"strategy": "None"}))).is_empty());
        assert_eq!(
            validate_crd_conversion(&crd(json!({"strategy": "Webhook"})))[0].field,
            "spec.conversion.webhook"
        );
        assert_eq!(
            validate_crd_conversion(&crd(json!({"strategy": "Bogus"})))[0].reason,
            "FieldValueNotSupported"
        );
        let ok = crd(json!({"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": "https://127.0.0.1:1/convert"}, "conversionReviewVersions": ["v1"]}}));
        assert!(validate_crd_conversion(&ok).is_empty());
    }
}
