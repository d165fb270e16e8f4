//! Managed webhook configurations: the operator creates a ValidatingWebhookConfiguration
//! and a MutatingWebhookConfiguration named after a setting, keeps their `webhooks` patched
//! (one entry per handler, shaped as Kopf shapes them), points CRDs with a converter at the
//! conversion endpoint, and on exit keeps only the persistent webhooks.

use base64::Engine as _;
use kopf_core::handler::MetaFilter;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::conversion::Converter;
use crate::handlers::{SubresourceFilter, WebhookHandler, WebhookKind};
use crate::review::Reviewer;

/// Where the API server sends reviews.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `clientConfig.url`: the base URL (`https://host:port/path`); the handler id is appended.
    Url(String),
    /// `clientConfig.service`: a Service in the cluster; the handler id is appended to `path`.
    Service {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
        /// Its port (Kubernetes' default: 443).
        port: u16,
        /// The base path.
        path: String,
    },
}

/// The `clientConfig` of the managed entries: the endpoint and the CA bundle (PEM) that
/// signs the server's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// PEM certificates the API server trusts for this webhook (sent base64-encoded).
    pub ca_bundle: Option<Vec<u8>>,
}

/// Percent-encodes a path segment (unreserved characters stay).
pub fn quote(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl ClientConfig {
    /// The `clientConfig` for a path below the base (a handler id, `convert/<crd>`).
    pub fn for_path(&self, suffix: &str) -> Value {
        let join = |base: &str| format!("{}/{suffix}", base.trim_end_matches('/'));
        let mut cc = match &self.endpoint {
            Endpoint::Url(url) => json!({"url": join(url)}),
            Endpoint::Service {
                namespace,
                name,
                port,
                path,
            } => json!({"service": {
                "namespace": namespace, "name": name, "port": port, "path": join(path),
            }}),
        };
        if let Some(ca) = &self.ca_bundle {
            cc["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(ca));
        }
        cc
    }
}

/// The webhook name of a handler in the configuration `managed`: `/` becomes `.`, `_`
/// becomes `-`, upper case is lowered, other characters are hex-encoded, and `.<managed>`
/// is appended (Kubernetes wants a DNS subdomain with at least three segments).
pub fn webhook_name(id: &str, managed: &str) -> String {
    let mut name = String::with_capacity(id.len() + managed.len() + 1);
    for c in id.chars() {
        match c {
            '/' => name.push('.'),
            '_' => name.push('-'),
            c if c.is_ascii_alphanumeric() || c == '-' || c == '.' => {
                name.push(c.to_ascii_lowercase())
            }
            c => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    name.push_str(&format!("{b:02x}"));
                }
            }
        }
    }
    if name.ends_with(managed) {
        name
    } else {
        format!("{name}.{managed}")
    }
}

fn object_selector(h: &WebhookHandler) -> Option<Value> {
    let exprs: Vec<Value> = h
        .options
        .filters
        .labels
        .iter()
        .filter_map(|(key, f)| match f {
            MetaFilter::Present => Some(json!({"key": key, "operator": "Exists"})),
            MetaFilter::Absent => Some(json!({"key": key, "operator": "DoesNotExist"})),
            MetaFilter::Value(v) => Some(json!({"key": key, "operator": "In", "values": [v]})),
            _ => None,
        })
        .collect();
    (!exprs.is_empty()).then(|| json!({"matchExpressions": exprs}))
}

/// The `webhooks` of one configuration: an entry per handler of the kind (all, or only the
/// persistent ones), with its rules for the resources it resolved to.
pub fn webhooks(
    reviewer: &Reviewer,
    kind: WebhookKind,
    client: &ClientConfig,
    managed: &str,
    persistent_only: bool,
) -> Vec<Value> {
    reviewer
        .handlers()
        .iter()
        .filter(|(h, _)| h.kind == kind && (!persistent_only || h.options.persistent))
        .map(|(h, resources)| {
            let operations: Vec<&str> = if h.options.operations.is_empty() {
                vec!["*"]
            } else {
                h.options.operations.iter().map(|o| o.as_str()).collect()
            };
            let rules: Vec<Value> = resources
                .iter()
                .map(|d| {
                    let ar = &d.api_resource;
                    let resource = match &h.options.subresource {
                        SubresourceFilter::Main => ar.plural.clone(),
                        SubresourceFilter::Named(s) => format!("{}/{s}", ar.plural),
                        SubresourceFilter::All => format!("{}/*", ar.plural),
                    };
                    let mut resources = vec![resource];
                    if h.options.subresource == SubresourceFilter::All {
                        resources.insert(0, ar.plural.clone());
                    }
                    json!({
                        "apiGroups": [ar.group],
                        "apiVersions": [ar.version],
                        "resources": resources,
                        "operations": operations,
                        "scope": "*",
                    })
                })
                .collect();
            let mut entry = json!({
                "name": webhook_name(&h.id, managed),
                "sideEffects": if h.options.side_effects { "NoneOnDryRun" } else { "None" },
                "failurePolicy": if h.options.ignore_failures { "Ignore" } else { "Fail" },
                "matchPolicy": "Equivalent",
                "rules": rules,
                "clientConfig": client.for_path(&quote(&h.id)),
                "timeoutSeconds": 30,
                "admissionReviewVersions": ["v1", "v1beta1"],
            });
            if let Some(sel) = object_selector(h) {
                entry["objectSelector"] = sel;
            }
            entry
        })
        .collect()
}

/// The CRD conversion stanza for a converter.
pub fn conversion_stanza(converter: &Converter, client: &ClientConfig) -> Value {
    json!({"spec": {"conversion": {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": client.for_path(&format!("convert/{}", quote(&converter.crd))),
            "conversionReviewVersions": ["v1"],
        },
    }}})
}

/// Failures to keep the managed configurations.
#[derive(Debug, thiserror::Error)]
pub enum ManagedError {
    /// The operator may not create or patch webhook configurations.
    #[error(
        "the API server forbids managing the {kind} {name:?} ({source}); grant the operator's account create and patch on {plural}.admissionregistration.k8s.io"
    )]
    Forbidden {
        /// The configuration kind.
        kind: &'static str,
        /// Its name.
        name: String,
        /// Its plural.
        plural: &'static str,
        /// The API error.
        source: kube::Error,
    },
    /// Another API failure.
    #[error("cannot {action} the {what}: {source}")]
    Api {
        /// What was attempted.
        action: &'static str,
        /// On what.
        what: String,
        /// The API error.
        source: kube::Error,
    },
}

fn configuration_api(client: &kube::Client, kind: WebhookKind) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        kind.configuration_kind(),
    );
    let ar = ApiResource::from_gvk_with_plural(&gvk, kind.configuration_plural());
    Api::all_with(client.clone(), &ar)
}

fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

/// Creates the configurations named `managed` for the kinds that have handlers (an
/// existing one is fine), one request each; then [`patch`] fills them.
pub async fn create(
    client: &kube::Client,
    reviewer: &Reviewer,
    managed: &str,
) -> Result<(), ManagedError> {
    for kind in [WebhookKind::Validating, WebhookKind::Mutating] {
        if !reviewer.handlers().iter().any(|(h, _)| h.kind == kind) {
            continue;
        }
        let api = configuration_api(client, kind);
        let body: DynamicObject = match serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind.configuration_kind(),
            "metadata": {"name": managed},
            "webhooks": [],
        })) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!("cannot build the {}: {e}", kind.configuration_kind());
                continue;
            }
        };
        match api.create(&PostParams::default(), &body).await {
            Ok(_) => tracing::info!("Created the {} {managed:?}.", kind.configuration_kind()),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) if is_forbidden(&e) => {
                return Err(ManagedError::Forbidden {
                    kind: kind.configuration_kind(),
                    name: managed.into(),
                    plural: kind.configuration_plural(),
                    source: e,
                });
            }
            Err(e) => {
                return Err(ManagedError::Api {
                    action: "create",
                    what: format!("{} {managed:?}", kind.configuration_kind()),
                    source: e,
                });
            }
        }
    }
    Ok(())
}

/// Merge-patches the configurations' `webhooks` (all handlers, or only the persistent ones
/// when the operator exits): one PATCH per kind that has handlers.
pub async fn patch(
    client: &kube::Client,
    reviewer: &Reviewer,
    cc: &ClientConfig,
    managed: &str,
    persistent_only: bool,
) -> Result<(), ManagedError> {
    for kind in [WebhookKind::Validating, WebhookKind::Mutating] {
        if !reviewer.handlers().iter().any(|(h, _)| h.kind == kind) {
            continue;
        }
        let hooks = webhooks(reviewer, kind, cc, managed, persistent_only);
        let api = configuration_api(client, kind);
        let patch = Patch::Merge(json!({"webhooks": hooks}));
        api.patch(managed, &PatchParams::default(), &patch)
            .await
            .map_err(|e| {
                if is_forbidden(&e) {
                    ManagedError::Forbidden {
                        kind: kind.configuration_kind(),
                        name: managed.into(),
                        plural: kind.configuration_plural(),
                        source: e,
                    }
                } else {
                    ManagedError::Api {
                        action: "patch",
                        what: format!("{} {managed:?}", kind.configuration_kind()),
                        source: e,
                    }
                }
            })?;
        if persistent_only {
            tracing::debug!(
                "Kept {} persistent webhook(s) in the {} {managed:?}.",
                hooks.len(),
                kind.configuration_kind()
            );
        } else {
            tracing::info!(
                "Registered {} webhook(s) in the {} {managed:?}.",
                hooks.len(),
                kind.configuration_kind()
            );
        }
    }
    Ok(())
}

/// Points each converter's CRD at the conversion endpoint (one PATCH per CRD).
pub async fn patch_conversions(
    client: &kube::Client,
    converters: &[Converter],
    cc: &ClientConfig,
) -> Result<(), ManagedError> {
    let gvk = GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "customresourcedefinitions");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    for c in converters {
        api.patch(
            &c.crd,
            &PatchParams::default(),
            &Patch::Merge(conversion_stanza(c, cc)),
        )
        .await
        .map_err(|e| ManagedError::Api {
            action: "set the conversion webhook of",
            what: format!("CustomResourceDefinition {:?}", c.crd),
            source: e,
        })?;
        tracing::info!("The CRD {:?} converts through this operator.", c.crd);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::{Operation, WebhookOptions};
    use kopf_core::handler::{Cause, Extensions};
    use kopf_watch::Discovered;
    use std::sync::Arc;

    fn discovered() -> Discovered {
        Discovered {
            api_resource: ApiResource {
                group: "kopf.dev".into(),
                version: "v1".into(),
                api_version: "kopf.dev/v1".into(),
                kind: "KopfExample".into(),
                plural: "kopfexamples".into(),
            },
            singular: "kopfexample".into(),
            short_names: vec!["kex".into()],
            namespaced: true,
            verbs: vec![],
            status_subresource: true,
            preferred: true,
        }
    }

    fn reviewer() -> Reviewer {
        let f = |_c: Cause| async { Ok(None) };
        let h = |kind, id: &str, options| {
            (
                WebhookHandler::new(kind, "kopfexamples", id, Arc::new(f), options),
                vec![discovered()],
            )
        };
        Reviewer::new(
            vec![
                h(
                    WebhookKind::Validating,
                    "validate_1",
                    WebhookOptions::new()
                        .label("tier", "gold")
                        .label("skip", MetaFilter::Absent)
                        .persistent(),
                ),
                h(
                    WebhookKind::Validating,
                    "check/Status",
                    WebhookOptions::new()
                        .subresource("status")
                        .operation(Operation::Update)
                        .ignore_failures(),
                ),
                h(
                    WebhookKind::Mutating,
                    "mutate_1",
                    WebhookOptions::new().side_effects(),
                ),
            ],
            Extensions::default(),
        )
    }

    #[test]
    fn names_are_dns_subdomains_ending_with_the_configuration() {
        assert_eq!(
            webhook_name("validate_1", "kopf.dev"),
            "validate-1.kopf.dev"
        );
        assert_eq!(webhook_name("a/B c", "x.y"), "a.b20c.x.y");
        assert_eq!(webhook_name("done.x.y", "x.y"), "done.x.y");
    }

    #[test]
    fn entries_are_shaped_as_kopf_shapes_them() {
        let cc = ClientConfig {
            endpoint: Endpoint::Url("https://127.0.0.1:9443".into()),
            ca_bundle: Some(b"PEM".to_vec()),
        };
        let validating = webhooks(&reviewer(), WebhookKind::Validating, &cc, "kopf.dev", false);
        insta::assert_json_snapshot!(validating);
        let persistent = webhooks(&reviewer(), WebhookKind::Validating, &cc, "kopf.dev", true);
        assert_eq!(persistent.len(), 1);
        assert_eq!(persistent[0]["name"], "validate-1.kopf.dev");
        let service = ClientConfig {
            endpoint: Endpoint::Service {
                namespace: "ops".into(),
                name: "hooks".into(),
                port: 443,
                path: "/admission/".into(),
            },
            ca_bundle: None,
        };
        let mutating = webhooks(
            &reviewer(),
            WebhookKind::Mutating,
            &service,
            "kopf.dev",
            false,
        );
        assert_eq!(
            mutating[0]["clientConfig"],
            json!({"service": {"namespace": "ops", "name": "hooks", "port": 443, "path": "/admission/mutate_1"}})
        );
        assert_eq!(mutating[0]["sideEffects"], "NoneOnDryRun");
        assert!(mutating[0].get("objectSelector").is_none());
    }
}
