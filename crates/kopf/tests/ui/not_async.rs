#[kopf::on::create("kopfexamples")]
fn create_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

fn main() {}
