//! Namespace patterns of `-n`: exact names, globs with `*` and `?`, `!` negations,
//! comma-separated within one pattern; an object is served when any pattern matches.

/// One `-n` pattern: comma-separated inclusions and `!`-exclusions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespacePattern {
    includes: Vec<String>,
    excludes: Vec<String>,
}

/// Whether `name` matches `pattern` (`*`: any run of characters, `?`: one character).
///
/// One pass over the name that remembers only the last `*` and where it started
/// matching: on a mismatch the last `*` takes one more character. Earlier stars never
/// need to be revisited (the last one can absorb whatever they would have), so the work
/// is at most pattern × name steps, with no exponential backtracking on `*a*a*a…`.
fn glob(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    // (the index of the last `*` in the pattern, the name index it is matched up to)
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == '?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    star = Some((sp, sn + 1));
                    pi = sp + 1;
                    ni = sn + 1;
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

impl NamespacePattern {
    /// Parses `a,b*,!c`.
    pub fn parse(pattern: &str) -> Self {
        let mut includes = Vec::new();
        let mut excludes = Vec::new();
        for part in pattern.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.strip_prefix('!') {
                Some(ex) => excludes.push(ex.to_string()),
                None => includes.push(part.to_string()),
            }
        }
        NamespacePattern { includes, excludes }
    }

    /// Whether a namespace matches: any inclusion (or none given) and no exclusion.
    pub fn matches(&self, namespace: &str) -> bool {
        (self.includes.is_empty() || self.includes.iter().any(|i| glob(i, namespace)))
            && !self.excludes.iter().any(|e| glob(e, namespace))
    }

    /// The names and globs it includes (none: every namespace).
    pub fn includes(&self) -> &[String] {
        &self.includes
    }

    /// The names and globs it excludes (given with `!`).
    pub fn excludes(&self) -> &[String] {
        &self.excludes
    }

    /// Its parts as given: the inclusions, then the exclusions with their `!`.
    fn parts(&self) -> impl Iterator<Item = String> + '_ {
        let excludes = self.excludes.iter().map(|e| format!("!{e}"));
        self.includes.iter().cloned().chain(excludes)
    }

    /// The single exact namespace this pattern names, if it is one.
    pub fn exact(&self) -> Option<&str> {
        match (self.includes.as_slice(), self.excludes.is_empty()) {
            ([one], true) if !one.contains(['*', '?']) => Some(one),
            _ => None,
        }
    }
}

/// As given to `-n`, normalised: `a,b*,!c`.
impl std::fmt::Display for NamespacePattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.parts().collect::<Vec<_>>().join(","))
    }
}

/// All `-n` patterns of an operator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceSelector {
    patterns: Vec<NamespacePattern>,
}

impl NamespaceSelector {
    /// From `-n` values.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Self {
        NamespaceSelector {
            patterns: patterns
                .iter()
                .map(|p| NamespacePattern::parse(p.as_ref()))
                .collect(),
        }
    }

    /// Whether an object's namespace is served (cluster-scoped objects always are).
    pub fn matches(&self, namespace: Option<&str>) -> bool {
        match namespace {
            None => true,
            Some(ns) => self.patterns.is_empty() || self.patterns.iter().any(|p| p.matches(ns)),
        }
    }

    /// The patterns, in the order given.
    pub fn patterns(&self) -> &[NamespacePattern] {
        &self.patterns
    }

    /// The exact namespaces, when every pattern is one exact name (one watch each);
    /// None when globs or negations need a cluster-wide watch with filtering.
    pub fn exact(&self) -> Option<Vec<String>> {
        self.patterns
            .iter()
            .map(|p| p.exact().map(str::to_string))
            .collect()
    }
}

/// Every pattern's parts, comma-separated: `team-*,!team-legacy,ops` (empty: no pattern,
/// every namespace).
impl std::fmt::Display for NamespaceSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.patterns.iter().flat_map(|p| p.parts()).collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_negations_and_exact_names() {
        let s = NamespaceSelector::new(&["team-*,!team-legacy", "ops"]);
        assert!(s.matches(Some("team-a")));
        assert!(!s.matches(Some("team-legacy")));
        assert!(s.matches(Some("ops")));
        assert!(!s.matches(Some("default")));
        assert!(s.matches(None), "cluster-scoped objects are served");
        assert_eq!(s.exact(), None);
        let only_not = NamespaceSelector::new(&["!kube-*"]);
        assert!(only_not.matches(Some("default")) && !only_not.matches(Some("kube-system")));
        assert_eq!(
            NamespaceSelector::new(&["a", "b"]).exact(),
            Some(vec!["a".into(), "b".into()])
        );
        assert!(glob("t?am-*", "team-x") && !glob("t?am", "team-x"));
    }

    #[test]
    fn patterns_are_shown_as_given() {
        let s = NamespaceSelector::new(&["team-*, !team-legacy", "", "ops"]);
        assert_eq!(s.to_string(), "team-*,!team-legacy,ops");
        assert_eq!(s.patterns().len(), 3);
        assert_eq!(s.patterns()[0].includes(), ["team-*"]);
        assert_eq!(s.patterns()[0].excludes(), ["team-legacy"]);
        assert_eq!(s.patterns()[0].to_string(), "team-*,!team-legacy");
        assert_eq!(NamespaceSelector::default().to_string(), "");
    }

    #[test]
    fn globs_match_like_shell_wildcards() {
        for (pattern, name, expected) in [
            ("", "", true),
            ("", "a", false),
            ("*", "", true),
            ("*", "anything", true),
            ("**", "ab", true),
            ("a*", "a", true),
            ("*a", "ba", true),
            ("*a", "ab", false),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbYcZ", false),
            ("a*b", "abab", true),
            ("*ab", "aab", true),
            ("?", "", false),
            ("??", "ab", true),
            ("a?c*", "abcdef", true),
            ("team-*-prod", "team-x-prod", true),
            ("team-*-prod", "team-x-prod-2", false),
            ("*-*-*", "a-b", false),
        ] {
            assert_eq!(glob(pattern, name), expected, "{pattern:?} ~ {name:?}");
        }
    }

    /// `*a*a*a…` against a name of `a`s with no match at the end: a backtracking matcher
    /// tries every way to split the name among the stars (exponential in their number);
    /// this one does at most pattern × name steps, so the test completes at once.
    #[test]
    fn a_pathological_pattern_completes() {
        let pattern = format!("{}b", "*a".repeat(30));
        let name = "a".repeat(63);
        assert!(!glob(&pattern, &name));
        let selector = NamespaceSelector::new(&[pattern.as_str()]);
        assert!(!selector.matches(Some(&name)));
        assert!(glob(&"*a".repeat(30), &name));
    }
}
