//! Shard selectors of lists and watches (KEP-5866, Kubernetes 1.36, feature gate
//! `ShardedListAndWatch`).
//!
//! `shardSelector=shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')`,
//! several ranges joined with `||`, selects the objects whose FNV-1a 64-bit hash of the
//! field's value falls in any of the half-open ranges `[start, end)`. The field is
//! `object.metadata.uid` or `object.metadata.namespace`, the same in every range. Bounds are
//! `0x` and 1–16 hex digits; an end may also be `0x10000000000000000` (2^64).

use serde_json::Value;

/// 2^64, the largest end of a range.
const FULL: u128 = 1 << 64;

/// The FNV-1a 64-bit offset basis.
const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// The FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The FNV-1a 64-bit hash of `bytes`, as shard selectors hash a field's value.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME)
    })
}

/// A shard selector that could not be parsed; the message names the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardSelectorError {
    /// The selector is empty (or only whitespace), or one of its `||` terms is.
    #[error("invalid shard selector: empty selector or empty term")]
    Empty,
    /// A term is not a call (`name(args)`).
    #[error("invalid shard selector {term:?}: expected shardRange(<field>, '<start>', '<end>')")]
    Syntax {
        /// The term as written.
        term: String,
    },
    /// A function other than `shardRange`.
    #[error("invalid shard selector: unknown function {0:?} (only shardRange is supported)")]
    UnknownFunction(String),
    /// `shardRange` with other than three arguments.
    #[error("invalid shard selector: shardRange takes 3 arguments (field, start, end), got {0}")]
    Arity(usize),
    /// A field other than `object.metadata.uid` or `object.metadata.namespace`.
    #[error(
        "invalid shard selector: unknown field {0:?} (supported: object.metadata.uid, object.metadata.namespace)"
    )]
    UnknownField(String),
    /// Ranges over different fields in one selector.
    #[error("invalid shard selector: all ranges must use the same field, got {first} and {other}")]
    MixedFields {
        /// The field of the first range.
        first: &'static str,
        /// The differing field.
        other: &'static str,
    },
    /// A bound that is not a quoted `0x` hex string of at most 16 digits (the end: or 2^64).
    #[error(
        "invalid shard selector: bad {which} bound {value}: expected a quoted hex string '0x' with 1 to 16 hex digits{}",
        if *which == "end" { " (or '0x10000000000000000')" } else { "" }
    )]
    BadHex {
        /// `start` or `end`.
        which: &'static str,
        /// The bound as written.
        value: String,
    },
    /// A range whose start is not below its end.
    #[error("invalid shard selector: range start {start} must be less than end {end}")]
    EmptyRange {
        /// The start as written.
        start: String,
        /// The end as written.
        end: String,
    },
}

/// The field a shard selector hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardField {
    /// `object.metadata.uid`.
    Uid,
    /// `object.metadata.namespace` (the empty string for cluster-scoped objects).
    Namespace,
}

impl ShardField {
    /// The field as written in a selector.
    pub fn as_str(self) -> &'static str {
        match self {
            ShardField::Uid => "object.metadata.uid",
            ShardField::Namespace => "object.metadata.namespace",
        }
    }

    fn parse(s: &str) -> Result<Self, ShardSelectorError> {
        match s {
            "object.metadata.uid" => Ok(ShardField::Uid),
            "object.metadata.namespace" => Ok(ShardField::Namespace),
            other => Err(ShardSelectorError::UnknownField(other.to_string())),
        }
    }

    /// The field's value of an object; absent counts as the empty string.
    fn value(self, obj: &Value) -> &str {
        let key = match self {
            ShardField::Uid => "uid",
            ShardField::Namespace => "namespace",
        };
        obj.get("metadata")
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// One half-open range `[start, end)` of hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardRange {
    /// The first hash in the range.
    pub start: u64,
    /// The first hash after the range, up to 2^64.
    pub end: u128,
}

impl ShardRange {
    /// Whether the hash is in the range.
    pub fn contains(&self, hash: u64) -> bool {
        self.start <= hash && u128::from(hash) < self.end
    }
}

/// A parsed `shardSelector`: ranges of one field's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSelector {
    source: String,
    field: ShardField,
    ranges: Vec<ShardRange>,
}

impl ShardSelector {
    /// Parses a `shardSelector` value: `shardRange(...)` terms joined with `||`.
    pub fn parse(s: &str) -> Result<Self, ShardSelectorError> {
        if s.trim().is_empty() {
            return Err(ShardSelectorError::Empty);
        }
        let mut field: Option<ShardField> = None;
        let mut ranges = Vec::new();
        for term in s.split("||") {
            let (f, range) = parse_term(term.trim())?;
            match field {
                Some(first) if first != f => {
                    return Err(ShardSelectorError::MixedFields {
                        first: first.as_str(),
                        other: f.as_str(),
                    });
                }
                _ => field = Some(f),
            }
            ranges.push(range);
        }
        Ok(ShardSelector {
            source: s.to_string(),
            field: field.unwrap_or(ShardField::Uid),
            ranges,
        })
    }

    /// The selector as given (what a list reports in `metadata.shardInfo.selector`).
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The hashed field.
    pub fn field(&self) -> ShardField {
        self.field
    }

    /// The ranges, in the order written.
    pub fn ranges(&self) -> &[ShardRange] {
        &self.ranges
    }

    /// Whether the object's field hashes into any of the ranges.
    pub fn matches(&self, obj: &Value) -> bool {
        let hash = fnv1a64(self.field.value(obj).as_bytes());
        self.ranges.iter().any(|r| r.contains(hash))
    }
}

/// `shardRange(<field>, '<start>', '<end>')`.
fn parse_term(term: &str) -> Result<(ShardField, ShardRange), ShardSelectorError> {
    if term.is_empty() {
        return Err(ShardSelectorError::Empty);
    }
    let syntax = || ShardSelectorError::Syntax {
        term: term.to_string(),
    };
    let (name, rest) = term.split_once('(').ok_or_else(syntax)?;
    let name = name.trim();
    if name != "shardRange" {
        return Err(if name.is_empty() {
            syntax()
        } else {
            ShardSelectorError::UnknownFunction(name.to_string())
        });
    }
    let args = rest.strip_suffix(')').ok_or_else(syntax)?;
    let args: Vec<&str> = args.split(',').map(str::trim).collect();
    let [field, start, end] = args[..] else {
        return Err(ShardSelectorError::Arity(args.len()));
    };
    let field = ShardField::parse(field)?;
    let start_value = parse_bound(start).filter(|v| *v < FULL);
    let start_value = start_value.ok_or_else(|| ShardSelectorError::BadHex {
        which: "start",
        value: start.to_string(),
    })?;
    let end_value = parse_bound(end).ok_or_else(|| ShardSelectorError::BadHex {
        which: "end",
        value: end.to_string(),
    })?;
    if start_value >= end_value {
        return Err(ShardSelectorError::EmptyRange {
            start: start.to_string(),
            end: end.to_string(),
        });
    }
    let start = u64::try_from(start_value).map_err(|_| ShardSelectorError::BadHex {
        which: "start",
        value: start.to_string(),
    })?;
    Ok((
        field,
        ShardRange {
            start,
            end: end_value,
        },
    ))
}

/// A quoted bound: `'0x'` + 1–16 hex digits, or exactly 2^64 (`0x1` + 16 zeros).
fn parse_bound(quoted: &str) -> Option<u128> {
    let inner = quoted
        .strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .or_else(|| quoted.strip_prefix('"').and_then(|s| s.strip_suffix('"')))?;
    let digits = inner.strip_prefix("0x")?;
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    if digits.len() <= 16 {
        return u128::from_str_radix(digits, 16).ok();
    }
    (digits.len() == 17 && digits == "10000000000000000").then_some(FULL)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const LOWER: &str =
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
    const UPPER: &str =
        "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')";

    #[test]
    fn fnv1a64_known_values() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn parses_one_and_several_ranges() {
        let one = ShardSelector::parse(LOWER).expect("parses");
        assert_eq!(one.field(), ShardField::Uid);
        assert_eq!(
            one.ranges(),
            &[ShardRange {
                start: 0,
                end: 1 << 63
            }]
        );
        assert_eq!(one.as_str(), LOWER);
        let spaced = "  shardRange( object.metadata.namespace ,'0x0','0x1' )||shardRange(object.metadata.namespace, \"0xff\", '0x10000000000000000')  ";
        let two = ShardSelector::parse(spaced).expect("parses");
        assert_eq!(two.field(), ShardField::Namespace);
        assert_eq!(
            two.ranges(),
            &[
                ShardRange { start: 0, end: 1 },
                ShardRange {
                    start: 0xff,
                    end: FULL
                }
            ]
        );
        assert_eq!(two.as_str(), spaced, "kept as given");
    }

    #[test]
    fn malformed_selectors_name_the_problem() {
        let err = |s: &str| ShardSelector::parse(s).expect_err("rejected").to_string();
        assert!(err("").contains("empty"));
        assert!(err("   ").contains("empty"));
        assert!(err(&format!("{LOWER} ||")).contains("empty"));
        assert!(
            err("hashRange(object.metadata.uid, '0x0', '0x1')")
                .contains("unknown function \"hashRange\"")
        );
        assert!(
            err("shardRange(object.metadata.name, '0x0', '0x1')")
                .contains("unknown field \"object.metadata.name\"")
        );
        assert!(err("shardRange(object.metadata.uid, '0x0')").contains("3 arguments"));
        assert!(err("shardRange object.metadata.uid").contains("expected shardRange("));
        assert!(
            err("shardRange(object.metadata.uid, '0x0', '0x1'").contains("expected shardRange(")
        );
        for bad in [
            "'0xzz'",
            "'0x'",
            "'12'",
            "0x1",
            "'0x10000000000000000'",
            "'0x00000000000000001'",
        ] {
            let e = err(&format!(
                "shardRange(object.metadata.uid, {bad}, '0x10000000000000000')"
            ));
            assert!(e.contains("bad start bound"), "{bad}: {e}");
        }
        for bad in ["'0x1g'", "'0x20000000000000000'", "'0x100000000000000000'"] {
            let e = err(&format!("shardRange(object.metadata.uid, '0x0', {bad})"));
            assert!(e.contains("bad end bound"), "{bad}: {e}");
        }
        assert!(err("shardRange(object.metadata.uid, '0x8', '0x8')").contains("must be less than"));
        assert!(err("shardRange(object.metadata.uid, '0x9', '0x8')").contains("must be less than"));
        let mixed = err(&format!(
            "{LOWER} || shardRange(object.metadata.namespace, '0x0', '0x1')"
        ));
        assert!(mixed.contains("same field"), "{mixed}");
    }

    #[test]
    fn complementary_halves_split_objects() {
        let lower = ShardSelector::parse(LOWER).expect("parses");
        let upper = ShardSelector::parse(UPPER).expect("parses");
        let both = ShardSelector::parse(&format!("{LOWER} || {UPPER}")).expect("parses");
        for i in 0..200 {
            let obj = json!({"metadata": {"uid": format!("uid-{i}")}});
            assert_ne!(lower.matches(&obj), upper.matches(&obj), "{obj}");
            assert!(both.matches(&obj));
        }
        // "a" hashes to 0xaf63dc4c8601ec8c: the upper half.
        let a = json!({"metadata": {"uid": "a"}});
        assert!(upper.matches(&a) && !lower.matches(&a));
        let exact = ShardSelector::parse(
            "shardRange(object.metadata.uid, '0xaf63dc4c8601ec8c', '0xaf63dc4c8601ec8d')",
        )
        .expect("parses");
        assert!(exact.matches(&a));
        assert!(!exact.matches(&json!({"metadata": {"uid": "b"}})));
    }

    #[test]
    fn namespace_field_and_cluster_scoped_objects() {
        // "" hashes to 0xcbf29ce484222325: the upper half, like every cluster-scoped object.
        let upper = ShardSelector::parse(
            "shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')",
        )
        .expect("parses");
        assert!(upper.matches(&json!({"metadata": {"name": "node-1"}})));
        let ns = json!({"metadata": {"namespace": "a", "uid": "zzz"}});
        assert!(upper.matches(&ns), "namespace \"a\" is in the upper half");
    }
}
