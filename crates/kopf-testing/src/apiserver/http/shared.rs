//! What the request handlers share: the API state under its lock, the run-time settings,
//! the request log and faults, the webhook client, and the delayed work a request leaves.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::apiserver::control::{Faults, Introspection};
use crate::apiserver::semantics::{State, StateConfig};
use crate::apiserver::sync::lock;
use crate::apiserver::webhooks::client::{ServiceRef, WebhookRuntime};
use crate::apiserver::webhooks::host::Host;

/// The version reported by `/version`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionInfo {
    /// Major version, `"1"`.
    pub major: String,
    /// Minor version; selects the kubectl the dispatcher runs.
    pub minor: String,
    /// Full version, `v1.31.0`.
    pub git_version: String,
}

impl Default for VersionInfo {
    /// 1.31: its kubectl talks JSON for every command (1.32+ sends protobuf for typed creates).
    fn default() -> Self {
        VersionInfo {
            major: "1".into(),
            minor: "31".into(),
            git_version: "v1.31.0".into(),
        }
    }
}

/// Run-time settings of the server.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The reported version.
    pub version: VersionInfo,
    /// How many changes the history retains (older resourceVersions get 410).
    pub history_limit: usize,
    /// Interval between watch bookmarks (when a client asks for them).
    pub bookmark_interval: Duration,
    /// Watch duration when the client gives no `timeoutSeconds`; None = random 30–60 minutes.
    pub default_watch_timeout: Option<Duration>,
    /// Delay between CRD creation and `Established`.
    pub crd_establish_delay: Duration,
    /// Answer the aggregated-discovery Accept with aggregated documents (else legacy).
    pub aggregated_discovery: bool,
    /// The longest a deleted, scheduled Pod stays Terminating before the simulated kubelet
    /// confirms (the Pod's grace period, capped by this).
    pub pod_termination_cap: Duration,
    /// Where webhooks given as `clientConfig.service` are reached (`host:port`): the fake
    /// has no service network. Calls to unmapped services fail as unreachable.
    pub webhook_services: BTreeMap<ServiceRef, String>,
    /// Honour KEP-5866 `shardSelector` on lists and watches (true, the default, as
    /// Kubernetes 1.36 with the `ShardedListAndWatch` gate); false ignores the parameter as
    /// older servers do: everything is sent, lists carry no `metadata.shardInfo`.
    pub sharded_list_and_watch: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            version: VersionInfo::default(),
            history_limit: 100_000,
            bookmark_interval: Duration::from_secs(60),
            default_watch_timeout: None,
            crd_establish_delay: Duration::ZERO,
            aggregated_discovery: true,
            pod_termination_cap: Duration::from_secs(1),
            webhook_services: BTreeMap::new(),
            sharded_list_and_watch: true,
        }
    }
}

/// Everything the request handlers share.
pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub settings: Mutex<Settings>,
    pub intro: Mutex<Introspection>,
    pub faults: Mutex<Faults>,
    /// Closes watch streams: Some(resource plural) or None for all.
    pub close_tx: broadcast::Sender<Option<String>>,
    pub started: Instant,
    pub address: Mutex<String>,
    /// The webhook client: TLS configurations and the call log.
    pub webhooks: WebhookRuntime,
    /// The simulated kubelet's container logs.
    pub kubelet: crate::apiserver::kubelet::Kubelet,
}

impl Shared {
    pub fn new(settings: Settings) -> Arc<Self> {
        let state = State::new(
            settings.history_limit,
            StateConfig {
                establish_immediately: settings.crd_establish_delay.is_zero(),
                pod_termination_cap: settings.pod_termination_cap,
            },
        );
        let (close_tx, _) = broadcast::channel(64);
        Arc::new(Shared {
            state: Mutex::new(state),
            settings: Mutex::new(settings),
            intro: Mutex::new(Introspection::default()),
            faults: Mutex::new(Faults::default()),
            close_tx,
            started: Instant::now(),
            address: Mutex::new(String::new()),
            webhooks: WebhookRuntime::default(),
            kubelet: crate::apiserver::kubelet::Kubelet::default(),
        })
    }

    /// Starts the delayed work a request left: CRD establishment, Pod termination.
    pub fn schedule_establish(self: &Arc<Self>) {
        let (pending, reap) = {
            let mut state = lock(&self.state);
            (
                std::mem::take(&mut state.to_establish),
                std::mem::take(&mut state.to_reap),
            )
        };
        for (res, key, wait) in reap {
            let shared = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                lock(&shared.state).reap(&res, &key);
            });
        }
        if pending.is_empty() {
            return;
        }
        let delay = lock(&self.settings).crd_establish_delay;
        for name in pending {
            let shared = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                lock(&shared.state).establish_crd(&name);
            });
        }
    }
}

impl Host for Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn services(&self) -> BTreeMap<ServiceRef, String> {
        lock(&self.settings).webhook_services.clone()
    }

    fn client(&self) -> &WebhookRuntime {
        &self.webhooks
    }
}
