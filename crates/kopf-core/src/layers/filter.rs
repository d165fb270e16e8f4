//! Skips the call when the handler's filters (labels, annotations, `when`) do not match the
//! object as it is at that point of the cycle. Evaluated before any work, silently.

use std::convert::Infallible;
use std::task::{Context, Poll};

use tower::{Layer, Service};

use super::{Attempt, HandlerCall};
use crate::handler::spec::BoxFuture;

/// Answers [`Attempt::Skipped`] for objects the handler's filters reject.
///
/// ```
/// use kopf_core::layers::{FilterLayer, Invoke, ProgressLayer};
/// use tower::Layer;
///
/// let service = FilterLayer.layer(ProgressLayer.layer(Invoke));
/// # let _ = service;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct FilterLayer;

/// The service of [`FilterLayer`].
#[derive(Debug, Clone)]
pub struct Filter<S> {
    inner: S,
}

impl<S> Layer<S> for FilterLayer {
    type Service = Filter<S>;
    fn layer(&self, inner: S) -> Filter<S> {
        Filter { inner }
    }
}

impl<S> Service<HandlerCall> for Filter<S>
where
    S: Service<HandlerCall, Response = Attempt, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Attempt;
    type Error = Infallible;
    type Future = BoxFuture<Result<Attempt, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: HandlerCall) -> Self::Future {
        if !call.spec.matches(&call.cause.body) {
            return Box::pin(async { Ok(Attempt::Skipped) });
        }
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move { inner.call(call).await })
    }
}

#[cfg(test)]
mod tests {
    use super::super::ProgressLayer;
    use super::super::testing::*;
    use super::*;
    use crate::handler::MetaFilter;
    use crate::progress::ProgressRecord;

    #[tokio::test]
    async fn skips_non_matching_objects() {
        let inner = ProgressLayer.layer(fake(Ok(None)));
        let mut s = spec();
        s.labels = vec![("a".into(), MetaFilter::Value("other".into()))];
        let a = run(
            FilterLayer.layer(inner.clone()),
            call_with(s, ProgressRecord::default()),
        )
        .await;
        assert!(matches!(a, Attempt::Skipped));
        let a = run(
            FilterLayer.layer(inner),
            call_with(spec(), ProgressRecord::default()),
        )
        .await;
        assert!(matches!(a, Attempt::Done { .. }));
    }
}
