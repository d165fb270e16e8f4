//! The name rules of kube-apiserver (apimachinery's `util/validation`): DNS-1123 labels and
//! subdomains, DNS-1035 labels, qualified names (label keys, annotation keys, finalizers),
//! label values and path segments. Each check returns kube's messages (none when valid), in
//! kube's words, so that a cause reads as a cluster's would.

pub(crate) use crate::apiserver::kinds::NameRule;
use crate::apiserver::kinds::kind_of;

const LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// kube's regex message: the message, examples and the regular expression.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(e);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

fn max_len(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn alnum(c: u8, upper: bool) -> bool {
    c.is_ascii_digit() || c.is_ascii_lowercase() || (upper && c.is_ascii_uppercase())
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn matches_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && alnum(b[0], false)
        && alnum(b[b.len() - 1], false)
        && b.iter().all(|&c| alnum(c, false) || c == b'-')
}

fn matches_subdomain(s: &str) -> bool {
    s.split('.').all(matches_label)
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn matches_qualified_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && alnum(b[0], true)
        && alnum(b[b.len() - 1], true)
        && b.iter()
            .all(|&c| alnum(c, true) || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS-1123 label (namespaces): at most 63 characters.
pub(crate) fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len(63));
    }
    if !matches_label(s) {
        if matches_subdomain(s) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(LABEL_MSG, LABEL_FMT, &["my-name", "123-abc"]));
        }
    }
    errs
}

/// A DNS-1123 subdomain (most objects): at most 253 characters.
pub(crate) fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len(253));
    }
    if !matches_subdomain(s) {
        errs.push(regex_error(SUBDOMAIN_MSG, SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// A DNS-1035 label (Services): starts with a letter, at most 63 characters.
pub(crate) fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len(63));
    }
    let starts_alpha = s.as_bytes().first().is_some_and(u8::is_ascii_lowercase);
    if !(matches_label(s) && starts_alpha) {
        errs.push(regex_error(
            DNS1035_MSG,
            DNS1035_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// A path segment (RBAC objects' names, which may hold `:`): not `.`/`..`, no `/` or `%`.
pub(crate) fn path_segment(s: &str) -> Vec<String> {
    if s == "." || s == ".." {
        return vec![format!("may not be '{s}'")];
    }
    let mut errs = Vec::new();
    for bad in ["/", "%"] {
        if s.contains(bad) {
            errs.push(format!("may not contain '{bad}'"));
        }
    }
    errs
}

/// A qualified name: an optional DNS subdomain prefix and `/`, then a name of at most 63
/// characters (label keys, annotation keys, finalizers).
pub(crate) fn qualified_name(s: &str) -> Vec<String> {
    let parts: Vec<&str> = s.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_MSG,
                    QUALIFIED_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    let mut errs = Vec::new();
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            errs.push("prefix part must be non-empty".to_string());
        } else {
            errs.extend(
                dns1123_subdomain(prefix)
                    .into_iter()
                    .map(|m| format!("prefix part {m}")),
            );
        }
    }
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len(63)));
    }
    if !name.is_empty() && !matches_qualified_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_MSG,
                QUALIFIED_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// A label value: empty, or a qualified-name part of at most 63 characters.
pub(crate) fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len(63));
    }
    if !s.is_empty() && !matches_qualified_part(s) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

impl NameRule {
    /// The rule of a resource: its row's in the kinds table; a custom resource's is a
    /// DNS subdomain.
    pub(crate) fn of(group: &str, plural: &str) -> Self {
        kind_of(group, plural).map_or(NameRule::Subdomain, |k| k.names)
    }

    /// kube's messages for a name (`prefix`: a generateName, whose trailing `-` is allowed).
    pub(crate) fn check(self, name: &str, prefix: bool) -> Vec<String> {
        // kube's maskTrailingDash: a generateName's last two characters, when it ends in
        // `-`, stand for one alphanumeric character.
        let masked;
        let name = match (prefix, self) {
            (true, NameRule::PathSegment) => name,
            // (A non-ASCII character before the dash is invalid masked or not.)
            (true, _)
                if name.len() > 1
                    && name.ends_with('-')
                    && name.is_char_boundary(name.len() - 2) =>
            {
                masked = format!("{}a", &name[..name.len() - 2]);
                masked.as_str()
            }
            _ => name,
        };
        match self {
            NameRule::Subdomain => dns1123_subdomain(name),
            NameRule::Label => dns1123_label(name),
            NameRule::Dns1035 => dns1035_label(name),
            NameRule::PathSegment => path_segment(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains_and_labels() {
        assert!(dns1123_subdomain("my-app.example.com").is_empty());
        assert_eq!(
            dns1123_subdomain("Foo")[0],
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        assert_eq!(dns1123_subdomain(&"a".repeat(254)).len(), 1);
        assert_eq!(dns1123_label("a.b"), vec!["must not contain dots"]);
        assert!(dns1123_label("-a")[0].contains("(e.g. 'my-name',  or '123-abc', regex"));
        assert!(!dns1035_label("1abc").is_empty());
        assert!(dns1035_label("abc-1").is_empty());
    }

    #[test]
    fn qualified_names_and_values() {
        assert!(qualified_name("kopf.zalando.org/KopfFinalizerMarker").is_empty());
        assert!(qualified_name("app").is_empty());
        assert_eq!(qualified_name("/x"), vec!["prefix part must be non-empty"]);
        assert!(qualified_name("a/b/c")[0].starts_with("a qualified name must consist"));
        assert!(qualified_name("Bad_Prefix/x")[0].starts_with("prefix part a lowercase"));
        assert!(qualified_name("a b")[0].starts_with("name part must consist"));
        assert!(label_value("").is_empty());
        assert_eq!(label_value(&"x".repeat(64)).len(), 1);
        assert!(label_value("a b")[0].starts_with("a valid label must be an empty string"));
        assert!(path_segment("system:discovery").is_empty());
        assert_eq!(path_segment("a/b"), vec!["may not contain '/'"]);
        assert!(NameRule::Subdomain.check("gen-", true).is_empty());
        // kube masks the last two characters: "A-" is fine as a prefix, "Ab-" is not.
        assert!(NameRule::Subdomain.check("A-", true).is_empty());
        assert!(!NameRule::Subdomain.check("Ab-", true).is_empty());
        assert!(!NameRule::Subdomain.check("é-", true).is_empty());
    }
}
