// The resource comes first.
#[kopf::on::timer(interval = 60)]
async fn timer_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

#[kopf::on::index]
async fn index_fn() -> Result<Option<(String, String)>, kopf::HandlerError> {
    Ok(None)
}

fn main() {}
