//! What the engine does with the operator's gate ([`kopf_core::gate`]), as a value: whether
//! it acts, stands by (leader election: another replica leads; the watch stays open, the
//! latest body of every object held) or pauses, and which objects it knew before it stopped
//! acting (those a later listing misses went away meanwhile). The transitions are plain
//! functions; the waits and log lines are in [`crate::pause`], the I/O in the engine.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kopf_core::causes::EventKind;
use kopf_core::gate::GateState;
use serde_json::Value;

/// The engine's side of the gate.
#[derive(Debug, Default)]
pub(crate) struct GateStage {
    /// While standing by: the latest body of every object, from the open watch stream,
    /// processed when the gate opens.
    held: Option<HashMap<String, Arc<Value>>>,
    /// The objects known when the operator paused or stood by: those missing from the
    /// listing afterwards went away meanwhile (their index entries are forgotten).
    known_before: HashSet<String>,
}

/// What the engine is to do on the gate's state.
#[derive(Debug, PartialEq)]
pub(crate) enum Turn {
    /// Go on as it does.
    Stay,
    /// The gate opened while standing by: the held objects are processed as after a start
    /// (resume handlers run again, as they would in a replica that just started).
    Act(HashMap<String, Arc<Value>>),
    /// Stand by: the workers end, and the watch starts again with a listing whose objects
    /// are held, not processed.
    StandBy,
    /// Pause: the stream closes, the workers end, nothing is requested until the gate no
    /// longer pauses.
    Pause,
}

/// What becomes of an object's event (see [`GateStage::hold`]).
#[derive(Debug, PartialEq)]
pub(crate) enum Hold {
    /// Acting: the event goes to its object's worker.
    Dispatch(String, Arc<Value>),
    /// Standing by: its body is held.
    Held,
    /// Standing by, and the object is deleted: it is forgotten.
    Forget(String),
}

impl GateStage {
    /// The transition on the gate's `state`.
    pub(crate) fn turn(&mut self, state: &GateState) -> Turn {
        match state {
            GateState::Open => match self.held.take() {
                Some(held) => Turn::Act(held),
                None => Turn::Stay,
            },
            GateState::Standby { .. } if self.held.is_none() => {
                self.held = Some(HashMap::new());
                Turn::StandBy
            }
            GateState::Standby { .. } => Turn::Stay,
            GateState::Paused { .. } => {
                if let Some(held) = self.held.take() {
                    self.known_before.extend(held.into_keys());
                }
                Turn::Pause
            }
        }
    }

    /// Whether it stands by.
    pub(crate) fn standing_by(&self) -> bool {
        self.held.is_some()
    }

    /// The workers of these objects were ended (a pause, a standby).
    pub(crate) fn ended(&mut self, uids: impl IntoIterator<Item = String>) {
        self.known_before.extend(uids);
    }

    /// An object's event: dispatched while acting, held while standing by.
    pub(crate) fn hold(&mut self, uid: String, body: Arc<Value>, kind: EventKind) -> Hold {
        let Some(held) = self.held.as_mut() else {
            return Hold::Dispatch(uid, body);
        };
        if kind == EventKind::Deleted {
            held.remove(&uid);
            return Hold::Forget(uid);
        }
        held.insert(uid, body);
        Hold::Held
    }

    /// The objects it knows of (for a relist to tell which went away): those known before
    /// it stopped acting, then those held.
    pub(crate) fn known(&self) -> impl Iterator<Item = &str> {
        let held = self.held.iter().flat_map(|h| h.keys());
        self.known_before.iter().chain(held).map(String::as_str)
    }

    /// An object went away: it is held no more.
    pub(crate) fn vanished(&mut self, uid: &str) {
        if let Some(held) = self.held.as_mut() {
            held.remove(uid);
        }
    }

    /// A listing is complete: what was known before is accounted for.
    pub(crate) fn relisted(&mut self) {
        self.known_before.clear();
    }

    /// Keeps only the held objects that `keep` accepts (a new shard scope).
    pub(crate) fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        if let Some(held) = self.held.as_mut() {
            held.retain(|uid, _| keep(uid));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn standby() -> GateState {
        GateState::Standby {
            reason: "another replica leads".into(),
        }
    }

    fn paused() -> GateState {
        GateState::Paused {
            reason: "peer".into(),
        }
    }

    fn body(n: i64) -> Arc<Value> {
        Arc::new(json!({ "n": n }))
    }

    #[test]
    fn open_gate_acts_and_dispatches_every_event() {
        let mut gate = GateStage::default();
        assert_eq!(gate.turn(&GateState::Open), Turn::Stay);
        assert!(!gate.standing_by());
        assert_eq!(
            gate.hold("a".into(), body(1), EventKind::Modified),
            Hold::Dispatch("a".into(), body(1))
        );
        assert_eq!(gate.known().count(), 0);
    }

    #[test]
    fn standing_by_holds_the_latest_bodies_and_acts_on_them_when_opened() {
        let mut gate = GateStage::default();
        assert_eq!(gate.turn(&standby()), Turn::StandBy);
        assert!(gate.standing_by());
        assert_eq!(gate.turn(&standby()), Turn::Stay, "once");
        assert_eq!(
            gate.hold("a".into(), body(1), EventKind::Listed),
            Hold::Held
        );
        gate.hold("a".into(), body(2), EventKind::Modified);
        gate.hold("b".into(), body(3), EventKind::Listed);
        assert_eq!(
            gate.hold("b".into(), body(3), EventKind::Deleted),
            Hold::Forget("b".into())
        );
        let Turn::Act(held) = gate.turn(&GateState::Open) else {
            panic!("the gate opened: the held objects are processed");
        };
        assert_eq!(held, HashMap::from([("a".to_string(), body(2))]));
        assert!(!gate.standing_by());
        assert_eq!(gate.turn(&GateState::Open), Turn::Stay);
    }

    #[test]
    fn a_pause_remembers_who_was_known_until_the_next_listing() {
        let mut gate = GateStage::default();
        gate.ended(["w".to_string()]);
        assert_eq!(gate.turn(&standby()), Turn::StandBy);
        gate.hold("h".into(), body(1), EventKind::Listed);
        let mut known: Vec<&str> = gate.known().collect();
        known.sort();
        assert_eq!(known, ["h", "w"], "ended workers, then held bodies");
        assert_eq!(gate.turn(&paused()), Turn::Pause);
        assert!(!gate.standing_by(), "a pause drops what standing by held");
        let mut known: Vec<&str> = gate.known().collect();
        known.sort();
        assert_eq!(
            known,
            ["h", "w"],
            "the held objects are known before the pause"
        );
        assert_eq!(gate.turn(&paused()), Turn::Pause, "each look while paused");
        gate.relisted();
        assert_eq!(gate.known().count(), 0);
    }

    #[test]
    fn vanished_and_out_of_scope_objects_are_held_no_more() {
        let mut gate = GateStage::default();
        gate.turn(&standby());
        for uid in ["a", "b", "c"] {
            gate.hold(uid.into(), body(0), EventKind::Listed);
        }
        gate.vanished("a");
        gate.retain(|uid| uid != "b");
        assert_eq!(gate.known().collect::<Vec<_>>(), ["c"]);
        gate.vanished("z");
    }
}
