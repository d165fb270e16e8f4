#[kopf::on::field("kopfexamples")]
async fn field_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

fn main() {}
