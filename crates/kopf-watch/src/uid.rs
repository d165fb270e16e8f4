//! Object uids as keys of the engine's long-lived tables, stored inline: a table of many
//! objects is then one allocation, not one per object scattered among the short-lived ones
//! of the cycles (which keeps the allocator from handing memory back).

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// Inline room: a UUID (36 bytes) fits.
const INLINE: usize = 46;

/// An object's uid.
#[derive(Clone)]
pub(crate) enum Uid {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<str>),
}

impl Uid {
    /// The uid as text.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            // Only ever filled from a `&str` of `len` bytes (see `From`).
            Uid::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Uid::Heap(s) => s,
        }
    }
}

impl From<&str> for Uid {
    fn from(s: &str) -> Self {
        match u8::try_from(s.len()) {
            Ok(len) if s.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..s.len()].copy_from_slice(s.as_bytes());
                Uid::Inline { len, bytes }
            }
            _ => Uid::Heap(s.into()),
        }
    }
}

impl Borrow<str> for Uid {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Hash for Uid {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes: lookups by `&str` find the same entries.
        self.as_str().hash(state);
    }
}

impl PartialEq for Uid {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Uid {}

impl std::fmt::Debug for Uid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn uids_are_found_by_their_text_inline_or_not() {
        let long = "x".repeat(100);
        let mut map = HashMap::new();
        map.insert(Uid::from("6f1c1a52-0f3b-4c1e-9d47-1b2e3f4a5b6c"), 1);
        map.insert(Uid::from(long.as_str()), 2);
        map.insert(Uid::from(""), 3);
        assert!(matches!(
            Uid::from("6f1c1a52-0f3b-4c1e-9d47-1b2e3f4a5b6c"),
            Uid::Inline { .. }
        ));
        assert!(matches!(Uid::from(long.as_str()), Uid::Heap(_)));
        assert_eq!(map.get("6f1c1a52-0f3b-4c1e-9d47-1b2e3f4a5b6c"), Some(&1));
        assert_eq!(map.get(long.as_str()), Some(&2));
        assert_eq!(map.get(""), Some(&3));
        assert_eq!(map.get("other"), None);
    }
}
