//! The task of one daemon or timer on one object: its loop of calls through the handler
//! stack, with the retry record kept in memory and each call's outcome delivered.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::context::{Delivered, Delivery, Live, SpawnContext};
use super::options::{DaemonOptions, TimerOptions};
use super::stopped::Stopped;
use crate::causes::Reason;
use crate::handler::spec::{Cause, HandlerSpec};
use crate::layers::{Attempt, HandlerCall, Verdict};
use crate::plan::PatchPlan;
use crate::progress::{ProgressRecord, format_time};

/// One call through the stack, with the in-memory retry record; delivers the outcome. The
/// loops box it: a task that waits for its next call (most of them, most of the time) then
/// holds its loop's few fields, not room for a whole call.
async fn call_once(
    spec: &HandlerSpec,
    ctx: &SpawnContext,
    live: &watch::Receiver<Live>,
    stopped: &Stopped,
    record: &ProgressRecord,
) -> Attempt {
    let latest = live.borrow().body.clone();
    let mut cause = Cause::for_body(Reason::Noop, Value::clone(&latest));
    cause.retry = record.retries.unwrap_or(0);
    if let Some(started) = &record.started {
        cause.started = started.clone();
    }
    cause.memo = ctx.memo.clone();
    cause.extensions = ctx.extensions.clone();
    cause.stopped = Some(stopped.clone());
    let conditions = cause.conditions.clone();
    let call = HandlerCall {
        spec: spec.clone(),
        cause,
        record: record.clone(),
        now: crate::clock::now(),
    };
    let attempt = ctx.stack.call(call.clone()).await;
    if let Attempt::Done { outcome, .. } = &attempt {
        let mut plan = PatchPlan::new();
        let mut delivered = Vec::new();
        if let Ok(Some(result)) = &outcome.result {
            delivered.push((spec.id.clone(), json!({"status": {&spec.id: result}})));
            plan.status_result(&spec.id, result.clone());
        }
        if let Some(status) = outcome.patch.get("status").filter(|s| s.is_object()) {
            delivered.push((spec.id.clone(), json!({"status": status})));
        }
        plan.merge(&outcome.patch);
        // Conditions set by the call go with its delivery (applied to the latest list).
        let intents = conditions.take_intents();
        if !intents.is_empty() {
            plan.conditions(intents);
            plan.condition_clock(conditions.generation(), crate::clock::now());
        }
        if !plan.is_empty() || !outcome.events.is_empty() {
            // The latest state: the object may have changed during a long call.
            let latest = live.borrow().body.clone();
            let body = Value::clone(&latest);
            let stored = (ctx.deliver)(Delivery {
                body: body.clone(),
                plan,
                events: outcome.events.clone(),
                delivered,
            })
            .await;
            if let Delivered::Rejected(message) = stored
                && outcome.result.is_ok()
            {
                // The server refused the result: that is how this attempt ended.
                let rejected = ctx.stack.reject(call, message).await;
                if let Attempt::Done { outcome, .. } = &rejected
                    && !outcome.events.is_empty()
                {
                    (ctx.deliver)(Delivery {
                        body,
                        plan: PatchPlan::new(),
                        events: outcome.events.clone(),
                        delivered: Vec::new(),
                    })
                    .await;
                }
                return rejected;
            }
        }
    }
    attempt
}

/// The in-memory retry record of a first attempt.
pub(crate) fn first_record() -> ProgressRecord {
    ProgressRecord {
        started: Some(format_time(crate::clock::now())),
        retries: Some(0),
        ..Default::default()
    }
}

/// What one daemon or timer task works with.
pub(super) struct Run {
    /// The handler.
    pub(super) spec: HandlerSpec,
    /// What the object's daemons and timers share.
    pub(super) ctx: SpawnContext,
    /// The object's latest state.
    pub(super) live: watch::Receiver<Live>,
    /// Its stop flag.
    pub(super) stopped: Stopped,
}

/// A daemon's task: called after the initial delay, restarted after temporary errors.
pub(super) async fn daemon_loop(run: Run, options: DaemonOptions) {
    let Run {
        spec,
        ctx,
        live,
        stopped,
    } = run;
    let title = format!("Daemon '{}'", spec.id);
    if stopped
        .sleep_for(options.initial_delay, "a daemon's initial delay")
        .await
        .is_some()
    {
        return;
    }
    let mut record = first_record();
    loop {
        match Box::pin(call_once(&spec, &ctx, &live, &stopped, &record))
            .await
            .verdict()
        {
            Verdict::Skipped => return,
            Verdict::Succeeded => {
                match stopped.reason() {
                    Some(reason) => tracing::info!("{title} has exited: {reason}."),
                    None => tracing::info!("{title} succeeded."),
                }
                return;
            }
            Verdict::Retry {
                error,
                delay,
                record: next,
            } => {
                if stopped.is_set() {
                    return;
                }
                tracing::error!(
                    "{title} failed temporarily: {error}; it restarts in {}s.",
                    delay.as_secs_f64()
                );
                record = next;
                if stopped
                    .sleep_for(delay, "a daemon's restart")
                    .await
                    .is_some()
                {
                    return;
                }
            }
            Verdict::Failed(error) => {
                tracing::error!("{title} failed permanently: {error}");
                return;
            }
        }
    }
}

/// A timer's task: called every interval (or once idle), errors retried with the backoff.
pub(super) async fn timer_loop(run: Run, options: TimerOptions) {
    let Run {
        spec,
        ctx,
        mut live,
        stopped,
    } = run;
    let title = format!("Timer '{}'", spec.id);
    if stopped
        .sleep_for(options.initial_delay, "a timer's initial delay")
        .await
        .is_some()
    {
        return;
    }
    let mut record = first_record();
    // The essence change an idle-only timer has already been called for.
    let mut called_for: Option<Instant> = None;
    loop {
        if let Some(idle) = options.idle
            && !wait_idle(idle, &options, &mut live, &stopped, &mut called_for).await
        {
            return;
        }
        let start = Instant::now();
        let delay = match Box::pin(call_once(&spec, &ctx, &live, &stopped, &record))
            .await
            .verdict()
        {
            Verdict::Skipped => None,
            Verdict::Succeeded => {
                tracing::debug!("{title} succeeded.");
                record = first_record();
                None
            }
            Verdict::Retry {
                error,
                delay,
                record: next,
            } => {
                tracing::error!(
                    "{title} failed temporarily: {error}; it is called again in {}s.",
                    delay.as_secs_f64()
                );
                record = next;
                Some(delay)
            }
            Verdict::Failed(error) => {
                tracing::error!("{title} failed permanently: {error}");
                record = first_record();
                None
            }
        };
        if stopped.is_set() {
            return;
        }
        let Some(sleep) = timer_sleep(delay, &options, start) else {
            return;
        };
        if stopped
            .sleep_for(sleep, "a timer's next call")
            .await
            .is_some()
        {
            return;
        }
    }
}

/// Waits until the object has been unchanged for `idle` (and, for idle-only timers, until
/// it changed since the last call); false when the timer stops meanwhile.
async fn wait_idle(
    idle: Duration,
    options: &TimerOptions,
    live: &mut watch::Receiver<Live>,
    stopped: &Stopped,
    called_for: &mut Option<Instant>,
) -> bool {
    loop {
        let changed = live.borrow_and_update().changed;
        let quiet = changed.elapsed();
        let fresh = options.interval.is_some() || *called_for != Some(changed);
        if fresh && quiet >= idle {
            *called_for = Some(changed);
            return true;
        }
        let wait = if fresh {
            idle - quiet
        } else {
            Duration::from_secs(3600)
        };
        tokio::select! {
            _ = stopped.wait() => return false,
            _ = crate::clock::sleep(wait, "a timer's idle wait") => {}
            r = live.changed() => if r.is_err() { return false },
        }
    }
}

/// How long a timer sleeps after a call that started at `start`: the retry delay of a
/// failure, else its interval (to the next multiple of it when sharp); None: it is done.
fn timer_sleep(
    delay: Option<Duration>,
    options: &TimerOptions,
    start: Instant,
) -> Option<Duration> {
    Some(match (delay, options.interval) {
        (Some(delay), _) => delay,
        (None, Some(interval)) if options.sharp => {
            // The next multiple of the interval since this call started.
            let spent = start.elapsed().as_nanos();
            let step = interval.as_nanos().max(1);
            Duration::from_nanos((step - spent % step) as u64)
        }
        (None, Some(interval)) => interval,
        (None, None) if options.idle.is_some() => Duration::ZERO,
        (None, None) => return None,
    })
}
