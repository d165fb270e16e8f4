//! The verdict as people read it: the summary table, and the run's files when kept.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use kopf_testing::FakeApiServer;

use super::checks;
use super::evidence::{Evidence, Micros, Timeline};
use super::leaders;
use super::plan::Plan;

/// The figures of the run, after the table.
pub(super) fn summary(
    plan: &Plan,
    ev: &Evidence,
    stop_status: &str,
    converged: bool,
    wall: Duration,
) -> String {
    let t = &ev.timeline;
    let mut out = String::new();
    let created = ev.objects.iter().filter(|o| o.uid.is_some()).count();
    let mut calls: BTreeMap<String, usize> = BTreeMap::new();
    for c in &ev.log.calls {
        *calls.entry(format!("{}_fn", c.cause)).or_default() += 1;
    }
    let dups = checks::find_duplicates(ev);
    let unexplained = dups.iter().filter(|d| d.explanation.is_none()).count();
    let failed_requests = ev.requests.iter().filter(|r| r.failed()).count();
    let kinds: Vec<String> = t
        .fault_kinds
        .iter()
        .map(|(k, n)| format!("{k} ×{n}"))
        .collect();
    let line = |out: &mut String, k: &str, v: String| {
        let _ = writeln!(out, "{k:<22} {v}");
    };
    line(&mut out, "seed", plan.seed.to_string());
    line(
        &mut out,
        "objects",
        format!("{created} created of {}", plan.objects.len()),
    );
    line(
        &mut out,
        "updates",
        format!("{} of {} planned", t.updated.len(), plan.updates()),
    );
    line(
        &mut out,
        "deletes",
        format!("{} of {} planned", t.deleted.len(), plan.deletes()),
    );
    line(
        &mut out,
        "failed operations",
        t.failed_ops.len().to_string(),
    );
    line(
        &mut out,
        "kills",
        format!("{} (processes: {})", t.kills.len(), t.starts.len()),
    );
    if ev.replicas > 1 {
        line(&mut out, "replicas", ev.replicas.to_string());
        line(&mut out, "takeovers", leaders::takeover_summary(ev));
    }
    line(
        &mut out,
        "faults injected",
        format!(
            "{}{}",
            t.fault_kinds.values().sum::<usize>(),
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            }
        ),
    );
    line(
        &mut out,
        "handler calls",
        format!("{calls:?}").replace('"', ""),
    );
    line(
        &mut out,
        "duplicates",
        format!(
            "{} ({} explained, {unexplained} unexplained)",
            dups.len(),
            dups.len() - unexplained
        ),
    );
    line(
        &mut out,
        "operator requests",
        format!(
            "{} ({failed_requests} failed or unanswered)",
            ev.requests.len()
        ),
    );
    if let Some(cut) = &ev.log.truncated {
        line(&mut out, "cut last log line", format!("{cut:?} (left out)"));
    }
    line(
        &mut out,
        "converged",
        if converged {
            "yes".into()
        } else {
            "no (deadline)".into()
        },
    );
    line(&mut out, "final stop (SIGTERM)", stop_status.to_string());
    line(
        &mut out,
        "wall time",
        format!("{:.1} s", wall.as_secs_f64()),
    );
    out
}

/// Writes the run's files next to the handler log and the kubeconfig.
pub(super) fn keep_files(
    dir: &Path,
    server: &FakeApiServer,
    timeline: &Timeline,
    ev: &Evidence,
) -> Result<()> {
    let write = |name: &str, text: String| {
        std::fs::write(dir.join(name), text).with_context(|| format!("writing {name}"))
    };
    let mut requests = String::new();
    for r in server.requests() {
        requests += &serde_json::to_string(&r)?;
        requests.push('\n');
    }
    write("requests.jsonl", requests)?;
    write(
        "objects.json",
        serde_json::to_string_pretty(&ev.final_objects)?,
    )?;
    for run in &ev.outputs {
        write(
            &format!("output-{}.txt", run.name.replace('#', "-")),
            run.lines.join("\n") + "\n",
        )?;
    }
    let mut text = format!("t0 {} (unix micros)\n", timeline.t0);
    let mut events: Vec<(Micros, String)> = Vec::new();
    events.extend(
        timeline
            .starts
            .iter()
            .map(|(t, pid)| (*t, format!("operator started, pid {pid}"))),
    );
    events.extend(
        timeline
            .kills
            .iter()
            .map(|k| (k.micros, format!("kill #{} of pid {}", k.n, k.pid))),
    );
    events.extend(
        timeline
            .stops
            .iter()
            .map(|(t, pid)| (*t, format!("pid {pid} stopped (SIGTERM)"))),
    );
    events.extend(
        timeline
            .exits
            .iter()
            .map(|(t, pid, s)| (*t, format!("pid {pid} exited by itself: {s}"))),
    );
    events.extend(
        timeline
            .faults
            .iter()
            .map(|(t, f)| (*t, format!("fault: {f}"))),
    );
    events.extend(
        timeline
            .failed_ops
            .iter()
            .map(|(t, f)| (*t, format!("failed operation: {f}"))),
    );
    for l in leaders::intervals(ev) {
        events.push((l.from, format!("{} (pid {}) leads now", l.name, l.pid)));
        if l.end == leaders::End::Lost {
            events.push((l.to, format!("{} (pid {}) lost the lead", l.name, l.pid)));
        }
    }
    events.sort_by_key(|(t, _)| *t);
    for (t, e) in events {
        let _ = writeln!(text, "{:>9} {}  {e}", timeline.at(t), t);
    }
    write("timeline.txt", text)
}
