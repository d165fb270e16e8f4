//! Waiting for an operator to settle, and running operator time at once: for an operator on
//! the test's own runtime ([`on_current_runtime`]) under tokio's paused clock
//! (`#[tokio::test(start_paused = true)]`).
//!
//! [`on_current_runtime`]: super::OperatorTest::on_current_runtime
//!
//! On a paused clock, tokio moves time only when every task of the runtime waits: a sleep
//! of the test ends only once the operator has nothing left to do before that moment. A
//! look is such a sleep of one millisecond; the operator has settled when a look sees no
//! new request of its client and no new log line. What it waits for then is read from the
//! waits it listed on its clock ([`kopf_core::clock::next_due`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::{FakeApiServer, Running, TestError};

/// One look: the operator time a settling test lets pass to see that nothing happens.
const LOOK: Duration = Duration::from_millis(1);

/// How an operator settled ([`Running::settled`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The operator time that passed while it settled (its own work, and one millisecond
    /// per look).
    pub waited: Duration,
    /// The operator's earliest wait on its clock: how long until it is due, and what it
    /// waits for (`"a timer's next call"`, `"an object's next cycle (...)"`...). None: it
    /// waits only for news (watch events, a stop).
    pub next: Option<(Duration, &'static str)>,
}

impl std::fmt::Display for Settled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "settled after {:?} of operator time; ", self.waited)?;
        match self.next {
            Some((after, what)) => write!(f, "next: {what}, in {after:?}"),
            None => write!(f, "nothing is due: it waits for news"),
        }
    }
}

/// The operator's client to a fake server in process: it sends the operator's User-Agent
/// (as the client an operator builds for a URL does) and counts its requests into `sent`
/// (the operator's activity, for settling); `wrap`, if given, wraps the in-process client
/// under the counting.
pub(super) fn operator_client(
    server: &FakeApiServer,
    sent: Arc<AtomicU64>,
    wrap: Option<&(dyn Fn(kube::Client) -> kube::Client + Send + Sync)>,
) -> kube::Client {
    let client = server.client_in_process();
    let client = match wrap {
        Some(wrap) => wrap(client),
        None => client,
    };
    let namespace = client.default_namespace().to_string();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let client = client.clone();
        sent.fetch_add(1, Ordering::Relaxed);
        request.headers_mut().insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static(crate::config::USER_AGENT),
        );
        async move { client.send(request).await }
    });
    kube::Client::new(service, namespace)
}

impl Running {
    /// Waits until the operator is idle: no handler or request under way, nothing due
    /// before its next wait ([`Settled::next`]). Then a test asserts what did *not* happen,
    /// without sleeping. Needs the operator on the test's runtime under a paused clock.
    ///
    /// ```
    /// # use kopf::testing::{FakeApiServer, OperatorTest};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use kopf::{Operator, TimerOptions};
    ///
    /// let server = FakeApiServer::in_process().await?;
    /// server.apply_file(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/crd.yaml"))?;
    /// let every_minute = TimerOptions::every(Duration::from_secs(60));
    /// let operator = Operator::new().timer("kopfexamples", "tick", every_minute, || async {
    ///     Ok::<_, kopf::HandlerError>(serde_json::json!("tick"))
    /// });
    /// let running = OperatorTest::new(operator).on_current_runtime(true).start(&server).await?;
    /// let settled = running.settled().await?;
    /// assert_eq!(settled.next, None, "no object, no timer: {settled}");
    /// // An hour of operator time, at once.
    /// running.advance(Duration::from_secs(3600)).await?;
    /// running.stop().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn settled(&self) -> Result<Settled, TestError> {
        let sent = self.sent.as_ref().ok_or(TestError::NotSettleable(
            "the operator runs on a runtime of its own: start it with \
             OperatorTest::on_current_runtime(true)",
        ))?;
        if !clock_is_paused() {
            return Err(TestError::NotSettleable(
                "the clock runs: pause it (#[tokio::test(start_paused = true)])",
            ));
        }
        let started = Instant::now();
        loop {
            let before = (sent.load(Ordering::Relaxed), self.logs.written());
            tokio::time::sleep(LOOK).await;
            if before == (sent.load(Ordering::Relaxed), self.logs.written()) {
                break;
            }
        }
        let now = Instant::now();
        Ok(Settled {
            waited: now - started,
            next: kopf_core::clock::next_due()
                .map(|(at, what)| (at.saturating_duration_since(now), what)),
        })
    }

    /// Runs `duration` of operator time at once (its timers, daemons, retries, backoffs and
    /// lease renewals, each at its moment), then waits until it settles
    /// ([`settled`](Self::settled)).
    pub async fn advance(&self, duration: Duration) -> Result<Settled, TestError> {
        if self.sent.is_some() && clock_is_paused() {
            tokio::time::sleep(duration).await;
        }
        self.settled().await
    }
}

/// Whether tokio's clock is paused: it does not move while real time passes (this thread
/// blocks a tenth of a millisecond; a paused clock moves only when its runtime is idle).
fn clock_is_paused() -> bool {
    let before = Instant::now();
    std::thread::sleep(Duration::from_micros(100));
    Instant::now() == before
}
