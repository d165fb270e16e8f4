//! JSON text as kube-apiserver writes it. Built-in kinds are Go structs, written in their
//! field order; custom resources are unstructured maps, which Go writes with sorted keys.
//!
//! Covered (known members first, in Go's order, then any others sorted):
//! * every typed object: `kind`, `apiVersion`, `metadata`, then per kind: ConfigMap
//!   (`immutable`, `data`, `binaryData`), Secret (`immutable`, `data`, `stringData`,
//!   `type`), ServiceAccount, Role/ClusterRole (`rules`, `aggregationRule`; PolicyRule
//!   members), RoleBinding/ClusterRoleBinding (`subjects`, `roleRef`, and their members),
//!   Endpoints, EndpointSlice, core/v1 and events.k8s.io/v1 Events (with ObjectReference
//!   members), Lease (and its spec), CustomResourceDefinition (and its spec's top level),
//!   the webhook configurations, Status, Table, PartialObjectMetadata; any other kind
//!   `spec` then `status`;
//! * ObjectMeta, ListMeta, OwnerReference, ManagedFieldsEntry, StatusDetails,
//!   StatusCause, TableColumnDefinition, TableRow (its `object` as a top-level object);
//! * lists (`kind`, `apiVersion`, `metadata`, `items`; items of a typed list as that kind);
//! * watch events (`type`, `object`), see [`event_line`].
//!
//! Everything else — the inside of `spec` and `status` of most kinds, label and annotation
//! maps, custom resources entirely — is written with sorted keys. Strings are escaped as
//! Go's `encoding/json` escapes them (`<`, `>`, `&`, U+2028 and U+2029 as `\u....`).
//! Which objects are typed is decided by the group of their `apiVersion` (the groups of
//! Kubernetes' built-in APIs): a custom resource in a built-in group is written as typed.

use serde_json::{Map, Value};

/// The API groups of Kubernetes' built-in kinds (`""` is the core group), sorted (they are
/// binary-searched).
const BUILTIN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apidiscovery.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "meta.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// How the members of a JSON object (or of each object of an array) are ordered.
#[derive(Clone, Copy)]
enum Shape {
    /// Sorted keys all the way down (Go maps, unstructured content).
    Sorted,
    /// A top-level object: typed or not by its apiVersion.
    Top,
    /// An item of a typed list of this kind (no kind/apiVersion of its own, usually).
    Item(&'static [F]),
    /// Known members in this order, then the others sorted.
    Fields(&'static [F]),
}

/// A known member and the shape of its value.
type F = (&'static str, Shape);

const SORTED: Shape = Shape::Sorted;

const OWNER_REFERENCE: &[F] = &[
    ("apiVersion", SORTED),
    ("kind", SORTED),
    ("name", SORTED),
    ("uid", SORTED),
    ("controller", SORTED),
    ("blockOwnerDeletion", SORTED),
];

const MANAGED_FIELDS_ENTRY: &[F] = &[
    ("manager", SORTED),
    ("operation", SORTED),
    ("apiVersion", SORTED),
    ("time", SORTED),
    ("fieldsType", SORTED),
    ("fieldsV1", SORTED),
    ("subresource", SORTED),
];

const OBJECT_META: &[F] = &[
    ("name", SORTED),
    ("generateName", SORTED),
    ("namespace", SORTED),
    ("selfLink", SORTED),
    ("uid", SORTED),
    ("resourceVersion", SORTED),
    ("generation", SORTED),
    ("creationTimestamp", SORTED),
    ("deletionTimestamp", SORTED),
    ("deletionGracePeriodSeconds", SORTED),
    ("labels", SORTED),
    ("annotations", SORTED),
    ("ownerReferences", Shape::Fields(OWNER_REFERENCE)),
    ("finalizers", SORTED),
    ("managedFields", Shape::Fields(MANAGED_FIELDS_ENTRY)),
];

const LIST_META: &[F] = &[
    ("selfLink", SORTED),
    ("resourceVersion", SORTED),
    ("continue", SORTED),
    ("remainingItemCount", SORTED),
];

const STATUS_CAUSE: &[F] = &[("reason", SORTED), ("message", SORTED), ("field", SORTED)];

const STATUS_DETAILS: &[F] = &[
    ("name", SORTED),
    ("group", SORTED),
    ("kind", SORTED),
    ("uid", SORTED),
    ("causes", Shape::Fields(STATUS_CAUSE)),
    ("retryAfterSeconds", SORTED),
];

const STATUS: &[F] = &[
    ("status", SORTED),
    ("message", SORTED),
    ("reason", SORTED),
    ("details", Shape::Fields(STATUS_DETAILS)),
    ("code", SORTED),
];

const COLUMN_DEFINITION: &[F] = &[
    ("name", SORTED),
    ("type", SORTED),
    ("format", SORTED),
    ("description", SORTED),
    ("priority", SORTED),
];

const TABLE_ROW: &[F] = &[
    ("cells", SORTED),
    ("conditions", SORTED),
    ("object", Shape::Top),
];

const TABLE: &[F] = &[
    ("columnDefinitions", Shape::Fields(COLUMN_DEFINITION)),
    ("rows", Shape::Fields(TABLE_ROW)),
];

const OBJECT_REFERENCE: &[F] = &[
    ("kind", SORTED),
    ("namespace", SORTED),
    ("name", SORTED),
    ("uid", SORTED),
    ("apiVersion", SORTED),
    ("resourceVersion", SORTED),
    ("fieldPath", SORTED),
];

const EVENT_SERIES: &[F] = &[("count", SORTED), ("lastObservedTime", SORTED)];

const CORE_EVENT: &[F] = &[
    ("involvedObject", Shape::Fields(OBJECT_REFERENCE)),
    ("reason", SORTED),
    ("message", SORTED),
    (
        "source",
        Shape::Fields(&[("component", SORTED), ("host", SORTED)]),
    ),
    ("firstTimestamp", SORTED),
    ("lastTimestamp", SORTED),
    ("count", SORTED),
    ("type", SORTED),
    ("eventTime", SORTED),
    ("series", Shape::Fields(EVENT_SERIES)),
    ("action", SORTED),
    ("related", Shape::Fields(OBJECT_REFERENCE)),
    ("reportingComponent", SORTED),
    ("reportingInstance", SORTED),
];

const EVENTS_V1_EVENT: &[F] = &[
    ("eventTime", SORTED),
    ("series", Shape::Fields(EVENT_SERIES)),
    ("reportingController", SORTED),
    ("reportingInstance", SORTED),
    ("action", SORTED),
    ("reason", SORTED),
    ("regarding", Shape::Fields(OBJECT_REFERENCE)),
    ("related", Shape::Fields(OBJECT_REFERENCE)),
    ("note", SORTED),
    ("type", SORTED),
    ("deprecatedSource", SORTED),
    ("deprecatedFirstTimestamp", SORTED),
    ("deprecatedLastTimestamp", SORTED),
    ("deprecatedCount", SORTED),
];

const POLICY_RULE: &[F] = &[
    ("verbs", SORTED),
    ("apiGroups", SORTED),
    ("resources", SORTED),
    ("resourceNames", SORTED),
    ("nonResourceURLs", SORTED),
];

const ROLE: &[F] = &[
    ("rules", Shape::Fields(POLICY_RULE)),
    ("aggregationRule", SORTED),
];

const BINDING: &[F] = &[
    (
        "subjects",
        Shape::Fields(&[
            ("kind", SORTED),
            ("apiGroup", SORTED),
            ("name", SORTED),
            ("namespace", SORTED),
        ]),
    ),
    (
        "roleRef",
        Shape::Fields(&[("apiGroup", SORTED), ("kind", SORTED), ("name", SORTED)]),
    ),
];

const LEASE: &[F] = &[(
    "spec",
    Shape::Fields(&[
        ("holderIdentity", SORTED),
        ("leaseDurationSeconds", SORTED),
        ("acquireTime", SORTED),
        ("renewTime", SORTED),
        ("leaseTransitions", SORTED),
        ("strategy", SORTED),
        ("preferredHolder", SORTED),
    ]),
)];

const CRD: &[F] = &[
    (
        "spec",
        Shape::Fields(&[
            ("group", SORTED),
            ("names", SORTED),
            ("scope", SORTED),
            ("versions", SORTED),
            ("conversion", SORTED),
            ("preserveUnknownFields", SORTED),
        ]),
    ),
    ("status", SORTED),
];

const SPEC_STATUS: &[F] = &[("spec", SORTED), ("status", SORTED)];

/// The members of a typed object after `kind`, `apiVersion` and `metadata`.
fn kind_fields(kind: &str, api_version: &str) -> &'static [F] {
    match kind {
        "ConfigMap" => &[
            ("immutable", SORTED),
            ("data", SORTED),
            ("binaryData", SORTED),
        ],
        "Secret" => &[
            ("immutable", SORTED),
            ("data", SORTED),
            ("stringData", SORTED),
            ("type", SORTED),
        ],
        "ServiceAccount" => &[
            ("secrets", SORTED),
            ("imagePullSecrets", SORTED),
            ("automountServiceAccountToken", SORTED),
        ],
        "Role" | "ClusterRole" => ROLE,
        "RoleBinding" | "ClusterRoleBinding" => BINDING,
        "Endpoints" => &[("subsets", SORTED)],
        "EndpointSlice" => &[
            ("addressType", SORTED),
            ("endpoints", SORTED),
            ("ports", SORTED),
        ],
        "Event" if api_version == "v1" => CORE_EVENT,
        "Event" => EVENTS_V1_EVENT,
        "Lease" => LEASE,
        "CustomResourceDefinition" => CRD,
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => {
            &[("webhooks", SORTED)]
        }
        "Status" => STATUS,
        "Table" => TABLE,
        _ => SPEC_STATUS,
    }
}

/// Whether an object of this apiVersion is a Go struct (a built-in kind).
fn is_typed(api_version: &str) -> bool {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    BUILTIN_GROUPS.binary_search(&group).is_ok()
}

/// The JSON text of a response body or a stored object, as kube-apiserver writes it
/// (without the trailing newline).
pub fn to_vec(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_shaped(&mut out, v, Shape::Top);
    out
}

/// Appends the JSON text of `v` (as [`to_vec`]) to `out`.
pub fn write(out: &mut Vec<u8>, v: &Value) {
    write_shaped(out, v, Shape::Top);
}

/// One watch event line: `{"type":...,"object":...}` and a newline, the object as
/// [`to_vec`] writes it, or its already written JSON text.
pub fn event_line(kind: &str, object: EventObject<'_>) -> Vec<u8> {
    let text_len = match object {
        EventObject::Value(_) => 256,
        EventObject::Text(t) => t.len(),
    };
    let mut out = Vec::with_capacity(text_len + kind.len() + 24);
    out.extend_from_slice(b"{\"type\":");
    write_str(&mut out, kind);
    out.extend_from_slice(b",\"object\":");
    match object {
        EventObject::Value(v) => write(&mut out, v),
        EventObject::Text(t) => out.extend_from_slice(t),
    }
    out.extend_from_slice(b"}\n");
    out
}

/// The object of a watch event: a value, or its JSON text.
#[derive(Clone, Copy)]
pub enum EventObject<'a> {
    /// A value, written as [`to_vec`] writes it.
    Value(&'a Value),
    /// JSON text written by [`to_vec`].
    Text(&'a [u8]),
}

fn write_shaped(out: &mut Vec<u8>, v: &Value, shape: Shape) {
    match (v, shape) {
        (Value::Array(items), Shape::Top | Shape::Fields(_) | Shape::Item(_)) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_shaped(out, item, shape);
            }
            out.push(b']');
        }
        (Value::Object(m), Shape::Top) => write_top(out, m),
        (Value::Object(m), Shape::Item(fields)) => {
            write_typed_members(out, m, fields, OBJECT_META);
        }
        (Value::Object(m), Shape::Fields(fields)) => write_members(out, m, fields),
        _ => write_sorted(out, v),
    }
}

/// A top-level object: typed (Go struct order) or unstructured (sorted).
fn write_top(out: &mut Vec<u8>, m: &Map<String, Value>) {
    let api_version = m.get("apiVersion").and_then(Value::as_str);
    let Some(api_version) = api_version.filter(|a| is_typed(a)) else {
        write_sorted_map(out, m);
        return;
    };
    let kind = m.get("kind").and_then(Value::as_str).unwrap_or("");
    if let Some(item_kind) = kind.strip_suffix("List")
        && let Some(items) = m.get("items").filter(|i| i.is_array())
    {
        // A list: its items are of the list's kind (PartialObjectMetadataList's carry
        // their own kind and apiVersion).
        let item = if item_kind == "PartialObjectMetadata" {
            Shape::Top
        } else {
            Shape::Item(kind_fields(item_kind, api_version))
        };
        out.push(b'{');
        let mut first = true;
        write_head(out, &mut first, m, LIST_META);
        member(out, &mut first, "items", items, item);
        write_rest(out, &mut first, m, |k| is_head(k) || k == "items", &[]);
        out.push(b'}');
        return;
    }
    let meta = match kind {
        "Status" | "Table" => LIST_META,
        _ => OBJECT_META,
    };
    write_typed_members(out, m, kind_fields(kind, api_version), meta);
}

/// `kind`, `apiVersion`, `metadata` (with `meta`'s order), then `fields`, then the rest.
fn write_typed_members(
    out: &mut Vec<u8>,
    m: &Map<String, Value>,
    fields: &'static [F],
    meta: &'static [F],
) {
    out.push(b'{');
    let mut first = true;
    write_head(out, &mut first, m, meta);
    write_rest(out, &mut first, m, is_head, fields);
    out.push(b'}');
}

fn is_head(k: &str) -> bool {
    matches!(k, "kind" | "apiVersion" | "metadata")
}

/// `kind`, `apiVersion` and `metadata` (with `meta`'s order).
fn write_head(out: &mut Vec<u8>, first: &mut bool, m: &Map<String, Value>, meta: &'static [F]) {
    for name in ["kind", "apiVersion"] {
        if let Some(v) = m.get(name) {
            member(out, first, name, v, SORTED);
        }
    }
    if let Some(v) = m.get("metadata") {
        member(out, first, "metadata", v, Shape::Fields(meta));
    }
}

/// `fields` in their order, then the other members.
fn write_members(out: &mut Vec<u8>, m: &Map<String, Value>, fields: &[F]) {
    out.push(b'{');
    let mut first = true;
    write_rest(out, &mut first, m, |_| false, fields);
    out.push(b'}');
}

fn write_rest(
    out: &mut Vec<u8>,
    first: &mut bool,
    m: &Map<String, Value>,
    skip: impl Fn(&str) -> bool,
    fields: &[F],
) {
    let mut written = 0;
    for (name, shape) in fields {
        if let Some(v) = m.get(*name) {
            member(out, first, name, v, *shape);
            written += 1;
        }
    }
    if written == m.len() {
        return;
    }
    for (k, v) in m {
        if skip(k) || fields.iter().any(|(n, _)| n == k) {
            continue;
        }
        member(out, first, k, v, SORTED);
    }
}

fn member(out: &mut Vec<u8>, first: &mut bool, key: &str, v: &Value, shape: Shape) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    write_str(out, key);
    out.push(b':');
    write_shaped(out, v, shape);
}

fn write_sorted_map(out: &mut Vec<u8>, m: &Map<String, Value>) {
    out.push(b'{');
    let mut first = true;
    for (k, v) in m {
        member(out, &mut first, k, v, SORTED);
    }
    out.push(b'}');
}

/// A value with sorted keys (serde_json's `Map` is ordered by key, as Go writes maps).
fn write_sorted(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            use std::io::Write;
            // Writing into a Vec cannot fail.
            let _ = write!(out, "{n}");
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_sorted(out, item);
            }
            out.push(b']');
        }
        Value::Object(m) => write_sorted_map(out, m),
    }
}

/// Bytes that Go's encoding/json escapes (besides U+2028 and U+2029), and 0xE2 (which
/// starts those two).
const SPECIAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table[b'<' as usize] = true;
    table[b'>' as usize] = true;
    table[b'&' as usize] = true;
    table[0xE2] = true;
    table
};

/// A string as Go's encoding/json writes it (HTML-safe).
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.push(b'"');
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !SPECIAL[b as usize] {
            i += 1;
            continue;
        }
        let escape: Option<&[u8]> = if b != 0xE2 {
            Some(match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x08 => b"\\b",
                0x0c => b"\\f",
                _ => b"",
            })
        } else if b == 0xE2
            && bytes.get(i + 1) == Some(&0x80)
            && matches!(bytes.get(i + 2), Some(0xA8 | 0xA9))
        {
            Some(b"")
        } else {
            None
        };
        let Some(escape) = escape else {
            i += 1;
            continue;
        };
        out.extend_from_slice(&bytes[start..i]);
        if !escape.is_empty() {
            out.extend_from_slice(escape);
            i += 1;
        } else if b == 0xE2 {
            out.extend_from_slice(if bytes[i + 2] == 0xA8 {
                b"\\u2028"
            } else {
                b"\\u2029"
            });
            i += 3;
        } else {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xf) as usize]);
            i += 1;
        }
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(v: &Value) -> String {
        String::from_utf8(to_vec(v)).expect("utf-8")
    }

    #[test]
    fn typed_objects_are_written_in_struct_order() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"b": "1", "a": "<&>"},
            "metadata": {"uid": "u", "name": "c", "namespace": "default", "resourceVersion": "5",
                "annotations": {"z": "1", "y": "2"}, "labels": {"l": "v"}, "creationTimestamp": "t",
                "ownerReferences": [{"uid": "o", "name": "n", "kind": "K", "apiVersion": "v1", "controller": true}],
                "managedFields": [{"time": "t", "operation": "Update", "manager": "m", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {".": {}}}}],
                "finalizers": ["f"], "extra": 1}});
        assert_eq!(
            text(&cm),
            concat!(
                r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"default","#,
                r#""uid":"u","resourceVersion":"5","creationTimestamp":"t","labels":{"l":"v"},"#,
                r#""annotations":{"y":"2","z":"1"},"ownerReferences":[{"apiVersion":"v1","kind":"K","#,
                r#""name":"n","uid":"o","controller":true}],"finalizers":["f"],"managedFields":[{"#,
                r#""manager":"m","operation":"Update","apiVersion":"v1","time":"t","fieldsType":"FieldsV1","#,
                r#""fieldsV1":{"f:data":{".":{}}}}],"extra":1},"data":{"a":"\u003c\u0026\u003e","b":"1"}}"#
            )
        );
        let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "m", "reason": "Invalid", "code": 422,
            "details": {"kind": "k", "name": "n", "group": "g",
                "causes": [{"field": "f", "message": "x", "reason": "FieldValueInvalid"}]}});
        assert_eq!(
            text(&status),
            concat!(
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m","#,
                r#""reason":"Invalid","details":{"name":"n","group":"g","kind":"k","causes":[{"#,
                r#""reason":"FieldValueInvalid","message":"x","field":"f"}]},"code":422}"#
            )
        );
        let list = json!({"apiVersion": "apps/v1", "kind": "DeploymentList",
            "metadata": {"continue": "c", "resourceVersion": "9"},
            "items": [{"status": {}, "spec": {"replicas": 1}, "metadata": {"namespace": "n", "name": "d"}}]});
        assert_eq!(
            text(&list),
            concat!(
                r#"{"kind":"DeploymentList","apiVersion":"apps/v1","metadata":{"resourceVersion":"9","#,
                r#""continue":"c"},"items":[{"metadata":{"name":"d","namespace":"n"},"#,
                r#""spec":{"replicas":1},"status":{}}]}"#
            )
        );
    }

    #[test]
    fn builtin_groups_are_sorted_and_decide_typedness() {
        assert!(BUILTIN_GROUPS.windows(2).all(|w| w[0] < w[1]));
        for typed in [
            "v1",
            "apps/v1",
            "apidiscovery.k8s.io/v2",
            "meta.k8s.io/v1beta1",
        ] {
            assert!(is_typed(typed), "{typed}");
        }
        for unstructured in ["kopf.dev/v1", "snapshot.storage.k8s.io/v1"] {
            assert!(!is_typed(unstructured), "{unstructured}");
        }
    }

    #[test]
    fn custom_resources_keep_sorted_keys() {
        let cr = json!({"kind": "KopfExample", "apiVersion": "kopf.dev/v1",
            "metadata": {"name": "a", "uid": "u"}, "spec": {"z": 1, "a": [{"y": 1, "b": 2}]}});
        assert_eq!(
            text(&cr),
            r#"{"apiVersion":"kopf.dev/v1","kind":"KopfExample","metadata":{"name":"a","uid":"u"},"spec":{"a":[{"b":2,"y":1}],"z":1}}"#
        );
        let list = json!({"kind": "KopfExampleList", "apiVersion": "kopf.dev/v1",
            "metadata": {"resourceVersion": "1"}, "items": [cr]});
        assert!(text(&list).starts_with(r#"{"apiVersion":"kopf.dev/v1","items":[{"apiVersion""#));
    }

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        let s = json!("a\"\\\n\t\r\u{8}\u{c}\u{1}<>&\u{2028}\u{2029}é✓");
        assert_eq!(
            text(&s),
            r#""a\"\\\n\t\r\b\f\u0001\u003c\u003e\u0026\u2028\u2029é✓""#
        );
        let event = event_line(
            "ADDED",
            EventObject::Value(&json!({"kind": "Status", "apiVersion": "v1", "code": 410})),
        );
        assert_eq!(
            event,
            br#"{"type":"ADDED","object":{"kind":"Status","apiVersion":"v1","code":410}}
"#
        );
        let table = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": "1"},
            "rows": [{"object": {"metadata": {"name": "x"}, "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"}, "cells": ["x"]}],
            "columnDefinitions": [{"priority": 0, "name": "Name", "type": "string", "format": "name", "description": "d"}]});
        assert_eq!(
            text(&table),
            concat!(
                r#"{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"1"},"#,
                r#""columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"d","#,
                r#""priority":0}],"rows":[{"cells":["x"],"object":{"kind":"PartialObjectMetadata","#,
                r#""apiVersion":"meta.k8s.io/v1","metadata":{"name":"x"}}}]}"#
            )
        );
    }
}
