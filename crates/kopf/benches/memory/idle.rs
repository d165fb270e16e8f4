//! Idle objects with a large payload and a timer each: what the operator keeps per object,
//! with its timer declaring what it reads (`Options::reads("data.key")`: the engine keeps
//! that, the metadata and the status) and without (the whole object is kept), side by side.
//!
//! Each variant runs in a process of its own (this binary, `idle-one [whole]`), whose fake
//! API server runs in a child process (`serve`), so that the variant's resident memory is
//! the operator's and the driver's: the driver's part is measured before the operator starts
//! and taken away. The timer runs every hour: after its first call, nothing happens.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kopf::handler::{Body, HandlerSpec, IntoHandler};
use kopf::testing::FakeApiServer;
use kopf::{Operator, Options, TimerOptions};
use kube::api::{Api, PostParams};
use serde_json::json;

use super::{LIVE, settle, start_operator_with};

/// First calls of the timers.
static TICKS: AtomicUsize = AtomicUsize::new(0);

/// One variant's figures.
struct Idle {
    rss: f64,
    heap: f64,
}

/// Runs both variants, each in a process of its own, and prints them side by side.
pub(crate) fn compare(n: usize, kb: usize) {
    let trimmed = variant(n, kb, false);
    let whole = variant(n, kb, true);
    println!(
        "idle objects with a {kb} KB payload (data.payload) and a timer each, {n} ConfigMaps:"
    );
    println!(
        "{:<34} {:>16} {:>16}",
        "the timer", "RSS per object", "heap per object"
    );
    for (label, f) in [
        ("declares it reads data.key", &trimmed),
        ("reads the whole object (Body)", &whole),
    ] {
        println!(
            "{label:<34} {:>10.0} bytes {:>10.0} bytes",
            f.rss / n as f64,
            f.heap / n as f64
        );
    }
    println!(
        "trimmed / whole: RSS {:.2}, heap {:.2}",
        trimmed.rss / whole.rss,
        trimmed.heap / whole.heap
    );
}

/// Runs `idle-one` in a child process and reads its figures (`rss heap`, bytes).
fn variant(n: usize, kb: usize, whole: bool) -> Idle {
    let exe = std::env::current_exe().expect("this binary");
    let mut args = vec![n.to_string(), "idle-one".into(), format!("kb={kb}")];
    if whole {
        args.push("whole".into());
    }
    let out = Command::new(exe)
        .args(&args)
        .stderr(Stdio::inherit())
        .output()
        .expect("the variant runs");
    assert!(out.status.success(), "the variant {args:?} failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("idle: "))
        .unwrap_or_else(|| panic!("no figures from {args:?}: {text}"));
    let mut figures = line
        .split_whitespace()
        .map(|f| f.parse::<f64>().expect("a number"));
    Idle {
        rss: figures.next().expect("rss"),
        heap: figures.next().expect("heap"),
    }
}

/// The fake API server for a variant, in a child process: it prints its URL, then answers
/// each `settle` line on its stdin with `settled` once it has had no request for 500 ms, and
/// stops at the end of its stdin.
pub(crate) async fn serve() {
    let server = FakeApiServer::start().await.expect("the fake API server");
    println!("{}", server.url());
    let mut lines = BufReader::new(std::io::stdin()).lines();
    while let Some(Ok(line)) = tokio::task::block_in_place(|| lines.next()) {
        if line.trim() == "settle" {
            settle(&server, "the operator", || true).await;
            println!("settled");
        }
    }
    server.shutdown().await;
}

/// One variant: the server in a child process, N ConfigMaps, the operator until every timer
/// has run once and nothing moves; prints `idle: RSS HEAP` (the operator's, in bytes).
pub(crate) async fn one(n: usize, kb: usize, whole: bool) {
    let exe = std::env::current_exe().expect("this binary");
    let mut child = Command::new(exe)
        .args(["0", "serve"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the server's process");
    let mut stdin = child.stdin.take().expect("its stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("its stdout")).lines();
    let url = stdout.next().expect("its URL").expect("a line");

    let config = kopf::config::client_config(Some(&url), Duration::from_secs(300))
        .await
        .expect("the client configuration");
    let api: Api<ConfigMap> =
        Api::namespaced(kube::Client::try_from(config).expect("a client"), "default");
    create(&api, n, kb).await;
    let before = rss();

    let (stop, thread) = start_operator_with(url, move || operator(whole));
    while TICKS.load(Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    writeln!(stdin, "settle").expect("asks the server");
    let answer = stdout.next().expect("an answer").expect("a line");
    assert_eq!(answer, "settled");
    let (rss, heap) = (rss() - before, LIVE.load(Relaxed) as f64);
    println!("idle: {rss} {heap}");

    let _ = stop.send(());
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    drop(stdin);
    let _ = child.wait();
}

/// A timer every hour on ConfigMaps; unless `whole`, it declares that it reads `data.key`.
fn operator(whole: bool) -> Operator {
    let tick = |Body(body): Body| async move {
        TICKS.fetch_add(1, Relaxed);
        let _ = body.pointer("/data/key");
        Ok::<_, kopf::HandlerError>(())
    };
    let timer = HandlerSpec::timer(
        "tick",
        TimerOptions::every(Duration::from_secs(3600)),
        tick.into_handler(),
    );
    let options = if whole {
        Options::new()
    } else {
        Options::new().reads("data.key")
    };
    Operator::new()
        .rate_limit(0.0, 0)
        .register("configmaps", timer, options)
}

/// N ConfigMaps of a `kb` KB payload, 32 at a time.
async fn create(api: &Api<ConfigMap>, n: usize, kb: usize) {
    stream::iter(0..n)
        .for_each_concurrent(32, |i| async move {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": super::name(i)},
                "data": {"key": format!("value-{i}"), "payload": "x".repeat(kb * 1024)},
            }))
            .expect("a ConfigMap");
            api.create(&PostParams::default(), &cm)
                .await
                .expect("the driver's create");
        })
        .await;
}

/// This process's resident memory, in bytes.
fn rss() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb * 1024.0)
}
