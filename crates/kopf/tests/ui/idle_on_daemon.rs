// Daemons are not periodic: `idle` and `interval` are timers' options.
#[kopf::on::daemon("kopfexamples", idle = 10)]
async fn daemon_fn(stopped: kopf::handler::Stopped) -> Result<(), kopf::HandlerError> {
    stopped.wait().await;
    Ok(())
}

fn main() {}
