//! Records that another cause left (e.g. a creation still retrying when the deletion comes):
//! purged, with Kopf's note on them.

use serde_json::Value;

use crate::causes::Reason;
use crate::handler::spec::HandlerSpec;
use crate::plan::PatchPlan;
use crate::progress::ProgressStorage;

/// Purges into `plan` the records of `handlers` (and their sub-handlers') that a cause other
/// than `reason` left on `body`; returns Kopf's note on them, if there were any.
pub(super) fn supersede(
    handlers: &[HandlerSpec],
    progress: &ProgressStorage,
    body: &Value,
    reason: Reason,
    plan: &mut PatchPlan,
) -> Option<String> {
    let purpose = reason.purpose();
    let (mut succeeded, mut failed, mut left) = (0, 0, 0);
    let mut titles = Vec::new();
    for h in handlers {
        let Some(Ok(record)) = progress.fetch(&h.id, body) else {
            continue;
        };
        let Some(other) = record.purpose.as_deref().filter(|p| *p != purpose) else {
            continue;
        };
        match (record.success, record.failure) {
            (Some(true), _) => succeeded += 1,
            (_, Some(true)) => failed += 1,
            _ => left += 1,
        }
        if !titles.contains(&other.to_string()) {
            titles.push(other.to_string());
        }
        let patch = plan.merge_patch_mut();
        progress.purge(&h.id, body, patch);
        for sub in record.subrefs.iter().flatten() {
            progress.purge(sub, body, patch);
        }
    }
    let first = titles.first()?;
    let title = Reason::from_purpose(first).map_or(first.as_str(), |r| r.title());
    Some(format!(
        "{title} is superseded by {}: {succeeded} succeeded; {failed} failed; {left} left to the moment.",
        reason.title().to_lowercase()
    ))
}
