//! Serving `AdmissionReview`s: which handlers review a request, running them, and the
//! response (allowed, warnings, an RFC 6902 patch from the handlers' merge patch, or a
//! denial with the best error's message and code).
//!
//! The review is read and written as JSON here rather than with kube's
//! `kube::core::admission` types (conversion reviews do use kube's types): their
//! `AdmissionRequest<DynamicObject>` re-serializes the object through `ObjectMeta` (the
//! handlers and the RFC 6902 patch would see a normalised copy — `null`s and unknown
//! metadata fields dropped — not what the API server sent) and requires `request.kind`;
//! their `AdmissionResponse` writes `patch` as an array of numbers rather than the base64
//! string Kubernetes writes for bytes, and an empty `status` on every allowed answer.

use std::sync::Arc;

use base64::Engine as _;
use kopf_core::causes::Reason;
use kopf_core::handler::{Cause, Extensions, HandlerError, PatchHandle};
use kopf_watch::Discovered;
use serde_json::{Value, json};

use crate::handlers::{Operation, ReviewInfo, Warnings, WebhookHandler, WebhookKind};

/// A request body that is not a review the server can answer: the server answers 400 with
/// this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadReview(pub String);

/// The parts of an `AdmissionReview` request the handlers need.
#[derive(Debug, Clone)]
pub struct AdmissionRequest {
    /// `apiVersion` of the review (answered with the same).
    pub api_version: String,
    /// `request.uid`.
    pub uid: String,
    /// `request.resource`: group, version, plural.
    pub resource: (String, String, String),
    /// `request.subResource`.
    pub sub_resource: Option<String>,
    /// `request.operation`.
    pub operation: Operation,
    /// `request.userInfo`.
    pub user_info: Value,
    /// `request.object` (None for DELETE).
    pub object: Option<Value>,
    /// `request.oldObject` (UPDATE and DELETE).
    pub old_object: Option<Value>,
    /// `request.dryRun`.
    pub dry_run: bool,
    /// `request.options`.
    pub options: Option<Value>,
}

fn object_or_none(v: Option<&Value>) -> Option<Value> {
    v.filter(|v| v.is_object()).cloned()
}

impl AdmissionRequest {
    /// Parses a review body; the error says what is wrong for the 400 answer.
    pub fn parse(body: &[u8]) -> Result<Self, BadReview> {
        let doc: Value = serde_json::from_slice(body).map_err(|e| {
            BadReview(format!(
                "malformed AdmissionReview: the body is not JSON ({e})"
            ))
        })?;
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
        let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        if kind != "AdmissionReview"
            || !matches!(
                api_version,
                "admission.k8s.io/v1" | "admission.k8s.io/v1beta1"
            )
        {
            return Err(BadReview(format!(
                "malformed AdmissionReview: expected kind AdmissionReview of admission.k8s.io/v1 or v1beta1, got kind {kind:?} of {api_version:?}"
            )));
        }
        let req = doc
            .get("request")
            .filter(|r| r.is_object())
            .ok_or_else(|| BadReview("malformed AdmissionReview: no request".into()))?;
        let text = |field: &str| {
            req.get(field)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .ok_or_else(|| {
                    BadReview(format!(
                        "malformed AdmissionReview: request.{field} is missing"
                    ))
                })
        };
        let uid = text("uid")?;
        let op = text("operation")?;
        let operation = Operation::parse(&op).ok_or_else(|| {
            BadReview(format!(
                "malformed AdmissionReview: request.operation {op:?} is not CREATE, UPDATE, DELETE or CONNECT"
            ))
        })?;
        let resource = req
            .get("resource")
            .filter(|r| r.is_object())
            .ok_or_else(|| {
                BadReview("malformed AdmissionReview: request.resource is missing".into())
            })?;
        let part = |f: &str| {
            resource
                .get(f)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (group, version, plural) = (part("group"), part("version"), part("resource"));
        if version.is_empty() || plural.is_empty() {
            return Err(BadReview(
                "malformed AdmissionReview: request.resource needs a version and a resource".into(),
            ));
        }
        let user_info = req
            .get("userInfo")
            .filter(|u| u.is_object())
            .cloned()
            .ok_or_else(|| {
                BadReview("malformed AdmissionReview: request.userInfo is missing".into())
            })?;
        let object = object_or_none(req.get("object"));
        let old_object = object_or_none(req.get("oldObject"));
        match operation {
            Operation::Delete if old_object.is_none() => {
                return Err(BadReview(
                    "malformed AdmissionReview: request.oldObject is missing for DELETE".into(),
                ));
            }
            Operation::Create | Operation::Update if object.is_none() => {
                return Err(BadReview(format!(
                    "malformed AdmissionReview: request.object is missing for {operation}"
                )));
            }
            _ => {}
        }
        Ok(AdmissionRequest {
            api_version: api_version.to_string(),
            uid,
            resource: (group, version, plural),
            sub_resource: req
                .get("subResource")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            operation,
            user_info,
            object,
            old_object,
            dry_run: req.get("dryRun").and_then(Value::as_bool).unwrap_or(false),
            options: req.get("options").filter(|o| o.is_object()).cloned(),
        })
    }

    /// `plural.version.group` of the reviewed resource, for messages.
    pub fn resource_name(&self) -> String {
        let (g, v, p) = &self.resource;
        if g.is_empty() {
            format!("{p}.{v}")
        } else {
            format!("{p}.{v}.{g}")
        }
    }

    /// The body the filters and `Body` see: the object, or the old one for DELETE.
    pub fn body(&self) -> Value {
        self.object
            .clone()
            .or_else(|| self.old_object.clone())
            .unwrap_or(Value::Null)
    }
}

/// Admission handlers with the resources they resolved to, ready to review requests.
#[derive(Clone, Default)]
pub struct Reviewer {
    handlers: Vec<(WebhookHandler, Vec<Discovered>)>,
    extensions: Extensions,
}

impl std::fmt::Debug for Reviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.handlers.iter().map(|(h, _)| &h.id))
            .finish()
    }
}

impl Reviewer {
    /// Handlers, each with the served resources its selector resolved to; `extensions`
    /// are the operator-wide values handlers can extract (the client...).
    pub fn new(handlers: Vec<(WebhookHandler, Vec<Discovered>)>, extensions: Extensions) -> Self {
        Reviewer {
            handlers,
            extensions,
        }
    }

    /// The handlers and their resources.
    pub fn handlers(&self) -> &[(WebhookHandler, Vec<Discovered>)] {
        &self.handlers
    }

    /// Answers a review body: `Err` is a 400 (not a review); `Ok` is the review to send
    /// back (allowed or denied). `only` restricts it to one handler (the id in the URL).
    pub async fn review(&self, body: &[u8], only: Option<&str>) -> Result<Value, BadReview> {
        let request = AdmissionRequest::parse(body)?;
        Ok(self.answer(&request, only).await)
    }

    /// Answers a parsed request.
    pub async fn answer(&self, request: &AdmissionRequest, only: Option<&str>) -> Value {
        let for_resource = self.handlers_for(request, only);
        if for_resource.is_empty() {
            let what = match only {
                Some(id) => format!(
                    "no admission handler {id:?} for {}",
                    request.resource_name()
                ),
                None => format!("no admission handlers for {}", request.resource_name()),
            };
            tracing::warn!("Denying the review {}: {what}.", request.uid);
            return deny(request, &what, 404, Vec::new());
        }
        let body = request.body();
        let selected: Vec<&WebhookHandler> = for_resource
            .into_iter()
            .filter(|h| {
                h.reviews(request.operation)
                    && h.options
                        .subresource
                        .matches(request.sub_resource.as_deref())
                    && h.spec.matches(&body)
                    && h.spec.matches_field(None, Some(&body))
            })
            .collect();
        let warnings = Warnings::default();
        let patch = PatchHandle::default();
        let cause = self.cause(request, &body, &warnings);
        let errors = run(request, &selected, &cause, &patch).await;
        let warnings = warnings.get();
        if let Some(best) = errors.into_iter().min_by_key(rank) {
            let code = match &best {
                HandlerError::Admission { code, .. } => *code,
                _ => 500,
            };
            return deny(request, &best.to_string(), code, warnings);
        }
        allow(request, &body, &patch.get(), warnings)
    }

    /// The handlers for the request's resource (only the one named `only`, if given).
    fn handlers_for(&self, request: &AdmissionRequest, only: Option<&str>) -> Vec<&WebhookHandler> {
        let (group, _, plural) = &request.resource;
        self.handlers
            .iter()
            .filter(|(h, resources)| {
                only.is_none_or(|id| h.id == id)
                    && resources
                        .iter()
                        .any(|d| d.api_resource.group == *group && d.api_resource.plural == *plural)
            })
            .map(|(h, _)| h)
            .collect()
    }

    /// The cause the handlers see: the object, its diff, and the review's details and
    /// warnings among the extensions.
    fn cause(&self, request: &AdmissionRequest, body: &Value, warnings: &Warnings) -> Cause {
        let mut extensions = self.extensions.clone();
        extensions.insert(ReviewInfo {
            uid: request.uid.clone(),
            operation: request.operation,
            dry_run: request.dry_run,
            user_info: request.user_info.clone(),
            sub_resource: request.sub_resource.clone(),
            options: request.options.clone(),
        });
        extensions.insert(warnings.clone());
        let reason = match request.operation {
            Operation::Create => Reason::Create,
            Operation::Update => Reason::Update,
            Operation::Delete => Reason::Delete,
            Operation::Connect => Reason::Noop,
        };
        let mut cause = Cause::for_body(reason, body.clone());
        cause.old = request.old_object.clone();
        cause.new = request.object.clone();
        cause.diff = kopf_diff::diff(request.old_object.as_ref(), request.object.as_ref());
        cause.extensions = extensions;
        cause
    }
}

/// Runs the selected handlers at once, each in a task of its own; their errors.
async fn run(
    request: &AdmissionRequest,
    selected: &[&WebhookHandler],
    cause: &Cause,
    patch: &PatchHandle,
) -> Vec<HandlerError> {
    let tasks: Vec<_> = selected
        .iter()
        .map(|h| {
            let mut cause = cause.clone();
            // Validating handlers cannot change the object: their patch is dropped.
            cause.patch = match h.kind {
                WebhookKind::Mutating => patch.clone(),
                WebhookKind::Validating => PatchHandle::default(),
            };
            let handler = h.spec.handler.clone();
            let id = h.id.clone();
            let span = tracing::info_span!("webhook", handler = %id, uid = %request.uid);
            let task = tokio::spawn(tracing::Instrument::instrument(
                async move { handler.call(cause).await },
                span,
            ));
            (id, task)
        })
        .collect();
    let mut errors = Vec::new();
    for (id, task) in tasks {
        let result = task
            .await
            .unwrap_or_else(|e| Err(HandlerError::from_join(e)));
        match result {
            Ok(_) => tracing::debug!("Webhook '{id}' succeeded."),
            Err(e) => {
                tracing::info!(
                    "Webhook '{id}' denied {} of {}: {e}",
                    request.operation,
                    request.resource_name()
                );
                errors.push(e);
            }
        }
    }
    errors
}

/// The review allowing the request: the warnings, and the mutating handlers' merge patch
/// as an RFC 6902 patch of the object (denied if it cannot be serialized).
fn allow(request: &AdmissionRequest, body: &Value, merge: &Value, warnings: Vec<String>) -> Value {
    let mut response = json!({"uid": request.uid, "allowed": true});
    if !warnings.is_empty() {
        response["warnings"] = json!(warnings);
    }
    if !is_empty_patch(merge) && request.object.is_some() {
        let mut patched = body.clone();
        json_patch::merge(&mut patched, merge);
        let ops = json_patch::diff(body, &patched);
        if !ops.0.is_empty() {
            match serde_json::to_vec(&ops) {
                Ok(bytes) => {
                    response["patchType"] = json!("JSONPatch");
                    response["patch"] =
                        json!(base64::engine::general_purpose::STANDARD.encode(bytes));
                }
                Err(e) => {
                    return deny(
                        request,
                        &format!("the mutation cannot be serialized: {e}"),
                        500,
                        Vec::new(),
                    );
                }
            }
        }
    }
    wrap(request, response)
}

fn is_empty_patch(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// Kopf's preference among errors for the denial: admission, permanent, temporary, other.
fn rank(e: &HandlerError) -> u8 {
    match e {
        HandlerError::Admission { .. } => 0,
        HandlerError::Permanent { .. } => 1,
        HandlerError::Temporary { .. } => 2,
        HandlerError::Other { .. } => 3,
    }
}

fn deny(request: &AdmissionRequest, message: &str, code: u16, warnings: Vec<String>) -> Value {
    let mut response = json!({
        "uid": request.uid,
        "allowed": false,
        "status": {"message": message, "code": code},
    });
    if !warnings.is_empty() {
        response["warnings"] = json!(warnings);
    }
    wrap(request, response)
}

fn wrap(request: &AdmissionRequest, response: Value) -> Value {
    json!({
        "apiVersion": request.api_version,
        "kind": "AdmissionReview",
        "response": response,
    })
}

/// A shared reviewer (the server's state).
pub type SharedReviewer = Arc<Reviewer>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::{AdmissionError, WebhookOptions};
    use kopf_core::extract::{IntoHandler, Spec};
    use kube::core::ApiResource;

    fn discovered(group: &str, plural: &str) -> Discovered {
        Discovered {
            api_resource: ApiResource {
                group: group.into(),
                version: "v1".into(),
                api_version: format!("{group}/v1"),
                kind: "KopfExample".into(),
                plural: plural.into(),
            },
            singular: "kopfexample".into(),
            short_names: vec![],
            namespaced: true,
            verbs: vec!["list".into(), "watch".into(), "patch".into()],
            status_subresource: true,
            preferred: true,
        }
    }

    fn handler<Args>(
        kind: WebhookKind,
        id: &str,
        f: impl IntoHandler<Args>,
        options: WebhookOptions,
    ) -> (WebhookHandler, Vec<Discovered>) {
        (
            WebhookHandler::new(kind, "kopfexamples", id, f.into_handler(), options),
            vec![discovered("kopf.dev", "kopfexamples")],
        )
    }

    fn request(operation: &str, object: Value, old: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "kopf.dev", "version": "v1", "kind": "KopfExample"},
                "resource": {"group": "kopf.dev", "version": "v1", "resource": "kopfexamples"},
                "name": "x", "namespace": "default", "operation": operation,
                "userInfo": {"username": "alice", "groups": ["devs"]},
                "object": object, "oldObject": old, "dryRun": false,
            }
        }))
        .unwrap_or_default()
    }

    fn obj(spec: Value) -> Value {
        json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
               "metadata": {"name": "x", "namespace": "default", "labels": {"tier": "gold"}},
               "spec": spec})
    }

    async fn require_field(Spec(spec): Spec, w: Warnings) -> Result<(), AdmissionError> {
        w.push("looked at it");
        if spec.get("field").is_none() {
            return Err(AdmissionError::with_code("spec.field is required", 422));
        }
        Ok(())
    }

    async fn label_it(patch: PatchHandle) -> Result<(), HandlerError> {
        patch.merge(json!({"metadata": {"labels": {"checked": "yes"}}, "spec": {"n": 1}}));
        Ok(())
    }

    async fn boom() -> Result<(), HandlerError> {
        panic!("boom")
    }

    #[tokio::test]
    async fn malformed_reviews_are_bad_requests_with_a_reason() {
        let r = Reviewer::default();
        for (body, needle) in [
            (b"{".to_vec(), "not JSON"),
            (br#"{"kind":"Pod","apiVersion":"v1"}"#.to_vec(), "expected kind AdmissionReview"),
            (
                br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}"#.to_vec(),
                "no request",
            ),
            (
                br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"1","operation":"CREATE","resource":{"version":"v1","resource":"pods"}}}"#.to_vec(),
                "userInfo is missing",
            ),
            (
                br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"1","operation":"CREATE","userInfo":{},"resource":{"version":"v1","resource":"pods"}}}"#.to_vec(),
                "object is missing for CREATE",
            ),
        ] {
            let err = r.review(&body, None).await.expect_err("a bad review");
            assert!(err.0.contains(needle), "{needle}: {}", err.0);
        }
    }

    #[tokio::test]
    async fn unknown_resources_are_denied_not_failed() {
        let r = Reviewer::new(
            vec![handler(
                WebhookKind::Validating,
                "v",
                require_field,
                WebhookOptions::new(),
            )],
            Extensions::default(),
        );
        let mut body: Value =
            serde_json::from_slice(&request("CREATE", obj(json!({})), Value::Null))
                .unwrap_or_default();
        body["request"]["resource"]["resource"] = json!("pods");
        body["request"]["resource"]["group"] = json!("");
        let out = r
            .review(&serde_json::to_vec(&body).unwrap_or_default(), None)
            .await
            .expect("a review");
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["uid"], "u-1");
        assert_eq!(out["response"]["status"]["code"], 404);
        assert!(
            out["response"]["status"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("no admission handlers for pods.v1")
        );
        let out = r
            .review(
                &request("CREATE", obj(json!({})), Value::Null),
                Some("other"),
            )
            .await
            .expect("a review");
        assert_eq!(out["response"]["allowed"], false);
    }

    #[tokio::test]
    async fn denials_carry_the_message_code_and_warnings() {
        let r = Reviewer::new(
            vec![handler(
                WebhookKind::Validating,
                "v",
                require_field,
                WebhookOptions::new(),
            )],
            Extensions::default(),
        );
        let out = r
            .review(&request("CREATE", obj(json!({})), Value::Null), Some("v"))
            .await
            .expect("a review");
        assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(out["kind"], "AdmissionReview");
        let resp = &out["response"];
        assert_eq!(resp["allowed"], false);
        assert_eq!(
            resp["status"],
            json!({"message": "spec.field is required", "code": 422})
        );
        assert_eq!(resp["warnings"], json!(["looked at it"]));
        let ok = r
            .review(
                &request("CREATE", obj(json!({"field": 1})), Value::Null),
                Some("v"),
            )
            .await
            .expect("a review");
        assert_eq!(ok["response"]["allowed"], true);
        assert!(ok["response"].get("patch").is_none());
    }

    #[tokio::test]
    async fn mutations_become_rfc6902_patches_and_validators_cannot_mutate() {
        let r = Reviewer::new(
            vec![
                handler(WebhookKind::Mutating, "m", label_it, WebhookOptions::new()),
                handler(
                    WebhookKind::Validating,
                    "v",
                    label_it,
                    WebhookOptions::new(),
                ),
            ],
            Extensions::default(),
        );
        let body = obj(json!({"field": 1}));
        let out = r
            .review(&request("CREATE", body.clone(), Value::Null), Some("m"))
            .await
            .expect("a review");
        let resp = &out["response"];
        assert_eq!(resp["allowed"], true);
        assert_eq!(resp["patchType"], "JSONPatch");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(resp["patch"].as_str().unwrap_or(""))
            .expect("base64");
        let patch: json_patch::Patch = serde_json::from_slice(&raw).expect("a JSON patch");
        let mut patched = body.clone();
        json_patch::patch(&mut patched, &patch).expect("applies");
        assert_eq!(patched["metadata"]["labels"]["checked"], "yes");
        assert_eq!(patched["metadata"]["labels"]["tier"], "gold");
        assert_eq!(patched["spec"], json!({"field": 1, "n": 1}));
        let validated = r
            .review(&request("CREATE", body, Value::Null), Some("v"))
            .await
            .expect("a review");
        assert!(validated["response"].get("patch").is_none());
    }

    #[tokio::test]
    async fn a_panicking_handler_denies_and_the_next_review_is_served() {
        let r = Reviewer::new(
            vec![
                handler(WebhookKind::Validating, "boom", boom, WebhookOptions::new()),
                handler(
                    WebhookKind::Validating,
                    "v",
                    require_field,
                    WebhookOptions::new(),
                ),
            ],
            Extensions::default(),
        );
        let out = r
            .review(
                &request("CREATE", obj(json!({"field": 1})), Value::Null),
                None,
            )
            .await
            .expect("a review");
        assert_eq!(out["response"]["allowed"], false);
        assert_eq!(out["response"]["status"]["code"], 500);
        assert!(
            out["response"]["status"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("panicked")
        );
        let out = r
            .review(
                &request("CREATE", obj(json!({"field": 1})), Value::Null),
                Some("v"),
            )
            .await
            .expect("a review");
        assert_eq!(out["response"]["allowed"], true);
    }

    #[tokio::test]
    async fn the_admission_error_wins_over_other_errors() {
        async fn other() -> Result<(), HandlerError> {
            Err(HandlerError::other("plain failure"))
        }
        let r = Reviewer::new(
            vec![
                handler(WebhookKind::Validating, "o", other, WebhookOptions::new()),
                handler(
                    WebhookKind::Validating,
                    "v",
                    require_field,
                    WebhookOptions::new(),
                ),
            ],
            Extensions::default(),
        );
        let out = r
            .review(&request("CREATE", obj(json!({})), Value::Null), None)
            .await
            .expect("a review");
        assert_eq!(out["response"]["status"]["code"], 422);
    }

    #[tokio::test]
    async fn filters_select_the_handlers() {
        let r = Reviewer::new(
            vec![
                handler(
                    WebhookKind::Validating,
                    "updates",
                    require_field,
                    WebhookOptions::new().operation(Operation::Update),
                ),
                handler(
                    WebhookKind::Validating,
                    "silver",
                    require_field,
                    WebhookOptions::new().label("tier", "silver"),
                ),
                handler(
                    WebhookKind::Validating,
                    "status",
                    require_field,
                    WebhookOptions::new().subresource("status"),
                ),
                handler(
                    WebhookKind::Mutating,
                    "mutator",
                    require_field,
                    WebhookOptions::new(),
                ),
            ],
            Extensions::default(),
        );
        // The first three do not review the creation of a gold object's main body, and a
        // mutating handler skips deletions: these requests are allowed.
        for id in ["updates", "silver", "status"] {
            let created = r
                .review(&request("CREATE", obj(json!({})), Value::Null), Some(id))
                .await
                .expect("a review");
            assert_eq!(created["response"]["allowed"], true, "{id}");
        }
        let deleted = r
            .review(
                &request("DELETE", Value::Null, obj(json!({}))),
                Some("mutator"),
            )
            .await
            .expect("a review");
        assert_eq!(deleted["response"]["allowed"], true);
        let updated = r
            .review(&request("UPDATE", obj(json!({})), obj(json!({}))), None)
            .await
            .expect("a review");
        assert_eq!(updated["response"]["allowed"], false, "{updated}");
    }
}
