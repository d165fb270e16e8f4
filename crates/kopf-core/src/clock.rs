//! The operator's clock: wall-clock timestamps that move with tokio's clock.
//!
//! Every delay of the operator (backoffs, throttles, timers, timeouts, consistency waits,
//! lease renewals) sleeps on tokio's clock. Some of those delays are also written to the
//! API as timestamps and read back later: a handler's `delayed` retry time, its `started`
//! time (handler timeouts, the `runtime` argument), a peer's `lastseen`. For a sleep and
//! the timestamp it waits for to agree, the operator reads the time of day through
//! [`now`]: the wall clock, shifted by how far tokio's clock is ahead of (or behind) the
//! monotonic clock. In a normal run the two clocks are the same and [`now`] is the wall
//! clock; under `tokio::time::pause()` the time of day moves only when tokio's clock does,
//! so an hour of `tokio::time::advance` is an hour of timestamps too.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::time::Duration;
//! let before = kopf_core::clock::now();
//! tokio::time::advance(Duration::from_secs(3600)).await;
//! let after = kopf_core::clock::now();
//! assert!(after.duration_since(before) >= jiff::SignedDuration::from_secs(3600));
//! # }
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

/// The time of day on the operator's clock: the wall clock, plus how far tokio's clock of
/// the current runtime is from the monotonic clock (zero unless tokio's clock is paused or
/// advanced; outside a runtime, zero).
pub fn now() -> Timestamp {
    let wall = Timestamp::now();
    let on_tokio = tokio::time::Instant::now().into_std();
    let monotonic = std::time::Instant::now();
    let skew = if on_tokio >= monotonic {
        SignedDuration::try_from(on_tokio - monotonic)
    } else {
        SignedDuration::try_from(monotonic - on_tokio).map(|d| -d)
    };
    match skew {
        Ok(skew) => wall.checked_add(skew).unwrap_or(wall),
        Err(_) => wall,
    }
}

/// Sleeps until `at` on tokio's clock (`tokio::time::sleep_until`). While a test watches
/// the thread the operator runs on ([`watch_due`]), the wait is listed with `what` it waits
/// for, so that the test can tell what is due next ([`next_due`]); otherwise the listing
/// costs one thread-local read.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use kopf_core::clock;
///
/// let _watching = clock::watch_due();
/// let timer = tokio::spawn(clock::sleep(Duration::from_secs(60), "a timer"));
/// tokio::task::yield_now().await; // the timer's task starts waiting
/// let (at, what) = clock::next_due().expect("one wait");
/// assert_eq!((at - tokio::time::Instant::now(), what), (Duration::from_secs(60), "a timer"));
/// timer.await.expect("the timer");
/// assert_eq!(clock::next_due(), None);
/// # }
/// ```
pub async fn sleep_until(at: Instant, what: &'static str) {
    let _listed = Listed::new(at, what);
    tokio::time::sleep_until(at).await;
}

/// Sleeps for `duration` on tokio's clock; see [`sleep_until`].
pub async fn sleep(duration: Duration, what: &'static str) {
    sleep_until(Instant::now() + duration, what).await;
}

/// The waits of this thread's operator, while a test watches it: by a number of their own.
#[derive(Default)]
struct Waits {
    /// The guards of [`watch_due`] alive on this thread.
    watchers: usize,
    next: u64,
    listed: BTreeMap<u64, (Instant, &'static str)>,
}

thread_local! {
    /// The waits listed on this thread; `None` unless a test watches it ([`watch_due`]).
    static WAITS: RefCell<Option<Waits>> = const { RefCell::new(None) };
}

/// One wait, listed while it lasts (in the listing of the thread that made it).
struct Listed(Option<u64>);

impl Listed {
    fn new(at: Instant, what: &'static str) -> Self {
        Listed(WAITS.with(|w| {
            let mut w = w.borrow_mut();
            let waits = w.as_mut()?;
            let key = waits.next;
            waits.next += 1;
            waits.listed.insert(key, (at, what));
            Some(key)
        }))
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        if let Some(key) = self.0 {
            WAITS.with(|w| {
                if let Some(waits) = w.borrow_mut().as_mut() {
                    waits.listed.remove(&key);
                }
            });
        }
    }
}

/// Lists the operator's waits made on this thread until the guard is dropped: for tests
/// whose operator runs on the test's own current-thread runtime (`kopf::testing` does it
/// for an operator started there).
#[must_use = "the waits are listed only while the guard lives"]
pub fn watch_due() -> DueWatch {
    WAITS.with(|w| w.borrow_mut().get_or_insert_with(Waits::default).watchers += 1);
    DueWatch(std::thread::current().id())
}

/// Keeps the waits of the thread that made it listed (see [`watch_due`]). Dropped on
/// another thread, it leaves that thread's listing on until the thread ends.
#[derive(Debug)]
pub struct DueWatch(std::thread::ThreadId);

impl Drop for DueWatch {
    fn drop(&mut self) {
        if std::thread::current().id() != self.0 {
            return;
        }
        WAITS.with(|w| {
            let mut w = w.borrow_mut();
            if let Some(waits) = w.as_mut() {
                waits.watchers -= 1;
                if waits.watchers == 0 {
                    *w = None;
                }
            }
        });
    }
}

/// The earliest wait listed on this thread (see [`watch_due`]): when it is due on tokio's
/// clock, and what it waits for.
pub fn next_due() -> Option<(Instant, &'static str)> {
    WAITS.with(|w| {
        let w = w.borrow();
        let waits = w.as_ref()?;
        waits.listed.values().min_by_key(|(at, _)| *at).copied()
    })
}

thread_local! {
    /// The state of this thread's seeded random numbers; `None`: `rand`'s (see [`seeded`]).
    static SEEDED: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Makes the operator's random choices on this thread (the jitter of its delays) follow
/// `seed` until the guard is dropped: a simulation of the operator on a current-thread
/// runtime then makes the same choices in every run of the seed.
#[must_use = "the random numbers follow the seed only while the guard lives"]
pub fn seeded(seed: u64) -> Seeded {
    SEEDED.with(|s| s.set(Some(seed)));
    Seeded(())
}

/// Keeps this thread's random numbers seeded (see [`seeded`]).
#[derive(Debug)]
pub struct Seeded(());

impl Drop for Seeded {
    fn drop(&mut self) {
        SEEDED.with(|s| s.set(None));
    }
}

/// A random number in `[0, 1)`: from the seed of this thread if [`seeded`], else `rand`'s.
pub fn random_unit() -> f64 {
    let seeded = SEEDED.with(|s| {
        let state = s.get()?.wrapping_add(0x9e37_79b9_7f4a_7c15);
        s.set(Some(state));
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Some(z ^ (z >> 31))
    });
    match seeded {
        Some(bits) => (bits >> 11) as f64 / (1u64 << 53) as f64,
        None => rand::random::<f64>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn seeded_random_numbers_repeat_with_their_seed() {
        let draw = |seed| {
            let _seeded = seeded(seed);
            (0..5).map(|_| random_unit()).collect::<Vec<f64>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert!(draw(9).iter().all(|r| (0.0..1.0).contains(r)));
        // Unseeded again once the guard is gone.
        assert!(SEEDED.with(|s| s.get()).is_none());
    }

    #[tokio::test]
    async fn in_real_time_it_is_the_wall_clock() {
        let wall = Timestamp::now();
        let ours = now();
        let apart = ours.duration_since(wall).abs();
        assert!(apart < SignedDuration::from_millis(100), "{apart:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn under_a_paused_clock_it_moves_with_tokio() {
        let before = now();
        tokio::time::advance(Duration::from_secs(3600)).await;
        let after = now();
        let moved = after.duration_since(before);
        assert!(moved >= SignedDuration::from_secs(3600), "{moved:?}");
        assert!(moved < SignedDuration::from_secs(3601), "{moved:?}");
        // Real time passing while paused does not move it.
        std::thread::sleep(Duration::from_millis(50));
        let still = now().duration_since(after);
        assert!(still < SignedDuration::from_millis(20), "{still:?}");
    }
}
