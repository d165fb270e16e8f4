//! Classifies one attempt under Kopf's retry rules: the retry limit and the timeout between
//! attempts, and arbitrary errors by the handler's errors mode, with Kopf's look-ahead (an
//! attempt that fails temporarily fails for good at once when its next attempt would exceed
//! the retry limit or the timeout).
//!
//! It does not retry: a temporary outcome goes into the handler's progress record, and the
//! next attempt is a later cycle's (or, for daemons, timers and activities, their loop's).

use std::convert::Infallible;
use std::time::Duration;

use super::{CallOutcome, HandlerCall, Next, Step};
use crate::handler::error::{ErrorsMode, HandlerError};

/// Classifies the attempt by the handler's `retries`, `timeout` and errors mode: temporary
/// (with the delay until the next attempt), permanent, or success.
///
/// ```
/// use kopf_core::layers::{ClassifyLayer, Invoke, TimeoutLayer};
/// use tower::Layer;
///
/// let service = ClassifyLayer.layer(TimeoutLayer.layer(Invoke));
/// # let _ = service;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ClassifyLayer;

impl Step for ClassifyLayer {
    type Inner = CallOutcome;
    type Output = CallOutcome;

    async fn run<S: Next<CallOutcome>>(
        self,
        call: HandlerCall,
        mut next: S,
    ) -> Result<CallOutcome, Infallible> {
        let spec = call.spec.clone();
        let name = format!("Handler '{}'", spec.id);
        let retries = call.record.retries.unwrap_or(0);
        let spent = call.spent();
        // Strict checks first: downtime may have used up the time or the attempts.
        if let Some(limit) = spec.timeout
            && spent >= limit
        {
            return Ok(CallOutcome::of(Err(HandlerError::permanent(format!(
                "{name} has timed out after {spent:?}."
            )))));
        }
        if let Some(limit) = spec.retries
            && retries >= limit
        {
            return Ok(CallOutcome::of(Err(HandlerError::permanent(format!(
                "{name} has exceeded {retries} retries."
            )))));
        }
        let mut outcome = next.call(call).await?;
        // Would the next attempt be too late or one too many?
        let doomed = |delay: Duration| -> Option<String> {
            if let Some(limit) = spec.timeout
                && spent + delay >= limit
            {
                return Some(format!("will time out after {limit:?}"));
            }
            if let Some(limit) = spec.retries
                && retries + 1 >= limit
            {
                return Some(format!("will exceed {limit} retries"));
            }
            None
        };
        outcome.result = match outcome.result {
            Err(e @ HandlerError::Temporary { .. }) => {
                match doomed(e.delay().unwrap_or_default()) {
                    Some(why) => {
                        let message =
                            format!("{name} failed temporarily but {why}: {}", e.message());
                        Err(e.into_permanent(message))
                    }
                    None => Err(e),
                }
            }
            Err(e @ HandlerError::Other { .. }) => match spec.errors {
                ErrorsMode::Ignored => {
                    tracing::warn!("{name} failed with an exception and will ignore it: {e}");
                    Ok(None)
                }
                ErrorsMode::Permanent => {
                    let message = e.message().to_string();
                    Err(e.into_permanent(message))
                }
                ErrorsMode::Temporary => match doomed(spec.backoff) {
                    Some(why) => {
                        let message = format!(
                            "{name} failed with an exception and will stop now (it {why} on the next attempt): {}",
                            e.message()
                        );
                        Err(e.into_permanent(message))
                    }
                    None => Err(e.into_temporary(Some(spec.backoff))),
                },
            },
            other => other,
        };
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::progress::{ProgressRecord, format_time};
    use tower::Layer;

    fn attempt(retries: u32) -> ProgressRecord {
        ProgressRecord {
            retries: Some(retries),
            started: Some(format_time(jiff::Timestamp::now())),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn limits_and_classifies() {
        let mut s = spec();
        s.retries = Some(3);
        let out = run(
            ClassifyLayer.layer(fake(Ok(None))),
            call_with(s.clone(), attempt(3)),
        )
        .await;
        assert!(
            matches!(out.result, Err(HandlerError::Permanent { message, .. }) if message.contains("exceeded 3 retries"))
        );
        s.backoff = Duration::from_secs(7);
        let out = run(
            ClassifyLayer.layer(fake(Err(HandlerError::other("x")))),
            call_with(s.clone(), attempt(0)),
        )
        .await;
        assert_eq!(
            out.result,
            Err(HandlerError::Temporary {
                message: "x".into(),
                delay: Some(Duration::from_secs(7)),
                source: None,
            })
        );
        s.errors = ErrorsMode::Ignored;
        let out = run(
            ClassifyLayer.layer(fake(Err(HandlerError::other("x")))),
            call_with(s.clone(), attempt(0)),
        )
        .await;
        assert_eq!(out.result, Ok(None));
        s.errors = ErrorsMode::Permanent;
        let out = run(
            ClassifyLayer.layer(fake(Err(HandlerError::other("x")))),
            call_with(s, attempt(0)),
        )
        .await;
        assert_eq!(out.result, Err(HandlerError::permanent("x")));
    }

    #[tokio::test]
    async fn looks_ahead_like_kopf() {
        // The last allowed attempt fails temporarily: no further attempt is scheduled.
        let mut s = spec();
        s.retries = Some(2);
        let out = run(
            ClassifyLayer.layer(fake(Err(HandlerError::temporary(
                "later",
                Duration::from_secs(1),
            )))),
            call_with(s.clone(), attempt(1)),
        )
        .await;
        assert!(
            matches!(&out.result, Err(HandlerError::Permanent { message, .. })
                if message == "Handler 'h' failed temporarily but will exceed 2 retries: later"),
            "{:?}",
            out.result
        );
        // A first attempt is still retried.
        let out = run(
            ClassifyLayer.layer(fake(Err(HandlerError::other("boom")))),
            call_with(s.clone(), attempt(0)),
        )
        .await;
        assert!(matches!(out.result, Err(HandlerError::Temporary { .. })));
        // A backoff beyond the timeout ends the handler now.
        s.retries = None;
        s.timeout = Some(Duration::from_secs(30));
        s.backoff = Duration::from_secs(60);
        let out = run(
            ClassifyLayer.layer(fake(Err(HandlerError::other("boom")))),
            call_with(s, attempt(0)),
        )
        .await;
        assert!(
            matches!(&out.result, Err(HandlerError::Permanent { message, .. }) if message.contains("will time out")),
            "{:?}",
            out.result
        );
    }
}
