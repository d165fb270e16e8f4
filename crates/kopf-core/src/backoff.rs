//! Delays between attempts, and their random spread: the one implementation behind the API
//! client's retries, the applier's conflict retries, the watch streams' restarts, failed
//! reconciles, leader election's retry period and peering's keep-alive interval.
//!
//! A [`Backoff`] doubles from a first delay up to a cap, in exact integer arithmetic (the
//! delays are the ones written in the docs and checked by the tests), then spreads each delay
//! with its [`Jitter`], so that many clients failing together do not come back together.
//! Its [`Delays`] are an iterator, so a [`Backoff`] is a [`backon::BackoffBuilder`] and plugs
//! into `backon`'s retries; the watch engine resets them after a success.
//!
//! ```
//! use std::time::Duration;
//! use kopf_core::backoff::{Backoff, Jitter};
//!
//! let b = Backoff::new(Duration::from_millis(200), Duration::from_secs(1), Jitter::None);
//! let delays: Vec<_> = b.delays().take(4).collect();
//! assert_eq!(delays, [200, 400, 800, 1000].map(Duration::from_millis));
//! let jittered = Backoff { jitter: Jitter::Shorten(0.5), ..b };
//! assert!(jittered.delay(1) >= Duration::from_millis(100));
//! assert!(jittered.delay(1) <= Duration::from_millis(200));
//! ```

use std::time::Duration;

/// How a delay is spread at random.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Jitter {
    /// Not at all.
    None,
    /// Shortened by a random part of up to this fraction (0.0–1.0): the delay times a random
    /// factor in `[1 - part, 1]`. A retry never comes later than its nominal delay.
    Shorten(f64),
    /// Lengthened by a random part of up to this fraction: the delay times a random factor
    /// in `[1, 1 + part]` (client-go's jitter factor for lease retries).
    Lengthen(f64),
    /// Less a random whole number of seconds from the first number to the second, counted on
    /// the delay's whole seconds, and never under one second (Kopf's peering keep-alive).
    LessSeconds(u64, u64),
}

impl Jitter {
    /// `delay`, spread.
    pub fn apply(self, delay: Duration) -> Duration {
        match self {
            Jitter::None => delay,
            Jitter::Shorten(part) => match random_part(part) {
                Some(random) => delay.mul_f64(1.0 - random),
                None => delay,
            },
            Jitter::Lengthen(part) => match random_part(part) {
                Some(random) => delay.mul_f64(1.0 + random),
                None => delay,
            },
            Jitter::LessSeconds(low, high) => {
                let (low, high) = (low.min(high), high.max(low));
                let span = (high - low + 1) as f64;
                let less = low + (crate::clock::random_unit() * span) as u64;
                Duration::from_secs(delay.as_secs().saturating_sub(less).max(1))
            }
        }
    }
}

/// A random number from 0 to `part` (at most 1); none for a part of zero, negative or NaN
/// (then the delay stays exact).
fn random_part(part: f64) -> Option<f64> {
    (part > 0.0).then(|| part.min(1.0) * crate::clock::random_unit())
}

/// Delays doubling from `first` up to `max`, each spread by `jitter`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first delay.
    pub first: Duration,
    /// The longest delay.
    pub max: Duration,
    /// How each delay is spread.
    pub jitter: Jitter,
}

impl Backoff {
    /// Doubling from `first` up to `max`, spread by `jitter`.
    pub const fn new(first: Duration, max: Duration, jitter: Jitter) -> Self {
        Backoff { first, max, jitter }
    }

    /// The delay before attempt `n + 1` after `n` failures (from 1), before the jitter:
    /// `first × 2ⁿ⁻¹`, at most `max`.
    pub fn nominal(&self, n: u32) -> Duration {
        let doublings = n.saturating_sub(1).min(31);
        self.first
            .checked_mul(1u32 << doublings)
            .unwrap_or(self.max)
            .min(self.max)
    }

    /// The delay after `n` failures in a row (from 1), spread by the jitter.
    pub fn delay(&self, n: u32) -> Duration {
        self.jitter.apply(self.nominal(n))
    }

    /// The delays one after the other, from the first.
    pub fn delays(self) -> Delays {
        Delays {
            backoff: self,
            failures: 0,
        }
    }
}

impl backon::BackoffBuilder for Backoff {
    type Backoff = Delays;

    fn build(self) -> Delays {
        self.delays()
    }
}

/// The delays of a [`Backoff`], one per failure, endless; [`reset`](Self::reset) starts
/// them again from the first (after a success).
#[derive(Debug, Clone)]
pub struct Delays {
    backoff: Backoff,
    failures: u32,
}

impl Delays {
    /// From the first delay again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        Some(self.backoff.delay(self.failures))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn delays_double_exactly_up_to_the_cap() {
        let b = Backoff::new(Duration::from_millis(100), 10 * SECOND, Jitter::None);
        let delays: Vec<_> = b.delays().take(9).collect();
        assert_eq!(delays[1], Duration::from_millis(200));
        assert_eq!(delays[6], Duration::from_millis(6400));
        assert_eq!(delays[7], 10 * SECOND);
        assert_eq!(b.nominal(u32::MAX), 10 * SECOND);
        assert_eq!(b.nominal(0), Duration::from_millis(100), "0 counts as 1");
        let huge = Backoff::new(Duration::MAX, Duration::MAX, Jitter::None);
        assert_eq!(huge.nominal(40), Duration::MAX, "no overflow");
    }

    #[test]
    fn jitter_stays_within_its_bounds() {
        let d = 10 * SECOND;
        for _ in 0..500 {
            let short = Jitter::Shorten(0.5).apply(d);
            assert!(short >= 5 * SECOND && short <= d, "{short:?}");
            let long = Jitter::Lengthen(0.2).apply(d);
            assert!(long >= d && long <= 12 * SECOND, "{long:?}");
            let less = Jitter::LessSeconds(5, 10).apply(Duration::from_secs(60));
            assert!(less >= 50 * SECOND && less <= 55 * SECOND, "{less:?}");
            assert_eq!(less.subsec_nanos(), 0, "whole seconds");
        }
        assert_eq!(Jitter::LessSeconds(5, 10).apply(3 * SECOND), SECOND);
        assert_eq!(Jitter::LessSeconds(5, 10).apply(Duration::ZERO), SECOND);
        assert_eq!(Jitter::None.apply(d), d);
        let third = Duration::from_millis(300);
        for part in [0.0, -1.0, f64::NAN] {
            assert_eq!(Jitter::Shorten(part).apply(third), third, "{part}: exact");
        }
    }

    #[test]
    fn delays_reset_to_the_first() {
        let mut delays = Backoff::new(SECOND, 60 * SECOND, Jitter::None).delays();
        assert_eq!(delays.by_ref().take(3).last(), Some(4 * SECOND));
        delays.reset();
        assert_eq!(delays.next(), Some(SECOND));
        let built = backon::BackoffBuilder::build(Backoff::new(SECOND, SECOND, Jitter::None));
        assert_eq!(built.take(2).collect::<Vec<_>>(), [SECOND, SECOND]);
    }
}
