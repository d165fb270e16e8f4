//! What a peering object's status means for this operator: who is alive, who is dead, and
//! whether this operator may act ([`decide`]).
//!
//! Kopf's rules: dead peers (`lastseen + lifetime <= now`) are removed by whoever sees them;
//! a live peer with a higher priority pauses this operator; live peers with the same priority
//! pause everybody (unless [`SamePriority::Ignore`]). Liveness is judged more carefully than
//! Kopf does, because a peer's `lastseen` comes from the peer's clock: a peer is also alive
//! while its entry keeps changing, as this operator observes it on its own monotonic clock
//! (client-go's rule for leases). Pausing believes either rule (more pausing is the safe
//! side); removing another peer's entry needs both to say it is dead.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use jiff::Timestamp;
use serde_json::Value;

use crate::error::PeerError;
use crate::peer::Peer;
use crate::settings::SamePriority;

/// Whether this operator may act, from the peers it sees.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// No live peer blocks it.
    Active,
    /// Live peers with a higher priority.
    PausedBy(Vec<Peer>),
    /// Live peers with the same priority (everybody pauses).
    Conflict(Vec<Peer>),
}

/// When this operator saw each entry change, on its own clock.
#[derive(Debug, Default)]
pub struct Liveness {
    seen: HashMap<String, (Value, Instant)>,
}

impl Liveness {
    /// Records the entries of a status as seen at `mono`: an entry that is new or differs
    /// from the last one seen was changed now. Entries no longer there are forgotten.
    pub fn observe(&mut self, status: &serde_json::Map<String, Value>, mono: Instant) {
        self.seen.retain(|id, _| status.contains_key(id));
        for (id, value) in status {
            match self.seen.get(id) {
                Some((last, _)) if last == value => {}
                _ => {
                    self.seen.insert(id.clone(), (value.clone(), mono));
                }
            }
        }
    }

    /// Until when the entry counts as alive by observation: its last change + `lifetime`.
    fn alive_until(&self, id: &str, lifetime: Duration) -> Option<Instant> {
        self.seen.get(id).map(|(_, at)| *at + lifetime)
    }
}

/// What [`decide`] found.
#[derive(Debug)]
pub struct Decision {
    /// Whether this operator may act.
    pub verdict: Verdict,
    /// Entries of other peers to remove: dead by both rules.
    pub dead: Vec<String>,
    /// Entries that are not peers' entries (to log; never removed).
    pub unreadable: Vec<PeerError>,
    /// After how long the earliest blocking peer expires, if nothing changes: the moment to
    /// look again.
    pub recheck_in: Option<Duration>,
}

/// The decision of this operator (`me`, with `priority`) on a peering object's `status`, at
/// wall time `now` and monotonic time `mono`, after recording the status in `liveness`.
pub fn decide(
    status: Option<&Value>,
    me: &str,
    priority: i64,
    same_priority: SamePriority,
    now: Timestamp,
    mono: Instant,
    liveness: &mut Liveness,
) -> Decision {
    let empty = serde_json::Map::new();
    let entries = status.and_then(Value::as_object).unwrap_or(&empty);
    liveness.observe(entries, mono);
    let mut higher = Vec::new();
    let mut same = Vec::new();
    let mut dead = Vec::new();
    let mut unreadable = Vec::new();
    let mut recheck: Option<Duration> = None;
    for (id, value) in entries {
        if id == me || value.is_null() {
            continue;
        }
        let peer = match Peer::parse(id, value, now) {
            Ok(peer) => peer,
            Err(e) => {
                unreadable.push(e);
                continue;
            }
        };
        // Kopf's rule, by the peer's clock.
        let by_clock = peer.deadline().duration_since(now);
        let by_clock = (by_clock.is_positive()).then(|| by_clock.unsigned_abs());
        // The observed rule, by ours.
        let by_change = liveness
            .alive_until(id, peer.lifetime)
            .and_then(|until| until.checked_duration_since(mono))
            .filter(|d| !d.is_zero());
        let remaining = match (by_clock, by_change) {
            (None, None) => {
                dead.push(id.clone());
                continue;
            }
            (a, b) => a.max(b).unwrap_or_default(),
        };
        let blocks = if peer.priority > priority {
            higher.push(peer);
            true
        } else if peer.priority == priority && same_priority == SamePriority::PauseAll {
            same.push(peer);
            true
        } else {
            false
        };
        if blocks {
            recheck = Some(recheck.map_or(remaining, |r: Duration| r.min(remaining)));
        }
    }
    let verdict = if !higher.is_empty() {
        Verdict::PausedBy(higher)
    } else if !same.is_empty() {
        Verdict::Conflict(same)
    } else {
        Verdict::Active
    };
    Decision {
        verdict,
        dead,
        unreadable,
        recheck_in: recheck,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a time")
    }

    const NOW: &str = "2026-11-22T12:00:00Z";

    fn entry(priority: i64, lastseen: &str) -> Value {
        json!({"priority": priority, "lifetime": 60, "lastseen": lastseen})
    }

    #[test]
    fn kopfs_rules() {
        let mono = Instant::now();
        let status = json!({
            "me": entry(10, "2026-11-22T11:59:50+00:00"),
            "high": entry(20, "2026-11-22T11:59:30+00:00"),
            "low": entry(5, "2026-11-22T11:59:30+00:00"),
            "gone": null,
        });
        let mut l = Liveness::default();
        let d = decide(
            Some(&status),
            "me",
            10,
            SamePriority::PauseAll,
            at(NOW),
            mono,
            &mut l,
        );
        match &d.verdict {
            Verdict::PausedBy(peers) => assert_eq!(peers[0].identity, "high"),
            v => panic!("expected a pause, got {v:?}"),
        }
        assert!(d.dead.is_empty());
        // The blocker expires 30 s from now by its clock, and 60 s after we first saw it by
        // ours: the later one counts.
        assert_eq!(d.recheck_in, Some(Duration::from_secs(60)));

        let status = json!({"me": entry(10, NOW), "twin": entry(10, NOW), "low": entry(5, NOW)});
        let d = decide(
            Some(&status),
            "me",
            10,
            SamePriority::PauseAll,
            at(NOW),
            mono,
            &mut Liveness::default(),
        );
        assert!(
            matches!(&d.verdict, Verdict::Conflict(p) if p[0].identity == "twin"),
            "{:?}",
            d.verdict
        );
        let d = decide(
            Some(&status),
            "me",
            10,
            SamePriority::Ignore,
            at(NOW),
            mono,
            &mut Liveness::default(),
        );
        assert_eq!(d.verdict, Verdict::Active);
        assert_eq!(d.recheck_in, None, "nothing blocks: nothing to wait for");

        let d = decide(
            None,
            "me",
            0,
            SamePriority::PauseAll,
            at(NOW),
            mono,
            &mut Liveness::default(),
        );
        assert_eq!(d.verdict, Verdict::Active);
    }

    #[test]
    fn dead_by_both_rules_before_removal() {
        let first = Instant::now();
        let old = json!({"stale": entry(99, "2026-11-22T10:00:00+00:00")});
        let mut l = Liveness::default();
        // First sight: dead by its clock, but it may be a peer with a slow clock: it pauses
        // us for a lifetime, and is not removed.
        let d = decide(
            Some(&old),
            "me",
            0,
            SamePriority::PauseAll,
            at(NOW),
            first,
            &mut l,
        );
        assert!(matches!(d.verdict, Verdict::PausedBy(_)));
        assert!(d.dead.is_empty());
        // Unchanged a lifetime later: dead by both rules.
        let later = first + Duration::from_secs(60);
        let d = decide(
            Some(&old),
            "me",
            0,
            SamePriority::PauseAll,
            at(NOW),
            later,
            &mut l,
        );
        assert_eq!(d.verdict, Verdict::Active);
        assert_eq!(d.dead, vec!["stale".to_string()]);
        // A peer whose clock is behind but who keeps writing is alive.
        let mut l = Liveness::default();
        let mut mono = first;
        for minute in 0..5 {
            let lastseen = format!("2026-11-22T10:0{minute}:00+00:00");
            let status = json!({"slow": entry(99, &lastseen)});
            let d = decide(
                Some(&status),
                "me",
                0,
                SamePriority::PauseAll,
                at(NOW),
                mono,
                &mut l,
            );
            assert!(matches!(d.verdict, Verdict::PausedBy(_)), "minute {minute}");
            assert!(d.dead.is_empty(), "minute {minute}");
            mono += Duration::from_secs(50);
        }
    }

    #[test]
    fn unreadable_entries_are_reported_not_removed() {
        let status = json!({"odd": {"priority": "high"}, "me": entry(0, NOW)});
        let d = decide(
            Some(&status),
            "me",
            0,
            SamePriority::PauseAll,
            at(NOW),
            Instant::now(),
            &mut Liveness::default(),
        );
        assert_eq!(d.verdict, Verdict::Active);
        assert_eq!(d.unreadable.len(), 1);
        assert!(d.dead.is_empty());
    }
}
