//! Texts for logs: what the API server or a client error says can be arbitrarily long (a
//! list the client cannot decode carries the whole list); logs get a bounded excerpt.

use std::borrow::Cow;

/// The longest excerpt of a foreign text (an API message, an error) that goes into a log line.
pub const LOG_EXCERPT: usize = 1000;

/// `text` cut to at most `max` bytes (on a character boundary), with a note of how much was
/// left out; short texts are returned as they are.
///
/// ```
/// use kopf_core::text::excerpt;
///
/// assert_eq!(excerpt("short", 10), "short");
/// let long = "x".repeat(5000);
/// let cut = excerpt(&long, 100);
/// assert!(cut.starts_with(&"x".repeat(100)));
/// assert!(cut.ends_with("… (4900 more bytes)"));
/// ```
pub fn excerpt(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{}… ({} more bytes)",
        &text[..end],
        text.len() - end
    ))
}

/// [`excerpt`] of a displayable value (an error) at the [`LOG_EXCERPT`] length.
pub fn for_log(value: &impl std::fmt::Display) -> String {
    let text = value.to_string();
    match excerpt(&text, LOG_EXCERPT) {
        Cow::Borrowed(_) => text,
        Cow::Owned(cut) => cut,
    }
}

/// The message of a panic's payload (`panic!("...")` gives a `&str` or a `String`), if it
/// has one.
///
/// ```
/// use kopf_core::text::panic_message;
///
/// let payload = std::panic::catch_unwind(|| panic!("boom {}", 1)).unwrap_err();
/// assert_eq!(panic_message(payload.as_ref()), Some("boom 1"));
/// let payload = std::panic::catch_unwind(|| std::panic::panic_any(7)).unwrap_err();
/// assert_eq!(panic_message(payload.as_ref()), None);
/// ```
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_character_boundaries() {
        let text = "é".repeat(10); // 2 bytes each
        let cut = excerpt(&text, 5);
        assert!(cut.starts_with("éé"), "{cut}");
        assert!(cut.ends_with("(16 more bytes)"), "{cut}");
        assert_eq!(for_log(&"abc"), "abc");
        assert!(for_log(&"y".repeat(3000)).len() < 1100);
    }
}
