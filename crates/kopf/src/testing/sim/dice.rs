//! Seeded choices that do not depend on the order of the run: each choice is a hash of the
//! seed, a name and a count (`"patch kopfexamples default/a"`, its 3rd request), so that
//! the choices about one object stay the same when the work of other objects interleaves
//! differently.

/// The seeded source of a run's choices.
#[derive(Debug, Clone, Copy)]
pub(super) struct Dice {
    seed: u64,
}

impl Dice {
    pub(super) fn new(seed: u64) -> Self {
        Dice { seed }
    }

    /// A number in `[0, 1)` for the `n`-th choice named `what`.
    pub(super) fn roll(&self, what: &str, n: u64) -> f64 {
        // The top 53 bits make an exact f64 in [0, 1).
        (self.bits(what, n) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A number in `[0, bound)` for the `n`-th choice named `what` (0 for a bound of 0).
    pub(super) fn below(&self, what: &str, n: u64, bound: u64) -> u64 {
        if bound == 0 {
            return 0;
        }
        self.bits(what, n) % bound
    }

    fn bits(&self, what: &str, n: u64) -> u64 {
        mix(mix(self.seed ^ fnv(what)) ^ n)
    }
}

/// FNV-1a over the bytes of a name.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The SplitMix64 finaliser: every input bit moves every output bit.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_name_and_count_give_the_same_choice() {
        let (a, b) = (Dice::new(7), Dice::new(7));
        assert_eq!(a.roll("patch x", 3), b.roll("patch x", 3));
        assert_ne!(a.roll("patch x", 3), a.roll("patch x", 4));
        assert_ne!(a.roll("patch x", 3), a.roll("patch y", 3));
        assert_ne!(a.roll("patch x", 3), Dice::new(8).roll("patch x", 3));
    }

    #[test]
    fn rolls_spread_over_the_unit_interval() {
        let dice = Dice::new(1);
        let rolls: Vec<f64> = (0..10_000).map(|n| dice.roll("r", n)).collect();
        assert!(rolls.iter().all(|r| (0.0..1.0).contains(r)));
        let low = rolls.iter().filter(|r| **r < 0.1).count();
        assert!((800..1200).contains(&low), "{low} of 10000 below 0.1");
        assert!((0..1000).all(|n| dice.below("b", n, 6) < 6));
    }
}
