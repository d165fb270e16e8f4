#[kopf::on::create("kopfexamples", backoff = 1e400)]
async fn create_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

fn main() {}
