//! The innermost service: runs the handler in its own task, so that a panic stays an error
//! of that handler and the operator keeps serving.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tower::Service;

use super::{CallOutcome, HandlerCall};
use crate::handler::{BoxFuture, HandlerError};

/// Runs the handler of a [`HandlerCall`] and collects its result, patch, events and
/// sub-handlers.
///
/// ```
/// # async fn demo() {
/// use kopf_core::causes::Reason;
/// use kopf_core::handler::{Cause, HandlerSpec};
/// use kopf_core::layers::{HandlerCall, Invoke};
/// use tower::ServiceExt;
///
/// let spec = HandlerSpec::new("h", Some(Reason::Create), |_c: Cause| async {
///     Ok(Some(serde_json::json!("done")))
/// });
/// let body = serde_json::json!({"metadata": {"name": "x"}});
/// let call = HandlerCall {
///     spec,
///     cause: Cause::for_body(Reason::Create, body),
///     record: Default::default(),
///     now: jiff::Timestamp::now(),
/// };
/// let outcome = Invoke.oneshot(call).await.unwrap_or_else(|never| match never {});
/// assert_eq!(outcome.result, Ok(Some(serde_json::json!("done"))));
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Invoke;

/// Cancels the handler's task when the call is dropped (e.g. at its timeout): a dropped
/// `JoinHandle` alone would leave the task running.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Service<HandlerCall> for Invoke {
    type Response = CallOutcome;
    type Error = Infallible;
    type Future = BoxFuture<Result<CallOutcome, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: HandlerCall) -> Self::Future {
        Box::pin(async move {
            let patch = call.cause.patch.clone();
            let events = call.cause.events.clone();
            let subhandlers = call.cause.subhandlers.clone();
            let handler = call.spec.handler.clone();
            let span = tracing::Span::current();
            let mut task = AbortOnDrop(tokio::spawn(tracing::Instrument::instrument(
                async move { handler.call(call.cause).await },
                span,
            )));
            let result = (&mut task.0)
                .await
                .unwrap_or_else(|e| Err(HandlerError::from_join(e)));
            Ok(CallOutcome {
                result,
                patch: patch.get(),
                events: events.take(),
                subhandlers: subhandlers.take(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::handler::{Cause, HandlerSpec};
    use crate::progress::ProgressRecord;
    use serde_json::json;

    #[tokio::test]
    async fn runs_the_handler_and_contains_panics() {
        let out = run(Invoke, call_with(spec(), ProgressRecord::default())).await;
        assert_eq!(out.result, Ok(Some(json!(1))));
        let boom = HandlerSpec::new("b", None, |_c: Cause| async {
            if true {
                panic!("boom");
            }
            Ok(None)
        });
        let out = run(Invoke, call_with(boom, ProgressRecord::default())).await;
        assert!(
            matches!(out.result, Err(HandlerError::Other { message }) if message.contains("panicked"))
        );
    }

    #[tokio::test]
    async fn a_dropped_call_cancels_the_handler() {
        let finished = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = finished.clone();
        let slow = HandlerSpec::new("slow", None, move |_c: Cause| {
            let flag = flag.clone();
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(None)
            }
        });
        let call = run(Invoke, call_with(slow, ProgressRecord::default()));
        let cut = tokio::time::timeout(std::time::Duration::from_millis(50), call).await;
        assert!(cut.is_err(), "cut short");
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        assert!(
            !finished.load(std::sync::atomic::Ordering::SeqCst),
            "the handler was stopped, not left running"
        );
    }

    #[tokio::test]
    async fn collects_what_the_handler_registered() {
        let parent = HandlerSpec::new("p", None, |c: Cause| async move {
            c.patch.merge(json!({"metadata": {"labels": {"x": "y"}}}));
            c.events.info("Hello", "hi");
            c.subhandlers
                .push(HandlerSpec::new("child", None, |_c: Cause| async {
                    Ok(None)
                }));
            Ok(None)
        });
        let out = run(Invoke, call_with(parent, ProgressRecord::default())).await;
        assert_eq!(out.patch, json!({"metadata": {"labels": {"x": "y"}}}));
        assert_eq!(out.events.len(), 1);
        assert_eq!(out.subhandlers.len(), 1);
        assert_eq!(out.subhandlers[0].id, "child");
    }
}
