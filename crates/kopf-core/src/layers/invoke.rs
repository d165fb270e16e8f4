//! The innermost service: runs the handler in its own task, so that a panic stays an error
//! of that handler and the operator keeps serving.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tower::Service;

use super::{CallOutcome, HandlerCall};
use crate::handler::error::HandlerError;
use crate::handler::spec::BoxFuture;

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

/// The end of the operator's shutdown grace period: handlers still running then are
/// cancelled, and their attempt ends as a temporary error (its progress is stored and the
/// handler runs again after a restart). [`Invoke`] finds it in the cause's extensions.
#[derive(Clone, Debug)]
pub struct GraceOver(tokio::sync::watch::Receiver<bool>);

/// Ends the grace period of [`GraceOver`].
#[derive(Debug)]
pub struct EndGrace(tokio::sync::watch::Sender<bool>);

impl GraceOver {
    /// A grace period and the handle that ends it.
    pub fn new() -> (EndGrace, GraceOver) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (EndGrace(tx), GraceOver(rx))
    }

    /// Completes when the grace period is over (never if its handle is gone first).
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        if rx.wait_for(|over| *over).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl EndGrace {
    /// Ends the grace period: running handlers are cancelled.
    pub fn end(&self) {
        self.0.send_replace(true);
    }
}

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
            let grace = call.cause.extensions.get::<GraceOver>().cloned();
            let span = tracing::Span::current();
            let mut task = AbortOnDrop(tokio::spawn(tracing::Instrument::instrument(
                async move { handler.call(call.cause).await },
                span,
            )));
            let finished = async {
                (&mut task.0)
                    .await
                    .unwrap_or_else(|e| Err(HandlerError::from_join(e)))
            };
            let result = match grace {
                None => finished.await,
                Some(grace) => tokio::select! {
                    biased;
                    result = finished => result,
                    _ = grace.wait() => Err(HandlerError::Temporary {
                        message: "cancelled: the operator is shutting down".into(),
                        delay: None,
                        source: None,
                    }),
                },
            };
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
            matches!(out.result, Err(HandlerError::Other { message, .. }) if message.contains("panicked"))
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
    async fn the_end_of_the_grace_period_cancels_running_handlers() {
        let slow = HandlerSpec::new("slow", None, |_c: Cause| async {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            Ok(None)
        });
        let (end, grace) = GraceOver::new();
        let mut call = call_with(slow, ProgressRecord::default());
        call.cause.extensions.insert(grace);
        let running = tokio::spawn(run(Invoke, call));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(
            !running.is_finished(),
            "running until the grace period ends"
        );
        end.end();
        let out = tokio::time::timeout(std::time::Duration::from_secs(5), running)
            .await
            .expect("cancelled at once")
            .expect("no panic");
        assert!(
            matches!(&out.result, Err(HandlerError::Temporary { message, delay: None, .. }) if message.contains("shutting down")),
            "{:?}",
            out.result
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
