//! Skips the call when the handler's filters (labels, annotations, `when`) do not match the
//! object as it is at that point of the cycle. Evaluated before any work, silently.

use std::convert::Infallible;

use super::{Attempt, HandlerCall, Next, Step};

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

impl Step for FilterLayer {
    type Inner = Attempt;
    type Output = Attempt;

    async fn run<S: Next<Attempt>>(
        self,
        call: HandlerCall,
        mut next: S,
    ) -> Result<Attempt, Infallible> {
        if !call.spec.matches(&call.cause.body) {
            return Ok(Attempt::Skipped);
        }
        next.call(call).await
    }
}

#[cfg(test)]
mod tests {
    use super::super::ProgressLayer;
    use super::super::testing::*;
    use super::*;
    use crate::handler::MetaFilter;
    use crate::progress::ProgressRecord;
    use tower::Layer;

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
