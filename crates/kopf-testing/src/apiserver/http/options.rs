//! The options of writes and deletes, from the query string, the headers and the
//! DeleteOptions body.

use axum::http::{HeaderMap, header};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::semantics::{DeleteOptions, WriteOptions};

use super::negotiation::header_str;
use super::params;
use super::query::Query;

/// The options of a write; `options_kind` names them in errors (`CreateOptions`,
/// `UpdateOptions`, `PatchOptions`).
pub(super) fn write_options(
    query: &Query,
    headers: &HeaderMap,
    options_kind: &str,
) -> ApiResult<WriteOptions> {
    // ValidateCreateOptions (and its Update and Patch forms): every cause in one 422.
    let mut causes = params::field_manager(query.get("fieldManager").unwrap_or(""));
    let dry_run = params::dry_run_values(&query.all("dryRun")).unwrap_or_else(|c| {
        causes.push(c);
        false
    });
    let field_validation =
        params::field_validation(query.get("fieldValidation")).unwrap_or_else(|c| {
            causes.push(c);
            None
        });
    if !causes.is_empty() {
        return Err(params::options_invalid(options_kind, causes));
    }
    Ok(WriteOptions {
        dry_run,
        field_manager: query.get("fieldManager").map(str::to_string),
        force: query.bool("force")?,
        user_agent: header_str(headers, header::USER_AGENT),
        apply: false,
        field_validation,
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
    let mut dry_values = query.all("dryRun");
    if let Some(list) = parsed.get("dryRun").and_then(Value::as_array) {
        dry_values.extend(list.iter().filter_map(Value::as_str));
    }
    let dry_run = params::dry_run(&dry_values, "DeleteOptions")?;
    let propagation = s(parsed.get("propagationPolicy"))
        .or_else(|| query.get("propagationPolicy").map(str::to_string));
    let orphan_dependents = parsed
        .get("orphanDependents")
        .and_then(Value::as_bool)
        .or(query.bool("orphanDependents")?);
    params::check_propagation(propagation.as_deref(), orphan_dependents)?;
    let grace_period = match parsed.get("gracePeriodSeconds").and_then(Value::as_i64) {
        Some(g) => Some(g),
        None => query.int("gracePeriodSeconds")?,
    };
    Ok(DeleteOptions {
        propagation,
        orphan_dependents,
        precondition_uid: s(parsed.pointer("/preconditions/uid")),
        precondition_rv: s(parsed.pointer("/preconditions/resourceVersion")),
        dry_run,
        grace_period,
    })
}
