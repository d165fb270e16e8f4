//! Convergence as a metric: from the operator first seeing a change of an object to its
//! handlers' success being stored, per resource and cause.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kopf::metrics::Metrics;
use kopf::{HandlerError, Operator, TimerOptions};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use common::{Running, kex_api, obj, paused_server};

/// The histogram's `_sum` and `_count` for a cause.
fn converged(metrics: &Metrics, cause: &str) -> (f64, u64) {
    let labels = format!("resource=\"kopfexamples\",cause=\"{cause}\"");
    common::histogram(metrics, "kopf_convergence_seconds", &labels)
}

#[tokio::test(start_paused = true)]
async fn each_change_counts_from_when_it_was_seen_to_its_handling_stored() {
    let server = paused_server().await;
    let metrics = Metrics::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let op = Operator::new()
        .metrics(metrics.clone())
        .on_create("kopfexamples", "create_fn", move || {
            // Fails once, to be retried in 30 s: the creation converges after the retry.
            let first = c.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    Err(HandlerError::temporary("not yet", Duration::from_secs(30)))
                } else {
                    Ok(json!("done"))
                }
            }
        })
        .on_update("kopfexamples", "update_fn", || async {
            Ok::<_, HandlerError>(())
        })
        .on_delete("kopfexamples", "delete_fn", || async {
            Ok::<_, HandlerError>(())
        })
        // A timer keeps the object's worker between changes: each change counts from its
        // own state all the same.
        .timer(
            "kopfexamples",
            "tick",
            TimerOptions::every(Duration::from_secs(3600)),
            || async { Ok::<_, HandlerError>(()) },
        );
    let running = Running::start(&server, op).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("k", json!({"field": "a"})))
        .await
        .expect("create");
    running.settled().await;
    assert_eq!(converged(&metrics, "create").1, 0, "not yet: retrying");
    running.advance(Duration::from_secs(30)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let (sum, count) = converged(&metrics, "create");
    assert_eq!(count, 1, "{}", metrics.encode());
    assert!(
        (30.0..30.1).contains(&sum),
        "created 30 s after it was seen: {sum}"
    );

    running.advance(Duration::from_secs(100)).await;
    let patch = json!({"spec": {"field": "b"}});
    api.patch("k", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    running.settled().await;
    let (sum, count) = converged(&metrics, "update");
    assert_eq!(count, 1);
    assert!(
        sum < 0.1,
        "an update handled at once, not since the creation: {sum}"
    );

    api.delete("k", &DeleteParams::default())
        .await
        .expect("delete");
    running.settled().await;
    assert_eq!(converged(&metrics, "delete").1, 1);
    assert_eq!(converged(&metrics, "create").1, 1, "each change once");
    running.stop().await;
}
