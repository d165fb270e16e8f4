//! The attempt of a handler whose last result the API server rejected (e.g. a CRD's status
//! schema refused it): the handler is not called again; its attempt is that rejection, an
//! error classified like any other (retried after its backoff, failed for good, or ignored,
//! by its errors mode). The layers below it (user layers around the attempt, the
//! classification's own place, the timeout, the invocation) are not involved: the handler did
//! not run now. The cycle marks such a call with a [`Rejection`] (see
//! [`Stack::reject`](super::Stack::reject)).

use std::convert::Infallible;

use super::{CallOutcome, ClassifyLayer, HandlerCall, Next, Step};
use crate::handler::error::HandlerError;

/// The API server's message about a handler's last result, in the call's extensions.
#[derive(Debug, Clone)]
pub(crate) struct Rejection(pub(crate) String);

/// Answers a rejected call with its classified rejection; other calls go on down.
///
/// ```
/// use kopf_core::layers::{ClassifyLayer, Invoke, RejectedLayer};
/// use tower::Layer;
///
/// let service = RejectedLayer.layer(ClassifyLayer.layer(Invoke));
/// # let _ = service;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct RejectedLayer;

impl Step for RejectedLayer {
    type Inner = CallOutcome;
    type Output = CallOutcome;

    async fn run<S: Next<CallOutcome>>(
        self,
        call: HandlerCall,
        mut next: S,
    ) -> Result<CallOutcome, Infallible> {
        let Some(Rejection(message)) = call.cause.extensions.get::<Rejection>().cloned() else {
            return next.call(call).await;
        };
        // The rejection is this attempt's outcome, under the same rules as a result.
        let rejected = tower::service_fn(move |_call: HandlerCall| {
            let message = message.clone();
            async move { Ok::<_, Infallible>(CallOutcome::of(Err(HandlerError::other(message)))) }
        });
        ClassifyLayer.run(call, rejected).await
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::handler::ErrorsMode;
    use crate::progress::ProgressRecord;
    use serde_json::json;
    use std::time::Duration;
    use tower::Layer;

    #[tokio::test]
    async fn a_rejected_call_is_its_classified_rejection_without_the_inner_service() {
        let inner = tower::service_fn(|_c: HandlerCall| async {
            panic!("the inner service is not called for a rejected result")
        });
        let mut s = spec();
        s.backoff = Duration::from_secs(9);
        let mut call = call_with(s.clone(), ProgressRecord::default());
        call.cause
            .extensions
            .insert(Rejection("status.x: Invalid value".into()));
        let out: CallOutcome = run(RejectedLayer.layer(inner), call).await;
        assert_eq!(
            out.result,
            Err(HandlerError::Temporary {
                message: "status.x: Invalid value".into(),
                delay: Some(Duration::from_secs(9)),
                source: None,
            }),
            "retried after its backoff, as an error of the errors mode `temporary`"
        );
        s.errors = ErrorsMode::Permanent;
        let mut call = call_with(s, ProgressRecord::default());
        call.cause.extensions.insert(Rejection("no".into()));
        let out = run(RejectedLayer.layer(fake(Ok(None))), call).await;
        assert_eq!(out.result, Err(HandlerError::permanent("no")));
    }

    #[tokio::test]
    async fn other_calls_go_down() {
        let out = run(
            RejectedLayer.layer(fake(Ok(Some(json!(1))))),
            call_with(spec(), ProgressRecord::default()),
        )
        .await;
        assert_eq!(out.result, Ok(Some(json!(1))));
    }
}
