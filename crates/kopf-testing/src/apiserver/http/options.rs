//! The options of writes and deletes, from the query string, the headers and the
//! DeleteOptions body.

use axum::http::{HeaderMap, header};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::semantics::{DeleteOptions, WriteOptions};

use super::negotiation::header_str;
use super::query::Query;

pub(super) fn write_options(query: &Query, headers: &HeaderMap) -> ApiResult<WriteOptions> {
    let dry_run = match query.get("dryRun") {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unsupported dryRun value {other:?}: supported values: \"All\""
            )));
        }
    };
    Ok(WriteOptions {
        dry_run,
        field_manager: query.get("fieldManager").map(str::to_string),
        force: query.bool("force")?,
        user_agent: header_str(headers, header::USER_AGENT),
        apply: false,
        field_validation: match query.get("fieldValidation") {
            None | Some("") => None,
            Some(v @ ("Ignore" | "Warn" | "Strict")) => Some(v.to_string()),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "fieldValidation must be one of \"Ignore\", \"Warn\" or \"Strict\", got {other:?}"
                )));
            }
        },
    })
}

pub(super) fn delete_options(query: &Query, body: &Bytes) -> ApiResult<DeleteOptions> {
    let parsed: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the DeleteOptions body could not be decoded: {e}"))
        })?
    };
    let s = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let dry_run = parsed
        .get("dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "All"))
        || query.get("dryRun") == Some("All");
    Ok(DeleteOptions {
        propagation: s(parsed.get("propagationPolicy"))
            .or_else(|| query.get("propagationPolicy").map(str::to_string)),
        orphan_dependents: parsed
            .get("orphanDependents")
            .and_then(Value::as_bool)
            .or(query.bool("orphanDependents")?),
        precondition_uid: s(parsed.pointer("/preconditions/uid")),
        precondition_rv: s(parsed.pointer("/preconditions/resourceVersion")),
        dry_run,
        grace_period: parsed
            .get("gracePeriodSeconds")
            .and_then(Value::as_i64)
            .or_else(|| query.get("gracePeriodSeconds").and_then(|g| g.parse().ok())),
    })
}
