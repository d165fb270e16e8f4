//! The compile errors about options an attribute does not take: which attributes take
//! them, why not this one, and "did you mean" for misspellings.

use syn::Ident;
use syn::ext::IdentExt;

use crate::kind::{ALL, Kind, all_options, options_of, why_not};

/// The edit distance of two short words (for "did you mean").
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(row[j + 1])
            };
            prev = here;
        }
    }
    row[b.len()]
}

/// The message for an option the attribute does not take.
pub(crate) fn not_taken(kind: Kind, key: &Ident) -> syn::Error {
    let name = key.unraw().to_string();
    let owners: Vec<String> = ALL
        .iter()
        .filter(|k| options_of(**k).contains(&name.as_str()))
        .map(|k| k.attr())
        .collect();
    let message = if owners.is_empty() {
        let suggestion = options_of(kind)
            .into_iter()
            .chain(all_options())
            .map(|o| (distance(&name, o), o))
            .filter(|(d, _)| *d <= 2)
            .min_by_key(|(d, _)| *d)
            .map(|(_, o)| format!("did you mean `{o}`? "))
            .unwrap_or_default();
        format!(
            "unknown option `{name}`: {suggestion}{} takes {}",
            kind.attr(),
            kind.option_list()
        )
    } else {
        let mut message = format!("{} does not take `{name}`", kind.attr());
        match why_not(kind, &name) {
            Some(why) => message.push_str(&format!(": {why}")),
            None => message.push_str(&format!(" (an option of {})", owners.join(", "))),
        }
        if !options_of(kind).is_empty() {
            message.push_str(&format!("; it takes {}", kind.option_list()));
        }
        message
    };
    syn::Error::new_spanned(key, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_close_words() {
        assert_eq!(distance("intervall", "interval"), 1);
        assert_eq!(distance("retry", "retries"), 3);
        assert_eq!(distance("", "id"), 2);
    }
}
