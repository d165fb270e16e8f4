//! The per-resource bookkeeping of its workers: which objects were handled once (their
//! resume handlers are done), and the gauges of the metrics (objects tracked, states queued).

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use kopf_core::metrics::Metrics;

use crate::uid::Uid;

/// What the workers of one resource count and remember across workers.
pub(crate) struct Books {
    /// The objects whose cause handlers finished once since the start (or a pause).
    handled_once: Mutex<HashSet<Uid>>,
    /// Where the gauges go, if anywhere.
    metrics: Option<Metrics>,
    /// The resource's plural, the gauges' label.
    plural: String,
}

impl Books {
    pub(crate) fn new(metrics: Option<Metrics>, plural: String) -> Self {
        Books {
            handled_once: Mutex::default(),
            metrics,
            plural,
        }
    }

    /// Whether the object's cause handlers finished once.
    pub(crate) fn was_handled(&self, uid: &str) -> bool {
        self.handled_once
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(uid)
    }

    /// The object's cause handlers finished (and their writes went through).
    pub(crate) fn handled(&self, uid: &str) {
        self.handled_once
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(Uid::from(uid));
    }

    /// Forgets an object that is gone.
    pub(crate) fn forget(&self, uid: &str) {
        self.handled_once
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }

    /// Forgets which objects were handled once.
    pub(crate) fn forget_all(&self) {
        self.handled_once
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// An object became known (a slot was made for it).
    pub(crate) fn tracked(&self) {
        if let Some(m) = &self.metrics {
            m.tracked(&self.plural, 1);
        }
    }

    /// An object is not known anymore (its slot was removed).
    pub(crate) fn untracked(&self) {
        if let Some(m) = &self.metrics {
            m.tracked(&self.plural, -1);
        }
    }

    /// A wait for the operator's own write ended (see `WorkerState::admit`).
    pub(crate) fn echo(&self, waited: std::time::Duration, seen: bool) {
        if let Some(m) = &self.metrics {
            m.own_write(&self.plural, waited, seen);
        }
    }

    /// A new state waits for the worker of `pending`.
    pub(crate) fn queued(&self, pending: &AtomicBool) {
        if !pending.swap(true, Ordering::SeqCst)
            && let Some(m) = &self.metrics
        {
            m.queue(&self.plural, 1);
        }
    }

    /// The worker of `pending` has taken its latest state.
    pub(crate) fn picked(&self, pending: &AtomicBool) {
        if pending.swap(false, Ordering::SeqCst)
            && let Some(m) = &self.metrics
        {
            m.queue(&self.plural, -1);
        }
    }
}
