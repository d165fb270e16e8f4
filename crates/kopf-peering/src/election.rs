//! Leader election with a `coordination.k8s.io/v1` Lease ([`LeaderElector::run`]), by
//! client-go's algorithm: the operator's gate stands by until this replica holds the lease,
//! opens while it renews it, and stands by again, before anything else, when it cannot.
//!
//! - **Acquire**: every retry period (with up to 20 % jitter), read the lease; create it
//!   when missing; take it when it has no holder or when its record has not changed for its
//!   `leaseDurationSeconds` *as observed by this process's own clock* (the holder's
//!   `renewTime` is never compared with the local clock: clock offsets between replicas do
//!   not matter, only clock rates). Every write is a PUT carrying the resourceVersion that
//!   was read: of two candidates, one gets 409 and stays on standby.
//! - **Renew**: every retry period, a PUT of the held record (no read first while the last
//!   write's resourceVersion is current). When no renewal succeeds within the renew
//!   deadline, or another holder is seen, the lease is lost: the gate stands by at once, then
//!   the replica campaigns again.
//! - **Release**: on a graceful stop, after the engine has drained (the caller stops the
//!   elector last), the record is written with no holder and a 1 s duration, so that a
//!   standby takes over within about one retry period rather than one lease duration.
//!
//! The worst-case overlap: a leader that cannot renew stops dispatching after the renew
//! deadline (10 s); another replica takes the lease after the lease duration (15 s) of no
//! change. A handler call that is already running when the gate closes completes (its
//! results are written): that call is the only work of the old leader that can overlap the
//! new leader's, and only when it outlasts the 5 s between the two deadlines (minus any
//! difference in the replicas' clock rates).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use kopf_core::gate::GateControl;
use kopf_core::metrics::Metrics;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::error::PeeringError;

/// The Lease resource (`coordination.k8s.io/v1`).
pub(crate) fn lease_resource() -> ApiResource {
    ApiResource {
        group: "coordination.k8s.io".into(),
        version: "v1".into(),
        api_version: "coordination.k8s.io/v1".into(),
        kind: "Lease".into(),
        plural: "leases".into(),
    }
}

/// The settings of leader election: which Lease, who this replica is, and client-go's
/// timings (defaults: 15 s lease duration, 10 s renew deadline, 2 s retry period).
///
/// ```
/// use std::time::Duration;
/// use kopf_peering::LeaderElection;
///
/// let election = LeaderElection::new("my-operator-leader")
///     .namespace("operators")
///     .identity("my-operator-7d9f-abcde")
///     .timings(Duration::from_secs(30), Duration::from_secs(20), Duration::from_secs(4));
/// assert!(election.validate().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElection {
    /// The Lease's name.
    pub name: String,
    /// The Lease's namespace (`None`: `$POD_NAMESPACE`, else the client's default
    /// namespace).
    pub namespace: Option<String>,
    /// This replica's identity: unique per process (default: `$POD_NAME` or the host name,
    /// with a random suffix).
    pub identity: String,
    /// How long a lease holds without renewal (as observed by the others).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives the lead up.
    pub renew_deadline: Duration,
    /// The time between attempts.
    pub retry_period: Duration,
    /// Whether a graceful stop releases the lease (after the engine has drained).
    pub release_on_cancel: bool,
}

impl LeaderElection {
    /// Leader election with the lease `name`, client-go's timings, and a fresh identity.
    pub fn new(name: impl Into<String>) -> Self {
        LeaderElection {
            name: name.into(),
            namespace: None,
            identity: election_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_cancel: true,
        }
    }

    /// The lease's namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// This replica's identity (it must differ from every other replica's).
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

    /// Whether a graceful stop releases the lease.
    pub fn release_on_cancel(mut self, release: bool) -> Self {
        self.release_on_cancel = release;
        self
    }

    /// Checks client-go's rule: lease duration > renew deadline > 1.2 × retry period, and
    /// a lease duration of whole seconds (the Lease stores seconds).
    pub fn validate(&self) -> Result<(), PeeringError> {
        let bad = |why: String| {
            Err(PeeringError::Settings {
                what: "leader election",
                why,
            })
        };
        if self.name.is_empty() {
            return bad("the lease has no name".into());
        }
        if self.identity.is_empty() {
            return bad("the identity is empty".into());
        }
        check_timings(self.lease_duration, self.renew_deadline, self.retry_period).or_else(bad)
    }
}

/// client-go's rule on lease timings: lease duration > renew deadline > 1.2 × retry
/// period, and a lease duration of whole seconds (the Lease stores seconds).
pub(crate) fn check_timings(
    lease: Duration,
    renew: Duration,
    retry: Duration,
) -> Result<(), String> {
    if lease <= renew {
        return Err(format!(
            "the lease duration ({lease:?}) must be longer than the renew deadline ({renew:?})"
        ));
    }
    if renew.as_secs_f64() <= 1.2 * retry.as_secs_f64() {
        return Err(format!(
            "the renew deadline ({renew:?}) must be longer than 1.2 × the retry period ({retry:?})"
        ));
    }
    if lease.subsec_nanos() != 0 || lease.as_secs() == 0 {
        return Err(format!(
            "the lease duration ({lease:?}) must be whole seconds (Leases store seconds)"
        ));
    }
    Ok(())
}

/// A replica's identity for leases: `$POD_NAME` (or the host name), `_`, and 8 random
/// hexadecimal digits, so that two processes never share one (client-go's advice: two
/// candidates with the same identity would both believe they lead).
pub fn election_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "kopf".into());
    format!("{base}_{:08x}", rand::random::<u32>())
}

/// Where this replica stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// Another replica leads (`leader`, when known), or nobody yet.
    Standby {
        /// The lease's holder as last seen.
        leader: Option<String>,
    },
    /// This replica leads.
    Leading,
}

impl Leadership {
    /// `leading` or `standby`, for health endpoints.
    pub fn as_str(&self) -> &'static str {
        match self {
            Leadership::Leading => "leading",
            Leadership::Standby { .. } => "standby",
        }
    }
}

/// The lease record as read: what client-go calls the observed record.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Record {
    pub(crate) holder: String,
    pub(crate) duration: Duration,
    pub(crate) acquire_time: Option<Value>,
    pub(crate) transitions: i64,
    /// The whole spec as read: any change of it restarts the expiry.
    pub(crate) raw: Value,
}

impl Record {
    pub(crate) fn read(lease: &DynamicObject) -> Record {
        let spec = lease.data.get("spec").cloned().unwrap_or(Value::Null);
        Record {
            holder: spec
                .get("holderIdentity")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            duration: Duration::from_secs(
                spec.get("leaseDurationSeconds")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
            ),
            acquire_time: spec.get("acquireTime").cloned(),
            transitions: spec
                .get("leaseTransitions")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            raw: spec,
        }
    }
}

/// `MicroTime`: RFC 3339 with microseconds, UTC.
pub(crate) fn micro_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

/// How one attempt went.
#[derive(Debug)]
enum Attempt {
    /// This replica holds the lease (it took, created or renewed it).
    Held,
    /// Another replica holds it, validly as far as this one has observed.
    HeldBy(String),
    /// A write lost to another's (409): someone else wrote the lease first.
    Conflict,
}

/// One replica's side of leader election, controlling the operator's gate: standing by
/// until it leads, open while it leads.
///
/// ```no_run
/// # async fn demo(client: kube::Client) -> Result<(), kopf_peering::PeeringError> {
/// use kopf_core::gate::Gate;
/// use kopf_peering::{LeaderElection, LeaderElector};
///
/// let (control, gate) = Gate::channel();
/// let elector = LeaderElector::new(client, LeaderElection::new("my-operator-leader"), control)?;
/// let leadership = elector.leadership();
/// tokio::spawn(elector.run(std::future::pending()));
/// // ... the engine runs with `gate`; `leadership` says leading or standby.
/// # Ok(()) }
/// ```
pub struct LeaderElector {
    api: Api<DynamicObject>,
    place: String,
    settings: LeaderElection,
    control: GateControl,
    leadership: watch::Sender<Leadership>,
    metrics: Option<Metrics>,
    /// The record as last read or written, when this process's clock saw it change.
    observed: Option<(Record, Instant)>,
    /// The lease as last written by this replica (the fast path of renewals).
    written: Option<DynamicObject>,
}

impl LeaderElector {
    /// An elector for these settings (validated), stand-by until it runs and leads.
    pub fn new(
        client: kube::Client,
        settings: LeaderElection,
        control: GateControl,
    ) -> Result<Self, PeeringError> {
        settings.validate()?;
        let namespace = lease_namespace(settings.namespace.as_deref(), &client);
        let api = Api::namespaced_with(client, &namespace, &lease_resource());
        let place = format!("{namespace}/{}", settings.name);
        let (leadership, _) = watch::channel(Leadership::Standby { leader: None });
        Ok(LeaderElector {
            api,
            place,
            settings,
            control,
            leadership,
            metrics: None,
            observed: None,
            written: None,
        })
    }

    /// Reports leadership, transitions and renew failures in these metrics
    /// (`kopf_leader_is_leader`, `kopf_leader_transitions_total`,
    /// `kopf_leader_renew_failures_total`).
    pub fn metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Where this replica stands, now and as it changes.
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.subscribe()
    }

    /// Campaigns, leads and renews until `stop` completes, then releases the lease if it
    /// holds it (and [`release_on_cancel`](LeaderElection::release_on_cancel) is set). Stop
    /// it only after the engine has drained: the lease is held until then.
    pub async fn run(mut self, stop: impl Future<Output = ()>) -> Result<(), PeeringError> {
        let mut stop = std::pin::pin!(stop);
        let lease = self.place.clone();
        self.stand_by(None);
        if let Some(m) = &self.metrics {
            m.leadership(&lease, false);
        }
        loop {
            // Campaign.
            let mut first = true;
            loop {
                let delay = if first {
                    Duration::ZERO
                } else {
                    jittered(self.settings.retry_period)
                };
                first = false;
                tokio::select! {
                    _ = &mut stop => return Ok(()),
                    _ = kopf_core::clock::sleep(delay, "a try for the leader's lease") => {}
                }
                match self.attempt().await {
                    Ok(Attempt::Held) => break,
                    Ok(Attempt::HeldBy(holder)) => self.stand_by(Some(holder)),
                    Ok(Attempt::Conflict) => {}
                    Err(e) => {
                        tracing::debug!(lease = %lease, "Cannot acquire the lease {lease}: {}", kopf_core::text::for_log(&e))
                    }
                }
            }
            let transitions = self.observed.as_ref().map_or(0, |(r, _)| r.transitions);
            tracing::info!(
                lease = %lease,
                identity = %self.settings.identity,
                transitions,
                "This replica leads now (lease {lease}, identity {}).",
                self.settings.identity
            );
            self.control.resume();
            self.leadership.send_replace(Leadership::Leading);
            if let Some(m) = &self.metrics {
                // The transition is counted first: whoever sees this replica leading (the
                // probe, `kopf_leader_is_leader`) also sees the transition that made it lead.
                m.leader_transition(&lease);
                m.leadership(&lease, true);
            }
            // Renew.
            let mut renewed = Instant::now();
            let lost = loop {
                tokio::select! {
                    _ = &mut stop => break None,
                    _ = kopf_core::clock::sleep(self.settings.retry_period, "the leader's lease renewal") => {}
                }
                let deadline = renewed + self.settings.renew_deadline;
                let attempt = tokio::time::timeout_at(deadline, self.attempt()).await;
                match attempt {
                    Ok(Ok(Attempt::Held)) => renewed = Instant::now(),
                    Ok(Ok(Attempt::HeldBy(holder))) => {
                        break Some(format!("the lease is held by {holder}"));
                    }
                    Ok(Ok(Attempt::Conflict)) | Ok(Err(_)) | Err(_) => {
                        if let Some(m) = &self.metrics {
                            m.leader_renew_failure(&lease);
                        }
                        let why = match attempt {
                            Ok(Err(e)) => kopf_core::text::for_log(&e).to_string(),
                            Ok(Ok(_)) => "another write of the lease came first (409)".into(),
                            Err(_) => "no answer in time".into(),
                        };
                        if Instant::now() >= deadline {
                            break Some(format!(
                                "no renewal succeeded within the renew deadline ({:?}); the last attempt: {why}",
                                self.settings.renew_deadline
                            ));
                        }
                        tracing::warn!(lease = %lease, "Cannot renew the lease {lease}: {why}; retrying.");
                    }
                }
            };
            let Some(why) = lost else {
                // Stopping: the engine has drained; the lease is released for a quick
                // hand-over.
                self.control.stand_by("stopping");
                if self.settings.release_on_cancel {
                    self.release().await;
                }
                self.leadership
                    .send_replace(Leadership::Standby { leader: None });
                if let Some(m) = &self.metrics {
                    m.leadership(&lease, false);
                }
                return Ok(());
            };
            // Lost: nothing is dispatched from now on; then it is said.
            self.control
                .stand_by(format!("leadership of {lease} lost: {why}"));
            self.written = None;
            self.leadership
                .send_replace(Leadership::Standby { leader: None });
            if let Some(m) = &self.metrics {
                m.leadership(&lease, false);
            }
            tracing::warn!(lease = %lease, "This replica lost the lead: {why}. Standing by; campaigning again.");
        }
    }

    /// Stands by, saying who leads.
    fn stand_by(&mut self, leader: Option<String>) {
        let reason = match &leader {
            Some(holder) => format!("{holder} leads (lease {})", self.place),
            None => format!("waiting for the lease {}", self.place),
        };
        let next = Leadership::Standby { leader };
        if *self.leadership.borrow() != next {
            if let Leadership::Standby {
                leader: Some(holder),
            } = &next
            {
                tracing::info!(lease = %self.place, "Standing by: {holder} leads (lease {}).", self.place);
            }
            self.leadership.send_replace(next);
        }
        self.control.stand_by(reason);
    }

    /// The record this replica writes to hold the lease.
    fn record(&self, old: Option<&Record>) -> Value {
        held_spec(&self.settings.identity, self.settings.lease_duration, old)
    }

    /// Notes the record as read or written: the expiry restarts when it changed.
    fn observe(&mut self, lease: &DynamicObject) -> Record {
        let record = Record::read(lease);
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|(seen, _)| seen.raw != record.raw);
        if changed {
            self.observed = Some((record.clone(), Instant::now()));
        }
        record
    }

    /// One try to acquire or renew (client-go's `tryAcquireOrRenew`).
    async fn attempt(&mut self) -> Result<Attempt, kube::Error> {
        // The fast path of a leader: its own last write, renewed without a read.
        if let Some(mut lease) = self.written.clone() {
            let old = Record::read(&lease);
            lease.data["spec"] = self.record(Some(&old));
            match self.put(&lease).await {
                Ok(written) => {
                    self.observe(&written);
                    self.written = Some(written);
                    return Ok(Attempt::Held);
                }
                Err(e) => {
                    self.written = None;
                    tracing::debug!(lease = %self.place, "Renewing without a read failed ({}); reading the lease.", kopf_core::text::for_log(&e));
                }
            }
        }
        let current = match self.api.get_opt(&self.settings.name).await? {
            Some(lease) => lease,
            None => {
                let mut lease = DynamicObject::new(&self.settings.name, &lease_resource());
                lease.data = json!({"spec": self.record(None)});
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(created) => {
                        self.observe(&created);
                        self.written = Some(created);
                        Ok(Attempt::Held)
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Conflict),
                    Err(e) => Err(e),
                };
            }
        };
        let old = self.observe(&current);
        let observed_at = self
            .observed
            .as_ref()
            .map_or_else(Instant::now, |(_, t)| *t);
        if !old.holder.is_empty()
            && old.holder != self.settings.identity
            && observed_at + old.duration > Instant::now()
        {
            return Ok(Attempt::HeldBy(old.holder));
        }
        let mut lease = current;
        lease.data["spec"] = self.record(Some(&old));
        match self.put(&lease).await {
            Ok(written) => {
                self.observe(&written);
                self.written = Some(written);
                Ok(Attempt::Held)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Conflict),
            Err(e) => Err(e),
        }
    }

    /// A PUT of the lease, conditional on its resourceVersion.
    async fn put(&self, lease: &DynamicObject) -> Result<DynamicObject, kube::Error> {
        self.api
            .replace(&self.settings.name, &PostParams::default(), lease)
            .await
    }

    /// Gives the lease up (client-go's release): no holder, a 1 s duration, the transitions
    /// kept; tried until the renew deadline.
    async fn release(&mut self) {
        let deadline = Instant::now() + self.settings.renew_deadline;
        let place = self.place.clone();
        let released = tokio::time::timeout_at(deadline, async {
            loop {
                let lease = match self.written.take() {
                    Some(lease) => lease,
                    None => match self.api.get_opt(&self.settings.name).await {
                        Ok(Some(lease)) => lease,
                        Ok(None) => return Ok(()),
                        Err(e) => return Err(e),
                    },
                };
                let old = Record::read(&lease);
                if old.holder != self.settings.identity {
                    // Someone else holds it already: nothing to give up.
                    return Ok(());
                }
                let mut lease = lease;
                lease.data["spec"] = released_spec(&old);
                match self.put(&lease).await {
                    Ok(_) => return Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    Err(e) => return Err(e),
                }
            }
        })
        .await;
        match released {
            Ok(Ok(())) => tracing::info!(lease = %place, "Released the lease {place}."),
            Ok(Err(e)) => {
                tracing::warn!(lease = %place, "Could not release the lease {place}: {}; another replica takes it when it expires.", kopf_core::text::for_log(&e))
            }
            Err(_) => {
                tracing::warn!(lease = %place, "Could not release the lease {place} in time; another replica takes it when it expires.")
            }
        }
    }
}

/// The namespace of the Leases: the one given, else `$POD_NAMESPACE`, else the client's
/// default namespace.
pub(crate) fn lease_namespace(given: Option<&str>, client: &kube::Client) -> String {
    given
        .map(str::to_string)
        .or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|n| !n.is_empty())
        })
        .unwrap_or_else(|| client.default_namespace().to_string())
}

/// The record of a lease held by `identity`, renewed now, continuing `old` when it held it
/// already (client-go: the acquire time and transitions carry over; a new holder counts
/// one more transition).
pub(crate) fn held_spec(identity: &str, lease_duration: Duration, old: Option<&Record>) -> Value {
    let now = micro_time(kopf_core::clock::now());
    let (acquire, transitions) = match old {
        Some(old) if old.holder == identity => (
            old.acquire_time.clone().unwrap_or_else(|| json!(now)),
            old.transitions,
        ),
        Some(old) => (json!(now), old.transitions + 1),
        None => (json!(now), 0),
    };
    json!({
        "holderIdentity": identity,
        "leaseDurationSeconds": lease_duration.as_secs(),
        "acquireTime": acquire,
        "renewTime": now,
        "leaseTransitions": transitions,
    })
}

/// The record of a released lease (client-go's release): no holder, a 1 s duration, the
/// transitions kept.
pub(crate) fn released_spec(old: &Record) -> Value {
    let now = micro_time(kopf_core::clock::now());
    json!({
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": now,
        "renewTime": now,
        "leaseTransitions": old.transitions,
    })
}

/// `period` plus up to 20 % (client-go's jitter factor 1.2).
pub(crate) fn jittered(period: Duration) -> Duration {
    kopf_core::backoff::Jitter::Lengthen(0.2).apply(period)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_times_are_rfc3339_with_microseconds() {
        let t: jiff::Timestamp = "2026-11-26T03:04:05.123456789Z".parse().expect("a time");
        assert_eq!(micro_time(t), "2026-11-26T03:04:05.123456Z");
        let t: jiff::Timestamp = "2026-11-26T03:04:05Z".parse().expect("a time");
        assert_eq!(micro_time(t), "2026-11-26T03:04:05.000000Z");
    }

    #[test]
    fn timings_follow_client_gos_rule() {
        let ok = LeaderElection::new("x");
        assert!(ok.validate().is_ok());
        let s = |l, r, p| {
            LeaderElection::new("x")
                .timings(
                    Duration::from_millis(l),
                    Duration::from_millis(r),
                    Duration::from_millis(p),
                )
                .validate()
                .map_err(|e| e.to_string())
        };
        assert!(
            s(10_000, 10_000, 2_000)
                .unwrap_err()
                .contains("longer than the renew deadline")
        );
        assert!(
            s(15_000, 2_400, 2_000)
                .unwrap_err()
                .contains("1.2 × the retry period")
        );
        assert!(s(1_500, 1_000, 200).unwrap_err().contains("whole seconds"));
        assert!(s(2_000, 1_000, 200).is_ok());
    }

    #[test]
    fn identities_are_unique_per_process() {
        let (a, b) = (election_identity(), election_identity());
        assert_ne!(a, b);
        let suffix = a.rsplit('_').next().expect("a suffix");
        assert_eq!(suffix.len(), 8, "{a}");
    }
}
