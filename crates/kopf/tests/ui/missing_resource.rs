#[kopf::on::create()]
async fn create_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

fn main() {}
