//! Defaults kube-apiserver sets on create for built-in kinds beyond those of
//! `validation.rs` (Services, Pods, Deployments): Secrets' `type`, the workload controllers'
//! specs, and the Service fields a dual-stack-aware server always fills.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value, json};

use crate::apiserver::catalog::ResourceDef;

fn spec_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    obj.as_object_mut()?
        .entry("spec")
        .or_insert_with(|| json!({}))
        .as_object_mut()
}

fn or(m: &mut Map<String, Value>, key: &str, value: Value) {
    m.entry(key).or_insert(value);
}

/// A Secret's `stringData` written into `data` (base64) and dropped, as kube's conversion of
/// every Secret write does: a stored Secret has no `stringData`.
pub(crate) fn merge_string_data(def: &ResourceDef, obj: &mut Value) {
    if !(def.group.is_empty() && def.plural == "secrets") {
        return;
    }
    let Some(o) = obj.as_object_mut() else { return };
    let Some(strings) = o.remove("stringData") else {
        return;
    };
    let Value::Object(strings) = strings else {
        return;
    };
    let data = o.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(d) = data.as_object_mut() {
        for (k, v) in strings {
            if let Some(text) = v.as_str() {
                d.insert(k, Value::String(B64.encode(text)));
            }
        }
    }
}

/// Sets kube's create-time defaults of `def`'s kind on `obj` (fields already set are kept).
pub(crate) fn apply_create_defaults(def: &ResourceDef, obj: &mut Value) {
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "secrets") => {
            if let Some(o) = obj.as_object_mut() {
                let typ = o.entry("type").or_insert_with(|| json!("Opaque"));
                if typ.as_str().is_none_or(str::is_empty) {
                    *typ = json!("Opaque");
                }
            }
        }
        ("", "services") => {
            if let Some(spec) = spec_mut(obj)
                && spec.get("type").and_then(Value::as_str) != Some("ExternalName")
            {
                or(spec, "internalTrafficPolicy", json!("Cluster"));
                or(spec, "ipFamilies", json!(["IPv4"]));
                or(spec, "ipFamilyPolicy", json!("SingleStack"));
            }
        }
        ("", "persistentvolumeclaims") => {
            if let Some(spec) = spec_mut(obj) {
                or(spec, "volumeMode", json!("Filesystem"));
            }
        }
        ("apps", "replicasets") | ("", "replicationcontrollers") => {
            if let Some(spec) = spec_mut(obj) {
                or(spec, "replicas", json!(1));
            }
        }
        ("apps", "statefulsets") => {
            if let Some(spec) = spec_mut(obj) {
                or(spec, "replicas", json!(1));
                or(spec, "podManagementPolicy", json!("OrderedReady"));
                or(spec, "revisionHistoryLimit", json!(10));
                or(
                    spec,
                    "updateStrategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
                );
                or(
                    spec,
                    "persistentVolumeClaimRetentionPolicy",
                    json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                );
            }
        }
        ("apps", "daemonsets") => {
            if let Some(spec) = spec_mut(obj) {
                or(spec, "revisionHistoryLimit", json!(10));
                or(
                    spec,
                    "updateStrategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
                );
            }
        }
        ("batch", "jobs") => {
            if let Some(spec) = spec_mut(obj) {
                // Both 1 only when neither is given: `parallelism: 5` alone is a work queue.
                if !spec.contains_key("completions") && !spec.contains_key("parallelism") {
                    spec.insert("completions".into(), json!(1));
                    spec.insert("parallelism".into(), json!(1));
                }
                or(spec, "parallelism", json!(1));
                or(spec, "backoffLimit", json!(6));
                or(spec, "completionMode", json!("NonIndexed"));
                or(spec, "suspend", json!(false));
                or(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
            }
        }
        ("batch", "cronjobs") => {
            if let Some(spec) = spec_mut(obj) {
                or(spec, "concurrencyPolicy", json!("Allow"));
                or(spec, "suspend", json!(false));
                or(spec, "successfulJobsHistoryLimit", json!(3));
                or(spec, "failedJobsHistoryLimit", json!(1));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::catalog::builtins;

    fn def(group: &str, plural: &str) -> ResourceDef {
        builtins()
            .into_iter()
            .find(|d| d.group == group && d.plural == plural)
            .expect("built in")
    }

    #[test]
    fn secrets_get_opaque_and_jobs_their_spec() {
        let mut s = json!({"metadata": {"name": "s"}});
        apply_create_defaults(&def("", "secrets"), &mut s);
        assert_eq!(s["type"], "Opaque");
        let mut t = json!({"type": "kubernetes.io/tls"});
        apply_create_defaults(&def("", "secrets"), &mut t);
        assert_eq!(t["type"], "kubernetes.io/tls");
        let mut sd = json!({"data": {"a": "eA=="}, "stringData": {"b": "yz"}});
        merge_string_data(&def("", "secrets"), &mut sd);
        assert_eq!(sd, json!({"data": {"a": "eA==", "b": "eXo="}}));
        let mut j = json!({"spec": {"completions": 3}});
        apply_create_defaults(&def("batch", "jobs"), &mut j);
        assert_eq!(j["spec"]["completions"], 3);
        let mut queue = json!({"spec": {"parallelism": 5}});
        apply_create_defaults(&def("batch", "jobs"), &mut queue);
        assert!(queue["spec"].get("completions").is_none(), "{queue}");
        assert_eq!(j["spec"]["backoffLimit"], 6);
    }
}
