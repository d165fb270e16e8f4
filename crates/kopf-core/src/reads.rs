//! What a handler reads of an object ([`Reads`]), derived from its arguments, and the
//! trimming of the bodies the engine keeps to what its handlers read.
//!
//! Each extractor says what it reads ([`FromCause::reads`](crate::extract::FromCause::reads)):
//! `Name`, `Labels`, `Meta`, `Retry`... read nothing beyond the metadata; `Spec<T>` reads the
//! fields of `T` under `spec` (the names serde would look for, with renames and aliases), or
//! the whole `spec` when `T` is not a plain struct (`Value`, a map, an `Option`, a flattened
//! struct); `Body`, `Cause`, `Diff`, `Old`, `New` and extractors that do not say read the
//! whole object. A handler reads what its arguments read, unless it declares more precisely
//! with [`Options::reads`](crate::handler::Options::reads).
//!
//! `apiVersion`, `kind`, `metadata` and `status` are always kept: the framework's own state
//! (progress, results, the diff-base, finalizers, conditions) lives there.
//!
//! ```
//! use kopf_core::reads::Reads;
//! use serde::Deserialize;
//! use serde_json::json;
//!
//! #[derive(Deserialize)]
//! struct Spec { replicas: u32 }
//!
//! let reads = Reads::fields_of::<Spec>("spec");
//! assert_eq!(reads, Reads::field("spec.replicas"));
//! let body = json!({"metadata": {"name": "x"}, "spec": {"replicas": 3, "template": "..."}});
//! assert_eq!(
//!     reads.trim(&body),
//!     json!({"metadata": {"name": "x"}, "spec": {"replicas": 3}}),
//! );
//! ```

use std::collections::BTreeSet;

use serde::de::{self, DeserializeOwned, Visitor};
use serde_json::{Map, Value};

/// The top-level keys kept whatever the handlers read.
pub const ALWAYS_KEPT: [&str; 4] = ["apiVersion", "kind", "metadata", "status"];

/// What of an object a handler (or all of a resource's handlers) reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reads {
    /// The whole object; the text says what needs it (an argument's type, `Cause`...).
    Whole(String),
    /// These dotted paths, beside what is [always kept](ALWAYS_KEPT).
    Fields(BTreeSet<String>),
}

impl Reads {
    /// Nothing beyond what is always kept.
    pub fn nothing() -> Self {
        Reads::Fields(BTreeSet::new())
    }

    /// One dotted path (`spec.replicas`).
    pub fn field(path: &str) -> Self {
        Reads::Fields(BTreeSet::from([path.to_string()]))
    }

    /// The whole object, because of `why`.
    pub fn whole(why: impl Into<String>) -> Self {
        Reads::Whole(why.into())
    }

    /// The fields of `T` under `root` when `T` deserializes as a struct (its fields' names,
    /// aliases included), else the whole of `root`.
    pub fn fields_of<T: DeserializeOwned>(root: &str) -> Self {
        match struct_fields::<T>() {
            Some(fields) => Reads::Fields(fields.iter().map(|f| format!("{root}.{f}")).collect()),
            None => Reads::field(root),
        }
    }

    /// What both read (the first `Whole` wins).
    pub fn and(self, other: Reads) -> Reads {
        match (self, other) {
            (Reads::Whole(why), _) | (_, Reads::Whole(why)) => Reads::Whole(why),
            (Reads::Fields(mut a), Reads::Fields(b)) => {
                a.extend(b);
                Reads::Fields(a)
            }
        }
    }

    /// Whether it reads the whole object.
    pub fn is_whole(&self) -> bool {
        matches!(self, Reads::Whole(_))
    }

    /// The body with only what is read and what is always kept (a copy of it all for
    /// `Whole`). A path read but absent stays absent; a path inside another read path adds
    /// nothing.
    pub fn trim(&self, body: &Value) -> Value {
        let (Reads::Fields(paths), Value::Object(all)) = (self, body) else {
            return body.clone();
        };
        let mut out = Map::new();
        for key in ALWAYS_KEPT {
            if let Some(v) = all.get(key) {
                out.insert(key.to_string(), v.clone());
            }
        }
        for path in paths {
            let parts: Vec<&str> = path.split('.').collect();
            if ALWAYS_KEPT.contains(&parts[0]) {
                continue;
            }
            if let Some(v) = resolve(body, &parts) {
                place(&mut out, &parts, v.clone());
            }
        }
        Value::Object(out)
    }
}

/// What stands, in a trimmed body seen by [`Reads::with_unknowns`], for a value that was not
/// kept: equal to no value a patch can hold.
pub const NOT_KEPT: &str = "\u{0}kopf: not kept";

impl Reads {
    /// `body` (trimmed by these reads) with [`NOT_KEPT`] wherever `patch` writes outside
    /// what was kept: a patch compared with it (to send only what changes) keeps those parts,
    /// so that a daemon's patch that removes a field it did not read (`null`) is still sent.
    /// None when the patch writes only inside what was kept (compare with `body` itself).
    pub fn with_unknowns(&self, body: &Value, patch: &Value) -> Option<Value> {
        let Reads::Fields(paths) = self else {
            return None;
        };
        let mut unknown = Vec::new();
        outside(paths, patch, &mut Vec::new(), &mut unknown);
        if unknown.is_empty() {
            return None;
        }
        let Value::Object(mut out) = body.clone() else {
            return None;
        };
        for parts in unknown {
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            place(&mut out, &parts, Value::String(NOT_KEPT.into()));
        }
        Some(Value::Object(out))
    }
}

/// The paths of `patch` (under `at`) that are neither kept nor above something kept.
fn outside(
    paths: &BTreeSet<String>,
    patch: &Value,
    at: &mut Vec<String>,
    out: &mut Vec<Vec<String>>,
) {
    let Value::Object(map) = patch else {
        return;
    };
    for (key, value) in map {
        at.push(key.clone());
        let dotted = at.join(".");
        let kept = (at.len() == 1 && ALWAYS_KEPT.contains(&key.as_str()))
            || paths
                .iter()
                .any(|p| dotted == *p || dotted.starts_with(&format!("{p}.")));
        if !kept {
            let above = paths.iter().any(|p| p.starts_with(&format!("{dotted}.")));
            if above {
                outside(paths, value, at, out);
            } else {
                out.push(at.clone());
            }
        }
        at.pop();
    }
}

impl std::fmt::Display for Reads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reads::Whole(why) => write!(f, "the whole object ({why})"),
            Reads::Fields(paths) if paths.is_empty() => f.write_str("metadata and status"),
            Reads::Fields(paths) => {
                f.write_str("metadata, status and ")?;
                let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
                f.write_str(&paths.join(", "))
            }
        }
    }
}

fn resolve<'a>(body: &'a Value, parts: &[&str]) -> Option<&'a Value> {
    parts.iter().try_fold(body, |v, part| v.get(part))
}

/// Sets `value` at `parts` in `out`, making the objects on the way. The paths come sorted, so
/// a shorter path is placed before those under it, which then set what it holds already.
fn place(out: &mut Map<String, Value>, parts: &[&str], value: Value) {
    let Some((last, parents)) = parts.split_last() else {
        return;
    };
    let mut here = out;
    for part in parents {
        let next = here
            .entry(part.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        match next {
            Value::Object(map) => here = map,
            // Placed whole by a shorter path.
            _ => return,
        }
    }
    here.insert(last.to_string(), value);
}

/// The names serde looks for when `T` is a plain struct (renames and aliases applied), or
/// None. Found by asking `T` to deserialize itself from a probe that records the struct's
/// field list and then stops.
fn struct_fields<T: DeserializeOwned>() -> Option<&'static [&'static str]> {
    let mut fields = None;
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// A deserializer that only records the field list of the struct asked of it.
struct Probe<'a>(&'a mut Option<&'static [&'static str]>);

/// The probe's way to stop a deserialization.
#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("probed")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        Stop
    }
}

impl<'de> de::Deserializer<'de> for Probe<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Stop> {
        *self.0 = Some(fields);
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Typed {
        replica_count: u32,
        #[serde(alias = "img")]
        image: Option<String>,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Flattened {
        a: u32,
        #[serde(flatten)]
        rest: std::collections::BTreeMap<String, Value>,
    }

    #[test]
    fn a_struct_reads_its_fields_with_renames_and_aliases() {
        let Reads::Fields(paths) = Reads::fields_of::<Typed>("spec") else {
            panic!("fields expected");
        };
        for p in ["spec.replicaCount", "spec.image", "spec.img"] {
            assert!(paths.contains(p), "{p} in {paths:?}");
        }
    }

    #[test]
    fn anything_but_a_plain_struct_reads_the_whole_root() {
        assert_eq!(Reads::fields_of::<Value>("spec"), Reads::field("spec"));
        assert_eq!(
            Reads::fields_of::<Option<Typed>>("spec"),
            Reads::field("spec")
        );
        assert_eq!(Reads::fields_of::<Flattened>("spec"), Reads::field("spec"));
        assert_eq!(
            Reads::fields_of::<std::collections::HashMap<String, u32>>("spec"),
            Reads::field("spec")
        );
    }

    #[test]
    fn whole_wins_and_fields_add_up() {
        let both = Reads::field("spec.a").and(Reads::field("data"));
        assert_eq!(
            both,
            Reads::Fields(["spec.a".to_string(), "data".to_string()].into())
        );
        assert!(both.and(Reads::whole("Body")).is_whole());
        assert_eq!(
            Reads::nothing().and(Reads::whole("Cause")),
            Reads::whole("Cause")
        );
    }

    #[test]
    fn trimming_keeps_the_framework_state_and_what_is_read() {
        let body = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "annotations": {"kopf.zalando.org/last-handled-configuration": "{}"}},
            "status": {"kopf": {"progress": {}}, "h": {"ok": 1}},
            "spec": {"a": {"b": 1, "c": 2}, "big": "x".repeat(100)},
            "data": {"k": "v"},
        });
        let kept =
            Reads::Fields(["spec.a.b".to_string(), "spec.missing".to_string()].into()).trim(&body);
        assert_eq!(
            kept,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": body["metadata"], "status": body["status"],
                "spec": {"a": {"b": 1}},
            })
        );
        assert_eq!(Reads::whole("Body").trim(&body), body);
        // A read path inside another read path: the shorter one keeps it all.
        let nested = Reads::Fields(["spec.a".to_string(), "spec.a.b".to_string()].into());
        assert_eq!(nested.trim(&body)["spec"], json!({"a": {"b": 1, "c": 2}}));
        assert_eq!(
            Reads::nothing().trim(&body),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": body["metadata"], "status": body["status"]})
        );
    }

    #[test]
    fn a_patch_outside_what_was_kept_is_compared_with_placeholders() {
        let reads = Reads::field("spec.a");
        let body = json!({"metadata": {"name": "x"}, "spec": {"a": 1}});
        // Inside what is kept: compare with the body itself.
        let inside = json!({"spec": {"a": 2}, "status": {"t": {"x": null}}, "metadata": {"labels": {"l": null}}});
        assert_eq!(reads.with_unknowns(&body, &inside), None);
        let patch = json!({"spec": {"a": 2, "b": null, "c": {"d": 1}}, "data": null});
        let seen = reads.with_unknowns(&body, &patch).expect("placeholders");
        assert_eq!(
            seen,
            json!({"metadata": {"name": "x"}, "spec": {"a": 1, "b": NOT_KEPT, "c": NOT_KEPT}, "data": NOT_KEPT})
        );
        assert_eq!(Reads::whole("Body").with_unknowns(&body, &patch), None);
    }

    #[test]
    fn it_says_what_is_kept() {
        assert_eq!(Reads::nothing().to_string(), "metadata and status");
        assert_eq!(
            Reads::field("spec.a").and(Reads::field("data")).to_string(),
            "metadata, status and data, spec.a"
        );
        assert_eq!(
            Reads::whole("kopf::Body").to_string(),
            "the whole object (kopf::Body)"
        );
    }
}
