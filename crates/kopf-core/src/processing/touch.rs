//! The touch annotation (Kopf's `touch-dummy`, written to get a fresh event after a retry
//! delay): any real change of a cycle clears it.

use serde_json::Value;

use crate::cycle::CycleOutcome;
use crate::progress::ProgressStorage;

/// Clears the touch when the cycle's plan changes the object `body` at all.
pub(super) fn clear_on_change(out: &mut CycleOutcome, body: &Value, progress: &ProgressStorage) {
    if !out.plan.is_noop_for(body)
        && let Some(clear) = progress.touch_clear(body)
    {
        out.plan.merge(&clear);
    }
}
