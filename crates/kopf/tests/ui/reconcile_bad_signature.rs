// A reconcile returns Result<Action, E>; the error points at the function.
use std::sync::Arc;

use kopf::{HandlerError, ReconcileContext};

#[kopf::reconcile("kopfexamples")]
async fn reconcile(_obj: Arc<serde_json::Value>, _ctx: ReconcileContext) -> Result<(), HandlerError> {
    Ok(())
}

fn main() {}
