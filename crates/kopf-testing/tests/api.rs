//! API semantics through `kube::Client` and raw HTTP: CRUD, conflicts, generation, status,
//! finalizers, selectors, pagination, errors, namespaces, CRDs, garbage collection.

mod common;

use common::{Raw, kex, server_with_crd};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kopf_testing::FakeApiServer;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn kex_api(client: kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    Api::namespaced_with(client, "default", &ar)
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"a": "b"}}))
        .expect("configmap")
}

fn err_code(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test]
async fn crud_and_resource_versions() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let created = cms
        .create(&PostParams::default(), &cm("c1"))
        .await
        .expect("create");
    let rv1: u64 = created
        .metadata
        .resource_version
        .clone()
        .expect("rv")
        .parse()
        .expect("numeric rv");
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    let patched = cms
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"x": "y"}})),
        )
        .await
        .expect("patch");
    let rv2: u64 = patched
        .metadata
        .resource_version
        .clone()
        .expect("rv")
        .parse()
        .expect("rv");
    assert!(rv2 > rv1);
    // A no-op patch keeps the resourceVersion.
    let same = cms
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"x": "y"}})),
        )
        .await
        .expect("patch");
    assert_eq!(
        same.metadata.resource_version,
        patched.metadata.resource_version
    );
    // Already exists.
    let (code, msg) = err_code(
        cms.create(&PostParams::default(), &cm("c1"))
            .await
            .expect_err("409"),
    );
    assert_eq!(code, 409);
    assert_eq!(msg, "configmaps \"c1\" already exists");
    // Stale update.
    let mut stale = created.clone();
    stale.data = Some([("q".to_string(), "r".to_string())].into());
    let (code, msg) = err_code(
        cms.replace("c1", &PostParams::default(), &stale)
            .await
            .expect_err("409"),
    );
    assert_eq!(code, 409);
    assert!(msg.contains("the object has been modified"), "{msg}");
    // Delete and 404.
    cms.delete("c1", &DeleteParams::default())
        .await
        .expect("delete");
    let (code, msg) = err_code(cms.get("c1").await.expect_err("404"));
    assert_eq!((code, msg.as_str()), (404, "configmaps \"c1\" not found"));
    // Missing namespace.
    let other: Api<ConfigMap> = Api::namespaced(server.client(), "nope");
    let (code, msg) = err_code(
        other
            .create(&PostParams::default(), &cm("c1"))
            .await
            .expect_err("404"),
    );
    assert_eq!((code, msg.as_str()), (404, "namespaces \"nope\" not found"));
}

#[tokio::test]
async fn generate_name_and_required_name() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let body: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).expect("cm");
    let a = cms
        .create(&PostParams::default(), &body)
        .await
        .expect("create");
    let name = a.metadata.name.expect("name");
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    let (code, msg) = err_code(
        cms.create(&PostParams::default(), &ConfigMap::default())
            .await
            .expect_err("422"),
    );
    assert_eq!(code, 422);
    assert!(msg.contains("name or generateName is required"), "{msg}");
}

#[tokio::test]
async fn custom_resources_generation_and_status_subresource() {
    let server = server_with_crd().await;
    let api = kex_api(server.client());
    let mut body: DynamicObject = serde_json::from_value(kex("k1")).expect("obj");
    body.data["status"] = json!({"dropped": true});
    let created = api
        .create(&PostParams::default(), &body)
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create"
    );
    // Spec change bumps generation; metadata change does not.
    let p = api
        .patch(
            "k1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"field": "x"}})),
        )
        .await
        .expect("patch");
    assert_eq!(p.metadata.generation, Some(2));
    let p = api
        .patch(
            "k1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .expect("patch");
    assert_eq!(p.metadata.generation, Some(2));
    // Status through /status; generation unchanged; main URL ignores status.
    let s = api
        .patch_status(
            "k1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ok": 1}, "metadata": {"labels": {"ignored": "x"}}})),
        )
        .await
        .expect("status");
    assert_eq!(s.data["status"]["ok"], 1);
    assert_eq!(s.metadata.generation, Some(2));
    assert!(
        !s.metadata
            .labels
            .unwrap_or_default()
            .contains_key("ignored")
    );
    let m = api
        .patch(
            "k1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ok": 2}})),
        )
        .await
        .expect("patch");
    assert_eq!(m.data["status"]["ok"], 1);
    // PUT without resourceVersion is refused for custom resources.
    let mut no_rv = m.clone();
    no_rv.metadata.resource_version = None;
    let (code, msg) = err_code(
        api.replace("k1", &PostParams::default(), &no_rv)
            .await
            .expect_err("422"),
    );
    assert_eq!(code, 422);
    assert!(msg.contains("must be specified for an update"), "{msg}");
    // Strategic merge patch on a custom resource: 415.
    let raw = Raw::new(&server);
    let r = raw
        .send(
            "PATCH",
            "/apis/kopf.dev/v1/namespaces/default/kopfexamples/k1",
            Some("application/strategic-merge-patch+json"),
            b"{}",
        )
        .await;
    assert_eq!(r.status, 415);
}

#[tokio::test]
async fn finalizers_block_deletion_until_removed() {
    let server = server_with_crd().await;
    let api = kex_api(server.client());
    let mut body: DynamicObject = serde_json::from_value(kex("k1")).expect("obj");
    body.metadata.finalizers = Some(vec!["kopf.zalando.org/KopfFinalizerMarker".into()]);
    api.create(&PostParams::default(), &body)
        .await
        .expect("create");
    let deleted = api
        .delete("k1", &DeleteParams::default())
        .await
        .expect("delete");
    let obj = deleted
        .left()
        .expect("the object comes back while finalizers remain");
    assert!(obj.metadata.deletion_timestamp.is_some());
    assert_eq!(obj.metadata.generation, Some(2));
    // No new finalizers during deletion.
    let (code, msg) = err_code(
        api.patch(
            "k1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["a", "kopf.zalando.org/KopfFinalizerMarker"]}}),
            ),
        )
        .await
        .expect_err("422"),
    );
    assert_eq!(code, 422);
    assert!(msg.contains("no new finalizers can be added"), "{msg}");
    // A failing JSON-patch test is a 422; a passing one removes the finalizer and the object.
    let rv = api
        .get("k1")
        .await
        .expect("get")
        .metadata
        .resource_version
        .expect("rv");
    let bad = json_patch_ops(
        json!([{"op": "test", "path": "/metadata/resourceVersion", "value": "0"}, {"op": "remove", "path": "/metadata/finalizers"}]),
    );
    let (code, _) = err_code(
        api.patch("k1", &PatchParams::default(), &bad)
            .await
            .expect_err("422"),
    );
    assert_eq!(code, 422);
    let good = json_patch_ops(
        json!([{"op": "test", "path": "/metadata/resourceVersion", "value": rv}, {"op": "remove", "path": "/metadata/finalizers"}]),
    );
    api.patch("k1", &PatchParams::default(), &good)
        .await
        .expect("finalizer removed");
    assert_eq!(err_code(api.get("k1").await.expect_err("gone")).0, 404);
}

fn json_patch_ops(v: Value) -> Patch<Value> {
    Patch::Json(serde_json::from_value(v).expect("json patch"))
}

#[tokio::test]
async fn selectors_and_pagination() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    for i in 0..7 {
        let mut c = cm(&format!("c{i}"));
        c.metadata.labels = Some(
            [(
                "parity".to_string(),
                if i % 2 == 0 { "even" } else { "odd" }.to_string(),
            )]
            .into(),
        );
        cms.create(&PostParams::default(), &c)
            .await
            .expect("create");
    }
    let even = cms
        .list(&ListParams::default().labels("parity=even"))
        .await
        .expect("list");
    assert_eq!(even.items.len(), 4);
    let not_even = cms
        .list(&ListParams::default().labels("parity notin (even)"))
        .await
        .expect("list");
    assert_eq!(not_even.items.len(), 3);
    let one = cms
        .list(&ListParams::default().fields("metadata.name=c3"))
        .await
        .expect("list");
    assert_eq!(one.items.len(), 1);
    let (code, msg) = err_code(
        cms.list(&ListParams::default().fields("spec.x=1"))
            .await
            .expect_err("400"),
    );
    assert_eq!(
        (code, msg.as_str()),
        (400, "field label not supported: spec.x")
    );
    // Pages of 3 read one snapshot even while objects change.
    let first = cms
        .list(&ListParams::default().limit(3))
        .await
        .expect("page 1");
    assert_eq!(first.items.len(), 3);
    assert_eq!(first.metadata.remaining_item_count, Some(4));
    cms.create(&PostParams::default(), &cm("c99"))
        .await
        .expect("create during paging");
    let mut names: Vec<String> = first
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    let mut token = first.metadata.continue_;
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = cms
            .list(&ListParams::default().limit(3).continue_token(&t))
            .await
            .expect("page");
        names.extend(page.items.iter().filter_map(|c| c.metadata.name.clone()));
        token = page.metadata.continue_;
    }
    assert_eq!(names, vec!["c0", "c1", "c2", "c3", "c4", "c5", "c6"]);
    // An expired continue token is a 410.
    let first = cms
        .list(&ListParams::default().limit(3))
        .await
        .expect("page 1");
    cms.create(&PostParams::default(), &cm("c100"))
        .await
        .expect("create");
    server.compact_history(None);
    let t = first.metadata.continue_.expect("token");
    let (code, _) = err_code(
        cms.list(&ListParams::default().limit(3).continue_token(&t))
            .await
            .expect_err("410"),
    );
    assert_eq!(code, 410);
}

#[tokio::test]
async fn namespace_lifecycle() {
    let server = FakeApiServer::start().await.expect("start");
    let nss: Api<Namespace> = Api::all(server.client());
    let default = nss.get("default").await.expect("default exists");
    assert_eq!(
        default
            .metadata
            .labels
            .unwrap_or_default()
            .get("kubernetes.io/metadata.name")
            .map(String::as_str),
        Some("default")
    );
    let (code, msg) = err_code(
        nss.delete("default", &DeleteParams::default())
            .await
            .expect_err("403"),
    );
    assert_eq!(code, 403);
    assert!(msg.contains("this namespace may not be deleted"), "{msg}");
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "ns1"}})).expect("ns"),
    )
    .await
    .expect("create ns");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "ns1");
    let mut held = cm("held");
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &held)
        .await
        .expect("create");
    cms.create(&PostParams::default(), &cm("free"))
        .await
        .expect("create");
    let ns = nss
        .delete("ns1", &DeleteParams::default())
        .await
        .expect("delete")
        .left()
        .expect("namespace");
    assert_eq!(
        ns.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    // Content is deleted; the held object waits for its finalizer; creates are forbidden.
    assert_eq!(err_code(cms.get("free").await.expect_err("gone")).0, 404);
    assert!(
        cms.get("held")
            .await
            .expect("held")
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let (code, msg) = err_code(
        cms.create(&PostParams::default(), &cm("new"))
            .await
            .expect_err("403"),
    );
    assert_eq!(code, 403);
    assert!(msg.contains("because it is being terminated"), "{msg}");
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    assert_eq!(
        err_code(nss.get("ns1").await.expect_err("namespace gone")).0,
        404
    );
}

#[tokio::test]
async fn pods_unscheduled_delete_at_once_and_return_the_object() {
    let server = FakeApiServer::start().await.expect("start");
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})).expect("pod");
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("create");
    assert_eq!(
        created.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );
    let deleted = pods
        .delete("p", &DeleteParams::default())
        .await
        .expect("delete");
    assert!(deleted.is_left(), "pods return the deleted object");
    assert_eq!(err_code(pods.get("p").await.expect_err("gone")).0, 404);
}

#[tokio::test]
async fn garbage_collection_by_owner_references() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let owner = cms
        .create(&PostParams::default(), &cm("owner"))
        .await
        .expect("owner");
    let uid = owner.metadata.uid.clone().expect("uid");
    for name in ["child1", "child2"] {
        let mut c = cm(name);
        c.metadata.owner_references = Some(vec![
            serde_json::from_value(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}),
            )
            .expect("ref"),
        ]);
        cms.create(&PostParams::default(), &c).await.expect("child");
    }
    // Orphan keeps the children and strips the reference.
    let owner2 = cms
        .create(&PostParams::default(), &cm("owner2"))
        .await
        .expect("owner2");
    let mut orphan = cm("orphan");
    orphan.metadata.owner_references = Some(vec![serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner2", "uid": owner2.metadata.uid})).expect("ref")]);
    cms.create(&PostParams::default(), &orphan)
        .await
        .expect("orphan");
    cms.delete("owner2", &DeleteParams::orphan())
        .await
        .expect("delete");
    let kept = cms.get("orphan").await.expect("orphan kept");
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
    // Background deletes the children.
    cms.delete("owner", &DeleteParams::background())
        .await
        .expect("delete");
    assert_eq!(err_code(cms.get("child1").await.expect_err("gone")).0, 404);
    assert_eq!(err_code(cms.get("child2").await.expect_err("gone")).0, 404);
}

#[tokio::test]
async fn delete_collection_returns_the_deleted_list() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    for n in ["a", "b", "c"] {
        let mut c = cm(n);
        c.metadata.labels = Some([("x".to_string(), (n != "c").to_string())].into());
        cms.create(&PostParams::default(), &c)
            .await
            .expect("create");
    }
    let deleted = cms
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("x=true"),
        )
        .await
        .expect("deletecollection");
    let list = deleted.left().expect("a list");
    assert_eq!(list.items.len(), 2);
    assert_eq!(
        cms.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        1
    );
}

#[tokio::test]
async fn crd_lifecycle_serves_and_withdraws_endpoints() {
    let server = server_with_crd().await;
    let raw = Raw::new(&server);
    assert_eq!(raw.get("/apis/kopf.dev/v1").await.status, 200);
    let crd = raw
        .get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/kopfexamples.kopf.dev")
        .await
        .json();
    let conditions: Vec<&str> = crd["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(conditions, vec!["NamesAccepted", "Established"]);
    assert_eq!(
        crd["status"]["acceptedNames"]["listKind"],
        "KopfExampleList"
    );
    let index = raw.get("/openapi/v3").await.json();
    assert!(
        index["paths"]["apis/kopf.dev/v1"]["serverRelativeURL"]
            .as_str()
            .is_some()
    );
    let api = kex_api(server.client());
    let mut body: DynamicObject = serde_json::from_value(kex("k1")).expect("obj");
    body.metadata.finalizers = Some(vec!["hold".into()]);
    api.create(&PostParams::default(), &body)
        .await
        .expect("create");
    let r = raw
        .send(
            "DELETE",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/kopfexamples.kopf.dev",
            None,
            b"",
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["kind"], "CustomResourceDefinition");
    // The CRD waits for its objects.
    assert_eq!(raw.get("/apis/kopf.dev/v1").await.status, 200);
    api.patch(
        "k1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    assert_eq!(raw.get("/apis/kopf.dev/v1").await.status, 404);
    assert_eq!(
        raw.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/kopfexamples.kopf.dev")
            .await
            .status,
        404
    );
    let groups = raw.get("/apis").await.json();
    assert!(!groups.to_string().contains("kopf.dev"));
    assert!(
        raw.get("/openapi/v3").await.json()["paths"]
            .get("apis/kopf.dev/v1")
            .is_none()
    );
}

#[tokio::test]
async fn crd_validation_and_schema_enforcement() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let mut bad = common::kopfexample_crd();
    bad["metadata"]["name"] = json!("wrong.kopf.dev");
    let r = raw
        .post_json(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &bad,
        )
        .await;
    assert_eq!(r.status, 422);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap_or("")
            .contains("must be spec.names.plural+\".\"+spec.group")
    );
    let mut crd = common::kopfexample_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = json!({
        "type": "object", "properties": {"name": {"type": "string", "minLength": 3}, "replicas": {"type": "integer", "default": 1}}});
    server.apply_object(crd).expect("crd");
    let r = raw
        .post_json("/apis/kopf.dev/v1/namespaces/default/kopfexamples", &json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "x"}, "spec": {"name": "ab"}}))
        .await;
    assert_eq!(r.status, 422);
    let status = r.json();
    assert!(
        status["message"]
            .as_str()
            .unwrap_or("")
            .contains("spec.name in body should be at least 3 chars long"),
        "{status}"
    );
    assert_eq!(status["details"]["causes"][0]["field"], "spec.name");
    let r = raw
        .post_json("/apis/kopf.dev/v1/namespaces/default/kopfexamples", &json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "x"}, "spec": {"name": "abc", "junk": 1}}))
        .await;
    assert_eq!(r.status, 201);
    let obj = r.json();
    assert_eq!(
        obj["spec"],
        json!({"name": "abc", "replicas": 1}),
        "pruned and defaulted"
    );
    assert_eq!(
        r.header("warning"),
        Some("299 - \"unknown field \\\"spec.junk\\\"\"")
    );
    let r = raw
        .post_json(
            "/apis/kopf.dev/v1/namespaces/default/kopfexamples?fieldValidation=Strict",
            &json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "y"}, "spec": {"name": "abc", "junk": 1}}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap_or("")
            .ends_with("strict decoding error: unknown field \"spec.junk\""),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn bad_input_gets_the_real_servers_answers() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let cm_path = "/api/v1/namespaces/default/configmaps";
    let r = raw
        .send("POST", cm_path, Some("application/x-unknown"), b"k8s\0xx")
        .await;
    assert_eq!(r.status, 415);
    assert_eq!(r.json()["reason"], "UnsupportedMediaType");
    let r = raw
        .send("POST", cm_path, Some("application/json"), b"{not json")
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["reason"], "BadRequest");
    // No Content-Type and no apiVersion/kind (the Python client's way) is fine.
    let r = raw
        .send(
            "POST",
            cm_path,
            None,
            br#"{"metadata": {"name": "py"}, "data": {"a": "b"}}"#,
        )
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.header("cache-control"), Some("no-cache, private"));
    let r = raw
        .post_json(
            cm_path,
            &json!({"metadata": {"name": "x", "namespace": "other"}}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("does not match the namespace"));
    let r = raw
        .post_json(
            cm_path,
            &json!({"metadata": {"name": "y", "resourceVersion": "5"}}),
        )
        .await;
    assert_eq!(r.status, 500);
    let r = raw.get("/api/v1/nothings").await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json()["message"],
        "the server could not find the requested resource"
    );
    let r = raw
        .get("/api/v1/namespaces/default/configmaps?labelSelector=a%20in%20(")
        .await;
    assert_eq!(r.status, 400);
    let r = raw
        .send(
            "PATCH",
            &format!("{cm_path}/py"),
            Some("application/json-patch+json"),
            b"{\"op\": 1}",
        )
        .await;
    assert_eq!(r.status, 400);
    let r = raw
        .send(
            "PATCH",
            &format!("{cm_path}/py"),
            Some("application/json-patch+json"),
            br#"[{"op": "remove", "path": "/nope"}]"#,
        )
        .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        r.json()["message"],
        "the server rejected our request due to an error in our request"
    );
    let r = raw
        .send(
            "PATCH",
            &format!("{cm_path}/py?fieldManager=m&force=true"),
            Some("application/apply-patch+yaml"),
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: py\ndata:\n  a: c\n",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["data"]["a"], "c");
    let r = raw
        .send(
            "PATCH",
            &format!("{cm_path}/py"),
            Some("application/apply-patch+yaml"),
            b"{}",
        )
        .await;
    assert_eq!(r.status, 422);
    assert!(r.body.contains("is required for apply patch"));
}

#[tokio::test]
async fn strategic_merge_patch_on_builtins() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let svc = json!({"metadata": {"name": "s"}, "spec": {"ports": [{"name": "a", "port": 80}]}});
    let r = raw
        .post_json("/api/v1/namespaces/default/services", &svc)
        .await;
    assert_eq!(r.status, 201);
    assert!(r.json()["status"].is_object(), "services get a status");
    let r = raw
        .send(
            "PATCH",
            "/api/v1/namespaces/default/services/s",
            Some("application/strategic-merge-patch+json"),
            br#"{"spec": {"ports": [{"name": "b", "port": 81}]}}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["spec"]["ports"].as_array().map(Vec::len), Some(2));
}

#[tokio::test]
async fn events_are_one_storage_with_two_views() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let ev = json!({"metadata": {"generateName": "kopf-event-"}, "involvedObject": {"kind": "ConfigMap", "name": "c1", "namespace": "default"},
        "reason": "Logging", "message": "hello", "type": "Normal", "source": {"component": "kopf"}});
    assert_eq!(
        raw.post_json("/api/v1/namespaces/default/events", &ev)
            .await
            .status,
        201
    );
    let v1 = raw
        .get("/apis/events.k8s.io/v1/namespaces/default/events")
        .await
        .json();
    assert_eq!(v1["items"][0]["note"], "hello");
    assert_eq!(v1["items"][0]["regarding"]["name"], "c1");
    let sel = raw.get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dc1%2Creason%3DLogging%2Csource%3Dkopf").await.json();
    assert_eq!(sel["items"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn scale_subresource_of_deployments() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let d = json!({"metadata": {"name": "d"}, "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
    let r = raw
        .post_json("/apis/apps/v1/namespaces/default/deployments", &d)
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["metadata"]["generation"], 1);
    let s = raw
        .get("/apis/apps/v1/namespaces/default/deployments/d/scale")
        .await
        .json();
    assert_eq!(s["kind"], "Scale");
    assert_eq!(s["spec"]["replicas"], 2);
    let r = raw
        .send(
            "PATCH",
            "/apis/apps/v1/namespaces/default/deployments/d/scale",
            Some("application/merge-patch+json"),
            br#"{"spec": {"replicas": 5}}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let d = raw
        .get("/apis/apps/v1/namespaces/default/deployments/d")
        .await
        .json();
    assert_eq!(d["spec"]["replicas"], 5);
    assert_eq!(d["metadata"]["generation"], 2);
}

#[tokio::test]
async fn server_side_apply_tracks_managers_and_conflicts() {
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let cfg = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "1", "b": "2"}});
    // Apply creates the object and records the manager.
    let created = cms
        .patch("ssa", &PatchParams::apply("tool-a"), &Patch::Apply(&cfg))
        .await
        .expect("apply creates");
    let mf = created.metadata.managed_fields.clone().unwrap_or_default();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("tool-a"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    let fields = serde_json::to_value(&mf[0].fields_v1).expect("fieldsV1");
    assert!(fields["f:data"].get("f:a").is_some(), "{fields}");
    // Another manager applying a different value conflicts.
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "9"}});
    let (code, msg) = err_code(
        cms.patch("ssa", &PatchParams::apply("tool-b"), &Patch::Apply(&other))
            .await
            .expect_err("409"),
    );
    assert_eq!(code, 409);
    assert_eq!(
        msg,
        "Apply failed with 1 conflict: conflict with \"tool-a\": .data.a"
    );
    // Forcing takes the field over.
    let forced = cms
        .patch(
            "ssa",
            &PatchParams::apply("tool-b").force(),
            &Patch::Apply(&other),
        )
        .await
        .expect("forced");
    assert_eq!(
        forced
            .data
            .as_ref()
            .and_then(|d| d.get("a"))
            .map(String::as_str),
        Some("9")
    );
    // A merge patch by a third manager is recorded as an Update.
    let updated = cms
        .patch(
            "ssa",
            &PatchParams {
                field_manager: Some("editor".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"c": "3"}})),
        )
        .await
        .expect("merge");
    let managers: Vec<(String, String)> = updated
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("editor".into(), "Update".into())),
        "{managers:?}"
    );
    // tool-a stops applying b: b is removed; a (now owned by tool-b) stays.
    let shrunk =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {}});
    let after = cms
        .patch("ssa", &PatchParams::apply("tool-a"), &Patch::Apply(&shrunk))
        .await
        .expect("apply");
    let data = after.data.unwrap_or_default();
    assert!(!data.contains_key("b"), "{data:?}");
    assert_eq!(data.get("a").map(String::as_str), Some("9"));
    assert_eq!(data.get("c").map(String::as_str), Some("3"));
}

#[tokio::test]
async fn scheduled_pods_terminate_gracefully_through_the_simulated_kubelet() {
    let server = FakeApiServer::builder()
        .pod_termination_cap(std::time::Duration::from_millis(300))
        .start()
        .await
        .expect("start");
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox"}]}}))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    let deleted = pods
        .delete("p", &DeleteParams::default())
        .await
        .expect("delete");
    let terminating = deleted.left().expect("the terminating pod");
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert!(
        pods.get_opt("p").await.expect("get").is_some(),
        "still terminating"
    );
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert!(
        pods.get_opt("p").await.expect("get").is_none(),
        "the kubelet confirmed"
    );
    // An explicit grace period of 0 deletes at once.
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    pods.delete(
        "p",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .expect("delete");
    assert!(pods.get_opt("p").await.expect("get").is_none());
}

#[tokio::test]
async fn settings_crd_delay_aggregated_discovery_and_history_limit() {
    let server = FakeApiServer::builder()
        .crd_establish_delay(std::time::Duration::from_millis(300))
        .aggregated_discovery(false)
        .history_limit(3)
        .start()
        .await
        .expect("start");
    let raw = Raw::new(&server);
    let r = raw
        .post_json(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &common::kopfexample_crd(),
        )
        .await;
    assert_eq!(r.status, 201);
    assert!(r.json()["status"].get("conditions").is_none());
    assert_eq!(
        raw.get("/apis/kopf.dev/v1").await.status,
        404,
        "not served before Established"
    );
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    assert_eq!(
        raw.get("/apis/kopf.dev/v1").await.status,
        200,
        "served once Established"
    );
    // Aggregated discovery off: the aggregated Accept gets the legacy document.
    let client = server.client();
    let req = http::Request::get("/apis")
        .header(
            "Accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        )
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(req).await.expect("send");
    assert!(text.contains("\"APIGroupList\""), "{text}");
    // History of 3 changes: an RV from before them is expired.
    for i in 0..5 {
        raw.post_json(
            "/api/v1/namespaces/default/configmaps",
            &json!({"metadata": {"name": format!("c{i}")}}),
        )
        .await;
    }
    let r = raw
        .get("/api/v1/namespaces/default/configmaps?resourceVersionMatch=Exact&resourceVersion=1")
        .await;
    assert_eq!(r.status, 410);
}

#[tokio::test]
async fn kube_runtime_event_recorder_and_event_validation() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let server = FakeApiServer::start().await.expect("start");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let c = cms
        .create(&PostParams::default(), &cm("c1"))
        .await
        .expect("create");
    let reporter = Reporter {
        controller: "kopf-test".into(),
        instance: Some("pod-1".into()),
    };
    let recorder = Recorder::new(server.client(), reporter);
    let event = Event {
        type_: EventType::Normal,
        reason: "Tested".into(),
        note: Some("hello".into()),
        action: "Testing".into(),
        secondary: None,
    };
    let reference = kube::Resource::object_ref(&c, &());
    recorder
        .publish(&event, &reference)
        .await
        .expect("first publish creates");
    recorder
        .publish(&event, &reference)
        .await
        .expect("second publish updates the series");
    let raw = Raw::new(&server);
    let list = raw
        .get("/apis/events.k8s.io/v1/namespaces/default/events")
        .await
        .json();
    let items = list["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{list}");
    assert_eq!(items[0]["note"], "hello");
    assert_eq!(items[0]["reportingController"], "kopf-test");
    // The core view shows the same event.
    let core = raw.get("/api/v1/namespaces/default/events").await.json();
    assert_eq!(core["items"][0]["message"], "hello");
    // events.k8s.io requires eventTime and a Normal/Warning type.
    let bad = raw
        .post_json("/apis/events.k8s.io/v1/namespaces/default/events", &json!({"metadata": {"name": "bad"}, "type": "Debug", "regarding": {"namespace": "default"}}))
        .await;
    assert_eq!(bad.status, 422);
    let msg = bad.json()["message"].as_str().unwrap_or("").to_string();
    assert!(
        msg.contains("eventTime: Required value") && msg.contains("type: Invalid value"),
        "{msg}"
    );
    // core/v1 without eventTime: the namespace must match the involved object's.
    let bad = raw
        .post_json(
            "/api/v1/namespaces/default/events",
            &json!({"metadata": {"name": "bad2"}, "involvedObject": {"namespace": "other"}}),
        )
        .await;
    assert_eq!(bad.status, 422);
}

/// Container logs from the simulated kubelet: the container resolution errors, timestamps,
/// `previous`, and a follow stream that gets new lines and ends at a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_logs_are_served_and_followed() {
    use futures::{AsyncBufReadExt, StreamExt};
    let server = FakeApiServer::start().await.expect("start");
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "main", "image": "busybox"}, {"name": "side", "image": "busybox"}]}}))
        .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    server.append_log("default", "p", "main", &["one", "two"]);
    let params = |container: Option<&str>| kube::api::LogParams {
        container: container.map(String::from),
        timestamps: true,
        ..Default::default()
    };
    let (code, message) = err_code(pods.logs("p", &params(None)).await.expect_err("which one?"));
    assert_eq!(code, 400);
    assert_eq!(
        message,
        "a container name must be specified for pod p, choose one of: [main side]"
    );
    let (_, message) = err_code(pods.logs("p", &params(Some("x"))).await.expect_err("no x"));
    assert_eq!(message, "container x is not valid for pod p");
    let text = pods.logs("p", &params(Some("main"))).await.expect("logs");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let (stamp, line) = lines[1].split_once(' ').expect("a timestamp first");
    assert!(stamp.parse::<jiff::Timestamp>().is_ok(), "{stamp}");
    assert_eq!(line, "two");

    let follow = kube::api::LogParams {
        container: Some("main".into()),
        follow: true,
        ..Default::default()
    };
    let mut stream = pods.log_stream("p", &follow).await.expect("follow").lines();
    assert_eq!(
        stream.next().await.map(Result::ok),
        Some(Some("one".into()))
    );
    assert_eq!(
        stream.next().await.map(Result::ok),
        Some(Some("two".into()))
    );
    server.append_log("default", "p", "main", &["three"]);
    assert_eq!(
        stream.next().await.map(Result::ok),
        Some(Some("three".into()))
    );
    assert_eq!(server.restart_container("default", "p", "main"), Ok(1));
    assert!(
        stream.next().await.is_none(),
        "the old instance's stream ends"
    );
    let restarted = pods.get("p").await.expect("get");
    let statuses = restarted
        .status
        .and_then(|s| s.container_statuses)
        .expect("statuses");
    assert_eq!(
        statuses.iter().map(|s| s.restart_count).collect::<Vec<_>>(),
        [1, 0]
    );
    let previous = kube::api::LogParams {
        container: Some("main".into()),
        previous: true,
        ..Default::default()
    };
    assert_eq!(
        pods.logs("p", &previous).await.expect("previous"),
        "one\ntwo\nthree\n"
    );
    assert_eq!(
        pods.logs("p", &params(Some("main"))).await.expect("new"),
        ""
    );
}
