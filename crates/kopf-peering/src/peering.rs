//! The running peering of one operator ([`Peering::run`]): its keep-alives in the peering
//! object, the removal of dead peers, and the operator's gate paused while a live peer with
//! a higher (or, by Kopf's rule, the same) priority is there.
//!
//! Requests: one watch of the peering object (by name), one merge PATCH of this operator's
//! entry per keep-alive (`lifetime` minus 5–10 s, as Kopf), one PATCH to remove dead peers
//! when there are some, one PATCH when a blocking peer should have expired and nothing was
//! heard since (it makes the watch deliver the object again), and one on exit (the entry set
//! to `null`). All PATCHes go to the object itself: the peering resources have no status
//! subresource.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

use futures::StreamExt;
use kopf_core::gate::GateControl;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};

use crate::error::PeeringError;
use crate::peer::{Peer, WireEntry, entry_patch};
use crate::settings::{PeeringMode, PeeringSettings};
use crate::verdict::{Liveness, Verdict, decide};

/// The group and version of the peering resources.
pub const GROUP_VERSION: &str = "kopf.dev/v1";

/// The peering resource of these settings: `ClusterKopfPeering`, or `KopfPeering` when
/// they name a namespace.
pub fn resource(settings: &PeeringSettings) -> ApiResource {
    let (kind, plural) = if settings.namespace.is_some() {
        ("KopfPeering", "kopfpeerings")
    } else {
        ("ClusterKopfPeering", "clusterkopfpeerings")
    };
    ApiResource {
        group: "kopf.dev".into(),
        version: "v1".into(),
        api_version: GROUP_VERSION.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// The peering object's API: the `ClusterKopfPeering`s, or the `KopfPeering`s of the
/// settings' namespace.
pub(crate) fn api(client: &kube::Client, settings: &PeeringSettings) -> Api<DynamicObject> {
    let ar = resource(settings);
    match &settings.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

/// A merge PATCH of the peering object (on the object: the resources have no status
/// subresource).
pub(crate) async fn patch(
    client: &kube::Client,
    settings: &PeeringSettings,
    body: impl serde::Serialize + std::fmt::Debug,
) -> Result<(), kube::Error> {
    api(client, settings)
        .patch(&settings.name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map(|_| ())
}

/// The peering of one operator: its settings, the client it talks through, and the gate it
/// controls.
///
/// ```no_run
/// # async fn demo(client: kube::Client) -> Result<(), kopf_peering::PeeringError> {
/// use kopf_core::gate::Gate;
/// use kopf_peering::{Peering, PeeringSettings};
///
/// let (control, gate) = Gate::channel();
/// // The engine observes `gate`; peering pauses it while a higher priority is alive.
/// let peering = Peering::new(client, PeeringSettings::default().priority(100), control);
/// peering.run(tokio::signal::ctrl_c().map(|_| ())).await?;
/// # Ok(()) }
/// # use futures::FutureExt;
/// ```
pub struct Peering {
    client: kube::Client,
    settings: PeeringSettings,
    control: GateControl,
}

impl Peering {
    /// The peering of an operator.
    pub fn new(client: kube::Client, settings: PeeringSettings, control: GateControl) -> Self {
        Peering {
            client,
            settings,
            control,
        }
    }

    fn api(&self) -> Api<DynamicObject> {
        api(&self.client, &self.settings)
    }

    /// `'default' cluster-wide` or `'default' in "ns"`, for the logs.
    fn place(&self) -> String {
        match &self.settings.namespace {
            Some(ns) => format!("{:?} in {ns:?}", self.settings.name),
            None => format!("{:?} cluster-wide", self.settings.name),
        }
    }

    /// Whether the cluster serves the peering resource.
    async fn available(&self) -> Result<bool, kube::Error> {
        let plural = resource(&self.settings).plural;
        match self.client.list_api_group_resources(GROUP_VERSION).await {
            Ok(list) => Ok(list.resources.iter().any(|r| r.name == plural)),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Runs until `shutdown`: keep-alives, dead peers removed, the gate paused and resumed.
    /// On the way out, this operator's entry is removed. Standalone, or in auto mode on a
    /// cluster without the peering resources, it returns at once and the gate stays open.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), PeeringError> {
        let mut shutdown = std::pin::pin!(shutdown);
        if self.settings.mode == PeeringMode::Standalone {
            return Ok(());
        }
        let plural = resource(&self.settings).plural;
        // Nothing acts before the first look at the peers: a higher priority may be there.
        self.control
            .pause(format!("peering: looking at the peers of {}", self.place()));
        let mut waiting_said = false;
        loop {
            let why = match (self.available().await, self.settings.mode) {
                (Ok(true), _) => break,
                (Ok(false), PeeringMode::Auto) => {
                    tracing::info!(
                        "The cluster has no {plural}.kopf.dev: running without peering (standalone). Apply the peering resources to run several operators safely, or say --standalone."
                    );
                    self.control.resume();
                    return Ok(());
                }
                // The API server answered, but not with the group (e.g. forbidden): as if
                // the resources were not there, and said.
                (Err(kube::Error::Api(e)), PeeringMode::Auto) => {
                    tracing::warn!(
                        "Discovering {plural}.kopf.dev was answered {} ({}): running without peering (standalone).",
                        e.code,
                        e.message
                    );
                    self.control.resume();
                    return Ok(());
                }
                (Err(e), PeeringMode::Auto) => {
                    format!("cannot discover {plural}.kopf.dev: {}", cause(&e))
                }
                (Ok(false), _) => format!("the cluster has no {plural}.kopf.dev yet"),
                (Err(e), _) => format!("cannot discover {plural}.kopf.dev: {}", cause(&e)),
            };
            if !waiting_said {
                tracing::warn!(
                    "Peering {}: {why}; paused until it can look at the peers.",
                    self.place()
                );
                waiting_said = true;
            }
            self.control.pause(format!("peering: {why}"));
            tokio::select! {
                _ = &mut shutdown => return Ok(()),
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
        }
        self.follow(shutdown.as_mut()).await;
        // Kopf's exit: the entry removed, so that others need not wait for it to expire.
        if let Err(e) = self.touch(None).await {
            tracing::warn!(
                "Could not remove this operator from the peering {}: {}. Peers will wait for the entry to expire.",
                self.place(),
                cause(&e)
            );
        }
        Ok(())
    }

    /// The main loop: the peering object's events, the keep-alives, the recheck of
    /// blockers that should have expired.
    async fn follow(&self, mut shutdown: Pin<&mut impl Future<Output = ()>>) {
        let name = &self.settings.name;
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut events = watcher::watcher(self.api(), config)
            .default_backoff()
            .boxed();
        let mut state = State::default();
        let keepalive = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(keepalive);
        let recheck = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(recheck);
        let mut rechecking = false;
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = &mut keepalive => {
                    let next = match self.touch(Some(self.own_entry())).await {
                        Ok(()) => self.keepalive_interval(),
                        // Soon again: the entry must not expire over one failed request.
                        Err(e) => {
                            tracing::warn!("Keep-alive in {} failed: {}; retrying.", self.place(), cause(&e));
                            Duration::from_secs(1).min(self.keepalive_interval())
                        }
                    };
                    keepalive.as_mut().reset(tokio::time::Instant::now() + next);
                }
                _ = &mut recheck, if rechecking => {
                    rechecking = false;
                    // Nothing heard since the blockers should have expired: a change of our
                    // own entry makes the watch deliver the object, and the decision again.
                    if let Err(e) = self.touch(Some(self.own_entry())).await {
                        tracing::warn!("Touching the peering {} failed: {}.", self.place(), cause(&e));
                    }
                }
                event = events.next() => {
                    let status = match event {
                        None => return,
                        Some(Err(e)) => {
                            tracing::warn!("Watching the peering {} failed: {}; retrying.", self.place(), cause(&e));
                            continue;
                        }
                        Some(Ok(Event::Apply(o) | Event::InitApply(o))) => {
                            state.present = true;
                            Some(o.data.get("status").cloned().unwrap_or(Value::Null))
                        }
                        Some(Ok(Event::Delete(_))) => {
                            state.present = false;
                            None
                        }
                        Some(Ok(Event::Init)) => {
                            state.present = false;
                            continue;
                        }
                        Some(Ok(Event::InitDone)) if state.present => continue,
                        Some(Ok(Event::InitDone)) => None,
                    };
                    match self.evaluate(status.as_ref(), &mut state).await {
                        Some(after) => {
                            recheck.as_mut().reset(tokio::time::Instant::now() + after);
                            rechecking = true;
                        }
                        None => rechecking = false,
                    }
                }
            }
        }
    }

    /// Acts on the peering object's status (`None`: the object does not exist): dead peers
    /// removed, the gate paused or resumed. When to look again if nothing changes.
    async fn evaluate(&self, status: Option<&Value>, state: &mut State) -> Option<Duration> {
        let s = &self.settings;
        if status.is_none() && s.mode == PeeringMode::Mandatory {
            let why = format!("the peering object {} does not exist", self.place());
            if self.control.state().is_open() {
                tracing::warn!("Peering is required, but {why}: pausing until it exists.");
            }
            self.control.pause(format!("peering required: {why}"));
            return None;
        }
        let decision = decide(
            status,
            &s.identity,
            s.priority,
            s.same_priority,
            kopf_core::clock::now(),
            Instant::now(),
            &mut state.liveness,
        );
        for e in &decision.unreadable {
            if state.warned.insert(e.to_string()) {
                tracing::warn!("{e}; it is ignored (neither a blocker nor removed).");
            }
        }
        if !decision.dead.is_empty() {
            let nulls: serde_json::Map<String, Value> = decision
                .dead
                .iter()
                .map(|id| (id.clone(), Value::Null))
                .collect();
            tracing::debug!(
                "Removing dead peers from {}: {:?}.",
                self.place(),
                decision.dead
            );
            if let Err(e) = self.patch(json!({ "status": nulls })).await {
                tracing::warn!(
                    "Removing dead peers from {} failed: {}.",
                    self.place(),
                    cause(&e)
                );
            }
        }
        match &decision.verdict {
            Verdict::PausedBy(peers) => {
                let who = list(peers);
                if state.said.as_deref() != Some(who.as_str()) {
                    tracing::info!("Pausing operations in favour of {who}.");
                    state.said = Some(who.clone());
                }
                self.control.pause(format!("in favour of {who}"));
            }
            Verdict::Conflict(peers) => {
                let who = list(peers);
                if state.said.as_deref() != Some(who.as_str()) {
                    tracing::warn!(
                        "Possibly conflicting operators with the same priority {}: {who}. Pausing all operators, including this one ({}); give them different priorities.",
                        s.priority,
                        s.identity
                    );
                    state.said = Some(who.clone());
                }
                self.control.pause(format!(
                    "conflicting operators with the same priority: {who}"
                ));
            }
            Verdict::Active => {
                if !self.control.state().is_open() {
                    tracing::info!("Resuming operations after the pause.");
                }
                state.said = None;
                self.control.resume();
            }
        }
        decision.recheck_in
    }

    /// This operator's entry now.
    fn own_entry(&self) -> WireEntry {
        Peer {
            identity: self.settings.identity.clone(),
            priority: self.settings.priority,
            lifetime: self.settings.lifetime,
            lastseen: kopf_core::clock::now(),
        }
        .wire_entry()
    }

    /// Kopf's keep-alive interval: `lifetime` minus 5–10 s, at least 1 s.
    fn keepalive_interval(&self) -> Duration {
        kopf_core::backoff::Jitter::LessSeconds(5, 10).apply(self.settings.lifetime)
    }

    /// Writes this operator's entry (`None`: removes it), as Kopf does:
    /// `{"status": {"<identity>": {"priority": …, "lifetime": …, "lastseen": …}}}`.
    async fn touch(&self, entry: Option<WireEntry>) -> Result<(), kube::Error> {
        let body = entry_patch(&self.settings.identity, entry);
        match self.patch(body).await {
            Ok(()) => {
                if !self.settings.stealth {
                    tracing::debug!("Keep-alive in {}: ok.", self.place());
                }
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                tracing::debug!("Keep-alive in {}: not found.", self.place());
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// A merge PATCH of the peering object.
    async fn patch(
        &self,
        body: impl serde::Serialize + std::fmt::Debug,
    ) -> Result<(), kube::Error> {
        patch(&self.client, &self.settings, body).await
    }
}

/// What the loop remembers between events.
#[derive(Default)]
struct State {
    /// The object exists (as far as the watch said).
    present: bool,
    /// When each entry changed.
    liveness: Liveness,
    /// The blockers last logged (so that a pause is logged once).
    said: Option<String>,
    /// Unreadable entries already warned about.
    warned: HashSet<String>,
}

/// Peers for the logs: `a (priority 100, lastseen ..., lifetime 60 s), b (...)`.
fn list(peers: &[Peer]) -> String {
    peers
        .iter()
        .map(Peer::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What went wrong, in words: the API server's message, or the innermost cause of a
/// connection failure ("Connection refused (os error 111)"), not the client's type names.
fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    loop {
        let next = match last.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(status)) => {
                return format!("{} ({})", status.message, status.code);
            }
            Some(kube::Error::Service(inner)) => {
                Some(inner.as_ref() as &(dyn std::error::Error + 'static))
            }
            _ => last.source(),
        };
        match next {
            Some(next) => last = next,
            None => return last.to_string(),
        }
    }
}
