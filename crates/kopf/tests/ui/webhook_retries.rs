#[kopf::on::validate("kopfexamples", operations = ["CREATE"], retries = 3)]
async fn check() -> Result<(), kopf::AdmissionError> {
    Ok(())
}

fn main() {}
