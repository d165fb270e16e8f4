// Raw event and index handlers are called once per event.
#[kopf::on::event("kopfexamples", retries = 3)]
async fn event_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

#[kopf::on::index("kopfexamples", timeout = 10)]
async fn index_fn() -> Result<Option<(String, String)>, kopf::HandlerError> {
    Ok(None)
}

fn main() {}
