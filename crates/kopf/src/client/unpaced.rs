//! The requests that bypass the rate limit: Leases and peering objects are never held back
//! behind the operator's own work (a renewal that waits in the queue can cost the lead).

/// Whether a request to `path` goes without the rate limit.
pub(super) fn unpaced(path: &str) -> bool {
    path.starts_with("/apis/coordination.k8s.io/")
        || path.starts_with("/apis/kopf.dev/v1/clusterkopfpeerings")
        || (path.starts_with("/apis/kopf.dev/v1/namespaces/") && path.contains("/kopfpeerings/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_and_peering_are_not_paced() {
        assert!(unpaced(
            "/apis/coordination.k8s.io/v1/namespaces/ops/leases/op-leader"
        ));
        assert!(unpaced("/apis/kopf.dev/v1/clusterkopfpeerings/default"));
        assert!(unpaced(
            "/apis/kopf.dev/v1/namespaces/ops/kopfpeerings/default"
        ));
        assert!(!unpaced("/apis/kopf.dev/v1/namespaces/ops/kopfexamples/x"));
        assert!(!unpaced("/api/v1/namespaces/ops/pods"));
    }
}
