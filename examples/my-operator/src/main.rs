//! `my-operator run ...` (kopf's command line: `run -A`, `run --fake --apply crd.json`...),
//! and `my-operator crd`: the CRD of `Greeting`, generated from the type.

use kube::CustomResourceExt;
use my_operator::Greeting;

#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    if std::env::args().nth(1).as_deref() == Some("crd") {
        let crd = serde_json::to_string_pretty(&Greeting::crd())
            .map_err(|e| kopf::Error::Config(format!("cannot print the CRD: {e}")))?;
        println!("{crd}");
        return Ok(());
    }
    my_operator::operator().about(kopf::about!()).main().await
}
