//! Timers: a periodic call per object, for as long as the object exists.
//!
//! ```sh
//! cargo run --example timers -- run --fake
//! ```
//!
//! `tick` runs every second, aligned to the second (`sharp`), and counts its calls in the
//! object's memo; its result lands in `status.tick`. `quiet` runs only once the object has
//! not changed for 3 seconds, then every 10 seconds while it stays unchanged. Timers need
//! the finalizer: deleting the object stops them, then the object goes.

use std::time::Duration;

use kopf::prelude::*;
use serde_json::{Value, json};

/// How many times `tick` ran for an object (each object has its own copy).
#[derive(Clone, Default)]
struct Ticks(u64);

async fn tick(ticks: Memo<Ticks>) -> Result<Value, HandlerError> {
    let count = ticks.update(|t| {
        t.0 += 1;
        t.0
    });
    Ok(json!({"count": count}))
}

fn quiet(Spec(spec): Spec, logger: Logger) -> Result<(), HandlerError> {
    logger.info(format!("The object is quiet; its spec is {spec}"));
    Ok(())
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    Operator::new()
        .memo(Ticks::default())
        .timer(
            "kopfexamples",
            "tick",
            TimerOptions::every(Duration::from_secs(1)).sharp(true),
            tick,
        )
        .timer(
            "kopfexamples",
            "quiet",
            TimerOptions::every(Duration::from_secs(10)).idle(Duration::from_secs(3)),
            quiet,
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
