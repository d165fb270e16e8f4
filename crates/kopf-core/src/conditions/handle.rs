//! The per-cycle [`ConditionsHandle`] that every handler of a cycle shares (like
//! [`PatchHandle`](crate::handler::PatchHandle)), and the [`ConditionsSync`] through which a
//! handler publishes its conditions before it returns.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::model::{Condition, ConditionError, ConditionStatus, Intent, apply_intents};

/// A boxed future: the same type as [`kopf_core::handler::BoxFuture`](crate::handler::BoxFuture)
/// (spelled out here so that this module stays below the handler's vocabulary).
pub type SyncFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Writes conditions at once, in the middle of a handler (the framework's applier implements
/// it for each cycle; handlers' unit tests have none).
pub trait ConditionsSync: Send + Sync {
    /// Applies `intents` to the object's current `status.conditions` and writes the list
    /// (one guarded PATCH of `/status`); the error says why it was not written.
    fn sync(&self, intents: Vec<Intent>) -> SyncFuture<Result<(), String>>;
}

#[derive(Default)]
struct State {
    /// `status.conditions` of the body the cycle started with (after what was synced).
    snapshot: Option<Value>,
    /// `metadata.generation` of that body.
    generation: Option<i64>,
    intents: Vec<Intent>,
    sync: Option<Arc<dyn ConditionsSync>>,
}

/// The conditions of one object during one cycle: the snapshot of its
/// `status.conditions`, and the intents its handlers recorded so far (applied to the list
/// when the cycle writes its status). Cloning shares it.
#[derive(Clone, Default)]
pub struct ConditionsHandle(Arc<Mutex<State>>);

impl std::fmt::Debug for ConditionsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("ConditionsHandle")
            .field("snapshot", &s.snapshot)
            .field("generation", &s.generation)
            .field("intents", &s.intents)
            .field("sync", &s.sync.is_some())
            .finish()
    }
}

/// Why [`ConditionsHandle::sync`] did not write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyncError {
    /// No writer is attached (e.g. in a unit test of a handler).
    #[error(
        "the conditions cannot be written before the handler returns: no writer is attached to this cycle (handlers' unit tests have none)"
    )]
    NoWriter,
    /// The write failed.
    #[error("the conditions could not be written: {0}")]
    Failed(String),
}

impl ConditionsHandle {
    /// A handle for a body: the snapshot of its `/status/conditions` and
    /// `/metadata/generation`.
    pub fn new(body: &Value) -> Self {
        let state = State {
            snapshot: body.pointer("/status/conditions").cloned(),
            generation: body.pointer("/metadata/generation").and_then(Value::as_i64),
            ..State::default()
        };
        ConditionsHandle(Arc::new(Mutex::new(state)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The same handle, writing mid-handler syncs through `sync`.
    pub fn with_sync(self, sync: Arc<dyn ConditionsSync>) -> Self {
        self.lock().sync = Some(sync);
        self
    }

    /// The list as it will be: the snapshot with the intents so far.
    fn current(state: &State) -> Vec<Value> {
        apply_intents(
            state.snapshot.as_ref(),
            &state.intents,
            state.generation,
            crate::clock::now(),
        )
        .unwrap_or_else(|| {
            state
                .snapshot
                .as_ref()
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
    }

    /// Records an intent (validated); true if it changes the list as it will be.
    pub fn record(&self, intent: Intent) -> Result<bool, ConditionError> {
        intent.validate()?;
        let mut state = self.lock();
        let before = Self::current(&state);
        let changed = apply_intents(
            Some(&Value::Array(before)),
            std::slice::from_ref(&intent),
            state.generation,
            crate::clock::now(),
        )
        .is_some();
        state.intents.push(intent);
        Ok(changed)
    }

    /// Sets a condition (`meta.SetStatusCondition`): true if that changes it.
    pub fn set(
        &self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
    ) -> Result<bool, ConditionError> {
        self.record(Intent::set(type_, status, reason, message))
    }

    /// Sets a condition only if its type is absent: true if that adds it.
    pub fn ensure(
        &self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
    ) -> Result<bool, ConditionError> {
        self.record(Intent::ensure(type_, status, reason, message))
    }

    /// Removes a condition type: true if it was there.
    pub fn remove(&self, type_: &str) -> bool {
        // Any string is a valid removal (an invalid type is never there).
        self.record(Intent::Remove(type_.into())).unwrap_or(false)
    }

    /// The condition of a type as it will be (snapshot + intents so far).
    pub fn get(&self, type_: &str) -> Option<Condition> {
        let state = self.lock();
        Self::current(&state)
            .iter()
            .find(|e| e.get("type").and_then(Value::as_str) == Some(type_))
            .and_then(Condition::from_value)
    }

    /// Whether the condition of a type is (or will be) `True`.
    pub fn is_true(&self, type_: &str) -> bool {
        self.get(type_)
            .is_some_and(|c| c.status == ConditionStatus::True)
    }

    /// The intents recorded so far (they stay recorded).
    pub fn intents(&self) -> Vec<Intent> {
        self.lock().intents.clone()
    }

    /// Takes the intents recorded so far (for the cycle's write).
    pub fn take_intents(&self) -> Vec<Intent> {
        std::mem::take(&mut self.lock().intents)
    }

    /// `metadata.generation` of the body the handle was made for.
    pub fn generation(&self) -> Option<i64> {
        self.lock().generation
    }

    /// Writes the intents so far at once through the attached [`ConditionsSync`] (one PATCH);
    /// once written they are part of the snapshot and not written again by the cycle. On
    /// failure they stay recorded for the cycle's own write.
    pub async fn sync(&self) -> Result<(), SyncError> {
        let (sync, intents) = {
            let mut state = self.lock();
            let Some(sync) = state.sync.clone() else {
                return Err(SyncError::NoWriter);
            };
            (sync, std::mem::take(&mut state.intents))
        };
        if intents.is_empty() {
            return Ok(());
        }
        match sync.sync(intents.clone()).await {
            Ok(()) => {
                let mut state = self.lock();
                if let Some(list) = apply_intents(
                    state.snapshot.as_ref(),
                    &intents,
                    state.generation,
                    crate::clock::now(),
                ) {
                    state.snapshot = Some(Value::Array(list));
                }
                Ok(())
            }
            Err(message) => {
                let mut state = self.lock();
                let later = std::mem::take(&mut state.intents);
                state.intents = intents;
                state.intents.extend(later);
                Err(SyncError::Failed(message))
            }
        }
    }
}
