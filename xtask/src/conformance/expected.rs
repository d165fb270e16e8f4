//! The kube-rs 5.0 cluster tests expected to fail against the fake API server, each with why.
//!
//! The list is kept true both ways: `cargo xtask conformance` fails when a test not listed
//! here fails, and when a listed test passes (remove its row then), or names a test that
//! the crates no longer have.

/// Why a cluster test cannot pass against the fake API server (yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// It needs a kubelet: a container that really runs (exec, attach, logs, a pod that
    /// becomes Running, the kubelet's own port). The fake API server has none, by design.
    Kubelet(&'static str),
    /// It needs a part of the fake API server that another P14 branch builds (named in the
    /// text); the row goes when that branch is merged.
    Pending(&'static str),
}

impl Why {
    /// The reason, as the report prints it.
    pub fn text(self) -> String {
        match self {
            Why::Kubelet(t) => format!("needs a kubelet: {t}"),
            Why::Pending(t) => t.to_string(),
        }
    }
}

/// One expected failure: the crate (as in `kube-client-5.0.0`), the test's path in the
/// crate's unit tests, and why.
pub struct Expected {
    /// The crate's name, without the version.
    pub krate: &'static str,
    /// The test's path, as `--list` prints it.
    pub test: &'static str,
    /// Why it fails.
    pub why: Why,
}

const fn row(krate: &'static str, test: &'static str, why: Why) -> Expected {
    Expected { krate, test, why }
}

/// The expected failures.
pub const EXPECTED: &[Expected] = &[
    row(
        "kube",
        "test::pod_can_await_conditions",
        Why::Kubelet(
            "waits 15 s for the busybox pod to be Running (the optional pod simulator of \
             P14 branch p14-podsim could make it Running)",
        ),
    ),
    row(
        "kube-client",
        "test::pod_can_exec_and_write_to_stdin",
        Why::Kubelet("waits for the busybox pod to be Running, then execs `sh` in it"),
    ),
    row(
        "kube-client",
        "test::can_get_pod_logs_and_evict",
        Why::Kubelet(
            "reads the logs the container's `echo` wrote (then evicts: pods/eviction, \
             P14 branch p14-bootstrap)",
        ),
    ),
    row(
        "kube-client",
        "test::pod_can_exec_and_write_to_stdin_from_node_proxy",
        Why::Kubelet("connects to the kubelet's own port (127.0.0.1:10250, kubelet-debug)"),
    ),
    row(
        "kube-client",
        "api::util::test::create_token_request",
        Why::Pending(
            "needs serviceaccounts/{name}/token (TokenRequest) and TokenReview \
             (P14 branch p14-bootstrap)",
        ),
    ),
    row(
        "kube-client",
        "test::can_operate_on_ephemeral_containers",
        Why::Pending("needs pods/{name}/ephemeralcontainers (P14 branch p14-bootstrap)"),
    ),
    row(
        "kube-client",
        "test::csr_can_be_approved",
        Why::Pending(
            "needs certificates.k8s.io/v1 CertificateSigningRequests with /approval \
             (P14 branch p14-bootstrap)",
        ),
    ),
    row(
        "kube-client",
        "test::group_discovery_oneshot",
        Why::Pending(
            "needs the apiregistration.k8s.io group (APIServices) (P14 branch p14-bootstrap)",
        ),
    ),
    row(
        "kube-client",
        "test::can_operate_on_pod_metadata",
        Why::Pending(
            "needs a PATCH answered as PartialObjectMetadata (as=PartialObjectMetadata \
             negotiation, P14 branch p14-negotiation)",
        ),
    ),
    row(
        "kube-runtime",
        "events::test::event_recorder_attaches_events",
        Why::Pending("needs the Service default/kubernetes (P14 branch p14-bootstrap)"),
    ),
    row(
        "kube-runtime",
        "events::test::event_recorder_attaches_events_without_namespace",
        Why::Pending("needs componentstatuses (`scheduler`) (P14 branch p14-bootstrap)"),
    ),
];
