//! Parsers of the command line's values: each says which value it wanted and what it got.

use std::time::Duration;

use super::Liveness;

pub(super) fn parse_liveness(s: &str) -> Result<Liveness, String> {
    let rest = s.strip_prefix("http://").ok_or_else(|| {
        format!("expected http://HOST:PORT/PATH such as http://0.0.0.0:8080/healthz, got {s:?}")
    })?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let host = if host.starts_with("localhost:") {
        host.replacen("localhost", "127.0.0.1", 1)
    } else {
        host.to_string()
    };
    let addr = host.parse().map_err(|e| {
        format!("{host:?} is not an IP:PORT address ({e}); e.g. http://0.0.0.0:8080/healthz")
    })?;
    Ok(Liveness {
        addr,
        path: path.to_string(),
    })
}

/// The longest duration an option accepts, in seconds: a year.
pub(super) const MAX_SECONDS: u64 = 365 * 24 * 3600;
/// The largest `--worker-limit`.
pub(super) const MAX_WORKERS: u64 = 1_000_000;

/// A duration in seconds (`20`, `2.5`): from 0 to a year.
pub(super) fn parse_seconds(s: &str) -> Result<Duration, String> {
    let out_of_range = || {
        format!(
            "expected a number of seconds from 0 to {MAX_SECONDS} (a year), such as 20 or 2.5, got {s:?}"
        )
    };
    let secs: f64 = s.parse().map_err(|_| out_of_range())?;
    // (NaN fails both comparisons.)
    if !(0.0..=MAX_SECONDS as f64).contains(&secs) {
        return Err(out_of_range());
    }
    Duration::try_from_secs_f64(secs).map_err(|_| out_of_range())
}

/// Requests per second: a finite number ≥ 0.
pub(super) fn parse_qps(s: &str) -> Result<f64, String> {
    let expected = || {
        format!(
            "expected a number of requests per second ≥ 0 such as 100 or 0.5 (0 turns the limit off), got {s:?}"
        )
    };
    let qps: f64 = s.parse().map_err(|_| expected())?;
    if !qps.is_finite() || qps < 0.0 {
        return Err(expected());
    }
    // -0 is 0.
    Ok(if qps == 0.0 { 0.0 } else { qps })
}

/// A whole number from `min` to `max`; `what` follows the range in the message.
pub(super) fn parse_whole(s: &str, min: u64, max: u64, what: &str) -> Result<u64, String> {
    s.parse::<u64>()
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| format!("expected a whole number from {min} to {max}{what}, got {s:?}"))
}

pub(super) fn parse_worker_limit(s: &str) -> Result<usize, String> {
    let n = parse_whole(s, 0, MAX_WORKERS, " (0: no limit)")?;
    usize::try_from(n).map_err(|e| e.to_string())
}

pub(super) fn parse_label_selector(s: &str) -> Result<String, String> {
    kopf_watch::check_label_selector(s).map(|()| s.to_string())
}

pub(super) fn parse_field_selector(s: &str) -> Result<String, String> {
    kopf_watch::check_field_selector(s).map(|()| s.to_string())
}

pub(super) fn parse_burst(s: &str) -> Result<u32, String> {
    let n = parse_whole(s, 1, u32::MAX.into(), "")?;
    u32::try_from(n).map_err(|e| e.to_string())
}

pub(super) fn parse_port(s: &str) -> Result<u16, String> {
    let n = parse_whole(s, 0, u16::MAX.into(), " (0 picks a free port)")?;
    u16::try_from(n).map_err(|e| e.to_string())
}

pub(super) fn parse_history_limit(s: &str) -> Result<usize, String> {
    let n = parse_whole(s, 1, 1_000_000_000, "")?;
    usize::try_from(n).map_err(|e| e.to_string())
}

pub(super) fn parse_bookmark_interval(s: &str) -> Result<u64, String> {
    parse_whole(s, 1, MAX_SECONDS, " (seconds, up to a year)")
}

pub(super) fn parse_delay_ms(s: &str) -> Result<u64, String> {
    parse_whole(s, 0, MAX_SECONDS * 1000, " (milliseconds, up to a year)")
}
