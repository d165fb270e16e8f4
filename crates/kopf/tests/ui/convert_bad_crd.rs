// A converter is for a CRD: `<plural>.<group>`, and nothing else.
#[kopf::on::convert("kopfexamples")]
fn convert_plural(obj: serde_json::Value, _to: &str) -> Result<serde_json::Value, String> {
    Ok(obj)
}

#[kopf::on::convert]
fn convert_nothing(obj: serde_json::Value, _to: &str) -> Result<serde_json::Value, String> {
    Ok(obj)
}

#[kopf::on::convert("kopfexamples.kopf.dev", id = "v1-v2")]
fn convert_id(obj: serde_json::Value, _to: &str) -> Result<serde_json::Value, String> {
    Ok(obj)
}

fn main() {}
