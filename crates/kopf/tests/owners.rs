//! Owner filters against the fake API server: handlers of children that run only for
//! objects owned by the right kind (any owner, the controller only, a predicate), and a
//! children handler that writes what it sees into its owner's status.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use kopf::{
    HandlerError, Operator, Options, Reason,
    handler::{Body, Client, Owner, OwnerRef},
};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

mod common;

use common::{Running, eventually, handled, kex_api};

type Seen = Arc<Mutex<BTreeSet<String>>>;

/// A handler that notes `<what>:<name>` of each object it is called for.
fn noting(
    seen: &Seen,
    what: &'static str,
) -> impl Fn(Body) -> std::future::Ready<Result<(), HandlerError>> + Send + Sync + 'static {
    let seen = seen.clone();
    move |Body(body): Body| {
        let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
        seen.lock().expect("lock").insert(format!("{what}:{name}"));
        std::future::ready(Ok(()))
    }
}

fn configmaps(server: &kopf_testing::FakeApiServer) -> Api<k8s_openapi::api::core::v1::ConfigMap> {
    Api::namespaced(server.client(), "default")
}

/// A ConfigMap with these owner references.
fn child(name: &str, owners: Value) -> k8s_openapi::api::core::v1::ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": owners},
        "data": {"field": name},
    }))
    .expect("a ConfigMap")
}

fn owner_ref(api_version: &str, kind: &str, name: &str, uid: &str, controller: bool) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": controller})
}

#[tokio::test(start_paused = true)]
async fn owner_filters_pick_the_children_of_the_right_owners() {
    let server = common::paused_server().await;
    let kex = kex_api(&server)
        .create(
            &PostParams::default(),
            &handled("kex-a", json!({"field": "a"})),
        )
        .await
        .expect("owner");
    let uid = kex.metadata.uid.clone().expect("uid");
    let example = |controller| owner_ref("kopf.dev/v1", "KopfExample", "kex-a", &uid, controller);
    let cms = configmaps(&server);
    for cm in [
        child("controlled", json!([example(true)])),
        child(
            "co-owned",
            json!([
                owner_ref("apps/v1", "ReplicaSet", "rs", "u-rs", true),
                example(false)
            ]),
        ),
        child(
            "other-group",
            json!([owner_ref("other.dev/v1", "KopfExample", "x", "u-x", true)]),
        ),
        child(
            "of-a-deployment",
            json!([owner_ref("apps/v1", "Deployment", "d", "u-d", true)]),
        ),
        child("orphan", json!([])),
        child(
            "of-special-job",
            json!([owner_ref("batch/v1", "Job", "special", "u-j", true)]),
        ),
    ] {
        cms.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }

    let seen: Seen = Arc::default();
    let op = Operator::new()
        .on_with(
            Reason::Create,
            "configmaps",
            "of_examples",
            noting(&seen, "owner"),
            Options::new().owner("kopf.dev/KopfExample"),
        )
        .on_with(
            Reason::Create,
            "configmaps",
            "controlled_by_examples",
            noting(&seen, "controller"),
            Options::new().controller_owner("KopfExample"),
        )
        .on_event_with(
            "configmaps",
            "of_special",
            noting(&seen, "predicate"),
            Options::new().owner_when(|o: &OwnerRef| o.name == "special" && o.group() == "batch"),
        );
    let running = Running::start(&server, op).await;
    let expected: BTreeSet<String> = [
        "owner:controlled",
        "owner:co-owned",
        "controller:controlled",
        // `KopfExample` without a group: any group's.
        "controller:other-group",
        "predicate:of-special-job",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    eventually("the children of the right owners are handled", async || {
        *seen.lock().expect("lock") == expected
    })
    .await;
    // Nothing else comes: the creation handlers' own writes are seen back meanwhile.
    running.settled().await;
    assert_eq!(*seen.lock().expect("lock"), expected);
    // The objects no handler wants are not touched (no finalizer, no annotations).
    for name in ["of-a-deployment", "orphan"] {
        let cm = cms.get(name).await.expect("get");
        assert_eq!(cm.metadata.finalizers, None, "{name}");
        assert_eq!(cm.metadata.annotations, None, "{name}");
    }
    running.stop().await;
}

/// A children handler: every event of a ConfigMap controlled by a KopfExample writes the
/// ConfigMap's data into the owner's status, through the `Owner` argument.
#[tokio::test(start_paused = true)]
async fn a_children_handler_writes_to_its_owner() {
    let server = common::paused_server().await;
    let kexes = kex_api(&server);
    let kex = kexes
        .create(
            &PostParams::default(),
            &handled("kex-b", json!({"field": "b"})),
        )
        .await
        .expect("owner");
    let uid = kex.metadata.uid.clone().expect("uid");
    let op = Operator::new().on_event_with(
        "configmaps",
        "child_to_owner",
        |Owner(owner): Owner, Body(body): Body, Client(client): Client| async move {
            let ar = kube::core::ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk(owner.group(), "v1", &owner.kind),
                "kopfexamples",
            );
            let api: Api<kube::api::DynamicObject> =
                Api::namespaced_with(client, owner.namespace.as_deref().unwrap_or("default"), &ar);
            let patch = json!({"status": {"child": body["data"]["field"]}});
            api.patch_status(&owner.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| HandlerError::other(format!("cannot patch the owner: {e}")))?;
            Ok::<_, HandlerError>(())
        },
        Options::new().controller_owner("kopf.dev/KopfExample"),
    );
    let running = Running::start(&server, op).await;
    let cms = configmaps(&server);
    cms.create(
        &PostParams::default(),
        &child(
            "kex-b-cm",
            json!([owner_ref("kopf.dev/v1", "KopfExample", "kex-b", &uid, true)]),
        ),
    )
    .await
    .expect("create");
    let status_child = async || -> Value {
        kexes.get("kex-b").await.expect("get").data["status"]["child"].clone()
    };
    eventually("the owner's status has the child's data", async || {
        status_child().await == "kex-b-cm"
    })
    .await;
    cms.patch(
        "kex-b-cm",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"field": "changed"}})),
    )
    .await
    .expect("patch");
    eventually("the owner's status follows the child", async || {
        status_child().await == "changed"
    })
    .await;
    running.stop().await;
}
