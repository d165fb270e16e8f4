// Seconds are numbers, not strings or expressions.
#[kopf::on::timer("kopfexamples", interval = "60")]
async fn timer_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

#[kopf::on::daemon("kopfexamples", initial_delay = 2 * 60)]
async fn daemon_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

#[kopf::on::timer("kopfexamples", interval = 60, sharp = 1)]
async fn sharp_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

// A timer of no interval would never rest.
#[kopf::on::timer("kopfexamples", interval = 0)]
async fn busy_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

fn main() {}
