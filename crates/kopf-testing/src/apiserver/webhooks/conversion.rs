//! Versions of custom resources: `spec.conversion` of CustomResourceDefinitions.
//!
//! * `strategy: None` (the default): only `apiVersion` is rewritten when an object is read
//!   or written through another served version (objects keep the version they were written
//!   in, as before conversion webhooks existed here).
//! * `strategy: Webhook`: objects are stored in the storage version. A write through another
//!   version is admitted in the request's version, converted by the webhook to the storage
//!   version, stored, and the stored object is converted back for the response; reads
//!   (get, list, watch) convert stored objects to the requested version — one
//!   `ConversionReview` for all the objects of a list or of a watch's initial events. The
//!   review is `apiextensions.k8s.io/v1` (`conversionReviewVersions` must contain `v1`);
//!   the answer must carry the request's uid, `result.status: Success` and as many
//!   converted objects, each of the desired `apiVersion` and the original kind, name,
//!   namespace and uid; of their metadata only labels and annotations are taken, the rest
//!   is restored from the original, as kube-apiserver does. A failure answers the client
//!   with a 500 `conversion webhook for <group>/<version>, Kind=<Kind> failed: <why>`.
//!
//! The calls go through [`client`] (HTTPS, `caBundle`, services mapped by
//! the server settings), with kube-apiserver's 30 s timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::semantics::State;
use crate::apiserver::webhooks::client::{self, WebhookCall, WebhookOutcome};
use crate::apiserver::webhooks::host::Host;

/// The timeout kube-apiserver gives conversion webhooks.
const CONVERSION_TIMEOUT: Duration = Duration::from_secs(30);

/// How the versions of one CRD convert.
#[derive(Debug, Clone)]
pub(crate) struct CrdConversion {
    /// The CRD's name.
    pub crd: String,
    /// The API group.
    pub group: String,
    /// The plural (for the call records).
    pub plural: String,
    /// The kind.
    pub kind: String,
    /// The name of the storage version.
    pub storage_version: String,
    /// The storage version's schema.
    pub storage_schema: Option<Value>,
    /// `spec.conversion.webhook` when the strategy is `Webhook`.
    pub webhook: Option<Value>,
}

impl CrdConversion {
    /// Reads the conversion settings of the CRD serving `def` (None for built-ins).
    pub fn lookup(state: &State, def: &ResourceDef) -> Option<CrdConversion> {
        let name = def.crd.as_ref()?;
        let crd = state.store.get(
            &(
                "apiextensions.k8s.io".to_string(),
                "customresourcedefinitions".to_string(),
            ),
            &(String::new(), name.clone()),
        )?;
        let storage = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|vs| {
                vs.iter()
                    .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
            });
        let webhook = match crd
            .pointer("/spec/conversion/strategy")
            .and_then(Value::as_str)
        {
            Some("Webhook") => Some(
                crd.pointer("/spec/conversion/webhook")
                    .cloned()
                    .unwrap_or(Value::Null),
            ),
            _ => None,
        };
        Some(CrdConversion {
            crd: name.clone(),
            group: def.group.clone(),
            plural: def.plural.clone(),
            kind: def.kind.clone(),
            storage_version: storage
                .and_then(|v| v.get("name"))
                .and_then(Value::as_str)
                .unwrap_or(&def.version)
                .to_string(),
            // Only conversions by webhook store through the storage version's definition.
            storage_schema: if webhook.is_some() {
                storage.and_then(|v| v.pointer("/schema/openAPIV3Schema").cloned())
            } else {
                None
            },
            webhook,
        })
    }

    /// Reads the conversion settings when the CRD of `def` converts by webhook.
    pub fn lookup_webhook(state: &State, def: &ResourceDef) -> Option<CrdConversion> {
        Self::lookup(state, def).filter(CrdConversion::uses_webhook)
    }

    /// Whether the strategy is `Webhook`.
    pub fn uses_webhook(&self) -> bool {
        self.webhook.is_some()
    }

    /// `group/version`.
    pub fn api_version(&self, version: &str) -> String {
        format!("{}/{version}", self.group)
    }

    /// The resource definition of the storage version (for storing and presenting stored
    /// objects; the storage version need not be served).
    pub fn storage_def(&self, def: &ResourceDef) -> ResourceDef {
        let mut d = def.clone();
        d.version = self.storage_version.clone();
        d.schema = self.storage_schema.clone();
        d.storage_version = true;
        d
    }

    /// Whether an object (of this CRD) must be converted to be seen in `version`.
    pub fn needs_webhook(&self, obj: &Value, version: &str) -> bool {
        self.uses_webhook()
            && obj.get("apiVersion").and_then(Value::as_str) != Some(&self.api_version(version))
    }
}

fn failed(source_api_version: &str, kind: &str, why: impl std::fmt::Display) -> ApiError {
    // kube-apiserver answers a plain error, which becomes a 500 with an empty reason.
    ApiError::new(
        500,
        "",
        format!("conversion webhook for {source_api_version}, Kind={kind} failed: {why}"),
    )
}

/// Converts objects of one CRD to `version`: objects already in it stay as they are; with
/// strategy None the others get the new `apiVersion`; with a webhook they are sent to it
/// in one `ConversionReview`.
pub(crate) async fn convert(
    host: &dyn Host,
    conv: &CrdConversion,
    mut objects: Vec<Value>,
    version: &str,
) -> ApiResult<Vec<Value>> {
    let desired = conv.api_version(version);
    let pending: Vec<usize> = objects
        .iter()
        .enumerate()
        .filter(|(_, o)| o.get("apiVersion").and_then(Value::as_str) != Some(desired.as_str()))
        .map(|(i, _)| i)
        .collect();
    if pending.is_empty() {
        return Ok(objects);
    }
    let Some(webhook) = &conv.webhook else {
        for i in pending {
            objects[i]["apiVersion"] = json!(desired);
        }
        return Ok(objects);
    };
    let originals: Vec<Value> = pending.iter().map(|&i| objects[i].clone()).collect();
    let converted = call(host, conv, webhook, &originals, &desired).await?;
    for (i, o) in pending.into_iter().zip(converted) {
        objects[i] = o;
    }
    Ok(objects)
}

/// Converts one object (see [`convert`]).
pub(crate) async fn convert_one(
    host: &dyn Host,
    conv: &CrdConversion,
    object: Value,
    version: &str,
) -> ApiResult<Value> {
    convert(host, conv, vec![object], version)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::internal("a conversion returned no object"))
}

/// Converts stored objects to the version of `def` and presents them as `def` serves them.
pub(crate) async fn present_all(
    host: &dyn Host,
    conv: Option<&CrdConversion>,
    def: &ResourceDef,
    raw: Vec<Arc<Value>>,
) -> ApiResult<Vec<Value>> {
    match conv {
        Some(c) if raw.iter().any(|o| c.needs_webhook(o, &def.version)) => {
            let owned: Vec<Value> = raw.into_iter().map(Arc::unwrap_or_clone).collect();
            let converted = convert(host, c, owned, &def.version).await?;
            Ok(converted
                .into_iter()
                .map(|o| State::present_owned(def, o))
                .collect())
        }
        // Objects read from the store are parsed for the reader: presented without a copy.
        _ => Ok(raw
            .into_iter()
            .map(|o| State::present_owned(def, Arc::unwrap_or_clone(o)))
            .collect()),
    }
}

async fn call(
    host: &dyn Host,
    conv: &CrdConversion,
    webhook: &Value,
    objects: &[Value],
    desired: &str,
) -> ApiResult<Vec<Value>> {
    let source = objects
        .first()
        .and_then(|o| o.get("apiVersion"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let uid = uuid::Uuid::new_v4().to_string();
    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
    });
    let started = Instant::now();
    let result = exchange(host, webhook, &review, &uid, objects, desired).await;
    let single = |field: &str| -> String {
        match objects {
            [one] => one
                .pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            _ => String::new(),
        }
    };
    let outcome = match &result {
        Ok(converted) => WebhookOutcome::Converted {
            objects: converted.len(),
        },
        Err(why) => WebhookOutcome::Failed { error: why.clone() },
    };
    host.client().record(WebhookCall {
        configuration_kind: "CustomResourceDefinition".into(),
        configuration: conv.crd.clone(),
        webhook: conv.crd.clone(),
        operation: "CONVERT".into(),
        resource: format!("{desired}/{}", conv.plural),
        subresource: String::new(),
        namespace: single("namespace"),
        name: single("name"),
        dry_run: false,
        uid,
        outcome,
        duration: started.elapsed(),
    });
    result.map_err(|why| failed(&source, &conv.kind, why))
}

async fn exchange(
    host: &dyn Host,
    webhook: &Value,
    review: &Value,
    uid: &str,
    objects: &[Value],
    desired: &str,
) -> Result<Vec<Value>, String> {
    let versions: Vec<&str> = webhook
        .get("conversionReviewVersions")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !versions.contains(&"v1") {
        return Err(format!(
            "none of the conversionReviewVersions {versions:?} are supported (v1)"
        ));
    }
    let client_config = webhook.get("clientConfig").cloned().unwrap_or(Value::Null);
    let services = host.services();
    let answer = client::post_json(
        host.client(),
        &services,
        &client_config,
        CONVERSION_TIMEOUT,
        review,
    )
    .await
    .map_err(|e| e.to_string())?;
    let av = answer
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = answer.get("kind").and_then(Value::as_str).unwrap_or("");
    if av != "apiextensions.k8s.io/v1" || kind != "ConversionReview" {
        return Err(format!(
            "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {av}, Kind={kind}"
        ));
    }
    let response = answer
        .get("response")
        .filter(|r| r.is_object())
        .ok_or("no response provided")?;
    let got_uid = response.get("uid").and_then(Value::as_str).unwrap_or("");
    if got_uid != uid {
        return Err(format!("expected response uid {uid:?}, got {got_uid:?}"));
    }
    let status = response
        .pointer("/result/status")
        .and_then(Value::as_str)
        .unwrap_or("");
    if status != "Success" {
        let message = response
            .pointer("/result/message")
            .and_then(Value::as_str)
            .unwrap_or("");
        return Err(message.to_string());
    }
    let converted = response
        .get("convertedObjects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if converted.len() != objects.len() {
        return Err(format!(
            "returned {} objects, expected {}",
            converted.len(),
            objects.len()
        ));
    }
    converted
        .into_iter()
        .zip(objects)
        .enumerate()
        .map(|(i, (out, orig))| {
            restore(out, orig, desired)
                .map_err(|why| format!("returned invalid converted object at index {i}: {why}"))
        })
        .collect()
}

/// Checks one converted object and restores its metadata but labels and annotations.
fn restore(mut out: Value, orig: &Value, desired: &str) -> Result<Value, String> {
    if !out.is_object() {
        return Err("not an object".into());
    }
    let got = out.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if got != desired {
        return Err(format!(
            "invalid groupVersion (expected {desired}, received {got})"
        ));
    }
    let (k_in, k_out) = (
        orig.get("kind").and_then(Value::as_str).unwrap_or(""),
        out.get("kind").and_then(Value::as_str).unwrap_or(""),
    );
    if k_in != k_out {
        return Err(format!("invalid kind (expected {k_in}, received {k_out})"));
    }
    for field in ["name", "namespace", "uid"] {
        let a = orig.pointer(&format!("/metadata/{field}"));
        let b = out.pointer(&format!("/metadata/{field}"));
        if a != b {
            return Err(format!(
                "must not change metadata.{field} (from {} to {})",
                a.cloned().unwrap_or(Value::Null),
                b.cloned().unwrap_or(Value::Null)
            ));
        }
    }
    let mut meta = orig.get("metadata").cloned().unwrap_or_else(|| json!({}));
    for field in ["labels", "annotations"] {
        match out.pointer(&format!("/metadata/{field}")) {
            Some(v) if v.is_object() => meta[field] = v.clone(),
            Some(Value::Null) | None => {
                if let Some(m) = meta.as_object_mut() {
                    m.remove(field);
                }
            }
            Some(other) => {
                return Err(format!("metadata.{field} must be a map, got {other}"));
            }
        }
    }
    out["metadata"] = meta;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restores_metadata_but_labels() {
        let orig = json!({"apiVersion": "g/v1", "kind": "K",
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "5", "labels": {"x": "1"}}});
        let out = json!({"apiVersion": "g/v2", "kind": "K",
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "labels": {"y": "2"}, "generation": 9}, "spec": {}});
        let r = restore(out, &orig, "g/v2").expect("valid");
        assert_eq!(r["metadata"]["resourceVersion"], "5");
        assert_eq!(r["metadata"]["labels"], json!({"y": "2"}));
        assert!(r["metadata"].get("generation").is_none());
        let bad = json!({"apiVersion": "g/v2", "kind": "K", "metadata": {"name": "b", "namespace": "n", "uid": "u"}});
        assert!(restore(bad, &orig, "g/v2").is_err());
        let wrong_version = json!({"apiVersion": "g/v1", "kind": "K", "metadata": {}});
        assert!(restore(wrong_version, &orig, "g/v2").is_err());
    }
}
