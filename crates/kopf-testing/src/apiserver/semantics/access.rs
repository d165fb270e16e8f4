//! Access reviews answered from the RBAC objects in the store, as kube-apiserver's RBAC
//! authorizer answers them: `SubjectAccessReview`, `LocalSubjectAccessReview` and
//! `SelfSubjectAccessReview` (for an impersonated user; the fake server's own user is a
//! member of `system:masters`, which may do everything).
//!
//! What is evaluated: ClusterRoleBindings (everywhere) and RoleBindings (in their namespace)
//! whose subjects name the user, one of its groups, or its ServiceAccount; the rules of the
//! Role or ClusterRole they refer to, with aggregated ClusterRoles (`aggregationRule`)
//! collected from the ClusterRoles their selectors match; `*` in verbs, API groups and
//! resources, `*/subresource`, `resourceNames`, and `nonResourceURLs` with a trailing `*`.
//! Nothing is cached: every review reads the objects as they are.

use serde_json::{Value, json};

use crate::apiserver::error::{ApiError, ApiResult, cause};
use crate::apiserver::selectors::LabelSelector;
use crate::apiserver::storage::Store;

use super::state::State;

const RBAC: &str = "rbac.authorization.k8s.io";
/// The group whose members may do everything, before any RBAC object is read.
pub const SUPERUSER_GROUP: &str = "system:masters";

/// Who asks, and for what: a review's `spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessRequest {
    /// The user name (`system:serviceaccount:NS:NAME` for a ServiceAccount).
    pub user: String,
    /// The user's groups.
    pub groups: Vec<String>,
    /// The verb (`get`, `list`, `watch`, `create`, `patch`, ...).
    pub verb: String,
    /// A resource request (`None`: a non-resource URL in [`path`](Self::path)).
    pub resource: Option<ResourceAttributes>,
    /// A non-resource URL (`/healthz`, `/metrics`).
    pub path: String,
}

/// The resource of an [`AccessRequest`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceAttributes {
    /// The namespace ("" for cluster-scoped resources and all namespaces).
    pub namespace: String,
    /// The API group ("" for the core group).
    pub group: String,
    /// The resource's plural.
    pub resource: String,
    /// The subresource ("" for none).
    pub subresource: String,
    /// One object's name ("" for all of them).
    pub name: String,
}

/// An answer: allowed or not, and by what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request is allowed.
    pub allowed: bool,
    /// What allowed it (kube's form: `RBAC: allowed by ClusterRoleBinding "x" of
    /// ClusterRole "y" to User "z"`); empty when nothing did.
    pub reason: String,
}

impl AccessRequest {
    /// Reads a review's `spec` (a `LocalSubjectAccessReview`'s namespace is checked by the
    /// caller). The errors are kube's 422 messages.
    pub fn from_spec(kind: &str, name: &str, spec: &Value, self_review: bool) -> ApiResult<Self> {
        let text =
            |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        let resource = spec.get("resourceAttributes").filter(|v| !v.is_null());
        let non_resource = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
        let mut causes = Vec::new();
        match (resource, non_resource) {
            (Some(_), Some(_)) => causes.push(cause(
                "FieldValueInvalid",
                "spec.nonResourceAttributes",
                "Invalid value: cannot be specified in combination with resourceAttributes",
            )),
            (None, None) => causes.push(cause(
                "FieldValueInvalid",
                "spec.resourceAttributes",
                "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )),
            _ => {}
        }
        let user = text(spec, "user");
        let groups: Vec<String> = spec
            .get("groups")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        if !self_review && user.is_empty() && groups.is_empty() {
            causes.push(cause(
                "FieldValueInvalid",
                "spec.user",
                "Invalid value: \"\": at least one of user or group must be specified",
            ));
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid(
                "authorization.k8s.io",
                kind,
                name,
                causes,
            ));
        }
        let attrs = resource.or(non_resource).unwrap_or(&Value::Null);
        Ok(Self {
            user,
            groups,
            verb: text(attrs, "verb"),
            resource: resource.map(|r| ResourceAttributes {
                namespace: text(r, "namespace"),
                group: text(r, "group"),
                resource: text(r, "resource"),
                subresource: text(r, "subresource"),
                name: text(r, "name"),
            }),
            path: non_resource.map(|n| text(n, "path")).unwrap_or_default(),
        })
    }
}

/// One binding that applies to the request: where its rules come from.
struct Grant {
    binding_kind: &'static str,
    binding: String,
    binding_namespace: String,
    role_kind: String,
    role: String,
    subject: String,
    rules: Vec<Value>,
}

impl State {
    /// Decides an access request from the RBAC objects in the store.
    pub fn decide_access(&self, req: &AccessRequest) -> Decision {
        if req.groups.iter().any(|g| g == SUPERUSER_GROUP) {
            return Decision {
                allowed: true,
                reason: format!("the group {SUPERUSER_GROUP:?} may do everything"),
            };
        }
        let namespace = req.resource.as_ref().map_or("", |r| r.namespace.as_str());
        for grant in grants(&self.store, req, namespace) {
            if grant.rules.iter().any(|rule| rule_allows(rule, req)) {
                let binding = if grant.binding_namespace.is_empty() {
                    format!("{} {:?}", grant.binding_kind, grant.binding)
                } else {
                    format!(
                        "{} \"{}/{}\"",
                        grant.binding_kind, grant.binding_namespace, grant.binding
                    )
                };
                return Decision {
                    allowed: true,
                    reason: format!(
                        "RBAC: allowed by {binding} of {} {:?} to {}",
                        grant.role_kind, grant.role, grant.subject
                    ),
                };
            }
        }
        Decision {
            allowed: false,
            reason: String::new(),
        }
    }
}

fn list(store: &Store, plural: &str, namespace: Option<&str>) -> Vec<std::sync::Arc<Value>> {
    store
        .list(&(RBAC.to_string(), plural.to_string()), namespace)
        .into_iter()
        .map(|(_, o)| o)
        .collect()
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The bindings whose subjects name the requester, with their roles' rules: every
/// ClusterRoleBinding, and the RoleBindings of the request's namespace.
fn grants(store: &Store, req: &AccessRequest, namespace: &str) -> Vec<Grant> {
    let mut out = Vec::new();
    let mut bindings: Vec<(&'static str, std::sync::Arc<Value>)> =
        list(store, "clusterrolebindings", None)
            .into_iter()
            .map(|b| ("ClusterRoleBinding", b))
            .collect();
    if !namespace.is_empty() {
        bindings.extend(
            list(store, "rolebindings", Some(namespace))
                .into_iter()
                .map(|b| ("RoleBinding", b)),
        );
    }
    for (binding_kind, b) in bindings {
        let binding_namespace = str_at(&b, &["metadata", "namespace"]).to_string();
        let Some(subject) = b
            .get("subjects")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find_map(|s| subject_matches(s, req, &binding_namespace))
        else {
            continue;
        };
        let role_kind = str_at(&b, &["roleRef", "kind"]).to_string();
        let role = str_at(&b, &["roleRef", "name"]).to_string();
        let rules = match role_kind.as_str() {
            "ClusterRole" => cluster_role_rules(store, &role),
            "Role" if !binding_namespace.is_empty() => store
                .get(
                    &(RBAC.to_string(), "roles".to_string()),
                    &(binding_namespace.clone(), role.clone()),
                )
                .map(|r| rules_of(&r))
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        out.push(Grant {
            binding_kind,
            binding: str_at(&b, &["metadata", "name"]).to_string(),
            binding_namespace,
            role_kind,
            role,
            subject,
            rules,
        });
    }
    out
}

fn rules_of(role: &Value) -> Vec<Value> {
    role.get("rules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// A ClusterRole's rules; an aggregated one's are those of the ClusterRoles its
/// selectors match (what kube's aggregation controller writes into it).
fn cluster_role_rules(store: &Store, name: &str) -> Vec<Value> {
    let key = (RBAC.to_string(), "clusterroles".to_string());
    let Some(role) = store.get(&key, &(String::new(), name.to_string())) else {
        return Vec::new();
    };
    let Some(selectors) = role
        .get("aggregationRule")
        .and_then(|a| a.get("clusterRoleSelectors"))
        .and_then(Value::as_array)
    else {
        return rules_of(&role);
    };
    let selectors: Vec<LabelSelector> = selectors
        .iter()
        .filter_map(|s| LabelSelector::from_spec(s).ok())
        .collect();
    let mut rules = rules_of(&role);
    for other in list(store, "clusterroles", None) {
        if str_at(&other, &["metadata", "name"]) != name
            && selectors.iter().any(|s| s.matches_object(&other))
        {
            rules.extend(rules_of(&other));
        }
    }
    rules
}

/// The subject as kube's reasons name it, when it names the requester.
fn subject_matches(
    subject: &Value,
    req: &AccessRequest,
    binding_namespace: &str,
) -> Option<String> {
    let name = str_at(subject, &["name"]);
    match str_at(subject, &["kind"]) {
        "User" if name == req.user => Some(format!("User {name:?}")),
        "Group" if req.groups.iter().any(|g| g == name) => Some(format!("Group {name:?}")),
        "ServiceAccount" => {
            let ns = match str_at(subject, &["namespace"]) {
                "" => binding_namespace,
                ns => ns,
            };
            (req.user == format!("system:serviceaccount:{ns}:{name}"))
                .then(|| format!("ServiceAccount \"{name}/{ns}\""))
        }
        _ => None,
    }
}

fn strings<'a>(rule: &'a Value, key: &str) -> Vec<&'a str> {
    rule.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether one PolicyRule allows the request.
fn rule_allows(rule: &Value, req: &AccessRequest) -> bool {
    let verbs = strings(rule, "verbs");
    if !verbs.iter().any(|v| *v == "*" || *v == req.verb) {
        return false;
    }
    match &req.resource {
        Some(r) => {
            let groups = strings(rule, "apiGroups");
            if !groups.iter().any(|g| *g == "*" || *g == r.group) {
                return false;
            }
            let combined = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            let resources = strings(rule, "resources");
            let resource_ok = resources.iter().any(|res| {
                *res == "*"
                    || *res == combined
                    || (!r.subresource.is_empty()
                        && res.strip_prefix("*/") == Some(r.subresource.as_str()))
            });
            let names = strings(rule, "resourceNames");
            resource_ok && (names.is_empty() || names.iter().any(|n| *n == r.name))
        }
        None => strings(rule, "nonResourceURLs").iter().any(|u| {
            *u == "*"
                || *u == req.path
                || u.strip_suffix('*')
                    .is_some_and(|prefix| req.path.starts_with(prefix))
        }),
    }
}

/// A review object with its `status` (`allowed`, `denied` when nothing allowed it is
/// false as in kube: RBAC has no deny rules).
pub fn answered(mut review: Value, decision: &Decision) -> Value {
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = Value::String(decision.reason.clone());
    }
    review["status"] = status;
    review
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::semantics::StateConfig;

    fn state_with(objects: &[Value]) -> State {
        let mut state = State::new(
            1000,
            StateConfig {
                establish_immediately: true,
                pod_termination_cap: std::time::Duration::from_secs(1),
            },
        );
        for o in objects {
            let kind = o["kind"].as_str().expect("kind");
            let plural = match kind {
                "ClusterRole" => "clusterroles",
                "ClusterRoleBinding" => "clusterrolebindings",
                "Role" => "roles",
                _ => "rolebindings",
            };
            let ns = o["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let name = o["metadata"]["name"].as_str().expect("name").to_string();
            state
                .store
                .put(&(RBAC.into(), plural.into()), &(ns, name), o.clone());
        }
        state
    }

    fn request(user: &str, verb: &str, ns: &str, group: &str, resource: &str) -> AccessRequest {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        AccessRequest {
            user: user.into(),
            groups: vec!["system:authenticated".into()],
            verb: verb.into(),
            resource: Some(ResourceAttributes {
                namespace: ns.into(),
                group: group.into(),
                resource: resource.into(),
                subresource: subresource.into(),
                name: String::new(),
            }),
            path: String::new(),
        }
    }

    #[test]
    fn bindings_roles_and_rules_decide() {
        let sa = "system:serviceaccount:ops:op";
        let state = state_with(&[
            json!({"kind": "ClusterRole", "metadata": {"name": "reader"},
                   "rules": [{"apiGroups": ["kopf.dev"], "resources": ["kopfexamples"], "verbs": ["list", "watch"]},
                             {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["patch"]}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "op-reader"},
                   "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "reader"},
                   "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "ops"}]}),
            json!({"kind": "Role", "metadata": {"name": "cm", "namespace": "ops"},
                   "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"], "resourceNames": ["one"]}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "op-cm", "namespace": "ops"},
                   "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "cm"},
                   "subjects": [{"kind": "ServiceAccount", "name": "op"}]}),
        ]);
        let allowed = |r: &AccessRequest| state.decide_access(r).allowed;
        let list = request(sa, "list", "", "kopf.dev", "kopfexamples");
        assert_eq!(
            state.decide_access(&list).reason,
            "RBAC: allowed by ClusterRoleBinding \"op-reader\" of ClusterRole \"reader\" to ServiceAccount \"op/ops\""
        );
        assert!(!allowed(&request(
            sa,
            "patch",
            "",
            "kopf.dev",
            "kopfexamples"
        )));
        assert!(allowed(&request(
            sa,
            "patch",
            "x",
            "kopf.dev",
            "kopfexamples/status"
        )));
        assert!(!allowed(&request(
            "someone",
            "list",
            "",
            "kopf.dev",
            "kopfexamples"
        )));
        // The Role: its namespace only, its resource names only.
        let mut one = request(sa, "delete", "ops", "", "configmaps");
        assert!(!allowed(&one), "no name: not every configmap");
        one.resource.as_mut().expect("resource").name = "one".into();
        assert!(allowed(&one));
        one.resource.as_mut().expect("resource").namespace = "other".into();
        assert!(!allowed(&one));
        let mut master = request("x", "delete", "", "", "nodes");
        master.groups.push(SUPERUSER_GROUP.into());
        assert!(allowed(&master));
    }

    #[test]
    fn aggregated_cluster_roles_collect_their_parts() {
        let state = state_with(&[
            json!({"kind": "ClusterRole", "metadata": {"name": "all"},
                   "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]}}),
            json!({"kind": "ClusterRole", "metadata": {"name": "part", "labels": {"agg": "yes"}},
                   "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "b"},
                   "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "all"},
                   "subjects": [{"kind": "Group", "name": "devs"}]}),
        ]);
        let mut r = request("u", "get", "default", "", "pods");
        assert!(!state.decide_access(&r).allowed);
        r.groups.push("devs".into());
        assert!(state.decide_access(&r).allowed);
    }

    #[test]
    fn a_review_needs_one_kind_of_attributes_and_a_subject() {
        let err = AccessRequest::from_spec("SubjectAccessReview", "", &json!({}), false)
            .expect_err("invalid");
        let text = err.to_status().to_string();
        assert!(
            text.contains("exactly one of nonResourceAttributes or resourceAttributes"),
            "{text}"
        );
        assert!(text.contains("at least one of user or group"), "{text}");
        assert!(
            AccessRequest::from_spec(
                "SelfSubjectAccessReview",
                "",
                &json!({"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}),
                true
            )
            .is_ok()
        );
    }
}
