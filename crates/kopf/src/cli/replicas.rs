//! The options of `run` for more than one replica: peering, leader election, sharding,
//! applied to the settings the operator's code gave.

use std::time::Duration;

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
        let mut election = match (self.leader_election.as_deref(), given) {
            (None, given) => given?,
            (Some(""), Some(given)) => given,
            (Some(""), None) => kopf_peering::LeaderElection::new(format!("{operator}-leader")),
            (Some(name), Some(mut given)) => {
                given.name = name.to_string();
                given
            }
            (Some(name), None) => kopf_peering::LeaderElection::new(name),
        };
        self.lease_options(
            &mut election.namespace,
            [
                &mut election.lease_duration,
                &mut election.renew_deadline,
                &mut election.retry_period,
            ],
        );
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
        self.lease_options(
            &mut sharding.namespace,
            [
                &mut sharding.lease_duration,
                &mut sharding.renew_deadline,
                &mut sharding.retry_period,
            ],
        );
        Some(sharding)
    }

    /// The Lease options given on the command line, over the settings' own: the namespace,
    /// and the lease duration, renew deadline and retry period (in that order).
    fn lease_options(&self, namespace: &mut Option<String>, timings: [&mut Duration; 3]) {
        if let Some(ns) = &self.leader_election_namespace {
            *namespace = Some(ns.clone());
        }
        let given = [self.lease_duration, self.renew_deadline, self.retry_period];
        for (timing, given) in timings.into_iter().zip(given) {
            if let Some(d) = given {
                *timing = d;
            }
        }
    }
}
