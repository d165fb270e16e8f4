//! The results as a Markdown table, with ratios between the systems.

use std::collections::BTreeMap;

use super::chart::times;
use super::model::{Measured, Scale};

pub(super) fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "n/a".into()
    }
}

pub(super) fn requests_text(per: &BTreeMap<String, f64>) -> String {
    let writes: Vec<String> = per
        .iter()
        .filter(|(_, v)| **v >= 0.005)
        .map(|(k, v)| format!("{k} {v:.2}"))
        .collect();
    writes.join("<br>")
}

/// The Markdown report: per scale one table per scenario and the ratios, then the growth
/// from scale to scale, the bytes per idle object and the fake API server alone.
pub(super) fn report(scales: &[Scale], machine: &str) -> String {
    let mut md = format!("Machine: {machine}\n\n");
    for scale in scales {
        scale_report(&mut md, scale);
    }
    super::chart::growth(&mut md, scales);
    super::chart::bytes_per_idle_object_table(&mut md, scales);
    server_table(&mut md, scales);
    md
}

/// The "fake API server" section: the server alone at each scale.
fn server_table(md: &mut String, scales: &[Scale]) {
    let rows: Vec<_> = scales.iter().filter_map(|s| s.server.as_ref()).collect();
    if rows.is_empty() {
        return;
    }
    md.push_str("\n## fake API server\n\nThe server alone, no operator: the harness creates the N objects (32 in flight), then a release-built client (`status-writer`) sends N merge PATCHes of `/status`, 64 in flight. Bytes per stored object: (server RSS after the creations − RSS before) ÷ N.\n\n| N | creates/s | status writes/s | server CPU s (writes) | bytes per stored object |\n|---|---|---|---|---|\n");
    for r in rows {
        md.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.0} |\n",
            r.n,
            r.creates_per_second,
            r.status_writes_per_second,
            r.server_cpu_seconds,
            r.bytes_per_object
        ));
    }
}

/// One scale's tables.
fn scale_report(md: &mut String, scale: &Scale) {
    let results = &scale.results;
    md.push_str(&format!(
        "## N = {}\n\nChurn: {} updates/s for {} s.\n\n",
        scale.n, scale.churn_rate, scale.churn_seconds
    ));
    for s in &scale.skipped {
        md.push_str(&format!("- `{}` skipped: {}\n", s.system, s.reason));
    }
    if !scale.skipped.is_empty() {
        md.push('\n');
    }
    md.push_str("### burst\n\n| system | seconds | objects/s | requests per object | CPU s | peak RSS MB (whole run) | server CPU s | server share of CPU |\n|---|---|---|---|---|---|---|---|\n");
    for m in results {
        md.push_str(&format!(
            "| {} | {:.2} | {:.0} | {} | {:.2} | {:.1} | {:.2} | {:.0}% |\n",
            m.system,
            m.burst_seconds,
            m.n as f64 / m.burst_seconds,
            requests_text(&m.burst_requests_per_object),
            m.burst_cpu_seconds,
            m.peak_rss_mb,
            m.server_burst_cpu_seconds,
            m.server_cpu_share * 100.0
        ));
    }
    sharded(md, results);
    md.push_str("\n### churn\n\n| system | updates | p50 ms | p99 ms | max ms | requests per update |\n|---|---|---|---|---|---|\n");
    for m in results {
        let l = |k: &str| m.churn_latency_ms.get(k).copied().unwrap_or(f64::NAN);
        md.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {} |\n",
            m.system,
            m.churn_updates,
            l("p50"),
            l("p99"),
            l("max"),
            requests_text(&m.churn_requests_per_update)
        ));
    }
    during(md, results);
    convergence(md, results);
    md.push_str(
        "\n### idle\n\n| system | RSS MB (all processes) | requests in 5 s |\n|---|---|---|\n",
    );
    for m in results {
        md.push_str(&format!(
            "| {} | {:.1} | {} |\n",
            m.system, m.idle_rss_mb, m.idle_requests
        ));
    }
    let find = |name: &str| results.iter().find(|m| m.system == name);
    if let Some(ours) = find("kopf-rs") {
        md.push_str("\n### kopf-rs against the others\n\n| vs | burst throughput (×) | peak RSS (×) | churn p99 (×) |\n|---|---|---|---|\n");
        for other in results.iter().filter(|m| m.system != "kopf-rs") {
            let p99 = |m: &Measured| m.churn_latency_ms.get("p99").copied().unwrap_or(f64::NAN);
            md.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                other.system,
                ratio(other.burst_seconds, ours.burst_seconds),
                ratio(ours.peak_rss_mb, other.peak_rss_mb),
                ratio(p99(ours), p99(other)),
            ));
        }
        md.push_str("\nThroughput ×: kopf-rs objects/s divided by theirs (above 1: kopf-rs is faster). RSS × and p99 ×: kopf-rs divided by theirs (below 1: kopf-rs uses less, waits less).\n");
    }
    during_ratios(md, results);
    md.push('\n');
}

fn p99(latency: &BTreeMap<&'static str, f64>) -> f64 {
    latency.get("p99").copied().unwrap_or(f64::NAN)
}

/// kopf-rs' own convergence histogram (`kopf_convergence_seconds` from `/metrics`).
fn convergence(md: &mut String, results: &[Measured]) {
    if results.iter().all(|m| m.convergence.is_empty()) {
        return;
    }
    md.push_str("\n### convergence (kopf-rs' `/metrics`)\n\nFrom the operator first seeing a change to its handling stored (`kopf_convergence_seconds`), after the burst and the churn; p50 and p99 are the bounds of the histogram's buckets they fall in.\n\n| system | cause | changes | p50 ms ≤ | p99 ms ≤ |\n|---|---|---|---|---|\n");
    for m in results {
        for (cause, (count, p50, p99)) in &m.convergence {
            md.push_str(&format!(
                "| {} | {cause} | {count} | {p50} | {p99} |\n",
                m.system
            ));
        }
    }
}

/// The "churn during burst" table.
fn during(md: &mut String, results: &[Measured]) {
    md.push_str("\n### churn during burst\n\nA fresh server with the N objects; the operator starts and at once the driver patches random objects among those already handled, at the churn rate, until the burst is done.\n\n| system | burst s (under churn) | updates | p50 ms | p99 ms | max ms | requests per object (burst and updates) |\n|---|---|---|---|---|---|---|\n");
    for m in results {
        let Some(d) = &m.during else { continue };
        let l = |k: &str| d.latency_ms.get(k).copied().unwrap_or(f64::NAN);
        md.push_str(&format!(
            "| {} | {:.2} | {} | {:.1} | {:.1} | {:.1} | {} |\n",
            m.system,
            d.burst_seconds,
            d.updates,
            l("p50"),
            l("p99"),
            l("max"),
            requests_text(&d.requests_per_object)
        ));
    }
}

/// p99 of the churn during the burst ÷ p99 of the plain churn, per system (target for
/// kopf-rs: at most 2×).
fn during_ratios(md: &mut String, results: &[Measured]) {
    md.push_str("\n### churn p99 during the burst against plain churn\n\n| system | p99 during burst ÷ p99 plain churn | target (kopf-rs: ≤ 2×) |\n|---|---|---|\n");
    for m in results {
        let Some(d) = &m.during else { continue };
        let r = p99(&d.latency_ms) / p99(&m.churn_latency_ms);
        let verdict = match (m.system, r.is_finite()) {
            (_, false) => "n/a",
            ("kopf-rs", true) if r <= 2.0 => "met",
            ("kopf-rs", true) => "missed",
            _ => "",
        };
        md.push_str(&format!("| {} | {} | {verdict} |\n", m.system, times(r)));
    }
}

/// The sharded systems (several processes): per replica, the start-up sharing, and the
/// ratios of the totals to the one-process `kopf-rs`.
fn sharded(md: &mut String, results: &[Measured]) {
    let many: Vec<&Measured> = results.iter().filter(|m| m.replicas > 1).collect();
    if many.is_empty() {
        return;
    }
    let one = results.iter().find(|m| m.system == "kopf-rs");
    let list = |v: &[f64], digits: usize| {
        v.iter()
            .map(|x| format!("{x:.digits$}"))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    md.push_str("\n### sharded replicas (burst)\n\nCPU and RSS above are summed over the replicas; here per replica, and the totals against one `kopf-rs` process (×). Sharing: from the start until every replica served exactly one range; the objects/s after it count only the objects left then.\n\n| system | replicas | objects/s (×) | CPU s total (×) | peak RSS MB total (×) | CPU s per replica | peak RSS MB per replica | sharing s | done by then | objects/s after sharing |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for m in many {
        let x = |ours: f64, theirs: Option<f64>| theirs.map_or("n/a".into(), |t| ratio(ours, t));
        let sharing = m.sharing_seconds.unwrap_or(f64::NAN);
        let after = (m.n - m.done_at_sharing.min(m.n)) as f64 / (m.burst_seconds - sharing);
        md.push_str(&format!(
            "| {} | {} | {:.0} ({}) | {:.2} ({}) | {:.1} ({}) | {} | {} | {:.2} | {} | {} |\n",
            m.system,
            m.replicas,
            m.n as f64 / m.burst_seconds,
            x(1.0 / m.burst_seconds, one.map(|o| 1.0 / o.burst_seconds)),
            m.burst_cpu_seconds,
            x(m.burst_cpu_seconds, one.map(|o| o.burst_cpu_seconds)),
            m.peak_rss_mb,
            x(m.peak_rss_mb, one.map(|o| o.peak_rss_mb)),
            list(&m.burst_cpu_per_replica, 2),
            list(&m.peak_rss_per_replica_mb, 1),
            sharing,
            m.done_at_sharing,
            if after.is_finite() && after > 0.0 {
                format!("{after:.0}")
            } else {
                "n/a".into()
            },
        ));
    }
}
