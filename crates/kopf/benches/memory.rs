//! The operator's heap, in the shape of kube-rs' memory benchmark (`kube-runtime/benches/
//! memory.rs`: 10,000 ConfigMaps; the initial list, a steady state of 5,000 updates and
//! 1,000 deletes, a relist), through kopf-rs's whole engine: a fake API server on a socket
//! (HTTP and JSON decoding for real), the watch, the handlers, the diff-base writes.
//!
//! `cargo xtask bench memory [--objects N] [--release]` runs it;
//! `cargo bench -p kopf --bench memory -- 10000 [unlimited]` too (`unlimited`: the client's
//! rate limit off, as `cargo xtask bench` runs operators; by default kopf's, 100 requests
//! per second after a burst of 1,000, which a flood of changes waits on).
//!
//! Only the operator's allocations are counted: it runs on a tokio runtime of its own whose
//! threads are marked, and a counting allocator adds what marked threads allocate and takes
//! away what they free. The fake server and the driver run on another runtime (unmarked);
//! what crosses between them crosses a socket, so no allocation changes sides. Figures per
//! phase: the peak of live bytes during it, the live bytes once it is settled, the bytes and
//! number of allocations made, and the operator's requests per object.
//!
//! `idle` (`cargo xtask bench memory --idle [--payload-kb K]`) measures instead what an idle
//! object costs with a large payload and a timer, with and without trimming (`memory/idle.rs`).
//!
//! The operator: a creation handler and an update handler on `configmaps`, both returning
//! nothing (Kopf's bookkeeping only: the diff-base annotation, one PATCH per handled change).
//! The server stores `managedFields` on every object, as kube-apiserver does; the operator
//! receives them in every list and watch event (kube-rs' "with managedFields" case).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kopf::Operator;
use kopf::testing::FakeApiServer;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

#[path = "memory/idle.rs"]
mod idle;

// ---- the counting allocator ----------------------------------------------------------

thread_local! {
    /// Whether this thread is one of the operator's.
    static OPERATOR: Cell<bool> = const { Cell::new(false) };
}

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

struct Counting;

fn counted() -> bool {
    OPERATOR.try_with(Cell::get).unwrap_or(false)
}

fn allocated(size: usize) {
    let live = LIVE.fetch_add(size as isize, Relaxed) + size as isize;
    PEAK.fetch_max(live, Relaxed);
    BYTES.fetch_add(size as u64, Relaxed);
    ALLOCATIONS.fetch_add(1, Relaxed);
}

fn freed(size: usize) {
    LIVE.fetch_sub(size as isize, Relaxed);
}

// SAFETY: every call goes to the system allocator unchanged; the counting around it only
// touches atomics and a const-initialized thread-local (neither allocates).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() && counted() {
            allocated(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() && counted() {
            allocated(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) };
        if counted() {
            freed(layout.size());
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() && counted() {
            allocated(new_size);
            freed(layout.size());
        }
        new
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

// ---- the operator ----------------------------------------------------------------------

/// Calls of the creation and the update handler.
static CREATED: AtomicUsize = AtomicUsize::new(0);
static UPDATED: AtomicUsize = AtomicUsize::new(0);
/// Whether the client's rate limit is off (`unlimited` on the command line), as in
/// `cargo xtask bench` (`--qps 0`); by default it is kopf's (100 per second after 1,000).
static UNLIMITED: AtomicBool = AtomicBool::new(false);

fn operator() -> Operator {
    let operator = Operator::new();
    let operator = if UNLIMITED.load(Relaxed) {
        operator.rate_limit(0.0, 0)
    } else {
        operator
    };
    operator
        .on_create("configmaps", "create_fn", || async {
            CREATED.fetch_add(1, Relaxed);
            Ok::<_, kopf::HandlerError>(())
        })
        .on_update("configmaps", "update_fn", || async {
            UPDATED.fetch_add(1, Relaxed);
            Ok::<_, kopf::HandlerError>(())
        })
}

/// Starts the operator on a runtime of its own (one worker thread; the heap does not depend
/// on how many), on marked threads, against `url`; it stops when the returned sender is
/// dropped or sent to.
fn start_operator(
    url: String,
) -> (
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    start_operator_with(url, operator)
}

/// [`start_operator`] with the operator `make` builds (on the operator's runtime).
fn start_operator_with(
    url: String,
    make: impl FnOnce() -> Operator + Send + 'static,
) -> (
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        OPERATOR.with(|marked| marked.set(true));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .on_thread_start(|| OPERATOR.with(|marked| marked.set(true)))
            .build()
            .expect("the operator's runtime");
        runtime.block_on(async move {
            // As a production operator connects: kopf's client configuration (its
            // User-Agent, no silent retries) under the operator's own retry layer.
            let config = kopf::config::client_config(Some(&url), Duration::from_secs(300))
                .await
                .expect("the client configuration");
            let operator = make();
            let client = operator.wrap_client(kube::Client::try_from(config).expect("a client"));
            let shutdown = async move {
                let _ = stopped.await;
            };
            if let Err(e) = operator.run_until(client, shutdown).await {
                eprintln!("memory bench: the operator failed: {e}");
            }
        });
    });
    (stop, thread)
}

// ---- phases -----------------------------------------------------------------------------

/// What the operator did in one phase.
struct Phase {
    name: &'static str,
    peak: isize,
    settled: isize,
    bytes: u64,
    allocations: u64,
    seconds: f64,
    requests: BTreeMap<String, u64>,
}

/// Starts a phase: the peak restarts from the live bytes, the totals from zero.
fn begin() -> (Instant, u64, u64) {
    PEAK.store(LIVE.load(Relaxed), Relaxed);
    (
        Instant::now(),
        BYTES.load(Relaxed),
        ALLOCATIONS.load(Relaxed),
    )
}

fn end(
    name: &'static str,
    (started, bytes, allocations): (Instant, u64, u64),
    requests: BTreeMap<String, u64>,
) -> Phase {
    Phase {
        name,
        peak: PEAK.load(Relaxed),
        settled: LIVE.load(Relaxed),
        bytes: BYTES.load(Relaxed) - bytes,
        allocations: ALLOCATIONS.load(Relaxed) - allocations,
        seconds: started.elapsed().as_secs_f64(),
        requests,
    }
}

fn name(i: usize) -> String {
    format!("cm-{i:05}")
}

fn config_map(i: usize) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {
            "name": name(i),
            "labels": {"app": "memory-bench", "shard": format!("{}", i % 16)},
        },
        "data": {
            "key": format!("value-{i}"),
            "config.yaml": format!("replicas: {}\nimage: registry.local/app:{i}\nport: 8080\n", i % 5),
        },
    }))
    .expect("a ConfigMap")
}

/// Waits until `done()` holds and then until the server has had no request for 500 ms
/// (by its counters: the request log is a copy of every request, too big to poll).
async fn settle(server: &FakeApiServer, what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(600);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "memory bench: {what} not done in 600 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut last = server.counters().total();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = server.counters().total();
        if now == last {
            return;
        }
        last = now;
    }
}

/// The operator's requests since `from` (by kopf's User-Agent), by verb and resource.
fn operator_requests(server: &FakeApiServer, from: u64) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for r in server.requests().iter().filter(|r| r.seq > from) {
        if !r.user_agent.starts_with("kopf-rs/") {
            continue;
        }
        let endpoint = r.path.rsplit('/').next().unwrap_or_default();
        let resource = if endpoint.starts_with("cm-") {
            "configmaps/NAME"
        } else {
            endpoint
        };
        *counts
            .entry(format!("{} {resource}", r.method))
            .or_insert(0) += 1;
    }
    counts
}

fn last_seq(server: &FakeApiServer) -> u64 {
    server.requests().last().map_or(0, |r| r.seq)
}

async fn run(n: usize) -> Vec<Phase> {
    let server = FakeApiServer::start().await.expect("the fake API server");
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    changes(&api, (0..n).map(Change::Create)).await;

    let from = last_seq(&server);
    let phase = begin();
    let (stop, thread) = start_operator(server.url());
    settle(&server, "the initial list", || CREATED.load(Relaxed) >= n).await;
    let mut phases = vec![end("initial list", phase, operator_requests(&server, from))];

    let from = last_seq(&server);
    let phase = begin();
    let (updates, deletes) = (n / 2, n / 10);
    let steady = (0..updates)
        .map(Change::Update)
        .chain((updates..updates + deletes).map(Change::Delete));
    changes(&api, steady).await;
    settle(&server, "the updates", || UPDATED.load(Relaxed) >= updates).await;
    phases.push(end("steady state", phase, operator_requests(&server, from)));

    let from = last_seq(&server);
    let phase = begin();
    let lists = configmap_lists(&server);
    server.expire_next_watch(Some("configmaps"));
    server.close_watches(Some("configmaps"));
    settle(&server, "the relist", || configmap_lists(&server) > lists).await;
    phases.push(end("relist", phase, operator_requests(&server, from)));

    let _ = stop.send(());
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    server.shutdown().await;
    phases
}

/// What the driver does to the ConfigMap numbered so.
#[derive(Clone, Copy)]
enum Change {
    Create(usize),
    Update(usize),
    Delete(usize),
}

/// The driver's writes, 32 at a time.
async fn changes(api: &Api<ConfigMap>, changes: impl Iterator<Item = Change>) {
    stream::iter(changes)
        .for_each_concurrent(32, |change| async move {
            let result = match change {
                Change::Create(i) => api
                    .create(&PostParams::default(), &config_map(i))
                    .await
                    .map(drop),
                Change::Update(i) => {
                    let patch = json!({"data": {"key": format!("changed-{i}")}});
                    api.patch(&name(i), &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map(drop)
                }
                Change::Delete(i) => api
                    .delete(&name(i), &DeleteParams::default())
                    .await
                    .map(drop),
            };
            result.expect("the driver's write");
        })
        .await;
}

/// The lists of ConfigMaps the server has answered (the driver lists none).
fn configmap_lists(server: &FakeApiServer) -> u64 {
    server.counters().get("list", "configmaps", "")
}

fn mb(bytes: f64) -> String {
    format!("{:.1} MB", bytes / 1e6)
}

fn print(n: usize, phases: &[Phase]) {
    let build = if cfg!(debug_assertions) {
        "dev"
    } else {
        "optimized"
    };
    let limit = if UNLIMITED.load(Relaxed) {
        "no client rate limit"
    } else {
        "kopf's default client rate limit"
    };
    println!("memory of the operator ({build} build, {limit}), {n} ConfigMaps with managedFields:");
    println!(
        "{:<14} {:>10} {:>12} {:>12} {:>12} {:>8}  operator requests",
        "phase", "peak heap", "heap after", "allocated", "allocations", "seconds"
    );
    for p in phases {
        let requests = p
            .requests
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "{:<14} {:>10} {:>12} {:>12} {:>12} {:>8.1}  {requests}",
            p.name,
            mb(p.peak as f64),
            mb(p.settled as f64),
            mb(p.bytes as f64),
            p.allocations,
            p.seconds,
        );
    }
    if let Some(first) = phases.first() {
        println!(
            "heap per object once listed: {:.0} bytes",
            first.settled as f64 / n as f64
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(10_000);
    let has = |word: &str| args.iter().any(|a| a == word);
    let kb: usize = args
        .iter()
        .find_map(|a| a.strip_prefix("kb=").and_then(|v| v.parse().ok()))
        .unwrap_or(10);
    UNLIMITED.store(has("unlimited"), Relaxed);
    if has("idle") {
        return idle::compare(n, kb);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("the driver's runtime");
    if has("serve") {
        runtime.block_on(idle::serve());
    } else if has("idle-one") {
        runtime.block_on(idle::one(n, kb, has("whole")));
    } else {
        let phases = runtime.block_on(run(n));
        print(n, &phases);
    }
}
