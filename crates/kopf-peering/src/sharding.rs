//! Sharding across replicas with one Lease per hash range ([`ShardCoordinator::run`]). The
//! uid hash space is cut into `count` ranges ([`kopf_core::shards`]); each range is a Lease
//! `<group>-<count>-<i>` held by at most one replica at a time, by the rules of leader
//! election (observation-based expiry, every write a PUT with the resourceVersion read).
//! Each replica also keeps a member Lease `<group>-member-<hash>` alive, so that all know
//! how many replicas there are; each holds at most its fair share, ⌈count ÷ replicas⌉.
//!
//! Requests per retry period and replica: one PUT per range it holds (renewed from its own
//! last write, before anything else), one LIST of the group's Leases (by label), one PUT of
//! its member Lease; and a PUT per range it takes or gives up. A round that outlasts the
//! renew deadline of a held range is cut short, and the range dropped.
//!
//! Hand-over: a replica takes a range only when its Lease is free or expired, and serves it
//! only once it holds it. A replica that gives a range up (a new replica joined) first takes
//! it out of its scope, waits until its engines have stopped processing the range's objects
//! (their daemons and timers stopped), and only then releases the Lease. A replica that
//! cannot renew its ranges within the renew deadline drops them from its scope before
//! another can take them (after the lease duration). A replica that dies holds its ranges
//! until they expire; then others take them and continue each object from its progress as
//! the dead replica left it.
//!
//! Resharding fence: a replica configured with another count does not take any range while a
//! live range Lease of the group has a different count.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use kopf_core::gate::GateControl;
use kopf_core::shards::ScopeControl;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

use crate::election::{
    Record, check_timings, election_identity, held_spec, jittered, lease_namespace, lease_resource,
    released_spec,
};
use crate::error::PeeringError;

const GROUP_LABEL: &str = "kopf.dev/shard-group";
const COUNT_LABEL: &str = "kopf.dev/shard-count";
const ROLE_LABEL: &str = "kopf.dev/shard-role";

/// The settings of sharding: how many ranges, the Leases' group name and namespace, this
/// replica's identity, and the lease timings (leader election's: 15 s, 10 s, 2 s).
///
/// ```
/// use kopf_peering::Sharding;
///
/// let sharding = Sharding::new("my-operator-shards", 4).namespace("operators");
/// assert!(sharding.validate().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sharding {
    /// How many ranges the objects are split into.
    pub count: u32,
    /// The prefix of the Leases' names, and their `kopf.dev/shard-group` label.
    pub group: String,
    /// The Leases' namespace (`None`: `$POD_NAMESPACE`, else the client's default).
    pub namespace: Option<String>,
    /// This replica's identity (unique per process).
    pub identity: String,
    /// How long a lease holds without renewal (as observed by the others).
    pub lease_duration: Duration,
    /// How long a replica keeps trying to renew before it gives its ranges up.
    pub renew_deadline: Duration,
    /// The time between rounds.
    pub retry_period: Duration,
    /// At most this many ranges per replica (`None`: the fair share only).
    pub max_per_replica: Option<u32>,
}

impl Sharding {
    /// `count` ranges in the group `group`, with leader election's timings.
    pub fn new(group: impl Into<String>, count: u32) -> Self {
        Sharding {
            count,
            group: group.into(),
            namespace: None,
            identity: election_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            max_per_replica: None,
        }
    }

    /// The Leases' namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// This replica's identity.
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// The lease duration, renew deadline and retry period.
    pub fn timings(mut self, lease: Duration, renew: Duration, retry: Duration) -> Self {
        self.lease_duration = lease;
        self.renew_deadline = renew;
        self.retry_period = retry;
        self
    }

    /// At most this many ranges per replica.
    pub fn max_per_replica(mut self, max: u32) -> Self {
        self.max_per_replica = Some(max);
        self
    }

    /// Checks the count (1 to 1024), the names and the timings.
    pub fn validate(&self) -> Result<(), PeeringError> {
        let bad = |why: String| {
            Err(PeeringError::Settings {
                what: "sharding",
                why,
            })
        };
        if !(1..=1024).contains(&self.count) {
            return bad(format!(
                "the number of shards must be from 1 to 1024, not {}",
                self.count
            ));
        }
        if self.group.is_empty() || self.identity.is_empty() {
            return bad("the group and the identity must not be empty".into());
        }
        check_timings(self.lease_duration, self.renew_deadline, self.retry_period).or_else(bad)
    }

    fn range_name(&self, index: u32) -> String {
        format!("{}-{}-{index}", self.group, self.count)
    }

    fn member_name(&self) -> String {
        let hash = kopf_core::shards::fnv1a64(self.identity.as_bytes());
        format!("{}-member-{:08x}", self.group, hash as u32)
    }
}

/// A range Lease this replica holds.
struct Held {
    /// The Lease as last written.
    lease: DynamicObject,
    /// When it was last renewed.
    renewed: Instant,
    /// Given up at this scope epoch: released once the engines have adopted it.
    leaving: Option<u64>,
}

/// One replica's side of sharding: it takes, renews and gives up range Leases, and sets the
/// engines' [`ScopeControl`] (what they serve) and the operator's gate (paused while it
/// serves no range).
pub struct ShardCoordinator {
    api: Api<DynamicObject>,
    place: String,
    settings: Sharding,
    scope: ScopeControl,
    gate: GateControl,
    /// Per Lease name: its record as last seen, and when this process saw it change.
    observed: HashMap<String, (Record, Instant)>,
    held: BTreeMap<u32, Held>,
    member: Option<DynamicObject>,
    /// Rounds so far (ranges are taken from the second one: peers starting together see
    /// each other first).
    rounds: u64,
    fenced_said: bool,
}

impl ShardCoordinator {
    /// A coordinator for these settings (validated). `scope` must have been made with the
    /// same count.
    pub fn new(
        client: kube::Client,
        settings: Sharding,
        scope: ScopeControl,
        gate: GateControl,
    ) -> Result<Self, PeeringError> {
        settings.validate()?;
        let namespace = lease_namespace(settings.namespace.as_deref(), &client);
        let api = Api::namespaced_with(client, &namespace, &lease_resource());
        let place = format!("{namespace}/{}", settings.group);
        Ok(ShardCoordinator {
            api,
            place,
            settings,
            scope,
            gate,
            observed: HashMap::new(),
            held: BTreeMap::new(),
            member: None,
            rounds: 0,
            fenced_said: false,
        })
    }

    /// Takes, renews and gives up ranges until `stop` completes (stop it after the engines
    /// have drained), then releases every Lease it holds.
    pub async fn run(mut self, stop: impl Future<Output = ()>) -> Result<(), PeeringError> {
        let mut stop = std::pin::pin!(stop);
        self.gate.pause(format!(
            "sharding: no shard of {} held yet (group {})",
            self.settings.count, self.place
        ));
        loop {
            // A round that outlasts the renew deadline of a held range (a slow API server)
            // is cut short: the range is dropped from the scope in time, before another
            // replica can take it.
            match self.renew_due() {
                Some(due) => {
                    if tokio::time::timeout_at(due, self.round()).await.is_err() {
                        tracing::warn!(group = %self.place, "The shard leases of {} could not be renewed in time (the API server is slow to answer).", self.place);
                    }
                }
                None => self.round().await,
            }
            self.drop_overdue();
            tokio::select! {
                _ = &mut stop => break,
                _ = kopf_core::clock::sleep(jittered(self.settings.retry_period), "the shards' lease renewal") => {}
            }
        }
        self.gate.pause("stopping");
        self.scope.set(BTreeSet::new());
        let held: Vec<u32> = self.held.keys().copied().collect();
        for index in held {
            self.release(index).await;
        }
        if let Some(member) = self.member.take() {
            let _ = self.write_released(member).await;
        }
        Ok(())
    }

    /// One round: read the group, keep this replica's Leases, give up or take ranges.
    async fn round(&mut self) {
        self.rounds += 1;
        // The held ranges first, from this replica's own last writes: no read before a
        // renewal while nobody else wrote.
        let renewed = self.renew_own().await;
        let group = format!("{GROUP_LABEL}={}", self.settings.group);
        let leases = match self.api.list(&ListParams::default().labels(&group)).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::warn!(group = %self.place, "Cannot read the shard leases of {}: {}", self.place, kopf_core::text::for_log(&e));
                self.drop_overdue();
                return;
            }
        };
        let now = Instant::now();
        let mut by_name: HashMap<String, DynamicObject> = HashMap::new();
        for lease in leases {
            let name = lease.metadata.name.clone().unwrap_or_default();
            let record = Record::read(&lease);
            let changed = self
                .observed
                .get(&name)
                .is_none_or(|(seen, _)| seen.raw != record.raw);
            if changed {
                self.observed.insert(name.clone(), (record, now));
            }
            by_name.insert(name, lease);
        }
        self.keep_member(by_name.get(&self.settings.member_name()).cloned())
            .await;
        self.renew(&by_name, &renewed).await;
        self.drop_overdue();
        self.release_adopted().await;
        let live = self.live_members(&by_name);
        let fair = self
            .settings
            .count
            .div_ceil(live.max(1))
            .min(self.settings.max_per_replica.unwrap_or(u32::MAX));
        let serving: Vec<u32> = self
            .held
            .iter()
            .filter(|(_, h)| h.leaving.is_none())
            .map(|(i, _)| *i)
            .collect();
        if serving.len() as u32 > fair {
            // Give the extras up: out of the scope now, released once the engines are done
            // with their objects.
            let extras: Vec<u32> = serving
                .iter()
                .rev()
                .take(serving.len() - fair as usize)
                .copied()
                .collect();
            let keep: BTreeSet<u32> = serving
                .iter()
                .filter(|i| !extras.contains(i))
                .copied()
                .collect();
            tracing::info!(group = %self.place, "{live} replicas share {} shards: giving up {extras:?}.", self.settings.count);
            let epoch = self.set_scope(keep);
            for index in extras {
                if let Some(h) = self.held.get_mut(&index) {
                    h.leaving = Some(epoch);
                }
            }
            self.release_adopted().await;
        } else if (serving.len() as u32) < fair && self.rounds > 1 && !self.fenced(&by_name) {
            self.take(&by_name, fair as usize - serving.len()).await;
        }
    }

    /// The live replicas of the group: member Leases held and not expired (this one
    /// included).
    fn live_members(&self, by_name: &HashMap<String, DynamicObject>) -> u32 {
        let mine = self.settings.member_name();
        let now = Instant::now();
        let others = by_name
            .iter()
            .filter(|(name, lease)| {
                *name != &mine && role(lease) == "member" && self.is_held_validly(name, now)
            })
            .count();
        others as u32 + 1
    }

    /// Whether the Lease has a holder and its record changed within its duration (as
    /// observed here).
    fn is_held_validly(&self, name: &str, now: Instant) -> bool {
        self.observed
            .get(name)
            .is_some_and(|(r, at)| !r.holder.is_empty() && *at + r.duration > now)
    }

    /// Whether a live range Lease of the group has another count (a resharding under way).
    fn fenced(&mut self, by_name: &HashMap<String, DynamicObject>) -> bool {
        let now = Instant::now();
        let count = self.settings.count.to_string();
        let other = by_name.iter().find(|(name, lease)| {
            role(lease) == "range"
                && label(lease, COUNT_LABEL) != count
                && self.is_held_validly(name, now)
        });
        match other {
            Some((name, _)) => {
                if !self.fenced_said {
                    tracing::warn!(group = %self.place, "The shard lease {name} of another shard count is live: taking no shard until it expires (a change of the count is under way).");
                    self.fenced_said = true;
                }
                true
            }
            None => {
                self.fenced_said = false;
                false
            }
        }
    }

    /// Creates or renews this replica's member Lease.
    async fn keep_member(&mut self, current: Option<DynamicObject>) {
        let name = self.settings.member_name();
        let result = match current.or_else(|| self.member.clone()) {
            Some(mut lease) => {
                let old = Record::read(&lease);
                lease.data["spec"] = self.spec(Some(&old));
                self.api
                    .replace(&name, &PostParams::default(), &lease)
                    .await
            }
            None => {
                let lease = self.new_lease(&name, "member");
                self.api.create(&PostParams::default(), &lease).await
            }
        };
        match result {
            Ok(lease) => self.member = Some(lease),
            Err(e) => {
                self.member = None;
                tracing::debug!(group = %self.place, "Cannot renew the member lease {name}: {}", kopf_core::text::for_log(&e));
            }
        }
    }

    /// Renews every range Lease held (one PUT each); a range seen held by another replica
    /// is lost at once.
    async fn renew(&mut self, by_name: &HashMap<String, DynamicObject>, renewed: &[u32]) {
        let indices: Vec<u32> = self
            .held
            .keys()
            .filter(|i| !renewed.contains(i))
            .copied()
            .collect();
        for index in indices {
            let name = self.settings.range_name(index);
            let Some(current) = by_name.get(&name) else {
                continue;
            };
            let old = Record::read(current);
            if old.holder != self.settings.identity {
                self.lose(
                    index,
                    &format!("the lease {name} is held by {:?}", old.holder),
                );
                continue;
            }
            let mut lease = current.clone();
            lease.data["spec"] = self.spec(Some(&old));
            match self
                .api
                .replace(&name, &PostParams::default(), &lease)
                .await
            {
                Ok(written) => {
                    if let Some(h) = self.held.get_mut(&index) {
                        h.lease = written;
                        h.renewed = Instant::now();
                    }
                }
                Err(e) => {
                    tracing::warn!(group = %self.place, "Cannot renew the shard lease {name}: {}", kopf_core::text::for_log(&e))
                }
            }
        }
    }

    /// When the first held range is due to be dropped unless renewed.
    fn renew_due(&self) -> Option<Instant> {
        self.held
            .values()
            .map(|h| h.renewed + self.settings.renew_deadline)
            .min()
    }

    /// Renews the held ranges from their last written Leases (a PUT each, conditional on
    /// this replica's last write); the ranges renewed. The others (someone else wrote, or
    /// the request failed) are looked at again after the next read.
    async fn renew_own(&mut self) -> Vec<u32> {
        let mut renewed = Vec::new();
        let indices: Vec<u32> = self.held.keys().copied().collect();
        for index in indices {
            let Some(mut lease) = self.held.get(&index).map(|h| h.lease.clone()) else {
                continue;
            };
            lease.data["spec"] = self.spec(Some(&Record::read(&lease)));
            let name = self.settings.range_name(index);
            if let Ok(written) = self
                .api
                .replace(&name, &PostParams::default(), &lease)
                .await
                && let Some(h) = self.held.get_mut(&index)
            {
                h.lease = written;
                h.renewed = Instant::now();
                renewed.push(index);
            }
        }
        renewed
    }

    /// Drops the ranges not renewed within the renew deadline: out of the scope before
    /// another replica can take them.
    fn drop_overdue(&mut self) {
        let deadline = self.settings.renew_deadline;
        let overdue: Vec<u32> = self
            .held
            .iter()
            .filter(|(_, h)| h.renewed.elapsed() >= deadline)
            .map(|(i, _)| *i)
            .collect();
        for index in overdue {
            self.lose(
                index,
                &format!("not renewed within the renew deadline ({deadline:?})"),
            );
        }
    }

    /// A range is lost: out of the scope at once.
    fn lose(&mut self, index: u32, why: &str) {
        self.held.remove(&index);
        let serving = self.serving();
        self.set_scope(serving);
        tracing::warn!(group = %self.place, "Shard {index} of {} lost: {why}.", self.settings.count);
    }

    /// The ranges held and not being given up.
    fn serving(&self) -> BTreeSet<u32> {
        self.held
            .iter()
            .filter(|(_, h)| h.leaving.is_none())
            .map(|(i, _)| *i)
            .collect()
    }

    /// Sets the engines' scope and the gate (paused while no range is served); the epoch.
    fn set_scope(&self, serving: BTreeSet<u32>) -> u64 {
        let empty = serving.is_empty();
        let said = format!("{serving:?}");
        let before = self.scope.scope().epoch;
        let epoch = self.scope.set(serving);
        if epoch != before {
            tracing::info!(group = %self.place, "Serving shards {said} of {}.", self.settings.count);
        }
        if empty {
            self.gate.pause(format!(
                "sharding: no shard of {} held (group {})",
                self.settings.count, self.place
            ));
        } else {
            self.gate.resume();
        }
        epoch
    }

    /// Releases the ranges given up whose objects the engines no longer process.
    async fn release_adopted(&mut self) {
        let ready: Vec<u32> = self
            .held
            .iter()
            .filter(|(_, h)| h.leaving.is_some_and(|e| self.scope.is_adopted(e)))
            .map(|(i, _)| *i)
            .collect();
        for index in ready {
            self.release(index).await;
        }
    }

    /// Releases a held range: no holder, a 1 s duration.
    async fn release(&mut self, index: u32) {
        let Some(held) = self.held.remove(&index) else {
            return;
        };
        let name = self.settings.range_name(index);
        match self.write_released(held.lease).await {
            Ok(()) => {
                tracing::info!(group = %self.place, "Released shard {index} of {} ({name}).", self.settings.count)
            }
            Err(e) => {
                tracing::warn!(group = %self.place, "Could not release {name}: {}; another replica takes it when it expires.", kopf_core::text::for_log(&e))
            }
        }
    }

    async fn write_released(&self, mut lease: DynamicObject) -> Result<(), kube::Error> {
        lease.data["spec"] = released_spec(&Record::read(&lease));
        let name = lease.metadata.name.clone().unwrap_or_default();
        self.api
            .replace(&name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }

    /// Takes up to `wanted` free or expired ranges, starting from a place that depends on
    /// the identity (replicas starting together try different ranges first).
    async fn take(&mut self, by_name: &HashMap<String, DynamicObject>, wanted: usize) {
        let count = self.settings.count;
        let start = (kopf_core::shards::fnv1a64(self.settings.identity.as_bytes())
            % u64::from(count)) as u32;
        let now = Instant::now();
        let mut taken = Vec::new();
        for step in 0..count {
            if taken.len() >= wanted {
                break;
            }
            let index = (start + step) % count;
            if self.held.contains_key(&index) {
                continue;
            }
            let name = self.settings.range_name(index);
            let result = match by_name.get(&name) {
                Some(_) if self.is_held_validly(&name, now) => continue,
                Some(current) => {
                    let old = Record::read(current);
                    let mut lease = current.clone();
                    lease.data["spec"] = self.spec(Some(&old));
                    self.api
                        .replace(&name, &PostParams::default(), &lease)
                        .await
                }
                None => {
                    let lease = self.new_lease(&name, "range");
                    self.api.create(&PostParams::default(), &lease).await
                }
            };
            match result {
                Ok(lease) => {
                    self.held.insert(
                        index,
                        Held {
                            lease,
                            renewed: Instant::now(),
                            leaving: None,
                        },
                    );
                    taken.push(index);
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => {
                    tracing::debug!(group = %self.place, "Cannot take {name}: {}", kopf_core::text::for_log(&e))
                }
            }
        }
        if !taken.is_empty() {
            let serving = self.serving();
            tracing::info!(group = %self.place, "Took shards {taken:?} of {count}.");
            self.set_scope(serving);
        }
    }

    /// A new Lease of this replica: a range or its member Lease.
    fn new_lease(&self, name: &str, role: &str) -> DynamicObject {
        let mut lease = DynamicObject::new(name, &lease_resource());
        lease.metadata.labels = Some(
            [
                (GROUP_LABEL.to_string(), self.settings.group.clone()),
                (COUNT_LABEL.to_string(), self.settings.count.to_string()),
                (ROLE_LABEL.to_string(), role.to_string()),
            ]
            .into(),
        );
        lease.data = json!({"spec": self.spec(None)});
        lease
    }

    /// The record this replica writes: held by it, renewed now.
    fn spec(&self, old: Option<&Record>) -> Value {
        held_spec(&self.settings.identity, self.settings.lease_duration, old)
    }
}

fn label(lease: &DynamicObject, key: &str) -> String {
    lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .cloned()
        .unwrap_or_default()
}

fn role(lease: &DynamicObject) -> String {
    label(lease, ROLE_LABEL)
}
