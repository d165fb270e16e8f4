// A pod-log handler needs a regex, and a valid one: checked when the code compiles.
#[kopf::on::log("pods", regex = r"accuracy=(\d+")]
async fn unclosed() -> Result<(), kopf::HandlerError> {
    Ok(())
}

#[kopf::on::log("pods", containers = ["main"])]
async fn no_regex() -> Result<(), kopf::HandlerError> {
    Ok(())
}

fn main() {}
