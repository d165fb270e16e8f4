//! The vocabulary of `status.conditions`: a [`Condition`] as `metav1.Condition` has it, the
//! validation of its `type` and `reason` ([`ConditionError`]), the handlers' [`Intent`]s, and
//! [`apply_intents`], which applies them to a list with `meta.SetStatusCondition`'s rules.
//!
//! Pure functions of values: no clock (the caller passes `now`), no I/O.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The longest `type` the API server accepts (`metav1.Condition`).
pub const MAX_TYPE_LEN: usize = 316;
/// The longest `reason` the API server accepts.
pub const MAX_REASON_LEN: usize = 1024;
/// The longest `message` the API server accepts, in bytes; longer ones are truncated.
pub const MAX_MESSAGE_LEN: usize = 32768;

/// The status of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// `"True"`.
    True,
    /// `"False"`.
    False,
    /// `"Unknown"` (the same as an absent condition).
    Unknown,
}

impl ConditionStatus {
    /// The wire form: `"True"`, `"False"` or `"Unknown"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// One entry of `status.conditions`, as `metav1.Condition` has it. Never serialized with
/// `null` fields: `observedGeneration` is left out when unknown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    /// The condition's type, e.g. `Ready` (the list's key).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// A CamelCase word saying why (e.g. `Succeeded`).
    #[serde(default)]
    pub reason: String,
    /// A human-readable message (may be empty).
    #[serde(default)]
    pub message: String,
    /// When the status last changed (RFC 3339).
    #[serde(rename = "lastTransitionTime", default)]
    pub last_transition_time: String,
    /// The `metadata.generation` the condition was set for.
    #[serde(
        rename = "observedGeneration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_generation: Option<i64>,
}

impl Condition {
    /// The condition in a list entry (None if the entry is not a condition).
    pub fn from_value(value: &Value) -> Option<Condition> {
        serde_json::from_value(value.clone()).ok()
    }
}

/// A condition's `type` or `reason` that the API server would reject (422).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    /// The type does not match `metav1.Condition`'s pattern or is too long.
    #[error(
        "invalid condition type {value:?}: {why}; a type is at most 316 characters, an optional DNS-subdomain prefix with '/', then letters, digits, '-', '_' or '.', starting and ending with a letter or digit (e.g. \"Ready\", \"example.com/Synced\")"
    )]
    InvalidType {
        /// The rejected value.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The reason does not match `metav1.Condition`'s pattern or is empty or too long.
    #[error(
        "invalid condition reason {value:?}: {why}; a reason is 1 to 1024 characters, a letter first, then letters, digits, '_', ',' or ':', not ending with ',' or ':' (e.g. \"Succeeded\")"
    )]
    InvalidReason {
        /// The rejected value.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.first().is_some_and(ok)
        && b.last().is_some_and(ok)
        && b.iter().all(|c| ok(c) || *c == b'-')
}

/// Checks a condition type against `metav1.Condition`'s pattern and length.
pub fn validate_type(value: &str) -> Result<(), ConditionError> {
    let err = |why| {
        Err(ConditionError::InvalidType {
            value: value.to_string(),
            why,
        })
    };
    if value.len() > MAX_TYPE_LEN {
        return err("longer than 316 characters");
    }
    let name = match value.split_once('/') {
        Some((prefix, name)) => {
            if !prefix.split('.').all(is_dns_label) {
                return err("its prefix is not a lowercase DNS subdomain");
            }
            name
        }
        None => value,
    };
    let b = name.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    if b.is_empty() {
        return err("it is empty");
    }
    if !b.first().is_some_and(alnum) || !b.last().is_some_and(alnum) {
        return err("it must start and end with a letter or digit");
    }
    if !b
        .iter()
        .all(|c| alnum(c) || matches!(c, b'-' | b'_' | b'.'))
    {
        return err("it has a character other than letters, digits, '-', '_' and '.'");
    }
    Ok(())
}

/// Checks a condition reason against `metav1.Condition`'s pattern and length.
pub fn validate_reason(value: &str) -> Result<(), ConditionError> {
    let err = |why| {
        Err(ConditionError::InvalidReason {
            value: value.to_string(),
            why,
        })
    };
    let b = value.as_bytes();
    if b.is_empty() {
        return err("it is empty");
    }
    if b.len() > MAX_REASON_LEN {
        return err("longer than 1024 characters");
    }
    if !b[0].is_ascii_alphabetic() {
        return err("it must start with a letter");
    }
    if !b
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':'))
    {
        return err("it has a character other than letters, digits, '_', ',' and ':'");
    }
    if b.last().is_some_and(|c| matches!(c, b',' | b':')) {
        return err("it ends with ',' or ':'");
    }
    Ok(())
}

/// The message cut to [`MAX_MESSAGE_LEN`] bytes, on a character boundary.
pub fn truncate_message(message: &str) -> &str {
    if message.len() <= MAX_MESSAGE_LEN {
        return message;
    }
    let mut end = MAX_MESSAGE_LEN;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

/// What a handler (or the framework) wants of one condition type. Intents, not lists: they
/// are applied to the freshest list at write time, so other writers' types are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// Set the type (`meta.SetStatusCondition`).
    Set {
        /// The type.
        type_: String,
        /// The status.
        status: ConditionStatus,
        /// The reason.
        reason: String,
        /// The message.
        message: String,
        /// The generation it is for (default: the `metadata.generation` of the body the
        /// handler saw).
        observed_generation: Option<i64>,
    },
    /// Set the type only if it is absent (declared defaults: "Unknown" on the first visit).
    Ensure {
        /// The type.
        type_: String,
        /// The status.
        status: ConditionStatus,
        /// The reason.
        reason: String,
        /// The message.
        message: String,
        /// The generation it is for.
        observed_generation: Option<i64>,
    },
    /// Remove the type.
    Remove(String),
}

impl Intent {
    /// Sets a condition (its `observedGeneration`: the object's generation when applied).
    pub fn set(
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Intent::Set {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
            observed_generation: None,
        }
    }

    /// Sets a condition only if its type is absent (a declared default).
    pub fn ensure(
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Intent::Ensure {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
            observed_generation: None,
        }
    }

    /// The condition type it is about.
    pub fn type_(&self) -> &str {
        match self {
            Intent::Set { type_, .. } | Intent::Ensure { type_, .. } => type_,
            Intent::Remove(type_) => type_,
        }
    }

    /// Checks the type and (for set/ensure) the reason.
    pub fn validate(&self) -> Result<(), ConditionError> {
        validate_type(self.type_())?;
        match self {
            Intent::Set { reason, .. } | Intent::Ensure { reason, .. } => validate_reason(reason),
            Intent::Remove(_) => Ok(()),
        }
    }
}

/// A timestamp as conditions carry it: RFC 3339, second precision, `Z`.
pub fn format_transition_time(now: Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// One intent per type (in the order the types first appear), the later ones winning over
/// the earlier ones, so that a type set twice in a cycle transitions (or not) from what the
/// list had: an `Ensure` after a `Set` is moot, after a `Remove` it is a `Set`. Invalid
/// intents are left out (with a warning).
fn collapse(intents: &[Intent]) -> Vec<Intent> {
    let mut out: Vec<Intent> = Vec::new();
    for intent in intents {
        if let Err(e) = intent.validate() {
            tracing::warn!("A condition is not written: {e}");
            continue;
        }
        let Some(slot) = out.iter_mut().find(|i| i.type_() == intent.type_()) else {
            out.push(intent.clone());
            continue;
        };
        *slot = match (&*slot, intent) {
            (Intent::Set { .. }, Intent::Ensure { .. }) => continue,
            (
                Intent::Remove(_),
                Intent::Ensure {
                    type_,
                    status,
                    reason,
                    message,
                    observed_generation,
                },
            ) => Intent::Set {
                type_: type_.clone(),
                status: *status,
                reason: reason.clone(),
                message: message.clone(),
                observed_generation: *observed_generation,
            },
            // Ensure after Ensure: the first default stays.
            (Intent::Ensure { .. }, Intent::Ensure { .. }) => continue,
            _ => intent.clone(),
        };
    }
    out
}

fn type_of(entry: &Value) -> Option<&str> {
    entry.get("type").and_then(Value::as_str)
}

/// Applies `intents` to the list `current` (`status.conditions` of the body; absent or not
/// a list: empty) with `meta.SetStatusCondition`'s rules, and returns the new list, or None
/// when nothing changes.
///
/// * A new type is appended, with `lastTransitionTime` = `now`.
/// * An existing type gets the intent's status, reason, message and observedGeneration;
///   its `lastTransitionTime` changes only when its status changes.
/// * `observedGeneration` defaults to `generation` (the body's `metadata.generation`).
/// * Entries of other types (other controllers') are kept verbatim and in order.
/// * Later intents for a type win; invalid intents are skipped (with a warning).
///
/// ```
/// use kopf_core::conditions::{apply_intents, ConditionStatus, Intent};
/// use serde_json::json;
///
/// let current = json!([{"type": "Other", "status": "True", "reason": "Theirs", "message": "",
///                       "lastTransitionTime": "2020-01-01T00:00:00Z"}]);
/// let ready = Intent::Set { type_: "Ready".into(), status: ConditionStatus::True,
///     reason: "Done".into(), message: "".into(), observed_generation: None };
/// let now = "2024-05-06T07:08:09.5Z".parse().unwrap();
/// let list = apply_intents(Some(&current), &[ready.clone()], Some(3), now).unwrap();
/// assert_eq!(list[0]["type"], "Other");
/// assert_eq!(list[1], json!({"type": "Ready", "status": "True", "reason": "Done", "message": "",
///     "lastTransitionTime": "2024-05-06T07:08:09Z", "observedGeneration": 3}));
/// // The same intent again changes nothing.
/// assert_eq!(apply_intents(Some(&serde_json::Value::Array(list)), &[ready], Some(3), now), None);
/// ```
pub fn apply_intents(
    current: Option<&Value>,
    intents: &[Intent],
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Vec<Value>> {
    let original: Vec<Value> = current
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut list = original.clone();
    for intent in &collapse(intents) {
        match intent {
            Intent::Remove(t) => list.retain(|e| type_of(e) != Some(t.as_str())),
            Intent::Set {
                type_,
                status,
                reason,
                message,
                observed_generation,
            }
            | Intent::Ensure {
                type_,
                status,
                reason,
                message,
                observed_generation,
            } => {
                let existing = list.iter_mut().find(|e| type_of(e) == Some(type_.as_str()));
                let generation = observed_generation.or(generation);
                let message = truncate_message(message);
                match existing {
                    Some(_) if matches!(intent, Intent::Ensure { .. }) => {}
                    Some(entry) => {
                        if !entry.is_object() {
                            *entry = Value::Object(Map::new());
                        }
                        let Some(m) = entry.as_object_mut() else {
                            continue;
                        };
                        let changed = m.get("status").and_then(Value::as_str)
                            != Some(status.as_str())
                            || !m.get("lastTransitionTime").is_some_and(Value::is_string);
                        m.insert("status".into(), json!(status.as_str()));
                        m.insert("reason".into(), json!(reason));
                        m.insert("message".into(), json!(message));
                        if changed {
                            m.insert(
                                "lastTransitionTime".into(),
                                json!(format_transition_time(now)),
                            );
                        }
                        match generation {
                            Some(g) => {
                                m.insert("observedGeneration".into(), json!(g));
                            }
                            None => {
                                m.remove("observedGeneration");
                            }
                        }
                    }
                    None => {
                        let condition = Condition {
                            type_: type_.clone(),
                            status: *status,
                            reason: reason.clone(),
                            message: message.to_string(),
                            last_transition_time: format_transition_time(now),
                            observed_generation: generation,
                        };
                        if let Ok(v) = serde_json::to_value(condition) {
                            list.push(v);
                        }
                    }
                }
            }
        }
    }
    (list != original).then_some(list)
}
