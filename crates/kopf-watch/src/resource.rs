//! A resolved resource ([`ResourceRef`]): a leaf of the crate's vocabulary.

use kube::core::ApiResource;

/// A resolved resource.
#[derive(Debug, Clone)]
pub struct ResourceRef {
    /// Group, version, kind, plural.
    pub api_resource: ApiResource,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Has a `/status` subresource (status goes to a separate PATCH).
    pub status_subresource: bool,
}
