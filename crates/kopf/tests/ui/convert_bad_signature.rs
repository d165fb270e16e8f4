// A converter takes the object and the version.
#[kopf::on::convert("kopfexamples.kopf.dev")]
fn convert(obj: serde_json::Value) -> Result<serde_json::Value, String> {
    Ok(obj)
}

fn main() {}
