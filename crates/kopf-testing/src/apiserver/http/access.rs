//! The access reviews of `authorization.k8s.io/v1`: who asks (the review's `spec`, or for a
//! SelfSubjectAccessReview the requester: the impersonated user of `Impersonate-User` and
//! `Impersonate-Group`, else the fake server's own user, a member of `system:masters`), then
//! the answer of [`State::decide_access`](crate::apiserver::semantics::State::decide_access).

use std::sync::Arc;

use axum::http::HeaderMap;
use serde_json::Value;

use crate::apiserver::error::{ApiError, ApiResult, cause};
use crate::apiserver::semantics::{AccessRequest, SUPERUSER_GROUP, answered};
use crate::apiserver::sync::lock;

use super::routing::ReviewKind;
use super::shared::Shared;

/// The user of requests that impersonate nobody.
pub(super) const SERVER_USER: &str = "kopf-fake-admin";

/// Answers one review (already decoded): the review with its `status`.
pub(super) fn review(
    shared: &Arc<Shared>,
    kind: ReviewKind,
    namespace: Option<&str>,
    headers: &HeaderMap,
    mut review: Value,
) -> ApiResult<Value> {
    let name = review
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let spec = review.get("spec").cloned().unwrap_or(Value::Null);
    let self_review = kind == ReviewKind::SelfSubject;
    let mut request = AccessRequest::from_spec(kind.kind(), &name, &spec, self_review)?;
    if kind == ReviewKind::LocalSubject {
        if request.resource.is_none() {
            return Err(ApiError::invalid(
                "authorization.k8s.io",
                kind.kind(),
                &name,
                vec![cause(
                    "FieldValueInvalid",
                    "spec.nonResourceAttributes",
                    "Invalid value: disallowed on this kind of request",
                )],
            ));
        }
        let ns = namespace.unwrap_or("");
        let asked = request
            .resource
            .as_ref()
            .map_or("", |r| r.namespace.as_str());
        if asked != ns {
            return Err(ApiError::bad_request(format!(
                "spec.resourceAttributes.namespace must match namespace: {ns}"
            )));
        }
    }
    if self_review {
        let (user, groups) = requester(headers);
        request.user = user;
        request.groups = groups;
    }
    let decision = lock(&shared.state).decide_access(&request);
    if review.get("apiVersion").is_none() {
        review["apiVersion"] = Value::String("authorization.k8s.io/v1".into());
    }
    if review.get("kind").is_none() {
        review["kind"] = Value::String(kind.kind().into());
    }
    Ok(answered(review, &decision))
}

/// The requester: the impersonated user and groups (with the groups kube adds: a
/// ServiceAccount's, and `system:authenticated`), or the server's own user.
fn requester(headers: &HeaderMap) -> (String, Vec<String>) {
    let Some(user) = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())
        .filter(|u| !u.is_empty())
    else {
        return (
            SERVER_USER.into(),
            vec![SUPERUSER_GROUP.into(), "system:authenticated".into()],
        );
    };
    let mut groups: Vec<String> = headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(String::from)
        .collect();
    if groups.is_empty()
        && let Some(ns) = user
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .map(|(ns, _)| ns)
    {
        groups.push("system:serviceaccounts".into());
        groups.push(format!("system:serviceaccounts:{ns}"));
    }
    if user != "system:anonymous" && !groups.iter().any(|g| g == "system:authenticated") {
        groups.push("system:authenticated".into());
    }
    (user.to_string(), groups)
}
