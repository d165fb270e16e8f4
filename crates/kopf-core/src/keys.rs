//! Annotation keys of per-handler state, formed exactly as Kopf 1.x forms them.
//!
//! A handler id becomes a "safe" key (`/` → `.`, `<` and `>` → `_`) under the operator's
//! prefix. Names longer than Kubernetes allows (63 characters) are cut and suffixed with `-`
//! and a 4-byte BLAKE2b digest in base64 (alphabet with `-` and `.`), trailing `=`, `-`, `.`
//! stripped. Two generations of keys exist: V2 limits the name part to 63 characters; V1 (kept
//! while operators migrate) limited prefix and name together. Both are written when they
//! differ. ReplicaSets owned by Deployments get `-ofDRS` appended, because Kubernetes copies
//! a Deployment's annotations onto its ReplicaSets.

use base64::Engine;
use blake2::Blake2bVar;
use blake2::digest::{Update, VariableOutput};
use serde_json::Value;

const MAX_NAME: usize = 63;

/// Forms the annotation keys of handler state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageKeys {
    /// The annotation prefix, e.g. `kopf.zalando.org`.
    pub prefix: String,
    /// Also write V1 keys where they differ from V2 keys (Kopf's default).
    pub v1: bool,
}

impl Default for StorageKeys {
    fn default() -> Self {
        StorageKeys {
            prefix: "kopf.zalando.org".into(),
            v1: true,
        }
    }
}

fn safe(key: &str) -> String {
    key.replace('/', ".").replace(['<', '>'], "_")
}

fn suffix(key: &str) -> String {
    let mut digest = [0u8; 4];
    // A 4-byte output length is always valid for BLAKE2b.
    if let Ok(mut hasher) = Blake2bVar::new(4) {
        hasher.update(key.as_bytes());
        let _ = hasher.finalize_variable(&mut digest);
    }
    let b64 = base64::engine::general_purpose::STANDARD
        .encode(digest)
        .replace('+', "-")
        .replace('/', ".");
    format!("-{b64}")
        .trim_end_matches(['=', '-', '.'])
        .to_string()
}

fn take(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

impl StorageKeys {
    /// The keys for a handler id, V2 first; `body` marks ReplicaSets owned by Deployments.
    pub fn make_keys(&self, id: &str, body: Option<&Value>) -> Vec<String> {
        let id = match body {
            Some(b) if owned_replicaset(b) => format!("{id}-ofDRS"),
            _ => id.to_string(),
        };
        let v2 = self.v2_key(&id);
        let mut keys = vec![v2.clone()];
        if self.v1 {
            let v1 = self.v1_key(&id);
            if v1 != v2 {
                keys.push(v1);
            }
        }
        keys
    }

    /// The V2 key: only the name part is limited to 63 characters.
    pub fn v2_key(&self, id: &str) -> String {
        let sfx = if id.chars().count() > MAX_NAME {
            suffix(id)
        } else {
            String::new()
        };
        let limit = MAX_NAME.saturating_sub(sfx.len());
        format!("{}/{}{sfx}", self.prefix, take(&safe(id), limit))
    }

    /// The V1 key: prefix, slash and name together limited to 63 characters.
    pub fn v1_key(&self, id: &str) -> String {
        let safe_key = safe(id);
        let prefix = format!("{}/", self.prefix);
        let sfx = if safe_key.chars().count() <= MAX_NAME.saturating_sub(prefix.len()) {
            String::new()
        } else {
            suffix(&safe_key)
        };
        let limit = MAX_NAME.saturating_sub(prefix.len() + sfx.len());
        format!("{prefix}{}{sfx}", take(&safe_key, limit))
    }
}

fn owned_replicaset(body: &Value) -> bool {
    body.get("kind").and_then(Value::as_str) == Some("ReplicaSet")
        && body
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|refs| {
                refs.iter()
                    .any(|r| r.get("kind").and_then(Value::as_str) == Some("Deployment"))
            })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Expected keys produced by Kopf 1.45.2's `AnnotationsProgressStorage.make_keys`.
    #[test]
    fn keys_match_kopf() {
        let k = StorageKeys::default();
        assert_eq!(
            k.make_keys("create_fn", None),
            vec!["kopf.zalando.org/create_fn"]
        );
        assert_eq!(
            k.make_keys("create_fn/sub1", None),
            vec!["kopf.zalando.org/create_fn.sub1"]
        );
        assert_eq!(
            k.make_keys("update_fn/spec.field", None),
            vec!["kopf.zalando.org/update_fn.spec.field"]
        );
        assert_eq!(
            k.make_keys("<lambda>", None),
            vec!["kopf.zalando.org/_lambda_"]
        );
        let x70 = "x".repeat(70);
        assert_eq!(
            k.make_keys(&x70, None),
            vec![
                format!("kopf.zalando.org/{}-j8bZbQ", "x".repeat(56)),
                format!("kopf.zalando.org/{}-j8bZbQ", "x".repeat(39)),
            ]
        );
        let long = "handler_with_a_rather_long_name_for_testing/sub-handler-number-one";
        assert_eq!(
            k.make_keys(long, None),
            vec![
                "kopf.zalando.org/handler_with_a_rather_long_name_for_testing.sub-handler--iWrR2A",
                "kopf.zalando.org/handler_with_a_rather_long_name_for_tes-lXhqMg",
            ]
        );
        let lengthy = StorageKeys {
            prefix: "lengthy-operator-name-to-hit-63-chars.example.com".into(),
            v1: true,
        };
        assert_eq!(
            lengthy.make_keys("create_fn/sub1", None),
            vec![
                "lengthy-operator-name-to-hit-63-chars.example.com/create_fn.sub1",
                "lengthy-operator-name-to-hit-63-chars.example.com/create-nnI9Vw",
            ]
        );
        let drs = json!({"kind": "ReplicaSet", "metadata": {"ownerReferences": [{"kind": "Deployment"}]}});
        assert_eq!(
            k.make_keys("create_fn", Some(&drs)),
            vec!["kopf.zalando.org/create_fn-ofDRS"]
        );
        let no_v1 = StorageKeys {
            v1: false,
            ..Default::default()
        };
        assert_eq!(no_v1.make_keys(long, None).len(), 1);
    }
}
