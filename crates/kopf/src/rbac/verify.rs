//! `<operator> rbac --verify`: every permission the operator needs (the rules `rbac` would
//! generate, resolved on the cluster) asked of the cluster itself with access reviews, as
//! a table of ✅ and ❌, and the missing rules as YAML to add.
//!
//! Whose permissions: the kubeconfig's own user (SelfSubjectAccessReview), or with `--as`
//! another user or a ServiceAccount (`system:serviceaccount:NAMESPACE:NAME`;
//! SubjectAccessReview, which the kubeconfig's user must be allowed to create).

use std::fmt;

use futures::StreamExt;
use kopf_watch::Discovered;
use serde_json::{Value, json};

use crate::cli;
use crate::error::Error;
use crate::operator::Operator;

/// Reviews in flight at once.
const CONCURRENT_REVIEWS: usize = 8;

/// One permission asked of the cluster, with its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The API group ("" for the core group).
    pub group: String,
    /// The resource's plural, with `/subresource` when there is one.
    pub resource: String,
    /// The verb.
    pub verb: String,
    /// The namespace ("" for cluster-wide).
    pub namespace: String,
    /// The cluster's answer.
    pub allowed: bool,
    /// What allowed it, as the cluster says (may be empty).
    pub reason: String,
}

impl Check {
    fn resource_name(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            match self.resource.split_once('/') {
                Some((plural, sub)) => format!("{plural}.{}/{sub}", self.group),
                None => format!("{}.{}", self.resource, self.group),
            }
        }
    }
}

/// What `rbac --verify` found: whose permissions, and each check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbacReport {
    /// Whose permissions were checked, in words.
    pub subject: String,
    /// Every check, in the order of the rules.
    pub checks: Vec<Check>,
}

impl RbacReport {
    /// The checks the cluster refused.
    pub fn missing(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.allowed)
    }

    /// The rules that would grant what is missing: one per API group and resource, with
    /// the missing verbs (as a ClusterRole's `rules`).
    pub fn missing_rules(&self) -> Vec<Value> {
        let mut grouped: Vec<(&str, &str, Vec<&str>)> = Vec::new();
        for c in self.missing() {
            match grouped
                .iter_mut()
                .find(|(g, r, _)| *g == c.group && *r == c.resource)
            {
                Some((_, _, verbs)) => {
                    if !verbs.contains(&c.verb.as_str()) {
                        verbs.push(&c.verb);
                    }
                }
                None => grouped.push((&c.group, &c.resource, vec![&c.verb])),
            }
        }
        grouped
            .into_iter()
            .map(|(g, r, verbs)| json!({"apiGroups": [g], "resources": [r], "verbs": verbs}))
            .collect()
    }

    /// `Ok` when nothing is missing; else an [`Error::RbacMissing`] (the command's exit
    /// status is then non-zero).
    pub fn result(&self) -> Result<(), Error> {
        match self.missing().count() {
            0 => Ok(()),
            missing => Err(Error::RbacMissing {
                subject: self.subject.clone(),
                missing,
                total: self.checks.len(),
            }),
        }
    }
}

impl fmt::Display for RbacReport {
    /// The table (resource, verb, namespace when any check has one, ✅/❌), then the
    /// missing rules as YAML.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.checks.len();
        writeln!(f, "# RBAC of {}: {total} permissions checked", self.subject)?;
        let with_ns = self.checks.iter().any(|c| !c.namespace.is_empty());
        let width = self
            .checks
            .iter()
            .map(|c| c.resource_name().len())
            .chain(["RESOURCE".len()])
            .max()
            .unwrap_or(0);
        let ns_width = self
            .checks
            .iter()
            .map(|c| c.namespace.len().max(1))
            .chain(["NAMESPACE".len()])
            .max()
            .unwrap_or(0);
        let head = if with_ns {
            format!(
                "{:width$}  {:8}  {:ns_width$}  OK",
                "RESOURCE", "VERB", "NAMESPACE"
            )
        } else {
            format!("{:width$}  {:8}  OK", "RESOURCE", "VERB")
        };
        writeln!(f, "{head}")?;
        for c in &self.checks {
            let mark = if c.allowed { "✅" } else { "❌" };
            if with_ns {
                let ns = if c.namespace.is_empty() {
                    "*"
                } else {
                    &c.namespace
                };
                writeln!(
                    f,
                    "{:width$}  {:8}  {ns:ns_width$}  {mark}",
                    c.resource_name(),
                    c.verb
                )?;
            } else {
                writeln!(f, "{:width$}  {:8}  {mark}", c.resource_name(), c.verb)?;
            }
        }
        let missing = self.missing().count();
        if missing == 0 {
            return writeln!(f, "# All {total} present.");
        }
        writeln!(
            f,
            "# Missing: {missing} of {total}. The rules to add (to the operator's ClusterRole, or a Role in each namespace):"
        )?;
        let yaml = serde_saphyr::to_string(&self.missing_rules()).map_err(|_| fmt::Error)?;
        f.write_str(&yaml)
    }
}

/// Whose permissions: the user and groups of a SubjectAccessReview, or none (the
/// kubeconfig's own user, a SelfSubjectAccessReview).
fn subject(args: &cli::RbacArgs) -> Option<(String, Vec<String>)> {
    let user = args.as_user.clone()?;
    let mut groups = args.as_groups.clone();
    if groups.is_empty()
        && let Some((ns, _)) = user
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
    {
        // The groups every ServiceAccount is in.
        groups.push("system:serviceaccounts".into());
        groups.push(format!("system:serviceaccounts:{ns}"));
    }
    if !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".into());
    }
    Some((user, groups))
}

/// The checks of the rules, in their order, each once: cluster-wide, or for namespaced
/// resources in each of `namespaces` when some are given.
fn expand(rules: &[Value], all: &[Discovered], namespaces: &[String]) -> Vec<Check> {
    let strings = |rule: &Value, key: &str| -> Vec<String> {
        rule.get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut checks: Vec<Check> = Vec::new();
    for rule in rules {
        for group in strings(rule, "apiGroups") {
            for resource in strings(rule, "resources") {
                let plural = resource.split('/').next().unwrap_or_default();
                let namespaced = all.iter().any(|d| {
                    d.api_resource.group == group && d.api_resource.plural == plural && d.namespaced
                });
                let scopes: Vec<String> = if namespaced && !namespaces.is_empty() {
                    namespaces.to_vec()
                } else {
                    vec![String::new()]
                };
                for verb in strings(rule, "verbs") {
                    for namespace in &scopes {
                        let check = Check {
                            group: group.clone(),
                            resource: resource.clone(),
                            verb: verb.clone(),
                            namespace: namespace.clone(),
                            allowed: false,
                            reason: String::new(),
                        };
                        if !checks.contains(&check) {
                            checks.push(check);
                        }
                    }
                }
            }
        }
    }
    checks
}

/// One access review, answered.
async fn review(
    client: &kube::Client,
    who: Option<&(String, Vec<String>)>,
    mut check: Check,
) -> Result<Check, String> {
    let (resource, subresource) = check
        .resource
        .split_once('/')
        .unwrap_or((check.resource.as_str(), ""));
    let mut spec = json!({"resourceAttributes": {
        "namespace": check.namespace,
        "verb": check.verb,
        "group": check.group,
        "resource": resource,
        "subresource": subresource,
    }});
    let (kind, plural) = match who {
        Some((user, groups)) => {
            spec["user"] = json!(user);
            spec["groups"] = json!(groups);
            ("SubjectAccessReview", "subjectaccessreviews")
        }
        None => ("SelfSubjectAccessReview", "selfsubjectaccessreviews"),
    };
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": kind, "spec": spec});
    let bytes = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
    let request = http::Request::post(format!("/apis/authorization.k8s.io/v1/{plural}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(bytes)
        .map_err(|e| e.to_string())?;
    let answer: Value = client
        .request(request)
        .await
        .map_err(|e| format!("a {kind} for {} {}: {e}", check.verb, check.resource_name()))?;
    check.allowed = answer
        .pointer("/status/allowed")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    check.reason = answer
        .pointer("/status/reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    Ok(check)
}

impl Operator {
    /// `rbac --verify`: asks the cluster of the current kubeconfig, with an access review
    /// per resource and verb, whether the operator's user (or `args.as_user`) has every
    /// permission the [`rbac`](Self::rbac) rules grant. Print the report
    /// ([`Display`](fmt::Display)); [`RbacReport::result`] is the exit status.
    ///
    /// ```no_run
    /// # async fn f(operator: kopf::Operator) -> Result<(), kopf::Error> {
    /// use kopf::cli::{About, Cli};
    /// let args = ["op", "rbac", "--verify", "--as", "system:serviceaccount:ops:my-operator"];
    /// let cli = Cli::try_parse_for(&About::default(), args).unwrap_or_else(|e| e.exit());
    /// let kopf::cli::Command::Rbac(args) = cli.command else { unreachable!() };
    /// let report = operator.verify_rbac(&args).await?;
    /// print!("{report}");
    /// report.result()
    /// # }
    /// ```
    pub async fn verify_rbac(&self, args: &cli::RbacArgs) -> Result<RbacReport, Error> {
        // One connection for the discovery and the reviews.
        let client = self.connect().await?;
        let (rules, all) = self.needed_rules(args, Some(&client)).await?;
        let who = subject(args);
        let subject_text = match &who {
            Some((user, _)) => user.clone(),
            None => "the kubeconfig's user".to_string(),
        };
        let checks = expand(&rules, &all, &args.namespaces);
        let answers: Vec<Result<Check, String>> = futures::stream::iter(checks)
            .map(|check| review(&client, who.as_ref(), check))
            .buffered(CONCURRENT_REVIEWS)
            .collect()
            .await;
        let checks = answers
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|cause| Error::RbacReview {
                subject: subject_text.clone(),
                cause,
            })?;
        Ok(RbacReport {
            subject: subject_text,
            checks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(group: &str, resource: &str, verb: &str, allowed: bool) -> Check {
        Check {
            group: group.into(),
            resource: resource.into(),
            verb: verb.into(),
            namespace: String::new(),
            allowed,
            reason: String::new(),
        }
    }

    #[test]
    fn the_report_groups_the_missing_verbs_into_rules() {
        let report = RbacReport {
            subject: "system:serviceaccount:ops:op".into(),
            checks: vec![
                check("kopf.dev", "kopfexamples", "list", true),
                check("kopf.dev", "kopfexamples", "patch", false),
                check("kopf.dev", "kopfexamples/status", "patch", false),
                check("", "events", "create", false),
                check("", "events", "patch", false),
            ],
        };
        assert_eq!(
            report.missing_rules(),
            vec![
                json!({"apiGroups": ["kopf.dev"], "resources": ["kopfexamples"], "verbs": ["patch"]}),
                json!({"apiGroups": ["kopf.dev"], "resources": ["kopfexamples/status"], "verbs": ["patch"]}),
                json!({"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}),
            ]
        );
        let text = report.to_string();
        assert!(
            text.contains("kopfexamples.kopf.dev/status  patch     ❌"),
            "{text}"
        );
        assert!(
            text.contains("kopfexamples.kopf.dev         list      ✅"),
            "{text}"
        );
        assert!(text.contains("# Missing: 4 of 5."), "{text}");
        let err = report.result().expect_err("missing");
        assert_eq!(
            err.to_string(),
            "4 of the 5 permissions the operator needs are missing for system:serviceaccount:ops:op: add the rules printed above"
        );
    }

    #[test]
    fn checks_are_each_asked_once_and_in_namespaces_when_given() {
        let rules = vec![
            json!({"apiGroups": [""], "resources": ["configmaps", "namespaces"], "verbs": ["list", "watch"]}),
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}),
        ];
        let discovered = |plural: &str, namespaced: bool| Discovered {
            api_resource: kube::core::ApiResource {
                group: String::new(),
                version: "v1".into(),
                api_version: "v1".into(),
                kind: "X".into(),
                plural: plural.into(),
            },
            singular: String::new(),
            short_names: vec![],
            namespaced,
            verbs: vec![],
            status_subresource: false,
            preferred: true,
        };
        let all = [
            discovered("configmaps", true),
            discovered("namespaces", false),
        ];
        assert_eq!(expand(&rules, &all, &[]).len(), 4);
        let scoped = expand(&rules, &all, &["a".into(), "b".into()]);
        let seen: Vec<(String, String, String)> = scoped
            .iter()
            .map(|c| (c.resource.clone(), c.verb.clone(), c.namespace.clone()))
            .collect();
        let expected: Vec<(String, String, String)> = [
            ("configmaps", "list", "a"),
            ("configmaps", "list", "b"),
            ("configmaps", "watch", "a"),
            ("configmaps", "watch", "b"),
            ("namespaces", "list", ""),
            ("namespaces", "watch", ""),
        ]
        .iter()
        .map(|(r, v, n)| (r.to_string(), v.to_string(), n.to_string()))
        .collect();
        assert_eq!(seen, expected);
    }
}
