//! In-memory indexes (Kopf's `@kopf.index`): an index handler returns key/value pairs for
//! each object; the index holds, per key, the values of all objects that gave that key.
//! Every handler (of any kind, any resource) can read an index with the [`Index<K, V>`]
//! extractor; entries go when their object is deleted or stops matching the filters.
//!
//! ```
//! use kopf_core::index::{IndexTypes, Indexes};
//! use serde_json::json;
//!
//! let indexes = Indexes::default();
//! indexes.declare("by_owner", IndexTypes::of::<String, String>());
//! indexes.replace("by_owner", "uid-1", &json!([["alice", "kex-1"]]));
//! indexes.replace("by_owner", "uid-2", &json!([["alice", "kex-2"], ["bob", "kex-2"]]));
//! let index = indexes.find::<String, String>().expect("one index of these types");
//! assert_eq!(index.get(&"alice".to_string()), vec!["kex-1", "kex-2"]);
//! indexes.forget("uid-2");
//! assert_eq!(index.get(&"alice".to_string()), vec!["kex-1"]);
//! assert!(!index.contains_key(&"bob".to_string()));
//! ```

use std::any::TypeId;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::{Arc, RwLock};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The key and value types of an index (how [`Index<K, V>`] finds it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexTypes {
    key: TypeId,
    value: TypeId,
    key_name: &'static str,
    value_name: &'static str,
}

impl IndexTypes {
    /// The types `K` and `V`.
    pub fn of<K: 'static, V: 'static>() -> Self {
        IndexTypes {
            key: TypeId::of::<K>(),
            value: TypeId::of::<V>(),
            key_name: std::any::type_name::<K>(),
            value_name: std::any::type_name::<V>(),
        }
    }

    fn names(&self) -> String {
        format!("<{}, {}>", self.key_name, self.value_name)
    }
}

/// One index's entries: values per key (JSON text of the key), per object.
#[derive(Debug, Default)]
struct Store {
    by_key: HashMap<String, BTreeMap<String, Vec<Value>>>,
    by_object: HashMap<String, Vec<String>>,
}

impl Store {
    fn remove(&mut self, uid: &str) {
        for key in self.by_object.remove(uid).unwrap_or_default() {
            if let Some(objects) = self.by_key.get_mut(&key) {
                objects.remove(uid);
                if objects.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }
}

type Shared = Arc<RwLock<Store>>;

/// Reading an index failed: the handler asks for one that is not there (or is ambiguous).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// No index has these types.
    #[error(
        "the handler asks for Index{types}, but no index handler returns pairs of these types; register one with Operator::index(...)"
    )]
    Missing {
        /// The types asked for.
        types: String,
    },
    /// Several indexes have these types.
    #[error(
        "the handler asks for Index{types}, but the indexes {ids:?} all have these types; ask for the `Indexes` argument and pick one with .get::<K, V>(id)"
    )]
    Ambiguous {
        /// The types asked for.
        types: String,
        /// The indexes with these types.
        ids: Vec<String>,
    },
    /// The index exists with other types.
    #[error("the index '{id}' holds {has}, not {asked}")]
    WrongTypes {
        /// The index.
        id: String,
        /// Its types.
        has: String,
        /// The types asked for.
        asked: String,
    },
}

/// All indexes of an operator (an extractor argument, for picking one by id).
#[derive(Clone, Default)]
pub struct Indexes {
    inner: Arc<RwLock<BTreeMap<String, (IndexTypes, Shared)>>>,
}

impl std::fmt::Debug for Indexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let map = self.inner.read().unwrap_or_else(|e| e.into_inner());
        f.debug_list().entries(map.keys()).finish()
    }
}

/// Key/value pairs of an indexer's result: `[[key, value], ...]` as the typed indexers
/// return them, a JSON object (its keys as string keys), or any other value (under the key
/// `null`).
pub fn pairs_of(result: &Value) -> Vec<(Value, Value)> {
    match result {
        Value::Array(items)
            if items
                .iter()
                .all(|p| p.as_array().is_some_and(|p| p.len() == 2)) =>
        {
            items
                .iter()
                .filter_map(|p| Some((p.get(0)?.clone(), p.get(1)?.clone())))
                .collect()
        }
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| (Value::String(k.clone()), v.clone()))
            .collect(),
        other => vec![(Value::Null, other.clone())],
    }
}

impl Indexes {
    /// Declares an index (before any entry goes in).
    pub fn declare(&self, id: &str, types: IndexTypes) {
        self.inner
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(id.to_string())
            .or_insert_with(|| (types, Shared::default()));
    }

    fn store(&self, id: &str) -> Option<Shared> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .map(|(_, s)| s.clone())
    }

    /// Replaces an object's entries in an index with the pairs of an indexer's result (see
    /// [`pairs_of`]).
    pub fn replace(&self, id: &str, uid: &str, result: &Value) {
        let Some(store) = self.store(id) else { return };
        let mut store = store.write().unwrap_or_else(|e| e.into_inner());
        store.remove(uid);
        let mut keys = Vec::new();
        for (key, value) in pairs_of(result) {
            let key = key.to_string();
            store
                .by_key
                .entry(key.clone())
                .or_default()
                .entry(uid.to_string())
                .or_default()
                .push(value);
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        store.by_object.insert(uid.to_string(), keys);
    }

    /// Removes an object's entries from one index.
    pub fn remove(&self, id: &str, uid: &str) {
        if let Some(store) = self.store(id) {
            store.write().unwrap_or_else(|e| e.into_inner()).remove(uid);
        }
    }

    /// Removes an object's entries from every index.
    pub fn forget(&self, uid: &str) {
        let stores: Vec<Shared> = self
            .inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|(_, s)| s.clone())
            .collect();
        for store in stores {
            store.write().unwrap_or_else(|e| e.into_inner()).remove(uid);
        }
    }

    /// The index with this id, read as `K` → `V`.
    pub fn get<K: 'static, V: 'static>(&self, id: &str) -> Result<Index<K, V>, IndexError> {
        let asked = IndexTypes::of::<K, V>();
        let map = self.inner.read().unwrap_or_else(|e| e.into_inner());
        match map.get(id) {
            Some((types, store)) if types.key == asked.key && types.value == asked.value => {
                Ok(Index {
                    store: store.clone(),
                    _types: PhantomData,
                })
            }
            Some((types, _)) => Err(IndexError::WrongTypes {
                id: id.into(),
                has: types.names(),
                asked: asked.names(),
            }),
            None => Err(IndexError::Missing {
                types: asked.names(),
            }),
        }
    }

    /// The one index of types `K` → `V`.
    pub fn find<K: 'static, V: 'static>(&self) -> Result<Index<K, V>, IndexError> {
        let asked = IndexTypes::of::<K, V>();
        let map = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let found: Vec<(&String, &Shared)> = map
            .iter()
            .filter(|(_, (t, _))| t.key == asked.key && t.value == asked.value)
            .map(|(id, (_, s))| (id, s))
            .collect();
        match found.as_slice() {
            [(_, store)] => Ok(Index {
                store: (*store).clone(),
                _types: PhantomData,
            }),
            [] => Err(IndexError::Missing {
                types: asked.names(),
            }),
            many => Err(IndexError::Ambiguous {
                types: asked.names(),
                ids: many.iter().map(|(id, _)| id.to_string()).collect(),
            }),
        }
    }
}

/// A live, read-only view of an index: per key, the values of all objects that gave it
/// (in no particular order; no deduplication).
pub struct Index<K, V> {
    store: Shared,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for Index<K, V> {
    fn clone(&self) -> Self {
        Index {
            store: self.store.clone(),
            _types: PhantomData,
        }
    }
}

impl<K, V> std::fmt::Debug for Index<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let store = self.store.read().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Index")
            .field("keys", &store.by_key.len())
            .finish()
    }
}

impl<K, V> Index<K, V>
where
    K: Serialize + DeserializeOwned + Eq + Hash,
    V: DeserializeOwned,
{
    fn text(key: &K) -> String {
        serde_json::to_value(key)
            .map(|v| v.to_string())
            .unwrap_or_default()
    }

    /// The values under a key (empty when none).
    pub fn get(&self, key: &K) -> Vec<V> {
        let store = self.store.read().unwrap_or_else(|e| e.into_inner());
        store
            .by_key
            .get(&Self::text(key))
            .into_iter()
            .flat_map(|objects| objects.values().flatten())
            .filter_map(|v| serde_json::from_value(v.clone()).ok())
            .collect()
    }

    /// Whether some object gave this key.
    pub fn contains_key(&self, key: &K) -> bool {
        let store = self.store.read().unwrap_or_else(|e| e.into_inner());
        store.by_key.contains_key(&Self::text(key))
    }

    /// The keys.
    pub fn keys(&self) -> Vec<K> {
        let store = self.store.read().unwrap_or_else(|e| e.into_inner());
        store
            .by_key
            .keys()
            .filter_map(|k| serde_json::from_str(k).ok())
            .collect()
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.store
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_key
            .len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the whole index.
    pub fn to_map(&self) -> HashMap<K, Vec<V>> {
        self.keys()
            .into_iter()
            .map(|k| {
                let values = self.get(&k);
                (k, values)
            })
            .collect()
    }
}

/// What typed index handlers return: key/value pairs (None keeps the object's previous
/// entries). Implemented for maps, vectors of pairs, a single pair, and `Option`s of them.
pub trait IndexOutput {
    /// The key type.
    type Key: Serialize + Send + 'static;
    /// The value type.
    type Value: Serialize + Send + 'static;
    /// The pairs (None: keep the previous entries).
    fn into_pairs(self) -> Option<Vec<(Self::Key, Self::Value)>>;
}

impl<K: Serialize + Send + 'static, V: Serialize + Send + 'static, S> IndexOutput
    for HashMap<K, V, S>
{
    type Key = K;
    type Value = V;
    fn into_pairs(self) -> Option<Vec<(K, V)>> {
        Some(self.into_iter().collect())
    }
}

impl<K: Serialize + Send + 'static, V: Serialize + Send + 'static> IndexOutput for BTreeMap<K, V> {
    type Key = K;
    type Value = V;
    fn into_pairs(self) -> Option<Vec<(K, V)>> {
        Some(self.into_iter().collect())
    }
}

impl<K: Serialize + Send + 'static, V: Serialize + Send + 'static> IndexOutput for Vec<(K, V)> {
    type Key = K;
    type Value = V;
    fn into_pairs(self) -> Option<Vec<(K, V)>> {
        Some(self)
    }
}

impl<K: Serialize + Send + 'static, V: Serialize + Send + 'static> IndexOutput for (K, V) {
    type Key = K;
    type Value = V;
    fn into_pairs(self) -> Option<Vec<(K, V)>> {
        Some(vec![self])
    }
}

impl<O: IndexOutput> IndexOutput for Option<O> {
    type Key = O::Key;
    type Value = O::Value;
    fn into_pairs(self) -> Option<Vec<(O::Key, O::Value)>> {
        self.and_then(IndexOutput::into_pairs)
    }
}

/// An indexer's pairs as the handler result (`[[k, v], ...]`, or null to keep the
/// previous entries).
#[derive(Debug)]
pub struct IndexPairs<K, V>(pub Option<Vec<(K, V)>>);

impl<K: Serialize, V: Serialize> Serialize for IndexPairs<K, V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn typed_views_find_their_index_and_see_changes() {
        let indexes = Indexes::default();
        indexes.declare("by_label", IndexTypes::of::<String, String>());
        indexes.declare("counts", IndexTypes::of::<String, u32>());
        let by_label = indexes.find::<String, String>().expect("one");
        assert!(by_label.is_empty());
        indexes.replace("by_label", "a", &json!({"gold": "kex-a"}));
        indexes.replace("by_label", "b", &json!([["gold", "kex-b"]]));
        let mut gold = by_label.get(&"gold".into());
        gold.sort();
        assert_eq!(gold, vec!["kex-a", "kex-b"]);
        // A new result replaces the object's entries.
        indexes.replace("by_label", "a", &json!([["silver", "kex-a"]]));
        assert_eq!(by_label.get(&"gold".into()), vec!["kex-b"]);
        assert_eq!(by_label.len(), 2);
        indexes.remove("by_label", "b");
        assert!(!by_label.contains_key(&"gold".into()));
        indexes.replace("counts", "a", &json!(7));
        let counts = indexes.get::<Option<String>, u32>("counts");
        assert!(matches!(counts, Err(IndexError::WrongTypes { .. })));
        assert!(matches!(
            indexes.find::<u8, u8>(),
            Err(IndexError::Missing { .. })
        ));
        indexes.declare("other", IndexTypes::of::<String, String>());
        let err = indexes
            .find::<String, String>()
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("by_label") && e.contains("other")),
            "{err:?}"
        );
    }

    #[test]
    fn typed_results_become_pairs() {
        let pairs = IndexPairs(Some(vec![(("ns", "name"), 1)]));
        let value = serde_json::to_value(&pairs).unwrap_or_default();
        assert_eq!(value, json!([[["ns", "name"], 1]]));
        assert_eq!(pairs_of(&value), vec![(json!(["ns", "name"]), json!(1))]);
        let none: IndexPairs<String, String> = IndexPairs(None);
        assert_eq!(serde_json::to_value(&none).ok(), Some(Value::Null));
        let mut map = BTreeMap::new();
        map.insert("k", 1);
        assert_eq!(Some(map).into_pairs(), Some(vec![("k", 1)]));
    }
}
