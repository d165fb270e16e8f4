//! Cancels a running async handler when its `timeout` (counted from the first attempt) runs
//! out. Kopf only checks the timeout between attempts; here the call itself is cut short.
//! Sync handlers run on blocking threads, which cannot be pre-empted: at the deadline the
//! attempt fails all the same, and the thread's late result is discarded.

use std::convert::Infallible;

use super::{CallOutcome, HandlerCall, Next, Step};
use crate::handler::error::HandlerError;

/// Cancels the call when the handler's timeout runs out.
///
/// ```
/// use kopf_core::layers::{Invoke, TimeoutLayer};
/// use tower::Layer;
///
/// let service = TimeoutLayer.layer(Invoke);
/// # let _ = service;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct TimeoutLayer;

impl Step for TimeoutLayer {
    type Inner = CallOutcome;
    type Output = CallOutcome;

    async fn run<S: Next<CallOutcome>>(
        self,
        call: HandlerCall,
        mut next: S,
    ) -> Result<CallOutcome, Infallible> {
        let Some(limit) = call.spec.timeout else {
            return next.call(call).await;
        };
        let remaining = limit.saturating_sub(call.spent());
        let id = call.spec.id.clone();
        match tokio::time::timeout(remaining, next.call(call)).await {
            Ok(r) => r,
            Err(_) => Ok(CallOutcome::of(Err(HandlerError::permanent(format!(
                "Handler '{id}' has timed out after {limit:?}."
            ))))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::progress::ProgressRecord;
    use std::time::Duration;
    use tower::Layer;

    #[tokio::test]
    async fn cancels_at_the_deadline() {
        let slow = tower::service_fn(|_c: HandlerCall| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<_, Infallible>(CallOutcome::of(Ok(None)))
        });
        let mut s = spec();
        s.timeout = Some(Duration::from_millis(50));
        let started = std::time::Instant::now();
        let out = run(
            TimeoutLayer.layer(slow),
            call_with(s, ProgressRecord::default()),
        )
        .await;
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(
            matches!(out.result, Err(HandlerError::Permanent { message, .. }) if message.contains("timed out"))
        );
        // Without a timeout, the inner result passes through.
        let out = run(
            TimeoutLayer.layer(fake(Ok(None))),
            call_with(spec(), ProgressRecord::default()),
        )
        .await;
        assert_eq!(out.result, Ok(None));
    }
}
