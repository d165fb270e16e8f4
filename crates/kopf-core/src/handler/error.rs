//! How a handler fails: [`HandlerError`] (Kopf's temporary, permanent and arbitrary errors),
//! what to do with arbitrary ones ([`ErrorsMode`]), and how other errors (kube's, serde's,
//! I/O, strings) become one.

use std::time::Duration;

use serde_json::Value;

/// What a handler returns: an optional result for `status.<handler-id>`, or an error.
pub type HandlerResult = Result<Option<Value>, HandlerError>;

/// Handler failures, classified as Kopf classifies them.
///
/// ```
/// use std::time::Duration;
/// use kopf_core::handler::HandlerError;
///
/// fn check(size: u64) -> Result<(), HandlerError> {
///     if size == 0 {
///         // Fails for good: retrying will not make a zero size valid.
///         return Err(HandlerError::permanent("spec.size must be positive"));
///     }
///     if size > 100 {
///         // Retried after a minute (e.g. capacity that may free up).
///         return Err(HandlerError::temporary("no room for it yet", Duration::from_secs(60)));
///     }
///     Ok(())
/// }
///
/// // Anything else that is an error: handled by the handler's errors mode (retried after
/// // its backoff by default); `?` works on kube's errors, JSON errors and boxed errors.
/// fn parse(text: &str) -> Result<serde_json::Value, HandlerError> {
///     Ok(serde_json::from_str(text)?)
/// }
/// assert!(matches!(check(0), Err(HandlerError::Permanent { .. })));
/// assert!(matches!(parse("{"), Err(HandlerError::Other { .. })));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// Retry after `delay` (None: at once).
    #[error("{message}")]
    Temporary {
        /// The error text (stored in the progress record).
        message: String,
        /// When to retry.
        delay: Option<Duration>,
    },
    /// Fail for good; never retried.
    #[error("{message}")]
    Permanent {
        /// The error text.
        message: String,
    },
    /// A permanent error with an HTTP status code for admission webhooks (Kopf's
    /// `AdmissionError`): the review is denied with this message and code. Elsewhere it
    /// is a permanent error.
    #[error("{message}")]
    Admission {
        /// The error text (the denial message).
        message: String,
        /// The HTTP status code of the denial (Kopf's default: 500).
        code: u16,
    },
    /// Any other error: handled by the handler's errors mode (retry with backoff by default).
    #[error("{message}")]
    Other {
        /// The error text.
        message: String,
    },
}

impl HandlerError {
    /// A temporary error with a retry delay.
    pub fn temporary(message: impl Into<String>, delay: Duration) -> Self {
        HandlerError::Temporary {
            message: message.into(),
            delay: Some(delay),
        }
    }

    /// A permanent error.
    pub fn permanent(message: impl Into<String>) -> Self {
        HandlerError::Permanent {
            message: message.into(),
        }
    }

    /// Any other error, from anything displayable.
    pub fn other(error: impl std::fmt::Display) -> Self {
        HandlerError::Other {
            message: error.to_string(),
        }
    }

    /// The error of a handler task that panicked or was cancelled.
    pub fn from_join(error: tokio::task::JoinError) -> Self {
        if error.is_panic() {
            HandlerError::other(format!("the handler panicked: {error}"))
        } else {
            HandlerError::other(format!("the handler was cancelled: {error}"))
        }
    }
}

/// What to do with errors other than temporary/permanent ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorsMode {
    /// Retry after the backoff (the default).
    Temporary,
    /// Fail for good.
    Permanent,
    /// Treat as success without a result.
    Ignored,
}

/// Retry after `delay` (Kopf's `TemporaryError`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct TemporaryError {
    /// The error text.
    pub message: String,
    /// When to retry (None: at once).
    pub delay: Option<Duration>,
}

impl From<TemporaryError> for HandlerError {
    fn from(e: TemporaryError) -> Self {
        HandlerError::Temporary {
            message: e.message,
            delay: e.delay,
        }
    }
}

/// Fail for good (Kopf's `PermanentError`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct PermanentError(pub String);

impl From<PermanentError> for HandlerError {
    fn from(e: PermanentError) -> Self {
        HandlerError::Permanent { message: e.0 }
    }
}

impl From<Box<dyn std::error::Error + Send + Sync>> for HandlerError {
    fn from(e: Box<dyn std::error::Error + Send + Sync>) -> Self {
        HandlerError::other(e)
    }
}

/// A child that cannot be adopted will not become adoptable by retrying.
impl From<crate::hierarchy::HierarchyError> for HandlerError {
    fn from(e: crate::hierarchy::HierarchyError) -> Self {
        HandlerError::permanent(e.to_string())
    }
}

/// How long a handler waits before it retries after a conflict (409) of its own request.
const API_CONFLICT_DELAY: Duration = Duration::from_secs(1);
/// How long after a `429 Too Many Requests` without a `retryAfterSeconds`.
const API_BUSY_DELAY: Duration = Duration::from_secs(5);
/// How long after a server error (5xx) or a request that got no answer.
const API_DOWN_DELAY: Duration = Duration::from_secs(10);

/// `?` on the errors of kube's client in a handler, classified as Kopf classifies API errors:
/// what may work on a later attempt is temporary — a conflict (409, retried after 1 s), the
/// server being busy (429, after its `retryAfterSeconds` or 5 s), a server error (5xx) or no
/// answer at all (a connection error, a timeout: after 10 s) — and any other refusal (400,
/// 401, 403, 404, 422...) is permanent. The message is one short line: the status code, its
/// reason and the API server's message.
///
/// ```
/// use kopf_core::handler::HandlerError;
///
/// async fn read_settings(api: kube::Api<kube::api::DynamicObject>) -> Result<(), HandlerError> {
///     let settings = api.get("settings").await?; // a 404 fails for good, a 503 retries
///     let _ = settings;
///     Ok(())
/// }
/// # let _ = read_settings;
/// ```
impl From<kube::Error> for HandlerError {
    fn from(e: kube::Error) -> Self {
        match &e {
            kube::Error::Api(s) => {
                let message = format!(
                    "the API server answered {}{}: {}",
                    s.code,
                    if s.reason.is_empty() {
                        String::new()
                    } else {
                        format!(" {}", s.reason)
                    },
                    crate::text::excerpt(&s.message, 500)
                );
                let retry_after = s
                    .details
                    .as_ref()
                    .map(|d| d.retry_after_seconds)
                    .filter(|secs| *secs > 0)
                    .map(|secs| Duration::from_secs(u64::from(secs)));
                match s.code {
                    409 => HandlerError::temporary(message, API_CONFLICT_DELAY),
                    429 => HandlerError::temporary(message, retry_after.unwrap_or(API_BUSY_DELAY)),
                    500..=599 => {
                        HandlerError::temporary(message, retry_after.unwrap_or(API_DOWN_DELAY))
                    }
                    _ => HandlerError::permanent(message),
                }
            }
            kube::Error::HyperError(_) | kube::Error::Service(_) => HandlerError::temporary(
                format!(
                    "no answer from the API server: {}",
                    crate::text::for_log(&e)
                ),
                API_DOWN_DELAY,
            ),
            other => HandlerError::other(crate::text::for_log(other)),
        }
    }
}

impl From<serde_json::Error> for HandlerError {
    fn from(e: serde_json::Error) -> Self {
        HandlerError::other(e)
    }
}

impl From<std::io::Error> for HandlerError {
    fn from(e: std::io::Error) -> Self {
        HandlerError::other(e)
    }
}

impl From<String> for HandlerError {
    fn from(message: String) -> Self {
        HandlerError::Other { message }
    }
}

impl From<&str> for HandlerError {
    fn from(message: &str) -> Self {
        HandlerError::Other {
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kube_errors_are_classified_as_kopf_classifies_api_errors() {
        let api = |code: u16, reason: &str, retry_after: u32| {
            let status: kube::core::Status = serde_json::from_value(json!({
                "code": code, "reason": reason, "message": format!("what happened {code}"),
                "details": {"retryAfterSeconds": retry_after},
            }))
            .expect("a Status");
            HandlerError::from(kube::Error::Api(Box::new(status)))
        };
        assert_eq!(
            api(404, "NotFound", 0),
            HandlerError::permanent("the API server answered 404 NotFound: what happened 404")
        );
        assert!(matches!(
            api(403, "Forbidden", 0),
            HandlerError::Permanent { .. }
        ));
        assert!(matches!(
            api(422, "Invalid", 0),
            HandlerError::Permanent { .. }
        ));
        assert!(matches!(
            api(409, "Conflict", 0),
            HandlerError::Temporary { delay: Some(d), .. } if d == API_CONFLICT_DELAY
        ));
        assert!(matches!(
            api(429, "TooManyRequests", 7),
            HandlerError::Temporary { delay: Some(d), .. } if d == Duration::from_secs(7)
        ));
        assert!(matches!(
            api(503, "ServiceUnavailable", 0),
            HandlerError::Temporary { delay: Some(d), .. } if d == API_DOWN_DELAY
        ));
        let decode = serde_json::from_str::<Value>("{").expect_err("not JSON");
        assert!(matches!(
            HandlerError::from(kube::Error::SerdeError(decode)),
            HandlerError::Other { .. }
        ));
    }
}
