//! The [`Operator`]'s level-triggered reconciles: [`Operator::reconcile`] and
//! [`Operator::reconcile_with`] with a [`Reconciler`] (owned and related objects, a
//! cleanup on deletion, debounce, concurrency, timeout, backoff).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kopf_core::causes::Reason;
use kopf_core::handler::{Cause, Handler, HandlerError, HandlerSpec, Options};
use kopf_core::reconcile::{
    Action, Backoff, ObjectRef, ReconcileConfig, ReconcileContext, ReconcileSpec, Target, Trigger,
    TriggerRef, Triggers, kind_name,
};
use kopf_watch::Selector;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Operator;

/// A reconcile of one resource with its options, for [`Operator::reconcile_with`].
///
/// The function receives the object as `Arc<K>` (`K`: any type the object deserializes
/// into: a `#[derive(CustomResource)]` type, a k8s-openapi type, your own struct, or
/// `serde_json::Value`) and a [`ReconcileContext`], and returns an [`Action`].
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use kopf::{Action, HandlerError, Operator, ReconcileContext, Reconciler, reconcile::ObjectRef};
/// use serde_json::Value;
///
/// async fn reconcile(obj: Arc<Value>, ctx: ReconcileContext) -> Result<Action, HandlerError> {
///     // Make the world look like obj.spec says, whatever changed.
///     ctx.patch().merge(serde_json::json!({"status": {"seen": obj["spec"]["field"]}}));
///     Ok(Action::requeue(Duration::from_secs(300)))
/// }
/// async fn cleanup(obj: Arc<Value>, _ctx: ReconcileContext) -> Result<(), HandlerError> {
///     Ok(())
/// }
///
/// let operator = Operator::new().reconcile_with(
///     Reconciler::new("kopfexamples", reconcile)
///         .owns("configmaps")
///         .watches("secrets", |secret: &Value| {
///             // The objects a secret matters to, e.g. named in an annotation.
///             secret["metadata"]["annotations"]["example.com/for"]
///                 .as_str()
///                 .map(|name| vec![ObjectRef::namespaced("default", name)])
///                 .unwrap_or_default()
///         })
///         .cleanup(cleanup)
///         .debounce(Duration::from_millis(500))
///         .concurrency(8),
/// );
/// # let _ = operator;
/// ```
pub struct Reconciler<K> {
    resource: Selector,
    spec: ReconcileSpec,
    owns: Vec<(Selector, bool)>,
    watches: Vec<(Selector, Arc<dyn Handler>)>,
    cleanup: Option<Arc<dyn Handler>>,
    _k: std::marker::PhantomData<fn() -> K>,
}

/// The object as the reconcile's type (a mismatch is a permanent error: retrying would not
/// make it fit).
fn typed<K: DeserializeOwned>(body: &Value) -> Result<Arc<K>, HandlerError> {
    K::deserialize(body).map(Arc::new).map_err(|e| {
        HandlerError::permanent(format!(
            "the object {} does not fit the reconcile's type {}: {e}",
            kind_name(body),
            std::any::type_name::<K>()
        ))
    })
}

impl<K: DeserializeOwned + Send + Sync + 'static> Reconciler<K> {
    /// A reconcile of `resource` (its id: `reconcile`).
    pub fn new<F, Fut, E>(resource: impl Into<Selector>, f: F) -> Self
    where
        F: Fn(Arc<K>, ReconcileContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: Into<HandlerError> + Send + 'static,
    {
        let f = Arc::new(f);
        let spec = ReconcileSpec::new("reconcile", move |body: Value, ctx: ReconcileContext| {
            let f = f.clone();
            async move {
                let obj = typed::<K>(&body)?;
                f(obj, ctx).await.map_err(Into::into)
            }
        });
        Reconciler {
            resource: resource.into(),
            spec,
            owns: Vec::new(),
            watches: Vec::new(),
            cleanup: None,
            _k: std::marker::PhantomData,
        }
    }

    /// Its id (logs, metrics; the cleanup handler's id is `<id>/cleanup`).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.spec.id = id.into();
        self
    }

    /// Objects of `children` whose ownerReferences name an object of this resource trigger
    /// its reconcile when they are created, changed or deleted (any ownerReference, not only
    /// the controller's: see [`owns_controlled`](Self::owns_controlled)). Their initial
    /// listing triggers nothing: every object is reconciled once at start anyway.
    pub fn owns(mut self, children: impl Into<Selector>) -> Self {
        self.owns.push((children.into(), false));
        self
    }

    /// Like [`owns`](Self::owns), only for the ownerReference marked `controller: true`
    /// (controller-runtime's `Owns`): objects merely co-owned trigger nothing.
    pub fn owns_controlled(mut self, children: impl Into<Selector>) -> Self {
        self.owns.push((children.into(), true));
        self
    }

    /// A handle to ask for reconciles of this resource's objects by namespace and name from
    /// anywhere (another resource's handlers, a webhook, a task of your own):
    /// `handle.reconcile(ObjectRef::namespaced("default", "x"))`. Keep it before passing the
    /// reconciler to [`Operator::reconcile_with`].
    pub fn handle(&self) -> Triggers {
        self.spec.triggers.clone()
    }

    /// Objects of `related` trigger the reconcile of the objects `mapper` names (resolved by
    /// namespace and name among the objects of this resource).
    pub fn watches<O, M>(mut self, related: impl Into<Selector>, mapper: M) -> Self
    where
        O: DeserializeOwned + Send + Sync + 'static,
        M: Fn(&O) -> Vec<ObjectRef> + Send + Sync + 'static,
    {
        let triggers = self.spec.triggers.clone();
        let handler = move |cause: Cause| {
            let refs = match O::deserialize(&cause.body) {
                Ok(o) if cause.event.is_some() => mapper(&o),
                Ok(_) => Vec::new(),
                Err(e) => {
                    tracing::debug!(
                        "A related object does not fit the mapper's type ({e}); it triggers nothing."
                    );
                    Vec::new()
                }
            };
            let what = kind_name(&cause.body);
            for r in refs {
                triggers.send(TriggerRef {
                    target: Target::Ref(r),
                    trigger: Trigger::Related(what.clone()),
                });
            }
            async { Ok(None) }
        };
        self.watches.push((related.into(), Arc::new(handler)));
        self
    }

    /// Runs `f` when an object is deleted, before it goes: the operator's finalizer is put
    /// on every object, and taken off when `f` succeeded. It runs as a deletion handler with
    /// id `<id>/cleanup` (retried, its progress kept on the object like any Kopf handler's).
    /// Without a cleanup, a deletion needs no finalizer and no reconcile runs for it.
    pub fn cleanup<F, Fut, E>(mut self, f: F) -> Self
    where
        F: Fn(Arc<K>, ReconcileContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<HandlerError> + Send + 'static,
    {
        let f = Arc::new(f);
        let handler = move |cause: Cause| {
            let f = f.clone();
            async move {
                let obj = typed::<K>(&cause.body)?;
                let ctx = ReconcileContext::from_cause(cause, Trigger::Deleting);
                f(obj, ctx).await.map_err(Into::into)?;
                Ok(None)
            }
        };
        self.cleanup = Some(Arc::new(handler));
        self
    }

    /// All the settings at once.
    pub fn config(mut self, config: ReconcileConfig) -> Self {
        self.spec = self.spec.config(config);
        self
    }

    /// A burst of triggers within `d` becomes one reconcile (never later than 10 × `d`
    /// after the first).
    pub fn debounce(self, d: Duration) -> Self {
        let config = self.spec.config.clone().debounce(d);
        self.config(config)
    }

    /// At most `n` reconciles of this resource at once (one per object always).
    pub fn concurrency(self, n: usize) -> Self {
        let config = self.spec.config.clone().concurrency(n);
        self.config(config)
    }

    /// A reconcile running longer than `d` is cancelled and counts as failed.
    pub fn timeout(self, d: Duration) -> Self {
        let config = self.spec.config.clone().timeout(d);
        self.config(config)
    }

    /// The backoff of failed reconciles (default: 1 s doubling up to 300 s, jitter 0.2).
    pub fn backoff(self, backoff: Backoff) -> Self {
        let config = self.spec.config.clone().backoff(backoff);
        self.config(config)
    }
}

impl Operator {
    /// A level-triggered reconcile of `resource`: `f(object, ctx)` runs once for every
    /// object at start, after every change of it, and when its [`Action`] asks; it
    /// converges on the object's current state. It shares the watch, the per-object lane
    /// (never at the same time as the object's cause handlers, and after them), the writes
    /// and the settings with the cause handlers of the same resource. Errors back off per
    /// object (see [`Reconciler::backoff`]); [`HandlerError::Permanent`] waits for a change.
    /// For owned objects, a cleanup, debounce and limits, see [`Operator::reconcile_with`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use kopf::{Action, HandlerError, Operator, ReconcileContext};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Example { spec: ExampleSpec }
    /// #[derive(serde::Deserialize)]
    /// struct ExampleSpec { replicas: u32 }
    ///
    /// let operator = Operator::new().reconcile("kopfexamples", |obj: Arc<Example>, ctx: ReconcileContext| async move {
    ///     ctx.patch().merge(serde_json::json!({"status": {"replicas": obj.spec.replicas}}));
    ///     Ok::<_, HandlerError>(Action::requeue(Duration::from_secs(600)))
    /// });
    /// # let _ = operator;
    /// ```
    pub fn reconcile<K, F, Fut, E>(self, resource: impl Into<Selector>, f: F) -> Self
    where
        K: DeserializeOwned + Send + Sync + 'static,
        F: Fn(Arc<K>, ReconcileContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: Into<HandlerError> + Send + 'static,
    {
        self.reconcile_with(Reconciler::new(resource, f))
    }

    /// A reconcile with its options (see [`Reconciler`]).
    pub fn reconcile_with<K>(mut self, reconciler: Reconciler<K>) -> Self {
        let Reconciler {
            resource,
            spec,
            owns,
            watches,
            cleanup,
            ..
        } = reconciler;
        let id = spec.id.clone();
        for (n, (children, controller_only)) in owns.into_iter().enumerate() {
            let triggers = spec.triggers.clone();
            let handler = move |cause: Cause| {
                if cause.event.is_some() {
                    owned_changed(&triggers, &cause.body, controller_only);
                }
                async { Ok(None) }
            };
            self = self.register(
                children,
                HandlerSpec::event(&format!("{id}/owns/{n}"), Arc::new(handler)),
                Options::default(),
            );
        }
        for (n, (related, handler)) in watches.into_iter().enumerate() {
            self = self.register(
                related,
                HandlerSpec::event(&format!("{id}/watches/{n}"), handler),
                Options::default(),
            );
        }
        if let Some(cleanup) = cleanup {
            self = self.register(
                resource.clone(),
                HandlerSpec::from_arc(format!("{id}/cleanup"), Some(Reason::Delete), cleanup),
                Options::default(),
            );
        }
        self.register(
            resource,
            HandlerSpec::declaration(&id, spec),
            Options::default(),
        )
    }
}

/// An owned object changed: its owners are asked to reconcile.
fn owned_changed(triggers: &Triggers, body: &Value, controller_only: bool) {
    let (owners, what) = Triggers::owners(body, controller_only);
    for uid in owners {
        triggers.send(TriggerRef {
            target: Target::Uid(uid),
            trigger: Trigger::Owned(what.clone()),
        });
    }
}
