//! Across the scales: the growth tables, the bytes per idle object, and `scales.svg` (objects/s
//! and peak RSS per N, log-scale x, one line per system). The SVG is written by hand: a
//! few lines and text, no plotting dependency for the xtask.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::model::{Measured, Scale};

/// `×9.8`, or `n/a`.
pub(super) fn times(r: f64) -> String {
    if r.is_finite() {
        format!("×{r:.1}")
    } else {
        "n/a".into()
    }
}

/// Each system's results by N, systems in first-seen order.
fn by_system(scales: &[Scale]) -> Vec<(&'static str, Vec<&Measured>)> {
    let mut out: Vec<(&'static str, Vec<&Measured>)> = Vec::new();
    for m in scales.iter().flat_map(|s| &s.results) {
        match out.iter_mut().find(|(name, _)| *name == m.system) {
            Some((_, v)) => v.push(m),
            None => out.push((m.system, vec![m])),
        }
    }
    for (_, v) in &mut out {
        v.sort_by_key(|m| m.n);
    }
    out
}

/// Per system, burst time, CPU and peak RSS at each N, and × the previous scale.
pub(super) fn growth(md: &mut String, scales: &[Scale]) {
    if scales.len() < 2 {
        return;
    }
    md.push_str("## growth\n\nPer system, each scale against the previous one (×): linear growth is × the N ratio (×10 from 10,000 to 100,000).\n");
    for (system, rows) in by_system(scales) {
        let _ = write!(
            md,
            "\n### {system}\n\n| N | × N | burst s | × | objects/s | CPU s | × | peak RSS MB | × |\n|---|---|---|---|---|---|---|---|---|\n"
        );
        let mut previous: Option<&Measured> = None;
        for m in rows {
            let x = |now: f64, then: Option<f64>| then.map_or(String::new(), |t| times(now / t));
            let _ = writeln!(
                md,
                "| {} | {} | {:.2} | {} | {:.0} | {:.2} | {} | {:.1} | {} |",
                m.n,
                x(m.n as f64, previous.map(|p| p.n as f64)),
                m.burst_seconds,
                x(m.burst_seconds, previous.map(|p| p.burst_seconds)),
                m.n as f64 / m.burst_seconds,
                m.burst_cpu_seconds,
                x(m.burst_cpu_seconds, previous.map(|p| p.burst_cpu_seconds)),
                m.peak_rss_mb,
                x(m.peak_rss_mb, previous.map(|p| p.peak_rss_mb)),
            );
            previous = Some(m);
        }
    }
    md.push('\n');
}

/// Per system: (idle RSS at the largest N − idle RSS at the smallest N) ÷ the N difference,
/// in bytes; systems measured at one scale only are left out.
pub(super) fn bytes_per_idle_object(scales: &[Scale]) -> BTreeMap<&'static str, f64> {
    by_system(scales)
        .into_iter()
        .filter_map(|(system, rows)| {
            let (first, last) = (rows.first()?, rows.last()?);
            (last.n > first.n).then(|| {
                let bytes = (last.idle_rss_mb - first.idle_rss_mb) * 1024.0 * 1024.0;
                (system, bytes / (last.n - first.n) as f64)
            })
        })
        .collect()
}

pub(super) fn bytes_per_idle_object_table(md: &mut String, scales: &[Scale]) {
    let bytes = bytes_per_idle_object(scales);
    if bytes.is_empty() {
        return;
    }
    let (Some(lo), Some(hi)) = (scales.first(), scales.last()) else {
        return;
    };
    let _ = write!(
        md,
        "## bytes per idle object\n\n(idle RSS at N = {} − idle RSS at N = {}) ÷ {}.\n\n| system | bytes per idle object |\n|---|---|\n",
        hi.n,
        lo.n,
        hi.n - lo.n
    );
    for (system, b) in bytes {
        let _ = writeln!(md, "| {system} | {b:.0} |");
    }
    md.push('\n');
}

const COLORS: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// One panel: a y value per system and N.
struct Panel<'a> {
    title: &'a str,
    value: fn(&Measured) -> f64,
}

/// `scales.svg`: two panels side by side (objects/s, peak RSS MB) against N on a log scale.
pub(super) fn svg(scales: &[Scale]) -> String {
    let series = by_system(scales);
    let (w, h) = (960.0, 450.0);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let panels = [
        Panel {
            title: "burst objects/s",
            value: |m| m.n as f64 / m.burst_seconds,
        },
        Panel {
            title: "peak RSS MB",
            value: |m| m.peak_rss_mb,
        },
    ];
    let ns: Vec<f64> = scales.iter().map(|s| s.n as f64).collect();
    for (i, panel) in panels.iter().enumerate() {
        let x0 = 60.0 + i as f64 * 460.0;
        plot(&mut out, panel, &series, &ns, (x0, 40.0, 360.0, 300.0));
    }
    // The legend, under the panels.
    for (k, (system, _)) in series.iter().enumerate() {
        let x = 60.0 + (k % 5) as f64 * 170.0;
        let y = 405.0 + (k / 5) as f64 * 18.0;
        let color = COLORS[k % COLORS.len()];
        let _ = writeln!(
            out,
            "<line x1=\"{x}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{color}\" stroke-width=\"3\"/><text x=\"{}\" y=\"{}\">{system}</text>",
            x + 20.0,
            x + 26.0,
            y + 4.0
        );
    }
    out.push_str("</svg>\n");
    out
}

/// One panel at (x, y, width, height): axes, ticks at each N, a polyline per system.
fn plot(
    out: &mut String,
    panel: &Panel,
    series: &[(&'static str, Vec<&Measured>)],
    ns: &[f64],
    (x0, y0, pw, ph): (f64, f64, f64, f64),
) {
    let lo = ns.iter().copied().fold(f64::INFINITY, f64::min).max(1.0);
    let hi = ns.iter().copied().fold(0.0, f64::max);
    let hi = if hi > lo { hi } else { lo * 10.0 };
    let (llo, lhi) = (lo.log10(), hi.log10());
    let ymax = series
        .iter()
        .flat_map(|(_, v)| v.iter().map(|m| (panel.value)(m)))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1.0);
    let ymax = nice_ceiling(ymax * 1.05);
    let sx = |n: f64| x0 + (n.log10() - llo) / (lhi - llo).max(1e-9) * pw;
    let sy = |v: f64| y0 + ph - v / ymax * ph;
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n<rect x=\"{x0}\" y=\"{y0}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#444\"/>",
        x0 + pw / 2.0,
        y0 - 12.0,
        panel.title
    );
    for n in ns {
        let _ = writeln!(
            out,
            "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#ddd\"/><text x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>",
            sx(*n),
            y0,
            y0 + ph,
            y0 + ph + 16.0,
            n
        );
    }
    for k in 0..=4 {
        let v = ymax * k as f64 / 4.0;
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            x0 - 6.0,
            sy(v) + 4.0,
            if v.fract() == 0.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">N (objects, log scale)</text>",
        x0 + pw / 2.0,
        y0 + ph + 34.0
    );
    for (k, (_, rows)) in series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let points: Vec<String> = rows
            .iter()
            .map(|m| (m.n as f64, (panel.value)(m)))
            .filter(|(_, v)| v.is_finite())
            .map(|(n, v)| format!("{:.1},{:.1}", sx(n), sy(v)))
            .collect();
        let _ = writeln!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>",
            points.join(" ")
        );
        for p in &points {
            let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(
                out,
                "<circle cx=\"{x}\" cy=\"{y}\" r=\"3\" fill=\"{color}\"/>"
            );
        }
    }
}

/// The smallest of 1, 2, 2.5, 5 × 10^k at or above `v` (round axis ticks in quarters).
fn nice_ceiling(v: f64) -> f64 {
    let base = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * base)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * base)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(system: &'static str, n: usize, seconds: f64, idle_mb: f64) -> Measured {
        Measured {
            system,
            n,
            burst_seconds: seconds,
            burst_cpu_seconds: seconds / 2.0,
            peak_rss_mb: idle_mb * 1.5,
            idle_rss_mb: idle_mb,
            ..Default::default()
        }
    }

    fn scale(n: usize, results: Vec<Measured>) -> Scale {
        Scale {
            n,
            churn_rate: 50.0,
            churn_seconds: 60,
            results,
            skipped: Vec::new(),
            server: None,
        }
    }

    fn scales() -> Vec<Scale> {
        vec![
            scale(1_000, vec![measured("kopf-rs", 1_000, 0.5, 20.0)]),
            scale(
                10_000,
                vec![
                    measured("kopf-rs", 10_000, 4.0, 40.0),
                    measured("limit", 10_000, 3.0, 30.0),
                ],
            ),
        ]
    }

    #[test]
    fn growth_shows_the_ratio_to_the_previous_scale() {
        let mut md = String::new();
        growth(&mut md, &scales());
        assert!(md.contains("| 10000 | ×10.0 | 4.00 | ×8.0 |"), "{md}");
        assert!(md.contains("### limit"), "{md}");
    }

    #[test]
    fn bytes_per_idle_object_needs_two_scales() {
        let bytes = bytes_per_idle_object(&scales());
        let expected = 20.0 * 1024.0 * 1024.0 / 9_000.0;
        assert!((bytes["kopf-rs"] - expected).abs() < 1e-6, "{bytes:?}");
        assert!(!bytes.contains_key("limit"), "one scale only: {bytes:?}");
    }

    #[test]
    fn axis_tops_are_round() {
        assert_eq!(nice_ceiling(2887.5), 5000.0);
        assert_eq!(nice_ceiling(95.6), 100.0);
        assert_eq!(nice_ceiling(210.0), 250.0);
    }

    #[test]
    fn the_chart_has_a_line_per_system_in_both_panels() {
        let svg = svg(&scales());
        assert_eq!(svg.matches("<polyline").count(), 4, "{svg}");
        assert!(svg.contains(">kopf-rs</text>") && svg.contains(">limit</text>"));
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }
}
