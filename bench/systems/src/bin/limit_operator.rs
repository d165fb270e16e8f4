//! The ceiling: a plain list+watch client doing the same writes as a Kopf operator, no framework.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use futures::{StreamExt, pin_mut};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tracing::{error, info};

const LAST_HANDLED: &str = "kopf.zalando.org/last-handled-configuration";

#[derive(Parser)]
#[command(about = "The benchmark's ceiling: list+watch and the bare minimum of writes.")]
struct Args {
    /// Write only the status (skip the last-handled-configuration annotation PATCH).
    #[arg(long)]
    status_only: bool,
    /// How many objects are handled at once at most.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: u32,
}

#[derive(Clone, Copy)]
enum Cause {
    Create,
    Update,
}

/// What is known of one object (by uid).
#[derive(Default)]
struct Entry {
    /// The spec last handled (recorded before the requests are sent).
    handled: Option<Value>,
    /// A handling of this object is in flight.
    busy: bool,
    /// The newest version seen while busy: re-checked when the handling ends.
    pending: Option<DynamicObject>,
}

struct Shared {
    client: Client,
    resource: ApiResource,
    status_only: bool,
    semaphore: Semaphore,
    state: Mutex<HashMap<String, Entry>>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An object from the list or from an ADDED/MODIFIED event.
fn observe(shared: &Arc<Shared>, obj: DynamicObject) {
    let Some(uid) = obj.metadata.uid.clone() else {
        return;
    };
    let mut state = shared.state();
    let entry = state.entry(uid.clone()).or_default();
    if entry.busy {
        entry.pending = Some(obj);
    } else {
        dispatch(shared, uid, entry, obj);
    }
}

/// Decides from the entry and the object; starts a handling if there is something to do.
fn dispatch(shared: &Arc<Shared>, uid: String, entry: &mut Entry, obj: DynamicObject) {
    let spec = obj.data.get("spec").cloned().unwrap_or(Value::Null);
    let cause = match &entry.handled {
        None if obj
            .data
            .pointer("/status/create_fn")
            .is_some_and(|v| !v.is_null()) =>
        {
            // Created before we started: nothing to do now, later spec changes are updates.
            entry.handled = Some(spec);
            return;
        }
        None => Cause::Create,
        Some(handled) if *handled != spec => Cause::Update,
        Some(_) => return,
    };
    let previous = entry.handled.replace(spec.clone());
    entry.busy = true;
    tokio::spawn(handle(shared.clone(), uid, obj, spec, cause, previous));
}

async fn handle(
    shared: Arc<Shared>,
    uid: String,
    obj: DynamicObject,
    spec: Value,
    cause: Cause,
    previous: Option<Value>,
) {
    let result = match shared.semaphore.acquire().await {
        Ok(_permit) => send(&shared, &obj, &spec, cause).await,
        Err(_) => return, // The semaphore is never closed.
    };
    let retry = match result {
        Ok(()) => false,
        Err(kube::Error::Api(status)) if status.code == 404 => false, // Deleted meanwhile.
        Err(err) => {
            error!(
                "{}/{}: {err}",
                obj.namespace().unwrap_or_default(),
                obj.name_any()
            );
            true
        }
    };
    if retry {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let mut state = shared.state();
    let Some(entry) = state.get_mut(&uid) else {
        return;
    }; // Deleted meanwhile.
    entry.busy = false;
    let next = if retry {
        entry.handled = previous;
        Some(entry.pending.take().unwrap_or(obj))
    } else {
        entry.pending.take()
    };
    if let Some(next) = next {
        dispatch(&shared, uid, entry, next);
    }
}

/// The requests of one handling, one after the other.
async fn send(
    shared: &Shared,
    obj: &DynamicObject,
    spec: &Value,
    cause: Cause,
) -> kube::Result<()> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let api: Api<DynamicObject> =
        Api::namespaced_with(shared.client.clone(), &ns, &shared.resource);
    let pp = PatchParams::default();
    if !shared.status_only {
        let last = json!({"spec": spec}).to_string();
        let patch = json!({"metadata": {"annotations": {LAST_HANDLED: last}}});
        api.patch(&name, &pp, &Patch::Merge(&patch)).await?;
    }
    let patch = match cause {
        Cause::Create => json!({"status": {"create_fn": {"message": "hello world"}}}),
        Cause::Update => {
            let field = spec.get("field").cloned().unwrap_or(Value::Null);
            json!({"status": {"update_fn": {"field": field}}})
        }
    };
    api.patch_status(&name, &pp, &Patch::Merge(&patch)).await?;
    Ok(())
}

/// Lists everything (paged), handles what needs it, and returns the list's resourceVersion.
async fn list_all(shared: &Arc<Shared>, api: &Api<DynamicObject>) -> kube::Result<String> {
    let mut lp = ListParams::default().limit(500);
    let mut seen = HashSet::new();
    loop {
        let page = api.list(&lp).await?;
        let version = page.metadata.resource_version.unwrap_or_default();
        let token = page.metadata.continue_.filter(|t| !t.is_empty());
        for obj in page.items {
            seen.extend(obj.metadata.uid.clone());
            observe(shared, obj);
        }
        match token {
            Some(token) => lp = lp.continue_token(&token),
            None => {
                // Forget the objects deleted while we were not watching.
                shared.state().retain(|uid, e| e.busy || seen.contains(uid));
                return Ok(version);
            }
        }
    }
}

/// List, then watch from the list's version; re-watch from the last version seen when the
/// stream ends, re-list on 410 Gone. Never returns.
async fn run(shared: Arc<Shared>) {
    let api: Api<DynamicObject> = Api::all_with(shared.client.clone(), &shared.resource);
    let wp = WatchParams::default();
    let mut version: Option<String> = None;
    loop {
        let from = match version.take() {
            Some(v) => v,
            None => match list_all(&shared, &api).await {
                Ok(v) => v,
                Err(err) => {
                    error!("list failed: {err}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        let stream = match api.watch(&wp, &from).await {
            Ok(stream) => stream,
            Err(kube::Error::Api(status)) if status.code == 410 => continue,
            Err(err) => {
                error!("watch failed: {err}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                version = Some(from);
                continue;
            }
        };
        pin_mut!(stream);
        let mut last = Some(from);
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj)) => {
                    last = obj.resource_version().or(last);
                    observe(&shared, obj);
                }
                Ok(WatchEvent::Deleted(obj)) => {
                    last = obj.resource_version().or(last);
                    if let Some(uid) = &obj.metadata.uid {
                        shared.state().remove(uid);
                    }
                }
                Ok(WatchEvent::Bookmark(bookmark)) => {
                    last = Some(bookmark.metadata.resource_version);
                }
                Ok(WatchEvent::Error(status)) => {
                    if status.code == 410 {
                        last = None;
                    } else {
                        error!("watch error: {}", status.message);
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    break;
                }
                Err(err) => {
                    error!("watch stream failed: {err}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    break;
                }
            }
        }
        version = last;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    bench_systems::init_logging(env!("CARGO_CRATE_NAME"));
    let shutdown = bench_systems::shutdown_signal()?;
    let shared = Arc::new(Shared {
        client: Client::try_default().await?,
        resource: bench_systems::kopfexamples(),
        status_only: args.status_only,
        semaphore: Semaphore::new(args.concurrency as usize),
        state: Mutex::new(HashMap::new()),
    });
    info!(
        "limit-operator: watching kopfexamples.kopf.dev/v1 in all namespaces \
         (status_only={}, concurrency={})",
        args.status_only, args.concurrency
    );
    tokio::select! {
        () = run(shared) => {}
        () = shutdown => info!("limit-operator: shutting down"),
    }
    Ok(())
}
