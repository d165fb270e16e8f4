//! The examples against the fake API server: what they do to the object, and the exact
//! requests they send.

#[path = "../examples/handlers.rs"]
mod handlers_example;

#[path = "../examples/errors.rs"]
mod errors_example;

#[path = "../examples/filters.rs"]
mod filters_example;

#[path = "../examples/events.rs"]
mod events_example;

use std::time::Duration;

use kopf::Operator;
use kopf_testing::FakeApiServer;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn crd() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/crd.yaml"
    ))
    .expect("crd.yaml");
    serde_saphyr::from_str(&text).expect("crd yaml")
}

struct Harness {
    server: FakeApiServer,
    api: Api<DynamicObject>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), kopf::Error>>,
}

async fn run(op: Operator) -> Harness {
    let server = FakeApiServer::start().await.expect("start");
    server.apply_object(crd()).expect("crd");
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let client = server.client();
    let task = tokio::spawn(async move {
        op.run_until(client, async {
            let _ = rx.await;
        })
        .await
    });
    for _ in 0..200 {
        if !server.watches().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    let api = Api::namespaced_with(server.client(), "default", &ar);
    Harness {
        server,
        api,
        stop,
        task,
    }
}

impl Harness {
    async fn until(&self, what: &str, check: impl Fn(Option<&DynamicObject>) -> bool) {
        for _ in 0..400 {
            let o = self.api.get_opt("kopf-example-1").await.expect("get");
            if check(o.as_ref()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("timed out waiting for {what}");
    }

    /// The operator's writes so far, normalised (resourceVersions).
    fn writes(&self) -> Vec<Value> {
        self.server
            .requests()
            .into_iter()
            .filter(|r| {
                matches!(r.method.as_str(), "PATCH" | "POST") && !r.path.ends_with("/kopfexamples")
            })
            .map(|r| {
                let mut body: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
                if let Some(ops) = body.as_array_mut() {
                    for op in ops
                        .iter_mut()
                        .filter(|op| op["path"] == "/metadata/resourceVersion")
                    {
                        op["value"] = json!("<rv>");
                    }
                }
                json!({"method": r.method, "path": r.path, "patch": r.patch_type, "body": body})
            })
            .collect()
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.expect("join").expect("operator ran");
    }
}

fn example_object() -> DynamicObject {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/obj.yaml"
    ))
    .expect("obj.yaml");
    serde_saphyr::from_str(&text).expect("obj yaml")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_example_create_update_delete() {
    let h = run(handlers_example::operator()).await;
    h.server.clear_requests();
    h.api
        .create(&PostParams::default(), &example_object())
        .await
        .expect("create");
    h.until("creation", |o| {
        o.is_some_and(|o| o.data["status"]["create_fn"]["message"] == "created")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    h.api
        .patch(
            "kopf-example-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"field": "changed"}})),
        )
        .await
        .expect("update");
    h.until("the update", |o| {
        o.is_some_and(|o| o.data["status"]["update_fn"]["message"] == "updated")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    h.api
        .delete("kopf-example-1", &DeleteParams::default())
        .await
        .expect("delete");
    h.until("the deletion", |o| o.is_none()).await;
    let o = h.writes();
    insta::assert_json_snapshot!("handlers_example", o);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_example_retries_and_fails_as_told() {
    let h = run(errors_example::operator()).await;
    h.api
        .create(&PostParams::default(), &example_object())
        .await
        .expect("create");
    h.until("the eventual success", |o| {
        o.is_some_and(|o| o.data["status"]["eventually_fn"] == "done after 2 retries")
    })
    .await;
    // All three handlers finished (one succeeded, two failed for good): the cause is done,
    // the progress records are purged and the diff-base written.
    h.until("the purge", |o| {
        o.and_then(|o| o.metadata.annotations.clone())
            .is_some_and(|a| {
                a.contains_key("kopf.zalando.org/last-handled-configuration")
                    && !a.keys().any(|k| k.ends_with("_fn"))
            })
    })
    .await;
    let o = h.api.get("kopf-example-1").await.expect("get");
    assert!(
        o.data["status"].get("permanent_fn").is_none(),
        "failed handlers deliver nothing"
    );
    assert!(o.data["status"].get("flaky_fn").is_none());
    let events: Vec<String> = h
        .server
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/events"))
        .map(|r| r.body)
        .collect();
    assert!(
        !events.is_empty() && events.iter().all(|e| e.contains("\"Warning\"")),
        "{events:?}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_example_runs_only_matching_handlers() {
    let h = run(filters_example::operator()).await;
    h.api
        .create(&PostParams::default(), &example_object())
        .await
        .expect("create");
    h.until("the filtered handlers", |o| {
        o.is_some_and(|o| o.data["status"].get("when_fn").is_some())
    })
    .await;
    let o = h.api.get("kopf-example-1").await.expect("get");
    let mut ran: Vec<String> = o.data["status"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    ran.sort();
    assert_eq!(ran, vec!["annotated_fn", "labelled_fn", "when_fn"]);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_example_posts_an_event_in_kopfs_shape() {
    let h = run(events_example::operator()).await;
    h.api
        .create(&PostParams::default(), &example_object())
        .await
        .expect("create");
    let events: Api<DynamicObject> = Api::namespaced_with(
        h.server.client(),
        "default",
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Event"), "events"),
    );
    let mut found = None;
    for _ in 0..400 {
        let list = events.list(&Default::default()).await.expect("events");
        if let Some(e) = list.items.into_iter().next() {
            found = Some(e);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let e = found.expect("an event was posted");
    assert_eq!(e.data["type"], "Normal");
    assert_eq!(e.data["reason"], "Greeting");
    assert_eq!(e.data["message"], "Hello, kopf-example-1!");
    assert_eq!(e.data["involvedObject"]["kind"], "KopfExample");
    assert_eq!(e.data["reportingComponent"], "kopf");
    h.stop().await;
}
