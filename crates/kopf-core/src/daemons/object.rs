//! The daemons and timers of one object ([`ObjectDaemons`]): which run, spawning those that
//! match, and stopping them when the object goes, stops matching, or the operator exits.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use super::context::{Live, SpawnContext};
use super::stopped::{StopReason, Stopped};
use super::stopping::{Running, futures_join_all, stop_one};
use super::tasks::{Run, daemon_loop, timer_loop};
use crate::handler::spec::{BoxFuture, HandlerKind, HandlerSpec};

/// The daemons and timers of one object: spawned when the object appears or matches again,
/// stopped when it is deleted, stops matching, or the operator exits.
pub struct ObjectDaemons {
    live: watch::Sender<Live>,
    running: HashMap<String, Running>,
    /// Ended on their own (returned, or failed for good): not restarted for this object.
    finished: HashSet<String>,
    ctx: SpawnContext,
}

impl std::fmt::Debug for ObjectDaemons {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectDaemons")
            .field("running", &self.running.keys().collect::<Vec<_>>())
            .field("finished", &self.finished)
            .finish()
    }
}

impl ObjectDaemons {
    /// No daemons yet for an object.
    pub fn new(body: impl Into<std::sync::Arc<Value>>, ctx: SpawnContext) -> Self {
        ObjectDaemons {
            live: watch::channel(Live {
                body: body.into(),
                changed: Instant::now(),
            })
            .0,
            running: HashMap::new(),
            finished: HashSet::new(),
            ctx,
        }
    }

    /// A new state of the object; `essential` when its essence changed (idle timers wait
    /// again).
    pub fn observe(&self, body: impl Into<std::sync::Arc<Value>>, essential: bool) {
        let body = body.into();
        self.live.send_modify(|live| {
            live.body = body;
            if essential {
                live.changed = Instant::now();
            }
        });
    }

    /// Whether any daemon or timer still runs (after noting those that ended).
    pub fn is_running(&mut self) -> bool {
        self.reap();
        !self.running.is_empty()
    }

    /// Ids of the daemons and timers that run now.
    pub fn running_ids(&mut self) -> Vec<String> {
        self.reap();
        let mut ids: Vec<String> = self.running.keys().cloned().collect();
        ids.sort();
        ids
    }

    fn reap(&mut self) {
        let ended: Vec<String> = self
            .running
            .iter()
            .filter(|(_, r)| r.task.is_finished())
            .map(|(id, _)| id.clone())
            .collect();
        for id in ended {
            self.running.remove(&id);
            self.finished.insert(id);
        }
    }

    /// Spawns the daemons and timers among `specs` that match the object and do not run
    /// yet; returns the stopping of those that run but no longer match, if any (the caller
    /// spawns it, or awaits it).
    pub fn spawn_matching(&mut self, specs: &[HandlerSpec], body: &Value) -> Option<BoxFuture<()>> {
        self.reap();
        let mut mismatched = Vec::new();
        for spec in specs {
            if !matches!(spec.kind, HandlerKind::Timer(_) | HandlerKind::Daemon(_)) {
                continue;
            }
            let matches = spec.matches(body);
            if !matches {
                if let Some(r) = self.running.remove(&spec.id) {
                    mismatched.push(r);
                }
                continue;
            }
            if self.running.contains_key(&spec.id) || self.finished.contains(&spec.id) {
                continue;
            }
            let stopped = Stopped::new();
            let run = Run {
                spec: spec.clone(),
                ctx: self.ctx.clone(),
                live: self.live.subscribe(),
                stopped: stopped.clone(),
            };
            let (title, stopping, run) = match &spec.kind {
                HandlerKind::Daemon(o) => (
                    format!("Daemon '{}'", spec.id),
                    o.stopping,
                    Box::pin(daemon_loop(run, o.clone())) as BoxFuture<()>,
                ),
                HandlerKind::Timer(o) => (
                    format!("Timer '{}'", spec.id),
                    o.stopping,
                    Box::pin(timer_loop(run, o.clone())) as BoxFuture<()>,
                ),
                _ => continue,
            };
            let task = tokio::spawn(run.instrument(self.ctx.span.clone()));
            self.running.insert(
                spec.id.clone(),
                Running {
                    stopped,
                    task,
                    blocking: spec.handler.is_blocking(),
                    stopping,
                    title,
                },
            );
        }
        if mismatched.is_empty() {
            return None;
        }
        let span = self.ctx.span.clone();
        Some(Box::pin(
            async move {
                let stops = mismatched
                    .into_iter()
                    .map(|r| stop_one(r, StopReason::FiltersMismatch));
                futures_join_all(stops).await;
            }
            .instrument(span),
        ))
    }

    /// Stops every daemon and timer of the object, staged (see [the daemons module](crate::daemons)); completes
    /// when all have exited or been abandoned.
    pub fn stop_all(&mut self, reason: StopReason) -> BoxFuture<()> {
        self.reap();
        let running: Vec<Running> = self.running.drain().map(|(_, r)| r).collect();
        if reason == StopReason::Deleted {
            // Deleted objects never restart their daemons.
            self.finished.clear();
        }
        let span = self.ctx.span.clone();
        Box::pin(
            async move {
                futures_join_all(running.into_iter().map(|r| stop_one(r, reason))).await;
            }
            .instrument(span),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemons::context::Delivered;
    use crate::daemons::context::Delivery;
    use crate::daemons::options::{DaemonOptions, TimerOptions};
    use crate::handler::{Cause, Extensions, HandlerError, HandlerResult};
    use crate::layers::Stack;
    use crate::memo::Memos;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    type Log = Arc<Mutex<Vec<(String, Instant, Value)>>>;

    fn context(log: Log) -> SpawnContext {
        SpawnContext {
            memo: Memos::default(),
            extensions: Extensions::default(),
            stack: Stack::default(),
            deliver: Arc::new(move |d: Delivery| {
                let log = log.clone();
                Box::pin(async move {
                    if d.plan.is_empty() {
                        return Delivered::Done; // only events (warnings about failures)
                    }
                    let name = d.body["metadata"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_string();
                    log.lock().unwrap_or_else(|e| e.into_inner()).push((
                        name,
                        Instant::now(),
                        d.plan.merge_patch().clone(),
                    ));
                    Delivered::Done
                })
            }),
            span: tracing::Span::none(),
        }
    }

    /// Spawns what matches and waits for the stopping of what no longer does.
    async fn sync(o: &mut ObjectDaemons, spec: &HandlerSpec, body: &Value) {
        if let Some(stops) = o.spawn_matching(std::slice::from_ref(spec), body) {
            stops.await;
        }
    }

    /// When the deliveries arrived, in whole seconds since `t0`.
    fn seconds_since(log: &Log, t0: Instant) -> Vec<u64> {
        log.lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, t, _)| (*t - t0).as_secs())
            .collect()
    }

    fn body(name: &str) -> Value {
        json!({"metadata": {"name": name, "uid": name}, "spec": {}})
    }

    fn timer(
        options: TimerOptions,
        f: impl Fn(Cause) -> BoxFuture<HandlerResult> + Send + Sync + 'static,
    ) -> HandlerSpec {
        let mut spec = HandlerSpec::new("tick", None, move |c: Cause| f(c));
        spec.kind = HandlerKind::Timer(options);
        spec
    }

    fn daemon(
        options: DaemonOptions,
        f: impl Fn(Cause) -> BoxFuture<HandlerResult> + Send + Sync + 'static,
    ) -> HandlerSpec {
        let mut spec = HandlerSpec::new("watch", None, move |c: Cause| f(c));
        spec.kind = HandlerKind::Daemon(options);
        spec
    }

    #[tokio::test(start_paused = true)]
    async fn a_hundred_sharp_timers_tick_on_schedule_for_a_minute() {
        let log: Log = Arc::default();
        let interval = Duration::from_secs(1);
        // Each call takes a fifth of the interval: a non-aligned timer would drift by 12 s.
        let spec = timer(TimerOptions::every(interval).sharp(true), |_c| {
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(Some(json!("tick")))
            })
        });
        let t0 = Instant::now();
        let mut objects: Vec<ObjectDaemons> = (0..100)
            .map(|i| ObjectDaemons::new(body(&format!("o{i}")), context(log.clone())))
            .collect();
        for (i, o) in objects.iter_mut().enumerate() {
            sync(o, &spec, &body(&format!("o{i}"))).await;
        }
        tokio::time::sleep(Duration::from_secs(60) + Duration::from_millis(500)).await;
        for o in &mut objects {
            o.stop_all(StopReason::OperatorExiting).await;
        }
        let log = log.lock().unwrap_or_else(|e| e.into_inner());
        for i in 0..100 {
            let name = format!("o{i}");
            let ticks: Vec<Duration> = log
                .iter()
                .filter(|(n, _, _)| *n == name)
                .map(|(_, t, _)| *t - t0)
                .collect();
            assert_eq!(ticks.len(), 61, "{name}: {ticks:?}");
            for (k, t) in ticks.iter().enumerate() {
                let due = interval * k as u32;
                assert!(
                    *t >= due && *t < due + interval,
                    "{name}: tick {k} at {t:?}, due at {due:?}"
                );
            }
        }
        assert_eq!(log[0].2, json!({"status": {"tick": "tick"}}));
    }

    #[tokio::test(start_paused = true)]
    async fn plain_timers_wait_the_interval_after_each_call_and_retry_errors_with_backoff() {
        let log: Log = Arc::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let mut spec = timer(TimerOptions::every(Duration::from_secs(10)), move |_c| {
            let n = c.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if n == 1 {
                    Err(HandlerError::other("flaky"))
                } else {
                    Ok(Some(json!(n)))
                }
            })
        });
        spec.backoff = Duration::from_secs(3);
        let mut o = ObjectDaemons::new(body("x"), context(log.clone()));
        sync(&mut o, &spec, &body("x")).await;
        let t0 = Instant::now();
        // Calls at 0 (ok), 10 (fails), 13 (ok), 23 (ok).
        tokio::time::sleep(Duration::from_secs(24)).await;
        o.stop_all(StopReason::OperatorExiting).await;
        let at = seconds_since(&log, t0);
        assert_eq!(at, vec![0, 13, 23]);
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_timers_wait_for_a_quiet_object() {
        let log: Log = Arc::default();
        let spec = timer(TimerOptions::default().idle(Duration::from_secs(5)), |_c| {
            Box::pin(async { Ok(Some(json!("quiet"))) })
        });
        let t0 = Instant::now();
        let mut o = ObjectDaemons::new(body("x"), context(log.clone()));
        sync(&mut o, &spec, &body("x")).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        o.observe(body("x"), true); // changed at 3 s: quiet at 8 s
        tokio::time::sleep(Duration::from_secs(20)).await;
        o.observe(body("x"), true); // changed at 23 s: quiet at 28 s
        tokio::time::sleep(Duration::from_secs(10)).await;
        o.stop_all(StopReason::OperatorExiting).await;
        let at = seconds_since(&log, t0);
        assert_eq!(at, vec![8, 28]);
    }

    #[tokio::test(start_paused = true)]
    async fn daemons_see_why_they_stop_and_restart_only_after_temporary_errors() {
        let reasons = Arc::new(Mutex::new(Vec::new()));
        let r = reasons.clone();
        let attempts = Arc::new(AtomicUsize::new(0));
        let a = attempts.clone();
        let spec = daemon(
            DaemonOptions::new().initial_delay(Duration::from_secs(1)),
            move |c| {
                let r = r.clone();
                let n = a.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move {
                    if n == 0 {
                        return Err(HandlerError::temporary("not yet", Duration::from_secs(2)));
                    }
                    let stopped = c.stopped.clone().unwrap_or_default();
                    let reason = stopped.wait().await;
                    r.lock().unwrap_or_else(|e| e.into_inner()).push(reason);
                    Ok(None)
                })
            },
        );
        let mut o = ObjectDaemons::new(body("x"), context(Arc::default()));
        sync(&mut o, &spec, &body("x")).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(attempts.load(Ordering::SeqCst), 2);
        assert!(o.is_running());
        o.stop_all(StopReason::Deleted).await;
        assert!(!o.is_running());
        assert_eq!(
            *reasons.lock().unwrap_or_else(|e| e.into_inner()),
            vec![StopReason::Deleted]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_returned_daemon_is_not_restarted_but_a_mismatched_one_is() {
        let starts = Arc::new(AtomicUsize::new(0));
        let s = starts.clone();
        let mut spec = daemon(DaemonOptions::new(), move |c| {
            s.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let stopped = c.stopped.clone().unwrap_or_default();
                stopped.wait().await;
                Ok(None)
            })
        });
        spec.labels = vec![(
            "run".into(),
            crate::handler::MetaFilter::Value("yes".into()),
        )];
        let on = json!({"metadata": {"name": "x", "labels": {"run": "yes"}}});
        let off = json!({"metadata": {"name": "x", "labels": {"run": "no"}}});
        let mut o = ObjectDaemons::new(on.clone(), context(Arc::default()));
        sync(&mut o, &spec, &on).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        sync(&mut o, &spec, &off).await;
        assert!(!o.is_running());
        sync(&mut o, &spec, &on).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(o.is_running());
        assert_eq!(starts.load(Ordering::SeqCst), 2);

        // A daemon that returns by itself stays finished.
        let once = daemon(DaemonOptions::new(), |_c| Box::pin(async { Ok(None) }));
        let mut o = ObjectDaemons::new(on.clone(), context(Arc::default()));
        sync(&mut o, &once, &on).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!o.is_running());
        sync(&mut o, &once, &on).await;
        assert!(!o.is_running());
    }

    #[tokio::test(start_paused = true)]
    async fn a_daemon_ignoring_the_flag_is_cancelled_after_the_backoff() {
        let spec = daemon(
            DaemonOptions::new()
                .cancellation_backoff(Duration::from_secs(2))
                .cancellation_timeout(Duration::from_secs(3)),
            |_c| {
                Box::pin(async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(None)
                })
            },
        );
        let mut o = ObjectDaemons::new(body("x"), context(Arc::default()));
        sync(&mut o, &spec, &body("x")).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        let t0 = Instant::now();
        o.stop_all(StopReason::Deleted).await;
        // Waited for the backoff, then cancelled at once.
        assert_eq!(t0.elapsed().as_secs(), 2);
        assert!(!o.is_running());
    }

    #[tokio::test]
    async fn a_sync_daemon_ignoring_the_flag_is_abandoned_after_the_timeout() {
        use crate::extract::IntoHandler;
        let release = Stopped::new();
        let hold = release.clone();
        // A plain fn that ignores its own flag (it waits for the test's).
        let handler = move || -> Result<(), HandlerError> {
            hold.wait_blocking(Duration::from_secs(30));
            Ok(())
        };
        let mut spec = HandlerSpec::from_arc("stubborn", None, handler.into_handler());
        spec.kind = HandlerKind::Daemon(
            DaemonOptions::new()
                .cancellation_backoff(Duration::from_millis(50))
                .cancellation_timeout(Duration::from_millis(100)),
        );
        assert!(spec.handler.is_blocking());
        let mut o = ObjectDaemons::new(body("x"), context(Arc::default()));
        sync(&mut o, &spec, &body("x")).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t0 = std::time::Instant::now();
        o.stop_all(StopReason::Deleted).await;
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(150), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
        release.set(StopReason::OperatorExiting);
    }
}
