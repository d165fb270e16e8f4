//! Per-object throttling of framework errors (failures outside handlers, such as a PATCH the
//! API server rejects): Kopf's growing delays (1, 1, 2, 3, 5, 8, ... 610 seconds, then 610
//! again), reset by the next success. Events that arrive meanwhile are not lost: the object
//! is processed in its latest state when the delay is over.
//!
//! ```
//! use std::time::Duration;
//! use kopf_core::throttle::Throttler;
//!
//! let mut t = Throttler::default();
//! assert_eq!(t.failed(), Duration::from_secs(1));
//! assert_eq!(t.failed(), Duration::from_secs(1));
//! assert_eq!(t.failed(), Duration::from_secs(2));
//! t.succeeded();
//! assert_eq!(t.failed(), Duration::from_secs(1));
//! ```

use std::time::Duration;

/// Kopf's `settings.queueing.error_delays`, in seconds.
pub const KOPF_ERROR_DELAYS: [u64; 15] = [1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610];

/// The delays after consecutive framework errors of one object.
#[derive(Debug, Clone)]
pub struct Throttler {
    delays: Vec<Duration>,
    next: usize,
}

impl Default for Throttler {
    fn default() -> Self {
        Throttler::new(
            KOPF_ERROR_DELAYS
                .iter()
                .map(|s| Duration::from_secs(*s))
                .collect(),
        )
    }
}

impl Throttler {
    /// A throttler with these delays (the last one repeats; empty means no delay).
    pub fn new(delays: Vec<Duration>) -> Self {
        Throttler { delays, next: 0 }
    }

    /// Another error: how long to wait before processing the object again.
    pub fn failed(&mut self) -> Duration {
        let d = self
            .delays
            .get(self.next)
            .or(self.delays.last())
            .copied()
            .unwrap_or(Duration::ZERO);
        self.next = (self.next + 1).min(self.delays.len());
        d
    }

    /// A success: the next error starts the sequence over.
    pub fn succeeded(&mut self) {
        self.next = 0;
    }

    /// Whether the object is being throttled (errors since the last success).
    pub fn is_throttling(&self) -> bool {
        self.next > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_delay_repeats() {
        let mut t = Throttler::new(vec![Duration::from_secs(1), Duration::from_secs(5)]);
        assert!(!t.is_throttling());
        let seq: Vec<u64> = (0..4).map(|_| t.failed().as_secs()).collect();
        assert_eq!(seq, vec![1, 5, 5, 5]);
        assert!(t.is_throttling());
        t.succeeded();
        assert_eq!(t.failed().as_secs(), 1);
        assert_eq!(Throttler::new(vec![]).failed(), Duration::ZERO);
        let kopf: Vec<u64> = {
            let mut k = Throttler::default();
            (0..16).map(|_| k.failed().as_secs()).collect()
        };
        assert_eq!(&kopf[..5], &[1, 1, 2, 3, 5]);
        assert_eq!(&kopf[14..], &[610, 610]);
    }
}
