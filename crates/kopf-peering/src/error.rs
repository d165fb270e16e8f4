//! The errors of peering.

/// An entry in a peering object that cannot be read as a peer.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The entry of `identity` is not a peer's entry.
    #[error("the peering entry of {identity:?} cannot be read: {why}")]
    Entry {
        /// The entry's key.
        identity: String,
        /// What is wrong with it.
        why: String,
    },
}

/// Why peering stopped.
#[derive(Debug, thiserror::Error)]
pub enum PeeringError {
    /// The API server refused or failed a request that peering cannot do without.
    #[error("peering {name:?}: {action} failed: {source}")]
    Api {
        /// The peering object's name.
        name: String,
        /// What was being done.
        action: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Settings that cannot work.
    #[error("{what}: {why}")]
    Settings {
        /// Which settings.
        what: &'static str,
        /// What is wrong, and what to do.
        why: String,
    },
}
