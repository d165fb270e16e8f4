// Values of the wrong type for #[kopf::reconcile]'s options.
#[kopf::reconcile("kopfexamples", owns = "configmaps", concurrency = "8")]
async fn concurrency_as_string(
    _obj: std::sync::Arc<serde_json::Value>,
    _ctx: kopf::ReconcileContext,
) -> Result<kopf::Action, kopf::HandlerError> {
    Ok(kopf::Action::await_change())
}

#[kopf::reconcile("kopfexamples", owns = [configmaps])]
async fn owns_not_strings(
    _obj: std::sync::Arc<serde_json::Value>,
    _ctx: kopf::ReconcileContext,
) -> Result<kopf::Action, kopf::HandlerError> {
    Ok(kopf::Action::await_change())
}

#[kopf::reconcile("kopfexamples", debounce = "1 fortnight")]
async fn bad_duration(
    _obj: std::sync::Arc<serde_json::Value>,
    _ctx: kopf::ReconcileContext,
) -> Result<kopf::Action, kopf::HandlerError> {
    Ok(kopf::Action::await_change())
}

#[kopf::reconcile("kopfexamples", backoff = 5)]
async fn backoff_not_a_range(
    _obj: std::sync::Arc<serde_json::Value>,
    _ctx: kopf::ReconcileContext,
) -> Result<kopf::Action, kopf::HandlerError> {
    Ok(kopf::Action::await_change())
}

#[kopf::reconcile("kopfexamples", backoff = "300s..1s")]
async fn backoff_backwards(
    _obj: std::sync::Arc<serde_json::Value>,
    _ctx: kopf::ReconcileContext,
) -> Result<kopf::Action, kopf::HandlerError> {
    Ok(kopf::Action::await_change())
}

#[kopf::reconcile("kopfexamples", cleanup = "remove")]
async fn cleanup_as_string(
    _obj: std::sync::Arc<serde_json::Value>,
    _ctx: kopf::ReconcileContext,
) -> Result<kopf::Action, kopf::HandlerError> {
    Ok(kopf::Action::await_change())
}

#[kopf::reconcile("kopfexamples", concurrency = 0)]
async fn no_concurrency(
    _obj: std::sync::Arc<serde_json::Value>,
    _ctx: kopf::ReconcileContext,
) -> Result<kopf::Action, kopf::HandlerError> {
    Ok(kopf::Action::await_change())
}

fn main() {}
