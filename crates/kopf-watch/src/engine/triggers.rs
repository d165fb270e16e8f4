//! Reconcile triggers as an engine sees them ([`kopf_core::reconcile`]): the requests of
//! owned and related objects' watches for the resource's reconcile, and the names those
//! requests may use, learnt from the events of the engine's own objects.

use kopf_core::reconcile::{Names, ReconcileSpec, Target, TriggerRef};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

/// The requests for the objects of one engine (none without a reconcile).
#[derive(Default)]
pub(crate) struct Triggers {
    requests: Option<UnboundedReceiver<TriggerRef>>,
    names: Names,
}

impl Triggers {
    /// Subscribed to the bus of `reconcile`, if there is one.
    pub(crate) fn new(reconcile: Option<&ReconcileSpec>) -> Self {
        Triggers {
            requests: reconcile.map(|r| r.triggers.subscribe()),
            names: Names::default(),
        }
    }

    /// The next request (never without a reconcile; None when the bus is gone).
    pub(crate) async fn next(&mut self) -> Option<TriggerRef> {
        match self.requests.as_mut() {
            Some(rx) => rx.recv().await,
            None => std::future::pending().await,
        }
    }

    /// An object's event: its name is remembered (forgotten when it is deleted).
    pub(crate) fn observe(&mut self, body: &Value, uid: &str, deleted: bool) {
        if self.requests.is_some() {
            self.names.observe(body, uid, deleted);
        }
    }

    /// The uid of a request's object, if the engine knows it.
    pub(crate) fn uid<'r>(&'r self, target: &'r Target) -> Option<&'r str> {
        self.names.uid(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kopf_core::reconcile::{ObjectRef, Trigger};
    use serde_json::json;

    fn by_name(name: &str) -> TriggerRef {
        TriggerRef {
            target: Target::Ref(ObjectRef {
                namespace: Some("ns".into()),
                name: name.into(),
            }),
            trigger: Trigger::Owned("Pod/p".into()),
        }
    }

    #[test]
    fn names_are_learnt_only_with_a_reconcile() {
        let body = json!({"metadata": {"namespace": "ns", "name": "a"}});
        let mut none = Triggers::new(None);
        none.observe(&body, "uid-a", false);
        assert_eq!(none.uid(&by_name("a").target), None);

        let spec = ReconcileSpec::new("r", |_, _| async {
            Ok::<_, kopf_core::handler::HandlerError>(kopf_core::reconcile::Action::await_change())
        });
        let mut triggers = Triggers::new(Some(&spec));
        triggers.observe(&body, "uid-a", false);
        assert_eq!(triggers.uid(&by_name("a").target), Some("uid-a"));
        triggers.observe(&body, "uid-a", true);
        assert_eq!(
            triggers.uid(&by_name("a").target),
            None,
            "deleted: forgotten"
        );
    }
}
