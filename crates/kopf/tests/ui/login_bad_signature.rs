// A login handler returns a kube::Config.
#[kopf::on::login]
async fn login_fn() -> Result<String, kopf::HandlerError> {
    Ok(String::new())
}

fn main() {}
