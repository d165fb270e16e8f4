//! Kubernetes Events about handler outcomes: a `Warning` when a handler fails (temporarily
//! or for good) and, only when enabled, a `Normal` event when it succeeds. The events join
//! those the handler posted itself; the poster rate-limits them per object.

use std::convert::Infallible;

use super::{Attempt, HandlerCall, Next, Step};
use crate::events::{EventSpec, failure_message};

/// Adds outcome events to an [`Attempt`].
///
/// ```
/// use kopf_core::layers::{EventsLayer, Invoke, ProgressLayer};
/// use tower::Layer;
///
/// let service = EventsLayer::new(false).layer(ProgressLayer.layer(Invoke));
/// # let _ = service;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct EventsLayer {
    success: bool,
}

impl EventsLayer {
    /// Warnings on failures; `success` also posts an event on each success.
    pub fn new(success: bool) -> Self {
        EventsLayer { success }
    }
}

impl Step for EventsLayer {
    type Inner = Attempt;
    type Output = Attempt;

    async fn run<S: Next<Attempt>>(
        self,
        call: HandlerCall,
        mut next: S,
    ) -> Result<Attempt, Infallible> {
        let id = call.spec.id.clone();
        let mut attempt = next.call(call).await?;
        if let Attempt::Done {
            outcome, retry_in, ..
        } = &mut attempt
        {
            let event = match (&outcome.result, retry_in) {
                (Err(e), retry_in) => Some(EventSpec::warning(
                    "Logging",
                    failure_message(&id, &e.to_string(), retry_in.is_some()),
                )),
                // A parent with sub-handlers succeeds only when they all have; the cycle
                // posts its success then.
                (Ok(_), _) if self.success && outcome.subhandlers.is_empty() => {
                    Some(EventSpec::success(&id))
                }
                (Ok(_), _) => None,
            };
            outcome.events.extend(event);
        }
        Ok(attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::super::ProgressLayer;
    use super::super::testing::*;
    use super::*;
    use crate::handler::HandlerError;
    use crate::progress::ProgressRecord;
    use std::time::Duration;
    use tower::Layer;

    async fn events_of(
        layer: EventsLayer,
        result: Result<Option<serde_json::Value>, HandlerError>,
    ) -> Vec<EventSpec> {
        let svc = layer.layer(ProgressLayer.layer(fake(result)));
        match run(svc, call_with(spec(), ProgressRecord::default())).await {
            Attempt::Done { outcome, .. } => outcome.events,
            Attempt::Skipped => panic!("skipped"),
        }
    }

    #[tokio::test]
    async fn warnings_on_failures_and_success_only_when_enabled() {
        let temporary = events_of(
            EventsLayer::new(false),
            Err(HandlerError::temporary("later", Duration::from_secs(1))),
        )
        .await;
        assert_eq!(
            temporary,
            vec![EventSpec::warning(
                "Logging",
                "Handler 'h' failed temporarily: later"
            )]
        );
        let permanent = events_of(
            EventsLayer::new(false),
            Err(HandlerError::permanent("never")),
        )
        .await;
        assert_eq!(
            permanent[0].message,
            "Handler 'h' failed permanently: never"
        );
        assert!(
            events_of(EventsLayer::new(false), Ok(None))
                .await
                .is_empty()
        );
        let success = events_of(EventsLayer::new(true), Ok(None)).await;
        assert_eq!(success, vec![EventSpec::success("h")]);
    }
}
