//! Admission webhooks: the fake calls a real HTTPS webhook server (a generated CA, a leaf
//! for 127.0.0.1) as kube-apiserver would, and clients see the outcome.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use common::webhook::{
    Pki, Reply, TestWebhook, admission_response, configuration, patch_fields, rule, webhook,
};
use common::{Raw, kopfexample_crd};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kopf_testing::{FakeApiServer, WebhookOutcome};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn cm(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).expect("configmap")
}

fn cm_labelled(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"a": "b"}}),
    )
    .expect("configmap")
}

fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other}"),
    }
}

fn allow(review: &Value) -> Reply {
    admission_response(review, true, json!({})).into()
}

/// A validating configuration for ConfigMap creates and updates.
fn validating_cm(hook: &TestWebhook, name: &str, extra: Value) -> Value {
    configuration(
        false,
        name,
        vec![webhook(
            &format!("{name}.kopf.dev"),
            hook.client_config("/validate"),
            rule(&["CREATE", "UPDATE"], "", "v1", &["configmaps"]),
            extra,
        )],
    )
}

#[tokio::test]
async fn a_denial_reaches_the_client_and_nothing_is_stored() {
    let hook = TestWebhook::start(Arc::new(|_, review: &Value| {
        match review.pointer("/request/object/data/bad").and_then(Value::as_str) {
            Some("forbidden") => admission_response(
                review,
                false,
                json!({"status": {"code": 403, "reason": "Forbidden", "message": "bad data is not allowed"}}),
            )
            .into(),
            Some(_) => admission_response(review, false, json!({})).into(),
            None => allow(review),
        }
    }))
    .await;
    let server = FakeApiServer::start().await.expect("start");
    server
        .apply_object(validating_cm(&hook, "deny", json!({})))
        .expect("configuration");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let rv = server.resource_version();

    let s = api_error(
        cms.create(
            &PostParams::default(),
            &cm("c1", json!({"bad": "forbidden"})),
        )
        .await
        .expect_err("denied"),
    );
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        s.message,
        "admission webhook \"deny.kopf.dev\" denied the request: bad data is not allowed"
    );
    // Without a status the code is 400 and the message says so.
    let s = api_error(
        cms.create(&PostParams::default(), &cm("c1", json!({"bad": "x"})))
            .await
            .expect_err("denied"),
    );
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        s.message,
        "admission webhook \"deny.kopf.dev\" denied the request without explanation"
    );
    assert_eq!(server.resource_version(), rv, "nothing was stored");
    assert!(cms.get_opt("c1").await.expect("get").is_none());

    // Allowed objects are stored; updates are reviewed too.
    cms.create(&PostParams::default(), &cm("c1", json!({"good": "yes"})))
        .await
        .expect("allowed");
    let s = api_error(
        cms.patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"bad": "x"}})),
        )
        .await
        .expect_err("denied update"),
    );
    assert_eq!(s.code, 400);
    let stored = cms.get("c1").await.expect("get");
    assert!(!stored.data.unwrap_or_default().contains_key("bad"));

    let calls = server.webhook_calls();
    let outcomes: Vec<&str> = calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["denied", "denied", "allowed", "denied"]);
    assert_eq!(
        calls[0].outcome,
        WebhookOutcome::Denied {
            code: 403,
            message:
                "admission webhook \"deny.kopf.dev\" denied the request: bad data is not allowed"
                    .into()
        }
    );
    assert_eq!(
        calls[0].configuration_kind,
        "ValidatingWebhookConfiguration"
    );
    assert_eq!(calls[0].configuration, "deny");
    assert_eq!(calls[0].webhook, "deny.kopf.dev");
    assert_eq!(calls[0].operation, "CREATE");
    assert_eq!(calls[0].resource, "v1/configmaps");
    assert_eq!(
        (calls[0].namespace.as_str(), calls[0].name.as_str()),
        ("default", "c1")
    );
    assert_eq!(calls[3].operation, "UPDATE");

    // The review as sent.
    let all = hook.all();
    assert_eq!(all[0].0, "/validate?timeout=10s");
    let review = &all[0].1;
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    let req = &review["request"];
    assert_eq!(
        req["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        req["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(req["requestKind"], req["kind"]);
    assert_eq!(req["requestResource"], req["resource"]);
    assert!(req.get("subResource").is_none());
    assert_eq!(req["name"], "c1");
    assert_eq!(req["namespace"], "default");
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(req["userInfo"]["username"], "system:admin");
    assert_eq!(
        req["userInfo"]["groups"],
        json!(["system:masters", "system:authenticated"])
    );
    assert_eq!(req["object"]["data"]["bad"], "forbidden");
    assert_eq!(req["object"]["kind"], "ConfigMap");
    assert!(req["oldObject"].is_null());
    assert_eq!(req["dryRun"], false);
    assert_eq!(req["options"]["kind"], "CreateOptions");
    assert_eq!(req["options"]["apiVersion"], "meta.k8s.io/v1");
    assert_ne!(all[0].1["request"]["uid"], all[1].1["request"]["uid"]);
    assert!(uuid::Uuid::parse_str(req["uid"].as_str().expect("uid")).is_ok());
    let update = &all[3].1["request"];
    assert_eq!(update["operation"], "UPDATE");
    assert_eq!(update["options"]["kind"], "UpdateOptions");
    assert_eq!(update["oldObject"]["data"], json!({"good": "yes"}));
    assert_eq!(update["object"]["data"], json!({"good": "yes", "bad": "x"}));
}

#[tokio::test]
async fn mutations_apply_in_order_and_are_stored() {
    let hook = TestWebhook::start(Arc::new(|path: &str, review: &Value| {
        let obj = &review["request"]["object"];
        if path.starts_with("/first") {
            let op = if obj.pointer("/metadata/labels").is_some() {
                json!([{"op": "add", "path": "/metadata/labels/first", "value": "yes"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"first": "yes"}}])
            };
            admission_response(review, true, patch_fields(op)).into()
        } else {
            // The second webhook sees the first one's result.
            let seen = obj
                .pointer("/metadata/labels/first")
                .and_then(Value::as_str)
                .unwrap_or("no");
            let op = json!([{"op": "add", "path": "/metadata/annotations", "value": {"seen-first": seen}}]);
            admission_response(review, true, patch_fields(op)).into()
        }
    }))
    .await;
    let server = FakeApiServer::start().await.expect("start");
    let rules = rule(&["CREATE"], "", "v1", &["configmaps"]);
    // Added in reverse order: the order is by configuration name.
    server
        .apply_object(configuration(
            true,
            "b-second",
            vec![webhook(
                "second.kopf.dev",
                hook.client_config("/second"),
                rules.clone(),
                json!({}),
            )],
        ))
        .expect("second");
    server
        .apply_object(configuration(
            true,
            "a-first",
            vec![webhook(
                "first.kopf.dev",
                hook.client_config("/first"),
                rules,
                json!({}),
            )],
        ))
        .expect("first");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let created = cms
        .create(&PostParams::default(), &cm("c1", json!({"a": "b"})))
        .await
        .expect("create");
    let labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("first").map(String::as_str), Some("yes"));
    let ann = created.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(ann.get("seen-first").map(String::as_str), Some("yes"));
    let stored = cms.get("c1").await.expect("get");
    assert_eq!(stored.metadata.labels, created.metadata.labels);
    assert_eq!(stored.metadata.annotations, created.metadata.annotations);
    let calls = server.webhook_calls();
    let names: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c.configuration.as_str(), c.outcome.as_str()))
        .collect();
    assert_eq!(names, [("a-first", "patched"), ("b-second", "patched")]);
    assert_eq!(calls[0].configuration_kind, "MutatingWebhookConfiguration");
    // Admission sees a create before the server fills uid and creationTimestamp.
    let first = &hook.bodies("/first")[0]["request"]["object"];
    assert!(first["metadata"].get("uid").is_none());
    assert!(first["metadata"]["creationTimestamp"].is_null());
    assert!(stored.metadata.uid.is_some());
}

#[tokio::test]
async fn a_mutation_can_fix_an_object_the_schema_would_reject() {
    let hook = TestWebhook::start(Arc::new(|_, review: &Value| {
        let op = json!([{"op": "replace", "path": "/spec/field", "value": "fixed"}]);
        admission_response(review, true, patch_fields(op)).into()
    }))
    .await;
    let server = FakeApiServer::start().await.expect("start");
    let mut crd = kopfexample_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = json!({
        "type": "object", "properties": {"field": {"type": "string", "minLength": 3},
            "size": {"type": "integer", "default": 5}}});
    server.apply_object(crd).expect("CRD");
    server
        .apply_object(configuration(
            true,
            "fixer",
            vec![webhook(
                "fixer.kopf.dev",
                hook.client_config("/fix"),
                rule(&["CREATE"], "kopf.dev", "v1", &["kopfexamples"]),
                json!({}),
            )],
        ))
        .expect("configuration");
    let api = kex_api(server.client(), "v1");
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": "k1"}, "spec": {"field": "x"}}))
    .expect("object");
    let created = api
        .create(&PostParams::default(), &obj)
        .await
        .expect("the mutation makes it valid");
    assert_eq!(created.data["spec"]["field"], "fixed");
    // The webhook saw the defaulted, not yet validated object.
    let seen = &hook.bodies("/fix")[0]["request"]["object"]["spec"];
    assert_eq!(seen, &json!({"field": "x", "size": 5}));
}

fn kex_api(client: kube::Client, version: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", version, "KopfExample"),
        "kopfexamples",
    );
    Api::namespaced_with(client, "default", &ar)
}

#[tokio::test]
async fn warnings_arrive_as_headers() {
    let hook = TestWebhook::start(Arc::new(|_, review: &Value| {
        let deny = review
            .pointer("/request/object/metadata/name")
            .and_then(Value::as_str)
            == Some("denied");
        admission_response(
            review,
            !deny,
            json!({"warnings": ["first warning", "say \"hi\" \\ bye"]}),
        )
        .into()
    }))
    .await;
    let server = FakeApiServer::start().await.expect("start");
    server
        .apply_object(validating_cm(&hook, "warn", json!({})))
        .expect("configuration");
    let raw = Raw::new(&server);
    let warnings = |r: &common::RawResponse| -> Vec<String> {
        r.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("warning"))
            .map(|(_, v)| v.clone())
            .collect()
    };
    let ok = raw
        .post_json(
            "/api/v1/namespaces/default/configmaps",
            &json!({"metadata": {"name": "c1"}}),
        )
        .await;
    assert_eq!(ok.status, 201);
    assert_eq!(
        warnings(&ok),
        [r#"299 - "first warning""#, r#"299 - "say \"hi\" \\ bye""#]
    );
    let denied = raw
        .post_json(
            "/api/v1/namespaces/default/configmaps",
            &json!({"metadata": {"name": "denied"}}),
        )
        .await;
    assert_eq!(denied.status, 400);
    assert_eq!(warnings(&denied).len(), 2, "warnings come with denials too");
}

#[tokio::test]
async fn failure_policy_decides_when_the_webhook_is_down() {
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let pki = Pki::new(&["127.0.0.1"]);
    let down =
        json!({"url": format!("https://127.0.0.1:{port}/validate"), "caBundle": pki.ca_bundle()});
    let server = FakeApiServer::start().await.expect("start");
    let rules = rule(&["CREATE"], "", "v1", &["configmaps"]);
    server
        .apply_object(configuration(
            false,
            "down",
            vec![webhook(
                "down.kopf.dev",
                down.clone(),
                rules.clone(),
                json!({}),
            )],
        ))
        .expect("configuration");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let s = api_error(
        cms.create(&PostParams::default(), &cm("c1", json!({})))
            .await
            .expect_err("fails"),
    );
    assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"));
    assert_eq!(
        s.message,
        format!(
            "Internal error occurred: failed calling webhook \"down.kopf.dev\": failed to call webhook: Post \"https://127.0.0.1:{port}/validate?timeout=10s\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
    assert!(cms.get_opt("c1").await.expect("get").is_none());
    // Ignore: the request proceeds.
    server
        .apply_object(configuration(
            false,
            "down",
            vec![webhook(
                "down.kopf.dev",
                down,
                rules,
                json!({"failurePolicy": "Ignore"}),
            )],
        ))
        .expect("configuration");
    cms.create(&PostParams::default(), &cm("c1", json!({})))
        .await
        .expect("ignored");
    let calls = server.webhook_calls();
    assert!(
        matches!(&calls[0].outcome, WebhookOutcome::Failed { error } if error.contains("connection refused"))
    );
    assert!(
        matches!(&calls[1].outcome, WebhookOutcome::Ignored { error } if error.contains("connection refused"))
    );
}

#[tokio::test]
async fn a_slow_webhook_times_out() {
    let hook = TestWebhook::start(Arc::new(|_, review: &Value| Reply {
        delay: Some(Duration::from_secs(5)),
        body: admission_response(review, true, json!({})),
    }))
    .await;
    let server = FakeApiServer::start().await.expect("start");
    server
        .apply_object(validating_cm(&hook, "slow", json!({"timeoutSeconds": 1})))
        .expect("configuration");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let started = Instant::now();
    let s = api_error(
        cms.create(&PostParams::default(), &cm("c1", json!({})))
            .await
            .expect_err("times out"),
    );
    let took = started.elapsed();
    assert_eq!(s.code, 500);
    assert!(
        s.message.ends_with(&format!(
            "failed to call webhook: Post \"{}\": context deadline exceeded",
            hook.url("/validate?timeout=1s")
        )),
        "{}",
        s.message
    );
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert!(server.webhook_calls()[0].duration >= Duration::from_millis(900));
}

#[tokio::test]
async fn the_ca_bundle_is_the_only_trust() {
    let hook = TestWebhook::start(Arc::new(|_, review: &Value| allow(review))).await;
    let other = Pki::new(&["127.0.0.1"]);
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let rules = rule(&["CREATE"], "", "v1", &["configmaps"]);
    for (i, client_config) in [
        json!({"url": hook.url("/validate"), "caBundle": other.ca_bundle()}),
        json!({"url": hook.url("/validate")}),
    ]
    .into_iter()
    .enumerate()
    {
        server
            .apply_object(configuration(
                false,
                "tls",
                vec![webhook(
                    "tls.kopf.dev",
                    client_config.clone(),
                    rules.clone(),
                    json!({}),
                )],
            ))
            .expect("configuration");
        let s = api_error(
            cms.create(&PostParams::default(), &cm(&format!("c{i}"), json!({})))
                .await
                .expect_err("verification fails"),
        );
        assert_eq!(s.code, 500);
        assert!(
            s.message.ends_with(
                "tls: failed to verify certificate: x509: certificate signed by unknown authority"
            ),
            "{}",
            s.message
        );
        // With Ignore the request proceeds.
        server
            .apply_object(configuration(
                false,
                "tls",
                vec![webhook(
                    "tls.kopf.dev",
                    client_config,
                    rules.clone(),
                    json!({"failurePolicy": "Ignore"}),
                )],
            ))
            .expect("configuration");
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), json!({})))
            .await
            .expect("ignored");
    }
    assert!(hook.all().is_empty(), "no request got through");
    // The right bundle works.
    server
        .apply_object(validating_cm(&hook, "tls", json!({})))
        .expect("configuration");
    cms.create(&PostParams::default(), &cm("c9", json!({})))
        .await
        .expect("verified");
    assert_eq!(hook.all().len(), 1);
}

#[tokio::test]
async fn invalid_responses_are_call_failures() {
    let hook = TestWebhook::start(Arc::new(|path: &str, review: &Value| {
        let mut answer = admission_response(review, true, json!({}));
        if path.starts_with("/uid") {
            answer["response"]["uid"] = json!("someone-else");
        } else if path.starts_with("/version") {
            answer["apiVersion"] = json!("admission.k8s.io/v1beta1");
        } else if path.starts_with("/patch") {
            answer = admission_response(
                review,
                true,
                json!({"patch": patch_fields(json!([]))["patch"]}),
            );
        }
        answer.into()
    }))
    .await;
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    for (path, mutating, needle) in [
        (
            "/uid",
            false,
            "received invalid webhook response: expected response.uid=",
        ),
        (
            "/version",
            false,
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got admission.k8s.io/v1beta1, Kind=AdmissionReview",
        ),
        (
            "/patch",
            false,
            "validating webhooks may not return patches",
        ),
        (
            "/patch",
            true,
            "webhook returned response.patch but not response.patchType",
        ),
    ] {
        let name = if mutating { "m" } else { "v" };
        server
            .apply_object(configuration(
                mutating,
                name,
                vec![webhook(
                    &format!("{name}.kopf.dev"),
                    hook.client_config(path),
                    rule(&["CREATE"], "", "v1", &["configmaps"]),
                    json!({}),
                )],
            ))
            .expect("configuration");
        let s = api_error(
            cms.create(&PostParams::default(), &cm("c1", json!({})))
                .await
                .expect_err("invalid response"),
        );
        assert_eq!(s.code, 500);
        assert!(s.message.contains(needle), "{needle} not in {}", s.message);
        assert!(s.message.starts_with(&format!(
            "Internal error occurred: failed calling webhook \"{name}.kopf.dev\": "
        )));
        let kind = if mutating {
            "mutatingwebhookconfigurations"
        } else {
            "validatingwebhookconfigurations"
        };
        let api: Api<DynamicObject> = Api::all_with(
            server.client(),
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", "X"),
                kind,
            ),
        );
        api.delete(name, &DeleteParams::default())
            .await
            .expect("deleted");
    }
}

#[tokio::test]
async fn services_are_reached_through_the_mapping() {
    let hook = TestWebhook::start(Arc::new(|_, review: &Value| allow(review))).await;
    let server = FakeApiServer::builder()
        .webhook_service("webhooks", "hooks", 8443, hook.addr.to_string())
        .start()
        .await
        .expect("start");
    let service = |name: &str| {
        json!({"service": {"namespace": "webhooks", "name": name, "port": 8443, "path": "/validate"},
            "caBundle": hook.pki.ca_bundle()})
    };
    let rules = rule(&["CREATE"], "", "v1", &["configmaps"]);
    server
        .apply_object(configuration(
            false,
            "svc",
            vec![webhook(
                "svc.kopf.dev",
                service("hooks"),
                rules.clone(),
                json!({}),
            )],
        ))
        .expect("configuration");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    cms.create(&PostParams::default(), &cm("c1", json!({})))
        .await
        .expect("called through the service");
    assert_eq!(hook.all()[0].0, "/validate?timeout=10s");
    server
        .apply_object(configuration(
            false,
            "svc",
            vec![webhook(
                "svc.kopf.dev",
                service("missing"),
                rules,
                json!({}),
            )],
        ))
        .expect("configuration");
    let s = api_error(
        cms.create(&PostParams::default(), &cm("c2", json!({})))
            .await
            .expect_err("no such service"),
    );
    assert!(
        s.message.ends_with(
            "Post \"https://missing.webhooks.svc:8443/validate?timeout=10s\": service \"missing\" not found"
        ),
        "{}",
        s.message
    );
    // A mapping added at run time.
    server.set_webhook_service("webhooks", "missing", 8443, Some(&hook.addr.to_string()));
    let s = api_error(
        cms.create(&PostParams::default(), &cm("c2", json!({})))
            .await
            .expect_err("the certificate is not for this name"),
    );
    assert!(
        s.message.contains("tls: failed to verify certificate"),
        "{}",
        s.message
    );
}

#[tokio::test]
async fn dry_runs_call_webhooks_with_dry_run_set() {
    let hook = TestWebhook::start(Arc::new(|_, review: &Value| allow(review))).await;
    let server = FakeApiServer::start().await.expect("start");
    server
        .apply_object(validating_cm(
            &hook,
            "dry",
            json!({"sideEffects": "NoneOnDryRun"}),
        ))
        .expect("configuration");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let rv = server.resource_version();
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let created = cms
        .create(&pp, &cm("c1", json!({"a": "b"})))
        .await
        .expect("dry run");
    assert_eq!(created.metadata.name.as_deref(), Some("c1"));
    assert_eq!(server.resource_version(), rv);
    assert!(cms.get_opt("c1").await.expect("get").is_none());
    let req = &hook.bodies("/validate")[0]["request"];
    assert_eq!(req["dryRun"], true);
    assert_eq!(req["options"]["dryRun"], json!(["All"]));
    assert!(server.webhook_calls()[0].dry_run);
    // The calls are also served to non-Rust clients.
    let raw = Raw::new(&server);
    let calls = raw.get("/__kopf/webhook-calls").await.json();
    assert_eq!(calls[0]["webhook"], "dry.kopf.dev");
    assert_eq!(calls[0]["outcome"], json!({"type": "allowed"}));
    assert_eq!(calls[0]["dryRun"], true);
    assert!(calls[0]["durationMillis"].as_f64().is_some());
    raw.send("DELETE", "/__kopf/webhook-calls", None, b"").await;
    assert!(server.webhook_calls().is_empty());
}

#[tokio::test]
async fn selectors_choose_the_objects() {
    let hook = TestWebhook::start(Arc::new(|_, review: &Value| allow(review))).await;
    let server = FakeApiServer::start().await.expect("start");
    let client = server.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for (name, labels) in [
        ("watched", json!({"webhooks": "on"})),
        ("ignored", json!({})),
    ] {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
                .expect("namespace");
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace");
    }
    server
        .apply_object(configuration(
            false,
            "selected",
            vec![
                webhook(
                    "by-namespace.kopf.dev",
                    hook.client_config("/ns"),
                    json!([{"operations": ["CREATE"], "apiGroups": ["", "rbac.authorization.k8s.io"],
                        "apiVersions": ["v1"], "resources": ["configmaps", "clusterroles"]}]),
                    json!({"namespaceSelector": {"matchLabels": {"webhooks": "on"}}}),
                ),
                webhook(
                    "by-object.kopf.dev",
                    hook.client_config("/obj"),
                    rule(&["CREATE", "UPDATE"], "", "v1", &["configmaps"]),
                    json!({"objectSelector": {"matchExpressions": [
                        {"key": "app", "operator": "In", "values": ["a", "b"]},
                        {"key": "skip", "operator": "DoesNotExist"}]}}),
                ),
            ],
        ))
        .expect("configuration");
    for ns in ["watched", "ignored"] {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        cms.create(&PostParams::default(), &cm_labelled("plain", json!({})))
            .await
            .expect("create");
        cms.create(
            &PostParams::default(),
            &cm_labelled("app-a", json!({"app": "a"})),
        )
        .await
        .expect("create");
        cms.create(
            &PostParams::default(),
            &cm_labelled("skipped", json!({"app": "a", "skip": "yes"})),
        )
        .await
        .expect("create");
    }
    let names = |path: &str| -> Vec<String> {
        hook.bodies(path)
            .iter()
            .map(|b| {
                format!(
                    "{}/{}",
                    b["request"]["namespace"].as_str().unwrap_or(""),
                    b["request"]["name"].as_str().unwrap_or("")
                )
            })
            .collect()
    };
    assert_eq!(
        names("/ns"),
        ["watched/plain", "watched/app-a", "watched/skipped"]
    );
    assert_eq!(names("/obj"), ["watched/app-a", "ignored/app-a"]);
    // The old object's labels count too: removing the label is still reviewed.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "ignored");
    cms.patch(
        "app-a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": null}}})),
    )
    .await
    .expect("patch");
    assert_eq!(names("/obj").len(), 3);
    // Cluster-scoped objects are not subject to namespaceSelector.
    let roles: Api<ClusterRole> = Api::all(client);
    let role: ClusterRole =
        serde_json::from_value(json!({"metadata": {"name": "r1"}})).expect("role");
    roles
        .create(&PostParams::default(), &role)
        .await
        .expect("role");
    assert_eq!(names("/ns").last().map(String::as_str), Some("/r1"));
}

#[tokio::test]
async fn webhooks_whose_rules_do_not_match_are_not_called() {
    let hook = TestWebhook::start(Arc::new(|_, review: &Value| allow(review))).await;
    let server = FakeApiServer::start().await.expect("start");
    let cc = |p: &str| hook.client_config(p);
    server
        .apply_object(configuration(
            false,
            "rules",
            vec![
                webhook(
                    "secrets.kopf.dev",
                    cc("/secrets"),
                    rule(&["*"], "", "v1", &["secrets"]),
                    json!({}),
                ),
                webhook(
                    "updates.kopf.dev",
                    cc("/updates"),
                    rule(&["UPDATE"], "", "v1", &["configmaps"]),
                    json!({}),
                ),
                webhook(
                    "v2.kopf.dev",
                    cc("/v2"),
                    rule(&["*"], "", "v2", &["configmaps"]),
                    json!({}),
                ),
                webhook(
                    "cluster.kopf.dev",
                    cc("/cluster"),
                    rule(&["*"], "", "v1", &["configmaps"]),
                    json!({"rules": [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"],
                        "resources": ["configmaps"], "scope": "Cluster"}]}),
                ),
                webhook(
                    "status.kopf.dev",
                    cc("/status"),
                    rule(&["*"], "", "v1", &["configmaps/status"]),
                    json!({}),
                ),
                webhook(
                    "everything.kopf.dev",
                    cc("/everything"),
                    rule(&["*"], "admissionregistration.k8s.io", "*", &["*"]),
                    json!({}),
                ),
            ],
        ))
        .expect("configuration");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    cms.create(&PostParams::default(), &cm("c1", json!({})))
        .await
        .expect("create");
    assert!(hook.all().is_empty(), "{:?}", hook.all());
    cms.patch(
        "c1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "y"}})),
    )
    .await
    .expect("patch");
    let paths: Vec<String> = hook.all().into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, ["/updates?timeout=10s"]);
    // Webhook configurations are never sent to webhooks.
    server
        .apply_object(configuration(false, "another", vec![]))
        .expect("configuration");
    assert_eq!(hook.all().len(), 1);
    assert_eq!(server.webhook_calls().len(), 1);
}

#[tokio::test]
async fn deletes_are_reviewed_with_the_old_object() {
    let hook = TestWebhook::start(Arc::new(|_, review: &Value| {
        let keep = review
            .pointer("/request/oldObject/metadata/labels/keep")
            .is_some();
        if keep {
            admission_response(
                review,
                false,
                json!({"status": {"message": "this one stays"}}),
            )
            .into()
        } else {
            allow(review)
        }
    }))
    .await;
    let server = FakeApiServer::start().await.expect("start");
    server
        .apply_object(configuration(
            false,
            "deletes",
            vec![webhook(
                "deletes.kopf.dev",
                hook.client_config("/delete"),
                rule(&["DELETE"], "", "v1", &["configmaps"]),
                json!({}),
            )],
        ))
        .expect("configuration");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    cms.create(&PostParams::default(), &cm_labelled("gone", json!({})))
        .await
        .expect("create");
    cms.create(
        &PostParams::default(),
        &cm_labelled("kept", json!({"keep": "yes"})),
    )
    .await
    .expect("create");
    assert!(hook.all().is_empty(), "creates are not reviewed");
    cms.delete("gone", &DeleteParams::background())
        .await
        .expect("delete");
    let s = api_error(
        cms.delete("kept", &DeleteParams::default())
            .await
            .expect_err("denied"),
    );
    assert_eq!(s.code, 400);
    assert_eq!(
        s.message,
        "admission webhook \"deletes.kopf.dev\" denied the request: this one stays"
    );
    assert!(cms.get_opt("kept").await.expect("get").is_some());
    let req = &hook.bodies("/delete")[0]["request"];
    assert_eq!(req["operation"], "DELETE");
    assert_eq!(req["name"], "gone");
    assert!(req["object"].is_null());
    assert_eq!(req["oldObject"]["metadata"]["name"], "gone");
    assert_eq!(req["oldObject"]["data"], json!({"a": "b"}));
    assert_eq!(req["options"]["kind"], "DeleteOptions");
    assert_eq!(req["options"]["propagationPolicy"], "Background");
    // deletecollection reviews each object.
    let s = api_error(
        cms.delete_collection(&DeleteParams::default(), &Default::default())
            .await
            .expect_err("one is denied"),
    );
    assert_eq!(s.code, 400);
}

#[tokio::test]
async fn subresource_writes_name_the_subresource() {
    let hook = TestWebhook::start(Arc::new(|_, review: &Value| allow(review))).await;
    let server = common::server_with_crd().await;
    server
        .apply_object(configuration(
            false,
            "status",
            vec![
                webhook(
                    "status.kopf.dev",
                    hook.client_config("/status"),
                    rule(&["UPDATE"], "kopf.dev", "v1", &["kopfexamples/status"]),
                    json!({}),
                ),
                webhook(
                    "main.kopf.dev",
                    hook.client_config("/main"),
                    rule(&["UPDATE"], "kopf.dev", "v1", &["kopfexamples"]),
                    json!({}),
                ),
            ],
        ))
        .expect("configuration");
    let api = kex_api(server.client(), "v1");
    let obj: DynamicObject = serde_json::from_value(common::kex("k1")).expect("object");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create");
    api.patch_status(
        "k1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "done"}})),
    )
    .await
    .expect("status");
    assert!(hook.bodies("/main").is_empty());
    let req = &hook.bodies("/status")[0]["request"];
    assert_eq!(req["subResource"], "status");
    assert_eq!(req["requestSubResource"], "status");
    assert_eq!(req["object"]["status"]["phase"], "done");
    assert!(req["oldObject"].get("status").is_none());
    assert_eq!(server.webhook_calls()[0].subresource, "status");
}

#[tokio::test]
async fn a_concurrent_change_restarts_a_patch_and_conflicts_a_put() {
    let slot: Arc<OnceLock<Arc<FakeApiServer>>> = Arc::new(OnceLock::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let hook = {
        let slot = slot.clone();
        let calls = calls.clone();
        TestWebhook::start(Arc::new(move |_, review: &Value| {
            // The first review changes the object behind the request's back; the fake is
            // not locked while it waits for the webhook.
            if calls.fetch_add(1, Ordering::SeqCst) == 0
                && let Some(server) = slot.get()
            {
                let name = review["request"]["name"].as_str().unwrap_or("");
                server
                    .apply_object(json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": name, "namespace": "default"},
                        "data": {"concurrent": uuid::Uuid::new_v4().to_string()}}))
                    .expect("concurrent write");
            }
            allow(review)
        }))
        .await
    };
    let server = Arc::new(FakeApiServer::start().await.expect("start"));
    let _ = slot.set(server.clone());
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    cms.create(&PostParams::default(), &cm("c1", json!({"a": "b"})))
        .await
        .expect("create");
    server
        .apply_object(configuration(
            false,
            "race",
            vec![webhook(
                "race.kopf.dev",
                hook.client_config("/validate"),
                rule(&["UPDATE"], "", "v1", &["configmaps"]),
                json!({}),
            )],
        ))
        .expect("configuration");
    let patched = cms
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"mine": "yes"}})),
        )
        .await
        .expect("patch");
    let data = patched.data.unwrap_or_default();
    assert_eq!(data.get("mine").map(String::as_str), Some("yes"));
    assert!(
        data.contains_key("concurrent"),
        "the concurrent change is kept"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the patch was reviewed again"
    );

    // A PUT with a resourceVersion gets its conflict.
    calls.store(0, Ordering::SeqCst);
    let mut current = cms.get("c1").await.expect("get");
    current
        .data
        .get_or_insert_with(Default::default)
        .insert("put".into(), "yes".into());
    let s = api_error(
        cms.replace("c1", &PostParams::default(), &current)
            .await
            .expect_err("conflict"),
    );
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    let stored = cms.get("c1").await.expect("get");
    assert!(!stored.data.unwrap_or_default().contains_key("put"));
}

#[tokio::test]
async fn webhook_configurations_are_validated_and_defaulted() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
    let mut cfg = configuration(
        false,
        "cfg",
        vec![webhook(
            "cfg.kopf.dev",
            json!({"url": "https://127.0.0.1:1/x"}),
            rule(&["CREATE"], "", "v1", &["configmaps"]),
            json!({}),
        )],
    );
    cfg["webhooks"][0]
        .as_object_mut()
        .expect("webhook")
        .remove("sideEffects");
    cfg["webhooks"][0]["timeoutSeconds"] = json!(60);
    let r = raw.post_json(path, &cfg).await;
    assert_eq!(r.status, 422, "{}", r.body);
    let body = r.json();
    assert_eq!(body["reason"], "Invalid");
    let message = body["message"].as_str().expect("message");
    assert!(message.starts_with(
        "ValidatingWebhookConfiguration.admissionregistration.k8s.io \"cfg\" is invalid: ["
    ));
    assert!(message.contains(
        "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"
    ));
    assert!(message.contains(
        "webhooks[0].timeoutSeconds: Invalid value: 60: the timeout value must be between 1 and 30 seconds"
    ));
    cfg["webhooks"][0]["sideEffects"] = json!("None");
    cfg["webhooks"][0]
        .as_object_mut()
        .expect("webhook")
        .remove("timeoutSeconds");
    let r = raw.post_json(path, &cfg).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let w = &r.json()["webhooks"][0];
    assert_eq!(w["failurePolicy"], "Fail");
    assert_eq!(w["matchPolicy"], "Equivalent");
    assert_eq!(w["timeoutSeconds"], 10);
    assert_eq!(w["namespaceSelector"], json!({}));
    assert_eq!(w["objectSelector"], json!({}));
    assert_eq!(w["rules"][0]["scope"], "*");
}
