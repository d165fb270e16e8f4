// A misspelled option: the message suggests the right one.
#[kopf::on::timer("kopfexamples", intervall = 60)]
async fn timer_fn() -> Result<(), kopf::HandlerError> {
    Ok(())
}

fn main() {}
