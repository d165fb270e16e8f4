//! The kopf-rs systems' own convergence figures: each process serves `/metrics` on a port of
//! its own, scraped after the churn, and `kopf_convergence_seconds` (from the operator first
//! seeing a change to its handling stored) is read per cause, summed over the replicas.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A free port on 127.0.0.1 for a process's `--metrics`.
pub(super) fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("a free port")?;
    Ok(listener.local_addr()?.port())
}

/// `/metrics` of the process serving on `port`.
async fn scrape(port: u16) -> Result<String> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .with_context(|| format!("the metrics on port {port}"))?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    Ok(text)
}

/// The cumulative buckets of `kopf_convergence_seconds` per cause (bound → count), over
/// every process.
fn buckets(texts: &[String]) -> BTreeMap<String, BTreeMap<u64, f64>> {
    let mut out: BTreeMap<String, BTreeMap<u64, f64>> = BTreeMap::new();
    for line in texts.iter().flat_map(|t| t.lines()) {
        let Some(rest) = line.strip_prefix("kopf_convergence_seconds_bucket{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels.split(',').find_map(|kv| {
                kv.strip_prefix(name)
                    .and_then(|v| v.strip_prefix("=\""))
                    .map(|v| v.trim_end_matches('"').to_string())
            })
        };
        let (Some(cause), Some(le), Ok(count)) =
            (label("cause"), label("le"), value.trim().parse::<f64>())
        else {
            continue;
        };
        // Bounds in microseconds as keys (+Inf last).
        let bound = match le.as_str() {
            "+Inf" => u64::MAX,
            le => le.parse::<f64>().map_or(u64::MAX, |s| (s * 1e6) as u64),
        };
        *out.entry(cause).or_default().entry(bound).or_default() += count;
    }
    out
}

/// The bucket bound (ms) under which `q` of the observations fall; NaN when none, or when
/// it is beyond the last finite bound.
fn quantile(cumulative: &BTreeMap<u64, f64>, q: f64) -> f64 {
    let total = cumulative.get(&u64::MAX).copied().unwrap_or(0.0);
    if total == 0.0 {
        return f64::NAN;
    }
    cumulative
        .iter()
        .find(|(_, count)| **count >= q * total)
        .filter(|(bound, _)| **bound != u64::MAX)
        .map_or(f64::NAN, |(bound, _)| *bound as f64 / 1000.0)
}

/// Per cause: how many changes converged, and the bounds of their p50 and p99 (ms), from
/// the processes serving metrics on `ports`.
pub(super) async fn figures(ports: &[u16]) -> Result<BTreeMap<String, (f64, f64, f64)>> {
    let mut texts = Vec::new();
    for port in ports {
        texts.push(scrape(*port).await?);
    }
    Ok(buckets(&texts)
        .into_iter()
        .map(|(cause, cumulative)| {
            let count = cumulative.get(&u64::MAX).copied().unwrap_or(0.0);
            let figures = (
                count,
                quantile(&cumulative, 0.5),
                quantile(&cumulative, 0.99),
            );
            (cause, figures)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_read_from_the_buckets_of_every_process() {
        let one = "# TYPE kopf_convergence_seconds histogram\n\
            kopf_convergence_seconds_bucket{le=\"0.01\",resource=\"kopfexamples\",cause=\"update\"} 50\n\
            kopf_convergence_seconds_bucket{le=\"0.05\",resource=\"kopfexamples\",cause=\"update\"} 98\n\
            kopf_convergence_seconds_bucket{le=\"0.1\",resource=\"kopfexamples\",cause=\"update\"} 100\n\
            kopf_convergence_seconds_bucket{le=\"+Inf\",resource=\"kopfexamples\",cause=\"update\"} 100\n"
            .to_string();
        let two = one.replace("} 98", "} 100");
        let b = buckets(&[one, two]);
        let update = &b["update"];
        assert_eq!(update[&u64::MAX], 200.0);
        assert_eq!(quantile(update, 0.5), 10.0, "half within 10 ms");
        assert_eq!(quantile(update, 0.99), 50.0, "198 of 200 within 50 ms");
        assert!(quantile(&BTreeMap::new(), 0.5).is_nan());
    }
}
