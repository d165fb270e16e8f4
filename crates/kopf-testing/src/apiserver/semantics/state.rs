//! The API state: the store, the served resource definitions, and reading objects as a
//! resource presents them. The verbs are in the sibling modules.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::apiserver::catalog::{self, ResourceDef};
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::schema;
use crate::apiserver::storage::{ObjKey, ResKey, Store};

use super::events;
use super::options::{StateConfig, WriteOptions, WrittenBody};

const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// The whole API state.
pub struct State {
    /// Objects and history.
    pub store: Store,
    pub(super) builtins: Vec<ResourceDef>,
    pub(super) crds: BTreeMap<String, Vec<ResourceDef>>,
    /// Bumped whenever the set of served resources changes.
    pub catalog_generation: u64,
    /// CRDs waiting for a delayed Established.
    pub to_establish: Vec<String>,
    /// Terminating Pods the simulated kubelet removes after a delay.
    pub to_reap: Vec<(ResKey, ObjKey, std::time::Duration)>,
    pub(super) config: StateConfig,
    pub(super) ip_counter: u32,
}

impl State {
    /// A fresh state with the built-in resources and the initial namespaces.
    pub fn new(history_limit: usize, config: StateConfig) -> Self {
        let mut state = State {
            store: Store::new(history_limit, 0),
            builtins: catalog::builtins(),
            crds: BTreeMap::new(),
            catalog_generation: 1,
            to_establish: Vec::new(),
            to_reap: Vec::new(),
            config,
            ip_counter: 1,
        };
        for ns in INITIAL_NAMESPACES {
            let def = state.builtin_def("", "namespaces");
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            if let Some(def) = def
                && let Err(e) = state.create(&def, None, body, &WriteOptions::default())
            {
                tracing::error!(namespace = ns, error = %e, "cannot create an initial namespace");
            }
        }
        state.bootstrap();
        state
    }

    /// Updates the configuration.
    pub fn set_config(&mut self, config: StateConfig) {
        self.config = config;
    }

    fn builtin_def(&self, group: &str, plural: &str) -> Option<ResourceDef> {
        self.builtins
            .iter()
            .find(|d| d.group == group && d.plural == plural)
            .cloned()
    }

    /// Every served resource definition.
    pub fn defs(&self) -> Vec<&ResourceDef> {
        self.builtins
            .iter()
            .chain(self.crds.values().flatten())
            .collect()
    }

    /// Finds the served resource for group/version/plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<ResourceDef> {
        self.defs()
            .into_iter()
            .find(|d| d.group == group && d.version == version && d.plural == plural)
            .cloned()
    }

    /// The storage key of a resource (events.k8s.io events share core storage).
    pub fn res_key(def: &ResourceDef) -> ResKey {
        if def.group == "events.k8s.io" && def.plural == "events" {
            (String::new(), "events".into())
        } else {
            def.storage_key()
        }
    }

    /// A fingerprint of what [`State::present`] reads of a resource definition: two
    /// definitions with the same fingerprint present every object alike. Stored versions
    /// carry the fingerprint of a view that presents them as they are (watchers of that
    /// view send their stored JSON text without re-rendering it).
    pub fn view_fingerprint(def: &ResourceDef) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&def.group, &def.version, &def.plural, &def.kind).hash(&mut h);
        def.is_custom().hash(&mut h);
        match &def.schema {
            Some(schema) => {
                1u8.hash(&mut h);
                hash_value(schema, &mut h);
            }
            None => 0u8.hash(&mut h),
        }
        h.finish()
    }

    /// Renders a stored object for a resource view: sets apiVersion/kind, converts events.
    pub fn present(def: &ResourceDef, obj: &Value) -> Value {
        if def.group == "events.k8s.io" && def.plural == "events" {
            return events::to_events_v1(obj);
        }
        Self::present_owned(def, obj.clone())
    }

    /// [`State::present`] of an owned object (no copy of it).
    pub fn present_owned(def: &ResourceDef, mut o: Value) -> Value {
        if def.group == "events.k8s.io" && def.plural == "events" {
            return events::to_events_v1(&o);
        }
        if let Some(m) = o.as_object_mut() {
            m.insert("apiVersion".into(), Value::String(def.api_version()));
            m.insert("kind".into(), Value::String(def.kind.clone()));
        }
        if def.is_custom()
            && let Some(schema) = &def.schema
        {
            schema::prune_and_default(&mut o, schema);
        }
        o
    }

    /// Stores `obj` (as [`Store::put`]) and returns it as `def` presents it, telling the
    /// store when that presentation is the stored object itself (so that watchers of the
    /// same view send the stored JSON text as it is, and so does the response).
    pub(super) fn put_presenting(
        &mut self,
        def: &ResourceDef,
        res: &ResKey,
        key: &ObjKey,
        mut obj: Value,
    ) -> (Arc<Value>, WrittenBody) {
        // The resourceVersion the store stamps, stamped before presenting: the presentation
        // is the one of the stored object.
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert(
                "resourceVersion".into(),
                Value::String(self.store.next_rv().to_string()),
            );
        }
        let body = Self::present(def, &obj);
        if body == obj {
            drop(body);
            let fingerprint = Self::view_fingerprint(def);
            let (stored, version) = self.store.put_presented(res, key, obj, Some(fingerprint));
            let json = version.json().clone();
            (stored.clone(), WrittenBody::Stored(stored, json))
        } else {
            let (stored, _) = self.store.put_presented(res, key, obj, None);
            (stored, body.into())
        }
    }

    pub(super) fn key_of(def: &ResourceDef, namespace: Option<&str>, name: &str) -> ObjKey {
        let ns = if def.namespaced {
            namespace.unwrap_or("").to_string()
        } else {
            String::new()
        };
        (ns, name.to_string())
    }

    /// GET one object.
    pub fn get(&self, def: &ResourceDef, namespace: Option<&str>, name: &str) -> ApiResult<Value> {
        let key = Self::key_of(def, namespace, name);
        self.store
            .get(&Self::res_key(def), &key)
            .map(|o| Self::present(def, &o))
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))
    }

    /// The stored JSON text of an object when `def` presents it as it is stored (then it
    /// is the presented object's JSON, to send without parsing); None when the object is
    /// missing or presented otherwise.
    pub fn stored_json_as_presented(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<bytes::Bytes> {
        let key = Self::key_of(def, namespace, name);
        let version = self.store.get_version(&Self::res_key(def), &key)?;
        (version.presented_as() == Some(Self::view_fingerprint(def)))
            .then(|| version.json().clone())
    }

    /// The stored object, as stored (not presented).
    pub(crate) fn get_stored(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> ApiResult<Arc<Value>> {
        let key = Self::key_of(def, namespace, name);
        self.store
            .get(&Self::res_key(def), &key)
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))
    }
}

/// Feeds a JSON value into a hasher, structure included (so `["a", "b"]` and `["ab"]` differ).
fn hash_value(v: &Value, h: &mut impl std::hash::Hasher) {
    use std::hash::Hash;
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, b).hash(h),
        Value::Number(n) => (2u8, n.to_string()).hash(h),
        Value::String(s) => (3u8, s).hash(h),
        Value::Array(items) => {
            (4u8, items.len()).hash(h);
            for item in items {
                hash_value(item, h);
            }
        }
        Value::Object(map) => {
            (5u8, map.len()).hash(h);
            for (k, item) in map {
                k.hash(h);
                hash_value(item, h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::semantics::PatchType;

    #[test]
    fn stored_text_is_the_presented_object_after_each_write() {
        let config = StateConfig {
            establish_immediately: true,
            pod_termination_cap: std::time::Duration::from_secs(1),
        };
        let mut state = State::new(100, config);
        let Some(def) = state.find("", "v1", "configmaps") else {
            panic!("configmaps are built in");
        };
        let body =
            json!({"metadata": {"name": "c", "annotations": {"a": "é"}}, "data": {"k": "v"}});
        let created = state.create(&def, Some("default"), body, &WriteOptions::default());
        let created = created.expect("created");
        let json = state.stored_json_as_presented(&def, Some("default"), "c");
        let json = json.expect("a configmap is presented as stored");
        assert_eq!(created.body.stored_json(), Some(&json));
        let presented = state.get(&def, Some("default"), "c").expect("stored");
        assert_eq!(json.as_ref(), crate::apiserver::gojson::to_vec(&presented));
        let patch = br#"{"data": {"k": "w"}}"#;
        let opts = WriteOptions::default();
        let patched = state.patch(
            &def,
            Some("default"),
            "c",
            None,
            PatchType::Merge,
            patch,
            &opts,
        );
        let body = patched.expect("patched").body;
        let presented = state.get(&def, Some("default"), "c").expect("stored");
        assert_eq!(body.value(), &presented);
        let json = body.stored_json().expect("the stored text");
        assert_eq!(json.as_ref(), crate::apiserver::gojson::to_vec(&presented));
        // Another view of the same objects (events.k8s.io events vs core events) differs.
        let Some(events) = state.find("events.k8s.io", "v1", "events") else {
            panic!("events are built in");
        };
        assert_ne!(
            State::view_fingerprint(&def),
            State::view_fingerprint(&events)
        );
    }
}
