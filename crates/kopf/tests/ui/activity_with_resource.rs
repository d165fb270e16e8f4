// Activities are about the operator: no resource, and only their own options.
#[kopf::on::startup("kopfexamples")]
async fn startup_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

#[kopf::on::cleanup(retries = 3)]
async fn cleanup_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

#[kopf::on::probe(labels(app = "web"))]
async fn probe_fn() -> Result<u32, kopf::HandlerError> {
    Ok(1)
}

#[kopf::on::login(id = "token")]
async fn login_fn() -> Result<kube::Config, kopf::HandlerError> {
    Err(kopf::HandlerError::permanent("no"))
}

fn main() {}
