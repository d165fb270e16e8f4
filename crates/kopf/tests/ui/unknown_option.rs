#[kopf::on::update("kopfexamples", priority = 3)]
async fn update_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

fn main() {}
