//! Objects too large for the diff-base annotation (kube limits all annotations of an object
//! to 256 KiB together): handled once per change and reported once, never a loop of re-runs
//! (before: the object's PATCH was refused with 422, and the handler ran again after each
//! error delay, nine times in the first minute).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kopf::{HandlerError, Operator};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use common::{Running, count, kex_api, obj, paused_server};

/// A creation, an update and a deletion handler, counted.
fn operator(calls: &[Arc<AtomicUsize>; 3]) -> Operator {
    let [c, u, d] = calls.clone();
    Operator::new()
        .on_create("kopfexamples", "create_fn", move || {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>(json!("created")) }
        })
        .on_update("kopfexamples", "update_fn", move || {
            u.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>(json!("updated")) }
        })
        .on_delete("kopfexamples", "delete_fn", move || {
            d.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, HandlerError>(()) }
        })
}

fn counts(calls: &[Arc<AtomicUsize>; 3]) -> [usize; 3] {
    calls.each_ref().map(|c| c.load(Ordering::SeqCst))
}

async fn patch_spec(api: &Api<DynamicObject>, value: &str) {
    let patch = json!({"spec": {"other": value}});
    api.patch("big", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
}

#[tokio::test(start_paused = true)]
async fn a_spec_of_1_4_mb_is_handled_once_per_change_and_reported_once() {
    let server = paused_server().await;
    let calls: [Arc<AtomicUsize>; 3] = Default::default();
    let running = Running::start(&server, operator(&calls)).await;
    let api = kex_api(&server);
    let big = "x".repeat(1_400_000);
    api.create(&PostParams::default(), &obj("big", json!({"field": big})))
        .await
        .expect("create");
    running.advance(Duration::from_secs(60)).await;
    assert_eq!(counts(&calls), [1, 0, 0], "created once in a minute");
    assert_eq!(
        count(&server, "PATCH", "/kopfexamples/big"),
        1,
        "no refused retries"
    );
    let o = api.get("big").await.expect("get");
    assert_eq!(o.data["status"]["create_fn"], json!("created"));
    assert!(
        o.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| !f.is_empty()),
        "the finalizer went with the writes: {:?}",
        o.metadata.finalizers
    );
    let reported = running.logged_at("ERROR", "The diff-base of this object");
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(
        reported[0].contains("more than the 262144 kube allows")
            && reported[0].contains("diff_base_storage"),
        "names the limit and the setting: {}",
        reported[0]
    );

    // A change is one update (the diff-base kept in memory is the one compared with), and
    // it is not reported again.
    patch_spec(&api, "y").await;
    running.advance(Duration::from_secs(60)).await;
    assert_eq!(counts(&calls), [1, 1, 0]);
    assert_eq!(running.logged_at("ERROR", "The diff-base").len(), 1);

    // Its deletion goes as usual.
    api.delete("big", &DeleteParams::default())
        .await
        .expect("delete");
    running.settled().await;
    assert_eq!(counts(&calls), [1, 1, 1]);
    assert!(api.get_opt("big").await.expect("get").is_none(), "gone");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_diff_base_that_fits_again_is_stored_again() {
    let server = paused_server().await;
    let calls: [Arc<AtomicUsize>; 3] = Default::default();
    let running = Running::start(&server, operator(&calls)).await;
    let api = kex_api(&server);
    let big = "x".repeat(300_000);
    api.create(&PostParams::default(), &obj("big", json!({"field": big})))
        .await
        .expect("create");
    running.settled().await;
    let annotation = "kopf.zalando.org/last-handled-configuration";
    let o = api.get("big").await.expect("get");
    assert!(!o.annotations().contains_key(annotation), "too large");

    let patch = json!({"spec": {"field": "small"}});
    api.patch("big", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("shrink");
    running.settled().await;
    assert_eq!(counts(&calls), [1, 1, 0]);
    let o = api.get("big").await.expect("get");
    assert_eq!(
        o.annotations().get(annotation).map(String::as_str),
        Some("{\"spec\":{\"field\":\"small\"}}\n"),
        "stored once it fits"
    );
    // And read from the object from then on: the next change is an update from it.
    patch_spec(&api, "z").await;
    running.settled().await;
    assert_eq!(counts(&calls), [1, 2, 0]);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_spec_that_grows_too_large_is_updated_once_and_reported_once() {
    let server = paused_server().await;
    let calls: [Arc<AtomicUsize>; 3] = Default::default();
    let running = Running::start(&server, operator(&calls)).await;
    let api = kex_api(&server);
    api.create(
        &PostParams::default(),
        &obj("big", json!({"field": "small"})),
    )
    .await
    .expect("create");
    running.settled().await;
    // It grows beyond the annotation's budget: its older diff-base (which fitted) must not be
    // taken for the last handled state again and again.
    let patch = json!({"spec": {"field": "x".repeat(1_400_000)}});
    api.patch("big", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("grow");
    running.advance(Duration::from_secs(60)).await;
    assert_eq!(counts(&calls), [1, 1, 0], "one update in a minute");
    patch_spec(&api, "y").await;
    running.advance(Duration::from_secs(60)).await;
    assert_eq!(counts(&calls), [1, 2, 0], "and one for the next change");
    assert_eq!(
        running
            .logged_at("ERROR", "The diff-base of this object")
            .len(),
        1
    );
    running.stop().await;
}
