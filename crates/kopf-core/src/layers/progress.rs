//! Turns each attempt's outcome into the handler's next progress record, with Kopf 1.x's
//! fields: `retries` counts attempts, `delayed` is the earliest next attempt, `success` /
//! `failure` / `stopped` mark the end.

use std::convert::Infallible;
use std::time::Duration;

use super::{Attempt, CallOutcome, HandlerCall, Next, Step};
use crate::handler::error::HandlerError;
use crate::progress::{ProgressRecord, format_time};
use jiff::Timestamp;

/// Produces an [`Attempt`] with the next progress record.
///
/// ```
/// use kopf_core::layers::{Invoke, ProgressLayer};
/// use tower::Layer;
///
/// let service = ProgressLayer.layer(Invoke);
/// # let _ = service;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ProgressLayer;

/// The record after an attempt that will be retried after `delay`.
pub fn retrying(
    mut record: ProgressRecord,
    now: Timestamp,
    delay: Duration,
    message: Option<String>,
) -> ProgressRecord {
    record.success = Some(false);
    record.failure = Some(false);
    record.stopped = None;
    record.message = message;
    let at = now
        .checked_add(jiff::SignedDuration::try_from(delay).unwrap_or_default())
        .unwrap_or(now);
    record.delayed = Some(format_time(at));
    record
}

impl Step for ProgressLayer {
    type Inner = CallOutcome;
    type Output = Attempt;

    async fn run<S: Next<CallOutcome>>(
        self,
        call: HandlerCall,
        mut next: S,
    ) -> Result<Attempt, Infallible> {
        let mut record = call.record.clone();
        let outcome = next.call(call).await?;
        record.retries = Some(record.retries.unwrap_or(0) + 1);
        // Delays count from the end of the attempt, as in Kopf.
        let now = crate::clock::now();
        let finished_at = format_time(now);
        let retry_in = match &outcome.result {
            Ok(_) => {
                record.success = Some(true);
                record.failure = Some(false);
                record.stopped = Some(finished_at);
                record.delayed = None;
                record.message = None;
                None
            }
            Err(HandlerError::Temporary { message, delay, .. }) => {
                let d = delay.unwrap_or(Duration::ZERO);
                record = retrying(record, now, d, Some(message.clone()));
                Some(d)
            }
            Err(
                HandlerError::Permanent { message, .. }
                | HandlerError::Admission { message, .. }
                | HandlerError::Other { message, .. },
            ) => {
                record.success = Some(false);
                record.failure = Some(true);
                record.message = Some(message.clone());
                record.stopped = Some(finished_at);
                record.delayed = None;
                None
            }
        };
        Ok(Attempt::Done {
            outcome,
            record,
            retry_in,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use serde_json::json;
    use tower::Layer;

    #[tokio::test]
    async fn writes_kopf_records() {
        let start = ProgressRecord {
            started: Some(format_time(Timestamp::now())),
            retries: Some(1),
            ..Default::default()
        };
        let a = run(
            ProgressLayer.layer(fake(Err(HandlerError::temporary(
                "later",
                Duration::from_secs(5),
            )))),
            call_with(spec(), start.clone()),
        )
        .await;
        let Attempt::Done {
            record, retry_in, ..
        } = a
        else {
            panic!("not done")
        };
        assert_eq!(
            (record.retries, record.success, record.failure, retry_in),
            (
                Some(2),
                Some(false),
                Some(false),
                Some(Duration::from_secs(5))
            )
        );
        assert_eq!(record.message.as_deref(), Some("later"));
        assert!(record.delayed.is_some());
        let a = run(
            ProgressLayer.layer(fake(Ok(Some(json!(1))))),
            call_with(spec(), start.clone()),
        )
        .await;
        let Attempt::Done {
            record, retry_in, ..
        } = a
        else {
            panic!("not done")
        };
        assert!(record.is_finished() && record.stopped.is_some() && retry_in.is_none());
        let a = run(
            ProgressLayer.layer(fake(Err(HandlerError::permanent("no")))),
            call_with(spec(), start),
        )
        .await;
        let Attempt::Done { record, .. } = a else {
            panic!("not done")
        };
        assert_eq!(
            (record.failure, record.message.as_deref()),
            (Some(true), Some("no"))
        );
    }
}
