//! Less data over the wire: the server-side selectors of a resource's list+watch.
//!
//! - the user's selectors (`run -l/--label-selector`, `--field-selector`,
//!   [`Settings::label_selector`](crate::Settings::label_selector)), checked with
//!   [`check_label_selector`] and [`check_field_selector`];
//! - a label selector derived from the handlers' label filters ([`derive`]): when every
//!   handler, timer, daemon, index and declaration of a resource filters on labels, the
//!   constraints common to all of them (`k=v`, `k in (v1,v2)`, `k`, `!k`) are asked of the
//!   API server, so that objects no handler would look at never reach the operator. The
//!   handlers' filters still apply on the client.
//!
//! Why a derivation is refused when a handler needs the finalizer: with a label selector,
//! the API server sends DELETED when an object stops matching (it still exists); the engine
//! forgets the object then (its worker ends, no delete handler runs). An object that loses
//! the label while it carries our finalizer would keep it forever, since its deletion would
//! never be seen. So resources with delete handlers, or timers and daemons (which need the
//! finalizer unless optional), are watched without a derived selector.
//!
//! Why raw-event handlers refuse it too: they would see that DELETED (with the last state
//! that matched) for an object that only lost its label, where without the selector they
//! would see nothing (the MODIFIED fails their filter).

use std::collections::{BTreeMap, BTreeSet};

use kopf_core::handler::{HandlerKind, HandlerSpec, MetaFilter};

/// The declaration that a resource's handlers need only its metadata: its objects are
/// listed and watched as `PartialObjectMetadata` (no `spec`, no `status` over the wire),
/// and handlers see bodies with `apiVersion`, `kind` and `metadata` only. Registered as a
/// [`HandlerSpec::declaration`] (`Operator::metadata_only`); see `docs/selectors.md`.
///
/// ```
/// use kopf_core::handler::HandlerSpec;
/// use kopf_watch::MetadataOnly;
///
/// let spec = HandlerSpec::declaration("metadata-only", MetadataOnly);
/// assert!(spec.declared::<MetadataOnly>().is_some());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetadataOnly;

/// Whether the handlers declare their resource [`MetadataOnly`].
pub(crate) fn metadata_only(handlers: &[HandlerSpec]) -> bool {
    handlers
        .iter()
        .any(|h| h.declared::<MetadataOnly>().is_some())
}

/// Why no label selector is derived for a resource (logged at debug).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotDerived {
    /// The resource has no handler.
    NoHandlers,
    /// A handler (its id) needs the finalizer.
    Finalizer(String),
    /// A raw-event handler (its id) would see DELETED for objects that lose the label.
    RawEvents(String),
    /// A handler or declaration (its id) has no label filter the server can evaluate.
    Unfiltered(String),
    /// The handlers' label filters have no constraint in common.
    NothingInCommon,
}

impl std::fmt::Display for NotDerived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotDerived::NoHandlers => f.write_str("no handlers"),
            NotDerived::Finalizer(id) => write!(
                f,
                "handler '{id}' needs the finalizer (an object leaving the selector could keep it forever)"
            ),
            NotDerived::RawEvents(id) => write!(
                f,
                "raw-event handler '{id}' would see DELETED for objects that only lose a label"
            ),
            NotDerived::Unfiltered(id) => {
                write!(f, "'{id}' has no label filter the server can evaluate")
            }
            NotDerived::NothingInCommon => {
                f.write_str("the handlers' label filters have no constraint in common")
            }
        }
    }
}

/// One handler's constraint on one label key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Constraint {
    /// One of these values (one for a handler).
    Values(BTreeSet<String>),
    Present,
    Absent,
    /// Contradictory or not expressible on the server.
    Unknown,
}

impl Constraint {
    /// Both hold (two filters of one handler on the same key).
    fn and(self, other: Constraint) -> Constraint {
        use Constraint::*;
        match (self, other) {
            (Unknown, _) | (_, Unknown) => Unknown,
            (Values(a), Values(b)) if a == b => Values(a),
            (Values(a), Present) | (Present, Values(a)) => Values(a),
            (Present, Present) => Present,
            (Absent, Absent) => Absent,
            _ => Unknown,
        }
    }

    /// Either holds (two handlers): the weakest constraint implied by both.
    fn or(self, other: Constraint) -> Constraint {
        use Constraint::*;
        match (self, other) {
            (Unknown, _) | (_, Unknown) => Unknown,
            (Values(mut a), Values(b)) => {
                a.extend(b);
                Values(a)
            }
            (Values(_) | Present, Values(_) | Present) => Present,
            (Absent, Absent) => Absent,
            _ => Unknown,
        }
    }

    /// The selector requirement, if the server can evaluate it.
    fn requirement(&self, key: &str) -> Option<String> {
        match self {
            Constraint::Values(v) if v.len() == 1 => {
                v.first().map(|value| format!("{key}={value}"))
            }
            Constraint::Values(v) => Some(format!(
                "{key} in ({})",
                v.iter().cloned().collect::<Vec<_>>().join(",")
            )),
            Constraint::Present => Some(key.to_string()),
            Constraint::Absent => Some(format!("!{key}")),
            Constraint::Unknown => None,
        }
    }
}

/// One handler's expressible label constraints, by key.
fn constraints(h: &HandlerSpec) -> BTreeMap<String, Constraint> {
    let mut out: BTreeMap<String, Constraint> = BTreeMap::new();
    for (key, filter) in &h.labels {
        let c = match filter {
            _ if check_key(key).is_err() => Constraint::Unknown,
            MetaFilter::Value(v) if check_value(v).is_ok() => {
                Constraint::Values(BTreeSet::from([v.clone()]))
            }
            MetaFilter::Present => Constraint::Present,
            MetaFilter::Absent => Constraint::Absent,
            // A value no label can have, or a predicate: not for the server.
            MetaFilter::Value(_) | MetaFilter::Predicate(_) => Constraint::Unknown,
        };
        let merged = match out.remove(key) {
            Some(before) => before.and(c),
            None => c,
        };
        out.insert(key.clone(), merged);
    }
    out.retain(|_, c| *c != Constraint::Unknown);
    out
}

/// The label selector implied by every handler of a resource (see the module's docs for the
/// rules), or why there is none.
///
/// ```
/// use kopf_core::handler::{HandlerSpec, MetaFilter, Options};
/// use kopf_core::causes::Reason;
/// use kopf_core::handler::Cause;
///
/// let noop = |_: Cause| async { Ok(None) };
/// let a = HandlerSpec::new("a", Some(Reason::Create), noop)
///     .with_options(Options::default().label("app", "web").label("tier", MetaFilter::Present));
/// let b = HandlerSpec::new("b", Some(Reason::Update), noop)
///     .with_options(Options::default().label("app", "web"));
/// assert_eq!(kopf_watch::derive_label_selector(&[a, b]).ok(), Some("app=web".to_string()));
/// ```
pub fn derive(handlers: &[HandlerSpec]) -> Result<String, NotDerived> {
    // Declarations about the watch itself are not handlers: they see no object.
    let handlers: Vec<&HandlerSpec> = handlers
        .iter()
        .filter(|h| h.declared::<MetadataOnly>().is_none())
        .collect();
    if handlers.is_empty() {
        return Err(NotDerived::NoHandlers);
    }
    if let Some(h) = handlers.iter().find(|h| h.requires_finalizer) {
        return Err(NotDerived::Finalizer(h.id.clone()));
    }
    if let Some(h) = handlers
        .iter()
        .find(|h| matches!(h.kind, HandlerKind::Event))
    {
        return Err(NotDerived::RawEvents(h.id.clone()));
    }
    let mut common: Option<BTreeMap<String, Constraint>> = None;
    for h in handlers {
        let mine = constraints(h);
        if mine.is_empty() {
            return Err(NotDerived::Unfiltered(h.id.clone()));
        }
        common = Some(match common {
            None => mine,
            Some(before) => {
                let mut both = BTreeMap::new();
                let mut mine = mine;
                for (key, c) in before {
                    if let Some(other) = mine.remove(&key) {
                        both.insert(key, c.or(other));
                    }
                }
                both
            }
        });
    }
    let requirements: Vec<String> = common
        .unwrap_or_default()
        .iter()
        .filter_map(|(key, c)| c.requirement(key))
        .collect();
    if requirements.is_empty() {
        return Err(NotDerived::NothingInCommon);
    }
    Ok(requirements.join(","))
}

/// Both selectors (AND: the comma of selectors), either, or none.
pub(crate) fn combine(a: Option<&str>, b: Option<&str>) -> Option<String> {
    let parts: Vec<&str> = [a, b]
        .into_iter()
        .flatten()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    (!parts.is_empty()).then(|| parts.join(","))
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters (alphanumerics, `-`, `_`, `.`, alphanumeric at both ends).
fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let dns = |s: &str| {
            !s.is_empty()
                && s.len() <= 63
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !s.starts_with('-')
                && !s.ends_with('-')
        };
        if p.is_empty() || p.len() > 253 || !p.split('.').all(dns) {
            return Err(format!(
                "the prefix {p:?} of the key {key:?} is not a DNS subdomain (lowercase alphanumerics, '-', '.')"
            ));
        }
    }
    if name.is_empty() {
        return Err(format!("the key {key:?} has no name"));
    }
    check_name(name).map_err(|e| format!("the key {key:?}: {e}"))
}

/// A label value: empty, or a name of at most 63 characters.
fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    check_name(value).map_err(|e| format!("the value {value:?}: {e}"))
}

fn check_name(s: &str) -> Result<(), String> {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if s.len() > 63 {
        Err("longer than 63 characters".into())
    } else if !s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        Err("only alphanumerics, '-', '_' and '.' are allowed".into())
    } else if !edge(s.chars().next()) || !edge(s.chars().last()) {
        Err("must start and end with an alphanumeric character".into())
    } else {
        Ok(())
    }
}

/// The requirements of a selector: split at the commas outside parentheses.
fn split_requirements(selector: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err("unbalanced parentheses".into());
        }
    }
    if depth != 0 {
        return Err("unbalanced parentheses".into());
    }
    out.push(&selector[start..]);
    Ok(out)
}

/// Checks a label selector as the API server parses it: comma-separated requirements
/// `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (v1,v2)`,
/// `key notin (v1,v2)`, `key>N`, `key<N`. The message says what is wrong and where.
///
/// ```
/// use kopf_watch::check_label_selector;
///
/// assert!(check_label_selector("app=web,tier in (front,back),!legacy").is_ok());
/// let error = check_label_selector("app=web,=x").unwrap_err();
/// assert!(error.contains("=x"), "{error}");
/// ```
pub fn check_label_selector(selector: &str) -> Result<(), String> {
    if selector.trim().is_empty() {
        return Err("it is empty".into());
    }
    for req in split_requirements(selector)? {
        check_label_requirement(req.trim()).map_err(|e| format!("{req:?}: {e}"))?;
    }
    Ok(())
}

fn check_label_requirement(req: &str) -> Result<(), String> {
    if req.is_empty() {
        return Err("an empty requirement (two commas, or a comma at an end)".into());
    }
    if let Some(key) = req.strip_prefix('!') {
        return check_key(key.trim());
    }
    for op in ["==", "!=", "="] {
        if let Some((key, value)) = req.split_once(op) {
            check_key(key.trim())?;
            return check_value(value.trim());
        }
    }
    for op in [">", "<"] {
        if let Some((key, value)) = req.split_once(op) {
            check_key(key.trim())?;
            return value
                .trim()
                .parse::<i64>()
                .map(|_| ())
                .map_err(|_| format!("{op} needs an integer, not {:?}", value.trim()));
        }
    }
    let words: Vec<&str> = req.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words[..] {
        let rest = rest.trim();
        let set = rest
            .strip_prefix("notin")
            .or_else(|| rest.strip_prefix("in"))
            .ok_or_else(|| {
                format!("expected '=', '==', '!=', 'in' or 'notin' after the key {key:?}")
            })?
            .trim();
        let values = set
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(|| format!("the values of {key:?} must be in parentheses: (v1,v2)"))?;
        check_key(key)?;
        return values.split(',').try_for_each(|v| check_value(v.trim()));
    }
    check_key(req)
}

/// Checks a field selector: comma-separated `field=value`, `field==value` or
/// `field!=value` (which fields a resource supports is the API server's to say).
///
/// ```
/// use kopf_watch::check_field_selector;
///
/// assert!(check_field_selector("metadata.name!=skip,status.phase=Running").is_ok());
/// assert!(check_field_selector("metadata.name").is_err());
/// ```
pub fn check_field_selector(selector: &str) -> Result<(), String> {
    if selector.trim().is_empty() {
        return Err("it is empty".into());
    }
    for req in selector.split(',') {
        let req = req.trim();
        let field = ["!=", "==", "="]
            .iter()
            .find_map(|op| req.split_once(op).map(|(f, _)| f.trim()))
            .ok_or_else(|| {
                format!("{req:?}: expected field=value, field==value or field!=value")
            })?;
        if field.is_empty() {
            return Err(format!("{req:?}: the field is missing"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kopf_core::causes::Reason;
    use kopf_core::handler::Cause;
    use kopf_core::handler::Options;

    fn spec(id: &str, reason: Option<Reason>, labels: &[(&str, MetaFilter)]) -> HandlerSpec {
        let noop = |_: Cause| async { Ok(None) };
        let mut o = Options::default();
        for (k, f) in labels {
            o = o.label(k, f.clone());
        }
        HandlerSpec::new(id, reason, noop).with_options(o)
    }
    fn v(s: &str) -> MetaFilter {
        MetaFilter::Value(s.into())
    }

    #[test]
    fn common_constraints_of_all_handlers() {
        let hs = [
            spec(
                "a",
                Some(Reason::Create),
                &[
                    ("app", v("web")),
                    ("tier", v("front")),
                    ("x", MetaFilter::Absent),
                ],
            ),
            spec(
                "b",
                None,
                &[
                    ("app", v("web")),
                    ("tier", v("back")),
                    ("x", MetaFilter::Absent),
                ],
            ),
            spec(
                "c",
                Some(Reason::Update),
                &[
                    ("app", v("web")),
                    ("tier", MetaFilter::Present),
                    ("x", MetaFilter::Absent),
                ],
            ),
        ];
        assert_eq!(derive(&hs), Ok("app=web,tier,!x".into()));
        assert_eq!(
            derive(&hs[..2]),
            Ok("app=web,tier in (back,front),!x".into())
        );
    }

    #[test]
    fn refused_when_unsafe_or_not_expressible() {
        let good = spec("good", None, &[("app", v("web"))]);
        let delete = spec("gone", Some(Reason::Delete), &[("app", v("web"))]);
        assert_eq!(
            derive(&[good.clone(), delete]),
            Err(NotDerived::Finalizer("gone".into()))
        );
        let unfiltered = spec("all", None, &[]);
        assert_eq!(
            derive(&[good.clone(), unfiltered]),
            Err(NotDerived::Unfiltered("all".into()))
        );
        let predicate = spec(
            "p",
            None,
            &[("app", MetaFilter::Predicate(std::sync::Arc::new(|_| true)))],
        );
        assert_eq!(
            derive(&[good.clone(), predicate]),
            Err(NotDerived::Unfiltered("p".into()))
        );
        let other_key = spec("o", None, &[("team", v("x"))]);
        assert_eq!(
            derive(&[good.clone(), other_key]),
            Err(NotDerived::NothingInCommon)
        );
        let absent = spec("ab", None, &[("app", MetaFilter::Absent)]);
        assert_eq!(
            derive(&[good.clone(), absent]),
            Err(NotDerived::NothingInCommon)
        );
        let mut event =
            HandlerSpec::event("ev", std::sync::Arc::new(|_: Cause| async { Ok(None) }));
        event.labels = vec![("app".into(), v("web"))];
        assert_eq!(
            derive(&[good.clone(), event]),
            Err(NotDerived::RawEvents("ev".into()))
        );
        let declaration = HandlerSpec::declaration("decl", 1u8);
        assert_eq!(
            derive(&[good.clone(), declaration]),
            Err(NotDerived::Unfiltered("decl".into()))
        );
        // A value no label can have is left to the client.
        let odd = spec("odd", None, &[("app", v("has space"))]);
        assert_eq!(derive(&[odd]), Err(NotDerived::Unfiltered("odd".into())));
        let timer = HandlerSpec::timer(
            "t",
            Default::default(),
            std::sync::Arc::new(|_: Cause| async { Ok(None) }),
        );
        assert_eq!(derive(&[timer]), Err(NotDerived::Finalizer("t".into())));
        assert_eq!(derive(&[]), Err(NotDerived::NoHandlers));
    }

    #[test]
    fn the_metadata_only_declaration_is_not_a_handler() {
        let good = spec("good", None, &[("app", v("web"))]);
        let meta = HandlerSpec::declaration("metadata-only", MetadataOnly);
        assert_eq!(derive(&[good, meta.clone()]), Ok("app=web".into()));
        assert_eq!(
            derive(std::slice::from_ref(&meta)),
            Err(NotDerived::NoHandlers)
        );
        assert!(metadata_only(&[meta]));
    }

    #[test]
    fn optional_delete_handlers_allow_it() {
        let noop = |_: Cause| async { Ok(None) };
        let h = HandlerSpec::new("d", Some(Reason::Delete), noop)
            .with_options(Options::default().label("app", "web").optional());
        assert_eq!(derive(&[h]), Ok("app=web".into()));
    }

    #[test]
    fn label_selector_syntax() {
        for ok in [
            "app",
            "!app",
            "app=web",
            "app==web",
            "app!=web",
            "app = web , tier",
            "example.com/app=web",
            "tier in (a,b)",
            "tier notin (a, b)",
            "replicas>3",
            "app=",
        ] {
            assert_eq!(check_label_selector(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("", "empty"),
            ("app=web,", "empty requirement"),
            ("=web", "no name"),
            ("app=we b", "only alphanumerics"),
            ("tier in a,b", "parentheses"),
            ("tier in (a,b", "unbalanced"),
            ("Example.COM/app", "DNS subdomain"),
            ("tier among (a)", "expected"),
            ("n>x", "integer"),
        ] {
            let e = check_label_selector(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn field_selector_syntax() {
        assert_eq!(check_field_selector("metadata.name=a"), Ok(()));
        assert!(check_field_selector("=a").is_err());
        assert!(check_field_selector("a=b,").is_err());
        assert!(check_field_selector("").is_err());
    }

    #[test]
    fn combining() {
        assert_eq!(combine(Some("a=1"), Some("b")), Some("a=1,b".into()));
        assert_eq!(combine(None, Some("b")), Some("b".into()));
        assert_eq!(combine(Some(" "), None), None);
    }
}
