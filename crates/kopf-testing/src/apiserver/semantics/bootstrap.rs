//! What every cluster has from its start, written by kube-apiserver itself: the bootstrap
//! RBAC policy (`cluster-admin`, the aggregated `admin`/`edit`/`view` and the `system:`
//! discovery roles, with their bindings), the Service `default/kubernetes` with its
//! Endpoints and EndpointSlice, and one APIService per served group-version, kept in step
//! with the CustomResourceDefinitions.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::meta::{meta_str, now};
use super::options::WriteOptions;
use super::state::State;

const RBAC: &str = "rbac.authorization.k8s.io";
const AGGREGATE_TO: &str = "rbac.authorization.k8s.io/aggregate-to-";
const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";
/// The ClusterIP of `default/kubernetes` (the first address of kubeadm's service range).
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

const RW: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
/// Every verb of a stored resource.
const RWX: &[&str] = crate::apiserver::kinds::ALL_VERBS;
const READ: &[&str] = &["get", "list", "watch"];

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn url_rule(urls: &[&str], verbs: &[&str]) -> Value {
    json!({"nonResourceURLs": urls, "verbs": verbs})
}

/// The roles users are bound to, in the order kube-apiserver creates them: cluster-admin,
/// the aggregation parts, then admin, edit and view filled with their parts' rules (as the
/// aggregation controller does).
fn user_facing_roles() -> Vec<Value> {
    let none = json!({});
    let mut view = view_rules();
    let mut edit = edit_rules();
    let admin_only = admin_rules();
    let mut roles = vec![
        cluster_role(
            "cluster-admin",
            none.clone(),
            vec![rule(&["*"], &["*"], &["*"]), url_rule(&["*"], &["*"])],
            None,
        ),
        cluster_role(
            "system:aggregate-to-view",
            json!({format!("{AGGREGATE_TO}view"): "true"}),
            view.clone(),
            None,
        ),
        cluster_role(
            "system:aggregate-to-edit",
            json!({format!("{AGGREGATE_TO}edit"): "true"}),
            edit.clone(),
            None,
        ),
        cluster_role(
            "system:aggregate-to-admin",
            json!({format!("{AGGREGATE_TO}admin"): "true"}),
            admin_only.clone(),
            None,
        ),
    ];
    let view_role = cluster_role(
        "view",
        json!({format!("{AGGREGATE_TO}edit"): "true"}),
        view.clone(),
        Some("view"),
    );
    edit.append(&mut view);
    let edit_role = cluster_role(
        "edit",
        json!({format!("{AGGREGATE_TO}admin"): "true"}),
        edit.clone(),
        Some("edit"),
    );
    edit.extend(admin_only);
    let admin_role = cluster_role("admin", none, edit, Some("admin"));
    roles.extend([admin_role, edit_role, view_role]);
    roles
}

/// The system roles: discovery, basic user, public info.
fn system_roles() -> [Value; 3] {
    let none = json!({});
    let discovery = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi",
        "/openapi/*",
        "/readyz",
        "/version",
        "/version/",
    ];
    let public = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    [
        cluster_role(
            "system:discovery",
            none.clone(),
            vec![url_rule(&discovery, &["get"])],
            None,
        ),
        cluster_role(
            "system:basic-user",
            none.clone(),
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                rule(
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                    &["create"],
                ),
            ],
            None,
        ),
        cluster_role(
            "system:public-info-viewer",
            none,
            vec![url_rule(&public, &["get"])],
            None,
        ),
    ]
}

/// The rules kube's `system:aggregate-to-view` carries (the key ones).
fn view_rules() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
            READ,
        ),
        rule(
            &[""],
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
            READ,
        ),
        rule(&[""], &["namespaces"], READ),
        rule(&["discovery.k8s.io"], &["endpointslices"], READ),
        rule(
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            READ,
        ),
        rule(
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
            READ,
        ),
        rule(
            &["batch"],
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
            READ,
        ),
        rule(
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
            READ,
        ),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
            READ,
        ),
    ]
}

/// The rules kube's `system:aggregate-to-edit` carries (the key ones).
fn edit_rules() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
            READ,
        ),
        rule(&[""], &["serviceaccounts"], &["impersonate"]),
        rule(
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
            ],
            RW,
        ),
        rule(&[""], &["pods/eviction"], &["create"]),
        rule(
            &[""],
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            RW,
        ),
        rule(&[""], &["serviceaccounts/token"], &["create"]),
        rule(
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
            RW,
        ),
        rule(&["autoscaling"], &["horizontalpodautoscalers"], RW),
        rule(&["batch"], &["cronjobs", "jobs"], RW),
        rule(&["policy"], &["poddisruptionbudgets"], RW),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "networkpolicies"],
            RW,
        ),
        rule(&["coordination.k8s.io"], &["leases"], RWX),
    ]
}

/// The rules kube's `system:aggregate-to-admin` carries.
fn admin_rules() -> Vec<Value> {
    vec![
        rule(
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews"],
            &["create"],
        ),
        rule(&[RBAC], &["rolebindings", "roles"], RWX),
    ]
}

fn cluster_role(name: &str, labels: Value, rules: Vec<Value>, aggregate: Option<&str>) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
    let mut role = json!({
        "apiVersion": format!("{RBAC}/v1"), "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels,
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "rules": rules,
    });
    if let Some(to) = aggregate {
        role["aggregationRule"] = json!({"clusterRoleSelectors": [
            {"matchLabels": {format!("{AGGREGATE_TO}{to}"): "true"}}]});
    }
    role
}

fn binding(name: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": RBAC, "kind": "Group", "name": g}))
        .collect();
    json!({
        "apiVersion": format!("{RBAC}/v1"), "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
        "subjects": subjects,
    })
}

/// kube-aggregator's priorities of the built-in group-versions (group minimum, version).
fn priorities(group: &str) -> (i64, i64) {
    match group {
        "" => (18000, 1),
        "apiregistration.k8s.io" | "apps" => (17800, 15),
        "events.k8s.io" => (17750, 15),
        "authentication.k8s.io" => (17700, 15),
        "authorization.k8s.io" => (17600, 15),
        "batch" => (17400, 15),
        "certificates.k8s.io" => (17300, 15),
        "rbac.authorization.k8s.io" => (17000, 15),
        "admissionregistration.k8s.io" => (16700, 15),
        "coordination.k8s.io" => (16500, 15),
        "apiextensions.k8s.io" => (16400, 15),
        "discovery.k8s.io" => (16200, 15),
        _ => (1000, 100),
    }
}

/// The name of a group-version's APIService: `v1.` for core, `v1.apps`.
pub fn apiservice_name(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

impl State {
    fn create_bootstrap(&mut self, group: &str, plural: &str, ns: Option<&str>, body: Value) {
        let Some(def) = self.find(group, "v1", plural) else {
            tracing::error!(plural, "a bootstrap kind is not served");
            return;
        };
        let opts = WriteOptions {
            field_manager: Some("kube-apiserver".into()),
            ..WriteOptions::default()
        };
        if let Err(e) = self.create(&def, ns, body, &opts) {
            tracing::error!(plural, error = %e, "cannot create a bootstrap object");
        }
    }

    /// Creates what kube-apiserver writes at its start (the Endpoints of `default/kubernetes`
    /// follow in [`State::bootstrap_endpoints`], once the server's address is known).
    pub(super) fn bootstrap(&mut self) {
        for role in user_facing_roles().into_iter().chain(system_roles()) {
            self.create_bootstrap(RBAC, "clusterroles", None, role);
        }
        let bindings = [
            binding("cluster-admin", &["system:masters"]),
            binding("system:discovery", &["system:authenticated"]),
            binding("system:basic-user", &["system:authenticated"]),
            binding(
                "system:public-info-viewer",
                &["system:authenticated", "system:unauthenticated"],
            ),
        ];
        for b in bindings {
            self.create_bootstrap(RBAC, "clusterrolebindings", None, b);
        }
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default",
                "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "clusterIP": KUBERNETES_SERVICE_IP,
                "clusterIPs": [KUBERNETES_SERVICE_IP], "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster",
                "sessionAffinity": "None",
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 443}]},
            "status": {"loadBalancer": {}},
        });
        self.create_bootstrap("", "services", Some("default"), service);
        self.sync_apiservices();
    }

    /// Writes the Endpoints and EndpointSlice of `default/kubernetes` for the server's
    /// address, and points the Service's target port at it.
    pub fn bootstrap_endpoints(&mut self, ip: &str, port: u16) {
        let labels = json!({"endpointslice.kubernetes.io/skip-mirror": "true"});
        let endpoints = json!({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": labels},
            "subsets": [{"addresses": [{"ip": ip}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
        });
        let slice = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default",
                "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": if ip.contains(':') { "IPv6" } else { "IPv4" },
            "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        });
        self.create_bootstrap("", "endpoints", Some("default"), endpoints);
        self.create_bootstrap("discovery.k8s.io", "endpointslices", Some("default"), slice);
        if let Some(def) = self.find("", "v1", "services") {
            let patch = json!({"spec": {"ports": [
                {"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]}});
            let r = self.patch(
                &def,
                Some("default"),
                "kubernetes",
                None,
                super::PatchType::Merge,
                patch.to_string().as_bytes(),
                &WriteOptions::default(),
            );
            if let Err(e) = r {
                tracing::error!(error = %e, "cannot point the kubernetes Service at the server");
            }
        }
    }

    /// Creates an APIService for each served group-version that has none, and removes
    /// the automanaged ones whose group-version is no longer served.
    pub(super) fn sync_apiservices(&mut self) {
        let Some(def) = self.find("apiregistration.k8s.io", "v1", "apiservices") else {
            return;
        };
        let served: BTreeSet<(String, String, bool)> = self
            .defs()
            .into_iter()
            .map(|d| (d.group.clone(), d.version.clone(), d.is_custom()))
            .collect();
        let names: BTreeSet<String> = served
            .iter()
            .map(|(g, v, _)| apiservice_name(g, v))
            .collect();
        let res = Self::res_key(&def);
        let stale: Vec<String> = self
            .store
            .list(&res, None)
            .into_iter()
            .filter(|(_, o)| {
                o.pointer("/metadata/labels")
                    .and_then(|l| l.get(AUTOMANAGED))
                    .is_some()
            })
            .filter_map(|(_, o)| meta_str(&o, "name").map(str::to_string))
            .filter(|n| !names.contains(n))
            .collect();
        for name in stale {
            self.store.remove(&res, &(String::new(), name));
        }
        for (group, version, custom) in served {
            let name = apiservice_name(&group, &version);
            if self.store.contains(&res, &(String::new(), name.clone())) {
                continue;
            }
            let (group_priority, version_priority) = priorities(&group);
            let body = json!({
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": name,
                    "labels": {AUTOMANAGED: if custom { "true" } else { "onstart" }}},
                "spec": {"group": group, "version": version,
                    "groupPriorityMinimum": group_priority, "versionPriority": version_priority},
                "status": {"conditions": [{"type": "Available", "status": "True",
                    "lastTransitionTime": now(), "reason": "Local",
                    "message": "Local APIServices are always available"}]},
            });
            self.create_bootstrap("apiregistration.k8s.io", "apiservices", None, body);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::apiserver::semantics::{AccessRequest, ResourceAttributes, StateConfig};

    use super::*;

    #[test]
    fn aggregated_roles_and_bindings_decide() {
        let config = StateConfig {
            establish_immediately: true,
            pod_termination_cap: std::time::Duration::from_secs(1),
        };
        let state = State::new(1000, config);
        let ask = |groups: &[&str], verb: &str, resource: &str, path: &str| {
            state
                .decide_access(&AccessRequest {
                    user: "u".into(),
                    groups: groups.iter().map(|g| g.to_string()).collect(),
                    verb: verb.into(),
                    resource: (!resource.is_empty()).then(|| ResourceAttributes {
                        namespace: "default".into(),
                        resource: resource.into(),
                        ..ResourceAttributes::default()
                    }),
                    path: path.into(),
                })
                .allowed
        };
        let authenticated = &["system:authenticated"];
        assert!(!ask(authenticated, "list", "pods", ""));
        assert!(ask(authenticated, "get", "", "/apis/apps"));
        assert!(!ask(&["system:unauthenticated"], "get", "", "/apis"));
        assert!(ask(&["system:unauthenticated"], "get", "", "/healthz"));
        let Some(def) = state.find(RBAC, "v1", "clusterroles") else {
            panic!("clusterroles are served");
        };
        let admin = state.get(&def, None, "admin").expect("admin");
        let rules = admin["rules"].to_string();
        assert!(
            rules.contains("rolebindings") && rules.contains("jobs") && rules.contains("pods/log")
        );
        let view = state.get(&def, None, "view").expect("view");
        assert!(!view["rules"].to_string().contains("secrets"));
    }
}
