//! How a handler fails: [`HandlerError`] (Kopf's temporary, permanent and arbitrary errors),
//! what to do with arbitrary ones ([`ErrorsMode`]), and how other errors become one: `?` on
//! any error type (`std::error::Error + Send + Sync + 'static`) keeps it as the failure's
//! [`source`](HandlerError::source), and the logs show its chain of causes.

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

/// What a handler returns: an optional result for `status.<handler-id>`, or an error.
pub type HandlerResult = Result<Option<Value>, HandlerError>;

/// Handler failures, classified as Kopf classifies them.
///
/// `?` turns any error (`std::error::Error + Send + Sync + 'static`) into one: kube's
/// errors as Kopf classifies API errors, [`TemporaryError`], [`PermanentError`] and
/// [`AdmissionError`] as what they say, anything else into [`HandlerError::Other`] (handled
/// by the handler's errors mode), which keeps the error as its [`source`](Self::source).
/// Its text (`Display`) is the message followed by the causes of the source that the
/// message does not quote already: what the logs and the events show.
///
/// (It is not a `std::error::Error` itself, so that any error converts into it; box it
/// with `Box::<dyn std::error::Error + Send + Sync>::from` where one is needed.)
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
/// // its backoff by default); `?` works on any error type, which stays the source.
/// fn parse(text: &str) -> Result<serde_json::Value, HandlerError> {
///     Ok(serde_json::from_str(text)?)
/// }
/// assert!(matches!(check(0), Err(HandlerError::Permanent { .. })));
/// let error = parse("{").unwrap_err();
/// assert!(matches!(error, HandlerError::Other { .. }));
/// assert!(error.source().is_some_and(|e| e.is::<serde_json::Error>()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerError {
    /// Retry after `delay` (None: at once).
    Temporary {
        /// The error text (stored in the progress record).
        message: String,
        /// When to retry.
        delay: Option<Duration>,
        /// The error it comes from, if any.
        source: Option<ErrorSource>,
    },
    /// Fail for good; never retried.
    Permanent {
        /// The error text.
        message: String,
        /// The error it comes from, if any.
        source: Option<ErrorSource>,
    },
    /// A permanent error with an HTTP status code for admission webhooks (Kopf's
    /// `AdmissionError`): the review is denied with this message and code. Elsewhere it
    /// is a permanent error.
    Admission {
        /// The error text (the denial message).
        message: String,
        /// The HTTP status code of the denial (Kopf's default: 500).
        code: u16,
    },
    /// Any other error: handled by the handler's errors mode (retry with backoff by default).
    Other {
        /// The error text.
        message: String,
        /// The error it comes from (the one `?` was used on), if any.
        source: Option<ErrorSource>,
    },
}

/// The error a [`HandlerError`] comes from (shared: a handler error is cheap to clone).
/// Two are equal when their texts are.
#[derive(Clone)]
pub struct ErrorSource(Arc<dyn Error + Send + Sync + 'static>);

impl ErrorSource {
    /// Keeps `error`.
    pub fn new(error: impl Error + Send + Sync + 'static) -> Self {
        ErrorSource(Arc::new(error))
    }

    /// The error.
    pub fn error(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl From<Box<dyn Error + Send + Sync + 'static>> for ErrorSource {
    fn from(error: Box<dyn Error + Send + Sync + 'static>) -> Self {
        ErrorSource(Arc::from(error))
    }
}

impl std::fmt::Debug for ErrorSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl PartialEq for ErrorSource {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for ErrorSource {}

impl std::fmt::Display for HandlerError {
    /// The message, then each cause of the source that the text does not quote yet.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut text = self.message().to_string();
        let mut cause = self.source();
        while let Some(error) = cause {
            let line = error.to_string();
            if !text.contains(&line) {
                text = format!("{text}: {line}");
            }
            cause = error.source();
        }
        f.write_str(&text)
    }
}

impl HandlerError {
    /// A temporary error with a retry delay.
    pub fn temporary(message: impl Into<String>, delay: Duration) -> Self {
        HandlerError::Temporary {
            message: message.into(),
            delay: Some(delay),
            source: None,
        }
    }

    /// A permanent error.
    pub fn permanent(message: impl Into<String>) -> Self {
        HandlerError::Permanent {
            message: message.into(),
            source: None,
        }
    }

    /// Any other error, from anything displayable (its text only; `?` or
    /// [`from_error`](Self::from_error) keeps an error as the source).
    pub fn other(error: impl std::fmt::Display) -> Self {
        HandlerError::Other {
            message: error.to_string(),
            source: None,
        }
    }

    /// Any error, classified as `?` classifies it (see [`HandlerError`]).
    pub fn from_error(error: impl Error + Send + Sync + 'static) -> Self {
        Self::from_boxed(Box::new(error))
    }

    /// A boxed error, classified as `?` classifies it (see [`HandlerError`]).
    pub fn from_boxed(error: Box<dyn Error + Send + Sync + 'static>) -> Self {
        let error = match error.downcast::<kube::Error>() {
            Ok(e) => return from_kube(*e),
            Err(other) => other,
        };
        let error = match error.downcast::<TemporaryError>() {
            Ok(e) => {
                return HandlerError::Temporary {
                    message: e.message,
                    delay: e.delay,
                    source: None,
                };
            }
            Err(other) => other,
        };
        if let Some(e) = error.downcast_ref::<PermanentError>() {
            return HandlerError::permanent(e.0.clone());
        }
        if let Some(e) = error.downcast_ref::<AdmissionError>() {
            return HandlerError::Admission {
                message: e.message.clone(),
                code: e.code,
            };
        }
        // A child that cannot be adopted will not become adoptable by retrying; an invalid
        // condition type or reason is the handler's bug.
        if error.is::<crate::hierarchy::HierarchyError>()
            || error.is::<crate::conditions::ConditionError>()
        {
            return HandlerError::permanent(error.to_string());
        }
        HandlerError::Other {
            message: error.to_string(),
            source: Some(ErrorSource::from(error)),
        }
    }

    /// The error text (without the source's causes; what the progress record stores).
    pub fn message(&self) -> &str {
        match self {
            HandlerError::Temporary { message, .. }
            | HandlerError::Permanent { message, .. }
            | HandlerError::Admission { message, .. }
            | HandlerError::Other { message, .. } => message,
        }
    }

    /// When a temporary error is retried (None: at once, and for the other kinds).
    pub fn delay(&self) -> Option<Duration> {
        match self {
            HandlerError::Temporary { delay, .. } => *delay,
            _ => None,
        }
    }

    /// The same failure as a permanent one with `message` (its source kept).
    pub fn into_permanent(self, message: String) -> Self {
        HandlerError::Permanent {
            message,
            source: self.into_source(),
        }
    }

    /// The same failure as a temporary one retried after `delay` (its message and source
    /// kept).
    pub fn into_temporary(self, delay: Option<Duration>) -> Self {
        let message = self.message().to_string();
        HandlerError::Temporary {
            message,
            delay,
            source: self.into_source(),
        }
    }

    fn into_source(self) -> Option<ErrorSource> {
        match self {
            HandlerError::Temporary { source, .. }
            | HandlerError::Permanent { source, .. }
            | HandlerError::Other { source, .. } => source,
            HandlerError::Admission { .. } => None,
        }
    }

    /// The error this one comes from: the error `?` was used on in the handler, whose own
    /// `source()` chain follows.
    pub fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            HandlerError::Temporary { source, .. }
            | HandlerError::Permanent { source, .. }
            | HandlerError::Other { source, .. } => {
                source.as_ref().map(|s| s.error() as &(dyn Error + 'static))
            }
            HandlerError::Admission { .. } => None,
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

/// `?` on any error in a handler: see [`HandlerError`].
impl<E: Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(error: E) -> Self {
        HandlerError::from_error(error)
    }
}

/// A handler error where a `std::error::Error` is needed (its text, and its source).
#[derive(Debug)]
struct Failed(HandlerError);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.message())
    }
}

impl Error for Failed {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.0.source()
    }
}

impl From<HandlerError> for Box<dyn Error + Send + Sync + 'static> {
    fn from(error: HandlerError) -> Self {
        Box::new(Failed(error))
    }
}

impl From<HandlerError> for Box<dyn Error + 'static> {
    fn from(error: HandlerError) -> Self {
        Box::new(Failed(error))
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

/// Fail for good (Kopf's `PermanentError`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct PermanentError(pub String);

/// Denies the reviewed request with a message and an HTTP code (Kopf's `AdmissionError`;
/// the code defaults to 500 as in Kopf). Other errors deny too, with code 500. Elsewhere
/// than in an admission handler it is a permanent error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AdmissionError {
    /// What the API client sees after `admission webhook "<name>" denied the request: `.
    pub message: String,
    /// The HTTP status code (the API server answers at least 400).
    pub code: u16,
}

impl AdmissionError {
    /// A denial with code 500 (Kopf's default).
    pub fn new(message: impl Into<String>) -> Self {
        AdmissionError {
            message: message.into(),
            code: 500,
        }
    }

    /// A denial with a code, e.g. 400 or 422.
    pub fn with_code(message: impl Into<String>, code: u16) -> Self {
        AdmissionError {
            message: message.into(),
            code,
        }
    }
}

/// How long a handler waits before it retries after a conflict (409) of its own request.
const API_CONFLICT_DELAY: Duration = Duration::from_secs(1);
/// How long after a `429 Too Many Requests` without a `retryAfterSeconds`.
const API_BUSY_DELAY: Duration = Duration::from_secs(5);
/// How long after a server error (5xx) or a request that got no answer.
const API_DOWN_DELAY: Duration = Duration::from_secs(10);

/// kube's client errors (`?` on them in a handler), classified as Kopf classifies API errors:
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
fn from_kube(e: kube::Error) -> HandlerError {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A user's error type with a source, as handlers have them.
    #[derive(Debug)]
    struct Storing(std::io::Error);

    impl std::fmt::Display for Storing {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("the report could not be stored")
        }
    }

    impl Error for Storing {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    fn store() -> Result<(), Storing> {
        Err(Storing(std::io::Error::other("the disk is full")))
    }

    fn handler() -> Result<(), HandlerError> {
        store()?;
        Ok(())
    }

    #[test]
    fn a_users_error_is_kept_as_the_source_and_its_causes_are_in_the_text() {
        let error = handler().expect_err("fails");
        assert!(matches!(
            &error,
            HandlerError::Other { message, .. } if message == "the report could not be stored"
        ));
        assert_eq!(error.message(), "the report could not be stored");
        let source = error.source().expect("the user's error");
        assert!(source.is::<Storing>());
        assert_eq!(
            source.source().map(ToString::to_string).as_deref(),
            Some("the disk is full")
        );
        assert_eq!(
            error.to_string(),
            "the report could not be stored: the disk is full"
        );
        // Where a std error is needed, the chain stays.
        let boxed: Box<dyn Error + Send + Sync> = error.clone().into();
        assert_eq!(boxed.to_string(), "the report could not be stored");
        assert!(boxed.source().is_some_and(|s| s.is::<Storing>()));
        // A text already quoted is not repeated.
        let quoted = HandlerError::Permanent {
            message: "failed: the disk is full".into(),
            source: Some(ErrorSource::new(std::io::Error::other("the disk is full"))),
        };
        assert_eq!(quoted.to_string(), "failed: the disk is full");
        // Without a source, the text is the message, as before.
        assert_eq!(HandlerError::other("plain").to_string(), "plain");
        assert_eq!(HandlerError::other("plain").source().map(|_| ()), None);
    }

    #[test]
    fn kopfs_errors_stay_what_they_say_through_question_marks() {
        fn fails(e: impl Error + Send + Sync + 'static) -> Result<(), HandlerError> {
            Err(e)?
        }
        assert_eq!(
            fails(PermanentError("never".into())),
            Err(HandlerError::permanent("never"))
        );
        assert_eq!(
            fails(TemporaryError {
                message: "later".into(),
                delay: Some(Duration::from_secs(3)),
            }),
            Err(HandlerError::temporary("later", Duration::from_secs(3)))
        );
        assert_eq!(
            fails(AdmissionError::with_code("denied", 422)),
            Err(HandlerError::Admission {
                message: "denied".into(),
                code: 422
            })
        );
        let invalid = crate::conditions::ConditionError::InvalidReason {
            value: "".into(),
            why: "empty",
        };
        assert!(matches!(
            fails(invalid),
            Err(HandlerError::Permanent { .. })
        ));
        let io = fails(std::io::Error::other("no"));
        assert!(matches!(io, Err(HandlerError::Other { ref message, .. }) if message == "no"));
    }

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
