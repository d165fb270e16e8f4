#![warn(missing_docs)]
//! # kopf-watch
//!
//! Watching for kopf-rs: resolves resource selectors through discovery ([`resolve`],
//! [`Selector`]), lists and watches resources with `kube::runtime::watcher`, processes every
//! object strictly serially (one worker per object, always on its latest state, parallel
//! across objects), applies each cycle's [`PatchPlan`](kopf_core::plan::PatchPlan) with at
//! most one request per endpoint, and waits for its own writes to come back before
//! processing the object again. The [`Orchestrator`] runs one [`Engine`] per resource and
//! follows CRDs that appear or disappear.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), kopf_watch::WatchError> {
//! let resource = kopf_watch::resolve(&client, "kopfexamples").await?;
//! let engine = kopf_watch::Engine::new(client, resource, vec![]);
//! engine.run(futures::future::pending()).await
//! # }
//! ```

mod apply;
mod backlog;
mod books;
mod conditions;
mod cycle;
mod early;
mod engine;
mod events;
mod lanes;
mod logs;
mod namespaces;
mod narrowing;
mod object;
mod observe;
mod orchestrator;
mod outage;
mod pause;
mod raw;
mod reconcile;
mod selector;
mod settings;
mod shard;
mod shared;
mod spawning;
mod stream;
mod uid;
mod worker;
mod write;

pub use engine::Engine;
pub use logs::{Captures, LogLine, LogSpec, follower as log_follower};
pub use namespaces::{NamespacePattern, NamespaceSelector};
pub use narrowing::{
    MetadataOnly, NotDerived, check_field_selector, check_label_selector,
    derive as derive_label_selector,
};
pub use orchestrator::Orchestrator;
pub use selector::{Discovered, Selector};
pub use settings::{IndexGate, Settings};

use kube::core::ApiResource;
use kube::discovery::{Discovery, Scope};
use serde_json::Value;

/// Errors of watching.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// Discovery failed.
    #[error(
        "cannot discover the API server's resources (is it reachable at the kubeconfig's server URL?): {0}"
    )]
    Discovery(#[source] kube::Error),
    /// The selector names no served resource.
    #[error(
        "no served resource matches {}{hint}; is its CustomResourceDefinition applied? (kubectl get crd)",
        // A name in quotes; ("group", "version", "plural") as it is.
        if .selector.starts_with('(') { .selector.clone() } else { format!("{:?}", .selector) }
    )]
    UnknownResource {
        /// The selector.
        selector: String,
        /// Similar names, if any.
        hint: String,
    },
    /// The selector names several resources.
    #[error("{selector:?} is ambiguous: it matches {choices}; use plural.group to pick one")]
    Ambiguous {
        /// The selector.
        selector: String,
        /// The matches.
        choices: String,
    },
    /// The API server forbids listing the resource (403): the operator's account lacks
    /// RBAC permissions.
    #[error(
        "the API server forbids listing {resource} (403: {message}); grant the operator's account list, watch and patch on it (the operator's `rbac` command prints the manifests it needs)"
    )]
    Forbidden {
        /// `plural.group`.
        resource: String,
        /// The API server's message.
        message: String,
    },
    /// A declared condition of a resource is invalid.
    #[error(
        "the conditions declared for {resource} are invalid: {error}; fix the declaration (Operator::conditions)"
    )]
    InvalidConditions {
        /// `plural.group`.
        resource: String,
        /// What is wrong.
        #[source]
        error: Box<kopf_core::conditions::ConditionError>,
    },
    /// More than one reconcile is registered for one resource.
    #[error(
        "{resource} has {count} reconciles ({ids}); a resource has at most one: merge them into one function, or give the others to cause handlers"
    )]
    SeveralReconciles {
        /// `plural.group`.
        resource: String,
        /// How many.
        count: usize,
        /// Their ids.
        ids: String,
    },
    /// A selector of the settings (`run -l`, `--field-selector`) is not valid.
    #[error("the {option} {selector:?} is not valid: {reason}")]
    InvalidSelector {
        /// Which selector, with its option.
        option: &'static str,
        /// The selector as given.
        selector: Box<str>,
        /// What is wrong.
        reason: Box<str>,
    },
    /// A resource declared metadata-only has something that needs more than metadata.
    #[error("{resource} cannot be watched metadata-only: {reason}")]
    MetadataOnly {
        /// `plural.group`.
        resource: String,
        /// What needs more.
        reason: Box<str>,
    },
    /// The resource cannot be watched.
    #[error("{resource} cannot be served: it lacks the {verb:?} verb")]
    MissingVerb {
        /// The resource.
        resource: String,
        /// The missing verb.
        verb: String,
    },
}

/// A resolved resource.
#[derive(Debug, Clone)]
pub struct ResourceRef {
    /// Group, version, kind, plural.
    pub api_resource: ApiResource,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Has a `/status` subresource (status goes to a separate PATCH).
    pub status_subresource: bool,
}

/// Everything the API server serves, from aggregated discovery (two requests; short names
/// included), or from the per-group documents on servers without it.
pub async fn discover(client: &kube::Client) -> Result<Vec<Discovered>, WatchError> {
    const ACCEPT: &str =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let mut all = Vec::new();
    let mut aggregated = true;
    for path in ["/api", "/apis"] {
        let request = http::Request::get(path)
            .header("Accept", ACCEPT)
            .body(Vec::new());
        let doc: Option<Value> = match request {
            Ok(r) => client.request::<Value>(r).await.ok(),
            Err(_) => None,
        };
        match doc {
            Some(d) if d.get("kind").and_then(Value::as_str) == Some("APIGroupDiscoveryList") => {
                all.extend(selector::from_aggregated(&d));
            }
            _ => {
                aggregated = false;
                break;
            }
        }
    }
    if aggregated {
        return Ok(all);
    }
    tracing::debug!("no aggregated discovery; using the per-group documents");
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(WatchError::Discovery)?;
    let mut out = Vec::new();
    for group in discovery.groups() {
        let preferred = group.preferred_version_or_latest().to_string();
        for version in group.versions() {
            for (ar, caps) in group.versioned_resources(version) {
                out.push(Discovered {
                    singular: ar.kind.to_lowercase(),
                    short_names: Vec::new(),
                    namespaced: caps.scope == Scope::Namespaced,
                    verbs: caps.operations.clone(),
                    status_subresource: caps
                        .subresources
                        .iter()
                        .any(|(sub, _)| sub.plural == "status"),
                    preferred: ar.version == preferred,
                    api_resource: ar,
                });
            }
        }
    }
    Ok(out)
}

/// Resolves a resource name (plural, singular, kind, short name, `plural.group`,
/// `plural.version.group`) to the one resource it names. See [`Selector`] for the other forms.
pub async fn resolve(client: &kube::Client, selector: &str) -> Result<ResourceRef, WatchError> {
    let all = discover(client).await?;
    let found = Selector::from(selector).resolve(&all)?;
    found
        .into_iter()
        .next()
        .map(ResourceRef::from)
        .ok_or_else(|| WatchError::UnknownResource {
            selector: selector.into(),
            hint: String::new(),
        })
}

impl From<Discovered> for ResourceRef {
    fn from(d: Discovered) -> Self {
        ResourceRef {
            namespaced: d.namespaced,
            status_subresource: d.status_subresource,
            api_resource: d.api_resource,
        }
    }
}
