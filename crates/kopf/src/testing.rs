//! Testing operators: run an [`Operator`] against an in-memory [`FakeApiServer`] inside a
//! test, wait for what it does, and read what it logged.
//!
//! ```
//! use std::time::Duration;
//! use kopf::testing::{FakeApiServer, OperatorTest, wait_for_object};
//! use kopf::{HandlerError, Operator};
//! use kube::api::{Api, DynamicObject, PostParams};
//! use kube::core::{ApiResource, GroupVersionKind};
//! use serde_json::json;
//!
//! # async fn test() -> Result<(), Box<dyn std::error::Error>> {
//! // A fake API server with the resource's CRD.
//! let server = FakeApiServer::start().await?;
//! server.apply_file(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/crd.yaml"))?;
//!
//! // The operator under test, started in the background; `start` returns once it watches.
//! let operator = Operator::new().on_create("kopfexamples", "create_fn", || async {
//!     Ok::<_, HandlerError>(json!({"message": "hello"}))
//! });
//! let running = OperatorTest::new(operator).start(&server).await?;
//!
//! // Create an object as a user would, and wait for the operator's result.
//! let ar = ApiResource::from_gvk_with_plural(
//!     &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"), "kopfexamples");
//! let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &ar);
//! let obj = serde_json::from_value(json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
//!     "metadata": {"name": "k"}, "spec": {"field": "x"}}))?;
//! api.create(&PostParams::default(), &obj).await?;
//! let done = wait_for_object(&api, "k", "the handler's result", Duration::from_secs(10), |o| {
//!     o.is_some_and(|o| o.data["status"]["create_fn"]["message"] == "hello")
//! })
//! .await?;
//! assert!(done.is_some());
//! running.wait_for_log("Handler 'create_fn' succeeded", Duration::from_secs(10)).await?;
//!
//! // Stop it: the operator's own result (a failure to start, a watch that died...).
//! running.stop().await?;
//! # Ok(())
//! # }
//! # let runtime = tokio::runtime::Runtime::new().unwrap();
//! # runtime.block_on(test()).unwrap();
//! ```
//!
//! The operator runs on a runtime of its own (two worker threads) whose log lines are
//! captured for [`Running::logs`], whatever runtime the test itself uses; its client is the
//! one a real operator builds (kube's hidden retries off, the operator's own retries on), and
//! its settings suit tests: handlers retry 0.1 s after an arbitrary error instead of 60 s,
//! and framework errors are throttled for 0.1 s to 1 s instead of Kopf's 1 s to 610 s
//! ([`OperatorTest::backoff`], [`OperatorTest::error_delays`] to change them).
//!
//! **Time that the test controls.** With [`OperatorTest::on_current_runtime`] the operator
//! runs on the test's own runtime and reaches the server in process
//! ([`FakeApiServer::in_process`], [`FakeApiServer::client_in_process`]: no socket), so
//! under `#[tokio::test(start_paused = true)]` its timers, daemons, backoffs, throttles,
//! timeouts and lease renewals all wait on the test's paused clock: an hour of them passes
//! as soon as the operator and the test have nothing else to do. The timestamps the
//! operator writes and reads back (a handler's `delayed` and `started`) follow that clock
//! too ([`kopf_core::clock::now`]).

use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use kopf_testing::{
    Counters, FakeApiServer, FaultRule, LatencyRule, RequestPattern, RequestRecord,
};

use crate::error::Error;
use crate::logging::LogBuffer;
use crate::operator::Operator;

mod settle;
pub mod sim;
pub use settle::Settled;

/// How long [`OperatorTest::start`] waits for the operator's first watch.
const WATCH_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a test helper gave up.
#[derive(Debug, thiserror::Error)]
pub enum TestError {
    /// What was waited for did not happen in time.
    #[error("timed out after {after:?} waiting for {what}{last}")]
    TimedOut {
        /// What was waited for.
        what: String,
        /// How long.
        after: Duration,
        /// The last state seen, if any (`; last seen: ...`).
        last: String,
    },
    /// The operator's runtime could not be made.
    #[error("cannot make the operator's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The operator's client could not be made.
    #[error("cannot make the operator's client: {0}")]
    Client(#[source] Error),
    /// The fake API server refused one of the operator's declared CRDs.
    #[error("cannot apply the operator's CRDs: {0}")]
    Crds(#[source] Error),
    /// The operator stopped by itself before it watched anything.
    #[error("the operator stopped before it watched anything: {0}")]
    Stopped(String),
    /// A request of the test's own failed.
    #[error("a request of the test failed: {0}")]
    Request(#[source] kube::Error),
    /// [`Running::settled`] or [`Running::advance`] cannot tell when this operator is idle.
    #[error("cannot wait for the operator to settle: {0}")]
    NotSettleable(&'static str),
}

/// An operator to run in a test: [`start`](Self::start) it against a [`FakeApiServer`].
#[derive(Clone)]
pub struct OperatorTest {
    operator: Operator,
    backoff: Duration,
    error_delays: Vec<Duration>,
    wait_for_watch: bool,
    client_retries: bool,
    log_filter: String,
    layer: Option<MakeLayer>,
    current_runtime: bool,
    wrap_client: Option<WrapClient>,
    /// A log capture and subscriber to use instead of a new one (see [`Self::logs_into`]).
    logs_into: Option<(LogBuffer, tracing::Dispatch)>,
}

/// A wrapper of the operator's in-process client (the simulation's faults).
type WrapClient = Arc<dyn Fn(kube::Client) -> kube::Client + Send + Sync>;

/// A layer of the test's own for the operator's subscriber (see [`OperatorTest::layer`]).
pub type BoxedLayer =
    Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>;

type MakeLayer = Arc<dyn Fn() -> BoxedLayer + Send + Sync>;

impl std::fmt::Debug for OperatorTest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorTest")
            .field("backoff", &self.backoff)
            .field("error_delays", &self.error_delays)
            .field("wait_for_watch", &self.wait_for_watch)
            .field("client_retries", &self.client_retries)
            .field("log_filter", &self.log_filter)
            .field("current_runtime", &self.current_runtime)
            .finish_non_exhaustive()
    }
}

impl OperatorTest {
    /// The operator with test-friendly settings: a 0.1 s backoff for handlers that set none,
    /// framework errors throttled for 0.1, 0.2, 0.5, then 1 s, logs at INFO and above.
    pub fn new(operator: Operator) -> Self {
        OperatorTest {
            operator,
            backoff: Duration::from_millis(100),
            error_delays: [100, 200, 500, 1000]
                .into_iter()
                .map(Duration::from_millis)
                .collect(),
            wait_for_watch: true,
            client_retries: true,
            log_filter: format!("info,{}", crate::logging::KUBE_QUIET),
            layer: None,
            current_runtime: false,
            wrap_client: None,
            logs_into: None,
        }
    }

    /// The backoff of handlers that set none (Kopf's 60 s is long for a test).
    pub fn backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }

    /// The delays after consecutive framework errors of an object (see
    /// [`Operator::error_delays`]).
    pub fn error_delays(mut self, delays: Vec<Duration>) -> Self {
        self.error_delays = delays;
        self
    }

    /// Whether [`start`](Self::start) waits for the operator's first watch (the default);
    /// off for operators that are not expected to watch soon (an API server that fails on
    /// purpose, only startup handlers...).
    pub fn wait_for_watch(mut self, on: bool) -> Self {
        self.wait_for_watch = on;
        self
    }

    /// Whether the operator's client sends requests again after transient failures, as a
    /// real operator's does (the default). Off, every failure the fake server injects
    /// reaches the engine at once: for tests of what the engine does with failed writes.
    pub fn client_retries(mut self, on: bool) -> Self {
        self.client_retries = on;
        self
    }

    /// What is captured, as `RUST_LOG` directives (default `info` with kube's own reports
    /// quietened, as the operator logs by default; `debug` shows Kopf's debug lines).
    pub fn log_filter(mut self, directives: impl Into<String>) -> Self {
        self.log_filter = directives.into();
        self
    }

    /// Adds a layer of the test's own to the operator's subscriber, beside the captured
    /// logs (and under the same [`log_filter`](Self::log_filter)): it sees every span and
    /// event of the operator's runtime, e.g. an OpenTelemetry layer with an in-memory
    /// exporter (`kopf::otel::layer`, `otel` feature). `make` is called once per
    /// [`start`](Self::start).
    ///
    /// ```
    /// use kopf::testing::OperatorTest;
    /// use tracing_subscriber::Layer;
    ///
    /// // A second log output, thrown away.
    /// let test = OperatorTest::new(kopf::Operator::new())
    ///     .layer(|| tracing_subscriber::fmt::layer().with_writer(std::io::sink).boxed());
    /// # let _ = test;
    /// ```
    pub fn layer(mut self, make: impl Fn() -> BoxedLayer + Send + Sync + 'static) -> Self {
        self.layer = Some(Arc::new(make));
        self
    }

    /// Whether [`start`](Self::start) runs the operator on the runtime that calls it (the
    /// test's own) instead of a runtime of its own (the default), talking to the server in
    /// process ([`FakeApiServer::client_in_process`]: no socket). Then the test's clock is
    /// the operator's: under `#[tokio::test(start_paused = true)]`, every timer, backoff,
    /// throttle and timeout of the operator waits on the paused clock, which runs ahead
    /// whenever the operator and the test are idle — an hour of timers in a moment.
    ///
    /// The operator's log lines are captured from the calling thread (all of them on a
    /// current-thread runtime, the default of `#[tokio::test]`, the test's own lines too);
    /// on a multi-thread runtime, only those of its main task.
    ///
    /// ```
    /// use std::time::Duration;
    /// use kopf::testing::{FakeApiServer, OperatorTest};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // In a `#[tokio::test(start_paused = true)]`:
    /// let server = FakeApiServer::in_process().await?;
    /// let operator = kopf::Operator::new().on_create("configmaps", "seen", || async {
    ///     Ok::<_, kopf::HandlerError>(serde_json::json!("seen"))
    /// });
    /// let running = OperatorTest::new(operator).on_current_runtime(true).start(&server).await?;
    /// tokio::time::sleep(Duration::from_secs(3600)).await; // an hour of operator time, at once
    /// running.stop().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_current_runtime(mut self, on: bool) -> Self {
        self.current_runtime = on;
        self
    }

    /// Wraps the operator's in-process client (on the current runtime), under the
    /// operator's own retries.
    pub(crate) fn wrap_client(mut self, wrap: WrapClient) -> Self {
        self.wrap_client = Some(wrap);
        self
    }

    /// Logs into `logs` through `dispatch` (made by [`Self::capture`]) instead of a capture
    /// of its own: operators that share a thread and a run (a simulation's instances) share
    /// one subscriber, so that a span of one closes in the subscriber that made it.
    pub(crate) fn logs_into(mut self, logs: LogBuffer, dispatch: tracing::Dispatch) -> Self {
        self.logs_into = Some((logs, dispatch));
        self
    }

    /// A log capture and the subscriber that writes into it, with this test's filter.
    pub(crate) fn capture(&self) -> (LogBuffer, tracing::Dispatch) {
        let logs = LogBuffer::default();
        let dispatch = self.dispatch(&logs);
        (logs, dispatch)
    }

    /// Starts the operator against `server` on a runtime of its own (or on the current one:
    /// [`on_current_runtime`](Self::on_current_runtime)), and waits until it watches (unless
    /// told not to). The CRDs the operator declares ([`Operator::crd`]) are applied to the
    /// server first.
    pub async fn start(self, server: &FakeApiServer) -> Result<Running, TestError> {
        self.operator.apply_crds(server).map_err(TestError::Crds)?;
        let (logs, dispatch) = match self.logs_into.clone() {
            Some(shared) => shared,
            None => self.capture(),
        };
        let before = server.requests().last().map_or(0, |r| r.seq);
        let wait_for_watch = self.wait_for_watch;
        let mut running = if self.current_runtime {
            self.spawn_here(server, dispatch, logs)
        } else {
            self.spawn_on_own_runtime(server, dispatch, logs)?
        };
        if wait_for_watch {
            let watching = eventually("the operator's first watch", WATCH_TIMEOUT, async || {
                server
                    .requests()
                    .iter()
                    .any(|r| r.seq > before && r.query.contains("watch=true"))
                    || running.has_stopped()
            })
            .await;
            if running.has_stopped() {
                let result = running.stop().await;
                return Err(TestError::Stopped(match result {
                    Ok(()) => "it returned Ok".into(),
                    Err(e) => e.to_string(),
                }));
            }
            watching?;
        }
        Ok(running)
    }

    /// Where the operator's log lines go: the capture (and the test's layer, if any).
    fn dispatch(&self, logs: &LogBuffer) -> tracing::Dispatch {
        let writer = logs.clone();
        let filter = tracing_subscriber::EnvFilter::new(&self.log_filter);
        match &self.layer {
            None => tracing::Dispatch::new(
                tracing_subscriber::fmt()
                    .with_writer(move || writer.clone())
                    .with_ansi(false)
                    .with_env_filter(filter)
                    .finish(),
            ),
            Some(make) => {
                use tracing_subscriber::layer::SubscriberExt;
                tracing::Dispatch::new(
                    tracing_subscriber::registry()
                        .with(make())
                        .with(
                            tracing_subscriber::fmt::layer()
                                .with_writer(move || writer.clone())
                                .with_ansi(false),
                        )
                        .with(filter),
                )
            }
        }
    }

    /// The operator with the test's settings, and whether its client retries.
    fn prepared(self) -> (Operator, bool) {
        let mut operator = self
            .operator
            .backoff(self.backoff)
            .error_delays(self.error_delays);
        // A test's operator runs alone unless the test set up peering.
        if !operator.peering_set {
            operator.peering.mode = kopf_peering::PeeringMode::Standalone;
        }
        (operator, self.client_retries)
    }

    /// Runs the operator on a runtime of its own (two worker threads, every one logging to
    /// the capture), reaching the server over its socket, or in process for a server
    /// without one.
    fn spawn_on_own_runtime(
        self,
        server: &FakeApiServer,
        dispatch: tracing::Dispatch,
        logs: LogBuffer,
    ) -> Result<Running, TestError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("kopf-test-operator")
            .on_thread_start(move || {
                // Every thread of the operator's runtime (blocking ones too) logs to the
                // capture for as long as it lives.
                std::mem::forget(tracing::dispatcher::set_default(&dispatch));
            })
            .build()
            .map_err(TestError::Runtime)?;
        let connect = if server.is_in_process() {
            // Made on the operator's runtime: the requests are served there.
            let _entered = runtime.enter();
            Connect::InProcess(settle::operator_client(server, Arc::default(), None))
        } else {
            Connect::Url(server.url())
        };
        let (operator, retries) = self.prepared();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done) = tokio::sync::oneshot::channel();
        runtime.spawn(async move {
            let _ = done_tx.send(run(operator, connect, retries, stopped).await);
        });
        Ok(Running {
            stop: Some(stop),
            done: Some(done),
            runtime: Some(runtime),
            task: None,
            capture: None,
            logs,
            sent: None,
            due: None,
        })
    }

    /// Runs the operator as a task of the current runtime, reaching the server in process,
    /// and captures the log lines of the current thread.
    fn spawn_here(
        self,
        server: &FakeApiServer,
        dispatch: tracing::Dispatch,
        logs: LogBuffer,
    ) -> Running {
        use tracing::instrument::WithSubscriber;
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let connect = Connect::InProcess(settle::operator_client(
            server,
            sent.clone(),
            self.wrap_client.as_deref(),
        ));
        let due = kopf_core::clock::watch_due();
        let (operator, retries) = self.prepared();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let capture = ThreadCapture::set(&dispatch);
        let task = tokio::spawn(
            async move {
                let _ = done_tx.send(run(operator, connect, retries, stopped).await);
            }
            .with_subscriber(dispatch),
        );
        Running {
            stop: Some(stop),
            done: Some(done),
            runtime: None,
            task: Some(task),
            capture: Some(capture),
            logs,
            sent: Some(sent),
            due: Some(due),
        }
    }
}

/// How the operator reaches the fake server.
enum Connect {
    /// Over a socket, with the client a real operator builds for this URL.
    Url(String),
    /// In process, with this client.
    InProcess(kube::Client),
}

/// Runs `operator` until `stopped` fires, and returns its result.
async fn run(
    operator: Operator,
    connect: Connect,
    retries: bool,
    stopped: tokio::sync::oneshot::Receiver<()>,
) -> Result<(), Error> {
    let client = match connect {
        Connect::Url(url) => {
            let config =
                crate::config::client_config(Some(&url), operator.inactivity_timeout).await?;
            kube::Client::try_from(config).map_err(Error::Client)?
        }
        Connect::InProcess(client) => client,
    };
    let client = if retries {
        operator.wrap_client(client)
    } else {
        client
    };
    operator
        .run_until(client, async {
            let _ = stopped.await;
        })
        .await
}

thread_local! {
    /// The log captures set as this thread's default by operators started on the current
    /// runtime, by their key (see [`ThreadCapture`]).
    static CAPTURES: std::cell::RefCell<Vec<(u64, tracing::dispatcher::DefaultGuard)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A log capture set as the default of the thread that started an operator on the current
/// runtime, until the operator stops (kept in a thread-local so that [`Running`] stays
/// `Send`: unset only on the thread that set it, else when that thread ends).
#[derive(Debug)]
struct ThreadCapture {
    key: u64,
    thread: std::thread::ThreadId,
}

impl ThreadCapture {
    fn set(dispatch: &tracing::Dispatch) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let key = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let guard = tracing::dispatcher::set_default(dispatch);
        CAPTURES.with(|c| c.borrow_mut().push((key, guard)));
        ThreadCapture {
            key,
            thread: std::thread::current().id(),
        }
    }
}

impl Drop for ThreadCapture {
    fn drop(&mut self) {
        if std::thread::current().id() == self.thread {
            let guard = CAPTURES.with(|c| {
                let mut c = c.borrow_mut();
                let at = c.iter().position(|(k, _)| *k == self.key);
                at.map(|at| c.remove(at))
            });
            drop(guard);
        }
    }
}

/// An operator running in a test (see [`OperatorTest`]); [`stop`](Self::stop) it to get its
/// result. Dropped without `stop`, it is stopped abruptly.
pub struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<tokio::sync::oneshot::Receiver<Result<(), Error>>>,
    runtime: Option<tokio::runtime::Runtime>,
    /// The operator's task on the current runtime.
    task: Option<tokio::task::JoinHandle<()>>,
    capture: Option<ThreadCapture>,
    logs: LogBuffer,
    /// The requests sent by the operator's client, on the current runtime (for settling).
    sent: Option<Arc<std::sync::atomic::AtomicU64>>,
    /// The operator's waits listed on this thread, on the current runtime.
    due: Option<kopf_core::clock::DueWatch>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").finish_non_exhaustive()
    }
}

impl Running {
    /// Starts `operator` against `server` with the test settings of [`OperatorTest::new`].
    pub async fn start(server: &FakeApiServer, operator: Operator) -> Result<Running, TestError> {
        OperatorTest::new(operator).start(server).await
    }

    /// Whether the operator has stopped by itself (an error, usually).
    pub fn has_stopped(&mut self) -> bool {
        self.done.as_mut().is_some_and(|d| {
            matches!(
                d.try_recv(),
                Ok(_) | Err(tokio::sync::oneshot::error::TryRecvError::Closed)
            )
        })
    }

    /// The lines the operator has logged so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lines()
    }

    /// Whether some line logged so far contains `text` (to wait for one: [`wait_for_log`]:
    /// the operator logs a handler's outcome once the cycle's writes are done, a moment after
    /// the result shows on the object).
    ///
    /// [`wait_for_log`]: Self::wait_for_log
    pub fn logged(&self, text: &str) -> bool {
        self.logs.lines().iter().any(|l| l.contains(text))
    }

    /// The logged lines of a level (`INFO`, `WARN`, `ERROR`) that contain `text`.
    pub fn logged_at(&self, level: &str, text: &str) -> Vec<String> {
        self.logs.matching(level, text)
    }

    /// Waits until a logged line contains `text`, and returns it.
    pub async fn wait_for_log(&self, text: &str, timeout: Duration) -> Result<String, TestError> {
        let mut found = None;
        eventually(&format!("a log line with {text:?}"), timeout, async || {
            found = self.logs.lines().into_iter().find(|l| l.contains(text));
            found.is_some()
        })
        .await?;
        Ok(found.unwrap_or_default())
    }

    /// Waits for the operator to stop by itself (it failed, or a startup handler failed)
    /// and returns its result.
    pub async fn finished(mut self) -> Result<(), Error> {
        let result = match self.done.take() {
            Some(done) => done.await.unwrap_or(Ok(())),
            None => Ok(()),
        };
        self.release();
        result
    }

    /// Ends what is left of the operator: its runtime, or its task on the current runtime
    /// (and the capture of its thread's log lines).
    fn release(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.capture = None;
        self.due = None;
    }

    /// Kills the operator: no graceful stop, nothing released. On a runtime of its own
    /// (the default), as SIGKILL would: it returns once none of the operator's tasks runs
    /// any more (each is dropped at its next await; it waits at most 10 s for a task that
    /// blocks its thread). On the current runtime, only its main task is aborted: the tasks
    /// it started run on until the runtime ends.
    pub fn kill(mut self) {
        if let Some(runtime) = self.runtime.take() {
            // On a thread of its own: a runtime cannot be shut down and waited for from
            // inside an async context.
            let _ = std::thread::spawn(move || runtime.shutdown_timeout(Duration::from_secs(10)))
                .join();
        }
        self.release();
    }

    /// Stops the operator (as SIGTERM would: running handlers get the grace period) and
    /// returns its result.
    pub async fn stop(mut self) -> Result<(), Error> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let result = match self.done.take() {
            Some(done) => done.await.unwrap_or(Ok(())),
            None => Ok(()),
        };
        self.release();
        result
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.release();
    }
}

/// Polls `check` every 25 ms until it is true, for at most `timeout`.
///
/// ```
/// # async fn demo() -> Result<(), kopf::testing::TestError> {
/// use std::time::Duration;
/// let start = std::time::Instant::now();
/// kopf::testing::eventually("a tenth of a second", Duration::from_secs(5), async || {
///     start.elapsed() > Duration::from_millis(100)
/// })
/// .await?;
/// # Ok(())
/// # }
/// ```
pub async fn eventually(
    what: &str,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> bool,
) -> Result<(), TestError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(TestError::TimedOut {
                what: what.into(),
                after: timeout,
                last: String::new(),
            });
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// What changed between two states of an object (pretty JSON), as a unified diff.
fn changes(first: &str, last: &str) -> String {
    if first == last {
        return "it did not change while waiting".into();
    }
    let diff = similar::TextDiff::from_lines(first, last)
        .unified_diff()
        .context_radius(2)
        .header("first seen", "last seen")
        .to_string();
    format!(
        "what changed while waiting:\n{}",
        kopf_core::text::excerpt(&diff, 4000)
    )
}

/// Waits until the object `name` (None: it does not exist) satisfies `check`, and returns
/// it. On timeout, the error shows the last state seen, and what changed in it while the
/// test waited (a unified diff of the first and last states seen), or that nothing did.
pub async fn wait_for_object<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(Option<&K>) -> bool,
) -> Result<Option<K>, TestError>
where
    K: Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut first: Option<String> = None;
    loop {
        let seen = api.get_opt(name).await.map_err(TestError::Request)?;
        if check(seen.as_ref()) {
            return Ok(seen);
        }
        let pretty = match &seen {
            Some(o) => serde_json::to_string_pretty(o).unwrap_or_else(|_| format!("{o:#?}")),
            None => "no such object".into(),
        };
        let first = first.get_or_insert_with(|| pretty.clone());
        if tokio::time::Instant::now() >= deadline {
            let last = match &seen {
                Some(o) => serde_json::to_string(o).unwrap_or_else(|_| format!("{o:?}")),
                None => "no such object".into(),
            };
            return Err(TestError::TimedOut {
                what: format!("{what} ({name})"),
                after: timeout,
                last: format!(
                    "; last seen: {}; {}",
                    kopf_core::text::excerpt(&last, 2000),
                    changes(first, &pretty)
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams, PostParams};

    #[tokio::test]
    async fn a_timeout_shows_what_changed_while_waiting() {
        let server = FakeApiServer::start().await.expect("start");
        let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
        let cm: ConfigMap = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "c"}, "data": {"a": "1"}}),
        )
        .expect("a ConfigMap");
        api.create(&PostParams::default(), &cm)
            .await
            .expect("create");
        let quiet = wait_for_object(&api, "c", "b", Duration::from_millis(100), |_| false)
            .await
            .expect_err("never");
        assert!(
            quiet
                .to_string()
                .ends_with("it did not change while waiting"),
            "{quiet}"
        );

        let changer = api.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let patch = serde_json::json!({"data": {"a": "2"}});
            changer
                .patch("c", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("patch");
        });
        let changed = wait_for_object(&api, "c", "b", Duration::from_millis(500), |_| false)
            .await
            .expect_err("never")
            .to_string();
        assert!(
            changed.contains("what changed while waiting:\n--- first seen\n+++ last seen"),
            "{changed}"
        );
        assert!(
            changed.contains("-    \"a\": \"1\"\n+    \"a\": \"2\""),
            "{changed}"
        );
    }
}
