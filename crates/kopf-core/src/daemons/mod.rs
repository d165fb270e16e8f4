//! Daemons and timers: long-running tasks and periodic calls per object, for as long as the
//! object exists and matches the handler's filters.
//!
//! * A **daemon** is called once per object (after an optional `initial_delay`) and may run
//!   for as long as it likes; it polls or awaits its [`Stopped`] flag. Returning ends it for
//!   that object (for this process); a temporary error restarts it after the delay; a
//!   permanent error ends it.
//! * A **timer** is called every `interval` (`sharp`: aligned to the interval from the first
//!   call, not shifted by the calls' durations), optionally only once the object has not
//!   changed for `idle`. Errors are retried with the handler's backoff.
//!
//! Results go to `status.<handler-id>` and patches are applied after each call, with no
//! progress records (retry state is kept in memory). Stopping is staged: the flag is set
//! with a [`StopReason`]; the task gets `cancellation_backoff` to exit; then an async task is
//! cancelled and given `cancellation_timeout`; then it is abandoned with a warning. Plain
//! `fn` handlers run on blocking threads: they are never cancelled, only signalled, and
//! abandoned after the timeout. Without a `cancellation_timeout`, stopping waits for the task
//! (with a warning every `cancellation_polling`).
//!
//! ```
//! use kopf_core::daemons::{Stopped, StopReason};
//!
//! # async fn demo() {
//! let stopped = Stopped::new();
//! let flag = stopped.clone();
//! let daemon = tokio::spawn(async move {
//!     loop {
//!         // ... poll something ...
//!         if let Some(reason) = flag.sleep(std::time::Duration::from_secs(10)).await {
//!             return reason;
//!         }
//!     }
//! });
//! stopped.set(StopReason::Deleted);
//! assert_eq!(daemon.await.ok(), Some(StopReason::Deleted));
//! # }
//! ```
//!
//! The modules, bottom-up: `stopped` (the flag) and `options` are vocabulary that handler
//! specs and extractors use; `context` (what an object's tasks share), `tasks` (the call
//! loops), `stopping` (the staged stopping) and `object` ([`ObjectDaemons`]) run them. This
//! module only re-exports.

pub(crate) mod context;
mod object;
pub(crate) mod options;
pub(crate) mod stopped;
mod stopping;
pub(crate) mod tasks;

pub use context::{Deliver, Delivered, Delivery, Live, SpawnContext};
pub use object::ObjectDaemons;
pub use options::{DaemonOptions, Stopping, TimerOptions};
pub use stopped::{StopReason, Stopped};
