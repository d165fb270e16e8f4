#[kopf::on::update("kopfexamples", operations = ["CREATE"])]
async fn update_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

#[kopf::on::mutate("kopfexamples", operations = ["PATCH"])]
async fn mutate_fn() -> Result<(), kopf::AdmissionError> {
    Ok(())
}

fn main() {}
