#[kopf::on::create("kopfexamples", errors = "sometimes")]
fn create_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

fn main() {}
