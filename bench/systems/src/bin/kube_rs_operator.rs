//! The idiomatic kube-rs way: a `Controller` with a level-based reconciler.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::controller::{Action, Controller, Error as ControllerError};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::{error, info};

struct Ctx {
    client: Client,
    resource: ApiResource,
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let field = obj
        .data
        .pointer("/spec/field")
        .cloned()
        .unwrap_or(Value::Null);
    let created = obj
        .data
        .pointer("/status/create_fn")
        .is_some_and(|v| !v.is_null());
    // A merge patch with `null` removes the key, so an absent `field` reads as `null` too.
    let seen = obj
        .data
        .pointer("/status/update_fn/field")
        .unwrap_or(&Value::Null);
    let patch = if !created {
        json!({"status": {"create_fn": {"message": "hello world"}, "update_fn": {"field": field}}})
    } else if *seen != field {
        json!({"status": {"update_fn": {"field": field}}})
    } else {
        return Ok(Action::await_change());
    };
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &ctx.resource);
    api.patch_status(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(Action::await_change())
}

fn error_policy(_obj: Arc<DynamicObject>, _err: &kube::Error, _ctx: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_secs(1))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    bench_systems::init_logging(env!("CARGO_CRATE_NAME"));
    let shutdown = bench_systems::shutdown_signal()?;
    let client = Client::try_default().await?;
    let resource = bench_systems::kopfexamples();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let ctx = Arc::new(Ctx {
        client,
        resource: resource.clone(),
    });
    info!("kube-rs-operator: watching kopfexamples.kopf.dev/v1 in all namespaces");

    let run = Controller::new_with(api, watcher::Config::default(), resource)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok(_) | Err(ControllerError::ObjectNotFound(_)) => {}
                Err(err) => error!("{err}"),
            }
        });
    tokio::select! {
        () = run => anyhow::bail!("the controller stopped unexpectedly"),
        () = shutdown => info!("kube-rs-operator: shutting down"),
    }
    Ok(())
}
