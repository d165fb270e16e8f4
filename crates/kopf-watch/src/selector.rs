//! Resource selectors in every naming form Kopf accepts, resolved through discovery.
//!
//! Forms: `"kopfexamples"` (plural, singular, kind or short name), `"kopfexamples.kopf.dev"`,
//! `"kopfexamples.v1.kopf.dev"`, [`Selector::group_plural`], [`Selector::gvp`] (group,
//! version, plural; `""` is the core group), [`Selector::everything`] (all watchable
//! resources except core and events.k8s.io Events) and [`Selector::predicate`].
//! Without a version only a group's preferred version matches; a name matching a core and a
//! non-core resource picks the core one.

use std::sync::Arc;

use kube::core::ApiResource;
use serde_json::Value;

use crate::error::WatchError;
use crate::resource::ResourceRef;

/// One resource as discovery describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovered {
    /// Group, version, kind, plural.
    pub api_resource: ApiResource,
    /// Singular name.
    pub singular: String,
    /// Short names.
    pub short_names: Vec<String>,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Verbs.
    pub verbs: Vec<String>,
    /// Has a `/status` subresource.
    pub status_subresource: bool,
    /// The version is the group's preferred one.
    pub preferred: bool,
}

impl Discovered {
    /// Whether a verb is supported.
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    fn qualified(&self) -> String {
        let ar = &self.api_resource;
        if ar.group.is_empty() {
            format!("{}/{}", ar.plural, ar.version)
        } else {
            format!("{}.{}/{}", ar.plural, ar.group, ar.version)
        }
    }
}

type Predicate = Arc<dyn Fn(&Discovered) -> bool + Send + Sync>;

/// Which resources handlers are for.
#[derive(Clone)]
pub enum Selector {
    /// A name: plural, singular, kind, short name, `plural.group` or `plural.version.group`.
    Name(String),
    /// A group and a plural (the preferred version).
    GroupPlural(String, String),
    /// Group, version and plural.
    Gvp(String, String, String),
    /// Every watchable resource except Events.
    Everything,
    /// Resources a function accepts (preferred versions).
    Predicate(Predicate),
}

impl std::fmt::Debug for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selector::Name(n) => write!(f, "{n:?}"),
            Selector::GroupPlural(g, p) => write!(f, "({g:?}, {p:?})"),
            Selector::Gvp(g, v, p) => write!(f, "({g:?}, {v:?}, {p:?})"),
            Selector::Everything => f.write_str("EVERYTHING"),
            Selector::Predicate(_) => f.write_str("<predicate>"),
        }
    }
}

impl From<&str> for Selector {
    fn from(s: &str) -> Self {
        Selector::Name(s.to_string())
    }
}

impl From<String> for Selector {
    fn from(s: String) -> Self {
        Selector::Name(s)
    }
}

impl Selector {
    /// A group and a plural, e.g. `("kopf.dev", "kopfexamples")`; `""` is the core group.
    pub fn group_plural(group: &str, plural: &str) -> Self {
        Selector::GroupPlural(group.into(), plural.into())
    }

    /// Group, version and plural, e.g. `("kopf.dev", "v1", "kopfexamples")`, `("", "v1", "pods")`.
    pub fn gvp(group: &str, version: &str, plural: &str) -> Self {
        Selector::Gvp(group.into(), version.into(), plural.into())
    }

    /// The resource of a Rust type: a `#[derive(CustomResource)]` type of kube, a
    /// k8s-openapi type, anything that implements [`kube::Resource`] with static type
    /// information (its group, version and plural). A misspelt resource is then a compile
    /// error rather than an error at start-up.
    ///
    /// ```
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kopf_watch::Selector;
    ///
    /// let selector = Selector::of::<ConfigMap>();
    /// assert_eq!(format!("{selector:?}"), r#"("", "v1", "configmaps")"#);
    /// ```
    pub fn of<K: kube::Resource<DynamicType = ()>>() -> Self {
        Selector::Gvp(
            K::group(&()).into_owned(),
            K::version(&()).into_owned(),
            K::plural(&()).into_owned(),
        )
    }

    /// Every watchable resource except core and events.k8s.io Events.
    pub fn everything() -> Self {
        Selector::Everything
    }

    /// Resources accepted by a function.
    pub fn predicate(f: impl Fn(&Discovered) -> bool + Send + Sync + 'static) -> Self {
        Selector::Predicate(Arc::new(f))
    }

    /// Whether this selector names one specific resource (ambiguity is an error then), as
    /// opposed to `everything` and predicates, which match whatever is served.
    pub fn is_specific(&self) -> bool {
        !matches!(self, Selector::Everything | Selector::Predicate(_))
    }

    fn matches(&self, d: &Discovered) -> bool {
        let ar = &d.api_resource;
        match self {
            Selector::Name(name) => {
                let full = format!("{}.{}", ar.plural, ar.group);
                let versioned = format!("{}.{}.{}", ar.plural, ar.version, ar.group);
                if *name == versioned {
                    return true;
                }
                d.preferred
                    && (*name == full
                        || *name == ar.plural
                        || *name == d.singular
                        || name.eq_ignore_ascii_case(&ar.kind)
                        || d.short_names.iter().any(|s| s == name))
            }
            Selector::GroupPlural(g, p) => d.preferred && ar.group == *g && ar.plural == *p,
            Selector::Gvp(g, v, p) => ar.group == *g && ar.version == *v && ar.plural == *p,
            Selector::Everything => {
                d.preferred
                    && !(ar.plural == "events"
                        && (ar.group.is_empty() || ar.group == "events.k8s.io"))
            }
            Selector::Predicate(f) => d.preferred && f(d),
        }
    }

    /// The served resources this selector names. A specific selector must name exactly one
    /// (a core resource wins over same-named others); all need `list`, `watch` and `patch`.
    pub fn resolve(&self, all: &[Discovered]) -> Result<Vec<Discovered>, WatchError> {
        let mut found: Vec<Discovered> = all
            .iter()
            .filter(|d| !d.api_resource.plural.contains('/') && self.matches(d))
            .cloned()
            .collect();
        if !self.is_specific() {
            found.retain(|d| ["list", "watch", "patch"].iter().all(|v| d.supports(v)));
            return Ok(found);
        }
        if found.len() > 1 && found.iter().any(|d| d.api_resource.group.is_empty()) {
            found.retain(|d| d.api_resource.group.is_empty());
        }
        match found.len() {
            0 => {
                let needle = match self {
                    Selector::Name(n) => n.split('.').next().unwrap_or("").to_string(),
                    Selector::GroupPlural(_, p) | Selector::Gvp(_, _, p) => p.clone(),
                    _ => String::new(),
                };
                let mut similar: Vec<String> = all
                    .iter()
                    .filter(|d| {
                        let p = &d.api_resource.plural;
                        !needle.is_empty()
                            && (p.contains(&needle)
                                || needle.contains(p.as_str())
                                || shares_prefix(p, &needle))
                    })
                    .map(Discovered::qualified)
                    .collect();
                similar.sort();
                similar.dedup();
                similar.truncate(5);
                let hint = if similar.is_empty() {
                    String::new()
                } else {
                    format!("; similar: {}", similar.join(", "))
                };
                Err(WatchError::UnknownResource {
                    selector: format!("{self:?}").trim_matches('"').to_string(),
                    hint,
                })
            }
            1 => {
                let d = &found[0];
                for verb in ["list", "watch", "patch"] {
                    if !d.supports(verb) {
                        return Err(WatchError::MissingVerb {
                            resource: d.qualified(),
                            verb: verb.into(),
                        });
                    }
                }
                Ok(found)
            }
            _ => Err(WatchError::Ambiguous {
                selector: format!("{self:?}").trim_matches('"').to_string(),
                choices: found
                    .iter()
                    .map(Discovered::qualified)
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}

impl From<Discovered> for ResourceRef {
    fn from(d: Discovered) -> Self {
        ResourceRef {
            namespaced: d.namespaced,
            status_subresource: d.status_subresource,
            api_resource: d.api_resource,
        }
    }
}

fn shares_prefix(a: &str, b: &str) -> bool {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count() >= 5
}

/// Reads an aggregated discovery document (`/api` or `/apis`) into resources.
pub fn from_aggregated(doc: &Value) -> Vec<Discovered> {
    let mut out = Vec::new();
    for group in array(doc, "items") {
        let name = group
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        for (i, version) in array(group, "versions").iter().enumerate() {
            let v = text(version, "version");
            out.extend(
                array(version, "resources")
                    .iter()
                    .map(|r| discovered(name, v, i == 0, r)),
            );
        }
    }
    out
}

/// One resource of an aggregated discovery document, in `group`'s `version`.
fn discovered(group: &str, version: &str, preferred: bool, r: &Value) -> Discovered {
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Discovered {
        api_resource: ApiResource {
            group: group.to_string(),
            version: version.to_string(),
            api_version,
            kind: r
                .pointer("/responseKind/kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            plural: text(r, "resource").to_string(),
        },
        singular: text(r, "singularResource").to_string(),
        short_names: strings(r, "shortNames"),
        namespaced: r.get("scope").and_then(Value::as_str) == Some("Namespaced"),
        verbs: strings(r, "verbs"),
        status_subresource: array(r, "subresources")
            .iter()
            .any(|s| s.get("subresource").and_then(Value::as_str) == Some("status")),
        preferred,
    }
}

/// The list under `key` (empty when there is none).
fn array<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The string under `key` (empty when there is none).
fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The strings of the list under `key`.
fn strings(v: &Value, key: &str) -> Vec<String> {
    array(v, key)
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resources() -> Vec<Discovered> {
        let apis = json!({"items": [
            {"metadata": {"name": "kopf.dev"}, "versions": [
                {"version": "v2", "resources": [{"resource": "kopfexamples", "responseKind": {"kind": "KopfExample"}, "singularResource": "kopfexample",
                    "shortNames": ["kex"], "scope": "Namespaced", "verbs": ["list", "watch", "patch", "get"],
                    "subresources": [{"subresource": "status"}]}]},
                {"version": "v1", "resources": [{"resource": "kopfexamples", "responseKind": {"kind": "KopfExample"}, "singularResource": "kopfexample",
                    "scope": "Namespaced", "verbs": ["list", "watch", "patch"]}]}]},
            {"metadata": {"name": "other.io"}, "versions": [{"version": "v1", "resources": [
                {"resource": "pods", "responseKind": {"kind": "Pod"}, "singularResource": "pod", "scope": "Namespaced", "verbs": ["list", "watch", "patch"]},
                {"resource": "readonly", "responseKind": {"kind": "ReadOnly"}, "singularResource": "readonly", "scope": "Cluster", "verbs": ["list", "watch"]}]}]},
            {"metadata": {"name": "events.k8s.io"}, "versions": [{"version": "v1", "resources": [
                {"resource": "events", "responseKind": {"kind": "Event"}, "singularResource": "event", "scope": "Namespaced", "verbs": ["list", "watch", "patch"]}]}]},
        ]});
        let core = json!({"items": [{"metadata": {}, "versions": [{"version": "v1", "resources": [
            {"resource": "pods", "responseKind": {"kind": "Pod"}, "singularResource": "pod", "shortNames": ["po"], "scope": "Namespaced", "verbs": ["list", "watch", "patch"]}]}]}]});
        let mut all = from_aggregated(&core);
        all.extend(from_aggregated(&apis));
        all
    }

    fn names(s: Selector) -> Result<Vec<String>, String> {
        s.resolve(&resources())
            .map(|v| v.iter().map(Discovered::qualified).collect())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_naming_form() {
        let kex = Ok(vec!["kopfexamples.kopf.dev/v2".to_string()]);
        for name in [
            "kopfexamples",
            "kopfexample",
            "KopfExample",
            "kex",
            "kopfexamples.kopf.dev",
        ] {
            assert_eq!(names(name.into()), kex, "{name}");
        }
        assert_eq!(
            names("kopfexamples.v1.kopf.dev".into()),
            Ok(vec!["kopfexamples.kopf.dev/v1".to_string()])
        );
        assert_eq!(
            names(Selector::group_plural("kopf.dev", "kopfexamples")),
            kex
        );
        assert_eq!(
            names(Selector::gvp("kopf.dev", "v1", "kopfexamples")),
            Ok(vec!["kopfexamples.kopf.dev/v1".to_string()])
        );
        assert_eq!(
            names(Selector::gvp("", "v1", "pods")),
            Ok(vec!["pods/v1".to_string()])
        );
        assert_eq!(
            names("pods".into()),
            Ok(vec!["pods/v1".to_string()]),
            "core wins"
        );
        assert_eq!(names("po".into()), Ok(vec!["pods/v1".to_string()]));
        let everything = names(Selector::everything()).unwrap_or_default();
        assert!(everything.contains(&"kopfexamples.kopf.dev/v2".to_string()));
        assert!(
            !everything.iter().any(|n| n.starts_with("events")),
            "{everything:?}"
        );
        assert!(
            !everything.iter().any(|n| n.starts_with("readonly")),
            "needs patch"
        );
        let clustered = names(Selector::predicate(|d| !d.namespaced)).unwrap_or_default();
        assert!(clustered.is_empty(), "readonly lacks patch: {clustered:?}");
    }

    #[test]
    fn errors_name_the_selector_and_the_choices() {
        let unknown = names("kopfexampel".into()).expect_err("unknown");
        assert!(
            unknown.contains("\"kopfexampel\"")
                && unknown.contains("similar: kopfexamples.kopf.dev"),
            "{unknown}"
        );
        let verb = names("readonly".into()).expect_err("missing verb");
        assert!(verb.contains("\"patch\""), "{verb}");
    }
}
