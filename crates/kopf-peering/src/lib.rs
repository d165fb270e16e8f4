//! # kopf-peering
//!
//! Several operators on one cluster, safely: Kopf's peering, compatible with Python Kopf on
//! the wire. Operators that share a peering object (`ClusterKopfPeering` or `KopfPeering`,
//! named `default` unless told) write keep-alives into its status, remove the entries of
//! dead peers, and pause while a live peer has a higher priority (or, by Kopf's rule, the same
//! one). A kopf-rs operator and a Python Kopf operator in the same peering pause for each
//! other by priority.
//!
//! The pause is the operator's [`Gate`](kopf_core::gate::Gate): [`Peering`] controls it; the
//! engine observes it.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), kopf_peering::PeeringError> {
//! use kopf_core::gate::Gate;
//! use kopf_peering::{Peering, PeeringSettings};
//!
//! let (control, gate) = Gate::channel();
//! let settings = PeeringSettings::default().priority(100);
//! tokio::spawn(Peering::new(client, settings, control).run(std::future::pending()));
//! // ... the operator's engine runs with `gate`.
//! # Ok(()) }
//! ```
//!
//! The peering resources are in this crate's `peering.yaml` ([`PEERING_YAML`]): apply them
//! (with their `default` objects) to the cluster to turn peering on in the default, automatic
//! mode.

mod commands;
mod election;
mod error;
mod peer;
mod peering;
mod settings;
mod sharding;
mod verdict;

pub use commands::{Listed, freeze, peers, resume};
pub use election::{LeaderElection, LeaderElector, Leadership, election_identity};
pub use error::{PeerError, PeeringError};
pub use peer::{DEFAULT_LIFETIME, EntryPatch, Peer, WireEntry, entry_patch, isoformat, parse_time};
pub use peering::{GROUP_VERSION, Peering, resource};
pub use settings::{PeeringMode, PeeringSettings, SamePriority, identity, manual_identity};
pub use sharding::{ShardCoordinator, Sharding};
pub use verdict::{Decision, Liveness, Verdict, decide};

/// The peering resources (Kopf's CRDs `clusterkopfpeerings.kopf.dev` and
/// `kopfpeerings.kopf.dev`) and their `default` objects (cluster-wide, and in the namespace
/// `default`), as YAML.
pub const PEERING_YAML: &str = include_str!("../peering.yaml");
