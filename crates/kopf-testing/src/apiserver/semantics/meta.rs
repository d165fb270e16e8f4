//! Reading and writing object metadata, and the small checks the verbs share (DNS names,
//! the content a write changes, the time).

use serde_json::{Value, json};

use crate::apiserver::storage::object_rv;

/// The current time as `metav1.Time` (RFC 3339, seconds, `Z`).
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Reads `metadata.resourceVersion` of a stored object.
pub fn rv_of(obj: &Value) -> u64 {
    object_rv(obj).unwrap_or(0)
}

pub(super) fn meta(obj: &Value) -> &Value {
    obj.get("metadata").unwrap_or(&Value::Null)
}

pub(super) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).get(field).and_then(Value::as_str)
}

pub(super) fn meta_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        // metadata was made an object just above.
        _ => unreachable!("metadata is an object"),
    }
}

pub(super) fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .get("finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

pub(super) fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Whether two values are equal when the keys in `skip` of both (when both are objects)
/// are left out; compares in place, without copying either value.
fn eq_without(a: &Value, b: &Value, skip: &[&str]) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(x), Some(y)) => {
            let kept = |(k, _): &(&String, &Value)| !skip.contains(&k.as_str());
            x.iter().filter(kept).eq(y.iter().filter(kept))
        }
        _ => a == b,
    }
}

/// Whether two objects have the same content outside metadata, apiVersion and kind (and
/// outside status when `skip_status`).
pub(super) fn same_content_without_meta(a: &Value, b: &Value, skip_status: bool) -> bool {
    if skip_status {
        eq_without(a, b, &["metadata", "apiVersion", "kind", "status"])
    } else {
        eq_without(a, b, &["metadata", "apiVersion", "kind"])
    }
}

/// Whether two objects are equal but for `metadata.resourceVersion` and
/// `metadata.managedFields` (the fields a write that changes nothing may still differ in).
pub(super) fn same_without_volatile(a: &Value, b: &Value) -> bool {
    let (Some(x), Some(y)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let metas_equal = match (x.get("metadata"), y.get("metadata")) {
        (None, None) => true,
        (Some(ma), Some(mb)) => match (ma.as_object(), mb.as_object()) {
            (Some(_), Some(_)) => eq_without(ma, mb, &["resourceVersion", "managedFields"]),
            _ => ma == mb,
        },
        _ => false,
    };
    metas_equal && eq_without(a, b, &["metadata"])
}

pub(super) fn is_valid_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub(super) fn is_valid_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_valid_dns_label)
}
