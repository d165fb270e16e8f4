#[kopf::on::update("kopfexamples", retries = "3")]
async fn update_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

fn main() {}
