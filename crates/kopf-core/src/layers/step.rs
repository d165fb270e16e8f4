//! What every layer of the stack has in common, written once: a [`Step`] is what one layer
//! does around the rest of the stack (an async function of the call and the next service);
//! [`Stepped`] is the `tower::Service` that runs a step around its inner service (readiness,
//! taking the ready service for the call, boxing the future).

use std::convert::Infallible;
use std::future::Future;
use std::task::{Context, Poll};

use tower::Service;

use super::HandlerCall;
use crate::handler::spec::BoxFuture;

/// What one layer does around the rest of the stack. Implemented by the framework's layers
/// ([`FilterLayer`](super::FilterLayer), [`ClassifyLayer`](super::ClassifyLayer), ...); a
/// [`Stepped`] runs it as a service.
///
/// ```
/// use std::convert::Infallible;
/// use kopf_core::layers::{CallOutcome, HandlerCall, Invoke, Next, Step, Stepped};
/// use tower::Service;
///
/// /// Counts nothing, changes nothing: calls the next service.
/// #[derive(Clone)]
/// struct Through;
///
/// impl Step for Through {
///     type Inner = CallOutcome;
///     type Output = CallOutcome;
///     async fn run<S: Next<CallOutcome>>(
///         self,
///         call: HandlerCall,
///         mut next: S,
///     ) -> Result<CallOutcome, Infallible> {
///         next.call(call).await
///     }
/// }
///
/// let service = Stepped::new(Through, Invoke);
/// # let _ = service;
/// ```
pub trait Step: Clone + Send + 'static {
    /// What the next service answers.
    type Inner: Send + 'static;
    /// What this step answers.
    type Output: Send + 'static;

    /// Runs the step for one call; `next` is the rest of the stack, ready, owned by the call.
    fn run<S: Next<Self::Inner>>(
        self,
        call: HandlerCall,
        next: S,
    ) -> impl Future<Output = Result<Self::Output, Infallible>> + Send;
}

/// The rest of the stack below a [`Step`], answering `R`: any service of handler calls that
/// cannot fail and can move between threads (implemented for every such service).
pub trait Next<R>:
    Service<HandlerCall, Response = R, Error = Infallible, Future: Send> + Send + 'static
{
}

impl<R, S> Next<R> for S where
    S: Service<HandlerCall, Response = R, Error = Infallible, Future: Send> + Send + 'static
{
}

/// The service of a [`Step`] around an inner service `S`; each framework layer's service
/// (`Filter<S>`, `Classify<S>`, ...) is one.
#[derive(Debug, Clone)]
pub struct Stepped<St, S> {
    step: St,
    inner: S,
}

impl<St, S> Stepped<St, S> {
    /// `step` around `inner`.
    pub fn new(step: St, inner: S) -> Self {
        Stepped { step, inner }
    }
}

impl<St, S> Service<HandlerCall> for Stepped<St, S>
where
    St: Step,
    S: Service<HandlerCall, Response = St::Inner, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = St::Output;
    type Error = Infallible;
    type Future = BoxFuture<Result<St::Output, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, call: HandlerCall) -> Self::Future {
        // The service polled ready goes with the call; a clone stays for the next one.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        Box::pin(self.step.clone().run(call, ready))
    }
}

/// A framework layer that is a [`Step`]: its `tower::Layer` impl and the name of its service.
macro_rules! step_layers {
    ($($layer:ident => $service:ident),* $(,)?) => {$(
        #[doc = concat!("The service of [`", stringify!($layer), "`].")]
        pub type $service<S> = Stepped<$layer, S>;

        impl<S> tower::Layer<S> for $layer {
            type Service = Stepped<$layer, S>;
            fn layer(&self, inner: S) -> Self::Service {
                Stepped::new(self.clone(), inner)
            }
        }
    )*};
}

pub(super) use step_layers;
