//! The conditions a cycle writes: the resource's declarations merged once, and each cycle's
//! intents (the declared defaults, what the handlers set, the auto conditions of their
//! outcomes).

use crate::causes::Reason;
use crate::conditions::{ConditionsSpec, Intent, auto_intents};
use crate::cycle::{CycleOutcome, FinalizerChange, HandlerOutcome};
use crate::handler::spec::HandlerSpec;

/// The conditions declarations among `handlers`, merged into one.
pub(super) fn merged_conditions(handlers: &[HandlerSpec]) -> Option<ConditionsSpec> {
    let mut specs = handlers
        .iter()
        .filter_map(|h| h.declared::<ConditionsSpec>());
    let mut all = specs.next()?.clone();
    for spec in specs {
        all.declared.extend(spec.declared.iter().cloned());
        all.auto.per_handler |= spec.auto.per_handler;
        all.auto.kstatus |= spec.auto.kstatus;
        if all.auto.summary.is_none() {
            all.auto.summary = spec.auto.summary.clone();
        }
    }
    Some(all)
}

/// The condition intents of a cycle: the declared defaults (except in a deletion's
/// cycles and in a cycle that only adds the finalizer: the next one writes status
/// anyway), what the handlers set, and the auto conditions of their outcomes (not while
/// the object is deleted). `reconciled`: the resource has a reconcile.
pub(super) fn of_cycle(
    spec: Option<&ConditionsSpec>,
    reconciled: bool,
    out: &CycleOutcome,
    handlers: Vec<Intent>,
) -> Vec<Intent> {
    let mut intents = Vec::new();
    let deleting = out.reason == Reason::Delete;
    // With a reconcile, a cycle that writes nothing else leaves the defaults to the
    // reconcile's write, which follows (no request of their own).
    if let Some(spec) = spec
        && !deleting
        && out.finalizer != Some(FinalizerChange::Added)
        && !(reconciled && handlers.is_empty() && out.plan.is_empty())
    {
        intents.extend(spec.declared.iter().cloned());
    }
    intents.extend(handlers);
    if let Some(spec) = spec
        && !deleting
        && !out.ran.is_empty()
    {
        let mut ran = out.ran.clone();
        let failed_now = ran
            .iter()
            .any(|(_, o)| matches!(o, HandlerOutcome::Failed { .. }));
        if out.counts.1 > 0 && !failed_now {
            // A handler of the cause failed for good in an earlier cycle: the summary
            // and kstatus still say so (its own condition was set then).
            ran.push((
                String::new(),
                HandlerOutcome::Failed {
                    message: "a handler of this cause failed for good in an earlier attempt".into(),
                },
            ));
        }
        intents.extend(auto_intents(&spec.auto, &ran, out.done));
    }
    intents
}
