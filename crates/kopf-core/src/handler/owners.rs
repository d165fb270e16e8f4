//! Owner filters: a handler that runs only for objects owned by an object of a given kind
//! (any owner, or the controller only), or whose owner reference passes a predicate; and
//! [`OwnerRef`], an owner reference as handlers read it.

use std::sync::Arc;

use serde_json::Value;

/// One of an object's `metadata.ownerReferences`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    /// The owner's `apiVersion` (`kopf.dev/v1`, `v1`).
    pub api_version: String,
    /// The owner's kind.
    pub kind: String,
    /// The owner's name.
    pub name: String,
    /// The owner's uid.
    pub uid: String,
    /// Whether this owner is the object's controller.
    pub controller: bool,
    /// The owner's namespace: the object's own (owners are in the same namespace, or
    /// cluster-scoped: then `None` is right, and the namespace given here is ignored by the
    /// API server).
    pub namespace: Option<String>,
}

impl OwnerRef {
    /// The owner references of an object, in their order.
    ///
    /// ```
    /// use kopf_core::handler::OwnerRef;
    /// let body = serde_json::json!({"metadata": {"namespace": "ns", "ownerReferences": [
    ///     {"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "name": "x", "uid": "u1", "controller": true},
    /// ]}});
    /// let owners = OwnerRef::all(&body);
    /// assert_eq!(owners[0].kind, "KopfExample");
    /// assert_eq!(owners[0].group(), "kopf.dev");
    /// assert_eq!(owners[0].namespace.as_deref(), Some("ns"));
    /// ```
    pub fn all(body: &Value) -> Vec<OwnerRef> {
        let namespace = body
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(String::from);
        let text = |r: &Value, key: &str| {
            r.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        body.pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| OwnerRef {
                api_version: text(r, "apiVersion"),
                kind: text(r, "kind"),
                name: text(r, "name"),
                uid: text(r, "uid"),
                controller: r.get("controller").and_then(Value::as_bool) == Some(true),
                namespace: namespace.clone(),
            })
            .collect()
    }

    /// The owner's API group ("" for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }
}

/// A predicate on one owner reference.
pub type OwnerPredicate = Arc<dyn Fn(&OwnerRef) -> bool + Send + Sync>;

/// A filter on an object's owners: it passes when some owner reference matches.
#[derive(Clone)]
pub struct OwnerFilter {
    /// The owner's kind, alone (`KopfExample`) or with its group (`kopf.dev/KopfExample`,
    /// `apps/ReplicaSet`; `/Pod` for the core group); `None`: any kind.
    pub kind: Option<String>,
    /// Only the reference marked `controller: true` counts.
    pub controller_only: bool,
    /// A predicate the reference must also pass.
    pub predicate: Option<OwnerPredicate>,
}

impl std::fmt::Debug for OwnerFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnerFilter")
            .field("kind", &self.kind)
            .field("controller_only", &self.controller_only)
            .field("predicate", &self.predicate.is_some())
            .finish()
    }
}

impl OwnerFilter {
    /// Owned by an object of `kind` (see [`kind`](#structfield.kind) for the forms).
    pub fn kind(kind: &str, controller_only: bool) -> Self {
        OwnerFilter {
            kind: Some(kind.to_string()),
            controller_only,
            predicate: None,
        }
    }

    /// Whether one reference matches.
    pub fn matches_ref(&self, owner: &OwnerRef) -> bool {
        let kind_ok = match self.kind.as_deref() {
            None => true,
            Some(wanted) => match wanted.rsplit_once('/') {
                Some((group, kind)) => owner.kind == kind && owner.group() == group,
                None => owner.kind == wanted,
            },
        };
        kind_ok
            && (!self.controller_only || owner.controller)
            && self.predicate.as_ref().is_none_or(|p| p(owner))
    }

    /// Whether some owner reference of the object matches.
    pub fn matches(&self, body: &Value) -> bool {
        OwnerRef::all(body).iter().any(|o| self.matches_ref(o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owned(refs: Value) -> Value {
        json!({"metadata": {"name": "child", "namespace": "ns", "ownerReferences": refs}})
    }

    #[test]
    fn kinds_groups_controllers_and_predicates() {
        let body = owned(json!([
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "1", "controller": true},
            {"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "name": "kex", "uid": "2"},
        ]));
        assert!(OwnerFilter::kind("ReplicaSet", true).matches(&body));
        assert!(OwnerFilter::kind("apps/ReplicaSet", false).matches(&body));
        assert!(!OwnerFilter::kind("other/ReplicaSet", false).matches(&body));
        assert!(OwnerFilter::kind("KopfExample", false).matches(&body));
        assert!(
            !OwnerFilter::kind("KopfExample", true).matches(&body),
            "co-owner, not controller"
        );
        assert!(!OwnerFilter::kind("Pod", false).matches(&body));
        let core = owned(json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "3"}]));
        assert!(OwnerFilter::kind("/Pod", false).matches(&core));
        let named = OwnerFilter {
            kind: None,
            controller_only: false,
            predicate: Some(Arc::new(|o: &OwnerRef| o.name.starts_with("ke"))),
        };
        assert!(named.matches(&body));
        assert!(!named.matches(&core));
        assert!(!named.matches(&json!({"metadata": {"name": "orphan"}})));
    }
}
