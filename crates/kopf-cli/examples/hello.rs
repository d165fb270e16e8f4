//! The smallest operator on [`kopf::run!()`]: its handlers come from the attribute macros, and
//! its `--version` and `--help` from its Cargo package (here kopf-cli's: the `kopf` command's
//! tests run it as an operator of another crate than kopf).
//!
//! ```sh
//! cargo run -p kopf-cli --example hello -- --version             # kopf-cli 0.1.0 (kopf-rs 0.1.0)
//! cargo run -p kopf-cli --example hello -- run --fake --apply examples/crd.yaml
//! ```

use kopf::{HandlerError, handler::Name};

#[kopf::on::create("kopfexamples")]
async fn hello_fn(Name(name): Name) -> Result<String, HandlerError> {
    Ok(format!("hello {name}"))
}

#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    kopf::run!().await
}
