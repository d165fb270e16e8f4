// Label keys are string literals or plain identifiers, each with a filter.
#[kopf::on::create("kopfexamples", labels(app-name = "web"))]
async fn dashed() -> Result<(), kopf::HandlerError> {
    Ok(())
}

#[kopf::on::create("kopfexamples", labels("tier"))]
async fn no_filter() -> Result<(), kopf::HandlerError> {
    Ok(())
}

#[kopf::on::create("kopfexamples", labels = "tier")]
async fn not_a_list() -> Result<(), kopf::HandlerError> {
    Ok(())
}

#[kopf::on::create("kopfexamples", retries = 1, retries = 2)]
async fn twice() -> Result<(), kopf::HandlerError> {
    Ok(())
}

fn main() {}
