// `value`, `old` and `new` filter a field: they need one, and do not go together.
#[kopf::on::create("kopfexamples", value = "x")]
async fn no_field() -> Result<(), kopf::HandlerError> {
    Ok(())
}

#[kopf::on::update("kopfexamples", field = "spec.x", value = "a", new = "b")]
async fn both() -> Result<(), kopf::HandlerError> {
    Ok(())
}

// `old`/`new` are for updates.
#[kopf::on::create("kopfexamples", field = "spec.x", new = "b")]
async fn new_on_create() -> Result<(), kopf::HandlerError> {
    Ok(())
}

fn main() {}
