//! The plan of a chaos run: every operation on the objects, every kill and every fault, with
//! its moment, drawn from one seeded RNG (the same seed gives the same schedule).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The namespace of the objects.
pub const NAMESPACE: &str = "default";
/// The resource of the objects (`examples/crd.yaml`).
pub const RESOURCE: &str = "kopfexamples";

/// How many objects a run makes and how long it goes on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Objects created.
    pub objects: usize,
    /// SIGKILLs of the operator.
    pub kills: usize,
    /// Whether the fake API server injects faults.
    pub faults: bool,
}

/// What happens to one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectPlan {
    /// `metadata.name` (unique over the run, never reused).
    pub name: String,
    /// `spec.value` at creation, then after each update (unique over the run: a handler
    /// logged twice with the same value is the same run repeated, not a new update).
    pub values: Vec<i64>,
    /// Whether and when it is deleted.
    pub delete: Deletion,
}

/// When an object is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// It stays.
    Never,
    /// Right after its creation (before or during its create handler), without updates.
    Early,
    /// Some time after its last update.
    Late,
}

/// One operation of the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Create the object with this `spec.value`.
    Create(i64),
    /// Set `spec.value` to this.
    Update(i64),
    /// Delete the object.
    Delete,
}

/// An operation on an object at a moment after the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// When, from the start of the chaos phase.
    pub at: Duration,
    /// Index into [`Plan::objects`].
    pub object: usize,
    /// What.
    pub action: Action,
}

/// A SIGKILL of the operator, restarted after `pause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kill {
    /// When, from the start of the chaos phase.
    pub at: Duration,
    /// How long the operator stays down (mostly zero: restarted at once).
    pub pause: Duration,
    /// With several replicas: aim at the leader (2 kills in 3), else at a standby.
    pub leader: bool,
    /// With several replicas: which of the candidates (modulo their number).
    pub pick: usize,
}

/// The share of kills aimed at the leader when several replicas run.
const LEADER_KILLS: f64 = 2.0 / 3.0;

/// Which endpoint of the objects a PATCH fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// The object itself (metadata, finalizers, annotations).
    Object,
    /// The `/status` subresource.
    Status,
}

/// A fault of the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The next `count` PATCHes of the endpoint are answered with `code` (500, 503, 409).
    Error {
        /// The HTTP status.
        code: u16,
        /// Object or `/status`.
        endpoint: Endpoint,
        /// How many requests.
        count: u64,
    },
    /// The next `count` PATCHes (either endpoint) get `429` with `Retry-After: 1`.
    Throttle {
        /// How many requests.
        count: u64,
    },
    /// Every PATCH of the objects is delayed by `millis` for `window`; the faults are
    /// cleared at its end (the fake server cannot remove one delay alone).
    Latency {
        /// The delay of each PATCH.
        millis: u64,
        /// How long the delay applies.
        window: Duration,
    },
    /// The next watch of the objects gets `410 Expired`.
    ExpireWatch,
    /// The open watches of the objects end.
    CloseWatches,
}

/// A fault at a moment after the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedFault {
    /// When, from the start of the chaos phase.
    pub at: Duration,
    /// What.
    pub fault: Fault,
}

/// The whole schedule of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The objects (by index).
    pub objects: Vec<ObjectPlan>,
    /// The operations on them, by time.
    pub ops: Vec<Op>,
    /// The kills, by time.
    pub kills: Vec<Kill>,
    /// The faults, by time (none with `faults: false`).
    pub faults: Vec<TimedFault>,
    /// The end of the chaos phase (the last kill, operation or fault is before it).
    pub duration: Duration,
}

/// A second, as a float.
fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// The share of objects deleted, and of those, the share deleted right after creation.
const DELETED: f64 = 0.6;
const DELETED_EARLY: f64 = 0.35;
/// A wave of creations every this many seconds.
const WAVE_SECS: f64 = 5.0;
/// The shortest chaos phase.
const MIN_SECS: f64 = 20.0;

impl Plan {
    /// Draws the schedule of a run.
    pub fn generate(shape: Shape, seed: u64) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed);

        // Kills every 0.5–4 s from 1 s on; the phase lasts as long as they need (at least
        // 20 s), and the objects' creations spread over its first three quarters.
        let mut kills = Vec::with_capacity(shape.kills);
        let mut t = 1.0;
        for _ in 0..shape.kills {
            t += rng.random_range(0.5..4.0);
            let pause = if rng.random_bool(0.3) {
                secs(rng.random_range(0.2..2.0))
            } else {
                Duration::ZERO
            };
            kills.push(Kill {
                at: secs(t),
                pause,
                leader: false,
                pick: 0,
            });
        }
        // The replicas' targets from an RNG of their own, so that a seed replays the same
        // schedule of everything else with one replica or several.
        let mut targets = StdRng::seed_from_u64(seed ^ 0x7265_706c_6963_6173);
        for k in &mut kills {
            k.leader = targets.random_bool(LEADER_KILLS);
            k.pick = targets.random_range(0..1024);
        }
        let span = (t + 2.0).max(MIN_SECS);
        let creating = span * 0.75;

        let waves = ((creating / WAVE_SECS).round() as usize).clamp(1, shape.objects.max(1));
        let per_wave = shape.objects.div_ceil(waves).max(1);
        let mut objects = Vec::with_capacity(shape.objects);
        let mut ops = Vec::new();
        let mut last = 0.0f64;
        for i in 0..shape.objects {
            let wave = i / per_wave;
            let mut at = wave as f64 * WAVE_SECS + rng.random_range(0.0..1.0);
            let base = (i as i64 + 1) * 10;
            let delete = if rng.random_bool(DELETED) {
                if rng.random_bool(DELETED_EARLY) {
                    Deletion::Early
                } else {
                    Deletion::Late
                }
            } else {
                Deletion::Never
            };
            let mut values = vec![base];
            ops.push(Op {
                at: secs(at),
                object: i,
                action: Action::Create(base),
            });
            match delete {
                Deletion::Early => {
                    at += rng.random_range(0.0..0.3);
                    ops.push(Op {
                        at: secs(at),
                        object: i,
                        action: Action::Delete,
                    });
                }
                Deletion::Never | Deletion::Late => {
                    let updates = rng.random_range(1..=3);
                    for k in 1..=updates {
                        // Some updates come while the previous handler still runs.
                        at += if rng.random_bool(0.3) {
                            rng.random_range(0.05..0.3)
                        } else {
                            rng.random_range(0.3..6.0)
                        };
                        let value = base + k;
                        values.push(value);
                        ops.push(Op {
                            at: secs(at),
                            object: i,
                            action: Action::Update(value),
                        });
                    }
                    if delete == Deletion::Late {
                        at += rng.random_range(0.2..4.0);
                        ops.push(Op {
                            at: secs(at),
                            object: i,
                            action: Action::Delete,
                        });
                    }
                }
            }
            last = last.max(at);
            objects.push(ObjectPlan {
                name: format!("chaos-{i:05}"),
                values,
                delete,
            });
        }
        // Stable: the operations of one object keep their order when times tie.
        ops.sort_by_key(|op| op.at);
        let duration = secs(span.max(last + 1.0));

        let mut faults = Vec::new();
        if shape.faults {
            let mut t = rng.random_range(0.5..2.0);
            while t < duration.as_secs_f64() - 1.0 {
                let fault = Self::fault(&mut rng);
                faults.push(TimedFault { at: secs(t), fault });
                if let Fault::Latency { window, .. } = fault {
                    t += window.as_secs_f64();
                }
                t += rng.random_range(0.3..2.0);
            }
        }
        Plan {
            seed,
            objects,
            ops,
            kills,
            faults,
            duration,
        }
    }

    /// One fault, drawn with its parameters.
    fn fault(rng: &mut StdRng) -> Fault {
        let endpoint = if rng.random_bool(0.5) {
            Endpoint::Object
        } else {
            Endpoint::Status
        };
        match rng.random_range(0..10) {
            // Now and then more 500s in a row than the operator's client retries (5), so
            // that the failure reaches the engine itself.
            0..=2 => Fault::Error {
                code: 500,
                endpoint,
                count: if rng.random_bool(0.3) {
                    rng.random_range(7..=9)
                } else {
                    rng.random_range(1..=3)
                },
            },
            3..=4 => Fault::Error {
                code: 503,
                endpoint,
                count: rng.random_range(1..=3),
            },
            5 => Fault::Error {
                code: 409,
                endpoint,
                count: rng.random_range(1..=2),
            },
            6 => Fault::Throttle {
                count: rng.random_range(1..=3),
            },
            7 => Fault::Latency {
                millis: rng.random_range(100..=3000),
                window: secs(rng.random_range(0.5..3.0)),
            },
            8 => Fault::ExpireWatch,
            _ => Fault::CloseWatches,
        }
    }

    /// How many updates the plan makes.
    pub fn updates(&self) -> usize {
        self.objects.iter().map(|o| o.values.len() - 1).sum()
    }

    /// How many objects the plan deletes.
    pub fn deletes(&self) -> usize {
        self.objects
            .iter()
            .filter(|o| o.delete != Deletion::Never)
            .count()
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let endpoint = |e: &Endpoint| match e {
            Endpoint::Object => "kopfexamples",
            Endpoint::Status => "kopfexamples/status",
        };
        match self {
            Fault::Error {
                code,
                endpoint: e,
                count,
            } => write!(f, "{code} on the next {count} PATCH {}", endpoint(e)),
            Fault::Throttle { count } => write!(
                f,
                "429 (Retry-After 1) on the next {count} PATCH kopfexamples[/status]"
            ),
            Fault::Latency { millis, window } => write!(
                f,
                "{millis} ms latency on PATCH kopfexamples[/status] for {:.1} s",
                window.as_secs_f64()
            ),
            Fault::ExpireWatch => write!(f, "410 Expired on the next watch of kopfexamples"),
            Fault::CloseWatches => write!(f, "the watches of kopfexamples closed"),
        }
    }
}

impl Fault {
    /// A short name for counting faults by kind.
    pub fn kind(&self) -> String {
        match self {
            Fault::Error { code, endpoint, .. } => match endpoint {
                Endpoint::Object => format!("{code} object"),
                Endpoint::Status => format!("{code} status"),
            },
            Fault::Throttle { .. } => "429".into(),
            Fault::Latency { .. } => "latency".into(),
            Fault::ExpireWatch => "410 watch".into(),
            Fault::CloseWatches => "closed watch".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape {
        objects: 200,
        kills: 20,
        faults: true,
    };

    #[test]
    fn the_same_seed_gives_the_same_plan() {
        assert_eq!(Plan::generate(SHAPE, 7), Plan::generate(SHAPE, 7));
        assert_ne!(Plan::generate(SHAPE, 7), Plan::generate(SHAPE, 8));
    }

    #[test]
    fn values_are_unique_and_updates_precede_deletion() {
        let plan = Plan::generate(SHAPE, 1);
        let mut all: Vec<i64> = plan.objects.iter().flat_map(|o| o.values.clone()).collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "spec values repeat");
        for (i, o) in plan.objects.iter().enumerate() {
            let actions: Vec<Action> = plan
                .ops
                .iter()
                .filter(|op| op.object == i)
                .map(|op| op.action)
                .collect();
            assert_eq!(actions[0], Action::Create(o.values[0]), "{actions:?}");
            let deletes = actions.iter().filter(|a| **a == Action::Delete).count();
            match o.delete {
                Deletion::Never => assert_eq!(deletes, 0),
                Deletion::Early => {
                    assert_eq!(actions, vec![Action::Create(o.values[0]), Action::Delete])
                }
                Deletion::Late => {
                    assert_eq!(deletes, 1);
                    assert_eq!(actions.last(), Some(&Action::Delete));
                    assert!((2..=4).contains(&o.values.len()), "{o:?}");
                }
            }
        }
        assert!(plan.ops.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(plan.ops.iter().all(|op| op.at < plan.duration));
        assert!(plan.kills.iter().all(|k| k.at < plan.duration));
    }

    #[test]
    fn the_counts_follow_the_shape() {
        let plan = Plan::generate(SHAPE, 3);
        assert_eq!(plan.objects.len(), 200);
        assert_eq!(plan.kills.len(), 20);
        assert!(!plan.faults.is_empty());
        // About 60 % deleted, a third of those early.
        let deleted = plan.deletes();
        assert!((90..=150).contains(&deleted), "{deleted}");
        let off = Plan::generate(
            Shape {
                faults: false,
                ..SHAPE
            },
            3,
        );
        assert!(off.faults.is_empty());
        assert_eq!(off.objects, plan.objects);
    }
}
