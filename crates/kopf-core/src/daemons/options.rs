//! The options of daemons and timers: when they are called ([`DaemonOptions`],
//! [`TimerOptions`]) and how they are stopped ([`Stopping`]).

use std::time::Duration;

/// How a daemon or timer is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopping {
    /// Time to exit on its own after the flag is set.
    pub backoff: Duration,
    /// Then: cancel (async handlers) and wait this long; then abandon. None: wait for the
    /// task as long as it takes.
    pub timeout: Option<Duration>,
    /// Without a timeout: how often to warn that the task is still running.
    pub polling: Duration,
}

impl Default for Stopping {
    fn default() -> Self {
        Stopping {
            backoff: Duration::ZERO,
            timeout: None,
            polling: Duration::from_secs(60),
        }
    }
}

/// Options of a daemon.
///
/// ```
/// use kopf_core::daemons::DaemonOptions;
/// use std::time::Duration;
///
/// let options = DaemonOptions::new()
///     .initial_delay(Duration::from_secs(1))
///     .cancellation_timeout(Duration::from_secs(5));
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaemonOptions {
    /// Wait this long after the object appears before the first call.
    pub initial_delay: Duration,
    /// How it is stopped.
    pub stopping: Stopping,
}

impl DaemonOptions {
    /// No initial delay; stopping waits for the daemon to exit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wait this long before the first call.
    pub fn initial_delay(mut self, delay: Duration) -> Self {
        self.initial_delay = delay;
        self
    }

    /// Time to exit on its own after the stop flag is set, before being cancelled.
    pub fn cancellation_backoff(mut self, backoff: Duration) -> Self {
        self.stopping.backoff = backoff;
        self
    }

    /// After the backoff, cancel (async daemons) and wait this long, then abandon it with a
    /// warning (releasing the object).
    pub fn cancellation_timeout(mut self, timeout: Duration) -> Self {
        self.stopping.timeout = Some(timeout);
        self
    }

    /// Without a cancellation timeout: how often to warn that the daemon still runs.
    pub fn cancellation_polling(mut self, polling: Duration) -> Self {
        self.stopping.polling = polling;
        self
    }
}

/// Options of a timer.
///
/// ```
/// use kopf_core::daemons::TimerOptions;
/// use std::time::Duration;
///
/// let every_ten = TimerOptions::every(Duration::from_secs(10)).sharp(true);
/// let when_quiet = TimerOptions::every(Duration::from_secs(60)).idle(Duration::from_secs(30));
/// # let _ = (every_ten, when_quiet);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimerOptions {
    /// Call every `interval` (None: once, or once per idle period with `idle`).
    pub interval: Option<Duration>,
    /// Wait this long after the object appears before the first call.
    pub initial_delay: Duration,
    /// Call only when the object has not changed (its essence) for this long.
    pub idle: Option<Duration>,
    /// Align calls to the interval from the first call, whatever the calls' durations.
    pub sharp: bool,
    /// How it is stopped (a running call is waited for; see [`Stopping`]).
    pub stopping: Stopping,
}

impl TimerOptions {
    /// A timer called every `interval`.
    pub fn every(interval: Duration) -> Self {
        TimerOptions {
            interval: Some(interval),
            ..Default::default()
        }
    }

    /// Wait this long before the first call.
    pub fn initial_delay(mut self, delay: Duration) -> Self {
        self.initial_delay = delay;
        self
    }

    /// Call only once the object has been unchanged for `idle`.
    pub fn idle(mut self, idle: Duration) -> Self {
        self.idle = Some(idle);
        self
    }

    /// Align the calls to the interval.
    pub fn sharp(mut self, sharp: bool) -> Self {
        self.sharp = sharp;
        self
    }

    /// After a stop request, wait this long for a running call, then abandon it.
    pub fn cancellation_timeout(mut self, timeout: Duration) -> Self {
        self.stopping.timeout = Some(timeout);
        self
    }
}
