//! The metrics layer: every attempt's answer counted by verb and status in
//! `kopf_api_requests_total` (status 0: no answer). Retries are counted by the retry layer.

use std::task::{Context, Poll};

use http::{Request, Response};
use kopf_core::handler::BoxFuture;
use kopf_core::metrics::Metrics;

use super::request::verb;

type Body = kube::client::Body;

/// Counts the answers of the service it wraps (nothing without metrics).
#[derive(Clone)]
pub(super) struct MetricsLayer(Option<Metrics>);

impl MetricsLayer {
    /// Counting in `metrics`, if any.
    pub(super) fn new(metrics: Option<Metrics>) -> Self {
        MetricsLayer(metrics)
    }
}

impl<S> tower::Layer<S> for MetricsLayer {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// The service of [`MetricsLayer`].
#[derive(Clone)]
pub(super) struct Counted<S> {
    inner: S,
    metrics: Option<Metrics>,
}

impl<S> tower::Service<Request<Body>> for Counted<S>
where
    S: tower::Service<Request<Body>, Response = Response<Body>, Error = kube::Error>,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let verb = verb(&request);
        let metrics = self.metrics.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            if let Some(m) = &metrics {
                m.api_request(verb, result.as_ref().map_or(0, |r| r.status().as_u16()));
            }
            result
        })
    }
}
