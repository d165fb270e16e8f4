//! The kube-rs 5.0 cluster tests expected to fail against the fake API server, each with why.
//!
//! The list is kept true both ways: `cargo xtask conformance` fails when a test not listed
//! here fails, and when a listed test passes (remove its row then), or names a test that
//! the crates no longer have.

/// Why a cluster test cannot pass against the fake API server (yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// It needs a kubelet: a container that really runs (exec, attach, its logs, the
    /// kubelet's own port). The fake API server's pod simulator makes Pods Running, but
    /// runs no container, by design.
    Kubelet(&'static str),
}

impl Why {
    /// The reason, as the report prints it.
    pub fn text(self) -> String {
        match self {
            Why::Kubelet(t) => format!("needs a kubelet: {t}"),
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
        "kube-client",
        "test::pod_can_exec_and_write_to_stdin",
        Why::Kubelet(
            "execs `sh` in the busybox container and writes to its stdin (the pod simulator \
             makes the Pod Running, but no container runs)",
        ),
    ),
    row(
        "kube-client",
        "test::can_get_pod_logs_and_evict",
        Why::Kubelet(
            "reads the lines the container's `for i in $(seq 1 5); do echo ...` loop wrote \
             (simulated containers print only scripts of `echo` and `sleep`; the eviction \
             step passes)",
        ),
    ),
    row(
        "kube-client",
        "test::pod_can_exec_and_write_to_stdin_from_node_proxy",
        Why::Kubelet("connects to the kubelet's own port (127.0.0.1:10250, kubelet-debug)"),
    ),
];
