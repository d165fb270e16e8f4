//! Load measurement of the fake API server, as `cargo xtask bench` loads it.
//!
//! `cargo run --release -p kopf-testing --example fake_load [-- N]` starts the server as a
//! child process (this binary with `serve`), applies the bench CRD (`kopfexamples.kopf.dev`),
//! creates N objects, opens one watch, then sends N merge PATCHes of `/status` and N of the
//! object, 64 at a time, and prints the writes per second, the server's CPU seconds (from
//! its `/proc/PID/stat`) and the server's memory per stored object (RSS growth ÷ N).
//!
//! With `--tls` the server serves HTTPS with its generated CA (`FakeApiServerBuilder::tls`)
//! and the client verifies it; a last phase then sends C GETs each on a new connection (a
//! client per request, as every kubectl process does), so the handshakes show:
//! `fake_load [N] [--tls] [--connections C]` (C = 200 by default). Run it with and without
//! `--tls`, alternately, for the cost of TLS (see the crate's README).
//!
//! To compare two versions of the server, build this example at each (it uses only the
//! public API), copy the binaries aside and run them alternately on the same machine: the
//! numbers move with the machine's load, the ratios much less. On 2 shared cores, 5 runs
//! each, medians (P12 item 7): server CPU per 10k merge PATCHes 1.23 s -> 0.84 s, writes
//! per second 6,800 -> 9,200, memory per object after the creates 6.9 KB -> 2.5 KB and
//! after two patches each (history included) 31.4 KB -> 11.1 KB.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

const CONCURRENCY: usize = 64;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let tls = args.iter().any(|a| a == "--tls");
    if args.get(1).map(String::as_str) == Some("serve") {
        return rt.block_on(serve(tls));
    }
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let connections: usize = args
        .iter()
        .position(|a| a == "--connections")
        .and_then(|i| args.get(i + 1))
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    rt.block_on(drive(n, tls, connections))
}

/// The server process: prints its URL (and with TLS its CA, base64 of the PEM), then
/// serves until stdin closes.
async fn serve(tls: bool) -> Result<(), Error> {
    use base64::Engine;
    let server = kopf_testing::FakeApiServer::builder()
        .tls(tls)
        .start()
        .await?;
    let crd = include_str!("../../../examples/crd.yaml");
    server.apply_yaml("crd.yaml", crd)?;
    println!("{}", server.url());
    let ca = server.ca_pem().unwrap_or_default();
    println!("{}", base64::engine::general_purpose::STANDARD.encode(ca));
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    })
    .await?;
    server.shutdown().await;
    Ok(())
}

/// CPU seconds (user + system) and resident memory (kB) of a process.
fn usage(pid: u32) -> (f64, u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields after the command: state is index 0, utime 11, stime 12 (in clock ticks).
    let ticks: f64 = fields.get(11).and_then(|s| s.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (ticks / 100.0, kb("VmRSS:"), kb("VmHWM:"))
}

/// A kube client for the server (trusting its CA, if any).
fn client_for(url: &str, ca_der: &Option<Vec<u8>>) -> Result<kube::Client, Error> {
    let mut config = kube::Config::new(url.parse()?);
    config.default_retry = false;
    config.root_cert = ca_der.clone().map(|der| vec![der]);
    Ok(kube::Client::try_from(config)?)
}

async fn drive(n: usize, tls: bool, connections: usize) -> Result<(), Error> {
    use base64::Engine;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .arg("serve")
        .args(tls.then_some("--tls"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let pid = child.id();
    let (mut url, mut ca) = (String::new(), String::new());
    let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    stdout.read_line(&mut url)?;
    stdout.read_line(&mut ca)?;
    let url = url.trim().to_string();
    let ca_pem = base64::engine::general_purpose::STANDARD.decode(ca.trim())?;
    let ca_der = match ca_pem.is_empty() {
        true => None,
        false => Some(CertificateDer::from_pem_slice(&ca_pem)?.to_vec()),
    };
    let client = client_for(&url, &ca_der)?;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    // Let the CRD be established.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (cpu0, rss0, _) = usage(pid);
    let t0 = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let obj: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
                    "metadata": {"name": format!("bench-{i:05}")},
                    "spec": {"field": "value", "duration": "1m"},
                }))?;
                api.create(&PostParams::default(), &obj).await?;
                Ok::<(), Error>(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    let create_s = t0.elapsed().as_secs_f64();
    let (cpu1, rss1, _) = usage(pid);

    // One watch from the current resourceVersion, counting events.
    let rv = api
        .list_metadata(&Default::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let events = Arc::new(AtomicU64::new(0));
    let counted = events.clone();
    let wapi = api.clone();
    let watcher = tokio::spawn(async move {
        let params = WatchParams::default().timeout(290);
        let Ok(stream) = wapi.watch(&params, &rv).await else {
            return;
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            if let Ok(WatchEvent::Modified(_)) = ev {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        }
    });

    let t1 = Instant::now();
    futures::stream::iter(0..2 * n)
        .map(|j| {
            let api = api.clone();
            async move {
                let name = format!("bench-{:05}", j % n);
                let pp = PatchParams::default();
                if j < n {
                    let p = json!({"status": {"create_fn": {"message": "done", "children": [j]}}});
                    api.patch_status(&name, &pp, &Patch::Merge(&p)).await?;
                } else {
                    let p = json!({"metadata": {"annotations": {
                        "kopf.zalando.org/last-handled-configuration":
                            "{\"spec\":{\"field\":\"value\",\"duration\":\"1m\"}}"}}});
                    api.patch(&name, &pp, &Patch::Merge(&p)).await?;
                }
                Ok::<(), Error>(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    let write_s = t1.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(60);
    while events.load(Ordering::Relaxed) < 2 * n as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen_s = t1.elapsed().as_secs_f64();
    let (cpu2, rss2, hwm) = usage(pid);
    watcher.abort();

    // Requests on new connections, one after another: the handshakes.
    let (cpu3, _, _) = usage(pid);
    let t3 = Instant::now();
    for i in 0..connections {
        let fresh: Api<DynamicObject> =
            Api::namespaced_with(client_for(&url, &ca_der)?, "default", &ar);
        fresh.get(&format!("bench-{:05}", i % n)).await?;
    }
    let conn_s = t3.elapsed().as_secs_f64();
    let (cpu4, _, _) = usage(pid);

    println!("url: {url}; objects: {n}, concurrency: {CONCURRENCY}");
    println!(
        "create: {:.0} objects/s, server CPU {:.2} s",
        n as f64 / create_s,
        cpu1 - cpu0
    );
    println!(
        "patch:  {:.0} writes/s ({} writes in {:.2} s; all {} watch events after {:.2} s)",
        (2 * n) as f64 / write_s,
        2 * n,
        write_s,
        events.load(Ordering::Relaxed),
        seen_s
    );
    println!(
        "server CPU per 10k writes: {:.3} s (patch phase {:.2} s)",
        (cpu2 - cpu1) * 10_000.0 / (2 * n) as f64,
        cpu2 - cpu1
    );
    println!(
        "server memory: {} bytes/object after create, {} bytes/object after patches (RSS {} -> {} -> {} kB, HWM {} kB)",
        (rss1.saturating_sub(rss0)) * 1024 / n as u64,
        (rss2.saturating_sub(rss0)) * 1024 / n as u64,
        rss0,
        rss1,
        rss2,
        hwm
    );
    println!(
        "new connections: {connections} GETs, {:.2} ms each, server CPU {:.3} ms each",
        conn_s * 1000.0 / connections.max(1) as f64,
        (cpu4 - cpu3) * 1000.0 / connections.max(1) as f64
    );
    drop(child.stdin.take());
    let _ = child.wait();
    Ok(())
}
