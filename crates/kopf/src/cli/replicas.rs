//! The options of `run` for more than one replica: peering, leader election, sharding,
//! applied to the settings the operator's code gave.

use super::RunArgs;

impl RunArgs {
    /// The operator's peering settings with the options of the command line applied:
    /// `--standalone`, `--peering NAME` (mandatory), `--priority`, `--dev` (priority 666
    /// unless `--priority` says otherwise), and the scope: the cluster-wide
    /// `ClusterKopfPeering` for all namespaces, the `KopfPeering` of the namespace for `-n`
    /// with one exact namespace.
    pub fn peering(
        &self,
        mut settings: kopf_peering::PeeringSettings,
    ) -> kopf_peering::PeeringSettings {
        use kopf_peering::PeeringMode;
        if self.standalone {
            settings.mode = PeeringMode::Standalone;
        }
        if let Some(name) = &self.peering {
            settings.mode = PeeringMode::Mandatory;
            settings.name = name.clone();
        }
        match (self.priority, self.dev) {
            (Some(priority), _) => settings.priority = priority,
            (None, true) => settings.priority = 666,
            (None, false) => {}
        }
        let patterns = self.namespace_patterns();
        let exact = |p: &String| !p.contains(['*', '?', '!', ',']);
        settings.namespace = match patterns.as_slice() {
            [one] if exact(one) => Some(one.clone()),
            _ => None,
        };
        settings
    }

    /// The operator's leader election (`given`, from
    /// [`Operator::leader_election`](crate::Operator::leader_election)) with the options of
    /// the command line applied: `--leader-election` turns it on (the lease `LEASE`, else
    /// the given one's, else `<operator>-leader`), and the namespace and timings override
    /// the given ones.
    pub fn leader_election(
        &self,
        operator: &str,
        given: Option<kopf_peering::LeaderElection>,
    ) -> Option<kopf_peering::LeaderElection> {
        let Some(name) = self.leader_election.as_ref() else {
            return given;
        };
        let name = if name.is_empty() {
            given
                .as_ref()
                .map(|g| g.name.clone())
                .unwrap_or_else(|| format!("{operator}-leader"))
        } else {
            name.clone()
        };
        let mut election = given.unwrap_or_else(|| kopf_peering::LeaderElection::new(&name));
        election.name = name;
        if let Some(ns) = &self.leader_election_namespace {
            election.namespace = Some(ns.clone());
        }
        if let Some(d) = self.lease_duration {
            election.lease_duration = d;
        }
        if let Some(d) = self.renew_deadline {
            election.renew_deadline = d;
        }
        if let Some(d) = self.retry_period {
            election.retry_period = d;
        }
        if self.no_release_on_cancel {
            election.release_on_cancel = false;
        }
        Some(election)
    }

    /// The operator's sharding (`given`, from [`Operator::sharding`](crate::Operator::sharding))
    /// with the options of the command line applied: `--shards N` turns it on (the group
    /// `<operator>-shards` unless given), and the namespace and lease timings override the
    /// given ones.
    pub fn sharding(
        &self,
        operator: &str,
        given: Option<kopf_peering::Sharding>,
    ) -> Option<kopf_peering::Sharding> {
        let mut sharding = match (self.shards, given) {
            (None, given) => given?,
            (Some(count), Some(mut given)) => {
                given.count = count;
                given
            }
            (Some(count), None) => kopf_peering::Sharding::new(format!("{operator}-shards"), count),
        };
        if let Some(ns) = &self.leader_election_namespace {
            sharding.namespace = Some(ns.clone());
        }
        if let Some(d) = self.lease_duration {
            sharding.lease_duration = d;
        }
        if let Some(d) = self.renew_deadline {
            sharding.renew_deadline = d;
        }
        if let Some(d) = self.retry_period {
            sharding.retry_period = d;
        }
        Some(sharding)
    }
}
