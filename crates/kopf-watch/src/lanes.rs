//! Which object's cycle runs next, under floods: states of objects that really changed (watch
//! events, retries) go ahead of the states of a listing (the start, a relist after the watch
//! was lost), so that a change made during a burst is handled while the burst goes on.
//!
//! Cycles run at most `capacity` at a time, changed objects first in the queue. Without a
//! `--worker-limit`, a cycle stops counting once it has run for [`SLOW_CYCLE`] (a handler
//! waiting on something slow holds no place), up to [`MAX_SLOW`] such cycles at once (beyond,
//! they keep their places): at most `capacity + MAX_SLOW` objects are processed at once by
//! default. With a worker limit, every cycle counts.
//!
//! Listed objects are never starved by a flood of changes: once the first of them has waited
//! [`LISTED_AGING`], places go to the changed and the listed objects in turn.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

/// Cycles of listed objects at a time, without a worker limit.
pub(crate) const DEFAULT_CAPACITY: usize = 64;

/// Without a worker limit, a cycle that has run this long gives its place to the next.
pub(crate) const SLOW_CYCLE: Duration = Duration::from_secs(1);

/// Without a worker limit, the most cycles that gave their place back while they go on.
pub(crate) const MAX_SLOW: usize = 448;

/// A listed object waiting this long gets every other place, changed objects waiting or not.
pub(crate) const LISTED_AGING: Duration = Duration::from_secs(5);

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
    /// Every cycle holds its place to its end (a worker limit); otherwise a slow one gives it
    /// back (see [`Lanes::hold`]).
    strict: bool,
    /// Workers of listed objects started but not yet running (about to wait here).
    arriving: std::sync::atomic::AtomicUsize,
    /// Slow cycles that gave their place back (see [`MAX_SLOW`]).
    slow: std::sync::atomic::AtomicUsize,
}

struct State {
    free: usize,
    changed: VecDeque<oneshot::Sender<Place>>,
    /// Each with when it began to wait.
    listed: VecDeque<(oneshot::Sender<Place>, Instant)>,
    /// A listed object has waited too long and a changed one got the last place: the next
    /// is the listed one's.
    listed_owed: bool,
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
                listed_owed: false,
            }),
            moved: Notify::new(),
            strict: limit.is_some(),
            arriving: Default::default(),
            slow: Default::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a cycle in `lane` (None only when the lanes are gone).
    pub(crate) async fn acquire(self: &Arc<Self>, lane: Lane) -> Option<Place> {
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
                Lane::Listed => state.listed.push_back((tx, Instant::now())),
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

    /// Runs `cycle` holding `place`; without a worker limit, a cycle that runs longer than
    /// [`SLOW_CYCLE`] gives its place to the next (it waits on something slow, not on the
    /// CPU), unless [`MAX_SLOW`] cycles already did.
    pub(crate) async fn hold<F: std::future::Future + Unpin>(
        &self,
        place: &mut Option<Place>,
        mut cycle: F,
    ) -> F::Output {
        if place.is_none() || self.strict {
            return cycle.await;
        }
        tokio::select! {
            end = &mut cycle => end,
            _ = tokio::time::sleep(SLOW_CYCLE) => {
                let Some(_slow) = SlowCycle::count(&self.slow) else {
                    return cycle.await;
                };
                drop(place.take());
                cycle.await
            }
        }
    }

    /// The next waiter to get a place: changed objects first, unless a listed object has
    /// waited [`LISTED_AGING`] and a changed one got the last place.
    fn next_waiter(state: &mut State) -> Option<(oneshot::Sender<Place>, bool)> {
        let aged = state
            .listed
            .front()
            .is_some_and(|(_, since)| since.elapsed() >= LISTED_AGING);
        let listed_first = state.changed.is_empty() || (aged && state.listed_owed);
        state.listed_owed = aged && !listed_first;
        if listed_first && let Some((tx, _)) = state.listed.pop_front() {
            return Some((tx, true));
        }
        state.changed.pop_front().map(|tx| (tx, false))
    }

    fn release(self: &Arc<Self>) {
        let mut state = self.lock();
        loop {
            let Some((next, listed)) = Self::next_waiter(&mut state) else {
                state.free += 1;
                return;
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

/// One of the slow cycles that gave their place back, counted while it lasts.
struct SlowCycle<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> SlowCycle<'a> {
    /// Counted, unless [`MAX_SLOW`] are.
    fn count(slow: &'a std::sync::atomic::AtomicUsize) -> Option<Self> {
        use std::sync::atomic::Ordering::SeqCst;
        slow.fetch_update(SeqCst, SeqCst, |n| (n < MAX_SLOW).then_some(n + 1))
            .ok()
            .map(|_| SlowCycle(slow))
    }
}

impl Drop for SlowCycle<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
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

    #[tokio::test(start_paused = true)]
    async fn without_a_limit_every_cycle_needs_a_place_and_slow_ones_give_it_back() {
        let lanes = Lanes::new(None);
        let mut held = Vec::new();
        for _ in 0..DEFAULT_CAPACITY {
            held.push(lanes.acquire(Lane::Listed).await.expect("a place"));
        }
        let changed = tokio::spawn({
            let lanes = lanes.clone();
            async move { lanes.acquire(Lane::Changed).await.is_some() }
        });
        tokio::task::yield_now().await;
        assert!(
            !changed.is_finished(),
            "a changed object waits for a place too"
        );
        // A slow cycle gives its place back: the changed object gets it.
        let mut place = held.pop();
        let slow = tokio::spawn({
            let lanes = lanes.clone();
            async move {
                lanes
                    .hold(
                        &mut place,
                        Box::pin(tokio::time::sleep(Duration::from_secs(10))),
                    )
                    .await;
            }
        });
        assert!(changed.await.expect("joined"));
        assert_eq!(lanes.slow.load(std::sync::atomic::Ordering::SeqCst), 1);
        slow.await.expect("joined");
        assert_eq!(lanes.slow.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn slow_cycles_keep_their_places_beyond_the_bound() {
        let lanes = Lanes::new(None);
        lanes
            .slow
            .store(MAX_SLOW, std::sync::atomic::Ordering::SeqCst);
        let mut place = lanes.acquire(Lane::Changed).await;
        lanes
            .hold(&mut place, Box::pin(tokio::time::sleep(SLOW_CYCLE * 3)))
            .await;
        assert!(
            place.is_some(),
            "kept to the end: {MAX_SLOW} slow cycles already run"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_listed_object_that_waited_long_enough_gets_every_other_place() {
        let lanes = Lanes::new(Some(1));
        let order = Arc::new(Mutex::new(Vec::new()));
        let wait = |lane: Lane, name: &'static str| {
            let (lanes, order) = (lanes.clone(), order.clone());
            tokio::spawn(async move {
                let place = lanes.acquire(lane).await;
                order.lock().expect("lock").push(name);
                // Each cycle holds its place for 2 s.
                tokio::time::sleep(Duration::from_secs(2)).await;
                drop(place);
            })
        };
        let first = lanes.acquire(Lane::Changed).await;
        let mut waiting = vec![wait(Lane::Listed, "l1"), wait(Lane::Listed, "l2")];
        tokio::task::yield_now().await;
        for name in ["c1", "c2", "c3", "c4", "c5", "c6"] {
            waiting.push(wait(Lane::Changed, name));
        }
        tokio::task::yield_now().await;
        drop(first);
        for t in waiting {
            t.await.expect("joined");
        }
        // Changed objects first while the listed ones have waited less than 5 s (places at
        // 0, 2 and 4 s), then in turn: the listed ones are not starved by the changes.
        assert_eq!(
            order.lock().expect("lock").clone(),
            vec!["c1", "c2", "c3", "c4", "l1", "c5", "l2", "c6"]
        );
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
