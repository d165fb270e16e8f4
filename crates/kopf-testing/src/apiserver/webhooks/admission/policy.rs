//! Policy matching: the webhooks of the stored configurations whose rules, `matchPolicy`
//! and selectors match a request, and the CRD conversion a write goes through.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::selectors::LabelSelector;
use crate::apiserver::semantics::State;
use crate::apiserver::semantics::webhook_configs::{GROUP, strings};
use crate::apiserver::webhooks::conversion::CrdConversion;

/// An admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// One webhook of a stored configuration.
#[derive(Debug, Clone)]
pub(super) struct Webhook {
    pub(super) mutating: bool,
    pub(super) configuration: String,
    pub(super) name: String,
    pub(super) client_config: Value,
    pub(super) rules: Vec<Value>,
    pub(super) ignore_failures: bool,
    pub(super) exact: bool,
    pub(super) namespace_selector: Value,
    pub(super) object_selector: Value,
    pub(super) side_effects: String,
    pub(super) timeout: Duration,
    pub(super) review_versions: Vec<String>,
}

fn webhooks_of(config: &Value, mutating: bool) -> Vec<Webhook> {
    let configuration = config
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let list = config
        .get("webhooks")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    list.iter()
        .map(|w| {
            let s = |k: &str| w.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            Webhook {
                mutating,
                configuration: configuration.clone(),
                name: s("name"),
                client_config: w.get("clientConfig").cloned().unwrap_or(Value::Null),
                rules: w
                    .get("rules")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                ignore_failures: s("failurePolicy") == "Ignore",
                exact: s("matchPolicy") == "Exact",
                namespace_selector: w.get("namespaceSelector").cloned().unwrap_or(Value::Null),
                object_selector: w.get("objectSelector").cloned().unwrap_or(Value::Null),
                side_effects: s("sideEffects"),
                timeout: Duration::from_secs(
                    w.get("timeoutSeconds")
                        .and_then(Value::as_u64)
                        .unwrap_or(10)
                        .clamp(1, 30),
                ),
                review_versions: strings(w.get("admissionReviewVersions")),
            }
        })
        .collect()
}

/// kube-apiserver's `rules.Matcher`: operation, group, version, resource/subresource, scope.
fn rule_matches(rule: &Value, op: Operation, def: &ResourceDef, sub: &str) -> bool {
    let any_of =
        |key: &str, want: &str| strings(rule.get(key)).iter().any(|v| v == "*" || v == want);
    if !any_of("operations", op.as_str())
        || !any_of("apiGroups", &def.group)
        || !any_of("apiVersions", &def.version)
    {
        return false;
    }
    let resource = strings(rule.get("resources")).iter().any(|r| {
        let (res, rsub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        (res == "*" || res == def.plural) && (rsub == "*" || rsub == sub)
    });
    if !resource {
        return false;
    }
    match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "Cluster" => !def.namespaced,
        "Namespaced" => def.namespaced,
        _ => true,
    }
}

/// Webhook configurations are exempt from webhooks (so that a broken webhook can be fixed).
fn exempt(def: &ResourceDef) -> bool {
    def.group == GROUP
        && matches!(
            def.plural.as_str(),
            "validatingwebhookconfigurations" | "mutatingwebhookconfigurations"
        )
}

/// A webhook whose rules match a request, with the version it sees the object in.
#[derive(Debug, Clone)]
pub(super) struct Hook {
    pub(super) webhook: Webhook,
    pub(super) target: ResourceDef,
}

/// What a write must go through: the matching webhooks and the CRD's conversion.
pub(super) struct Plan {
    pub(super) mutating: Vec<Hook>,
    pub(super) validating: Vec<Hook>,
    pub(super) namespace_labels: Option<Map<String, Value>>,
    pub(super) conversion: Option<CrdConversion>,
}

impl Plan {
    pub(super) fn new(
        state: &State,
        def: &ResourceDef,
        sub: Option<&str>,
        op: Operation,
        namespace: Option<&str>,
    ) -> Plan {
        let mut mutating = Vec::new();
        let mut validating = Vec::new();
        let configs = |plural: &str| {
            state
                .store
                .list(&(GROUP.to_string(), plural.to_string()), None)
        };
        let has_configs = !exempt(def)
            && (state
                .store
                .count(&(GROUP.into(), "mutatingwebhookconfigurations".into()))
                > 0
                || state
                    .store
                    .count(&(GROUP.into(), "validatingwebhookconfigurations".into()))
                    > 0);
        if has_configs {
            let sub = sub.unwrap_or("");
            let equivalents: Vec<ResourceDef> = state
                .defs()
                .into_iter()
                .filter(|d| {
                    d.group == def.group
                        && d.plural == def.plural
                        && d.version != def.version
                        && d.crd == def.crd
                })
                .cloned()
                .collect();
            for (plural, is_mutating) in [
                ("mutatingwebhookconfigurations", true),
                ("validatingwebhookconfigurations", false),
            ] {
                for (_, config) in configs(plural) {
                    for webhook in webhooks_of(&config, is_mutating) {
                        let matches = |d: &ResourceDef| {
                            webhook.rules.iter().any(|r| rule_matches(r, op, d, sub))
                        };
                        let target = if matches(def) {
                            Some(def.clone())
                        } else if webhook.exact {
                            None
                        } else {
                            equivalents.iter().find(|d| matches(d)).cloned()
                        };
                        if let Some(target) = target {
                            let hook = Hook { webhook, target };
                            if is_mutating {
                                mutating.push(hook);
                            } else {
                                validating.push(hook);
                            }
                        }
                    }
                }
            }
        }
        let namespace_labels = match namespace {
            Some(ns) if def.namespaced && !(mutating.is_empty() && validating.is_empty()) => state
                .store
                .get(
                    &(String::new(), "namespaces".into()),
                    &(String::new(), ns.to_string()),
                )
                .and_then(|n| {
                    n.pointer("/metadata/labels")
                        .and_then(Value::as_object)
                        .cloned()
                }),
            _ => None,
        };
        Plan {
            mutating,
            validating,
            namespace_labels,
            conversion: CrdConversion::lookup(state, def),
        }
    }

    pub(super) fn has_hooks(&self) -> bool {
        !self.mutating.is_empty() || !self.validating.is_empty()
    }

    /// The CRD's conversion when it is by webhook.
    pub(super) fn webhook_conversion(&self) -> Option<&CrdConversion> {
        self.conversion.as_ref().filter(|c| c.uses_webhook())
    }

    /// Whether objects written through `def` are converted before they are stored.
    pub(super) fn converts_writes(&self, def: &ResourceDef) -> bool {
        self.webhook_conversion()
            .is_some_and(|c| c.storage_version != def.version)
    }
}

pub(super) fn labels(obj: Option<&Value>) -> Option<&Map<String, Value>> {
    obj.and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
}

pub(super) fn selector_matches(
    spec: &Value,
    labels: Option<&Map<String, Value>>,
    what: &str,
) -> bool {
    match LabelSelector::from_spec(spec) {
        Ok(sel) => sel.matches(labels),
        Err(e) => {
            tracing::warn!(error = %e, "a webhook's {what} cannot be parsed: the webhook is skipped");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn def(group: &str, version: &str, plural: &str, namespaced: bool) -> ResourceDef {
        crate::apiserver::catalog::builtins()
            .into_iter()
            .next()
            .map(|mut d| {
                d.group = group.into();
                d.version = version.into();
                d.plural = plural.into();
                d.namespaced = namespaced;
                d
            })
            .expect("a builtin")
    }

    #[test]
    fn rules() {
        let pods = def("", "v1", "pods", true);
        let rule = |res: &str| json!({"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": [res]});
        assert!(rule_matches(&rule("pods"), Operation::Create, &pods, ""));
        assert!(!rule_matches(
            &rule("pods"),
            Operation::Create,
            &pods,
            "status"
        ));
        assert!(!rule_matches(&rule("pods"), Operation::Update, &pods, ""));
        assert!(rule_matches(&rule("*"), Operation::Create, &pods, ""));
        assert!(!rule_matches(
            &rule("*"),
            Operation::Create,
            &pods,
            "status"
        ));
        assert!(rule_matches(
            &rule("*/*"),
            Operation::Create,
            &pods,
            "status"
        ));
        assert!(rule_matches(
            &rule("pods/*"),
            Operation::Create,
            &pods,
            "status"
        ));
        assert!(rule_matches(&rule("pods/*"), Operation::Create, &pods, ""));
        assert!(rule_matches(
            &rule("pods/status"),
            Operation::Create,
            &pods,
            "status"
        ));
        assert!(rule_matches(
            &rule("*/status"),
            Operation::Create,
            &pods,
            "status"
        ));
        assert!(!rule_matches(
            &rule("configmaps"),
            Operation::Create,
            &pods,
            ""
        ));
        let mut scoped = rule("*");
        scoped["scope"] = json!("Cluster");
        assert!(!rule_matches(&scoped, Operation::Create, &pods, ""));
        scoped["scope"] = json!("Namespaced");
        assert!(rule_matches(&scoped, Operation::Create, &pods, ""));
        let any = json!({"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]});
        assert!(rule_matches(&any, Operation::Delete, &pods, ""));
    }
}
