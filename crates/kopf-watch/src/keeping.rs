//! What the engine keeps of each object of a resource ([`kopf_core::reads`]): as it arrives,
//! when no handler of the resource needs the whole object ([`Arrival`]); and, when one does,
//! still only what the resource's daemons and timers read for the states they keep
//! ([`for_spawners`]).
//!
//! Trimming on arrival is off where something needs whole objects: a change handler (the
//! diff-base is the essence of the whole object, as Kopf stores it), the reconcile, a timer
//! that waits for the object to be idle (any change counts), a `when` filter without
//! declared reads (it may look anywhere), or a handler that reads the whole object (a
//! `Body` or `Cause` argument, an extractor that does not say). A line at start says what is
//! kept, or which handler prevents trimming.

use std::sync::Arc;

use kopf_core::handler::{HandlerKind, HandlerSpec};
use kopf_core::reads::Reads;
use kopf_core::reconcile::ReconcileSpec;
use serde_json::Value;

use crate::raw::RawObject;

/// How the objects of a resource are read as they arrive (from the watch, a list or a
/// GET): `metadata.managedFields` dropped unless kept, and trimmed to what the handlers
/// read where none needs the whole object.
#[derive(Clone, Debug)]
pub(crate) struct Arrival {
    keep_managed_fields: bool,
    keep: Arc<Reads>,
}

impl Arrival {
    /// What is kept of the objects of `plural` with these handlers (said once, at start).
    pub(crate) fn new(plural: &str, handlers: &[HandlerSpec], keep_managed_fields: bool) -> Self {
        let keep = on_arrival(handlers);
        match &keep {
            Reads::Whole(why) => tracing::debug!(
                resource = plural,
                "The objects of {plural} are kept whole: {why}."
            ),
            _ => tracing::info!(
                resource = plural,
                "The objects of {plural} are kept with only {keep}: no handler reads more."
            ),
        }
        Arrival {
            keep_managed_fields,
            keep: Arc::new(keep),
        }
    }

    /// An object as the engine keeps it.
    pub(crate) fn body(&self, obj: RawObject) -> Arc<Value> {
        let body = obj.into_body(self.keep_managed_fields);
        if self.keep.is_whole() {
            body
        } else {
            Arc::new(self.keep.trim(&body))
        }
    }

    /// Whether objects are trimmed as they arrive.
    pub(crate) fn trims(&self) -> bool {
        !self.keep.is_whole()
    }

    /// Whether objects are trimmed as they arrive to exactly `reads`.
    pub(crate) fn keeps_just(&self, reads: &Reads) -> bool {
        self.trims() && *self.keep == *reads
    }
}

/// What all the handlers of a resource read, for trimming on arrival (see the module's
/// docs for what prevents it); a `Whole` names the handler.
pub(crate) fn on_arrival(handlers: &[HandlerSpec]) -> Reads {
    handlers
        .iter()
        .map(needs_on_arrival)
        .fold(Reads::nothing(), Reads::and)
}

fn needs_on_arrival(h: &HandlerSpec) -> Reads {
    let id = &h.id;
    match &h.kind {
        HandlerKind::Changing => Reads::whole(format!(
            "'{id}' is a change handler (the diff-base is of whole objects)"
        )),
        HandlerKind::Timer(o) if o.idle.is_some() => Reads::whole(format!(
            "'{id}' waits for objects to be idle (any change counts)"
        )),
        HandlerKind::Declaration(_) if h.declared::<ReconcileSpec>().is_some() => {
            Reads::whole(format!("'{id}' is the reconcile"))
        }
        HandlerKind::Declaration(_) => Reads::nothing(),
        _ => named(h),
    }
}

/// What a handler and its filters read, a `Whole` naming it. A `when` filter is evaluated
/// on every call (timers and daemons: on the state they keep), and may look anywhere: the
/// whole object, unless the handler says what it reads.
fn named(h: &HandlerSpec) -> Reads {
    if h.when.is_some() && h.declared_reads.is_empty() {
        return Reads::whole(format!(
            "'{}' has a `when` filter and does not say what it reads (Options::reads)",
            h.id
        ));
    }
    match h.reads() {
        Reads::Whole(why) => Reads::whole(format!("'{}' reads the whole object ({why})", h.id)),
        some => some,
    }
}

/// What the daemons and timers of a resource read (and so what is kept of each object for
/// them); said once at start when the objects are not trimmed on arrival already.
pub(crate) fn for_spawners(plural: &str, spawners: &[HandlerSpec], arrival: &Arrival) -> Reads {
    let keep = spawners
        .iter()
        .map(named)
        .fold(Reads::nothing(), Reads::and);
    if spawners.is_empty() || arrival.trims() {
        return keep;
    }
    match &keep {
        Reads::Whole(why) => tracing::info!(
            resource = plural,
            "The daemons and timers of {plural} keep whole objects: {why}; declare what it reads with Options::reads (or `reads = [...]`) to keep less."
        ),
        _ => tracing::info!(
            resource = plural,
            "The daemons and timers of {plural} keep only {keep} of each object."
        ),
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;
    use kopf_core::causes::Reason;
    use kopf_core::daemons::TimerOptions;
    use kopf_core::extract::{Body, IntoHandler, Name, Spec};
    use kopf_core::handler::{HandlerError, Options};
    use std::time::Duration;

    #[derive(serde::Deserialize)]
    struct Schedule {
        #[allow(dead_code)]
        every: u32,
    }

    async fn typed(Spec(_): Spec<Schedule>, Name(_): Name) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn whole(Body(_): Body) -> Result<(), HandlerError> {
        Ok(())
    }

    fn timer(id: &str, handler: Arc<dyn kopf_core::handler::Handler>) -> HandlerSpec {
        HandlerSpec::timer(id, TimerOptions::default(), handler)
    }

    fn arrival(whole: bool) -> Arrival {
        Arrival {
            keep_managed_fields: false,
            keep: Arc::new(if whole {
                Reads::whole("test")
            } else {
                Reads::nothing()
            }),
        }
    }

    #[test]
    fn the_daemons_keep_what_they_read_unless_one_reads_everything() {
        let typed_timer = timer("typed", typed.into_handler());
        let whole_timer = timer("whole", whole.into_handler());
        let whole_objects = arrival(true);
        assert_eq!(
            for_spawners("things", std::slice::from_ref(&typed_timer), &whole_objects),
            Reads::field("spec.every")
        );
        let both = [typed_timer.clone(), whole_timer.clone()];
        assert_eq!(
            for_spawners("things", &both, &whole_objects),
            Reads::whole("'whole' reads the whole object (its argument Body)")
        );
        let declared = whole_timer.with_options(Options::new().reads("data"));
        assert_eq!(
            for_spawners("things", &[typed_timer.clone(), declared], &whole_objects),
            Reads::field("spec.every").and(Reads::field("data"))
        );
        // A `when` filter is evaluated on the kept state at every call: it may look anywhere.
        let filtered = typed_timer.with_options(Options::new().when(|b| b["spec"]["on"] == true));
        assert!(for_spawners("things", std::slice::from_ref(&filtered), &whole_objects).is_whole());
        let declared = filtered.with_options(Options::new().reads("spec.on"));
        assert_eq!(
            for_spawners("things", &[declared], &whole_objects),
            Reads::field("spec.on").and(Reads::field("spec.every"))
        );
        assert_eq!(
            for_spawners("things", &[], &whole_objects),
            Reads::nothing()
        );
    }

    #[test]
    fn objects_are_trimmed_on_arrival_only_when_nothing_needs_them_whole() {
        let typed_timer = timer("typed", typed.into_handler());
        assert_eq!(
            on_arrival(std::slice::from_ref(&typed_timer)),
            Reads::field("spec.every")
        );
        let noop = |_: kopf_core::handler::Cause| async { Ok(None) };
        let create = HandlerSpec::new("create_fn", Some(Reason::Create), noop);
        assert_eq!(
            on_arrival(&[typed_timer.clone(), create]),
            Reads::whole("'create_fn' is a change handler (the diff-base is of whole objects)")
        );
        let idle = HandlerSpec::timer(
            "quiet",
            TimerOptions::every(Duration::from_secs(60)).idle(Duration::from_secs(5)),
            typed.into_handler(),
        );
        assert!(on_arrival(&[idle]).is_whole());
        let filtered = typed_timer
            .clone()
            .with_options(Options::new().when(|b| b["spec"]["on"] == true));
        assert!(on_arrival(std::slice::from_ref(&filtered)).is_whole());
        let declared = filtered.with_options(Options::new().reads("spec.on"));
        assert_eq!(
            on_arrival(&[declared]),
            Reads::field("spec.on").and(Reads::field("spec.every"))
        );
        let index = HandlerSpec::index(
            "by_name",
            kopf_core::index::IndexTypes::of::<String, String>(),
            whole.into_handler(),
        );
        assert!(on_arrival(&[typed_timer, index]).is_whole());
    }
}
