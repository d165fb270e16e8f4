//! The staged stopping of a running daemon or timer: the flag, then the backoff, then
//! cancellation and the timeout, then abandoning it (see [the daemons module](crate::daemons)).

use std::time::Duration;

use tokio::task::JoinHandle;
use tracing::Instrument;

use super::options::Stopping;
use super::stopped::{StopReason, Stopped};

/// A daemon or timer that runs, with what stopping it takes.
pub(super) struct Running {
    /// Its stop flag.
    pub(super) stopped: Stopped,
    /// Its task.
    pub(super) task: JoinHandle<()>,
    /// Whether it runs on a blocking thread (never cancelled, only signalled).
    pub(super) blocking: bool,
    /// How it is stopped.
    pub(super) stopping: Stopping,
    /// `Daemon '<id>'` or `Timer '<id>'`, for the logs.
    pub(super) title: String,
}

/// Awaits all futures concurrently.
pub(super) async fn futures_join_all<F: std::future::Future<Output = ()> + Send + 'static>(
    futures: impl IntoIterator<Item = F>,
) {
    let mut set = tokio::task::JoinSet::new();
    for f in futures {
        set.spawn(f.in_current_span());
    }
    while set.join_next().await.is_some() {}
}

/// Waits up to `d` for the task; true if it ended.
async fn ended_within(task: &mut JoinHandle<()>, d: Duration) -> bool {
    tokio::time::timeout(d, task).await.is_ok()
}

/// Staged stopping of one daemon or timer.
pub(super) async fn stop_one(mut r: Running, reason: StopReason) {
    r.stopped.set(reason);
    tracing::debug!("{} is signalled to exit: {reason}.", r.title);
    // A few turns of the scheduler for tasks that exit at once.
    for _ in 0..10 {
        if r.task.is_finished() {
            return;
        }
        tokio::task::yield_now().await;
    }
    if ended_within(&mut r.task, r.stopping.backoff).await {
        return;
    }
    match r.stopping.timeout {
        Some(timeout) => {
            if !r.blocking {
                tracing::debug!("{} is cancelled: it did not exit in time.", r.title);
                r.task.abort();
            }
            if ended_within(&mut r.task, timeout).await {
                return;
            }
            tracing::warn!(
                "{} did not exit in time and is abandoned; the object is released anyway.",
                r.title
            );
        }
        None => loop {
            if ended_within(&mut r.task, r.stopping.polling).await {
                return;
            }
            tracing::warn!(
                "{} is still running after the stop request ({reason}); it has no cancellation_timeout, so it is waited for.",
                r.title
            );
        },
    }
}
