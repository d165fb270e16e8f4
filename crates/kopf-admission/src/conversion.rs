//! CRD conversion webhooks (`ConversionReview` v1): one function per CRD converts objects
//! between its versions; the framework sets the desired `apiVersion`, checks that the
//! identity (name, namespace, uid) is untouched, and reports failures to the API server.
//!
//! ```
//! use kopf_admission::Converter;
//! use serde_json::{json, Value};
//!
//! // v1 has `spec.size: "10Gi"`; v2 has `spec.storage: {size: "10Gi"}`.
//! let converter = Converter::new("kopfexamples.kopf.dev", |mut obj: Value, to: &str| {
//!     let spec = obj.get_mut("spec").and_then(Value::as_object_mut).ok_or("no spec")?;
//!     match to {
//!         "v2" => {
//!             if let Some(size) = spec.remove("size") {
//!                 spec.insert("storage".into(), json!({"size": size}));
//!             }
//!         }
//!         "v1" => {
//!             if let Some(size) = spec.remove("storage").and_then(|s| s.get("size").cloned()) {
//!                 spec.insert("size".into(), size);
//!             }
//!         }
//!         other => return Err(format!("unknown version {other}")),
//!     }
//!     Ok(obj)
//! });
//! # let _ = converter;
//! ```

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use kube::core::Status;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use serde_json::{Value, json};

use crate::review::BadReview;

type ConvertFn = dyn Fn(Value, &str) -> Result<Value, String> + Send + Sync;

/// The conversion function of one CRD.
#[derive(Clone)]
pub struct Converter {
    /// The CRD's name (`<plural>.<group>`).
    pub crd: String,
    f: Arc<ConvertFn>,
}

impl std::fmt::Debug for Converter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Converter").field("crd", &self.crd).finish()
    }
}

impl Converter {
    /// A converter for the CRD `crd` (`<plural>.<group>`): `f(object, version)` returns the
    /// object in `version` (e.g. `"v2"`). It is only called for objects in another version;
    /// the framework sets `apiVersion` on the result. An `Err` fails the whole review, and
    /// the API server answers the client with the message.
    pub fn new<E: std::fmt::Display>(
        crd: &str,
        f: impl Fn(Value, &str) -> Result<Value, E> + Send + Sync + 'static,
    ) -> Self {
        Converter {
            crd: crd.to_string(),
            f: Arc::new(move |obj, to| f(obj, to).map_err(|e| e.to_string())),
        }
    }

    /// The CRD's group (after the first dot of its name).
    pub fn group(&self) -> &str {
        self.crd.split_once('.').map(|(_, g)| g).unwrap_or("")
    }

    fn convert_one(&self, obj: Value, desired: &str) -> Result<Value, String> {
        let from = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if from == desired {
            return Ok(obj);
        }
        let (group, version) = desired.rsplit_once('/').unwrap_or(("", desired));
        if group != self.group() {
            return Err(format!(
                "cannot convert to {desired}: {} is in group {}",
                self.crd,
                self.group()
            ));
        }
        let identity = |o: &Value| {
            ["name", "namespace", "uid"].map(|k| o.pointer(&format!("/metadata/{k}")).cloned())
        };
        let before = identity(&obj);
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let f = self.f.clone();
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| f(obj, version)))
            .map_err(|p| {
                let what = kopf_core::text::panic_message(p.as_ref()).unwrap_or_default();
                format!("the converter of {} panicked: {what}", self.crd)
            })?
            .map_err(|e| format!("cannot convert {name:?} from {from} to {desired}: {e}"))?;
        let mut out = result;
        let Some(o) = out.as_object_mut() else {
            return Err(format!(
                "the converter of {} returned a non-object for {name:?}",
                self.crd
            ));
        };
        o.insert("apiVersion".into(), json!(desired));
        if identity(&out) != before {
            return Err(format!(
                "the converter of {} changed the name, namespace or uid of {name:?}",
                self.crd
            ));
        }
        Ok(out)
    }
}

/// Answers a `ConversionReview` for a CRD: `Err` is a 400 (not a review); `Ok` is the review
/// to send back (kube's type: the same `apiVersion` as the request, `result.status`
/// `Success` with the converted objects, or `Failure` with the message).
pub fn convert(
    converters: &[Converter],
    crd: &str,
    body: &[u8],
) -> Result<ConversionReview, BadReview> {
    let mut request = parse(body)?;
    let desired = request.desired_api_version.clone();
    let objects = std::mem::take(&mut request.objects);
    let response = ConversionResponse::for_request(request);
    let converted = match converters.iter().find(|c| c.crd == crd) {
        None => Err(format!("no converter for the CRD {crd:?}")),
        Some(converter) => objects
            .into_iter()
            .map(|obj| converter.convert_one(obj, &desired))
            .collect::<Result<Vec<_>, _>>(),
    };
    let response = match converted {
        Ok(converted) => {
            tracing::debug!(
                "Converted {} object(s) of {crd} to {desired}.",
                converted.len()
            );
            response.success(converted)
        }
        Err(message) => {
            tracing::warn!("Conversion of {crd} to {desired} failed: {message}");
            response.failure(Status::failure(&message, ""))
        }
    };
    Ok(response.into_review())
}

/// The request of a `ConversionReview` body (v1, or v1beta1 of older servers).
fn parse(body: &[u8]) -> Result<ConversionRequest, BadReview> {
    let doc: Value = serde_json::from_slice(body).map_err(|e| {
        BadReview(format!(
            "malformed ConversionReview: the body is not JSON ({e})"
        ))
    })?;
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if doc.get("kind").and_then(Value::as_str) != Some("ConversionReview")
        || !matches!(
            api_version,
            "apiextensions.k8s.io/v1" | "apiextensions.k8s.io/v1beta1"
        )
    {
        return Err(BadReview(
            "malformed ConversionReview: expected kind ConversionReview of apiextensions.k8s.io/v1"
                .into(),
        ));
    }
    let review: ConversionReview = serde_json::from_value(doc)
        .map_err(|e| BadReview(format!("malformed ConversionReview: {e}")))?;
    ConversionRequest::try_from(review)
        .map_err(|_| BadReview("malformed ConversionReview: no request".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn converter() -> Converter {
        Converter::new("kexes.kopf.dev", |mut obj: Value, to: &str| {
            match to {
                "v2" => obj["spec"]["renamed"] = obj["spec"]["field"].take(),
                "v1" => obj["spec"]["field"] = obj["spec"]["renamed"].take(),
                "v9" => panic!("boom"),
                "v8" => obj["metadata"]["name"] = json!("other"),
                _ => return Err("unknown version"),
            }
            Ok(obj)
        })
    }

    fn review(desired: &str, objects: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "u1", "desiredAPIVersion": desired, "objects": objects}
        }))
        .unwrap_or_default()
    }

    /// The review as the server sends it.
    fn to_value(review: Result<ConversionReview, BadReview>) -> Value {
        serde_json::to_value(review.expect("a review")).expect("serializable")
    }

    #[test]
    fn objects_are_converted_and_stamped() {
        let objs = json!([
            {"apiVersion": "kopf.dev/v1", "kind": "Kex", "metadata": {"name": "a"}, "spec": {"field": 1}},
            {"apiVersion": "kopf.dev/v2", "kind": "Kex", "metadata": {"name": "b"}, "spec": {"renamed": 2}},
        ]);
        let out = to_value(convert(
            &[converter()],
            "kexes.kopf.dev",
            &review("kopf.dev/v2", objs),
        ));
        assert_eq!(out["response"]["uid"], "u1");
        assert_eq!(out["response"]["result"]["status"], "Success");
        let converted = &out["response"]["convertedObjects"];
        assert_eq!(converted[0]["apiVersion"], "kopf.dev/v2");
        assert_eq!(converted[0]["spec"]["renamed"], 1);
        assert_eq!(converted[1]["spec"]["renamed"], 2);
    }

    #[test]
    fn failures_panics_and_identity_changes_fail_the_review() {
        for (desired, needle) in [
            ("kopf.dev/v3", "unknown version"),
            ("kopf.dev/v9", "panicked: boom"),
            ("kopf.dev/v8", "changed the name"),
            ("other.dev/v1", "in group kopf.dev"),
        ] {
            let objs =
                json!([{"apiVersion": "kopf.dev/v1", "metadata": {"name": "a"}, "spec": {}}]);
            let out = to_value(convert(
                &[converter()],
                "kexes.kopf.dev",
                &review(desired, objs),
            ));
            assert_eq!(out["response"]["result"]["status"], "Failure", "{desired}");
            let message = out["response"]["result"]["message"].as_str().unwrap_or("");
            assert!(message.contains(needle), "{desired}: {message}");
        }
        let out = to_value(convert(
            &[converter()],
            "nope.kopf.dev",
            &review("kopf.dev/v2", json!([])),
        ));
        assert_eq!(out["response"]["result"]["status"], "Failure");
    }

    #[test]
    fn malformed_reviews_are_bad_requests() {
        assert!(convert(&[], "x", b"not json").is_err());
        assert!(convert(&[], "x", br#"{"kind":"AdmissionReview"}"#).is_err());
        let no_request = br#"{"kind":"ConversionReview","apiVersion":"apiextensions.k8s.io/v1"}"#;
        let err = convert(&[], "x", no_request).expect_err("not a review");
        assert!(err.0.contains("no request"), "{}", err.0);
        let no_uid = br#"{"kind":"ConversionReview","apiVersion":"apiextensions.k8s.io/v1","request":{"desiredAPIVersion":"kopf.dev/v2","objects":[]}}"#;
        let err = convert(&[], "x", no_uid).expect_err("not a review");
        assert!(err.0.contains("uid"), "{}", err.0);
    }

    /// The answer has the request's `apiVersion` and uid, and a failure's result is
    /// `{"status": "Failure", "message": ...}` (no code or reason).
    #[test]
    fn answers_keep_the_request_version_and_uid() {
        let body = serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "ConversionReview",
            "request": {"uid": "u2", "desiredAPIVersion": "kopf.dev/v2", "objects": []}
        }))
        .unwrap_or_default();
        let out = to_value(convert(&[], "kexes.kopf.dev", &body));
        assert_eq!(out["apiVersion"], "apiextensions.k8s.io/v1beta1");
        assert_eq!(out["kind"], "ConversionReview");
        assert_eq!(out["response"]["uid"], "u2");
        assert_eq!(
            out["response"]["result"],
            json!({"status": "Failure", "message": "no converter for the CRD \"kexes.kopf.dev\""})
        );
    }
}
