//! The state one simulated run shares between the test's driver and the operator's
//! instances: the seed's dice, the faults, the history, and which instance is alive.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::Instant;

use super::dice::Dice;
use super::history::{Entry, Event, History};
use super::plan::FaultPlan;

/// The state of one run.
pub(super) struct RunState {
    pub(super) dice: Dice,
    pub(super) plan: FaultPlan,
    /// Set when the scenario is done: no more faults.
    calm: AtomicBool,
    kills: AtomicU32,
    began: Instant,
    history: Mutex<History>,
    /// How many requests of each name (`verb resource namespace/name`) were drawn for.
    counts: Mutex<HashMap<String, u64>>,
}

impl RunState {
    pub(super) fn new(seed: u64, plan: FaultPlan) -> Arc<Self> {
        Arc::new(RunState {
            dice: Dice::new(seed),
            plan,
            calm: AtomicBool::new(false),
            kills: AtomicU32::new(0),
            began: Instant::now(),
            history: Mutex::default(),
            counts: Mutex::default(),
        })
    }

    /// Records what happened now.
    pub(super) fn record(&self, event: Event) {
        let at = self.began.elapsed();
        lock(&self.history).entries.push(Entry { at, event });
    }

    /// The history so far.
    pub(super) fn history(&self) -> History {
        lock(&self.history).clone()
    }

    /// Ends the faults.
    pub(super) fn calm_down(&self) {
        self.calm.store(true, Ordering::Relaxed);
        self.record(Event::Calm);
    }

    pub(super) fn is_calm(&self) -> bool {
        self.calm.load(Ordering::Relaxed)
    }

    /// The count of the next request named `key` (0 for the first).
    pub(super) fn next_count(&self, key: &str) -> u64 {
        let mut counts = lock(&self.counts);
        let n = counts.entry(key.to_string()).or_default();
        let this = *n;
        *n += 1;
        this
    }

    /// Whether another kill is allowed in this run.
    pub(super) fn kills_left(&self) -> bool {
        self.kills.load(Ordering::Relaxed) < self.plan.max_kills
    }

    /// Kills `life`'s instance, recording where; false (nothing done) once the faults
    /// have ended or when it is dead already.
    pub(super) fn kill(&self, life: &Life, at: String) -> bool {
        if self.is_calm() || !life.alive.swap(false, Ordering::Relaxed) {
            return false;
        }
        self.kills.fetch_add(1, Ordering::Relaxed);
        self.record(Event::Killed {
            instance: life.instance,
            at,
        });
        true
    }
}

/// Whether one operator instance is alive; once killed, everything it sends or runs
/// waits forever.
#[derive(Debug, Clone)]
pub(super) struct Life {
    pub(super) instance: u32,
    alive: Arc<AtomicBool>,
}

impl Life {
    pub(super) fn new(instance: u32) -> Self {
        Life {
            instance,
            alive: Arc::new(AtomicBool::new(true)),
        }
    }

    pub(super) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Waits forever if the instance is dead: what a killed process does.
    pub(super) async fn or_never(&self) {
        if !self.is_alive() {
            std::future::pending::<()>().await;
        }
    }
}

/// A lock that survives a panic of its last holder.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
