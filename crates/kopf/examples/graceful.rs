//! Graceful shutdown: a creation handler that works for `spec.duration` (`30s`, `1m`...).
//! Stop the operator while it works (Ctrl-C or SIGTERM): the handler may finish within the
//! grace period (`--grace-period`, default 20 s); after it, it is cancelled and its attempt
//! is stored on the object, so that the next start runs it again. A second Ctrl-C exits at
//! once; `--shutdown-timeout` (default 28 s) bounds the whole shutdown.
//!
//! ```sh
//! cargo run --example graceful -- run --fake --grace-period 5
//! # then Ctrl-C within a minute (the sample object says `duration: 1m`)
//! ```

use std::time::Duration;

use kopf::prelude::*;
use serde_json::{Value, json};

/// `30s`, `2m`, `1h` or plain seconds.
fn parse_duration(text: &str) -> Option<Duration> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((text, ""), |i| text.split_at(i));
    let n: f64 = number.parse().ok()?;
    let factor = match unit {
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(n * factor).ok()
}

async fn work_fn(Spec(spec): Spec) -> Result<Value, HandlerError> {
    let text = spec["duration"].as_str().unwrap_or("1s");
    let duration = parse_duration(text).ok_or_else(|| {
        HandlerError::permanent(format!("spec.duration {text:?} is not like 30s, 2m or 1h"))
    })?;
    kopf::tracing::info!("Working for {text}.");
    let step = Duration::from_millis(500);
    let mut done = Duration::ZERO;
    while done < duration {
        tokio::time::sleep(step.min(duration - done)).await;
        done += step;
        kopf::tracing::info!("Worked {:.1}s of {text}.", done.min(duration).as_secs_f64());
    }
    Ok(json!({"worked": text}))
}

/// The operator of this example (shared with its integration test).
pub fn operator() -> Operator {
    Operator::new().on_create("kopfexamples", "work_fn", work_fn)
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), kopf::Error> {
    operator()
        .fake_manifests(kopf::cli::example_manifests())
        .main()
        .await
}
