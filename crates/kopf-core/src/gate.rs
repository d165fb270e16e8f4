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
    /// The operator pauses.
    Paused {
        /// Why, for the logs (who blocks it).
        reason: String,
    },
}

impl GateState {
    /// Whether the operator may act.
    pub fn is_open(&self) -> bool {
        matches!(self, GateState::Open)
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

    /// Waits until the gate is paused (at once if it is); the reason. Never returns for a
    /// gate that can no longer change while open.
    pub async fn paused(&mut self) -> String {
        loop {
            if let GateState::Paused { reason } = self.state() {
                return reason;
            }
            if self.rx.changed().await.is_err() {
                if let GateState::Paused { reason } = self.state() {
                    return reason;
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

    /// A gate that is open only while both are (peering and the user's own gate, say); its
    /// reason is the first paused one's. Follows them in a task of the current tokio runtime
    /// until both can no longer change.
    pub fn and(self, other: Gate) -> Gate {
        let (control, gate) = Gate::channel();
        let (mut a, mut b) = (self, other);
        let apply = move |a: &Gate, b: &Gate| match (a.state(), b.state()) {
            (GateState::Paused { reason }, _) | (_, GateState::Paused { reason }) => {
                control.pause(reason)
            }
            _ => control.resume(),
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
        let reason = reason.into();
        self.tx.send_if_modified(|state| {
            let next = GateState::Paused {
                reason: reason.clone(),
            };
            if *state == next {
                return false;
            }
            *state = next;
            true
        });
    }

    /// Lets the operator act again.
    pub fn resume(&self) {
        self.tx.send_if_modified(|state| {
            if state.is_open() {
                return false;
            }
            *state = GateState::Open;
            true
        });
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
