//! The operator's gate as an engine sees it ([`kopf_core::gate`]): Kopf's log lines when the
//! watch stream pauses and resumes, and the waits while paused or standing by (for the gate
//! to move, or for shutdown). What the engine does on each state is
//! `engine::gate::GateStage`, a value.

use std::future::Future;

use kopf_core::gate::{Gate, GateState};

use crate::resource::ResourceRef;
use crate::shard::Shards;

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

/// Waits while the operator is paused, its workers ended: until the gate is no longer
/// paused (open, or standing by), or until `shutdown` completes.
///
/// Changes of the shard scope meanwhile are acknowledged at once (nothing is processed
/// while paused).
pub(crate) async fn wait_paused(
    gate: &mut Gate,
    shutdown: &mut (impl Future<Output = ()> + Unpin),
    shards: &mut Shards,
) -> AfterPause {
    loop {
        tokio::select! {
            _ = &mut *shutdown => return AfterPause::ShutDown,
            live = shards.changed() => {
                if live {
                    shards.adopted_idle();
                }
            }
            _ = unpaused(gate) => return AfterPause::Resumed,
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
