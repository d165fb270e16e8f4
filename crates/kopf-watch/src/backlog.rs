//! Listed objects waiting for a place, kept compact: a listing is read at once (so that the
//! watch, and with it the changes made meanwhile, starts as soon as possible), and the
//! objects that cannot start yet wait here as JSON text (a third to a fifth of the memory of
//! a parsed tree), in their listing's order, until the lanes have room for them.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;

use crate::uid::Uid;

/// Listed objects beyond which new ones wait here rather than in a worker.
pub(crate) const STARTED_AHEAD: usize = crate::lanes::DEFAULT_CAPACITY;

/// Listed objects waiting to start.
#[derive(Default)]
pub(crate) struct Backlog {
    order: VecDeque<Uid>,
    /// Each waiting object's latest state, and when its first waiting state came.
    bodies: HashMap<Uid, (Box<[u8]>, Instant)>,
}

impl Backlog {
    /// Keeps `body` for `uid` until its turn (a newer listed state replaces it in place).
    pub(crate) fn push(&mut self, uid: &str, body: &Value, seen: Instant) {
        let Ok(text) = serde_json::to_vec(body) else {
            return;
        };
        let key = Uid::from(uid);
        let seen = self.bodies.get(uid).map_or(seen, |(_, first)| *first);
        if self
            .bodies
            .insert(key.clone(), (text.into(), seen))
            .is_none()
        {
            self.order.push_back(key);
        }
    }

    /// Forgets a waiting object (a newer state of it came, or it left); when its first
    /// waiting state came, if it waited.
    pub(crate) fn forget(&mut self, uid: &str) -> Option<Instant> {
        self.bodies.remove(uid).map(|(_, seen)| seen)
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.bodies.is_empty()
    }

    /// The next object to start, in the listing's order.
    pub(crate) fn pop(&mut self) -> Option<(String, Arc<Value>, Instant)> {
        while let Some(key) = self.order.pop_front() {
            let Some((text, seen)) = self.bodies.remove(key.as_str()) else {
                // Forgotten meanwhile.
                continue;
            };
            match serde_json::from_slice(&text) {
                Ok(body) => return Some((key.as_str().to_string(), Arc::new(body), seen)),
                Err(e) => tracing::error!(error = %e, "cannot read a waiting object back"),
            }
        }
        self.bodies.clear();
        None
    }

    /// Forgets everything (the engine pauses; the next listing brings it all again).
    pub(crate) fn clear(&mut self) {
        self.order.clear();
        self.bodies.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn waiting_objects_come_back_in_order_newest_state_and_forgotten_ones_skipped() {
        let mut backlog = Backlog::default();
        let t0 = Instant::now();
        let t1 = t0 + std::time::Duration::from_secs(1);
        backlog.push("a", &json!({"n": 1}), t0);
        backlog.push("b", &json!({"n": 2}), t0);
        backlog.push("c", &json!({"n": 3}), t0);
        backlog.push("a", &json!({"n": 4}), t1);
        assert_eq!(backlog.forget("b"), Some(t0));
        assert_eq!(backlog.forget("b"), None);
        assert!(!backlog.is_empty());
        let (uid, body, seen) = backlog.pop().expect("a");
        assert_eq!((uid.as_str(), body.as_ref()), ("a", &json!({"n": 4})));
        assert_eq!(seen, t0, "since its first waiting state");
        let (uid, _, _) = backlog.pop().expect("c");
        assert_eq!(uid, "c");
        assert!(backlog.pop().is_none());
        assert!(backlog.is_empty());
    }
}
