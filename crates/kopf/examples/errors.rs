//! Errors and retries: temporary errors with a delay, permanent errors, arbitrary errors
//! retried with a backoff, a retry limit and a timeout.
//!
//! ```sh
//! cargo run --example errors -- run --fake
//! ```

use std::time::Duration;

use kopf::prelude::*;

/// Succeeds on the third attempt; the progress annotation keeps the count meanwhile.
async fn eventually_fn(Retry(retry): Retry) -> Result<String, TemporaryError> {
    if retry < 2 {
        return Err(TemporaryError {
            message: format!("not yet (attempt {retry})"),
            delay: Some(Duration::from_millis(1000)),
        });
    }
    Ok(format!("done after {retry} retries"))
}

/// Fails for good: never retried; the cause still completes.
async fn permanent_fn() -> Result<(), PermanentError> {
    Err(PermanentError("this object can never be handled".into()))
}

/// Any other error is retried after the backoff, up to the retry limit.
async fn flaky_fn() -> Result<(), HandlerError> {
    Err(HandlerError::other("the backend is down"))
}

/// Too slow: cancelled when its timeout runs out (Kopf only checks between attempts).
async fn slow_fn() -> Result<(), HandlerError> {
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    Operator::new()
        .on_create("kopfexamples", "eventually_fn", eventually_fn)
        .on_create("kopfexamples", "permanent_fn", permanent_fn)
        .on_with(
            Reason::Create,
            "kopfexamples",
            "flaky_fn",
            flaky_fn,
            Options::new()
                .retries(2)
                .backoff(Duration::from_millis(300)),
        )
        .on_with(
            Reason::Create,
            "kopfexamples",
            "slow_fn",
            slow_fn,
            Options::new().timeout(Duration::from_millis(200)),
        )
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    operator()
        .fake_manifests(kopf::cli::example_manifests())
        .main()
        .await
}
