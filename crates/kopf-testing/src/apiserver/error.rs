//! Kubernetes `Status` error objects, as kube-apiserver returns them.
//!
//! Every failed request is answered with one [`ApiError`], rendered as a
//! `{"kind":"Status","apiVersion":"v1",...}` body with the matching HTTP code.

use serde_json::{Value, json};

/// One failure cause inside `details.causes`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// Machine-readable reason, e.g. `FieldValueInvalid`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// The field the cause refers to, e.g. `metadata.name`.
    pub field: String,
}

/// An error answered to a client as a Kubernetes `Status` object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// The `reason` field (`NotFound`, `Conflict`, ...).
    pub reason: String,
    /// The `message` field.
    pub message: String,
    /// The `details` object, if any.
    pub details: Option<Value>,
    /// Seconds for the `Retry-After` header and `details.retryAfterSeconds`.
    pub retry_after: Option<u64>,
}

/// Names an object in error messages: `configmaps` or `kopfexamples.kopf.dev`.
pub fn qualified_resource(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

fn details(name: &str, group: &str, kind: &str) -> Value {
    let mut d = json!({ "name": name, "kind": kind });
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

impl ApiError {
    /// A bare error with a code, reason and message.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// Attaches a `details` object.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 for a path that names no resource.
    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 404 NotFound for an object.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified_resource(group, plural)),
        )
        .with_details(details(name, group, plural))
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!(
                "{} \"{name}\" already exists",
                qualified_resource(group, plural)
            ),
        )
        .with_details(details(name, group, plural))
    }

    /// 409 Conflict with a reason text.
    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified_resource(group, plural)
            ),
        )
        .with_details(details(name, group, plural))
    }

    /// 409 Conflict for a stale resourceVersion.
    pub fn stale(group: &str, plural: &str, name: &str) -> Self {
        Self::conflict(
            group,
            plural,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 403 Forbidden.
    pub fn forbidden(group: &str, plural: &str, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} \"{name}\" is forbidden: {why}",
                qualified_resource(group, plural)
            ),
        )
        .with_details(details(name, group, plural))
    }

    /// 422 Invalid with field causes; `kind` is the object's Kind.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let texts: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let message = if texts.len() == 1 {
            format!("{qualified} \"{name}\" is invalid: {}", texts[0])
        } else {
            format!("{qualified} \"{name}\" is invalid: [{}]", texts.join(", "))
        };
        let mut d = details(name, group, kind);
        d["causes"] = Value::Array(
            causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect(),
        );
        Self::new(422, "Invalid", message).with_details(d)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(verb: &str, resource: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("{verb} is not supported on resources of kind \"{resource}\""),
        )
        .with_details(json!({}))
    }

    /// 415 UnsupportedMediaType listing the accepted media types.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    /// 410 Expired.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
    }

    /// The reason that goes with a status code (for injected faults).
    pub fn reason_for_code(code: u16) -> &'static str {
        match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            406 => "NotAcceptable",
            409 => "Conflict",
            410 => "Expired",
            413 => "RequestEntityTooLarge",
            415 => "UnsupportedMediaType",
            422 => "Invalid",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "Unknown",
        }
    }

    /// The `Status` object body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        let mut details = self.details.clone();
        if let Some(secs) = self.retry_after {
            let d = details.get_or_insert_with(|| json!({}));
            d["retryAfterSeconds"] = json!(secs);
        }
        if let Some(d) = details {
            s["details"] = d;
        }
        s
    }
}

/// Shorthand for results in the server.
pub type ApiResult<T> = Result<T, ApiError>;

/// A single invalid-field cause.
pub fn cause(reason: &str, field: &str, message: impl Into<String>) -> Cause {
    Cause {
        reason: reason.to_string(),
        message: message.into(),
        field: field.to_string(),
    }
}
