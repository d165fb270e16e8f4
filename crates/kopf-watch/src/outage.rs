//! Failures of a watch stream, as the operator's user sees them: a short, capped, jittered
//! backoff between attempts (a recovered API server is noticed within about a second), and
//! a log that says when the stream fails, keeps failing (a summary every few seconds, not a
//! line per attempt) and is back.

use std::time::Duration;

use kopf_core::backoff::{Backoff, Delays, Jitter};
use kopf_core::text::for_log;
use tokio::time::Instant;

/// The first delay after a failure.
const FIRST_DELAY: Duration = Duration::from_millis(100);
/// The longest delay between attempts.
const MAX_DELAY: Duration = Duration::from_secs(1);
/// How often a stream that keeps failing is reported.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// The backoff between attempts of a failing watch stream: 0.1 s, doubling up to 1 s, each
/// delay multiplied by a random factor in [0.5, 1] (so that operators restarted together do
/// not retry together); reset by the first success.
#[derive(Debug, Clone)]
pub(crate) struct WatchBackoff(Delays);

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff(Backoff::new(FIRST_DELAY, MAX_DELAY, Jitter::Shorten(0.5)).delays())
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.0.next()
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.0.reset();
    }
}

/// A watch stream's failure in words, with the API server's answer as `503 Service
/// Unavailable: its message` (kube's own text of it ends with a dump of the Status).
pub(crate) fn describe(error: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error;
    fn answer(error: &kube::Error) -> String {
        match error {
            kube::Error::Api(s) => status(s),
            other => other.to_string(),
        }
    }
    fn status(s: &kube::core::Status) -> String {
        let reason = http::StatusCode::from_u16(s.code)
            .ok()
            .and_then(|c| c.canonical_reason())
            .unwrap_or(s.reason.as_str());
        format!("{} {reason}: {}", s.code, s.message)
    }
    match error {
        Error::InitialListFailed(e) => format!("the list failed: {}", answer(e)),
        Error::WatchStartFailed(e) => format!("the watch did not start: {}", answer(e)),
        Error::WatchError(s) => format!("the watch ended with an error: {}", status(s)),
        Error::WatchFailed(e) => format!("the watch failed: {}", answer(e)),
        other => other.to_string(),
    }
}

/// What the log says about one resource's watch stream.
#[derive(Debug, Default)]
pub(crate) struct FailureLog {
    /// Failures since the stream last delivered something.
    failures: u32,
    /// When the first of them happened.
    since: Option<Instant>,
    /// When they were last reported.
    reported: Option<Instant>,
    /// Failures not reported yet.
    unreported: u32,
}

impl FailureLog {
    /// The stream failed with `error`: the first failure is logged at once, the following
    /// ones in a summary at most every 10 s.
    pub fn failed(&mut self, resource: &str, error: &impl std::fmt::Display) {
        let now = Instant::now();
        self.failures += 1;
        self.unreported += 1;
        let since = *self.since.get_or_insert(now);
        let due = self
            .reported
            .is_none_or(|at| now.duration_since(at) >= SUMMARY_EVERY);
        if !due {
            return;
        }
        if self.failures == 1 {
            tracing::warn!(
                resource = %resource,
                "The watch stream of {resource} failed: {}; it is retried every second at most.",
                for_log(error)
            );
        } else {
            tracing::warn!(
                resource = %resource,
                "The watch stream of {resource} keeps failing: {} failure(s) in {:.0} s ({} since the last report); the last: {}",
                self.failures,
                now.duration_since(since).as_secs_f64(),
                self.unreported,
                for_log(error)
            );
        }
        self.reported = Some(now);
        self.unreported = 0;
    }

    /// The stream delivered something: if it had failed, say that it is back.
    pub fn alive(&mut self, resource: &str) {
        if self.failures == 0 {
            return;
        }
        let took = self.since.map_or(Duration::ZERO, |since| since.elapsed());
        if self.failures > 1 {
            tracing::info!(
                resource = %resource,
                "The watch stream of {resource} is back after {} failures over {:.1} s.",
                self.failures,
                took.as_secs_f64()
            );
        } else {
            tracing::debug!(resource = %resource, "The watch stream of {resource} is back.");
        }
        *self = FailureLog::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_described_without_kubes_status_dump() {
        use kube::runtime::watcher::Error;
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 503, "reason": "ServiceUnavailable",
            "message": "injected fault: 503",
        }))
        .expect("a Status");
        let listed = describe(&Error::InitialListFailed(kube::Error::Api(Box::new(
            status.clone(),
        ))));
        assert_eq!(
            listed,
            "the list failed: 503 Service Unavailable: injected fault: 503"
        );
        let ended = describe(&Error::WatchError(Box::new(status)));
        assert_eq!(
            ended,
            "the watch ended with an error: 503 Service Unavailable: injected fault: 503"
        );
    }

    #[test]
    fn the_backoff_is_short_capped_jittered_and_resets() {
        use kube::runtime::utils::Backoff;
        let mut b = WatchBackoff::default();
        let delays: Vec<Duration> = b.by_ref().take(8).collect();
        assert!(delays[0] <= FIRST_DELAY && delays[0] >= FIRST_DELAY / 2);
        assert!(delays.iter().all(|d| *d <= MAX_DELAY), "{delays:?}");
        assert!(
            delays[7] >= MAX_DELAY / 2,
            "it grows to the cap: {delays:?}"
        );
        b.reset();
        assert!(b.next().is_some_and(|d| d <= FIRST_DELAY));
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_summarised_not_logged_one_by_one() {
        let mut log = FailureLog::default();
        log.failed("kopfexamples", &"503");
        assert_eq!(log.reported, Some(Instant::now()), "the first at once");
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(1)).await;
            log.failed("kopfexamples", &"503");
        }
        assert_eq!(log.unreported, 5, "then a summary every 10 s");
        tokio::time::advance(Duration::from_secs(5)).await;
        log.failed("kopfexamples", &"503");
        assert_eq!(log.unreported, 0);
        assert_eq!(log.failures, 7);
        log.alive("kopfexamples");
        assert_eq!(log.failures, 0);
    }
}
