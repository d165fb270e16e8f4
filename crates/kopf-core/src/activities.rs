//! Activities: operator-level handlers that are not about an object. Startup handlers run
//! before anything is watched (all must succeed; failures are retried with the handler's
//! backoff, a permanent failure stops the operator); cleanup handlers run once when the
//! operator exits; probe handlers are called for the liveness endpoint, their results cached
//! for a few seconds.
//!
//! Activities see the operator's memo itself ([`Memos::operator`]): a value a startup
//! handler sets there is what every object's memo starts from.
//!
//! ```
//! # async fn demo() {
//! use kopf_core::activities::{run_startup, ActivityContext};
//! use kopf_core::handler::{Cause, HandlerSpec};
//!
//! let startup = HandlerSpec::new("connect", None, |_c: Cause| async { Ok(None) });
//! run_startup(&[startup], &ActivityContext::default()).await.expect("started");
//! # }
//! ```

use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::time::Instant;
use tracing::Instrument;

use crate::causes::Reason;
use crate::daemons::tasks::first_record;
use crate::handler::context::Extensions;
use crate::handler::spec::{Cause, HandlerSpec};
use crate::layers::{Attempt, HandlerCall, Stack, Verdict};
use crate::memo::Memos;
use crate::progress::ProgressRecord;

/// A startup handler failed for good: the operator does not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the startup handler '{id}' failed: {message}")]
pub struct StartupFailed {
    /// The handler.
    pub id: String,
    /// Its error.
    pub message: String,
}

/// What activities share: the operator's memo, operator-wide values, the handler stack.
#[derive(Clone, Default, Debug)]
pub struct ActivityContext {
    /// The operator's memo itself.
    pub memo: Memos,
    /// Operator-wide values (the API client, the indexes).
    pub extensions: Extensions,
    /// Retries, timeouts, user layers.
    pub stack: Stack,
}

impl ActivityContext {
    async fn call(&self, spec: &HandlerSpec, record: &ProgressRecord) -> Attempt {
        let mut cause = Cause::for_body(Reason::Noop, Value::Null);
        cause.retry = record.retries.unwrap_or(0);
        if let Some(started) = &record.started {
            cause.started = started.clone();
        }
        cause.memo = self.memo.clone();
        cause.extensions = self.extensions.clone();
        self.stack
            .call(HandlerCall {
                spec: spec.clone(),
                cause,
                record: record.clone(),
                now: crate::clock::now(),
            })
            .await
    }
}

/// Runs the startup handlers at once, each until it succeeds (temporary errors are retried
/// after their delay); the first permanent failure is returned.
pub async fn run_startup(
    specs: &[HandlerSpec],
    ctx: &ActivityContext,
) -> Result<(), StartupFailed> {
    let mut runs = tokio::task::JoinSet::new();
    for spec in specs {
        let spec = spec.clone();
        let ctx = ctx.clone();
        runs.spawn(async move { start_one(&spec, &ctx).await }.in_current_span());
    }
    while let Some(result) = runs.join_next().await {
        match result {
            Ok(Ok(())) => {}
            Ok(Err(failed)) => return Err(failed),
            Err(e) => {
                return Err(StartupFailed {
                    id: "?".into(),
                    message: format!("a startup task ended abnormally: {e}"),
                });
            }
        }
    }
    Ok(())
}

async fn start_one(spec: &HandlerSpec, ctx: &ActivityContext) -> Result<(), StartupFailed> {
    let mut record = first_record();
    loop {
        match ctx.call(spec, &record).await.verdict() {
            Verdict::Skipped => return Ok(()),
            Verdict::Succeeded => {
                tracing::info!("Activity '{}' succeeded.", spec.id);
                return Ok(());
            }
            Verdict::Retry {
                error,
                delay,
                record: next,
            } => {
                tracing::error!(
                    "Activity '{}' failed temporarily: {error}; retrying in {}s.",
                    spec.id,
                    delay.as_secs_f64()
                );
                record = next;
                crate::clock::sleep(delay, "an activity's retry").await;
            }
            Verdict::Failed(error) => {
                tracing::error!("Activity '{}' failed permanently: {error}", spec.id);
                return Err(StartupFailed {
                    id: spec.id.clone(),
                    message: error.to_string(),
                });
            }
        }
    }
}

/// Runs the cleanup handlers once each; failures are only logged.
pub async fn run_cleanup(specs: &[HandlerSpec], ctx: &ActivityContext) {
    for spec in specs {
        if let Attempt::Done { outcome, .. } = ctx.call(spec, &first_record()).await {
            match outcome.result {
                Ok(_) => tracing::info!("Activity '{}' succeeded.", spec.id),
                Err(e) => tracing::error!("Activity '{}' failed: {e}", spec.id),
            }
        }
    }
}

/// The probe handlers, for the liveness endpoint: `{handler-id: result}`, cached.
#[derive(Debug)]
pub struct Probes {
    specs: Vec<HandlerSpec>,
    ctx: Mutex<ActivityContext>,
    ttl: Duration,
    cache: tokio::sync::Mutex<Option<(Instant, Value)>>,
}

impl Probes {
    /// Probes with results cached for `ttl` (Kopf: 10 s).
    pub fn new(specs: Vec<HandlerSpec>, ctx: ActivityContext, ttl: Duration) -> Self {
        Probes {
            specs,
            ctx: Mutex::new(ctx),
            ttl,
            cache: tokio::sync::Mutex::new(None),
        }
    }

    /// Replaces the context (e.g. once the API client exists).
    pub fn set_context(&self, ctx: ActivityContext) {
        *self.ctx.lock().unwrap_or_else(|e| e.into_inner()) = ctx;
    }

    /// Runs every probe (or returns the cached results): a failed probe's entry is
    /// `{"error": message}`.
    pub async fn run(&self) -> Value {
        let mut cache = self.cache.lock().await;
        if let Some((at, value)) = cache.as_ref()
            && at.elapsed() < self.ttl
        {
            return value.clone();
        }
        let ctx = self.ctx.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut results = Map::new();
        for spec in &self.specs {
            let value = match ctx.call(spec, &first_record()).await {
                Attempt::Skipped => continue,
                Attempt::Done { outcome, .. } => match outcome.result {
                    Ok(v) => v.unwrap_or(Value::Null),
                    Err(e) => serde_json::json!({"error": e.to_string()}),
                },
            };
            results.insert(spec.id.clone(), value);
        }
        let value = Value::Object(results);
        *cache = Some((Instant::now(), value.clone()));
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::HandlerError;
    use serde_json::json;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(start_paused = true)]
    async fn startup_retries_until_success_and_stops_on_permanent_errors() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let flaky = HandlerSpec::new("flaky", None, move |_c: Cause| {
            let n = c.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 2 {
                    Err(HandlerError::temporary("not ready", Duration::from_secs(5)))
                } else {
                    Ok(None)
                }
            }
        });
        let t0 = Instant::now();
        run_startup(std::slice::from_ref(&flaky), &ActivityContext::default())
            .await
            .expect("succeeds on the third attempt");
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(t0.elapsed().as_secs(), 10);

        let broken = HandlerSpec::new("broken", None, |_c: Cause| async {
            Err(HandlerError::permanent("no credentials"))
        });
        let err = run_startup(&[broken], &ActivityContext::default())
            .await
            .expect_err("fails");
        assert_eq!(
            err.to_string(),
            "the startup handler 'broken' failed: no credentials"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn probe_results_are_cached() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let probe = HandlerSpec::new("count", None, move |_c: Cause| {
            let n = c.fetch_add(1, Ordering::SeqCst);
            async move { Ok(Some(json!(n))) }
        });
        let failing = HandlerSpec::new("down", None, |_c: Cause| async {
            Err(HandlerError::permanent("unreachable"))
        });
        let probes = Probes::new(
            vec![probe, failing],
            ActivityContext::default(),
            Duration::from_secs(10),
        );
        assert_eq!(
            probes.run().await,
            json!({"count": 0, "down": {"error": "unreachable"}})
        );
        assert_eq!(probes.run().await["count"], json!(0));
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(probes.run().await["count"], json!(1));
    }
}
