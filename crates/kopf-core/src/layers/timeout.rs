//! Cancels a running async handler when its `timeout` (counted from the first attempt) runs
//! out. Kopf only checks the timeout between attempts; here the call itself is cut short.
//! Sync handlers run on blocking threads, which cannot be pre-empted: at the deadline the
//! attempt fails all the same, and the thread's late result is discarded.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tower::{Layer, Service};

use super::{CallOutcome, HandlerCall};
use crate::handler::error::HandlerError;
use crate::handler::spec::BoxFuture;

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

/// The service of [`TimeoutLayer`].
#[derive(Debug, Clone)]
pub struct Timeout<S> {
    inner: S,
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;
    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout { inner }
    }
}

impl<S> Service<HandlerCall> for Timeout<S>
where
    S: Service<HandlerCall, Response = CallOutcome, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = CallOutcome;
    type Error = Infallible;
    type Future = BoxFuture<Result<CallOutcome, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: HandlerCall) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let Some(limit) = call.spec.timeout else {
                return inner.call(call).await;
            };
            let remaining = limit.saturating_sub(call.spent());
            let id = call.spec.id.clone();
            match tokio::time::timeout(remaining, inner.call(call)).await {
                Ok(r) => r,
                Err(_) => Ok(CallOutcome::of(Err(HandlerError::permanent(format!(
                    "Handler '{id}' has timed out after {limit:?}."
                ))))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::progress::ProgressRecord;
    use std::time::Duration;

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
