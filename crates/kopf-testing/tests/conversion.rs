//! CRD conversion webhooks: a CRD with v1 (storage) and v2, converted by a real HTTPS
//! webhook: v1 has `spec.field`, v2 calls it `spec.value`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::webhook::{
    TestWebhook, configuration, conversion_crd, conversion_handler, rule, webhook,
};
use futures::StreamExt;
use kopf_testing::{FakeApiServer, WebhookOutcome};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn api(client: kube::Client, version: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", version, "KopfExample"),
        "kopfexamples",
    );
    Api::namespaced_with(client, "default", &ar)
}

fn obj(version: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": format!("kopf.dev/{version}"), "kind": "KopfExample",
        "metadata": {"name": name, "labels": {"app": "demo"}}, "spec": spec}),
    )
    .expect("object")
}

fn stored(server: &FakeApiServer, name: &str) -> Value {
    server
        .objects()
        .into_iter()
        .find(|o| o["kind"] == "KopfExample" && o["metadata"]["name"].as_str() == Some(name))
        .expect("stored")
}

#[tokio::test]
async fn objects_are_stored_in_the_storage_version_and_served_in_any() {
    let fail = Arc::new(AtomicBool::new(false));
    let hook = TestWebhook::start(conversion_handler(fail.clone())).await;
    let server = FakeApiServer::start().await.expect("start");
    server.apply_object(conversion_crd(&hook)).expect("CRD");
    let v1 = api(server.client(), "v1");
    let v2 = api(server.client(), "v2");

    // Created as v1, read as v2.
    v1.create(
        &PostParams::default(),
        &obj("v1", "a", json!({"field": "one"})),
    )
    .await
    .expect("create v1");
    assert!(
        hook.all().is_empty(),
        "no conversion for the storage version"
    );
    let got = v2.get("a").await.expect("get v2");
    assert_eq!(
        got.types.as_ref().map(|t| t.api_version.as_str()),
        Some("kopf.dev/v2")
    );
    assert_eq!(got.data["spec"], json!({"value": "one"}));
    assert_eq!(
        got.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str),
        Some("demo")
    );

    // Created as v2: stored as v1, answered as v2.
    let created = v2
        .create(
            &PostParams::default(),
            &obj("v2", "b", json!({"value": "two"})),
        )
        .await
        .expect("create v2");
    assert_eq!(created.data["spec"], json!({"value": "two"}));
    assert!(created.metadata.uid.is_some());
    let raw = stored(&server, "b");
    assert_eq!(raw["apiVersion"], "kopf.dev/v1");
    assert_eq!(raw["spec"], json!({"field": "two"}));
    assert_eq!(
        v1.get("b").await.expect("get v1").data["spec"],
        json!({"field": "two"})
    );

    // A list in v2: one review for both objects.
    server.clear_webhook_calls();
    let list = v2.list(&Default::default()).await.expect("list v2");
    let specs: Vec<Value> = list.items.iter().map(|o| o.data["spec"].clone()).collect();
    assert_eq!(specs, [json!({"value": "one"}), json!({"value": "two"})]);
    let calls = server.webhook_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].outcome, WebhookOutcome::Converted { objects: 2 });
    assert_eq!(calls[0].configuration_kind, "CustomResourceDefinition");
    assert_eq!(calls[0].configuration, "kopfexamples.kopf.dev");
    assert_eq!(calls[0].operation, "CONVERT");
    assert_eq!(calls[0].resource, "kopf.dev/v2/kopfexamples");

    // A patch through v2 lands in v1.
    let patched = v2
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"value": "uno"}})),
        )
        .await
        .expect("patch v2");
    assert_eq!(patched.data["spec"], json!({"value": "uno"}));
    assert_eq!(stored(&server, "a")["spec"], json!({"field": "uno"}));
    assert_eq!(patched.metadata.generation, Some(2));

    // The review as sent.
    let reviews = hook.bodies("/convert");
    let review = &reviews[0];
    assert_eq!(review["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(review["kind"], "ConversionReview");
    assert_eq!(review["request"]["desiredAPIVersion"], "kopf.dev/v2");
    assert_eq!(review["request"]["objects"][0]["apiVersion"], "kopf.dev/v1");
    assert!(hook.all()[0].0.ends_with("?timeout=30s"));

    // A failing conversion fails the read.
    fail.store(true, Ordering::SeqCst);
    let e = match v2.get("a").await.expect_err("conversion fails") {
        kube::Error::Api(s) => s,
        other => panic!("not an API error: {other}"),
    };
    assert_eq!(e.code, 500);
    assert_eq!(
        e.message,
        "conversion webhook for kopf.dev/v1, Kind=KopfExample failed: the converter is broken"
    );
    assert!(
        v1.get("a").await.is_ok(),
        "the storage version needs no conversion"
    );
}

#[tokio::test]
async fn watches_deliver_converted_objects() {
    let hook = TestWebhook::start(conversion_handler(Arc::default())).await;
    let server = FakeApiServer::start().await.expect("start");
    server.apply_object(conversion_crd(&hook)).expect("CRD");
    let v1 = api(server.client(), "v1");
    let v2 = api(server.client(), "v2");
    v1.create(
        &PostParams::default(),
        &obj("v1", "a", json!({"field": "one"})),
    )
    .await
    .expect("create");
    let mut events = v2
        .watch(&WatchParams::default().timeout(10), "0")
        .await
        .expect("watch")
        .boxed();
    match events.next().await.expect("an event").expect("ok") {
        WatchEvent::Added(o) => {
            assert_eq!(
                o.types.as_ref().map(|t| t.api_version.as_str()),
                Some("kopf.dev/v2")
            );
            assert_eq!(o.data["spec"], json!({"value": "one"}));
        }
        other => panic!("not ADDED: {other:?}"),
    }
    v1.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"field": "changed"}})),
    )
    .await
    .expect("patch v1");
    match events.next().await.expect("an event").expect("ok") {
        WatchEvent::Modified(o) => assert_eq!(o.data["spec"], json!({"value": "changed"})),
        other => panic!("not MODIFIED: {other:?}"),
    }
}

#[tokio::test]
async fn equivalent_admission_webhooks_see_their_version() {
    let hook = TestWebhook::start(conversion_handler(Arc::default())).await;
    let server = FakeApiServer::start().await.expect("start");
    server.apply_object(conversion_crd(&hook)).expect("CRD");
    server
        .apply_object(configuration(
            false,
            "v1-only",
            vec![
                webhook(
                    "equivalent.kopf.dev",
                    hook.client_config("/admit/equivalent"),
                    rule(&["CREATE"], "kopf.dev", "v1", &["kopfexamples"]),
                    json!({}),
                ),
                webhook(
                    "exact.kopf.dev",
                    hook.client_config("/admit/exact"),
                    rule(&["CREATE"], "kopf.dev", "v1", &["kopfexamples"]),
                    json!({"matchPolicy": "Exact"}),
                ),
            ],
        ))
        .expect("configuration");
    let v2 = api(server.client(), "v2");
    v2.create(
        &PostParams::default(),
        &obj("v2", "a", json!({"value": "two"})),
    )
    .await
    .expect("create v2");
    assert!(
        hook.bodies("/admit/exact").is_empty(),
        "Exact does not match v2"
    );
    let req = &hook.bodies("/admit/equivalent")[0]["request"];
    assert_eq!(
        req["kind"],
        json!({"group": "kopf.dev", "version": "v1", "kind": "KopfExample"})
    );
    assert_eq!(req["resource"]["version"], "v1");
    assert_eq!(req["requestKind"]["version"], "v2");
    assert_eq!(req["requestResource"]["version"], "v2");
    assert_eq!(req["object"]["apiVersion"], "kopf.dev/v1");
    assert_eq!(req["object"]["spec"], json!({"field": "two"}));
    let calls = server.webhook_calls();
    assert!(calls.iter().any(|c| c.webhook == "equivalent.kopf.dev" && c.resource == "kopf.dev/v1/kopfexamples"));
}

#[tokio::test]
async fn conversion_settings_are_validated() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = common::Raw::new(&server);
    let mut bad = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "kopfexamples.kopf.dev"},
        "spec": {"group": "kopf.dev", "scope": "Namespaced",
            "names": {"kind": "KopfExample", "plural": "kopfexamples"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object"}}}],
            "conversion": {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": "http://127.0.0.1:1/convert"},
                "conversionReviewVersions": ["v2"]}}}});
    let r = raw
        .post_json(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &bad,
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    let message = r.json()["message"].as_str().unwrap_or("").to_string();
    assert!(message.contains("spec.conversion.webhook.clientConfig.url: Invalid value: \"http://127.0.0.1:1/convert\": 'https' is the only allowed URL scheme"), "{message}");
    assert!(
        message.contains("spec.conversion.webhook.conversionReviewVersions: Invalid value"),
        "{message}"
    );
    bad["spec"]["conversion"] = json!({"strategy": "Sideways"});
    let r = raw
        .post_json(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &bad,
        )
        .await;
    assert_eq!(r.status, 422);
    assert!(
        r.body
            .contains("supported values: \\\"None\\\", \\\"Webhook\\\""),
        "{}",
        r.body
    );
}
