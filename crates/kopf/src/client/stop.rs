//! The operator's stop, as the client's layers see it: once it is given, their waits end
//! (see the [client](super)'s documentation for what each layer does then).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// A stop shared by the operator and the clients it wraps: given once, seen by every clone.
#[derive(Clone, Debug)]
pub(crate) struct Stop(Arc<watch::Sender<bool>>);

impl Default for Stop {
    fn default() -> Self {
        Stop(Arc::new(watch::channel(false).0))
    }
}

impl Stop {
    /// Gives the stop: the waits in progress end, and no new one begins.
    pub(crate) fn stop(&self) {
        self.0.send_replace(true);
    }

    /// Whether the stop was given.
    pub(crate) fn is_stopped(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes when the stop is given (at once if it was).
    pub(crate) async fn stopped(&self) {
        let mut seen = self.0.subscribe();
        // The sender lives in `self`: the channel cannot close while this waits.
        let _ = seen.wait_for(|stopped| *stopped).await;
    }

    /// Waits `delay`, or until the stop if it comes first.
    pub(crate) async fn sleep(&self, delay: Duration) {
        tokio::select! {
            _ = kopf_core::clock::sleep(delay, "a request's retry") => {}
            _ = self.stopped() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_a_sleep_and_every_later_one() {
        let stop = Stop::default();
        let start = tokio::time::Instant::now();
        stop.sleep(Duration::from_secs(5)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(5), "a full sleep");
        let sleeping = tokio::spawn({
            let stop = stop.clone();
            async move { stop.sleep(Duration::from_secs(365 * 24 * 3600)).await }
        });
        tokio::task::yield_now().await;
        assert!(!stop.is_stopped());
        stop.clone().stop();
        sleeping.await.expect("the sleep ends");
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(5),
            "no time passed: the stop ended it"
        );
        assert!(stop.is_stopped());
        stop.sleep(Duration::from_secs(60)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(5), "nor later ones");
    }
}
