//! The results as a Markdown table, with ratios between the systems.

use std::collections::BTreeMap;

use super::model::{Measured, Plan};

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

/// The Markdown report: one table per scenario, then the ratios.
pub(super) fn report(results: &[Measured], machine: &str, plan: &Plan) -> String {
    let mut md = format!(
        "Machine: {machine}\n\nN = {} objects; churn: {} updates/s for {} s.\n\n",
        plan.n, plan.churn_rate, plan.churn_seconds
    );
    md.push_str("### burst\n\n| system | seconds | objects/s | requests per object | CPU s | peak RSS MB (whole run) |\n|---|---|---|---|---|---|\n");
    for m in results {
        md.push_str(&format!(
            "| {} | {:.2} | {:.0} | {} | {:.2} | {:.1} |\n",
            m.system,
            m.burst_seconds,
            m.n as f64 / m.burst_seconds,
            requests_text(&m.burst_requests_per_object),
            m.burst_cpu_seconds,
            m.peak_rss_mb
        ));
    }
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
    md.push_str("\n### idle\n\n| system | RSS MB | requests in 5 s |\n|---|---|---|\n");
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
    md
}
