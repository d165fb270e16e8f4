//! The object store: one global resourceVersion counter, the current objects, and a
//! bounded history of changes that watches replay and consistent lists read from.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::broadcast;

/// The kind of a stored change, as watch events name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    /// The object was created.
    Added,
    /// The object was modified.
    Modified,
    /// The object was removed.
    Deleted,
}

impl ChangeType {
    /// The watch event type.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// Storage key of a resource: (group, plural).
pub type ResKey = (String, String);
/// Storage key of an object inside a resource: (namespace or "", name).
pub type ObjKey = (String, String);

/// One stored version of an object, kept as its JSON text: the history holds versions in
/// this compact form (no `Value` tree), and watchers send the text as it is when it is
/// also what their view presents (see [`Version::presented_as`]).
#[derive(Debug, Clone)]
pub struct Version {
    json: Bytes,
    presented_as: Option<u64>,
}

impl Version {
    /// The version of `obj` (serialised once); `presented_as` names the view (a
    /// fingerprint of a resource definition) whose presentation of `obj` is `obj` itself.
    pub fn new(obj: &Value, presented_as: Option<u64>) -> Self {
        // As kube-apiserver writes it (Go's member order for built-in kinds): the text is
        // sent as it is.
        let json = crate::apiserver::gojson::to_vec(obj);
        Version {
            json: Bytes::from(json),
            presented_as,
        }
    }

    /// The JSON text of the stored object (shared, not copied).
    pub fn json(&self) -> &Bytes {
        &self.json
    }

    /// The fingerprint of the view that presents this version as it is stored, if known.
    pub fn presented_as(&self) -> Option<u64> {
        self.presented_as
    }

    /// The object, parsed from its JSON text.
    pub fn value(&self) -> Value {
        Self::parse(&self.json)
    }

    /// Parses a stored JSON text (written from a `Value` by [`Version::new`]).
    pub fn parse(json: &[u8]) -> Value {
        match serde_json::from_slice(json) {
            Ok(v) => v,
            Err(e) => {
                // The text was written from a `Value` by `Version::new`.
                tracing::error!(error = %e, "a stored version is not valid JSON");
                Value::Null
            }
        }
    }
}

/// A stored object: its current version's JSON text (readers get a tree parsed from it;
/// most of them copy the object anyway), the tree itself only for the few objects that
/// requests of other resources read (see [`keeps_tree`]), and the owner uids the owner
/// index holds it under.
#[derive(Debug, Clone)]
struct Entry {
    version: Version,
    tree: Option<Arc<Value>>,
    owners: Vec<String>,
}

impl Entry {
    fn value(&self) -> Arc<Value> {
        match &self.tree {
            Some(tree) => tree.clone(),
            None => Arc::new(self.version.value()),
        }
    }
}

/// Whether the objects of a resource keep their parsed tree besides their text: CRDs and
/// namespaces, which requests of the resources they define or hold read over and over.
fn keeps_tree(res: &ResKey) -> bool {
    (res.0 == "apiextensions.k8s.io" && res.1 == "customresourcedefinitions")
        || (res.0.is_empty() && res.1 == "namespaces")
}

/// One change in the history.
#[derive(Debug)]
pub struct Change {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// Resource storage key.
    pub res: ResKey,
    /// Object key.
    pub key: ObjKey,
    /// What happened.
    pub kind: ChangeType,
    /// State after the change; for deletions the last state stamped with the deletion RV.
    pub object: Version,
    /// State before the change (None for additions).
    pub prev: Option<Version>,
}

/// The stored objects and their history.
pub struct Store {
    rv: u64,
    objects: BTreeMap<ResKey, BTreeMap<ObjKey, Entry>>,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// Every change with rv > compacted is in `history`.
    compacted: u64,
    tx: broadcast::Sender<Arc<Change>>,
    /// owner uid -> dependents.
    owners: HashMap<String, HashSet<(ResKey, ObjKey)>>,
}

/// Reads `metadata.resourceVersion` of an object as a number.
pub fn object_rv(obj: &Value) -> Option<u64> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

impl Store {
    /// An empty store starting at resourceVersion `start`.
    pub fn new(history_limit: usize, start: u64) -> Self {
        let (tx, _) = broadcast::channel(65536);
        Store {
            rv: start,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted: start,
            tx,
            owners: HashMap::new(),
        }
    }

    /// The current global resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// The oldest resourceVersion that can still be served from history.
    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    /// Subscribes to live changes.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.tx.subscribe()
    }

    /// Changes the number of retained history entries.
    pub fn set_history_limit(&mut self, limit: usize) {
        self.history_limit = limit.max(1);
        self.trim();
    }

    /// Forgets the history up to `upto` (default: everything), so older RVs get 410.
    pub fn compact(&mut self, upto: Option<u64>) {
        let upto = upto.unwrap_or(self.rv).min(self.rv);
        while let Some(front) = self.history.front() {
            if front.rv <= upto {
                self.history.pop_front();
            } else {
                break;
            }
        }
        self.compacted = self.compacted.max(upto);
    }

    fn trim(&mut self) {
        while self.history.len() > self.history_limit {
            if let Some(c) = self.history.pop_front() {
                self.compacted = c.rv;
            }
        }
    }

    /// The current version (JSON text) of the object under a key.
    pub fn get_version(&self, res: &ResKey, key: &ObjKey) -> Option<Version> {
        self.objects
            .get(res)
            .and_then(|m| m.get(key))
            .map(|e| e.version.clone())
    }

    /// Whether an object is stored under a key.
    pub fn contains(&self, res: &ResKey, key: &ObjKey) -> bool {
        self.objects.get(res).is_some_and(|m| m.contains_key(key))
    }

    /// The object under a key (parsed from its stored text).
    pub fn get(&self, res: &ResKey, key: &ObjKey) -> Option<Arc<Value>> {
        self.objects
            .get(res)
            .and_then(|m| m.get(key))
            .map(Entry::value)
    }

    /// All objects of a resource, in key order, optionally within one namespace.
    pub fn list(&self, res: &ResKey, namespace: Option<&str>) -> Vec<(ObjKey, Arc<Value>)> {
        // Now (no resourceVersion to go back to): always a page.
        self.list_page(res, namespace, None, None, None, false, |_| true)
            .map(|page| page.items)
            .unwrap_or_default()
    }

    /// Number of objects of one resource.
    pub fn count(&self, res: &ResKey) -> usize {
        self.objects.get(res).map_or(0, BTreeMap::len)
    }

    /// Total number of stored objects.
    pub fn total(&self) -> usize {
        self.objects.values().map(BTreeMap::len).sum()
    }

    /// The resources that have stored objects.
    pub fn resources(&self) -> Vec<ResKey> {
        self.objects
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// One page of a list, reading only what the page needs: the objects of a resource
    /// (optionally within one namespace) after the key `after`, in key order, as they were
    /// at `at` (now when `None`), that `keep` accepts, at most `limit` of them. An object
    /// is parsed from its stored text only when `keep` or the page needs it, so a page of
    /// 500 of 100,000 objects parses about 500, not 100,000; the state at `at` is the
    /// current objects overlaid with what the history says they were then. None when the
    /// history no longer reaches `at`. With `count_rest` (for a `keep` that accepts every
    /// object), the objects after the page are counted, unparsed, into `remaining`.
    #[allow(clippy::too_many_arguments)]
    pub fn list_page(
        &self,
        res: &ResKey,
        namespace: Option<&str>,
        at: Option<u64>,
        after: Option<&ObjKey>,
        limit: Option<usize>,
        count_rest: bool,
        mut keep: impl FnMut(&Value) -> bool,
    ) -> Option<Page> {
        let in_scope = |k: &ObjKey| namespace.is_none_or(|ns| k.0 == ns);
        // What each key changed since `at` was at `at`: the `prev` of its earliest later change.
        let mut then: BTreeMap<&ObjKey, Option<&Version>> = BTreeMap::new();
        if let Some(rv) = at {
            if rv < self.compacted {
                return None;
            }
            for change in self.history.iter().rev() {
                if change.rv <= rv {
                    break;
                }
                if &change.res == res && in_scope(&change.key) {
                    then.insert(&change.key, change.prev.as_ref());
                }
            }
        }
        let lower = match (after, namespace) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let now = self
            .objects
            .get(res)
            .into_iter()
            .flat_map(|m| m.range((lower.clone(), Bound::Unbounded)))
            .take_while(|(k, _)| in_scope(k))
            .map(|(k, e)| (k, Seen::Now(e)));
        let past = then
            .range::<ObjKey, _>((lower.as_ref(), Bound::Unbounded))
            .map(|(k, v)| (*k, v.map_or(Seen::Absent, Seen::Then)));
        let mut page = Page::default();
        let mut merged = merge_keyed(now, past);
        for (key, seen) in merged.by_ref() {
            let Some(obj) = seen.value() else { continue };
            if !keep(&obj) {
                continue;
            }
            if limit.is_some_and(|l| page.items.len() >= l) {
                page.next = page.items.last().map(|(k, _)| k.clone());
                page.remaining = 1;
                break;
            }
            page.items.push((key.clone(), obj));
        }
        if count_rest && page.next.is_some() {
            page.remaining += merged
                .filter(|(_, seen)| !matches!(seen, Seen::Absent))
                .count();
        }
        Some(page)
    }

    /// The retained changes after `rv` (for watch replay); None when history no longer reaches it.
    pub fn changes_since(&self, rv: u64) -> Option<Vec<Arc<Change>>> {
        if rv < self.compacted {
            return None;
        }
        let start = self.history.partition_point(|c| c.rv <= rv);
        Some(self.history.iter().skip(start).cloned().collect())
    }

    /// Dependents of an owner uid.
    pub fn dependents(&self, owner_uid: &str) -> Vec<(ResKey, ObjKey)> {
        let mut deps: Vec<_> = self
            .owners
            .get(owner_uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        deps.sort();
        deps
    }

    fn index_owners(&mut self, res: &ResKey, key: &ObjKey, old: &[String], new: &[String]) {
        if old == new {
            return;
        }
        {
            for uid in old {
                if let Some(set) = self.owners.get_mut(uid) {
                    set.remove(&(res.clone(), key.clone()));
                    if set.is_empty() {
                        self.owners.remove(uid);
                    }
                }
            }
        }
        {
            for uid in new {
                self.owners
                    .entry(uid.clone())
                    .or_default()
                    .insert((res.clone(), key.clone()));
            }
        }
    }

    /// The resourceVersion the next write gets.
    pub fn next_rv(&self) -> u64 {
        self.rv + 1
    }

    /// Stores a new or changed object with a fresh resourceVersion and records the change.
    /// Returns the stored object.
    pub fn put(&mut self, res: &ResKey, key: &ObjKey, obj: Value) -> Arc<Value> {
        self.put_presented(res, key, obj, None).0
    }

    /// [`Store::put`], telling which view (a fingerprint of a resource definition, see
    /// [`Version::presented_as`]) presents the stored object as it is. Returns the stored
    /// object and its version.
    pub fn put_presented(
        &mut self,
        res: &ResKey,
        key: &ObjKey,
        mut obj: Value,
        presented_as: Option<u64>,
    ) -> (Arc<Value>, Version) {
        self.rv += 1;
        let rv = self.rv;
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let version = Version::new(&obj, presented_as);
        let owners = owner_uids(&obj);
        let obj = Arc::new(obj);
        let map = self.objects.entry(res.clone()).or_default();
        let prev = map.insert(
            key.clone(),
            Entry {
                version: version.clone(),
                tree: keeps_tree(res).then(|| obj.clone()),
                owners: owners.clone(),
            },
        );
        let old_owners = prev.as_ref().map_or(&[][..], |e| &e.owners[..]);
        self.index_owners(res, key, old_owners, &owners);
        let kind = if prev.is_some() {
            ChangeType::Modified
        } else {
            ChangeType::Added
        };
        self.record(Change {
            rv,
            res: res.clone(),
            key: key.clone(),
            kind,
            object: version.clone(),
            prev: prev.map(|e| e.version),
        });
        (obj, version)
    }

    /// Removes an object; the DELETED change carries its last state stamped with the new RV.
    /// Returns that last state, or None if nothing was stored.
    pub fn remove(&mut self, res: &ResKey, key: &ObjKey) -> Option<Arc<Value>> {
        let prev = self.objects.get_mut(res)?.remove(key)?;
        self.rv += 1;
        let rv = self.rv;
        self.index_owners(res, key, &prev.owners, &[]);
        let mut last = Arc::unwrap_or_clone(prev.value());
        if let Some(meta) = last.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let last = Arc::new(last);
        self.record(Change {
            rv,
            res: res.clone(),
            key: key.clone(),
            kind: ChangeType::Deleted,
            // The resourceVersion aside (which no view changes), it is the previous version.
            object: Version::new(&last, prev.version.presented_as()),
            prev: Some(prev.version),
        });
        Some(last)
    }

    fn record(&mut self, change: Change) {
        let change = Arc::new(change);
        self.history.push_back(change.clone());
        self.trim();
        // No receivers is fine: nobody is watching.
        let _ = self.tx.send(change);
    }
}

/// One page of a list (see [`Store::list_page`]).
#[derive(Debug, Default)]
pub struct Page {
    /// The objects of the page, in key order.
    pub items: Vec<(ObjKey, Arc<Value>)>,
    /// The key to continue after, when an accepted object follows the page.
    pub next: Option<ObjKey>,
    /// How many objects follow the page: counted with `count_rest`, else 1 when one does.
    pub remaining: usize,
}

/// An object as a list page sees it: stored now, as the history says it was, or absent then.
enum Seen<'a> {
    Now(&'a Entry),
    Then(&'a Version),
    Absent,
}

impl Seen<'_> {
    fn value(&self) -> Option<Arc<Value>> {
        match self {
            Seen::Now(e) => Some(e.value()),
            Seen::Then(v) => Some(Arc::new(v.value())),
            Seen::Absent => None,
        }
    }
}

/// Two key-ordered sequences merged into one; on equal keys the second wins.
fn merge_keyed<'a>(
    first: impl Iterator<Item = (&'a ObjKey, Seen<'a>)>,
    second: impl Iterator<Item = (&'a ObjKey, Seen<'a>)>,
) -> impl Iterator<Item = (&'a ObjKey, Seen<'a>)> {
    let mut first = first.peekable();
    let mut second = second.peekable();
    std::iter::from_fn(move || {
        let order = match (first.peek(), second.peek()) {
            (None, None) => return None,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some((a, _)), Some((b, _))) => a.cmp(b),
        };
        match order {
            std::cmp::Ordering::Less => first.next(),
            std::cmp::Ordering::Greater => second.next(),
            std::cmp::Ordering::Equal => {
                first.next();
                second.next()
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn res() -> ResKey {
        (String::new(), "configmaps".into())
    }
    fn key(n: &str) -> ObjKey {
        ("default".into(), n.into())
    }
    fn cm(n: &str, v: &str) -> Value {
        json!({"metadata": {"name": n, "namespace": "default"}, "data": {"v": v}})
    }

    fn at(s: &Store, rv: u64) -> Option<Vec<(ObjKey, Arc<Value>)>> {
        s.list_page(&res(), None, Some(rv), None, None, false, |_| true)
            .map(|p| p.items)
    }

    #[test]
    fn a_list_at_a_resource_version_reconstructs_the_past_state() {
        let mut s = Store::new(100, 10);
        s.put(&res(), &key("a"), cm("a", "1")); // 11
        s.put(&res(), &key("b"), cm("b", "1")); // 12
        s.put(&res(), &key("a"), cm("a", "2")); // 13
        s.remove(&res(), &key("b")); // 14
        s.put(&res(), &key("c"), cm("c", "1")); // 15
        let at12 = at(&s, 12).unwrap();
        assert_eq!(at12.len(), 2);
        assert_eq!(at12[0].1["data"]["v"], "1");
        assert_eq!(at12[1].0, key("b"));
        let at11 = at(&s, 11).unwrap();
        assert_eq!(at11.len(), 1);
        assert_eq!(at(&s, 14).unwrap().len(), 1);
        assert_eq!(at(&s, 15).unwrap().len(), 2);
        assert!(at(&s, 9).is_none());
    }

    #[test]
    fn pages_continue_after_a_key_count_the_rest_and_parse_only_what_they_keep() {
        let mut s = Store::new(100, 0);
        for n in ["a", "b", "c", "d", "e"] {
            s.put(&res(), &key(n), cm(n, "1"));
        }
        let rv = s.rv();
        s.remove(&res(), &key("d"));
        s.put(&res(), &key("bb"), cm("bb", "1"));
        let page = s
            .list_page(
                &res(),
                None,
                Some(rv),
                Some(&key("a")),
                Some(2),
                true,
                |_| true,
            )
            .unwrap();
        let names: Vec<&str> = page.items.iter().map(|(k, _)| k.1.as_str()).collect();
        assert_eq!(names, ["b", "c"], "bb came after rv, d was still there");
        assert_eq!(page.next, Some(key("c")));
        assert_eq!(page.remaining, 2, "d and e");
        let mut parsed = 0;
        let page = s
            .list_page(&res(), Some("default"), None, None, Some(1), false, |_| {
                parsed += 1;
                true
            })
            .unwrap();
        assert_eq!((page.items.len(), page.remaining, parsed), (1, 1, 2));
        let other = s
            .list_page(&res(), Some("other"), None, None, None, true, |_| true)
            .unwrap();
        assert!(other.items.is_empty() && other.next.is_none());
    }

    #[test]
    fn history_limit_compacts() {
        let mut s = Store::new(2, 0);
        for i in 0..5 {
            s.put(&res(), &key(&format!("o{i}")), cm("x", "1"));
        }
        assert_eq!(s.compacted(), 3);
        assert!(s.changes_since(2).is_none());
        assert_eq!(s.changes_since(3).unwrap().len(), 2);
        s.compact(None);
        assert!(s.changes_since(4).is_none());
        assert_eq!(s.changes_since(5).unwrap().len(), 0);
    }

    #[test]
    fn deleted_change_carries_last_state_with_new_rv() {
        let mut s = Store::new(10, 0);
        s.put(&res(), &key("a"), cm("a", "1"));
        let last = s.remove(&res(), &key("a")).unwrap();
        assert_eq!(last["metadata"]["resourceVersion"], "2");
        assert_eq!(last["data"]["v"], "1");
        let changes = s.changes_since(1).unwrap();
        assert_eq!(changes[0].kind, ChangeType::Deleted);
    }

    #[test]
    fn objects_and_history_are_kept_as_their_json_text() {
        let mut s = Store::new(10, 0);
        let (stored, version) = s.put_presented(&res(), &key("a"), cm("a", "1"), Some(7));
        assert_eq!(stored["metadata"]["resourceVersion"], "1");
        assert_eq!(
            version.json().as_ref(),
            crate::apiserver::gojson::to_vec(&stored)
        );
        assert_eq!(version.presented_as(), Some(7));
        assert_eq!(s.get(&res(), &key("a")).as_deref(), Some(&*stored));
        assert!(s.contains(&res(), &key("a")) && !s.contains(&res(), &key("b")));
        s.put(&res(), &key("a"), cm("a", "2"));
        let changes = s.changes_since(1).expect("retained");
        let prev = changes[0]
            .prev
            .as_ref()
            .expect("a modification has a before");
        assert_eq!(prev.value(), *stored);
        assert_eq!(changes[0].object.presented_as(), None);
        assert_eq!(changes[0].object.value()["data"]["v"], "2");
    }

    #[test]
    fn owner_index_follows_writes() {
        let mut s = Store::new(10, 0);
        let mut child = cm("c", "1");
        child["metadata"]["ownerReferences"] = json!([{"uid": "u1"}]);
        s.put(&res(), &key("c"), child);
        assert_eq!(s.dependents("u1").len(), 1);
        s.put(&res(), &key("c"), cm("c", "2"));
        assert!(s.dependents("u1").is_empty());
    }
}
