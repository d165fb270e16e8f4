//! The `kopf-rs-reconcile` system of `cargo xtask bench`: the kube-rs system's job in
//! kopf-rs's reconcile mode (`Operator::reconcile`), no cause handlers. The same level-based
//! reconcile as `kube_rs_operator.rs`: from the object's current state, a message in
//! `status.create_fn` and `spec.field` in `status.update_fn` when they are missing or stale,
//! nothing otherwise. Its merge patch goes out as one `/status` PATCH after the reconcile
//! returns, as the kube-rs reconcile's `patch_status`; with no cause handlers there is no
//! diff-base and, with no cleanup, no finalizer.

use std::sync::Arc;

use kopf::{Action, HandlerError, Operator, ReconcileContext};
use serde_json::{Value, json};

async fn reconcile(obj: Arc<Value>, ctx: ReconcileContext) -> Result<Action, HandlerError> {
    let field = obj.pointer("/spec/field").cloned().unwrap_or(Value::Null);
    let created = obj
        .pointer("/status/create_fn")
        .is_some_and(|v| !v.is_null());
    // A merge patch with `null` removes the key, so an absent `field` reads as `null` too.
    let seen = obj
        .pointer("/status/update_fn/field")
        .unwrap_or(&Value::Null);
    if !created {
        ctx.patch().merge(json!({"status": {
            "create_fn": {"message": "hello world"},
            "update_fn": {"field": field},
        }}));
    } else if *seen != field {
        ctx.patch()
            .merge(json!({"status": {"update_fn": {"field": field}}}));
    }
    Ok(Action::await_change())
}

#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    Operator::new()
        .reconcile("kopfexamples", reconcile)
        .main()
        .await
}
