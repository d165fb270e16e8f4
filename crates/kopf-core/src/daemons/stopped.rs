//! The stop flag of a daemon or timer ([`Stopped`]) and why it is set ([`StopReason`]).

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::watch;

/// Why a daemon or timer is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// The object is being deleted (or is gone).
    Deleted,
    /// The object no longer matches the handler's filters (it restarts when it matches
    /// again).
    FiltersMismatch,
    /// The operator pauses (e.g. another operator took over).
    OperatorPausing,
    /// The operator exits.
    OperatorExiting,
    /// The object is paused by its pause annotation (they restart when it is removed).
    Paused,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::Deleted => "the object is deleted",
            StopReason::FiltersMismatch => "the object does not match the filters anymore",
            StopReason::OperatorPausing => "the operator pauses",
            StopReason::OperatorExiting => "the operator exits",
            StopReason::Paused => "the object is paused",
        })
    }
}

struct Flag {
    reason: Mutex<Option<StopReason>>,
    cond: Condvar,
    tx: watch::Sender<Option<StopReason>>,
}

/// The stop flag of a daemon or timer (an extractor argument): poll it with
/// [`is_set`](Stopped::is_set), await it with [`wait`](Stopped::wait) or
/// [`sleep`](Stopped::sleep), or block on it in plain `fn` daemons with
/// [`wait_blocking`](Stopped::wait_blocking). Clones share the flag.
#[derive(Clone)]
pub struct Stopped(Arc<Flag>);

impl std::fmt::Debug for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Stopped").field(&self.reason()).finish()
    }
}

impl Default for Stopped {
    fn default() -> Self {
        Self::new()
    }
}

impl Stopped {
    /// A flag that is not set.
    pub fn new() -> Self {
        Stopped(Arc::new(Flag {
            reason: Mutex::new(None),
            cond: Condvar::new(),
            tx: watch::channel(None).0,
        }))
    }

    /// Sets the flag (the first reason stays).
    pub fn set(&self, reason: StopReason) {
        let mut current = self.0.reason.lock().unwrap_or_else(|e| e.into_inner());
        if current.is_none() {
            *current = Some(reason);
            self.0.cond.notify_all();
            self.0.tx.send_replace(Some(reason));
        }
    }

    /// Whether the daemon should stop.
    pub fn is_set(&self) -> bool {
        self.reason().is_some()
    }

    /// Why the daemon should stop (None: it should not).
    pub fn reason(&self) -> Option<StopReason> {
        *self.0.reason.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Completes when the flag is set, with the reason.
    pub async fn wait(&self) -> StopReason {
        let mut rx = self.0.tx.subscribe();
        loop {
            if let Some(reason) = *rx.borrow_and_update() {
                return reason;
            }
            if rx.changed().await.is_err() {
                // The sender lives in the flag we hold: this cannot happen.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Sleeps for `duration` unless the flag is set first; returns the reason if it was.
    pub async fn sleep(&self, duration: Duration) -> Option<StopReason> {
        self.sleep_for(duration, "a daemon's sleep").await
    }

    /// [`sleep`](Self::sleep), the wait listed as `what` for a test (see
    /// [`clock::sleep`](crate::clock::sleep)).
    pub(crate) async fn sleep_for(
        &self,
        duration: Duration,
        what: &'static str,
    ) -> Option<StopReason> {
        tokio::select! {
            reason = self.wait() => Some(reason),
            _ = crate::clock::sleep(duration, what) => self.reason(),
        }
    }

    /// For plain `fn` daemons: blocks the thread until the flag is set or `timeout` passes;
    /// returns the reason if it was set.
    pub fn wait_blocking(&self, timeout: Duration) -> Option<StopReason> {
        let guard = self.0.reason.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = self
            .0
            .cond
            .wait_timeout_while(guard, timeout, |r| r.is_none())
            .unwrap_or_else(|e| e.into_inner());
        *guard
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_waits_on_the_flag_return_its_reason() {
        let stopped = Stopped::new();
        assert_eq!(stopped.wait_blocking(Duration::from_millis(10)), None);
        let s = stopped.clone();
        let t = std::thread::spawn(move || s.wait_blocking(Duration::from_secs(30)));
        stopped.set(StopReason::FiltersMismatch);
        stopped.set(StopReason::Deleted);
        assert_eq!(t.join().ok().flatten(), Some(StopReason::FiltersMismatch));
        assert_eq!(stopped.reason(), Some(StopReason::FiltersMismatch));
    }
}
