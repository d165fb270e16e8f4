//! What the client layer says about failed requests, in bounded volume: the first failure
//! of an outage is a WARNING line of its own; the next ones within 10 s are DEBUG lines,
//! counted in a WARNING summary at most every 10 s; when a request succeeds again after
//! a reported outage, one INFO line says so. Whatever the number of requests in flight, an
//! outage costs at most about 6 WARNING lines a minute (the watch engine's own summaries
//! of its streams come every 10 s too).
//!
//! It also remembers whether the API server has ever answered: a refused connection to a
//! server that never answered is not retried (the operator fails at start with one clear
//! line; retries are for a server that answered once and is gone for a moment, or that
//! takes connections but is slow to answer).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How often failures that keep coming are summarised.
pub(crate) const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// The client's record of failures, shared by all its requests.
#[derive(Debug, Default)]
pub(crate) struct Failures {
    /// Whether any request got an answer (any status) from the API server.
    reached: AtomicBool,
    /// Whether a streak of failures is open (so that an answer in the common case, with no
    /// failure before it, takes no lock).
    failing: AtomicBool,
    log: Mutex<Streak>,
}

/// The failures since the last answer that was not a failure.
#[derive(Debug, Default)]
struct Streak {
    /// Failed attempts in this streak.
    failures: u32,
    /// When the streak began.
    since: Option<Instant>,
    /// Whether a WARNING of this streak was logged (then its end is logged too).
    warned: bool,
    /// When a failure was last logged as a WARNING (kept across streaks, so that a server
    /// that fails every other request is not reported every time).
    reported: Option<Instant>,
    /// Failed attempts since that WARNING.
    unreported: u32,
}

impl Failures {
    /// Whether the API server has answered any request of this client.
    pub(crate) fn reached(&self) -> bool {
        self.reached.load(Ordering::Relaxed)
    }

    /// A request got an answer that is not a failure: ends a streak of failures (with an
    /// INFO line if it was reported).
    pub(crate) fn answered(&self) {
        self.answered_with_failure();
        if !self.failing.load(Ordering::Relaxed) {
            return;
        }
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        self.failing.store(false, Ordering::Relaxed);
        if log.failures == 0 {
            return;
        }
        let took = log.since.map_or(Duration::ZERO, |since| since.elapsed());
        if log.warned {
            tracing::info!(
                "The API server answers again, after {} failed attempt(s) over {:.1} s.",
                log.failures,
                took.as_secs_f64()
            );
        }
        log.failures = 0;
        log.since = None;
        log.warned = false;
    }

    /// A request got a failure (a transient status: the server answered).
    pub(crate) fn answered_with_failure(&self) {
        if !self.reached.load(Ordering::Relaxed) {
            self.reached.store(true, Ordering::Relaxed);
        }
    }

    /// One attempt failed; `line` says which request, how and what happens next. It is a
    /// WARNING when it is the first of a streak or 10 s after the last one (then with the
    /// count of failures since), else a DEBUG line.
    pub(crate) fn failed(&self, line: &str) {
        let now = Instant::now();
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        self.failing.store(true, Ordering::Relaxed);
        log.failures += 1;
        log.unreported += 1;
        let since = *log.since.get_or_insert(now);
        let due = log
            .reported
            .is_none_or(|at| now.duration_since(at) >= SUMMARY_EVERY);
        if !due {
            tracing::debug!("{line}");
            return;
        }
        if log.warned {
            tracing::warn!(
                "API requests keep failing: {} failed attempt(s) in {:.0} s ({} since the last report); the last: {line}",
                log.failures,
                now.duration_since(since).as_secs_f64(),
                log.unreported
            );
        } else {
            tracing::warn!("{line}");
        }
        log.warned = true;
        log.reported = Some(now);
        log.unreported = 0;
    }
}
