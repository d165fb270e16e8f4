// Options #[kopf::reconcile] does not take: a misspelling gets a suggestion, an option of
// other macros says why not here.
#[kopf::reconcile("kopfexamples", debunce = "1s")]
async fn misspelled(
    _obj: std::sync::Arc<serde_json::Value>,
    _ctx: kopf::ReconcileContext,
) -> Result<kopf::Action, kopf::HandlerError> {
    Ok(kopf::Action::await_change())
}

#[kopf::reconcile("kopfexamples", retries = 3)]
async fn with_retries(
    _obj: std::sync::Arc<serde_json::Value>,
    _ctx: kopf::ReconcileContext,
) -> Result<kopf::Action, kopf::HandlerError> {
    Ok(kopf::Action::await_change())
}

#[kopf::reconcile("kopfexamples", labels(tier = "gold"))]
async fn filtered(
    _obj: std::sync::Arc<serde_json::Value>,
    _ctx: kopf::ReconcileContext,
) -> Result<kopf::Action, kopf::HandlerError> {
    Ok(kopf::Action::await_change())
}

#[kopf::reconcile(owns = ["configmaps"])]
async fn no_resource(
    _obj: std::sync::Arc<serde_json::Value>,
    _ctx: kopf::ReconcileContext,
) -> Result<kopf::Action, kopf::HandlerError> {
    Ok(kopf::Action::await_change())
}

fn main() {}
