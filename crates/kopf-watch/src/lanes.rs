//! Which object's cycle runs next, under floods: states of objects that really changed (watch
//! events, retries) go ahead of the states of a listing (the start, a relist after the watch
//! was lost), so that a change made during a burst is handled while the burst goes on.
//!
//! Listed objects run at most `capacity` cycles at a time. Without a `--worker-limit`, a
//! cycle stops counting once it has run for [`SLOW_CYCLE`] (a handler waiting on something
//! slow holds no place), and changed objects do not wait at all; with a worker limit, every
//! cycle counts, and changed objects are first in the queue.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

/// Cycles of listed objects at a time, without a worker limit.
pub(crate) const DEFAULT_CAPACITY: usize = 64;

/// Without a worker limit, a cycle that has run this long gives its place to the next.
pub(crate) const SLOW_CYCLE: Duration = Duration::from_secs(1);

/// A state's priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// The object changed (a watch event), or its own retry is due.
    Changed,
    /// The object was listed (start, relist).
    Listed,
}

/// Places for cycles, handed out by priority.
pub(crate) struct Lanes {
    state: Mutex<State>,
    /// A listed object got its place (the engine starts more from its backlog).
    moved: Notify,
    /// Every cycle counts, and waits (a worker limit); otherwise changed objects never wait.
    strict: bool,
    /// Workers of listed objects started but not yet running (about to wait here).
    arriving: std::sync::atomic::AtomicUsize,
}

struct State {
    free: usize,
    changed: VecDeque<oneshot::Sender<Place>>,
    listed: VecDeque<oneshot::Sender<Place>>,
}

/// A held place; it goes to the next waiter when dropped.
pub(crate) struct Place {
    lanes: Option<Arc<Lanes>>,
}

impl Lanes {
    /// `limit`: a worker limit (strict), or None (the default capacity, lenient).
    pub(crate) fn new(limit: Option<usize>) -> Arc<Lanes> {
        Arc::new(Lanes {
            state: Mutex::new(State {
                free: limit.unwrap_or(DEFAULT_CAPACITY).max(1),
                changed: VecDeque::new(),
                listed: VecDeque::new(),
            }),
            moved: Notify::new(),
            strict: limit.is_some(),
            arriving: Default::default(),
        })
    }

    /// Whether every cycle holds its place to the end (a worker limit).
    pub(crate) fn strict(&self) -> bool {
        self.strict
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a cycle in `lane` (None: it needs none).
    pub(crate) async fn acquire(self: &Arc<Self>, lane: Lane) -> Option<Place> {
        if lane == Lane::Changed && !self.strict {
            return None;
        }
        let rx = {
            let mut state = self.lock();
            let ahead = match lane {
                Lane::Changed => !state.changed.is_empty(),
                Lane::Listed => !state.changed.is_empty() || !state.listed.is_empty(),
            };
            if state.free > 0 && !ahead {
                state.free -= 1;
                return Some(Place {
                    lanes: Some(self.clone()),
                });
            }
            let (tx, rx) = oneshot::channel();
            match lane {
                Lane::Changed => state.changed.push_back(tx),
                Lane::Listed => state.listed.push_back(tx),
            }
            rx
        };
        // The sender is only dropped with the lanes; then there is no limit to keep.
        rx.await.ok()
    }

    /// Listed objects waiting for a place, or about to.
    pub(crate) fn listed_waiting(&self) -> usize {
        self.lock().listed.len() + self.arriving.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A worker of a listed object is started (it will wait here soon).
    pub(crate) fn arriving(&self) {
        self.arriving
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// That worker runs (it waits here, or needed no place).
    pub(crate) fn arrived(&self) {
        let _ = self.arriving.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |n| n.checked_sub(1),
        );
    }

    /// Waits until a listed object got its place (or one was ready before).
    pub(crate) async fn listed_moved(&self) {
        self.moved.notified().await;
    }

    fn release(self: &Arc<Self>) {
        let mut state = self.lock();
        loop {
            let (next, listed) = match state.changed.pop_front() {
                Some(tx) => (tx, false),
                None => match state.listed.pop_front() {
                    Some(tx) => (tx, true),
                    None => {
                        state.free += 1;
                        return;
                    }
                },
            };
            let place = Place {
                lanes: Some(self.clone()),
            };
            match next.send(place) {
                Ok(()) => {
                    if listed {
                        self.moved.notify_one();
                    }
                    return;
                }
                // The waiter is gone: the place goes to the next (emptied first: its
                // `Drop` would lock again).
                Err(mut place) => drop(place.lanes.take()),
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some(lanes) = self.lanes.take() {
            lanes.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn changed_objects_go_ahead_of_listed_ones() {
        let lanes = Lanes::new(Some(1));
        let first = lanes.acquire(Lane::Listed).await.expect("a free place");
        let listed = tokio::spawn({
            let lanes = lanes.clone();
            async move { lanes.acquire(Lane::Listed).await.map(|_| "listed") }
        });
        tokio::task::yield_now().await;
        let changed = tokio::spawn({
            let lanes = lanes.clone();
            async move { lanes.acquire(Lane::Changed).await.map(|_| "changed") }
        });
        tokio::task::yield_now().await;
        assert_eq!(lanes.listed_waiting(), 1);
        drop(first);
        // The changed object got the place first; the listed one, once it was given back.
        assert_eq!(changed.await.expect("joined"), Some("changed"));
        assert_eq!(listed.await.expect("joined"), Some("listed"));
        assert_eq!(lanes.listed_waiting(), 0);
    }

    #[tokio::test]
    async fn without_a_limit_changed_objects_never_wait() {
        let lanes = Lanes::new(None);
        let mut held = Vec::new();
        for _ in 0..DEFAULT_CAPACITY {
            held.push(lanes.acquire(Lane::Listed).await.expect("a place"));
        }
        assert!(lanes.acquire(Lane::Changed).await.is_none());
        let waiting = tokio::spawn({
            let lanes = lanes.clone();
            async move { lanes.acquire(Lane::Listed).await.is_some() }
        });
        tokio::task::yield_now().await;
        assert_eq!(lanes.listed_waiting(), 1);
        held.pop();
        assert!(waiting.await.expect("joined"));
    }

    #[tokio::test]
    async fn a_waiter_that_gave_up_passes_its_place_on() {
        let lanes = Lanes::new(Some(1));
        let first = lanes.acquire(Lane::Listed).await.expect("a place");
        let gave_up = tokio::spawn({
            let lanes = lanes.clone();
            async move { lanes.acquire(Lane::Listed).await.is_some() }
        });
        tokio::task::yield_now().await;
        gave_up.abort();
        let _ = gave_up.await;
        drop(first);
        // The place went past the cancelled waiter, back to the free ones.
        let again = tokio::time::timeout(Duration::from_secs(5), lanes.acquire(Lane::Listed))
            .await
            .expect("not stuck");
        assert!(again.is_some());
    }
}
