//! A resource's handlers sorted by who runs them (the changing cycle, index and raw-event
//! handlers on every event, daemons and timers per object, the reconcile), checked before
//! anything is watched, and what the workers of the resource share, built from them.

use std::sync::Arc;

use kopf_core::conditions::ConditionsSpec;
use kopf_core::gate::Gate;
use kopf_core::handler::{Extensions, HandlerKind, HandlerSpec};
use kopf_core::layers::Stack;
use kopf_core::processing::{Persistence, Processor};
use kopf_core::reconcile::ReconcileSpec;

use crate::error::WatchError;
use crate::keeping::Arrival;
use crate::pause::resource_name;
use crate::resource::ResourceRef;
use crate::settings::Settings;
use crate::shared::{Setup, WorkerShared};

/// The handlers that run outside the changing cycle, by kind, and the reconcile.
#[derive(Debug)]
pub(crate) struct Sorted {
    /// Index handlers (every event, in order).
    pub(crate) indexers: Vec<HandlerSpec>,
    /// Raw-event handlers (every event, in order).
    pub(crate) watchers: Vec<HandlerSpec>,
    /// Daemons and timers (a task per object).
    pub(crate) spawners: Vec<HandlerSpec>,
    /// The resource's reconcile, if it has one.
    pub(crate) reconcile: Option<ReconcileSpec>,
}

impl Sorted {
    /// Sorts `handlers`, and checks them: the declared conditions are valid, and there is
    /// at most one reconcile.
    pub(crate) fn new(
        handlers: &[HandlerSpec],
        resource: &ResourceRef,
    ) -> Result<Self, WatchError> {
        let kind_of = |k: fn(&HandlerKind) -> bool| -> Vec<HandlerSpec> {
            handlers.iter().filter(|h| k(&h.kind)).cloned().collect()
        };
        let reconciles: Vec<&ReconcileSpec> = handlers
            .iter()
            .filter_map(|h| h.declared::<ReconcileSpec>())
            .collect();
        validate(handlers, &reconciles, resource)?;
        Ok(Sorted {
            indexers: kind_of(|k| matches!(k, HandlerKind::Index(_))),
            watchers: kind_of(|k| matches!(k, HandlerKind::Event)),
            spawners: kind_of(|k| matches!(k, HandlerKind::Timer(_) | HandlerKind::Daemon(_))),
            reconcile: reconciles.first().map(|r| (*r).clone()),
        })
    }
}

/// The declared conditions are valid; there is at most one reconcile.
fn validate(
    handlers: &[HandlerSpec],
    reconciles: &[&ReconcileSpec],
    resource: &ResourceRef,
) -> Result<(), WatchError> {
    let declared = handlers
        .iter()
        .filter_map(|h| h.declared::<ConditionsSpec>())
        .flat_map(|c| c.declared.iter());
    for intent in declared {
        if let Err(error) = intent.validate() {
            return Err(WatchError::InvalidConditions {
                resource: resource_name(resource),
                error: Box::new(error),
            });
        }
    }
    if reconciles.len() > 1 {
        return Err(WatchError::SeveralReconciles {
            resource: resource_name(resource),
            count: reconciles.len(),
            ids: reconciles
                .iter()
                .map(|r| format!("'{}'", r.id))
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Ok(())
}

/// What an engine's workers are made of.
pub(crate) struct Parts {
    pub(crate) client: kube::Client,
    pub(crate) resource: ResourceRef,
    pub(crate) handlers: Vec<HandlerSpec>,
    pub(crate) persistence: Persistence,
    pub(crate) stack: Stack,
    pub(crate) settings: Settings,
    pub(crate) gate: Gate,
    /// How its objects are read as they arrive.
    pub(crate) arrival: Arrival,
}

/// What handlers receive besides the object (the client, the indexes); the index handlers
/// are declared to the indexes.
fn extensions(settings: &Settings, client: &kube::Client, indexers: &[HandlerSpec]) -> Extensions {
    let mut extensions = settings.extensions.clone();
    extensions.insert(client.clone());
    extensions.insert(settings.indexes.clone());
    for h in indexers {
        if let HandlerKind::Index(types) = &h.kind {
            settings.indexes.declare(&h.id, *types);
        }
    }
    extensions
}

/// What the workers of the resource share (the index handlers declared to the indexes).
pub(crate) fn shared(parts: Parts, sorted: Sorted) -> Arc<WorkerShared> {
    let Parts {
        client,
        resource,
        handlers,
        persistence,
        stack,
        settings,
        gate,
        arrival,
    } = parts;
    let extensions = extensions(&settings, &client, &sorted.indexers);
    let Sorted {
        indexers,
        watchers,
        spawners,
        reconcile,
    } = sorted;
    Arc::new(WorkerShared::new(Setup {
        client,
        resource,
        processor: Processor::with_stack(handlers, persistence, stack.clone())
            .with_extensions(extensions.clone()),
        stack,
        extensions,
        indexers,
        watchers,
        spawners,
        settings,
        operator_gate: gate,
        reconcile,
        arrival,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kopf_core::handler::Cause;
    use kube::core::ApiResource;

    fn resource() -> ResourceRef {
        ResourceRef {
            api_resource: ApiResource {
                group: "kopf.dev".into(),
                version: "v1".into(),
                api_version: "kopf.dev/v1".into(),
                kind: "KopfExample".into(),
                plural: "kopfexamples".into(),
            },
            namespaced: true,
            status_subresource: true,
        }
    }

    fn reconcile(id: &str) -> HandlerSpec {
        let spec = ReconcileSpec::new(id, |_, _| async {
            Ok::<_, kopf_core::handler::HandlerError>(kopf_core::reconcile::Action::await_change())
        });
        HandlerSpec::declaration(id, spec)
    }

    #[test]
    fn handlers_are_sorted_by_who_runs_them() {
        let noop: Arc<dyn kopf_core::handler::Handler> = Arc::new(|_: Cause| async { Ok(None) });
        let handlers = vec![
            HandlerSpec::event("watch", noop.clone()),
            HandlerSpec::timer("tick", Default::default(), noop.clone()),
            HandlerSpec::daemon("loop", Default::default(), noop.clone()),
            HandlerSpec::new("create", None, |_: Cause| async { Ok(None) }),
            reconcile("r"),
        ];
        let sorted = Sorted::new(&handlers, &resource()).expect("valid");
        let ids = |v: &[HandlerSpec]| v.iter().map(|h| h.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&sorted.watchers), ["watch"]);
        assert_eq!(ids(&sorted.spawners), ["tick", "loop"]);
        assert!(sorted.indexers.is_empty());
        assert_eq!(sorted.reconcile.map(|r| r.id), Some("r".to_string()));
    }

    #[test]
    fn several_reconciles_are_refused_by_name() {
        let handlers = vec![reconcile("a"), reconcile("b")];
        let error = Sorted::new(&handlers, &resource()).expect_err("two reconciles");
        let WatchError::SeveralReconciles {
            resource,
            count,
            ids,
        } = error
        else {
            panic!("not SeveralReconciles: {error}");
        };
        assert_eq!((resource.as_str(), count), ("kopfexamples.kopf.dev", 2));
        assert_eq!(ids, "'a', 'b'");
    }
}
