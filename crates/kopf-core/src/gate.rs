//! The operator's gate: whether it may act now. Peering (a higher-priority operator is
//! alive), and later leader election and shard ownership, close it; the engine observes it
//! and pauses everything that acts while it is closed: watch streams, handlers not yet
//! started, timers and daemons (stopped with [`StopReason::OperatorPausing`]).
//!
//! One side controls the gate ([`GateControl`]); any number of observers hold a [`Gate`].
//! An operator without peering has a gate that is always open ([`Gate::open`]).
//!
//! ```
//! # async fn demo() {
//! use kopf_core::gate::{Gate, GateState};
//!
//! let (control, mut gate) = Gate::channel();
//! assert!(gate.is_open());
//! control.pause("in favour of other@host (priority 100)");
//! assert_eq!(gate.state(), GateState::Paused { reason: "in favour of other@host (priority 100)".into() });
//! control.resume();
//! gate.opened().await; // returns at once: the gate is open
//! # }
//! ```
//!
//! [`StopReason::OperatorPausing`]: crate::daemons::StopReason::OperatorPausing

use tokio::sync::watch;

/// Whether the operator may act, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GateState {
    /// The operator acts.
    #[default]
    Open,
    /// The operator pauses: it sends no list or watch request and keeps nothing warm.
    Paused {
        /// Why, for the logs (who blocks it).
        reason: String,
    },
    /// The operator stands by (leader election: another replica leads). As paused, nothing
    /// acts, but the watch streams stay open and the indexes stay current, so that, when the
    /// gate opens, the objects are processed at once, as after a start, without a new list.
    Standby {
        /// Why, for the logs (who leads).
        reason: String,
    },
}

impl GateState {
    /// Whether the operator may act.
    pub fn is_open(&self) -> bool {
        matches!(self, GateState::Open)
    }

    /// Why the operator may not act now (`None` when it may).
    pub fn reason(&self) -> Option<&str> {
        match self {
            GateState::Open => None,
            GateState::Paused { reason } | GateState::Standby { reason } => Some(reason),
        }
    }

    /// How strongly this state holds the operator back, for [`Gate::and`]: open, standby,
    /// paused.
    fn weight(&self) -> u8 {
        match self {
            GateState::Open => 0,
            GateState::Standby { .. } => 1,
            GateState::Paused { .. } => 2,
        }
    }
}

/// An observer of the operator's gate.
#[derive(Debug, Clone)]
pub struct Gate {
    rx: watch::Receiver<GateState>,
}

/// The controlling side of the operator's gate (peering, leader election).
#[derive(Debug, Clone)]
pub struct GateControl {
    tx: std::sync::Arc<watch::Sender<GateState>>,
}

impl Gate {
    /// A gate that is always open (an operator without peering).
    pub fn open() -> Gate {
        let (tx, rx) = watch::channel(GateState::Open);
        // The sender is dropped: the state stays Open for good.
        drop(tx);
        Gate { rx }
    }

    /// A new gate, open, and its control.
    pub fn channel() -> (GateControl, Gate) {
        let (tx, rx) = watch::channel(GateState::Open);
        (
            GateControl {
                tx: std::sync::Arc::new(tx),
            },
            Gate { rx },
        )
    }

    /// The state now.
    pub fn state(&self) -> GateState {
        self.rx.borrow().clone()
    }

    /// Whether the operator may act now.
    pub fn is_open(&self) -> bool {
        self.rx.borrow().is_open()
    }

    /// Waits until the gate is open (at once if it is). A gate whose control is gone stays
    /// as it was: if it was paused then, this waits forever.
    pub async fn opened(&mut self) {
        if self.rx.wait_for(GateState::is_open).await.is_err() {
            if self.is_open() {
                return;
            }
            std::future::pending::<()>().await;
        }
    }

    /// Waits until the gate is paused or standing by (at once if it is); the reason. Never
    /// returns for a gate that can no longer change while open.
    pub async fn paused(&mut self) -> String {
        loop {
            if let Some(reason) = self.state().reason() {
                return reason.to_string();
            }
            if self.rx.changed().await.is_err() {
                if let Some(reason) = self.state().reason() {
                    return reason.to_string();
                }
                std::future::pending::<()>().await;
            }
        }
    }

    /// Waits for the next change of the state; false when the control is gone (no more
    /// changes).
    pub async fn changed(&mut self) -> bool {
        self.rx.changed().await.is_ok()
    }

    /// A gate that is open only while both are (peering and the user's own gate, say). A
    /// pause wins over a standby, which wins over open; of two equal states, the first's
    /// reason is kept. Follows them in a task of the current tokio runtime until both can
    /// no longer change.
    pub fn and(self, other: Gate) -> Gate {
        let (control, gate) = Gate::channel();
        let (mut a, mut b) = (self, other);
        let apply = move |a: &Gate, b: &Gate| {
            let (a, b) = (a.state(), b.state());
            control.set(if b.weight() > a.weight() { b } else { a });
        };
        apply(&a, &b);
        tokio::spawn(async move {
            let (mut a_live, mut b_live) = (true, true);
            while a_live || b_live {
                tokio::select! {
                    live = a.changed(), if a_live => a_live = live,
                    live = b.changed(), if b_live => b_live = live,
                }
                apply(&a, &b);
            }
        });
        gate
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::open()
    }
}

impl GateControl {
    /// Pauses the operator, saying why (a change of reason is sent too).
    pub fn pause(&self, reason: impl Into<String>) {
        self.set(GateState::Paused {
            reason: reason.into(),
        });
    }

    /// Makes the operator stand by, saying why (see [`GateState::Standby`]).
    pub fn stand_by(&self, reason: impl Into<String>) {
        self.set(GateState::Standby {
            reason: reason.into(),
        });
    }

    /// Sets the state (nothing is sent when it is the same).
    pub fn set(&self, next: GateState) {
        self.tx.send_if_modified(|state| {
            if *state == next {
                return false;
            }
            *state = next;
            true
        });
    }

    /// Lets the operator act again.
    pub fn resume(&self) {
        self.set(GateState::Open);
    }

    /// The state now.
    pub fn state(&self) -> GateState {
        self.tx.borrow().clone()
    }

    /// Another observer of this gate.
    pub fn gate(&self) -> Gate {
        Gate {
            rx: self.tx.subscribe(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn observers_see_pauses_and_resumes() {
        let (control, gate) = Gate::channel();
        let mut waiting = gate.clone();
        let paused = tokio::spawn(async move { waiting.paused().await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(
            !paused.is_finished(),
            "the gate is open: nobody waits for a pause"
        );
        control.pause("in favour of x");
        assert_eq!(paused.await.expect("joined"), "in favour of x");
        assert!(!gate.is_open());
        let mut waiting = gate.clone();
        let opened = tokio::spawn(async move { waiting.opened().await });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!opened.is_finished(), "the gate is paused");
        control.resume();
        opened.await.expect("joined");
        assert!(control.gate().is_open());
    }

    #[tokio::test]
    async fn two_gates_are_open_only_together() {
        let (first, a) = Gate::channel();
        let (second, b) = Gate::channel();
        let mut both = a.and(b);
        assert!(both.is_open());
        first.pause("peering");
        assert_eq!(both.paused().await, "peering");
        second.pause("user");
        first.resume();
        tokio::time::timeout(Duration::from_millis(200), async {
            while both.state()
                != (GateState::Paused {
                    reason: "user".into(),
                })
            {
                both.changed().await;
            }
        })
        .await
        .expect("still paused, by the other");
        second.resume();
        tokio::time::timeout(Duration::from_millis(200), both.opened())
            .await
            .expect("open when both are");
    }

    #[tokio::test]
    async fn a_pause_wins_over_a_standby_which_wins_over_open() {
        let (peering, a) = Gate::channel();
        let (election, b) = Gate::channel();
        let mut both = a.and(b);
        election.stand_by("replica-2 leads");
        assert_eq!(both.paused().await, "replica-2 leads");
        assert!(matches!(both.state(), GateState::Standby { .. }));
        peering.pause("in favour of dev");
        tokio::time::timeout(Duration::from_millis(200), async {
            while !matches!(both.state(), GateState::Paused { .. }) {
                both.changed().await;
            }
        })
        .await
        .expect("the pause wins");
        peering.resume();
        tokio::time::timeout(Duration::from_millis(200), async {
            while !matches!(both.state(), GateState::Standby { .. }) {
                both.changed().await;
            }
        })
        .await
        .expect("standing by again");
        election.resume();
        tokio::time::timeout(Duration::from_millis(200), both.opened())
            .await
            .expect("open when both are");
    }

    #[tokio::test]
    async fn an_open_gate_stays_open() {
        let mut gate = Gate::open();
        gate.opened().await;
        assert!(!gate.changed().await);
        let pause = tokio::time::timeout(Duration::from_millis(20), gate.paused()).await;
        assert!(pause.is_err(), "an always-open gate never pauses");
    }

    #[tokio::test]
    async fn the_same_state_is_not_sent_twice() {
        let (control, mut gate) = Gate::channel();
        control.resume();
        control.pause("a");
        assert!(gate.changed().await);
        control.pause("a");
        let again = tokio::time::timeout(Duration::from_millis(20), gate.changed()).await;
        assert!(again.is_err(), "no change: no wake-up");
        control.pause("b");
        assert!(gate.changed().await);
        assert_eq!(gate.state(), GateState::Paused { reason: "b".into() });
    }
}
