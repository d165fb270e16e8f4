//! Discovery documents (legacy and aggregated), generated from the served resource
//! definitions. The OpenAPI v3 documents are in [`openapi`](crate::apiserver::openapi)
//! (re-exported here, where they were before).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sha2::{Digest, Sha512};

use crate::apiserver::catalog::{ResourceDef, version_priority};

pub use crate::apiserver::openapi::{openapi_document, openapi_index, openapi_path, schema_name};

/// Groups with their versions in preference order.
pub fn groups(defs: &[&ResourceDef]) -> Vec<(String, Vec<String>)> {
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in defs {
        let versions = map.entry(d.group.clone()).or_default();
        if !versions.contains(&d.version) {
            versions.push(d.version.clone());
        }
    }
    // Built-in groups first in a stable order, then custom groups alphabetically.
    let mut out: Vec<(String, Vec<String>)> = map
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, mut vs)| {
            vs.sort_by_key(|v| version_priority(v));
            (g, vs)
        })
        .collect();
    let builtin_rank = |g: &str| -> usize {
        const ORDER: &[&str] = &[
            "apiregistration.k8s.io",
            "apps",
            "events.k8s.io",
            "authentication.k8s.io",
            "batch",
            "certificates.k8s.io",
            "rbac.authorization.k8s.io",
            "admissionregistration.k8s.io",
            "apiextensions.k8s.io",
            "coordination.k8s.io",
            "discovery.k8s.io",
        ];
        ORDER.iter().position(|o| *o == g).unwrap_or(ORDER.len())
    };
    out.sort_by(|a, b| {
        builtin_rank(&a.0)
            .cmp(&builtin_rank(&b.0))
            .then(a.0.cmp(&b.0))
    });
    out
}

/// `GET /api`.
pub fn api_versions(address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    })
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// `GET /apis`.
pub fn api_group_list(defs: &[&ResourceDef]) -> Value {
    let groups: Vec<Value> = groups(defs)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>`; None when unknown.
pub fn api_group(defs: &[&ResourceDef], group: &str) -> Option<Value> {
    let (g, vs) = groups(defs).into_iter().find(|(g, _)| g == group)?;
    let mut doc = group_json(&g, &vs);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

fn storage_hash(d: &ResourceDef) -> String {
    let digest = Sha512::digest(format!("{}/{}/{}", d.group, d.version, d.kind).as_bytes());
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}

/// `GET /api/v1` or `/apis/<group>/<version>`; None when unknown.
pub fn api_resource_list(defs: &[&ResourceDef], group: &str, version: &str) -> Option<Value> {
    let selected: Vec<&&ResourceDef> = defs
        .iter()
        .filter(|d| d.group == group && d.version == version)
        .collect();
    if selected.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for d in selected {
        let mut r = json!({
            "name": d.plural,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": d.served_verbs(),
        });
        if d.is_stored() {
            r["storageVersionHash"] = json!(storage_hash(d));
        }
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        resources.push(r);
        let mut subs = Vec::new();
        if d.status {
            subs.push(
                json!({"name": format!("{}/status", d.plural), "singularName": "",
                "namespaced": d.namespaced, "kind": d.kind, "verbs": ["get", "patch", "update"]}),
            );
        }
        if d.scale.is_some() {
            subs.push(json!({"name": format!("{}/scale", d.plural), "singularName": "",
                "namespaced": d.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale",
                "verbs": ["get", "patch", "update"]}));
        }
        for s in d.kind_info().map_or(&[][..], |k| k.subresources) {
            let mut r = json!({"name": format!("{}/{}", d.plural, s.name), "singularName": "",
                "namespaced": d.namespaced, "kind": if s.kind.is_empty() { &d.kind } else { s.kind },
                "verbs": s.verbs});
            if !s.group.is_empty() {
                r["group"] = json!(s.group);
                r["version"] = json!(s.version);
            }
            subs.push(r);
        }
        subs.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        resources.extend(subs);
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let mut doc =
        json!({"kind": "APIResourceList", "groupVersion": group_version, "resources": resources});
    if !group.is_empty() {
        doc["apiVersion"] = json!("v1");
    }
    Some(doc)
}

fn aggregated_resource(d: &ResourceDef) -> Value {
    let mut subs = Vec::new();
    if d.scale.is_some() {
        subs.push(json!({"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": ["get", "patch", "update"]}));
    }
    if d.status {
        subs.push(json!({"subresource": "status", "responseKind": {"group": "", "version": "", "kind": d.kind},
            "verbs": ["get", "patch", "update"]}));
    }
    for s in d.kind_info().map_or(&[][..], |k| k.subresources) {
        let kind = if s.kind.is_empty() { &d.kind } else { s.kind };
        subs.push(json!({"subresource": s.name,
            "responseKind": {"group": s.group, "version": s.version, "kind": kind},
            "verbs": s.verbs}));
    }
    let mut r = json!({
        "resource": d.plural,
        "responseKind": {"group": "", "version": "", "kind": d.kind},
        "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": d.singular,
        "verbs": d.served_verbs(),
    });
    if !d.short_names.is_empty() {
        r["shortNames"] = json!(d.short_names);
    }
    if !d.categories.is_empty() {
        r["categories"] = json!(d.categories);
    }
    if !subs.is_empty() {
        r["subresources"] = json!(subs);
    }
    r
}

/// The aggregated discovery document for `/api` (core) or `/apis` (groups).
pub fn aggregated(defs: &[&ResourceDef], core: bool) -> Value {
    let group_list: Vec<(String, Vec<String>)> = if core {
        vec![(String::new(), vec!["v1".to_string()])]
    } else {
        groups(defs)
    };
    let items: Vec<Value> = group_list
        .iter()
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = defs
                        .iter()
                        .filter(|d| &d.group == g && &d.version == v)
                        .map(|d| aggregated_resource(d))
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            let metadata = if core {
                json!({"creationTimestamp": null})
            } else {
                json!({"name": g, "creationTimestamp": null})
            };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

/// Uppercase hex SHA-512 of a document (ETags, OpenAPI hashes).
pub fn hash(doc: &Value) -> String {
    let digest = Sha512::digest(doc.to_string().as_bytes());
    digest.iter().map(|b| format!("{b:02X}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::catalog::builtins;

    #[test]
    fn core_resource_list_has_subresources() {
        let b = builtins();
        let defs: Vec<&ResourceDef> = b.iter().collect();
        let doc = api_resource_list(&defs, "", "v1").unwrap_or_default();
        let names: Vec<&str> = doc["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert!(names.contains(&"pods/status"));
        assert!(names.contains(&"namespaces/finalize"));
        assert!(doc.get("apiVersion").is_none());
        assert!(api_resource_list(&defs, "nope.io", "v1").is_none());
    }
}
