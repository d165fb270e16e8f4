//! `my-operator run ...` (kopf's command line: `run -A`, `run --fake`...), and
//! `my-operator crd`: the CRD of `Greeting`, generated from the type (`run --fake` applies it
//! to its embedded API server by itself).

#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    my_operator::operator().about(kopf::about!()).main().await
}
