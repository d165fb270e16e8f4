//! What a response is, as the client's Accept asks (PartialObjectMetadata, Tables, on every
//! verb and in watches), and how it is written: Go's member order and a trailing newline,
//! compared byte by byte.

mod common;

use common::{Raw, kex, server_with_crd};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kopf_testing::FakeApiServer;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

const META_V1: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const META_LIST_V1: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const TABLE_V1: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// A request with headers; the status and the whole (de-chunked) body.
async fn send(
    server: &FakeApiServer,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let url = server.url();
    let addr = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await.expect("write");
    stream.write_all(body).await.expect("write body");
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8(buf).expect("utf-8");
    let (head, rest) = text.split_once("\r\n\r\n").expect("head");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = rest;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).expect("chunk size");
            if n == 0 {
                break;
            }
            out.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
        out
    } else {
        rest.to_string()
    };
    (status, body)
}

async fn get(server: &FakeApiServer, path: &str, accept: &str) -> (u16, Value) {
    let (status, body) = send(server, "GET", path, &[("Accept", accept)], b"").await;
    (status, serde_json::from_str(&body).expect("json"))
}

/// A JSON string as Go writes it (the values used here have nothing to escape).
fn q(v: &Value) -> String {
    v.to_string()
}

#[tokio::test]
async fn bodies_are_written_in_go_member_order_with_a_newline() {
    let server = server_with_crd().await;
    let raw = Raw::new(&server);
    let created = raw
        .post_json(
            "/api/v1/namespaces/default/configmaps",
            &json!({"data": {"k": "v", "a": "<b>"}, "metadata": {"name": "c1",
                "annotations": {"z": "1", "y": "&"}, "labels": {"b": "2", "a": "1"}}}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let got = raw.get("/api/v1/namespaces/default/configmaps/c1").await;
    let v = got.json();
    let m = &v["metadata"];
    let mf = &m["managedFields"][0];
    let object_fields = format!(
        concat!(
            r#""metadata":{{"name":"c1","namespace":"default","uid":{},"resourceVersion":{},"#,
            r#""creationTimestamp":{},"labels":{{"a":"1","b":"2"}},"annotations":{{"y":"\u0026","z":"1"}},"#,
            r#""managedFields":[{{"manager":{},"operation":"Update","apiVersion":"v1","time":{},"#,
            r#""fieldsType":"FieldsV1","fieldsV1":{}}}]}},"data":{{"a":"\u003cb\u003e","k":"v"}}"#
        ),
        q(&m["uid"]),
        q(&m["resourceVersion"]),
        q(&m["creationTimestamp"]),
        q(&mf["manager"]),
        q(&mf["time"]),
        q(&mf["fieldsV1"]),
    );
    let object = format!(r#"{{"kind":"ConfigMap","apiVersion":"v1",{object_fields}}}"#);
    assert_eq!(got.body, format!("{object}\n"));
    // The create answered the same text.
    assert_eq!(created.body, got.body);

    let missing = raw.get("/api/v1/namespaces/default/configmaps/nope").await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.body,
        concat!(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","#,
            r#""message":"configmaps \"nope\" not found","reason":"NotFound","#,
            r#""details":{"name":"nope","kind":"configmaps"},"code":404}"#,
            "\n"
        )
    );

    let list = raw.get("/api/v1/namespaces/default/configmaps").await;
    let rv = q(&list.json()["metadata"]["resourceVersion"]);
    assert_eq!(
        list.body,
        format!(
            r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":{rv}}},"items":[{{{object_fields}}}]}}"#
        ) + "\n"
    );

    let watch = raw
        .get("/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1")
        .await;
    assert_eq!(
        watch.body,
        format!("{{\"type\":\"ADDED\",\"object\":{object}}}\n")
    );

    // A custom resource is unstructured: sorted keys all the way down.
    let mut body = kex("k1");
    body["spec"] = json!({"z": 1, "a": {"y": 2, "b": "<"}});
    let created = raw
        .post_json("/apis/kopf.dev/v1/namespaces/default/kopfexamples", &body)
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let got = raw
        .get("/apis/kopf.dev/v1/namespaces/default/kopfexamples/k1")
        .await;
    let sorted = got.json().to_string().replace('<', "\\u003c") + "\n";
    assert_eq!(got.body, sorted);
    assert!(
        got.body.starts_with(
            r#"{"apiVersion":"kopf.dev/v1","kind":"KopfExample","metadata":{"creationTimestamp":"#
        ),
        "{}",
        got.body
    );
    assert!(
        got.body
            .contains(r#""spec":{"a":{"b":"\u003c","y":2},"z":1}"#)
    );
}

#[tokio::test]
async fn kube_rs_metadata_calls_work_on_every_verb() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"big": "x"}}))
            .expect("configmap");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let patched = cms
        .patch_metadata(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"l": "1"}}})),
        )
        .await
        .expect("patch_metadata");
    assert_eq!(
        patched.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    assert_eq!(
        patched.metadata.labels.as_ref().and_then(|l| l.get("l")),
        Some(&"1".to_string())
    );
    let one = cms.get_metadata("a").await.expect("get_metadata");
    assert_eq!(
        one.metadata.resource_version,
        patched.metadata.resource_version
    );
    let list = cms
        .list_metadata(&Default::default())
        .await
        .expect("list_metadata");
    assert_eq!(list.items.len(), 1);
    let rv = list.metadata.resource_version.clone().expect("rv");
    let mut events = cms
        .watch_metadata(&WatchParams::default().timeout(3), &rv)
        .await
        .expect("watch_metadata")
        .boxed();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"more": "y"}})),
    )
    .await
    .expect("patch");
    match events.try_next().await.expect("event") {
        Some(WatchEvent::Modified(o)) => {
            assert_eq!(
                o.types.map(|t| t.kind).as_deref(),
                Some("PartialObjectMetadata")
            );
        }
        other => panic!("{other:?}"),
    }

    // The raw bodies: metadata only, on a PATCH too.
    let (status, body) = send(
        &server,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/a",
        &[
            ("Accept", META_V1),
            ("Content-Type", "application/merge-patch+json"),
        ],
        br#"{"data": {"x": "1"}}"#,
    )
    .await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["kind"], "PartialObjectMetadata");
    assert!(v.get("data").is_none(), "{v}");
    assert!(
        body.starts_with(r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","#),
        "{body}"
    );
    // A create asked as a Table answers one.
    let (status, body) = send(
        &server,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Accept", TABLE_V1), ("Content-Type", "application/json")],
        br#"{"metadata": {"name": "b"}}"#,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["kind"], "Table");
    assert_eq!(v["rows"][0]["cells"][0], "b");
    assert_eq!(v["rows"][0]["object"]["kind"], "PartialObjectMetadata");
}

#[tokio::test]
async fn transformations_that_do_not_fit_are_not_acceptable() {
    let server = server_with_crd().await;
    let raw = Raw::new(&server);
    let created = raw
        .post_json(
            "/api/v1/namespaces/default/configmaps",
            &json!({"metadata": {"name": "a"}}),
        )
        .await;
    assert_eq!(created.status, 201);
    raw.post_json(
        "/apis/kopf.dev/v1/namespaces/default/kopfexamples",
        &kex("k"),
    )
    .await;
    let cases = [
        (
            "/api/v1/namespaces/default/configmaps/a",
            META_LIST_V1,
            "you requested PartialObjectMetadataList, but the requested object is not a list (*core.ConfigMap)",
        ),
        (
            "/api/v1/namespaces/default/configmaps",
            META_V1,
            "you requested PartialObjectMetadata, but the requested object is a list (*core.ConfigMapList)",
        ),
        (
            "/apis/kopf.dev/v1/namespaces/default/kopfexamples/k",
            META_LIST_V1,
            "you requested PartialObjectMetadataList, but the requested object is not a list (*unstructured.Unstructured)",
        ),
    ];
    for (path, accept, message) in cases {
        let (status, v) = get(&server, path, accept).await;
        assert_eq!(status, 406, "{path} {v}");
        assert_eq!(v["reason"], "NotAcceptable");
        assert_eq!(v["code"], 406);
        assert_eq!(v["message"], message);
    }
    // Fallbacks: the first media type the server can serve.
    let (status, v) = get(
        &server,
        "/api/v1/namespaces/default/configmaps/a",
        "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v2,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1,application/json",
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(v["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(v["kind"], "PartialObjectMetadata");
    let (_, v) = get(
        &server,
        "/api/v1/namespaces/default/configmaps",
        "application/json;as=Foo;g=meta.k8s.io;v=v1,application/json",
    )
    .await;
    assert_eq!(v["kind"], "ConfigMapList");
    let (_, v) = get(
        &server,
        "/apis/kopf.dev/v1/namespaces/default/kopfexamples",
        &format!("{META_LIST_V1},application/json"),
    )
    .await;
    assert_eq!(v["kind"], "PartialObjectMetadataList");
    assert_eq!(v["items"][0]["kind"], "PartialObjectMetadata");
    assert!(v["items"][0].get("spec").is_none());
    // A Table of v1beta1, and includeObject checked.
    let (_, v) = get(
        &server,
        "/api/v1/namespaces/default/configmaps",
        "application/json;as=Table;g=meta.k8s.io;v=v1beta1",
    )
    .await;
    assert_eq!(v["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(v["rows"][0]["object"]["apiVersion"], "meta.k8s.io/v1beta1");
    let (status, v) = get(
        &server,
        "/api/v1/namespaces/default/configmaps?includeObject=bogus",
        TABLE_V1,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        v["message"],
        r#"Unable to convert to Table as requested: includeObject: Invalid value: "bogus": must be 'Metadata', 'Object', 'None', or empty"#
    );
}

#[tokio::test]
async fn watches_send_metadata_and_table_rows_per_event() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    for name in ["a", "b"] {
        raw.post_json(
            "/api/v1/namespaces/default/configmaps",
            &json!({"metadata": {"name": name}, "data": {"k": "v"}}),
        )
        .await;
    }
    let path = "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan";
    let (_, body) = send(&server, "GET", path, &[("Accept", META_V1)], b"").await;
    let events: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).expect("event"))
        .collect();
    assert!(events.len() >= 3, "{body}");
    for e in &events {
        assert_eq!(e["object"]["kind"], "PartialObjectMetadata", "{e}");
        assert!(e["object"].get("data").is_none());
    }
    assert_eq!(events[2]["type"], "BOOKMARK");
    assert_eq!(
        events[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // Tables: one row per event, the column definitions in the first only.
    let (_, body) = send(&server, "GET", path, &[("Accept", TABLE_V1)], b"").await;
    let events: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).expect("event"))
        .collect();
    assert_eq!(events[0]["object"]["kind"], "Table");
    assert_eq!(events[0]["object"]["rows"][0]["cells"][0], "a");
    assert!(events[0]["object"]["columnDefinitions"].is_array());
    assert_eq!(events[1]["object"]["rows"][0]["cells"][0], "b");
    assert!(events[1]["object"]["columnDefinitions"].is_null());
    assert!(
        body.lines()
            .nth(1)
            .is_some_and(|l| l.contains(r#""columnDefinitions":null"#))
    );
    assert_eq!(events[2]["type"], "BOOKMARK");
    assert_eq!(events[2]["object"]["kind"], "Table");
    // PartialObjectMetadataList does not fit an event: the objects go as they are.
    let (_, body) = send(&server, "GET", path, &[("Accept", META_LIST_V1)], b"").await;
    let first: Value = serde_json::from_str(body.lines().next().expect("event")).expect("json");
    assert_eq!(first["object"]["kind"], "ConfigMap");
}
