//! `#[kopf::reconcile]`: the reconcile it registers runs on an operator built from the
//! registry, with its options wired: owned ConfigMaps trigger it again, a related one
//! through its mapper, and its cleanup runs on deletion. (A file of its own: every operator
//! of `macros.rs` has every handler of that file, and a reconcile sees every object.)

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf::{
    Action, HandlerError, Operator, ReconcileContext,
    reconcile::{ObjectRef, Trigger},
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

mod common;

use common::{Running, eventually, kex_api, obj, owned_configmap, record, records, until_object};

/// Makes `<name>-cm` hold `spec.field`, owned by the object; records why it ran.
#[kopf::reconcile(
    "kopfexamples",
    id = "converge",
    owns = ["configmaps"],
    watches("configmaps" = related_to),
    cleanup = goodbye,
    debounce = "10ms",
    concurrency = 8,
    timeout = 30,
    backoff = "10ms..1s",
)]
async fn converge(obj: Arc<Value>, ctx: ReconcileContext) -> Result<Action, HandlerError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    record(name, ctx.trigger().to_string());
    let kopf::handler::Client(client) = ctx.extract::<kopf::handler::Client>()?;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let want = obj["spec"]["field"].as_str().unwrap_or_default();
    if cms.get_opt(&format!("{name}-cm")).await?.is_none() {
        let cm = owned_configmap(&obj, want);
        cms.create(&PostParams::default(), &cm).await?;
    }
    Ok(Action::await_change())
}

/// ConfigMaps annotated `example.com/for: <name>` are about that object.
fn related_to(cm: &ConfigMap) -> Vec<ObjectRef> {
    cm.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("example.com/for"))
        .map(|name| vec![ObjectRef::namespaced("default", name)])
        .unwrap_or_default()
}

async fn goodbye(obj: Arc<Value>, _ctx: ReconcileContext) -> Result<(), HandlerError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    record(name, "cleanup");
    Ok(())
}

#[test]
fn the_attribute_registers_one_reconcile() {
    let regs: Vec<_> = kopf::inventory::iter::<kopf::registry::ReconcileRegistration>
        .into_iter()
        .map(|r| (r.resource, r.id))
        .collect();
    assert_eq!(regs, [("kopfexamples", "converge")]);
}

#[tokio::test(start_paused = true)]
async fn the_registered_reconcile_runs_with_its_owned_and_related_objects_and_cleanup() {
    let server = common::paused_server().await;
    let running = Running::start(&server, Operator::from_registry()).await;
    let api = kex_api(&server);
    api.create(&PostParams::default(), &obj("r", json!({"field": "one"})))
        .await
        .expect("create");
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    eventually("the reconcile creates r-cm", async || {
        cms.get_opt("r-cm").await.expect("get").is_some()
    })
    .await;
    let seen = |what: &str| records("r").iter().any(|r| r == what);
    let owned = Trigger::Owned("ConfigMap/r-cm".into()).to_string();
    let related = Trigger::Related("ConfigMap/rel".into()).to_string();

    // `owns`: the owned ConfigMap deleted by hand triggers the owner (nothing else would:
    // the reconcile awaits a change), which makes it again.
    cms.delete("r-cm", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("r-cm made again", async || {
        cms.get_opt("r-cm").await.expect("get").is_some()
    })
    .await;
    assert!(seen(&owned), "{:?}", records("r"));
    // The re-creation's own event asks for a reconcile too: let it be taken first (a
    // request waiting to be taken keeps its first reason, and this one is `Owned`).
    running.settled().await;

    // `watches`: a ConfigMap that names the object through the mapper.
    let rel: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "rel", "annotations": {"example.com/for": "r"}}}),
    )
    .expect("cm");
    cms.create(&PostParams::default(), &rel)
        .await
        .expect("create rel");
    eventually("the related ConfigMap triggers the reconcile", async || {
        seen(&related)
    })
    .await;

    // A change of the object itself.
    api.patch(
        "r",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"field": "two"}})),
    )
    .await
    .expect("patch");
    let changed = Trigger::ObjectChanged.to_string();
    eventually("the change triggers the reconcile", async || seen(&changed)).await;

    // `cleanup`: runs on deletion, then the finalizer goes and so does the object.
    api.delete("r", &DeleteParams::default())
        .await
        .expect("delete r");
    until_object(&api, "r", "r deleted", |o| o.is_none()).await;
    running.stop().await;

    let records = records("r");
    assert_eq!(
        records.first(),
        Some(&Trigger::Listed.to_string()),
        "{records:?}"
    );
    assert_eq!(
        records.iter().filter(|r| *r == "cleanup").count(),
        1,
        "{records:?}"
    );
}
