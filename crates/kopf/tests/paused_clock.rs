//! Time that the test controls: an operator on the test's own runtime, talking to the fake
//! API server in process, under tokio's paused clock. An hour of a 60 s timer and of a
//! handler retried with Kopf's backoffs passes at once, with the calls and the writes a
//! real hour would have; a short run in real time, with every delay sixty times shorter,
//! shows the same calls and writes per unit of time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf::testing::{FakeApiServer, OperatorTest, RequestRecord};
use kopf::{HandlerError, Operator, TimerOptions};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::time::Instant;

/// What the handlers saw: (when, on tokio's clock; which call).
type Calls = Arc<Mutex<Vec<(Instant, String)>>>;

/// The operator of both runs, its delays in `unit`s (60 s in the paused run, 1 s in the
/// real one): a timer every unit (the first after half a unit, so that no call of the
/// timer and of the handler fall at the same moment), and a create handler that fails
/// three times — an arbitrary error (retried after the default backoff, one unit), a
/// temporary error asking for two units, an arbitrary error again — then succeeds.
fn operator(unit: Duration, calls: &Calls, ticks: tokio::sync::watch::Sender<usize>) -> Operator {
    let flaky_calls = calls.clone();
    let tick_calls = calls.clone();
    Operator::new()
        .on_create("kopfexamples", "flaky", move || {
            let calls = flaky_calls.clone();
            async move {
                let attempt = {
                    let mut calls = calls.lock().expect("calls");
                    let attempt = calls.iter().filter(|(_, c)| c.starts_with("flaky")).count() + 1;
                    calls.push((Instant::now(), format!("flaky#{attempt}")));
                    attempt
                };
                match attempt {
                    1 | 3 => Err(HandlerError::other("not yet")),
                    2 => Err(HandlerError::temporary("later", unit * 2)),
                    _ => Ok(json!("done")),
                }
            }
        })
        .timer(
            "kopfexamples",
            "tick",
            TimerOptions::every(unit)
                .initial_delay(unit / 2)
                .sharp(true),
            move || {
                let calls = tick_calls.clone();
                let ticks = ticks.clone();
                async move {
                    let n = {
                        let mut calls = calls.lock().expect("calls");
                        let n = calls.iter().filter(|(_, c)| c.starts_with("tick")).count() + 1;
                        calls.push((Instant::now(), format!("tick#{n}")));
                        n
                    };
                    ticks.send_replace(n);
                    Ok::<_, HandlerError>(json!(n))
                }
            },
        )
}

fn kex_api(server: &FakeApiServer) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    Api::namespaced_with(server.client(), "default", &ar)
}

/// Times in units since the object's creation, to the nearest tenth.
fn in_units(d: Duration, unit: Duration) -> f64 {
    (d.as_secs_f64() / unit.as_secs_f64() * 10.0).round() / 10.0
}

/// A write to the object: when (units since its creation), the method, the subresource,
/// and what it writes (the paths of the patch's leaves under `metadata` and `status`,
/// without values: those hold timestamps).
fn write_of(r: &RequestRecord, created_micros: u64, unit: Duration) -> (f64, String) {
    let at = Duration::from_micros(r.micros.saturating_sub(created_micros));
    let sub = if r.path.ends_with("/status") {
        "/status"
    } else {
        ""
    };
    let body: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
    let mut keys = Vec::new();
    match &body {
        // A JSON patch: the paths of its operations.
        Value::Array(ops) => keys.extend(ops.iter().filter_map(|op| {
            let path = op["path"].as_str()?;
            Some(path.trim_start_matches('/').replace('/', "."))
        })),
        _ => leaves(&body, String::new(), 3, &mut keys),
    }
    (
        in_units(at, unit),
        format!("{}{sub} {}", r.method, keys.join(",")),
    )
}

fn leaves(v: &Value, at: String, depth: usize, out: &mut Vec<String>) {
    match v {
        Value::Object(m) if depth > 0 && !m.is_empty() => {
            for (k, v) in m {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                leaves(v, path, depth - 1, out);
            }
        }
        _ => out.push(at),
    }
}

/// What a run did, in units since the object's creation: the handlers' calls and the
/// writes to the object, up to (not including) the `until`-th tick.
#[derive(Debug, PartialEq)]
struct Run {
    calls: Vec<(f64, String)>,
    writes: Vec<(f64, String)>,
}

/// Runs the operator on the current runtime until the timer has ticked `until` times.
async fn run(unit: Duration, until: usize) -> Run {
    let server = FakeApiServer::in_process().await.expect("the server");
    server
        .apply_file(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/crd.yaml"
        ))
        .expect("the CRD");
    let calls = Calls::default();
    let (ticks, mut ticked) = tokio::sync::watch::channel(0);
    let running = OperatorTest::new(operator(unit, &calls, ticks))
        .backoff(unit)
        .on_current_runtime(true)
        .start(&server)
        .await
        .expect("the operator starts");
    let created = Instant::now();
    let obj = serde_json::from_value(json!({
        "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": "k"}, "spec": {"field": "x"},
    }))
    .expect("an object");
    kex_api(&server)
        .create(&PostParams::default(), &obj)
        .await
        .expect("create");
    // Generous for the real run; the paused one gets there on its own clock.
    tokio::time::timeout(unit * (until as u32 + 30), ticked.wait_for(|n| *n >= until))
        .await
        .expect("the ticks in time")
        .expect("the timer's channel");
    running.stop().await.expect("the operator's result");

    let requests = server.requests();
    let create = requests
        .iter()
        .find(|r| r.method == "POST" && r.path.ends_with("/kopfexamples"))
        .expect("the create request");
    let end = {
        let calls = calls.lock().expect("calls");
        calls
            .iter()
            .find(|(_, c)| *c == format!("tick#{until}"))
            .map(|(t, _)| in_units(*t - created, unit))
            .expect("the last tick")
    };
    let calls = calls
        .lock()
        .expect("calls")
        .iter()
        .map(|(t, c)| (in_units(*t - created, unit), c.clone()))
        .filter(|(t, _)| *t < end)
        .collect();
    let writes = requests
        .iter()
        .filter(|r| r.seq > create.seq && r.method != "GET" && r.path.contains("/kopfexamples/"))
        .map(|r| write_of(r, create.micros, unit))
        .filter(|(t, _)| *t < end)
        .collect();
    Run { calls, writes }
}

/// The hour, as Kopf's rules give it: the timer at 0.5, 1.5, … 59.5 minutes (60 calls);
/// the handler at 0 (fails), 1 (the default backoff: fails temporarily, asking for two
/// minutes), 3 (fails), 4 minutes (succeeds).
fn expected_calls(until: usize) -> Vec<(f64, String)> {
    let mut calls: Vec<(f64, String)> = [0.0, 1.0, 3.0, 4.0]
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, format!("flaky#{}", i + 1)))
        .collect();
    calls.extend((1..until).map(|n| (n as f64 - 0.5, format!("tick#{n}"))));
    calls.sort_by(|a, b| a.0.total_cmp(&b.0));
    calls
}

/// The writes of that hour: the finalizer and the first failure at once; each failure's
/// progress (the handler's annotation, Kopf's default storage) at its moment; at the
/// success, the result in the status, then the progress cleared with the last-handled
/// configuration; every tick's result in the status.
fn expected_writes(until: usize) -> Vec<(f64, String)> {
    const FLAKY: &str = "PATCH metadata.annotations.kopf.zalando.org/flaky";
    let mut writes = vec![
        (
            0.0,
            "PATCH metadata.resourceVersion,metadata.finalizers".to_string(),
        ),
        (0.0, FLAKY.to_string()),
        (1.0, FLAKY.to_string()),
        (3.0, FLAKY.to_string()),
        (4.0, "PATCH/status status.flaky".to_string()),
        (
            4.0,
            format!("{FLAKY},metadata.annotations.kopf.zalando.org/last-handled-configuration"),
        ),
    ];
    writes.extend((1..until).map(|n| (n as f64 - 0.5, "PATCH/status status.tick".to_string())));
    // Stable: at one moment, the order of the list above.
    writes.sort_by(|a, b| a.0.total_cmp(&b.0));
    writes
}

#[tokio::test(start_paused = true)]
async fn an_hour_of_timers_and_backoffs_passes_at_once_with_the_requests_of_real_time() {
    let wall = std::time::Instant::now();
    let hour = run(Duration::from_secs(60), 61).await;
    eprintln!(
        "an hour of operator time took {:?} of wall time",
        wall.elapsed()
    );
    assert_eq!(hour.calls, expected_calls(61));
    let ticks = hour
        .calls
        .iter()
        .filter(|(_, c)| c.starts_with("tick"))
        .count();
    assert_eq!(ticks, 60, "a 60 s timer runs 60 times in an hour");
    assert_eq!(hour.writes, expected_writes(61));
}

#[tokio::test]
async fn in_real_time_the_same_calls_and_writes_per_unit() {
    // Every delay sixty times shorter: one unit is a second; five ticks.
    let real = run(Duration::from_secs(1), 6).await;
    let paused = {
        // The same scenario on a paused clock, on a runtime of its own.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime");
        std::thread::spawn(move || runtime.block_on(run(Duration::from_secs(60), 6)))
            .join()
            .expect("the paused run")
    };
    assert_eq!(paused.calls, expected_calls(6));
    assert_eq!(paused.writes, expected_writes(6));
    assert_eq!(real.calls.len(), paused.calls.len(), "{real:#?}");
    for ((real_at, real_call), (at, call)) in real.calls.iter().zip(&paused.calls) {
        assert_eq!(real_call, call, "{real:#?}");
        assert!(
            (real_at - at).abs() <= 0.3,
            "{real_call} at {real_at}, not {at}"
        );
    }
    let real_writes: Vec<&String> = real.writes.iter().map(|(_, w)| w).collect();
    let paused_writes: Vec<&String> = paused.writes.iter().map(|(_, w)| w).collect();
    assert_eq!(real_writes, paused_writes, "{real:#?}\n{paused:#?}");
    for ((real_at, w), (at, _)) in real.writes.iter().zip(&paused.writes) {
        assert!((real_at - at).abs() <= 0.3, "{w} at {real_at}, not {at}");
    }
}
