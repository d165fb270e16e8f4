//! Leadership with several replicas (`--replicas N`): who led when, reconstructed from each
//! process's output (`This replica leads now` to its `This replica lost the lead`, or to its
//! kill, its exit or its final stop), and the checks and figures on it: one leader at a
//! time, handlers only on a leader, the takeovers after a kill of the leader.

use std::collections::HashMap;

use super::evidence::{Evidence, Micros, RunOutput};
use super::table::Row;

/// The line of a replica that takes the lead.
pub const LEADS: &str = "This replica leads now";
/// The line of a replica that loses it.
pub const LOST: &str = "This replica lost the lead";
/// The log time has milliseconds: a handler's entry may look up to this much outside the
/// interval of its process.
pub const ROUNDING: Micros = 1_000;

/// How a leadership interval ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// `This replica lost the lead`.
    Lost,
    /// The process was SIGKILLed (the interval ends when it was gone).
    Killed,
    /// The process exited by itself, or was stopped at the end (or never ended: the run was
    /// cut short).
    Exited,
}

/// One replica's leadership, from its `leads now` line to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    /// The process (`chaos#N`).
    pub name: String,
    /// Its pid.
    pub pid: u32,
    /// Its `leads now` line.
    pub from: Micros,
    /// Its end.
    pub to: Micros,
    /// How it ended.
    pub end: End,
}

/// The time of a log line of the operator (`[2026-01-01 00:00:01,234] ...`, UTC).
pub fn line_time(line: &str) -> Option<Micros> {
    let stamp = line.strip_prefix('[')?.get(..23)?;
    let iso = format!("{}T{}Z", &stamp[..10], stamp[11..].replace(',', "."));
    let ts: jiff::Timestamp = iso.parse().ok()?;
    Some(ts.as_microsecond())
}

/// When each process ended: its kill, its exit by itself or its final stop.
fn ends(ev: &Evidence) -> HashMap<u32, (Micros, End)> {
    let t = &ev.timeline;
    let mut map = HashMap::new();
    for (at, pid, _) in &t.exits {
        map.insert(*pid, (*at, End::Exited));
    }
    for (at, pid) in &t.stops {
        map.insert(*pid, (*at, End::Exited));
    }
    for k in &t.kills {
        map.insert(k.pid, (k.micros, End::Killed));
    }
    map
}

/// The intervals of one process's output.
fn of_run(run: &RunOutput, end: Option<(Micros, End)>, out: &mut Vec<Interval>) {
    let mut open: Option<Micros> = None;
    let mut push = |from: Micros, to: Micros, end: End| {
        out.push(Interval {
            name: run.name.clone(),
            pid: run.pid,
            from,
            to,
            end,
        });
    };
    for line in &run.lines {
        let (leads, lost) = (line.contains(LEADS), line.contains(LOST));
        if !leads && !lost {
            continue;
        }
        let Some(at) = line_time(line) else {
            continue;
        };
        match (leads, open) {
            (true, None) => open = Some(at),
            (true, Some(_)) => {} // still leading
            (false, Some(from)) => {
                push(from, at, End::Lost);
                open = None;
            }
            (false, None) => {}
        }
    }
    if let Some(from) = open {
        let (to, end) = end.unwrap_or((Micros::MAX, End::Exited));
        push(from, to, end);
    }
}

/// Every leadership interval of the run, by start.
pub fn intervals(ev: &Evidence) -> Vec<Interval> {
    let ends = ends(ev);
    let mut out = Vec::new();
    for run in &ev.outputs {
        of_run(run, ends.get(&run.pid).copied(), &mut out);
    }
    out.sort_by_key(|i| i.from);
    out
}

/// Whether the process `pid` was still running at `at` (started, and not yet killed,
/// exited or stopped).
pub fn alive(ev: &Evidence, pid: u32, at: Micros) -> bool {
    let started = ev
        .timeline
        .starts
        .iter()
        .any(|(t, p)| *p == pid && *t <= at);
    started && ends(ev).get(&pid).is_none_or(|(end, _)| *end > at)
}

/// `chaos#3 (pid 7) from 1.000 s to 4.000 s (killed)`.
fn describe_leadership(ev: &Evidence, i: &Interval) -> String {
    let t = &ev.timeline;
    let to = match i.to {
        Micros::MAX => "the end".to_string(),
        to => t.at(to),
    };
    let how = match i.end {
        End::Lost => "lost the lead",
        End::Killed => "killed",
        End::Exited => "exited",
    };
    format!(
        "{} (pid {}) led from {} to {to} ({how})",
        i.name,
        i.pid,
        t.at(i.from)
    )
}

/// At no time did two replicas lead at once. A killed leader's interval ends at its kill
/// (the documented overlap is of a handler call already running when the lead is lost, not
/// of two replicas leading), so no two intervals may overlap at all.
pub fn one_leader(ev: &Evidence) -> Row {
    let all = intervals(ev);
    let mut bad = Vec::new();
    for (i, a) in all.iter().enumerate() {
        for b in all[i + 1..].iter().filter(|b| b.pid != a.pid) {
            if b.from < a.to {
                bad.push(format!(
                    "{}: {} while {}",
                    b.name,
                    describe_leadership(ev, b),
                    describe_leadership(ev, a)
                ));
            }
        }
    }
    let lost = all.iter().filter(|i| i.end == End::Lost).count();
    Row::new(
        "one leader at a time",
        "0 overlaps",
        format!(
            "{} overlaps ({} leaderships, {lost} lost the lead)",
            bad.len(),
            all.len()
        ),
        bad.is_empty(),
    )
    .with(bad)
}

/// Every handler call began while its process led (standbys run no handler).
pub fn handlers_on_leaders(ev: &Evidence) -> Row {
    let all = intervals(ev);
    let t = &ev.timeline;
    let bad: Vec<String> = ev
        .log
        .calls
        .iter()
        .filter(|c| {
            !all.iter().any(|i| {
                i.pid == c.pid && i.from - ROUNDING <= c.micros && c.micros <= i.to + ROUNDING
            })
        })
        .map(|c| {
            format!(
                "{}: {}_fn ({}) by pid {} at {}, which did not lead then",
                c.name,
                c.cause,
                c.value.map_or("-".into(), |v| v.to_string()),
                c.pid,
                t.at(c.micros)
            )
        })
        .collect();
    Row::new(
        "handlers run by the leader only",
        "0 by a standby",
        format!("{} by a standby (of {})", bad.len(), ev.log.calls.len()),
        bad.is_empty(),
    )
    .with(bad)
}

/// The takeovers after a kill of the leader: (the kill's number, seconds from the kill to
/// the next `leads now` of any replica); None: no replica led after it.
pub fn takeovers(ev: &Evidence) -> Vec<(usize, Option<f64>)> {
    let all = intervals(ev);
    ev.timeline
        .kills
        .iter()
        .filter(|k| {
            all.iter()
                .any(|i| i.pid == k.pid && i.end == End::Killed && i.to == k.micros)
        })
        .map(|k| {
            let next = all.iter().map(|i| i.from).filter(|f| *f > k.micros).min();
            (k.n, next.map(|f| (f - k.micros) as f64 / 1e6))
        })
        .collect()
}

/// `3 after a kill of the leader (of 5 kills of the leader); 2.31 / 2.45 / 2.80 s (min /
/// median / max)`, and the leadership changes.
pub fn takeover_summary(ev: &Evidence) -> String {
    let all = intervals(ev);
    let list = takeovers(ev);
    let mut times: Vec<f64> = list.iter().filter_map(|(_, s)| *s).collect();
    times.sort_by(f64::total_cmp);
    let figures = match times.as_slice() {
        [] => "no times".to_string(),
        t => format!(
            "{:.2} / {:.2} / {:.2} s (min / median / max)",
            t[0],
            t[t.len() / 2],
            t[t.len() - 1]
        ),
    };
    format!(
        "{} after {} kills of the leader: {figures}; {} leaderships, {} lost the lead",
        times.len(),
        list.len(),
        all.len(),
        all.iter().filter(|i| i.end == End::Lost).count()
    )
}

#[cfg(test)]
mod tests {
    use super::super::evidence::{KillRecord, Timeline};
    use super::*;

    const T0: Micros = 1_767_225_600_000_000; // 2026-01-01T00:00:00Z

    fn line(secs: u32, millis: u32, text: &str) -> String {
        format!("[2026-01-01 00:00:{secs:02},{millis:03}] kopf_peering.elect [INFO    ] {text}")
    }

    fn run(name: &str, pid: u32, lines: Vec<String>) -> RunOutput {
        RunOutput {
            name: name.into(),
            pid,
            lines,
        }
    }

    fn evidence(outputs: Vec<RunOutput>, kills: Vec<KillRecord>) -> Evidence {
        Evidence {
            timeline: Timeline {
                t0: T0,
                kills,
                starts: vec![(T0, 1), (T0, 2), (T0, 3)],
                stops: vec![(T0 + 50_000_000, 2), (T0 + 50_000_000, 3)],
                ..Default::default()
            },
            outputs,
            replicas: 3,
            ..Default::default()
        }
    }

    #[test]
    fn log_times_are_unix_micros() {
        assert_eq!(line_time(&line(1, 234, "x")), Some(T0 + 1_234_000));
        assert_eq!(line_time("no time"), None);
    }

    #[test]
    fn a_takeover_after_a_kill_is_one_leader_at_a_time() {
        let ev = evidence(
            vec![
                run("chaos#1", 1, vec![line(1, 0, LEADS), line(2, 0, "work")]),
                run("chaos#2", 2, vec![line(7, 500, LEADS)]),
                run("chaos#3", 3, vec![]),
            ],
            vec![KillRecord {
                n: 1,
                micros: T0 + 5_000_000,
                pid: 1,
            }],
        );
        let all = intervals(&ev);
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].to, all[0].end), (T0 + 5_000_000, End::Killed));
        assert_eq!(takeovers(&ev), vec![(1, Some(2.5))]);
        assert!(takeover_summary(&ev).starts_with("1 after 1 kills of the leader: 2.50 / 2.50"));
        assert!(alive(&ev, 2, T0 + 6_000_000));
        assert!(!alive(&ev, 1, T0 + 6_000_000));
    }
}
