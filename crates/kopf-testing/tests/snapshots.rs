//! Snapshots of discovery documents and Status error objects, and a property test that
//! no request, however malformed, makes the server panic or answer 5xx by accident.

mod common;

use common::{Raw, server_with_crd};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Replaces values that change from run to run.
fn normalise(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, val) in m.iter_mut() {
                    match k.as_str() {
                        "uid" | "creationTimestamp" | "resourceVersion" | "serverAddress"
                        | "lastTransitionTime" => {
                            if !val.is_null() {
                                *val = json!("<redacted>");
                            }
                        }
                        _ => walk(val),
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

#[tokio::test]
async fn discovery_documents() {
    let server = server_with_crd().await;
    let raw = Raw::new(&server);
    insta::assert_json_snapshot!("api", normalise(raw.get("/api").await.json()));
    insta::assert_json_snapshot!("apis", normalise(raw.get("/apis").await.json()));
    insta::assert_json_snapshot!(
        "apis_kopf.dev",
        normalise(raw.get("/apis/kopf.dev").await.json())
    );
    insta::assert_json_snapshot!(
        "apis_kopf.dev_v1",
        normalise(raw.get("/apis/kopf.dev/v1").await.json())
    );
    insta::assert_json_snapshot!(
        "apis_apps_v1",
        normalise(raw.get("/apis/apps/v1").await.json())
    );
    let core = raw.get("/api/v1").await.json();
    let names: Vec<&str> = core["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    insta::assert_json_snapshot!("api_v1_names", names);
}

#[tokio::test]
async fn aggregated_discovery_with_etag() {
    let server = server_with_crd().await;
    let accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    let client = server.client();
    let resp = client
        .send(http_get("/apis", accept, None))
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    let etag = resp
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .expect("etag");
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    );
    let body = axum_body(resp).await;
    let doc: Value = serde_json::from_slice(&body).expect("json");
    let kopf = doc["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["metadata"]["name"] == "kopf.dev")
        .cloned();
    insta::assert_json_snapshot!("aggregated_kopf.dev", kopf);
    let again = client
        .send(http_get("/apis", accept, Some(&etag)))
        .await
        .expect("send");
    assert_eq!(again.status(), 304);
    // kube-rs aggregated discovery understands the documents.
    let discovery = kube::Discovery::new(client)
        .run_aggregated()
        .await
        .expect("aggregated discovery");
    assert!(discovery.has_group("kopf.dev"));
    assert!(discovery.has_group("apps"));
}

fn http_get(path: &str, accept: &str, etag: Option<&str>) -> http::Request<kube::client::Body> {
    let mut b = http::Request::get(path).header("Accept", accept);
    if let Some(e) = etag {
        b = b.header("If-None-Match", e);
    }
    b.body(kube::client::Body::empty()).expect("request")
}

async fn axum_body(resp: http::Response<kube::client::Body>) -> Vec<u8> {
    use http_body_util::BodyExt;
    resp.into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec()
}

#[tokio::test]
async fn status_error_objects() {
    let server = server_with_crd().await;
    let raw = Raw::new(&server);
    let cms = "/api/v1/namespaces/default/configmaps";
    insta::assert_json_snapshot!(
        "404_object",
        raw.get(&format!("{cms}/missing")).await.json()
    );
    insta::assert_json_snapshot!("404_path", raw.get("/apis/nope.io/v1").await.json());
    raw.post_json(cms, &json!({"metadata": {"name": "c"}}))
        .await;
    insta::assert_json_snapshot!(
        "409_exists",
        raw.post_json(cms, &json!({"metadata": {"name": "c"}}))
            .await
            .json()
    );
    insta::assert_json_snapshot!(
        "409_conflict",
        raw.send(
            "PUT",
            &format!("{cms}/c"),
            Some("application/json"),
            br#"{"metadata":{"name":"c","resourceVersion":"1"}}"#
        )
        .await
        .json()
    );
    insta::assert_json_snapshot!(
        "415",
        raw.send("POST", cms, Some("text/plain"), b"k8s\0")
            .await
            .json()
    );
    insta::assert_json_snapshot!(
        "422_grouped",
        raw.post_json(
            "/apis/kopf.dev/v1/namespaces/default/kopfexamples",
            &json!({"metadata": {}})
        )
        .await
        .json()
    );
    insta::assert_json_snapshot!(
        "422_json_patch",
        raw.send(
            "PATCH",
            &format!("{cms}/c"),
            Some("application/json-patch+json"),
            br#"[{"op":"test","path":"/data","value":1}]"#
        )
        .await
        .json()
    );
    let deleted = raw
        .send(
            "DELETE",
            "/apis/kopf.dev/v1/namespaces/default/kopfexamples/none",
            None,
            b"",
        )
        .await
        .json();
    insta::assert_json_snapshot!("404_grouped", deleted);
}

fn arb_path() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        Just("api".to_string()),
        Just("apis".to_string()),
        Just("v1".to_string()),
        Just("namespaces".to_string()),
        Just("default".to_string()),
        Just("configmaps".to_string()),
        Just("kopf.dev".to_string()),
        Just("kopfexamples".to_string()),
        Just("status".to_string()),
        Just("scale".to_string()),
        Just("watch".to_string()),
        Just("%zz".to_string()),
        "[a-z0-9.%-]{0,8}",
    ];
    proptest::collection::vec(segment, 0..7).prop_map(|s| format!("/{}", s.join("/")))
}

fn arb_query() -> impl Strategy<Value = String> {
    let pair = prop_oneof![
        Just("watch=true".to_string()),
        Just("timeoutSeconds=0".to_string()),
        Just("limit=2".to_string()),
        Just("limit=x".to_string()),
        Just("continue=%%%".to_string()),
        Just("resourceVersion=abc".to_string()),
        Just("resourceVersionMatch=Exact".to_string()),
        Just("labelSelector=a%20in%20(".to_string()),
        Just("fieldSelector=x".to_string()),
        Just("dryRun=Nope".to_string()),
        "[a-zA-Z]{1,6}=[a-z0-9%]{0,6}",
    ];
    proptest::collection::vec(pair, 0..4).prop_map(|p| p.join("&"))
}

fn arb_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        Just(b"{}".to_vec()),
        Just(b"[]".to_vec()),
        Just(b"null".to_vec()),
        Just(br#"{"metadata":{"name":"p"}}"#.to_vec()),
        Just(br#"{"metadata":{"name":7,"labels":"x","finalizers":{}}}"#.to_vec()),
        Just(br#"[{"op":"add","path":"/metadata/labels/a","value":"b"}]"#.to_vec()),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(|t| [b"k8s\0".to_vec(), t].concat()),
        proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn no_request_makes_the_server_fail(
        method in prop_oneof![Just("GET"), Just("POST"), Just("PUT"), Just("PATCH"), Just("DELETE")],
        path in arb_path(),
        query in arb_query(),
        content_type in prop_oneof![
            Just(None), Just(Some("application/json")), Just(Some("application/merge-patch+json")),
            Just(Some("application/json-patch+json")), Just(Some("application/strategic-merge-patch+json")),
            Just(Some("application/apply-patch+yaml")), Just(Some("text/plain")),
            Just(Some("application/vnd.kubernetes.protobuf")),
        ],
        body in arb_body(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let server = server_with_crd().await;
            let raw = Raw::new(&server);
            let target = if query.is_empty() { path.clone() } else { format!("{path}?{query}&timeoutSeconds=0") };
            let r = raw.send(method, &target, content_type, &body).await;
            // Internal errors are only allowed where the real server gives them
            // (a client-set resourceVersion on create).
            if r.status >= 500 {
                prop_assert!(r.body.contains("resourceVersion should not be set"), "{} {} -> {} {}", method, target, r.status, r.body);
            }
            // The server still answers afterwards.
            prop_assert_eq!(raw.get("/version").await.status, 200);
            Ok(())
        })?;
    }
}
