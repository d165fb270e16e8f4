//! One peer's entry in a peering object's status, in Kopf's wire format:
//! `status.<identity> = {"priority": 0, "lifetime": 60, "lastseen": "<ISO 8601>"}`.
//!
//! Written exactly as Kopf 1.x writes it (JSON integers; `lastseen` as Python's
//! `datetime.isoformat()` of a UTC time: microseconds when there are any, `+00:00`). Read as
//! tolerantly as Kopf reads it: a missing `lifetime` is 60 s, a missing `lastseen` is now,
//! unknown keys are ignored; what cannot be read at all is an error for the caller to log.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::error::PeerError;

/// Kopf's lifetime of an entry that does not say.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(60);

/// A peer, as its entry says.
#[derive(Debug, Clone, PartialEq)]
pub struct Peer {
    /// Its identity: the key of its entry.
    pub identity: String,
    /// Its priority: operators pause in favour of a live peer with a higher one.
    pub priority: i64,
    /// How long the entry is valid after `lastseen` (whole seconds on the wire).
    pub lifetime: Duration,
    /// When the peer last said it is alive.
    pub lastseen: Timestamp,
}

impl Peer {
    /// The entry `value` of `identity`, read as Kopf reads it (`now` for a missing
    /// `lastseen`).
    ///
    /// ```
    /// use kopf_peering::Peer;
    /// use serde_json::json;
    ///
    /// let now = "2026-11-22T05:05:00Z".parse().unwrap();
    /// let entry = json!({"priority": 100, "lifetime": 60, "lastseen": "2026-11-22T05:04:57.126136+00:00"});
    /// let peer = Peer::parse("ops@host", &entry, now).unwrap();
    /// assert_eq!(peer.priority, 100);
    /// assert!(peer.is_alive(now));
    /// assert_eq!(peer.to_wire(), entry);
    /// ```
    pub fn parse(identity: &str, value: &Value, now: Timestamp) -> Result<Peer, PeerError> {
        let bad = |why: String| PeerError::Entry {
            identity: identity.to_string(),
            why,
        };
        let Some(entry) = value.as_object() else {
            return Err(bad(format!("the entry is not an object: {value}")));
        };
        let priority = match entry.get("priority") {
            None | Some(Value::Null) => 0,
            Some(v) => {
                integer(v).ok_or_else(|| bad(format!("`priority` is not an integer: {v}")))?
            }
        };
        let lifetime = match entry.get("lifetime") {
            None | Some(Value::Null) => DEFAULT_LIFETIME,
            Some(v) => {
                let secs =
                    integer(v).ok_or_else(|| bad(format!("`lifetime` is not an integer: {v}")))?;
                Duration::from_secs(u64::try_from(secs).unwrap_or(0))
            }
        };
        let lastseen = match entry.get("lastseen") {
            None | Some(Value::Null) => now,
            Some(Value::String(s)) => parse_time(s)
                .ok_or_else(|| bad(format!("`lastseen` is not an ISO 8601 time: {s:?}")))?,
            Some(v) => return Err(bad(format!("`lastseen` is not a string: {v}"))),
        };
        Ok(Peer {
            identity: identity.to_string(),
            priority,
            lifetime,
            lastseen,
        })
    }

    /// When the entry stops being valid: `lastseen + lifetime`.
    pub fn deadline(&self) -> Timestamp {
        let lifetime =
            jiff::SignedDuration::try_from(self.lifetime).unwrap_or(jiff::SignedDuration::MAX);
        self.lastseen
            .saturating_add(lifetime)
            .unwrap_or(Timestamp::MAX)
    }

    /// Kopf's rule: alive while `now < lastseen + lifetime`.
    pub fn is_alive(&self, now: Timestamp) -> bool {
        self.deadline() > now
    }

    /// The entry as Kopf writes it.
    pub fn to_wire(&self) -> Value {
        json!({
            "priority": self.priority,
            "lifetime": self.lifetime.as_secs(),
            "lastseen": isoformat(self.lastseen),
        })
    }

    /// The entry as Kopf writes it, with its keys in Kopf's order (`priority`, `lifetime`,
    /// `lastseen`) when serialised.
    pub fn wire_entry(&self) -> WireEntry {
        WireEntry {
            priority: self.priority,
            lifetime: self.lifetime.as_secs(),
            lastseen: isoformat(self.lastseen),
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (priority {}, lastseen {}, lifetime {} s)",
            self.identity,
            self.priority,
            isoformat(self.lastseen),
            self.lifetime.as_secs()
        )
    }
}

/// A peer's entry as it is sent: serialised with Kopf's key order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WireEntry {
    /// The priority.
    pub priority: i64,
    /// The lifetime in whole seconds.
    pub lifetime: u64,
    /// [`isoformat`] of the last keep-alive.
    pub lastseen: String,
}

/// The merge patch that writes one entry (`None`: removes it), serialised as Kopf's:
/// `{"status":{"<identity>":{"priority":…,"lifetime":…,"lastseen":"…"}}}`.
pub fn entry_patch(identity: &str, entry: Option<WireEntry>) -> EntryPatch {
    EntryPatch {
        status: [(identity.to_string(), entry)].into(),
    }
}

/// See [`entry_patch`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EntryPatch {
    /// The entry by its identity.
    pub status: std::collections::BTreeMap<String, Option<WireEntry>>,
}

/// An integer as Kopf would take it: a JSON integer, or a float with no fraction, or a
/// string of digits (Python's `int()`).
fn integer(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A time in ISO 8601 as peers write it: with an offset (`+00:00`, `Z`), or without one
/// (then UTC, as Kopf's parser takes it).
pub fn parse_time(text: &str) -> Option<Timestamp> {
    if let Ok(t) = text.parse::<Timestamp>() {
        return Some(t);
    }
    let civil: jiff::civil::DateTime = text.parse().ok()?;
    civil
        .to_zoned(jiff::tz::TimeZone::UTC)
        .ok()
        .map(|z| z.timestamp())
}

/// Python's `datetime.isoformat()` of a UTC time: `2026-11-22T05:04:57.126136+00:00`, or
/// `2026-11-22T05:04:57+00:00` when the microseconds are zero.
pub fn isoformat(t: Timestamp) -> String {
    // Python keeps microseconds only.
    let micros = t.subsec_microsecond();
    if micros == 0 {
        t.strftime("%Y-%m-%dT%H:%M:%S+00:00").to_string()
    } else {
        format!("{}.{micros:06}+00:00", t.strftime("%Y-%m-%dT%H:%M:%S"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a time")
    }

    #[test]
    fn written_as_python_writes_it() {
        assert_eq!(
            isoformat(at("2026-11-22T05:04:57.126136789Z")),
            "2026-11-22T05:04:57.126136+00:00"
        );
        assert_eq!(
            isoformat(at("2026-11-22T05:04:57Z")),
            "2026-11-22T05:04:57+00:00"
        );
        assert_eq!(
            isoformat(at("2026-11-22T05:04:57.000100Z")),
            "2026-11-22T05:04:57.000100+00:00"
        );
    }

    #[test]
    fn read_as_kopf_reads_it() {
        let now = at("2026-11-22T05:05:00Z");
        let p = Peer::parse("x", &json!({}), now).expect("empty entry");
        assert_eq!(
            (p.priority, p.lifetime, p.lastseen),
            (0, DEFAULT_LIFETIME, now)
        );
        let p = Peer::parse(
            "x",
            &json!({"priority": "7", "lifetime": 30.0, "lastseen": "2026-11-22T05:04:00", "extra": 1}),
            now,
        )
        .expect("loose entry");
        assert_eq!(p.priority, 7);
        assert_eq!(p.lifetime, Duration::from_secs(30));
        assert_eq!(p.lastseen, at("2026-11-22T05:04:00Z"));
        assert!(!p.is_alive(now), "05:04:00 + 30 s is before 05:05:00");
        for bad in [
            json!("x"),
            json!({"priority": "high"}),
            json!({"lastseen": "yesterday"}),
            json!({"lastseen": 5}),
        ] {
            let err = Peer::parse("odd@peer", &bad, now).expect_err("not an entry");
            assert!(err.to_string().contains("odd@peer"), "{err}");
        }
    }

    #[test]
    fn alive_until_the_deadline() {
        let p = Peer::parse(
            "x",
            &json!({"lifetime": 60, "lastseen": "2026-11-22T05:04:00+00:00"}),
            at("2026-11-22T05:04:00Z"),
        )
        .expect("entry");
        assert!(p.is_alive(at("2026-11-22T05:04:59.999Z")));
        assert!(
            !p.is_alive(at("2026-11-22T05:05:00Z")),
            "deadline <= now is dead"
        );
    }
}
