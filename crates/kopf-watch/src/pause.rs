//! The operator's gate as an engine sees it ([`kopf_core::gate`]): Kopf's log lines when the
//! watch stream pauses and resumes, and the wait while paused (for the workers to end, then
//! for the gate to open, or for shutdown).

use std::future::Future;

use kopf_core::gate::{Gate, GateState};
use kopf_core::shards::{Scope, ScopeObserver};
use tokio::task::JoinSet;

use crate::resource::ResourceRef;

/// How a pause ended.
pub(crate) enum AfterPause {
    /// The gate opened again (and every worker had ended).
    Resumed,
    /// The engine is to stop.
    ShutDown,
}

/// The resource as the pause log lines name it: `plural.group` (`plural` for the core
/// group).
pub(crate) fn resource_name(resource: &ResourceRef) -> String {
    let ar = &resource.api_resource;
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

/// Kopf's line when a watch stream pauses, with who blocks it.
pub(crate) fn log_pausing(resource_name: &str, state: &GateState) {
    let reason = state.reason().unwrap_or_default();
    if matches!(state, GateState::Standby { .. }) {
        tracing::info!(
            resource = %resource_name,
            "Standing by for {resource_name} ({reason}): the watch-stream stays open, nothing is processed."
        );
        return;
    }
    tracing::info!(
        resource = %resource_name,
        "Pausing the watch-stream for {resource_name} (blockers: {reason})."
    );
}

/// Waits while the operator is paused: until the workers have all ended (each stops its
/// daemons and timers first) and the gate is no longer paused (open, or standing by), or
/// until `shutdown` completes.
///
/// Changes of the shard scope meanwhile are acknowledged once the workers have ended
/// (nothing is processed while paused).
pub(crate) async fn wait_paused(
    gate: &mut Gate,
    workers: &mut JoinSet<crate::shared::Ended>,
    shutdown: &mut (impl Future<Output = ()> + Unpin),
    observer: &mut Option<ScopeObserver>,
    scope_now: &mut Option<Scope>,
) -> AfterPause {
    loop {
        tokio::select! {
            _ = &mut *shutdown => return AfterPause::ShutDown,
            Some(_) = workers.join_next(), if !workers.is_empty() => {}
            live = crate::shard::changed(observer), if workers.is_empty() => {
                if let (true, Some(o)) = (live, observer.as_ref()) {
                    let next = o.scope();
                    o.ack(next.epoch);
                    *scope_now = Some(next);
                }
            }
            _ = unpaused(gate), if workers.is_empty() => return AfterPause::Resumed,
        }
    }
}

/// Waits until the gate is open or standing by.
async fn unpaused(gate: &mut Gate) {
    while matches!(gate.state(), GateState::Paused { .. }) {
        if !gate.changed().await {
            std::future::pending::<()>().await;
        }
    }
}

/// Waits until the gate moves away from what the engine does now: while standing by, any
/// change of the state; otherwise, a pause or a standby.
pub(crate) async fn gate_moved(gate: &mut Gate, standing_by: bool) {
    if !standing_by {
        gate.paused().await;
        return;
    }
    while matches!(gate.state(), GateState::Standby { .. }) {
        if !gate.changed().await {
            std::future::pending::<()>().await;
        }
    }
}
