//! Decoding of `application/vnd.kubernetes.protobuf` request bodies for the built-in kinds
//! that kubectl ≥1.32 sends as protobuf from its typed commands (`kubectl create configmap`,
//! `secret`, `namespace`, `serviceaccount`, `rolebinding`, `clusterrolebinding`, `auth can-i`).
//!
//! A body is the `k8s\0` magic followed by a `runtime.Unknown` message (TypeMeta, raw
//! bytes); the raw bytes are the object's message. Kinds without a decoder here are refused
//! with a 415 that names the kind. Responses are always JSON (clients decode by Content-Type).

use serde_json::{Map, Value, json};

use crate::apiserver::error::ApiError;

/// The protobuf media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The shape of one field.
#[derive(Clone, Copy)]
enum F {
    Str(&'static str),
    Int(&'static str),
    Bool(&'static str),
    Msg(&'static str, &'static [(u32, F)]),
    RepStr(&'static str),
    RepMsg(&'static str, &'static [(u32, F)]),
    MapStr(&'static str),
    MapBytes(&'static str),
    Time(&'static str),
}

const OWNER_REFERENCE: &[(u32, F)] = &[
    (1, F::Str("kind")),
    (3, F::Str("name")),
    (4, F::Str("uid")),
    (5, F::Str("apiVersion")),
    (6, F::Bool("controller")),
    (7, F::Bool("blockOwnerDeletion")),
];

const OBJECT_META: &[(u32, F)] = &[
    (1, F::Str("name")),
    (2, F::Str("generateName")),
    (3, F::Str("namespace")),
    (5, F::Str("uid")),
    (6, F::Str("resourceVersion")),
    (7, F::Int("generation")),
    (8, F::Time("creationTimestamp")),
    (11, F::MapStr("labels")),
    (12, F::MapStr("annotations")),
    (13, F::RepMsg("ownerReferences", OWNER_REFERENCE)),
    (14, F::RepStr("finalizers")),
];

const CONFIG_MAP: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::MapStr("data")),
    (3, F::MapBytes("binaryData")),
    (4, F::Bool("immutable")),
];

const SECRET: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::MapBytes("data")),
    (3, F::Str("type")),
    (4, F::MapStr("stringData")),
    (5, F::Bool("immutable")),
];

const NAMESPACE_SPEC: &[(u32, F)] = &[(1, F::RepStr("finalizers"))];

const NAMESPACE: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::Msg("spec", NAMESPACE_SPEC)),
];

const OBJECT_REFERENCE: &[(u32, F)] = &[
    (1, F::Str("kind")),
    (2, F::Str("namespace")),
    (3, F::Str("name")),
    (4, F::Str("uid")),
    (5, F::Str("apiVersion")),
    (6, F::Str("resourceVersion")),
    (7, F::Str("fieldPath")),
];

const LOCAL_OBJECT_REFERENCE: &[(u32, F)] = &[(1, F::Str("name"))];

const SERVICE_ACCOUNT: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::RepMsg("secrets", OBJECT_REFERENCE)),
    (3, F::RepMsg("imagePullSecrets", LOCAL_OBJECT_REFERENCE)),
    (4, F::Bool("automountServiceAccountToken")),
];

const RESOURCE_ATTRIBUTES: &[(u32, F)] = &[
    (1, F::Str("namespace")),
    (2, F::Str("verb")),
    (3, F::Str("group")),
    (4, F::Str("version")),
    (5, F::Str("resource")),
    (6, F::Str("subresource")),
    (7, F::Str("name")),
];

const NON_RESOURCE_ATTRIBUTES: &[(u32, F)] = &[(1, F::Str("path")), (2, F::Str("verb"))];

const SSAR_SPEC: &[(u32, F)] = &[
    (1, F::Msg("resourceAttributes", RESOURCE_ATTRIBUTES)),
    (2, F::Msg("nonResourceAttributes", NON_RESOURCE_ATTRIBUTES)),
];

const SELF_SUBJECT_ACCESS_REVIEW: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::Msg("spec", SSAR_SPEC)),
];

const SUBJECT: &[(u32, F)] = &[
    (1, F::Str("kind")),
    (2, F::Str("apiGroup")),
    (3, F::Str("name")),
    (4, F::Str("namespace")),
];

const ROLE_REF: &[(u32, F)] = &[
    (1, F::Str("apiGroup")),
    (2, F::Str("kind")),
    (3, F::Str("name")),
];

/// A RoleBinding, and a ClusterRoleBinding (the same fields).
const ROLE_BINDING: &[(u32, F)] = &[
    (1, F::Msg("metadata", OBJECT_META)),
    (2, F::RepMsg("subjects", SUBJECT)),
    (3, F::Msg("roleRef", ROLE_REF)),
];

const TIME: &[(u32, F)] = &[(1, F::Int("seconds")), (2, F::Int("nanos"))];

fn schema_for(api_version: &str, kind: &str) -> Option<&'static [(u32, F)]> {
    match (api_version, kind) {
        ("v1", "ConfigMap") => Some(CONFIG_MAP),
        ("v1", "Secret") => Some(SECRET),
        ("v1", "Namespace") => Some(NAMESPACE),
        ("v1", "ServiceAccount") => Some(SERVICE_ACCOUNT),
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => Some(SELF_SUBJECT_ACCESS_REVIEW),
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => {
            Some(ROLE_BINDING)
        }
        _ => None,
    }
}

/// A protobuf field value on the wire.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

struct Reader<'a> {
    buf: &'a [u8],
}

fn bad(msg: &str) -> ApiError {
    ApiError::bad_request(format!("the protobuf body could not be decoded: {msg}"))
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ApiError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or_else(|| bad("truncated varint"))?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad("varint too long"))
    }

    fn next(&mut self) -> Result<Option<(u32, Wire<'a>)>, ApiError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let tag = self.varint()?;
        let field = u32::try_from(tag >> 3).map_err(|_| bad("field number too large"))?;
        let wire = match tag & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.skip(8)?;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| bad("length too large"))?;
                if len > self.buf.len() {
                    return Err(bad("truncated field"));
                }
                let (data, rest) = self.buf.split_at(len);
                self.buf = rest;
                Wire::Bytes(data)
            }
            5 => {
                self.skip(4)?;
                Wire::Fixed
            }
            other => return Err(bad(&format!("unsupported wire type {other}"))),
        };
        Ok(Some((field, wire)))
    }

    fn skip(&mut self, n: usize) -> Result<(), ApiError> {
        if n > self.buf.len() {
            return Err(bad("truncated field"));
        }
        self.buf = &self.buf[n..];
        Ok(())
    }
}

fn text(b: &[u8]) -> Result<String, ApiError> {
    String::from_utf8(b.to_vec()).map_err(|_| bad("a string field is not UTF-8"))
}

fn map_entry(b: &[u8], bytes_value: bool) -> Result<(String, Value), ApiError> {
    let mut r = Reader { buf: b };
    let (mut key, mut value) = (String::new(), Value::String(String::new()));
    while let Some((f, w)) = r.next()? {
        match (f, w) {
            (1, Wire::Bytes(k)) => key = text(k)?,
            (2, Wire::Bytes(v)) if bytes_value => {
                use base64::Engine;
                value = Value::String(base64::engine::general_purpose::STANDARD.encode(v));
            }
            (2, Wire::Bytes(v)) => value = Value::String(text(v)?),
            _ => {}
        }
    }
    Ok((key, value))
}

fn message(b: &[u8], schema: &[(u32, F)]) -> Result<Value, ApiError> {
    let mut out = Map::new();
    let mut r = Reader { buf: b };
    while let Some((num, wire)) = r.next()? {
        let Some((_, field)) = schema.iter().find(|(n, _)| *n == num) else {
            continue;
        };
        match (*field, wire) {
            // Go encodes unset strings and numbers as empty values; JSON omits them.
            (F::Str(name), Wire::Bytes(b)) => {
                if !b.is_empty() {
                    out.insert(name.into(), Value::String(text(b)?));
                }
            }
            (F::Int(name), Wire::Varint(v)) => {
                if v != 0 {
                    out.insert(name.into(), json!(v as i64));
                }
            }
            (F::Bool(name), Wire::Varint(v)) => {
                out.insert(name.into(), Value::Bool(v != 0));
            }
            (F::Msg(name, s), Wire::Bytes(b)) => {
                out.insert(name.into(), message(b, s)?);
            }
            (F::RepStr(name), Wire::Bytes(b)) => {
                let list = out.entry(name).or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(Value::String(text(b)?));
                }
            }
            (F::RepMsg(name, s), Wire::Bytes(b)) => {
                let item = message(b, s)?;
                let list = out.entry(name).or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(item);
                }
            }
            (F::MapStr(name), Wire::Bytes(b)) | (F::MapBytes(name), Wire::Bytes(b)) => {
                let bytes_value = matches!(field, F::MapBytes(_));
                let (k, v) = map_entry(b, bytes_value)?;
                let map = out.entry(name).or_insert_with(|| json!({}));
                if let Some(m) = map.as_object_mut() {
                    m.insert(k, v);
                }
            }
            (F::Time(name), Wire::Bytes(b)) => {
                let t = message(b, TIME)?;
                let secs = t["seconds"].as_i64().unwrap_or(0);
                if let Ok(ts) = jiff::Timestamp::from_second(secs) {
                    out.insert(
                        name.into(),
                        json!(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
                    );
                }
            }
            _ => return Err(bad(&format!("field {num} has an unexpected wire type"))),
        }
    }
    Ok(Value::Object(out))
}

/// Decodes a protobuf request body into the JSON object it stands for.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let rest = body
        .strip_prefix(b"k8s\0")
        .ok_or_else(|| bad("the body does not start with the k8s protobuf magic"))?;
    let mut r = Reader { buf: rest };
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    while let Some((num, wire)) = r.next()? {
        match (num, wire) {
            (1, Wire::Bytes(tm)) => {
                let t = message(tm, &[(1, F::Str("apiVersion")), (2, F::Str("kind"))])?;
                api_version = t["apiVersion"].as_str().unwrap_or("").to_string();
                kind = t["kind"].as_str().unwrap_or("").to_string();
            }
            (2, Wire::Bytes(b)) => raw = Some(b),
            _ => {}
        }
    }
    if kind.is_empty() {
        return Err(bad("the runtime.Unknown envelope carries no TypeMeta kind"));
    }
    let Some(schema) = schema_for(&api_version, &kind) else {
        let mut e = ApiError::unsupported_media_type(&["application/json", "application/yaml"]);
        e.message.push_str(&format!(
            " (the fake API server decodes protobuf only for ConfigMap, Secret, Namespace, ServiceAccount, RoleBinding, ClusterRoleBinding and SelfSubjectAccessReview, not {api_version} {kind}; kubectl 1.31 sends JSON)"
        ));
        return Err(e);
    };
    let mut obj = message(raw.unwrap_or(&[]), schema)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(num: u32, data: &[u8]) -> Vec<u8> {
        let mut out = vec![((num << 3) | 2) as u8, data.len() as u8];
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn decodes_a_config_map_envelope() {
        let entry = [field(1, b"a"), field(2, b"b")].concat();
        let meta = [
            field(1, b"c1"),
            field(11, &[field(1, b"l"), field(2, b"v")].concat()),
        ]
        .concat();
        let cm = [field(1, &meta), field(2, &entry)].concat();
        let type_meta = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let body = [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &cm)].concat();
        let v = decode(&body).expect("decodes");
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c1", "labels": {"l": "v"}}, "data": {"a": "b"}})
        );
    }

    #[test]
    fn refuses_unknown_kinds_and_garbage() {
        let type_meta = [field(1, b"apps/v1"), field(2, b"Deployment")].concat();
        let body = [b"k8s\0".to_vec(), field(1, &type_meta)].concat();
        assert_eq!(decode(&body).expect_err("415").code, 415);
        assert_eq!(decode(b"nope").expect_err("400").code, 400);
        assert_eq!(decode(b"k8s\0\x0a\xff").expect_err("400").code, 400);
    }
}
