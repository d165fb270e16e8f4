//! Objects read once: each object of a list or watch response is parsed straight into one
//! `serde_json::Value`, shared (never cloned) from the watch stream to the object's worker,
//! with the few metadata fields the watcher itself needs copied out of it.
//!
//! Reading into kube's `DynamicObject` and then converting it into a `Value` did the work
//! twice (its flattened fields are buffered by serde first), and every state then held two
//! trees for a while.

use std::borrow::Cow;
use std::sync::Arc;

use kube::core::{ApiResource, DynamicResourceScope, ObjectMeta, Resource};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// An object as the API server sent it, parsed once.
#[derive(Clone, Debug)]
pub(crate) struct RawObject {
    /// Name, namespace, uid and resourceVersion (what the watcher reads), copied.
    meta: ObjectMeta,
    /// The whole object.
    pub(crate) body: Arc<Value>,
}

impl RawObject {
    /// The object's body, without `metadata.managedFields` unless `keep_managed_fields`
    /// (server-side apply bookkeeping: often the larger part of an object, and of no use
    /// to handlers). Free when the body is not shared yet, as it is on arrival.
    pub(crate) fn into_body(self, keep_managed_fields: bool) -> Arc<Value> {
        let mut body = self.body;
        let has_managed = body
            .pointer("/metadata/managedFields")
            .is_some_and(|v| !v.is_null());
        if !keep_managed_fields
            && has_managed
            && let Some(meta) = Arc::make_mut(&mut body)
                .get_mut("metadata")
                .and_then(Value::as_object_mut)
        {
            meta.remove("managedFields");
        }
        body
    }

    /// The object's uid.
    pub(crate) fn uid(&self) -> Option<&str> {
        self.meta.uid.as_deref()
    }

    /// The object's resourceVersion, as a number (None when it is not one).
    pub(crate) fn rv(&self) -> Option<u64> {
        self.meta.resource_version.as_deref()?.parse().ok()
    }

    /// The object's namespace.
    pub(crate) fn namespace(&self) -> Option<&str> {
        self.meta.namespace.as_deref()
    }
}

impl RawObject {
    /// An object of this body.
    pub(crate) fn from_body(body: Value) -> Self {
        let field = |key: &str| {
            body.get("metadata")
                .and_then(|m| m.get(key))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let meta = ObjectMeta {
            name: field("name"),
            namespace: field("namespace"),
            uid: field("uid"),
            resource_version: field("resourceVersion"),
            ..ObjectMeta::default()
        };
        RawObject {
            meta,
            body: Arc::new(body),
        }
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(RawObject::from_body)
    }
}

impl Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.kind)
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.group)
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.version)
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.api_version)
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        Cow::Borrowed(&dt.plural)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// A stream of watch events, as the engine reads them.
pub(crate) type EventStream = futures::stream::BoxStream<
    'static,
    Result<kube::runtime::watcher::Event<RawObject>, kube::runtime::watcher::Error>,
>;

/// An object of `ar` made of an object's metadata (no spec, no status).
pub(crate) fn metadata_object(
    m: kube::core::PartialObjectMeta<RawObject>,
    ar: &ApiResource,
) -> RawObject {
    RawObject::from_body(serde_json::json!({
        "apiVersion": ar.api_version,
        "kind": ar.kind,
        "metadata": m.metadata,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_read_once_with_their_metadata_and_without_managed_fields() {
        let text = r#"{"apiVersion":"kopf.dev/v1","kind":"KopfExample",
            "metadata":{"name":"a","namespace":"ns","uid":"u1","resourceVersion":"7",
                        "managedFields":[{"manager":"kubectl"}]},
            "spec":{"field":"x"}}"#;
        let raw: RawObject = serde_json::from_str(text).expect("an object");
        assert_eq!(raw.meta().name.as_deref(), Some("a"));
        assert_eq!(raw.namespace(), Some("ns"));
        assert_eq!(raw.uid(), Some("u1"));
        assert_eq!(raw.meta().resource_version.as_deref(), Some("7"));
        let kept = raw.clone().into_body(true);
        assert!(kept.pointer("/metadata/managedFields").is_some());
        let body = raw.into_body(false);
        assert!(body.pointer("/metadata/managedFields").is_none());
        assert_eq!(body.pointer("/spec/field"), Some(&Value::from("x")));
    }
}
