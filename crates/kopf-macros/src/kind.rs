//! The table of the attributes: which kinds of handler there are, what comes first in each
//! attribute, and which options each takes (and why not, when it does not).

/// Which attribute is being expanded.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Create,
    Update,
    Delete,
    Resume,
    Field,
    Timer,
    Daemon,
    Index,
    Event,
    Log,
    Startup,
    Cleanup,
    Probe,
    Login,
    Validate,
    Mutate,
    Convert,
    /// `#[kopf::reconcile]` (not under `on`: a reconcile is not a handler of a cause).
    Reconcile,
}

/// What comes first in the attribute.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The resource: `"kopfexamples"`.
    Resource,
    /// The CRD's name: `"kopfexamples.kopf.dev"`.
    Crd,
    /// Nothing: activities are about the operator.
    Nothing,
}

pub(crate) const ALL: &[Kind] = &[
    Kind::Create,
    Kind::Update,
    Kind::Delete,
    Kind::Resume,
    Kind::Field,
    Kind::Timer,
    Kind::Daemon,
    Kind::Index,
    Kind::Event,
    Kind::Log,
    Kind::Startup,
    Kind::Cleanup,
    Kind::Probe,
    Kind::Login,
    Kind::Validate,
    Kind::Mutate,
    Kind::Convert,
    Kind::Reconcile,
];

/// The filters of handlers of objects.
pub(crate) const FILTERS: &[&str] = &["id", "field", "labels", "annotations", "when", "value"];
/// The owner filters of handlers of objects (not of webhooks: an admission request's
/// object may not be stored yet).
pub(crate) const OWNERS: &[&str] = &["owner", "controller_owner", "owner_when"];
/// Retrying and timing of handlers with retries.
pub(crate) const RETRYING: &[&str] = &["retries", "timeout", "backoff", "errors"];

/// The options of each attribute.
pub(crate) fn options_of(kind: Kind) -> Vec<&'static str> {
    let mut v: Vec<&str> = Vec::new();
    match kind {
        Kind::Create | Kind::Update | Kind::Delete | Kind::Resume | Kind::Field => {
            v.extend(FILTERS);
            v.extend(OWNERS);
            v.extend(RETRYING);
            match kind {
                Kind::Update | Kind::Field => v.extend(["old", "new"]),
                Kind::Delete => v.push("optional"),
                Kind::Resume => v.push("deleted"),
                _ => {}
            }
        }
        Kind::Timer => {
            v.extend(FILTERS);
            v.extend(OWNERS);
            v.extend(RETRYING);
            v.extend([
                "interval",
                "initial_delay",
                "idle",
                "sharp",
                "cancellation_timeout",
                "reads",
            ]);
        }
        Kind::Daemon => {
            v.extend(FILTERS);
            v.extend(OWNERS);
            v.extend(RETRYING);
            v.extend([
                "initial_delay",
                "cancellation_backoff",
                "cancellation_timeout",
                "cancellation_polling",
                "reads",
            ]);
        }
        Kind::Index => {
            v.extend(FILTERS);
            v.extend(OWNERS);
            v.push("errors");
        }
        Kind::Event => {
            v.extend(FILTERS);
            v.extend(OWNERS);
        }
        Kind::Log => {
            v.extend(["regex", "containers", "from_start", "idle_timeout"]);
            v.extend(["id", "labels", "annotations", "when"]);
            v.extend(OWNERS);
        }
        Kind::Startup => {
            v.push("id");
            v.extend(RETRYING);
        }
        Kind::Cleanup | Kind::Probe => v.extend(["id", "timeout"]),
        Kind::Validate | Kind::Mutate => {
            v.extend(FILTERS);
            v.extend([
                "operations",
                "operation",
                "subresource",
                "persistent",
                "side_effects",
                "ignore_failures",
            ]);
        }
        Kind::Login | Kind::Convert => {}
        Kind::Reconcile => v.extend([
            "id",
            "owns",
            "watches",
            "cleanup",
            "debounce",
            "concurrency",
            "timeout",
            "backoff",
        ]),
    }
    v
}

/// Why an attribute does not take an option that others take, when there is more to say
/// than which attributes take it.
pub(crate) fn why_not(kind: Kind, key: &str) -> Option<&'static str> {
    let retrying = RETRYING.contains(&key);
    match kind {
        Kind::Validate | Kind::Mutate if retrying => {
            Some("admission handlers run once per request, with no retries")
        }
        Kind::Index if retrying => {
            Some("index handlers are called once per event, with no retries or timeouts")
        }
        Kind::Event if retrying => Some(
            "raw event handlers are called once per event, with no retries (their errors are logged and ignored)",
        ),
        Kind::Cleanup if retrying => {
            Some("cleanup handlers run once when the operator exits (their errors are logged)")
        }
        Kind::Probe if retrying => {
            Some("probe handlers run once per probe (an error is reported as the probe's result)")
        }
        Kind::Startup | Kind::Cleanup | Kind::Probe
            if FILTERS.contains(&key) || OWNERS.contains(&key) =>
        {
            Some("activities are about the operator, not objects")
        }
        Kind::Daemon if matches!(key, "interval" | "idle" | "sharp") => Some(
            "a daemon is called once and runs for as long as it likes; for periodic calls, use #[kopf::on::timer]",
        ),
        Kind::Login => Some(
            "a login handler has no options: the operator calls it to connect, and again after 401 Unauthorized",
        ),
        Kind::Convert => Some(
            "a converter takes only the CRD's name: #[kopf::on::convert(\"kopfexamples.kopf.dev\")]",
        ),
        Kind::Reconcile if matches!(key, "retries" | "errors") => Some(
            "a failed reconcile is retried after its `backoff` until it succeeds (a HandlerError::Permanent waits for the next change)",
        ),
        Kind::Reconcile
            if FILTERS.contains(&key) || OWNERS.contains(&key) || matches!(key, "old" | "new") =>
        {
            Some(
                "a reconcile runs for every object of its resource, whatever changed: look at the object in the function",
            )
        }
        Kind::Reconcile if matches!(key, "interval" | "idle" | "initial_delay") => {
            Some("to be called again later, return `Action::requeue(duration)`")
        }
        _ => None,
    }
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Create => "create",
            Kind::Update => "update",
            Kind::Delete => "delete",
            Kind::Resume => "resume",
            Kind::Field => "field",
            Kind::Timer => "timer",
            Kind::Daemon => "daemon",
            Kind::Index => "index",
            Kind::Event => "event",
            Kind::Log => "log",
            Kind::Startup => "startup",
            Kind::Cleanup => "cleanup",
            Kind::Probe => "probe",
            Kind::Login => "login",
            Kind::Validate => "validate",
            Kind::Mutate => "mutate",
            Kind::Convert => "convert",
            Kind::Reconcile => "reconcile",
        }
    }

    pub(crate) fn attr(self) -> String {
        match self {
            Kind::Reconcile => "#[kopf::reconcile]".to_string(),
            _ => format!("#[kopf::on::{}]", self.name()),
        }
    }

    pub(crate) fn target(self) -> Target {
        match self {
            Kind::Startup | Kind::Cleanup | Kind::Probe | Kind::Login => Target::Nothing,
            Kind::Convert => Target::Crd,
            _ => Target::Resource,
        }
    }

    /// An example of the attribute with its first option, for messages.
    pub(crate) fn example(self) -> String {
        let extra = match self {
            Kind::Field => ", field = \"spec.x\"",
            Kind::Log => ", regex = \"accuracy=(\\\\d+)\"",
            Kind::Timer => ", interval = 60",
            _ => "",
        };
        match self {
            Kind::Reconcile => "#[kopf::reconcile(\"kopfexamples\")]".to_string(),
            _ => format!("#[kopf::on::{}(\"kopfexamples\"{extra})]", self.name()),
        }
    }

    /// Its options, as a message lists them.
    pub(crate) fn option_list(self) -> String {
        let names: Vec<String> = options_of(self)
            .iter()
            .map(|o| match *o {
                "labels" | "annotations" | "watches" => format!("`{o}(...)`"),
                _ => format!("`{o}`"),
            })
            .collect();
        if names.is_empty() {
            "no options".to_string()
        } else {
            names.join(", ")
        }
    }
}

/// Every option of any attribute.
pub(crate) fn all_options() -> Vec<&'static str> {
    let mut all: Vec<&str> = ALL.iter().flat_map(|k| options_of(*k)).collect();
    all.sort_unstable();
    all.dedup();
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_is_spelled_once_per_attribute() {
        for kind in ALL {
            let mut options = options_of(*kind);
            let n = options.len();
            options.sort_unstable();
            options.dedup();
            assert_eq!(options.len(), n, "{kind:?}");
        }
    }
}
