// An option of another kind of handler.
#[kopf::on::create("kopfexamples", interval = 60)]
async fn create_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

fn main() {}
