// An index handler returns key/value pairs.
#[kopf::on::index("kopfexamples")]
async fn index_fn() -> Result<String, kopf::HandlerError> {
    Ok(String::new())
}

fn main() {}
