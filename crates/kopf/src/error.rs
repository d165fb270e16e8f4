//! The errors of running an operator, and how they are put in words (one line, with their
//! causes).

use kopf_core::activities::StartupFailed;

/// Errors of running an operator. `Debug` prints the message and its causes, so that
/// `fn main() -> Result<(), kopf::Error>` ends with a readable line, not a dump.
#[derive(thiserror::Error)]
pub enum Error {
    /// No Kubernetes client could be built.
    #[error("cannot connect to Kubernetes: {0}")]
    Client(#[source] kube::Error),
    /// The kubeconfig or in-cluster configuration cannot be read.
    #[error("cannot configure the Kubernetes client: {0}")]
    Config(String),
    /// A resource could not be served.
    #[error(transparent)]
    Watch(#[from] kopf_watch::WatchError),
    /// A resource of the handlers is not served by the embedded API server of `run --fake`
    /// or `rbac`: the manifests applied to it lack its CustomResourceDefinition. (On a
    /// cluster, it is [`WatchError::UnknownResource`](kopf_watch::WatchError::UnknownResource).)
    #[error(
        "no served resource matches {}{similar}; {fix}",
        // A name in quotes; ("group", "version", "plural") as it is.
        if .selector.starts_with('(') { .selector.clone() } else { format!("{:?}", .selector) }
    )]
    MissingCrd {
        /// The selector.
        selector: String,
        /// Similar names, if any (`; similar: ...`).
        similar: String,
        /// What to do, for the command that failed (`--apply FILE`...).
        fix: String,
    },
    /// The embedded fake API server failed.
    #[cfg(feature = "testing")]
    #[error(transparent)]
    Fake(#[from] kopf_testing::FakeError),
    /// A startup handler failed for good.
    #[error(transparent)]
    Startup(#[from] StartupFailed),
    /// `--fake` was given to a binary built without the `testing` feature.
    #[error(
        "this binary has no embedded fake API server: it was built without kopf's `testing` feature (dev mode, off by default so that production binaries stay lean). Build it in dev mode: give your crate `[features] dev = [\"kopf/testing\"]` and run `cargo run --features dev -- run --fake`. Or, with this binary as it is: `kopf fake-apiserver --kubeconfig /tmp/fake.kubeconfig` in one terminal, then `KUBECONFIG=/tmp/fake.kubeconfig <this binary> run -A`"
    )]
    NoFake,
    /// The API server does not answer.
    #[error(
        "cannot reach the Kubernetes API server at {url}: {cause}; is the cluster up, and is the kubeconfig's current context the right one? (`run --fake` runs without a cluster)"
    )]
    Unreachable {
        /// The server's URL.
        url: String,
        /// The root cause, in words.
        cause: String,
        /// The error (not a `source`: the message already says what matters).
        error: kube::Error,
    },
    /// The liveness or metrics endpoint cannot serve.
    #[error("{0}")]
    Serve(String),
    /// Peering or leader election cannot run (settings that cannot work).
    #[error(transparent)]
    Peering(#[from] kopf_peering::PeeringError),
    /// The webhook server could not start.
    #[cfg(feature = "admission")]
    #[error(transparent)]
    Webhooks(#[from] kopf_admission::SetupError),
    /// `rbac --verify` found permissions missing (printed with the rules to add).
    #[error(
        "{missing} of the {total} permissions the operator needs are missing for {subject}: add the rules printed above"
    )]
    RbacMissing {
        /// Whose permissions.
        subject: String,
        /// How many checks failed.
        missing: usize,
        /// How many were checked.
        total: usize,
    },
    /// `rbac --verify` could not ask the cluster (e.g. `--as` without the permission to
    /// create SubjectAccessReviews).
    #[error("cannot check the RBAC of {subject}: {cause}")]
    RbacReview {
        /// Whose permissions.
        subject: String,
        /// What failed, in words.
        cause: String,
    },
    /// `uninstall` could not take the operator's state off some objects (each is named in
    /// its report, with why); the others were cleaned.
    #[error(
        "uninstall could not clean {failed} object(s) (listed above with why); run it again once that is fixed"
    )]
    Uninstall {
        /// How many.
        failed: usize,
    },
    /// The output of a command (rbac, fake-apiserver) cannot be written.
    #[error("cannot write the output: {0}")]
    Output(#[source] std::io::Error),
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&with_causes(self))
    }
}

/// An error's message and, after it, the causes it does not already quote.
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text = format!("{text}: {line}");
        }
        source = cause.source();
    }
    text
}

/// An error and its causes on one line (YAML errors come with a multi-line excerpt).
pub(crate) fn one_line(e: &dyn std::error::Error) -> String {
    with_causes(e)
        .lines()
        .map(str::trim)
        // Drop the excerpt lines of YAML errors (`-->`, `1 | text`, `  ^`).
        .filter(|l| {
            let gutter = l
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start();
            !l.is_empty()
                && !l.starts_with("-->")
                && !gutter.starts_with('|')
                && !gutter.starts_with('^')
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The root cause of an error (e.g. "Connection refused (os error 111)").
pub(crate) fn root_cause(e: &dyn std::error::Error) -> String {
    let mut last = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        last = cause.to_string();
        source = cause.source();
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_debug_as_readable_lines() {
        let e = Error::Config("no kubeconfig".into());
        assert_eq!(
            format!("{e:?}"),
            "cannot configure the Kubernetes client: no kubeconfig"
        );
        let fake = Error::Watch(kopf_watch::WatchError::UnknownResource {
            selector: "kex2".into(),
            hint: "; similar: kopfexamples.kopf.dev/v1".into(),
        });
        assert_eq!(
            format!("{fake:?}"),
            "no served resource matches \"kex2\"; similar: kopfexamples.kopf.dev/v1; is its CustomResourceDefinition applied? (kubectl get crd)"
        );
    }
}
