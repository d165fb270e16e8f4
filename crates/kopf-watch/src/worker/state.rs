//! A worker's state as a value: what it remembers between the states of its object, and the
//! plain functions that move it on a new state, at the end of a cycle, on a wake-up, and when
//! it retires. No I/O, no clock of its own (`now` is given): the loop in [`super`] does the
//! waiting, the cycles and the reads, and asks this state what to do next.
//!
//! The phases it goes through: idle (nothing to do: it retires, leaving a [`Resume`]),
//! cycling (a state admitted in a lane), waiting for consistency (its own write has not come
//! back: older states are skipped until it does, or until the deadline, when the object is
//! read), retrying (a handler's delay, a re-check after a conflict), throttled (after a
//! framework error), reconciling (the reconcile's schedule is due).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kopf_core::causes::EventKind;
use kopf_core::memo::{MemoSeed, Memos};
use kopf_core::reconcile::{Schedule, Trigger};
use kopf_core::throttle::Throttler;
use tokio::time::Instant;

use crate::lanes::Lane;
use crate::object::{Observed, rv};
use crate::shared::Resume;
use crate::write::CycleEnd;

/// The longest a worker sleeps before looking at its object again (Kopf's keep-alive).
const MAX_SLEEP: Duration = Duration::from_secs(600);

/// After a write met a concurrent change and no newer state came, the object is processed
/// again after this long.
const CONFLICT_RECHECK: Duration = Duration::from_secs(1);

/// The rules a worker's state follows, the same for every object of a resource.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// How long a worker waits for its own write to come back.
    pub(crate) consistency_timeout: Duration,
    /// A retry delay that ends touches the object rather than processing it again.
    pub(crate) touch_delays: bool,
    /// The resource has a reconcile, debounced by this much (if at all).
    pub(crate) reconcile: Option<Option<Duration>>,
    /// The object's worker never retires (its daemons, timers or reconcile run in it).
    pub(crate) stays: bool,
}

/// Whose turn a state at hand is.
#[derive(Debug, PartialEq)]
pub(crate) enum Turn {
    /// The reconcile runs on it, for this reason.
    Reconcile(Trigger),
    /// The cause handlers' (after the daemons and timers saw it): see [`WorkerState::admit`].
    Causes,
    /// Nobody's: the reconcile's wake-up found nothing due.
    Nobody,
}

/// How the worker runs an admitted state.
#[derive(Debug, PartialEq)]
pub(crate) enum Run {
    /// A retry delay ended: the object is touched, for a fresh state to come.
    Touch,
    /// A cycle (`initial`: resume handlers are due), with the handlers whose results the API
    /// server refused last time.
    Cycle {
        initial: bool,
        rejected: Arc<HashMap<String, String>>,
    },
}

/// What a worker does after a cycle.
#[derive(Debug, PartialEq)]
pub(crate) enum After {
    /// The object is gone: the worker ends.
    Gone,
    /// Waits for what comes next (or retires).
    Wait,
    /// Throttled for `delay` after a framework error (new states meanwhile wait); then the
    /// latest state is processed.
    Throttled { delay: Duration, error: String },
    /// The API server refused results: the latest state is processed again at once.
    Again,
    /// The object changed while it was written, `times` in a row: a newer state, or a
    /// re-check soon.
    Conflicted { times: u32, message: String },
}

/// What a worker does when its sleep ends.
#[derive(Debug, PartialEq)]
pub(crate) enum Woke {
    /// The reconcile's turn.
    Reconcile,
    /// Its own write did not come back in time: the object is read.
    Read,
    /// The latest state is processed again (a retry delay, a re-check).
    Again,
}

/// How a wait for our own write ended: after `waited`, seen through the watch (a state of
/// its resourceVersion or newer), or not (the deadline passed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Echo {
    pub(crate) waited: Duration,
    pub(crate) seen: bool,
}

/// What one object's worker remembers between the states of its object.
pub(crate) struct WorkerState {
    rules: Rules,
    /// The object's memo, for its handlers.
    pub(super) memo: Memos,
    throttler: Throttler,
    /// First seen in a listing: resume handlers join until the object is handled once.
    listed: bool,
    /// Our last write, until it comes back through the watch or the consistency deadline.
    expected: Option<(u64, Instant)>,
    /// When that write was made.
    wrote_at: Option<Instant>,
    /// How the wait for our last write ended, until the loop reports it.
    echo: Option<Echo>,
    /// A handler's retry delay, when the cycle wrote nothing (a write brings its own event).
    retry_at: Option<Instant>,
    /// The retry delay ended with no new event: process (or touch) now.
    woken: bool,
    /// Handlers whose results the API server refused in the last cycle.
    rejected: Arc<HashMap<String, String>>,
    /// Writes in a row that met a concurrent change.
    conflicts: u32,
    /// The pending wake-up is a re-check after a conflict (never a touch).
    recheck: bool,
    /// The object as read after our write did not come back in time.
    fetched: Option<Observed>,
    /// The resourceVersion of that read: states older than that are never processed.
    floor: Option<u64>,
    /// The reconcile's schedule (one pending entry, the earliest wins).
    pub(super) schedule: Schedule,
    /// Why the next reconcile is wanted once the latest state went through the cause
    /// handlers.
    wanted: Option<Trigger>,
    /// The resourceVersion of our last write (its state coming back is no change to
    /// reconcile).
    written: Option<u64>,
    /// The wake-up is the reconcile's.
    reconcile_now: bool,
}

impl WorkerState {
    /// A worker's state from what the last worker of its object left (for a write it left,
    /// the consistency deadline counts from `now`; a memo it did not leave starts from
    /// `seed`).
    pub(crate) fn new(
        rules: Rules,
        resume: Resume,
        (seed, throttler): (Arc<MemoSeed>, Throttler),
        now: Instant,
    ) -> Self {
        let expected = resume
            .expected_rv
            .map(|r| (r, now + rules.consistency_timeout));
        let wrote_at = expected.map(|_| resume.wrote_at.unwrap_or(now));
        WorkerState {
            throttler,
            memo: resume.memo.unwrap_or_else(|| Memos::new(seed)),
            listed: resume.listed,
            expected,
            wrote_at,
            echo: None,
            retry_at: None,
            woken: false,
            rejected: Arc::default(),
            conflicts: 0,
            recheck: false,
            fetched: None,
            floor: resume.floor,
            schedule: Schedule::default(),
            wanted: rules.reconcile.map(|_| Trigger::Listed),
            written: None,
            reconcile_now: false,
            rules,
        }
    }

    /// The object as read after a slow watch, if it waits to be processed.
    pub(crate) fn take_fetched(&mut self) -> Option<Observed> {
        self.fetched.take()
    }

    /// Whether a read object waits to be processed.
    pub(crate) fn has_fetched(&self) -> bool {
        self.fetched.is_some()
    }

    /// A state at hand (`news`: newer than the last one looked at): the reconcile's turn
    /// when it woke the worker and nothing newer waits for the cause handlers (nor our own
    /// last write: the pending entry then waits for it to come back); else the cause
    /// handlers', and the reconcile is wanted after them.
    pub(crate) fn on_state(&mut self, observed: &Observed, news: bool, now: Instant) -> Turn {
        if std::mem::take(&mut self.reconcile_now) && !news {
            if self.expected.is_none()
                && self.rules.reconcile.is_some()
                && let Some(why) = self.schedule.take_due(now)
            {
                return Turn::Reconcile(why);
            }
            return Turn::Nobody;
        }
        self.listed |= observed.listed;
        if self.rules.reconcile.is_some() {
            if observed.event == EventKind::Deleted
                || kopf_core::finalizers::is_deleting(&observed.body)
            {
                // Deletion is the cleanup's (a deletion handler), not the reconcile's.
                self.wanted = None;
                self.schedule.clear();
            } else if self.written.is_none_or(|w| rv(&observed.body) != Some(w)) {
                self.wanted.get_or_insert(Trigger::ObjectChanged);
            }
        }
        Turn::Causes
    }

    /// Whether the cause handlers process a state, and in which lane. States older than our
    /// last write are skipped until it comes back (or its deadline passes), and states
    /// older than a read are skipped for good; a DELETED event is never stale. Listed
    /// objects wait behind changed ones.
    pub(crate) fn admit(&mut self, observed: &Observed, now: Instant) -> Option<Lane> {
        if self.is_stale(observed, now) {
            return None;
        }
        let have = rv(&observed.body);
        if let Some((want, _)) = self.expected.take()
            && observed.event != EventKind::Deleted
            && let Some(have) = have
        {
            // Back through the watch, or waited for long enough (the state is older).
            self.echoed(have >= want, now);
        }
        Some(if observed.event == EventKind::Listed && !self.woken {
            Lane::Listed
        } else {
            Lane::Changed
        })
    }

    /// Whether a state is older than our last write (until its deadline at `now`) or than a
    /// read: it is skipped. A DELETED event is never stale.
    pub(crate) fn is_stale(&self, observed: &Observed, now: Instant) -> bool {
        let have = rv(&observed.body);
        let older = |than: u64| have.is_some_and(|have| have < than);
        observed.event != EventKind::Deleted
            && (self
                .expected
                .is_some_and(|(want, deadline)| older(want) && now < deadline)
                || self.floor.is_some_and(older))
    }

    /// How an admitted state runs (`handled`: the object's cause handlers finished once).
    pub(crate) fn run(&mut self, handled: bool) -> Run {
        let initial = self.listed && !handled;
        if std::mem::take(&mut self.woken) && self.rules.touch_delays {
            Run::Touch
        } else {
            Run::Cycle {
                initial,
                rejected: std::mem::take(&mut self.rejected),
            }
        }
    }

    /// A cycle (or a touch) ended at `now`.
    pub(crate) fn on_cycle_end(&mut self, end: CycleEnd, now: Instant) -> After {
        self.recheck = false;
        if !matches!(end, CycleEnd::Conflict(_)) {
            self.conflicts = 0;
        }
        match end {
            CycleEnd::Gone => After::Gone,
            CycleEnd::Next { delay, rv } => {
                self.processed(delay, rv, now);
                After::Wait
            }
            CycleEnd::Failed(error) => {
                self.retry_at = None;
                let delay = self.throttler.failed().min(MAX_SLEEP);
                After::Throttled { delay, error }
            }
            CycleEnd::Rejected(refused) => {
                // The refused handlers' attempts are recorded as failures (nothing of this
                // cycle was marked handled).
                self.rejected = Arc::new(refused);
                self.retry_at = None;
                After::Again
            }
            CycleEnd::Conflict(message) => {
                self.conflicts += 1;
                // The newer state comes through the watch; if it does not, the latest known
                // state is processed again a little later.
                self.retry_at = Some(now + CONFLICT_RECHECK);
                self.recheck = true;
                self.expected = None;
                After::Conflicted {
                    times: self.conflicts,
                    message,
                }
            }
        }
    }

    /// A cycle went through: our write `rv` is waited for, or its retry `delay` (a write
    /// brings its own event); with nothing written, the reconcile runs on the state.
    fn processed(&mut self, delay: Option<Duration>, rv: Option<u64>, now: Instant) {
        self.throttler.succeeded();
        if let Some(r) = rv {
            self.written = Some(r);
        } else if let Some(why) = self.wanted.take() {
            self.schedule
                .trigger(now, why, self.rules.reconcile.flatten());
        }
        self.expect(rv, now);
        self.retry_at = match rv {
            Some(_) => None,
            None => delay.map(|d| now + d.min(MAX_SLEEP)),
        };
    }

    /// A reconcile ended at `now`; false: the object is gone.
    pub(crate) fn on_reconciled(&mut self, end: &CycleEnd, now: Instant) -> bool {
        match end {
            CycleEnd::Gone => return false,
            CycleEnd::Next { rv: Some(r), .. } => {
                self.written = Some(*r);
                self.expect(Some(*r), now);
            }
            _ => {}
        }
        true
    }

    /// What the worker leaves when it has nothing left to do but to wait for the next state
    /// (`news`: a state waits, or the channel is closed; `handled`: asked only then); None:
    /// it goes on.
    pub(crate) fn retire(&self, news: bool, handled: impl FnOnce() -> bool) -> Option<Resume> {
        (!self.rules.stays && self.is_idle(news)).then(|| Resume {
            listed: self.listed && !handled(),
            expected_rv: self.expected.map(|(r, _)| r),
            wrote_at: self.expected.and(self.wrote_at),
            floor: self.floor,
            memo: (!self.memo.is_untouched()).then(|| self.memo.clone()),
        })
    }

    /// Whether nothing is left to do on the state at hand: no retry, recheck, conflict,
    /// rejection or read pending, and no newer state (`news`). A worker whose resource has
    /// no reconcile and no daemons retires then; with either, it stays and waits.
    pub(crate) fn is_idle(&self, news: bool) -> bool {
        self.retry_at.is_none()
            && !self.recheck
            && self.conflicts == 0
            && self.rejected.is_empty()
            && self.fetched.is_none()
            && !news
    }

    /// When the reconcile's entry is due; it waits while our own write has not come back
    /// (its state is not the latest yet).
    fn reconcile_at(&self) -> Option<Instant> {
        self.schedule.when().filter(|_| self.expected.is_none())
    }

    /// When the worker wakes up if nothing comes first: a retry, the consistency deadline,
    /// the reconcile.
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        [
            self.retry_at,
            self.expected.map(|(_, deadline)| deadline),
            self.reconcile_at(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Our write of resourceVersion `rv` (if any) at `now` is waited for, until the
    /// consistency deadline.
    fn expect(&mut self, rv: Option<u64>, now: Instant) {
        self.expected = rv.map(|r| (r, now + self.rules.consistency_timeout));
        self.wrote_at = rv.map(|_| now);
    }

    /// The wait for our last write ended at `now`: `seen` through the watch, or not.
    fn echoed(&mut self, seen: bool, now: Instant) {
        if let Some(at) = self.wrote_at.take() {
            self.echo = Some(Echo {
                waited: now - at,
                seen,
            });
        }
    }

    /// How the wait for our last write ended, once (for the metrics).
    pub(crate) fn take_echo(&mut self) -> Option<Echo> {
        self.echo.take()
    }

    /// The object is paused by hand: nothing is due until it is resumed (no retry, no
    /// re-check, no reconcile; the next state after the pause is processed as usual, with
    /// what changed meanwhile).
    pub(crate) fn hold(&mut self, observed: &Observed) {
        // A listed state's resume handlers are due once it is resumed.
        self.listed |= observed.listed;
        self.retry_at = None;
        self.woken = false;
        self.recheck = false;
        self.conflicts = 0;
        self.rejected = Arc::default();
        self.fetched = None;
        self.reconcile_now = false;
        self.schedule.clear();
    }

    /// An owned or related object changed (`deleting`: this one is being deleted, or gone).
    pub(crate) fn on_kick(&mut self, why: Trigger, deleting: bool, now: Instant) {
        if !deleting {
            self.schedule
                .trigger(now, why, self.rules.reconcile.flatten());
        }
        self.reconcile_now = true;
    }

    /// A new state came.
    pub(crate) fn on_news(&mut self) {
        self.woken = false;
        self.recheck = false;
    }

    /// The sleep ended at `now`.
    pub(crate) fn on_wake(&mut self, now: Instant) -> Woke {
        if self.reconcile_at().is_some_and(|r| r <= now) && self.retry_at.is_none_or(|r| r > now) {
            self.reconcile_now = true;
            return Woke::Reconcile;
        }
        if self.retry_at.is_some_and(|r| r <= now) {
            self.retry_at = None;
            self.woken = !std::mem::take(&mut self.recheck);
        }
        if self.expected.is_some_and(|(_, deadline)| deadline <= now) {
            self.expected = None;
            self.echoed(false, now);
            return Woke::Read;
        }
        Woke::Again
    }

    /// The object as read after our write did not come back in time: processed next, and
    /// states older than it never.
    pub(crate) fn on_read(&mut self, fresh: Observed) {
        self.floor = rv(&fresh.body).max(self.floor);
        self.fetched = Some(fresh);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TIMEOUT: Duration = Duration::from_secs(5);

    fn rules() -> Rules {
        Rules {
            consistency_timeout: TIMEOUT,
            touch_delays: false,
            reconcile: None,
            stays: false,
        }
    }

    /// With a reconcile (no debounce): the worker stays.
    fn reconciled() -> Rules {
        Rules {
            reconcile: Some(None),
            stays: true,
            ..rules()
        }
    }

    fn state_with(rules: Rules, resume: Resume, seed: MemoSeed, now: Instant) -> WorkerState {
        let delays = vec![Duration::from_secs(1), Duration::from_secs(2)];
        WorkerState::new(rules, resume, (Arc::new(seed), Throttler::new(delays)), now)
    }

    fn state(rules: Rules, now: Instant) -> WorkerState {
        state_with(rules, Resume::default(), MemoSeed::default(), now)
    }

    fn observed(event: EventKind, rv: u64) -> Observed {
        Observed::new(
            Arc::new(json!({"metadata": {"uid": "u1", "resourceVersion": rv.to_string()}})),
            event,
        )
    }

    fn deleting(rv: u64) -> Observed {
        Observed::new(
            Arc::new(json!({"metadata": {
                "uid": "u1",
                "resourceVersion": rv.to_string(),
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"],
            }})),
            EventKind::Modified,
        )
    }

    fn next(delay: Option<Duration>, rv: Option<u64>) -> CycleEnd {
        CycleEnd::Next { delay, rv }
    }

    /// Takes a state through the cause handlers' turn; the lane it got.
    fn through_causes(s: &mut WorkerState, o: &Observed, now: Instant) -> Option<Lane> {
        assert_eq!(s.on_state(o, true, now), Turn::Causes);
        s.admit(o, now)
    }

    fn cycle(initial: bool) -> Run {
        Run::Cycle {
            initial,
            rejected: Arc::default(),
        }
    }

    #[test]
    fn a_listed_object_cycles_then_retires_leaving_its_write() {
        let now = Instant::now();
        let mut s = state(rules(), now);
        let o = observed(EventKind::Listed, 1);
        assert_eq!(through_causes(&mut s, &o, now), Some(Lane::Listed));
        assert_eq!(s.run(false), cycle(true));
        assert_eq!(s.on_cycle_end(next(None, Some(2)), now), After::Wait);
        assert_eq!(s.next_wake(), Some(now + TIMEOUT));
        // A state waits: no retiring.
        assert!(s.retire(true, || false).is_none());
        let left = s.retire(false, || false).expect("idle");
        assert!(left.listed);
        assert_eq!((left.expected_rv, left.floor), (Some(2), None));
        assert!(left.memo.is_none());
        // Handled meanwhile: the next worker owes no resume handlers.
        assert!(!s.retire(false, || true).expect("idle").listed);
    }

    #[test]
    fn a_worker_with_daemons_or_a_reconcile_never_retires() {
        let now = Instant::now();
        let s = state(reconciled(), now);
        assert!(s.retire(false, || false).is_none());
    }

    #[test]
    fn states_older_than_the_own_write_wait_for_consistency_then_the_object_is_read() {
        let now = Instant::now();
        let mut s = state(reconciled(), now);
        through_causes(&mut s, &observed(EventKind::Modified, 4), now);
        s.run(true);
        s.on_cycle_end(next(None, Some(5)), now);
        // The write's own state has not come back: older states are skipped...
        let older = observed(EventKind::Modified, 4);
        assert_eq!(through_causes(&mut s, &older, now), None);
        // ...but a deletion never is.
        let later = now + Duration::from_secs(1);
        let deleted = observed(EventKind::Deleted, 4);
        assert_eq!(through_causes(&mut s, &deleted, later), Some(Lane::Changed));
    }

    #[test]
    fn a_write_that_does_not_come_back_in_time_makes_the_object_read_and_floors_older_states() {
        let now = Instant::now();
        let mut s = state(rules(), now);
        through_causes(&mut s, &observed(EventKind::Modified, 4), now);
        s.run(true);
        s.on_cycle_end(next(None, Some(5)), now);
        let deadline = now + TIMEOUT;
        assert_eq!(s.next_wake(), Some(deadline));
        assert_eq!(s.on_wake(deadline), Woke::Read);
        s.on_read(observed(EventKind::Modified, 6));
        assert!(s.has_fetched());
        // A read waits: no retiring.
        assert!(s.retire(false, || false).is_none());
        let fresh = s.take_fetched().expect("read");
        assert_eq!(
            through_causes(&mut s, &fresh, deadline),
            Some(Lane::Changed)
        );
        // States older than the read are skipped for good.
        let much_later = deadline + Duration::from_secs(3600);
        let older = observed(EventKind::Modified, 5);
        assert_eq!(through_causes(&mut s, &older, much_later), None);
        assert_eq!(s.retire(false, || false).expect("idle").floor, Some(6));
    }

    #[test]
    fn a_past_deadline_admits_the_older_state() {
        let now = Instant::now();
        let mut s = state(rules(), now);
        s.on_cycle_end(next(None, Some(5)), now);
        let older = observed(EventKind::Modified, 4);
        assert_eq!(
            through_causes(&mut s, &older, now + TIMEOUT),
            Some(Lane::Changed)
        );
    }

    #[test]
    fn what_a_retired_worker_left_holds_for_the_next_one() {
        let now = Instant::now();
        let resume = Resume {
            listed: true,
            expected_rv: Some(5),
            wrote_at: None,
            floor: Some(3),
            memo: None,
        };
        let mut s = state_with(rules(), resume, MemoSeed::default(), now);
        // The write's deadline counts from the new worker's start.
        assert_eq!(s.next_wake(), Some(now + TIMEOUT));
        let o = observed(EventKind::Modified, 4);
        assert_eq!(through_causes(&mut s, &o, now), None);
        let past = now + TIMEOUT;
        assert_eq!(
            through_causes(&mut s, &observed(EventKind::Modified, 2), past),
            None
        );
        assert_eq!(through_causes(&mut s, &o, past), Some(Lane::Changed));
        // Still owed its resume handlers.
        assert_eq!(s.run(false), cycle(true));
    }

    #[test]
    fn framework_errors_throttle_with_growing_delays_until_a_success() {
        let now = Instant::now();
        let mut s = state(rules(), now);
        let failed = || CycleEnd::Failed("boom".into());
        let throttled = |secs| After::Throttled {
            delay: Duration::from_secs(secs),
            error: "boom".into(),
        };
        assert_eq!(s.on_cycle_end(failed(), now), throttled(1));
        assert_eq!(s.on_cycle_end(failed(), now), throttled(2));
        assert_eq!(s.on_cycle_end(failed(), now), throttled(2));
        assert_eq!(s.on_cycle_end(next(None, None), now), After::Wait);
        assert_eq!(s.on_cycle_end(failed(), now), throttled(1));
    }

    #[test]
    fn a_retry_delay_wakes_the_worker_which_touches_the_object_with_touch_delays() {
        let now = Instant::now();
        let mut s = state(
            Rules {
                touch_delays: true,
                ..rules()
            },
            now,
        );
        let delay = Duration::from_secs(30);
        s.on_cycle_end(next(Some(delay), None), now);
        assert_eq!(s.next_wake(), Some(now + delay));
        assert!(s.retire(false, || false).is_none());
        assert_eq!(s.on_wake(now + delay), Woke::Again);
        // Woken: a listed state goes in the changed objects' lane, and is touched.
        let o = observed(EventKind::Listed, 1);
        assert_eq!(through_causes(&mut s, &o, now + delay), Some(Lane::Changed));
        assert_eq!(s.run(false), Run::Touch);
        assert_eq!(s.run(false), cycle(true));
        // A delay is at most the keep-alive.
        s.on_cycle_end(next(Some(Duration::from_secs(7200)), None), now);
        assert_eq!(s.next_wake(), Some(now + MAX_SLEEP));
    }

    #[test]
    fn a_new_state_cancels_the_touch_of_a_retry() {
        let now = Instant::now();
        let rules = Rules {
            touch_delays: true,
            ..rules()
        };
        let mut s = state(rules, now);
        s.on_cycle_end(next(Some(Duration::from_secs(1)), None), now);
        s.on_wake(now + Duration::from_secs(1));
        s.on_news();
        assert_eq!(s.run(true), cycle(false));
    }

    #[test]
    fn conflicts_recheck_soon_without_touching_and_count_in_a_row() {
        let now = Instant::now();
        let rules = Rules {
            touch_delays: true,
            ..rules()
        };
        let mut s = state(rules, now);
        let conflict = || CycleEnd::Conflict("changed".into());
        let conflicted = |times| After::Conflicted {
            times,
            message: "changed".into(),
        };
        assert_eq!(s.on_cycle_end(conflict(), now), conflicted(1));
        assert_eq!(s.next_wake(), Some(now + CONFLICT_RECHECK));
        assert!(s.retire(false, || false).is_none());
        assert_eq!(s.on_wake(now + CONFLICT_RECHECK), Woke::Again);
        // A re-check is a cycle, never a touch.
        assert_eq!(s.run(true), cycle(false));
        assert_eq!(s.on_cycle_end(conflict(), now), conflicted(2));
        assert_eq!(s.on_cycle_end(conflict(), now), conflicted(3));
        assert_eq!(s.on_cycle_end(next(None, None), now), After::Wait);
        assert_eq!(s.on_cycle_end(conflict(), now), conflicted(1));
    }

    #[test]
    fn refused_results_are_processed_again_at_once_as_failures() {
        let now = Instant::now();
        let mut s = state(rules(), now);
        let refused = HashMap::from([("h".to_string(), "no".to_string())]);
        assert_eq!(
            s.on_cycle_end(CycleEnd::Rejected(refused.clone()), now),
            After::Again
        );
        assert!(s.retire(false, || false).is_none());
        assert_eq!(
            s.run(true),
            Run::Cycle {
                initial: false,
                rejected: Arc::new(refused)
            }
        );
        assert_eq!(s.run(true), cycle(false));
    }

    #[test]
    fn gone_ends_the_worker() {
        let now = Instant::now();
        let mut s = state(rules(), now);
        assert_eq!(s.on_cycle_end(CycleEnd::Gone, now), After::Gone);
        assert!(!s.on_reconciled(&CycleEnd::Gone, now));
    }

    #[test]
    fn the_reconcile_runs_once_the_cause_handlers_wrote_nothing() {
        let now = Instant::now();
        let mut s = state(reconciled(), now);
        let o = observed(EventKind::Listed, 1);
        through_causes(&mut s, &o, now);
        s.run(false);
        s.on_cycle_end(next(None, None), now);
        assert_eq!(s.next_wake(), Some(now));
        assert_eq!(s.on_wake(now), Woke::Reconcile);
        assert_eq!(s.on_state(&o, false, now), Turn::Reconcile(Trigger::Listed));
        // Nothing due anymore: the next wake-up finds nothing to do.
        assert_eq!(s.next_wake(), None);
    }

    #[test]
    fn newer_state_goes_to_the_cause_handlers_before_the_reconcile() {
        let now = Instant::now();
        let mut s = state(reconciled(), now);
        let o = observed(EventKind::Listed, 1);
        through_causes(&mut s, &o, now);
        s.on_cycle_end(next(None, None), now);
        assert_eq!(s.on_wake(now), Woke::Reconcile);
        let newer = observed(EventKind::Modified, 2);
        assert_eq!(s.on_state(&newer, true, now), Turn::Causes);
    }

    #[test]
    fn the_reconcile_waits_for_its_own_write_and_its_own_write_is_no_change() {
        let now = Instant::now();
        let mut s = state(reconciled(), now);
        let o = observed(EventKind::Listed, 1);
        through_causes(&mut s, &o, now);
        s.on_cycle_end(next(None, None), now);
        s.on_wake(now);
        assert!(matches!(s.on_state(&o, false, now), Turn::Reconcile(_)));
        assert!(s.on_reconciled(&next(None, Some(3)), now));
        // A request meanwhile waits for the write to come back.
        s.on_kick(Trigger::Requeue, false, now);
        assert_eq!(s.next_wake(), Some(now + TIMEOUT));
        assert_eq!(s.on_state(&o, false, now), Turn::Nobody);
        // Its own write back: admitted, and no change to reconcile; the request is due.
        let own = observed(EventKind::Modified, 3);
        assert_eq!(through_causes(&mut s, &own, now), Some(Lane::Changed));
        s.on_cycle_end(next(None, None), now);
        assert_eq!(s.on_wake(now), Woke::Reconcile);
        assert_eq!(
            s.on_state(&own, false, now),
            Turn::Reconcile(Trigger::Requeue)
        );
        // A change by someone else is one.
        let theirs = observed(EventKind::Modified, 4);
        through_causes(&mut s, &theirs, now);
        s.on_cycle_end(next(None, None), now);
        assert_eq!(s.on_wake(now), Woke::Reconcile);
        let turn = s.on_state(&theirs, false, now);
        assert_eq!(turn, Turn::Reconcile(Trigger::ObjectChanged));
    }

    #[test]
    fn a_deletion_drops_the_reconcile_and_its_requests() {
        let now = Instant::now();
        let mut s = state(reconciled(), now);
        s.on_kick(Trigger::Requeue, false, now);
        assert_eq!(s.next_wake(), Some(now));
        let gone = deleting(2);
        through_causes(&mut s, &gone, now);
        s.on_cycle_end(next(None, None), now);
        assert_eq!(s.next_wake(), None);
        s.on_kick(Trigger::Requeue, true, now);
        assert_eq!(s.next_wake(), None);
        assert_eq!(s.on_state(&gone, false, now), Turn::Nobody);
    }

    #[test]
    fn a_debounced_reconcile_waits_its_debounce() {
        let now = Instant::now();
        let debounce = Duration::from_secs(2);
        let rules = Rules {
            reconcile: Some(Some(debounce)),
            ..reconciled()
        };
        let mut s = state(rules, now);
        through_causes(&mut s, &observed(EventKind::Listed, 1), now);
        s.on_cycle_end(next(None, None), now);
        assert_eq!(s.next_wake(), Some(now + debounce));
        assert_eq!(s.on_wake(now + debounce), Woke::Reconcile);
    }

    #[test]
    fn the_memo_is_left_only_once_a_handler_used_it() {
        let now = Instant::now();
        let mut seed = MemoSeed::default();
        seed.insert(0u32);
        let s = state_with(rules(), Resume::default(), seed, now);
        assert!(s.retire(false, || false).expect("idle").memo.is_none());
        s.memo.get::<u32>().expect("registered").set(1);
        let left = s.retire(false, || false).expect("idle").memo.expect("kept");
        assert_eq!(left.get::<u32>().expect("registered").get(), 1);
    }

    #[test]
    fn the_wait_for_an_own_write_ends_seen_with_its_resource_version_or_newer() {
        let now = Instant::now();
        let mut s = state(rules(), now);
        s.on_cycle_end(
            CycleEnd::Next {
                delay: None,
                rv: Some(7),
            },
            now,
        );
        let later = now + Duration::from_millis(40);
        assert_eq!(
            s.admit(&observed(EventKind::Modified, 6), later),
            None,
            "older: skipped"
        );
        assert_eq!(s.take_echo(), None, "still waiting");
        assert!(
            s.admit(&observed(EventKind::Modified, 8), later).is_some(),
            "newer than mine"
        );
        assert_eq!(
            s.take_echo(),
            Some(Echo {
                waited: Duration::from_millis(40),
                seen: true
            })
        );
        assert_eq!(s.take_echo(), None, "reported once");
    }

    #[test]
    fn the_wait_for_an_own_write_times_out_at_the_deadline() {
        let now = Instant::now();
        let mut s = state(rules(), now);
        s.on_cycle_end(
            CycleEnd::Next {
                delay: None,
                rv: Some(7),
            },
            now,
        );
        assert_eq!(s.on_wake(now + TIMEOUT), Woke::Read);
        assert_eq!(
            s.take_echo(),
            Some(Echo {
                waited: TIMEOUT,
                seen: false
            })
        );
    }

    #[test]
    fn resource_versions_that_are_not_numbers_are_never_taken_for_older_ones() {
        // A server whose resourceVersions are opaque: nothing can be compared, so no state
        // is skipped (fail open; the handlers' idempotency covers the rest).
        let now = Instant::now();
        let mut s = state(rules(), now);
        s.on_cycle_end(
            CycleEnd::Next {
                delay: None,
                rv: Some(7),
            },
            now,
        );
        let opaque = Observed::new(
            Arc::new(json!({"metadata": {"uid": "u1", "resourceVersion": "a7f3"}})),
            EventKind::Modified,
        );
        assert!(s.admit(&opaque, now).is_some(), "processed");
        assert_eq!(s.take_echo(), None, "neither seen nor timed out");
    }
}
