#[kopf::on::create("kopfexamples")]
async fn create_fn(x: u32) -> Result<(), kopf::HandlerError> {
    let _ = x;
    Ok(())
}

fn main() {}
