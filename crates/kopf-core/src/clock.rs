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

use jiff::{SignedDuration, Timestamp};

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
