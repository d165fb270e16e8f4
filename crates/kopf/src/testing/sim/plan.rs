//! The faults of a simulation: how often each kind of failure is drawn, and the choice for
//! one request.

use std::time::Duration;

use kopf_testing::control::RequestTarget;

use super::dice::Dice;

/// How often the API server fails the operator, and how often the operator is killed, in a
/// [`Simulation`](super::Simulation). Each request of the operator draws its fate from the
/// seed: served, failed with 500 or 503, throttled with 429 and a `Retry-After`, refused
/// with 409 (updates and patches), served with its answer lost (writes: the change is
/// stored, the operator sees a 504), delayed, or the operator killed just before or just
/// after it (writes). Each watch may start with a 410 (its resourceVersion expired).
///
/// ```
/// use kopf::testing::sim::FaultPlan;
///
/// let plan = FaultPlan::default().kills(0.1, 3).errors(0.0);
/// assert_eq!(plan.max_kills, 3);
/// assert_eq!(FaultPlan::none().kill_rate, 0.0);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FaultPlan {
    /// Requests answered 500 or 503 without being served.
    pub error_rate: f64,
    /// Requests answered 429 with a `Retry-After` of 1 to 3 s.
    pub throttle_rate: f64,
    /// Updates and patches answered 409 Conflict.
    pub conflict_rate: f64,
    /// Writes served whose answer is lost (a 504 instead).
    pub lost_rate: f64,
    /// Watches that start with 410 Gone.
    pub expiry_rate: f64,
    /// Requests delayed by up to [`max_latency`](Self::max_latency).
    pub latency_rate: f64,
    /// The longest injected latency.
    pub max_latency: Duration,
    /// Writes at which the operator is killed (before or after the write, half each).
    pub kill_rate: f64,
    /// The most kills in one run.
    pub max_kills: u32,
    /// The longest time a killed operator stays down before its fresh instance starts.
    pub max_downtime: Duration,
    /// The delays of watch events, one chosen per run (the operator sees the world late).
    pub event_delays: Vec<Duration>,
}

impl Default for FaultPlan {
    /// Every kind of fault on: 3% errors, 2% throttles, 3% conflicts, 3% lost answers, 10%
    /// expired watches, 10% of requests delayed by up to 2 s, a kill at 5% of writes (at
    /// most 2 per run, down for up to 3 s), watch events late by 0, 10 ms, 200 ms or 1 s.
    fn default() -> Self {
        FaultPlan {
            error_rate: 0.03,
            throttle_rate: 0.02,
            conflict_rate: 0.03,
            lost_rate: 0.03,
            expiry_rate: 0.1,
            latency_rate: 0.1,
            max_latency: Duration::from_secs(2),
            kill_rate: 0.05,
            max_kills: 2,
            max_downtime: Duration::from_secs(3),
            event_delays: [0, 10, 200, 1000]
                .into_iter()
                .map(Duration::from_millis)
                .collect(),
        }
    }
}

/// What happens to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    /// Served as it is.
    Pass,
    /// Answered with this code, not served.
    Fail(u16),
    /// Answered 429 with a `Retry-After` of this many seconds.
    Throttle(u64),
    /// Served; the answer is replaced by a 504.
    Lost,
    /// Served after this delay.
    Delay(Duration),
    /// A watch that starts with 410.
    Expire,
    /// The operator is killed before the request leaves.
    KillBefore,
    /// The operator is killed once the request is served.
    KillAfter,
}

impl FaultPlan {
    /// No faults: the operator's run is only the scenario's.
    pub fn none() -> Self {
        FaultPlan {
            error_rate: 0.0,
            throttle_rate: 0.0,
            conflict_rate: 0.0,
            lost_rate: 0.0,
            expiry_rate: 0.0,
            latency_rate: 0.0,
            max_latency: Duration::ZERO,
            kill_rate: 0.0,
            max_kills: 0,
            max_downtime: Duration::ZERO,
            event_delays: vec![Duration::ZERO],
        }
    }

    /// Sets the rate of kills at writes and the most kills per run.
    pub fn kills(mut self, rate: f64, max: u32) -> Self {
        self.kill_rate = rate;
        self.max_kills = max;
        self
    }

    /// Sets the rate of 500 and 503 answers.
    pub fn errors(mut self, rate: f64) -> Self {
        self.error_rate = rate;
        self
    }

    /// Sets the rate of lost answers to writes.
    pub fn lost_answers(mut self, rate: f64) -> Self {
        self.lost_rate = rate;
        self
    }

    /// Sets the rate of 409 answers to updates and patches.
    pub fn conflicts(mut self, rate: f64) -> Self {
        self.conflict_rate = rate;
        self
    }

    /// Sets the rate and the longest of injected latencies.
    pub fn latency(mut self, rate: f64, max: Duration) -> Self {
        self.latency_rate = rate;
        self.max_latency = max;
        self
    }

    /// The delay of watch events for a run.
    pub(super) fn event_delay(&self, dice: &Dice) -> Duration {
        let n = self.event_delays.len() as u64;
        let at = dice.below("event delay", 0, n) as usize;
        self.event_delays.get(at).copied().unwrap_or_default()
    }

    /// The fate of the `n`-th request named `key` (`verb resource namespace/name`), with
    /// `kills_left` kills still allowed in the run.
    pub(super) fn fate(
        &self,
        dice: &Dice,
        t: &RequestTarget,
        key: &str,
        n: u64,
        kills_left: bool,
    ) -> Fate {
        // A second draw for the same request, independent of the first.
        let other = |bound: u64| dice.below(key, n ^ (1 << 63), bound);
        let write = matches!(t.verb.as_str(), "create" | "update" | "patch" | "delete");
        let mut roll = dice.roll(key, n);
        let mut chance = |rate: f64| {
            let hit = roll < rate;
            roll -= rate;
            hit
        };
        // The kill's share of the roll is taken from every write, kills left or not, so
        // that kills elsewhere change no other fate of this request (without a kill left,
        // the request passes).
        if write && chance(self.kill_rate) {
            return match (kills_left, other(2)) {
                (false, _) => Fate::Pass,
                (true, 0) => Fate::KillBefore,
                (true, _) => Fate::KillAfter,
            };
        }
        if t.verb == "watch" && chance(self.expiry_rate) {
            return Fate::Expire;
        }
        if chance(self.error_rate) {
            return Fate::Fail(if other(2) == 0 { 500 } else { 503 });
        }
        if chance(self.throttle_rate) {
            return Fate::Throttle(1 + other(3));
        }
        if matches!(t.verb.as_str(), "update" | "patch") && chance(self.conflict_rate) {
            return Fate::Fail(409);
        }
        if write && chance(self.lost_rate) {
            return Fate::Lost;
        }
        if t.verb != "watch" && chance(self.latency_rate) {
            let most = self.max_latency.as_millis() as u64;
            return Fate::Delay(Duration::from_millis(1 + other(most.max(1))));
        }
        Fate::Pass
    }
}
