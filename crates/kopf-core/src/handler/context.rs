//! The handles a handler call carries to and from the framework: its merge patch
//! ([`PatchHandle`]), the events it posts ([`EventsHandle`]), and the operator-wide values
//! ([`Extensions`]).

use std::sync::{Arc, Mutex};

use serde_json::Value;

/// A merge patch that handlers fill in; it is folded into the cycle's single PATCH.
#[derive(Debug, Clone, Default)]
pub struct PatchHandle(Arc<Mutex<Value>>);

impl PatchHandle {
    /// Merges a JSON merge patch into the pending patch.
    pub fn merge(&self, patch: Value) {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !guard.is_object() {
            *guard = Value::Object(Default::default());
        }
        crate::plan::merge_keep_nulls(&mut guard, &patch);
    }

    /// The pending patch (an empty object when nothing was set).
    pub fn get(&self) -> Value {
        let v = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if v.is_object() {
            v
        } else {
            Value::Object(Default::default())
        }
    }
}

/// Events a handler wants posted about its object (Kopf's `kopf.info/warn/exception`): posted
/// after the cycle, rate-limited per object.
#[derive(Debug, Clone, Default)]
pub struct EventsHandle(Arc<Mutex<Vec<crate::events::EventSpec>>>);

impl EventsHandle {
    /// Posts a `Normal` event.
    pub fn info(&self, reason: &str, message: impl Into<String>) {
        self.push(crate::events::EventSpec::info(reason, message));
    }

    /// Posts a `Warning` event.
    pub fn warn(&self, reason: &str, message: impl Into<String>) {
        self.push(crate::events::EventSpec::warning(reason, message));
    }

    /// Posts an `Error` event about an error: the reason is the error's type name, and the
    /// error's text follows the message (Kopf's `kopf.exception`).
    pub fn exception<E: std::error::Error + ?Sized>(&self, message: &str, error: &E) {
        let full = std::any::type_name::<E>();
        let reason = full
            .split('<')
            .next()
            .and_then(|path| path.rsplit("::").next())
            .unwrap_or("Exception");
        let message = if message.is_empty() {
            error.to_string()
        } else {
            format!("{message}: {error}")
        };
        self.push(crate::events::EventSpec {
            type_: "Error".into(),
            reason: reason.into(),
            message,
        });
    }

    /// Posts an event of any type.
    pub fn push(&self, spec: crate::events::EventSpec) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(spec);
    }

    /// Takes the queued events.
    pub fn take(&self) -> Vec<crate::events::EventSpec> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Operator-wide values by type, shared by every handler call (the API client, the indexes);
/// the framework fills them, extractors read them.
#[derive(Clone, Default)]
pub struct Extensions(
    Arc<std::collections::HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>>,
);

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.0.len())
            .finish()
    }
}

impl Extensions {
    /// Adds (or replaces) the value of type `T`.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        Arc::make_mut(&mut self.0).insert(std::any::TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`, if the framework set one.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0
            .get(&std::any::TypeId::of::<T>())
            .and_then(|v| v.downcast_ref::<T>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exception_events_are_named_after_the_error() {
        let events = EventsHandle::default();
        let err = "x".parse::<u32>().expect_err("not a number");
        events.exception("Cannot read spec.count", &err);
        let posted = events.take();
        assert_eq!(posted[0].type_, "Error");
        assert_eq!(posted[0].reason, "ParseIntError");
        assert_eq!(
            posted[0].message,
            "Cannot read spec.count: invalid digit found in string"
        );
    }
}
