//! Daemons: a long-running task per object, asked to stop when the object is deleted, no
//! longer matches, or the operator exits.
//!
//! ```sh
//! cargo run --example daemons -- run --fake
//! ```
//!
//! `monitor` (async) writes a heartbeat into `status.monitor` every second through the
//! operator's client until it is asked to stop. `sync_monitor` is a plain `fn`: it runs on a
//! blocking thread and waits on its stop flag. Both log why they stop. Deleting the object
//! stops them; then the finalizer is released and the object goes.

use std::time::Duration;

use kopf::prelude::*;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

async fn monitor(
    Client(client): Client,
    Name(name): Name,
    Namespace(namespace): Namespace,
    stopped: Stopped,
    logger: Logger,
) -> Result<(), HandlerError> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, namespace.as_deref().unwrap_or("default"), &ar);
    let mut beats = 0u64;
    loop {
        beats += 1;
        let patch = json!({"status": {"monitor": {"beats": beats}}});
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            logger.warn(format!("cannot write the heartbeat: {e}"));
        }
        if let Some(reason) = stopped.sleep(Duration::from_secs(1)).await {
            logger.info(format!("monitor stops: {reason}"));
            return Ok(());
        }
    }
}

fn sync_monitor(stopped: Stopped, logger: Logger) -> Result<(), HandlerError> {
    while stopped.wait_blocking(Duration::from_secs(5)).is_none() {
        logger.debug("still here");
    }
    logger.info(format!(
        "sync_monitor stops: {}",
        stopped.reason().map(|r| r.to_string()).unwrap_or_default()
    ));
    Ok(())
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    Operator::new()
        .daemon(
            "kopfexamples",
            "monitor",
            DaemonOptions::new().cancellation_timeout(Duration::from_secs(5)),
            monitor,
        )
        .daemon(
            "kopfexamples",
            "sync_monitor",
            DaemonOptions::new().cancellation_timeout(Duration::from_secs(10)),
            sync_monitor,
        )
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    operator()
        .fake_manifests(kopf::cli::example_manifests())
        .main()
        .await
}
