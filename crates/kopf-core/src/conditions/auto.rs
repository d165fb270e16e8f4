//! The conditions maintained from handlers' outcomes ([`AutoConditions`]): one pure mapping,
//! [`auto_intents`], that the changing cycle and the reconcile engine share.

use super::declare::AutoConditions;
use super::model::{ConditionStatus, Intent};
use crate::cycle::HandlerOutcome;

/// The condition type of a handler's outcome: its id in CamelCase (letters and digits kept,
/// every other character a word break) with `Succeeded` appended: `create_fn` →
/// `CreateFnSucceeded`, `update/spec.field` → `UpdateSpecFieldSucceeded`.
pub fn handler_condition_type(handler_id: &str) -> String {
    let mut out = String::new();
    for word in handler_id.split(|c: char| !c.is_ascii_alphanumeric()) {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars);
        }
    }
    if out.is_empty() {
        out.push_str("Handler");
    }
    // The type's pattern wants a letter or digit first: a leading digit is fine as is.
    out.push_str("Succeeded");
    out
}

fn set(type_: &str, status: ConditionStatus, reason: &str, message: &str) -> Intent {
    Intent::set(type_, status, reason, message)
}

/// The intents of the auto conditions for the outcomes of the handlers that ran in a cycle
/// (id, outcome), `done` when the cause is handled (every handler of it finished). An
/// outcome with an empty id stands for the cause's earlier outcomes: it counts for the
/// summary and kstatus, its message as is, and has no per-handler condition.
///
/// | outcome | per handler | summary | kstatus |
/// |---|---|---|---|
/// | success | True/Succeeded | True when done and none failed | Reconciling=False, Stalled=False when done |
/// | will retry | Unknown/Retrying (message: the error) | Unknown | Reconciling=True |
/// | failed for good | False/Failed | False | Stalled=True |
///
/// ```
/// use kopf_core::conditions::{auto_intents, AutoConditions, Intent};
/// use kopf_core::processing::HandlerOutcome;
///
/// let auto = AutoConditions { per_handler: true, summary: Some("Ready".into()), kstatus: false };
/// let intents = auto_intents(&auto, &[("create_fn".into(), HandlerOutcome::Succeeded)], true);
/// assert_eq!(intents[0].type_(), "CreateFnSucceeded");
/// assert_eq!(intents[1].type_(), "Ready");
/// ```
pub fn auto_intents(
    spec: &AutoConditions,
    outcomes: &[(String, HandlerOutcome)],
    done: bool,
) -> Vec<Intent> {
    let mut out = Vec::new();
    if spec.per_handler {
        out.extend(
            outcomes
                .iter()
                .filter(|(id, _)| !id.is_empty())
                .map(|(id, outcome)| per_handler(id, outcome)),
        );
    }
    let failure = outcomes.iter().find_map(|(id, o)| match o {
        HandlerOutcome::Failed { message } if id.is_empty() => Some(message.clone()),
        HandlerOutcome::Failed { message } => Some(format!("handler '{id}' failed: {message}")),
        _ => None,
    });
    let retrying = outcomes.iter().find_map(|(id, o)| match o {
        HandlerOutcome::Retrying { message } => {
            Some(format!("handler '{id}' will retry: {message}"))
        }
        _ => None,
    });
    if let Some(summary) = &spec.summary {
        out.push(summary_intent(
            summary,
            failure.as_deref(),
            retrying.as_deref(),
            done,
        ));
    }
    if spec.kstatus {
        out.extend(kstatus_intents(
            failure.as_deref(),
            retrying.as_deref(),
            done,
        ));
    }
    out
}

/// The condition of one handler's outcome.
fn per_handler(id: &str, outcome: &HandlerOutcome) -> Intent {
    let t = handler_condition_type(id);
    match outcome {
        HandlerOutcome::Succeeded => set(&t, ConditionStatus::True, "Succeeded", ""),
        HandlerOutcome::Waiting => set(
            &t,
            ConditionStatus::Unknown,
            "Waiting",
            "sub-handlers are not finished",
        ),
        HandlerOutcome::Retrying { message } => {
            set(&t, ConditionStatus::Unknown, "Retrying", message)
        }
        HandlerOutcome::Failed { message } => set(&t, ConditionStatus::False, "Failed", message),
    }
}

/// The summary condition: the first failure, else done, else retrying or reconciling.
fn summary_intent(
    summary: &str,
    failure: Option<&str>,
    retrying: Option<&str>,
    done: bool,
) -> Intent {
    match (failure, done) {
        (Some(m), _) => set(summary, ConditionStatus::False, "Failed", m),
        (None, true) => set(summary, ConditionStatus::True, "Succeeded", ""),
        (None, false) => set(
            summary,
            ConditionStatus::Unknown,
            if retrying.is_some() {
                "Retrying"
            } else {
                "Reconciling"
            },
            retrying.unwrap_or(""),
        ),
    }
}

/// kstatus's `Reconciling` and `Stalled` (in the order they are written).
fn kstatus_intents(failure: Option<&str>, retrying: Option<&str>, done: bool) -> [Intent; 2] {
    match (failure, done) {
        (Some(m), _) => [
            set("Stalled", ConditionStatus::True, "Failed", m),
            set("Reconciling", ConditionStatus::False, "Failed", ""),
        ],
        (None, true) => [
            set("Reconciling", ConditionStatus::False, "Succeeded", ""),
            set("Stalled", ConditionStatus::False, "Succeeded", ""),
        ],
        (None, false) => [
            set(
                "Reconciling",
                ConditionStatus::True,
                if retrying.is_some() {
                    "Retrying"
                } else {
                    "Progressing"
                },
                retrying.unwrap_or(""),
            ),
            set("Stalled", ConditionStatus::False, "Progressing", ""),
        ],
    }
}
