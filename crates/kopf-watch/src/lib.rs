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
mod error;
mod events;
mod keeping;
mod lanes;
mod logs;
mod namespaces;
mod narrowing;
mod object;
mod object_pause;
mod observe;
mod orchestrator;
mod outage;
mod oversized;
mod pause;
mod raw;
mod reconcile;
mod resource;
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
pub use error::WatchError;
pub use logs::{Captures, LogLine, LogSpec, follower as log_follower};
pub use namespaces::{NamespacePattern, NamespaceSelector};
pub use narrowing::{
    MetadataOnly, NotDerived, check_field_selector, check_label_selector,
    derive as derive_label_selector,
};
pub use orchestrator::Orchestrator;
pub use resource::ResourceRef;
pub use selector::{Discovered, Selector};
pub use settings::{IndexGate, Settings};

use kube::discovery::{Discovery, Scope};
use serde_json::Value;

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
