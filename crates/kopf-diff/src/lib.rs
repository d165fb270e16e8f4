#![warn(missing_docs)]
//! # kopf-diff
//!
//! Pure JSON functions of kopf-rs, with the semantics of Kopf 1.x:
//! [`diff`] and [`reduce`] (what changed, relative to a field), the diff-base
//! [`essence`](essence::essence) that Kopf stores on objects and its byte-exact
//! [`encode`](essence::encode), and RFC 7386 merge patches ([`merge_patch`],
//! [`apply_merge_patch`]). No Kubernetes client, no I/O.
//!
//! ```
//! use kopf_diff::{apply_merge_patch, diff, merge_patch, reduce, Op};
//! use serde_json::json;
//!
//! let old = json!({"spec": {"replicas": 1, "image": "a"}});
//! let new = json!({"spec": {"replicas": 2, "image": "a", "paused": true}});
//! let d = diff(Some(&old), Some(&new));
//! assert_eq!(d.items()[0].op, Op::Add);                      // spec.paused
//! assert_eq!(reduce(&d, &["spec", "replicas"]).items()[0].op, Op::Change);
//!
//! let mut patched = old.clone();
//! apply_merge_patch(&mut patched, &merge_patch(&old, &new));
//! assert_eq!(patched, new);
//! ```

mod diff;
pub mod essence;
mod merge;

pub use diff::{Diff, DiffItem, Op, diff, reduce, resolve};
pub use merge::{apply_merge_patch, is_noop, merge_patch};

#[cfg(test)]
mod laws {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<bool>().prop_map(Value::from),
            (-3i64..3).prop_map(Value::from),
            "[a-c]{0,2}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                proptest::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_object() -> impl Strategy<Value = Value> {
        proptest::collection::btree_map("[a-d]", arb_json(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>()))
    }

    /// Applies diff items to a value: the inverse of `diff`.
    fn apply_diff(base: &Value, d: &Diff) -> Value {
        let mut out = base.clone();
        for item in d.items() {
            match (&item.new, item.path.split_last()) {
                (Some(v), None) => out = v.clone(),
                (None, None) => out = Value::Null,
                (new, Some((last, parents))) => {
                    let mut cur = &mut out;
                    for k in parents {
                        cur = cur
                            .as_object_mut()
                            .and_then(|m| m.get_mut(k))
                            .expect("parent exists");
                    }
                    let m = cur.as_object_mut().expect("parent is a mapping");
                    match new {
                        Some(v) => m.insert(last.clone(), v.clone()),
                        None => m.remove(last),
                    };
                }
            }
        }
        out
    }

    proptest! {
        #[test]
        fn diff_is_empty_exactly_for_equal_values(a in arb_object(), b in arb_object()) {
            prop_assert_eq!(diff(Some(&a), Some(&b)).is_empty(), a == b);
        }

        #[test]
        fn applying_the_diff_gives_the_new_value(a in arb_object(), b in arb_object()) {
            prop_assert_eq!(apply_diff(&a, &diff(Some(&a), Some(&b))), b);
        }

        #[test]
        fn reduce_equals_the_diff_of_the_fields(a in arb_object(), b in arb_object(), path in proptest::collection::vec("[a-d]", 0..3)) {
            let reduced = reduce(&diff(Some(&a), Some(&b)), &path);
            let direct = diff(resolve(Some(&a), &path), resolve(Some(&b), &path));
            prop_assert_eq!(reduced, direct);
        }

        #[test]
        fn merge_patch_turns_from_into_to(a in arb_object(), b in arb_object()) {
            let mut patched = a.clone();
            apply_merge_patch(&mut patched, &merge_patch(&a, &b));
            prop_assert_eq!(patched, b);
        }

        #[test]
        fn merge_patch_of_equal_values_is_a_noop(a in arb_object()) {
            prop_assert!(is_noop(&merge_patch(&a, &a)));
        }

        #[test]
        fn essence_encoding_round_trips(spec in arb_object(), labels in proptest::collection::btree_map("[a-c]", "[a-c]{0,2}", 0..3)) {
            let body = serde_json::json!({"metadata": {"labels": labels}, "spec": spec});
            let e = essence::essence(&body, &essence::EssenceSettings::default());
            let decoded = essence::decode(&essence::encode(&e)).expect("decodes");
            prop_assert_eq!(&decoded, &e);
            // The essence of an essence (as a body) is itself: it is a fixed point.
            prop_assert_eq!(essence::essence(&e, &essence::EssenceSettings::default()), e);
        }
    }
}
