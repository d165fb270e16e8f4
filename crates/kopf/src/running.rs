//! Running an [`Operator`]: the commands of `main` (`run`, `rbac`, `fake-apiserver`), the
//! run loop (startup handlers, webhooks, watching, grace period, cleanup handlers) and
//! [`run()`](fn@run) for the attribute macros' handlers.

use std::future::Future;
use std::sync::Arc;

use kopf_core::metrics::Metrics;

#[cfg(feature = "testing")]
use crate::config::client_config;
#[cfg(feature = "testing")]
use crate::embedded;
use crate::error::{Error, root_cause};
use crate::fake::fake_apiserver;
use crate::operator::Operator;
use crate::signals::{stop_signal, stop_signal_then_deadline};
use crate::{cli, logging, serve};

/// Runs the handlers registered with the attribute macros: parses the command line
/// (`run -A`, `run --fake`...), connects, and serves until SIGINT/SIGTERM.
pub async fn run() -> Result<(), Error> {
    Operator::from_registry().main().await
}

impl Operator {
    /// The whole program: parses the command line (`run -n NS -A --fake ...`), sets up
    /// logging, connects to the cluster of the current kubeconfig (or, with `--fake`, to an
    /// embedded fake API server with the given manifests), and runs until SIGINT/SIGTERM.
    ///
    /// `--version` and `--help` show the operator's [`about`](Self::about) (by default: the
    /// binary's name and kopf-rs's version).
    pub async fn main(self) -> Result<(), Error> {
        let cli = cli::Cli::parse_args_for(&self.about_or_default());
        self.main_with(cli).await
    }

    /// Like [`main`](Self::main) with an already parsed command line: `run`, `rbac` or
    /// `fake-apiserver` (or the hidden probe of `kopf run`, answered on stdout).
    pub async fn main_with(self, cli: cli::Cli) -> Result<(), Error> {
        match cli.command {
            cli::Command::Run(args) => self.run_with_args(args).await,
            cli::Command::Rbac(args) => self.print_rbac(args).await,
            cli::Command::Crd(args) => self.print_crds(&args),
            cli::Command::Olm(args) => self.write_olm_bundle(&args).await,
            cli::Command::Uninstall(args) => self.print_uninstall(args).await,
            cli::Command::FakeApiserver(args) => fake_apiserver(args).await,
            cli::Command::Probe => {
                use std::io::Write;
                let line = format!("{}\n", self.about_or_default().probe_answer());
                std::io::stdout()
                    .write_all(line.as_bytes())
                    .map_err(Error::Output)
            }
        }
    }

    /// Like [`main`](Self::main) with already parsed arguments.
    ///
    /// On SIGINT/SIGTERM, the operator stops watching, lets running handlers finish within
    /// `--grace-period` (then cancels them), stops the daemons, runs the cleanup handlers
    /// and returns `Ok`. A second signal exits the process at once (status 1), and so does
    /// `--shutdown-timeout` after the first signal, whatever is still running.
    pub async fn run_with_args(mut self, args: cli::RunArgs) -> Result<(), Error> {
        // What a missing CRD's message says to do depends on the manifests the user gave.
        let given = args.apply.clone();
        let args = args.with_default_manifests(&self.fake_manifests);
        logging::init(&args);
        // Every line logged is written before this returns (or unwinds).
        let _flush = logging::FlushOnDrop;
        let namespaces = args.namespace_patterns();
        if !args.all_namespaces && !namespaces.is_empty() {
            self = self.namespace_patterns(&namespaces);
        }
        self.rate_limit = (args.qps, args.burst);
        self.request_timeout = args.request_timeout;
        if let Some(selector) = &args.label_selector {
            self.settings.label_selector = Some(selector.clone());
        }
        if let Some(selector) = &args.field_selector {
            self.settings.field_selector = Some(selector.clone());
        }
        if args.worker_limit > 0 {
            self.settings.worker_limit = Some(args.worker_limit);
        }
        self.grace_period = args.grace_period;
        self = args.storage(self);
        #[cfg(feature = "admission")]
        self.apply_webhook_args(&args);
        if (args.metrics.is_some() || args.liveness.is_some()) && self.metrics.is_none() {
            self.metrics = Some(Metrics::new());
        }
        let endpoints = match &self.metrics {
            Some(metrics) => {
                serve::start(
                    args.liveness.clone().map(|l| (l.addr, l.path)),
                    args.metrics,
                    serve::Endpoints {
                        probes: self.probes(),
                        metrics: metrics.clone(),
                    },
                )
                .await?
            }
            None => Vec::new(),
        };
        // Listening for SIGINT/SIGTERM from now on (a task, polled at once), not from when
        // the watching starts: a stop signal that comes early still stops gracefully.
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (grace, timeout) = (args.grace_period, args.shutdown_timeout);
        let signals = tokio::spawn(async move {
            stop_signal_then_deadline(grace, timeout).await;
            let _ = stop.send(());
        });
        let shutdown = async move {
            let _ = stopped.await;
        };
        let result = self.run_process(&args, &given, shutdown).await;
        if result.is_ok() {
            // The last line of a graceful stop (an error ends with its own line instead).
            tracing::info!("Stopped.");
        }
        signals.abort();
        for task in endpoints {
            task.abort();
        }
        result
    }

    /// Runs on the cluster, or with `--fake` on an embedded API server with the manifests of
    /// `args.apply` (`given`: those of the command line, for the messages).
    async fn run_process(
        mut self,
        args: &cli::RunArgs,
        given: &[std::path::PathBuf],
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), Error> {
        self.peering = args.peering(std::mem::take(&mut self.peering));
        let name = self.about_or_default().name;
        self.leader_election = args.leader_election(&name, self.leader_election.take());
        self.sharding = args.sharding(&name, self.sharding.take());
        if !args.fake {
            let (client, url) = self.connect_to().await?;
            return self
                .run_until(client, shutdown)
                .await
                .map_err(|e| match (e, url) {
                    (Error::Watch(kopf_watch::WatchError::Discovery(error)), Some(url))
                        if !matches!(error, kube::Error::Api(_)) =>
                    {
                        Error::Unreachable {
                            url: url.to_string(),
                            cause: root_cause(&error),
                            error,
                        }
                    }
                    (e, _) => e,
                });
        }
        #[cfg(feature = "testing")]
        {
            let mut builder = kopf_testing::FakeApiServer::builder().tls(args.fake_tls);
            if args.simulate_pods {
                builder = builder.simulate_pods(kopf_testing::PodSimulation::default());
            }
            let server = builder.start().await?;
            self.apply_crds(&server)?;
            for m in &args.apply {
                let n = server.apply_file(m)?;
                tracing::info!("applied {n} object(s) from {}", m.display());
            }
            server.write_kubeconfig(&args.fake_kubeconfig)?;
            // The served resources, for kubectl (an in-process discovery: two requests).
            let all = kopf_watch::discover(&server.try_client()?)
                .await
                .unwrap_or_default();
            let get = embedded::kubectl_get(&self.registrations, &all);
            tracing::info!(
                "Running against the embedded fake API server at {}. Point kubectl at it: KUBECONFIG={} {get}",
                server.url(),
                args.fake_kubeconfig.display()
            );
            let mut config = client_config(Some(&server.url()), self.inactivity_timeout).await?;
            config.root_cert = server.ca_der().map(|der| vec![der.to_vec()]);
            let url = config.cluster_url.clone();
            let client = self.wrap_client_at(
                kube::Client::try_from(config).map_err(Error::Client)?,
                Some(&url),
            );
            let fake_manifests = self.fake_manifests.clone();
            let result = self.run_until(client, shutdown).await.map_err(|e| {
                embedded::missing_crd(e, || {
                    embedded::crd_fix(embedded::Embedded::RunFake, given, &fake_manifests)
                })
            });
            server.shutdown().await;
            if args.fake_kubeconfig == cli::default_fake_kubeconfig() {
                embedded::remove_fake_kubeconfig(&args.fake_kubeconfig);
            }
            result
        }
        #[cfg(not(feature = "testing"))]
        {
            let _ = given;
            Err(Error::NoFake)
        }
    }

    #[cfg(feature = "admission")]
    fn apply_webhook_args(&mut self, args: &cli::RunArgs) {
        let server = &mut self.admission.settings.server;
        if let Some(addr) = args.webhook_addr {
            server.addr = addr;
        }
        if let Some(port) = args.webhook_port {
            server.port = port;
        }
        if let Some(host) = &args.webhook_host {
            server.host = Some(host.clone());
        }
        if let (Some(cert), Some(key)) = (&args.webhook_cert, &args.webhook_key) {
            server.cert = Some((cert.clone(), key.clone()));
        }
        if let Some(ca) = &args.webhook_ca {
            server.ca = Some(ca.clone());
        }
        if let Some(name) = &args.webhook_managed {
            self.admission.settings.managed = Some(name.clone());
        }
    }

    /// Starts the webhook server when there are admission handlers or converters: one
    /// discovery (two requests) resolves their resources.
    #[cfg(feature = "admission")]
    async fn start_webhooks(
        &self,
        client: &kube::Client,
        activities: &kopf_core::activities::ActivityContext,
    ) -> Result<Option<kopf_admission::Running>, Error> {
        if self.admission.is_empty() {
            return Ok(None);
        }
        let discovered = kopf_watch::discover(client)
            .await
            .map_err(|e| Error::Webhooks(kopf_admission::SetupError::Discovery(e)))?;
        let running = self
            .admission
            .clone()
            .start(client.clone(), &discovered, activities.extensions.clone())
            .await?;
        Ok(Some(running))
    }

    /// Runs until SIGINT or SIGTERM.
    pub async fn run(self, client: kube::Client) -> Result<(), Error> {
        self.run_until(client, stop_signal()).await
    }

    /// Runs until `shutdown` completes: one discovery for all selectors, one watch per
    /// resource (per namespace when exact namespaces are served). Then handlers still
    /// running get the [grace period](Self::grace_period) to finish.
    pub async fn run_until(
        self,
        client: kube::Client,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), Error> {
        // `shutdown` is watched beside the run, not only where the run looks at it: it also
        // ends the waits of the operator's clients (a request held by the rate limit).
        let stopping = self.stopping.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let watched = async move {
            shutdown.await;
            stopping.stop();
            let _ = stop.send(());
            std::future::pending::<std::convert::Infallible>().await
        };
        let shutdown = async move {
            let _ = stopped.await;
        };
        tokio::select! {
            result = self.serve_until(client, shutdown) => result,
            never = watched => match never {},
        }
    }

    /// [`run_until`](Self::run_until), with a `shutdown` that the run alone looks at.
    async fn serve_until(
        mut self,
        client: kube::Client,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), Error> {
        if !self.invalid.is_empty() {
            return Err(Error::Config(self.invalid.join("; ")));
        }
        let activities = self.activity_context(Some(&client));
        let (end_grace, grace) = kopf_core::layers::GraceOver::new();
        self.settings.extensions.insert(grace);
        if let Some(metrics) = &self.metrics {
            self.settings.metrics = Some(metrics.clone());
        }
        // The handler stack, assembled once for every resource's processor, daemons and
        // timers (activities have theirs, without the metrics layer).
        let stack = self.stack.build(self.metrics.as_ref());
        let grace_period = self.grace_period;
        let shutdown = async move {
            shutdown.await;
            tokio::spawn(async move {
                tokio::time::sleep(grace_period).await;
                tracing::warn!(
                    "The grace period of {}s is over: cancelling the handlers still running.",
                    grace_period.as_secs_f64()
                );
                end_grace.end();
            });
        };
        let mut shutdown = std::pin::pin!(shutdown);
        // Startup handlers run before any request of the operator's own.
        tokio::select! {
            biased;
            started = kopf_core::activities::run_startup(&self.startup, &activities) => started?,
            _ = &mut shutdown => return Ok(()),
        }
        #[cfg(feature = "admission")]
        let webhooks = match self.start_webhooks(&client, &activities).await {
            Ok(running) => running,
            Err(e) => {
                kopf_core::activities::run_cleanup(&self.cleanup, &activities).await;
                return Err(e);
            }
        };
        let mut settings = self.settings;
        settings.memo = Arc::new(self.memo);
        let mut registrations = self.registrations;
        if let Some(backoff) = self.default_backoff {
            for (i, (_, spec)) in registrations.iter_mut().enumerate() {
                if !self.explicit_backoffs.contains(&i) {
                    spec.backoff = backoff;
                }
            }
        }
        if self.leader_election.is_some() && self.sharding.is_some() {
            return Err(Error::Peering(kopf_peering::PeeringError::Settings {
                what: "leader election and sharding",
                why: "choose one: leader election (one replica acts) or sharding (each serves a part)".into(),
            }));
        }
        let mut peering_settings = self.peering;
        if self.leader_election.is_some() || self.sharding.is_some() {
            // The lease decides among the replicas; peering still pauses them all for a
            // higher priority (a developer's `--dev`, `kopf freeze`).
            peering_settings.same_priority = kopf_peering::SamePriority::Ignore;
        }
        let (gate, peering) = start_peering(&client, peering_settings, self.gate, self.gate_set);
        let (gate, election) = match self.leader_election {
            Some(settings) => {
                let (control, elected) = kopf_core::gate::Gate::channel();
                let mut elector =
                    kopf_peering::LeaderElector::new(client.clone(), settings, control)?;
                if let Some(metrics) = &self.metrics {
                    elector = elector.metrics(metrics.clone());
                }
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let task = tokio::spawn(elector.run(async move {
                    let _ = stopped.await;
                }));
                (gate.and(elected), Some(RunningPeering { stop, task }))
            }
            None => (gate, None),
        };
        let (gate, sharding) = match self.sharding {
            Some(sharding) => {
                let scope = kopf_core::shards::ScopeControl::new(sharding.count);
                settings.shards = Some(scope.clone());
                let (control, serving) = kopf_core::gate::Gate::channel();
                let coordinator =
                    kopf_peering::ShardCoordinator::new(client.clone(), sharding, scope, control)?;
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let task = tokio::spawn(coordinator.run(async move {
                    let _ = stopped.await;
                }));
                (gate.and(serving), Some(RunningPeering { stop, task }))
            }
            None => (gate, None),
        };
        let served = kopf_watch::Orchestrator::new(client, registrations)
            .settings(settings)
            .persistence(self.persistence)
            .stack(stack)
            .wait_for_resources(self.wait_for_resources)
            .gate(gate)
            .run(shutdown)
            .await;
        // The lease is released, and then the peering entry removed, once the handlers
        // are done.
        for running in [election, sharding].into_iter().flatten() {
            running.stop().await;
        }
        if let Some(peering) = peering {
            peering.stop().await;
        }
        #[cfg(feature = "admission")]
        if let Some(webhooks) = webhooks {
            webhooks.stop().await;
        }
        kopf_core::activities::run_cleanup(&self.cleanup, &activities).await;
        served?;
        Ok(())
    }
}

/// Peering or leader election running beside the engine, until [`RunningPeering::stop`].
struct RunningPeering {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), kopf_peering::PeeringError>>,
}

impl RunningPeering {
    /// Stops it (the peering entry is removed, the lease released) and waits for it.
    async fn stop(self) {
        let _ = self.stop.send(());
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("Peering ended with an error: {e}"),
            Err(e) => tracing::warn!("Peering ended abnormally: {e}"),
        }
    }
}

/// Starts peering unless standalone; the gate the engine observes: peering's, combined with
/// the operator's own when one was given.
fn start_peering(
    client: &kube::Client,
    settings: kopf_peering::PeeringSettings,
    own: kopf_core::gate::Gate,
    own_set: bool,
) -> (kopf_core::gate::Gate, Option<RunningPeering>) {
    if settings.mode == kopf_peering::PeeringMode::Standalone {
        return (own, None);
    }
    let (control, gate) = kopf_core::gate::Gate::channel();
    let gate = if own_set { gate.and(own) } else { gate };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let peering = kopf_peering::Peering::new(client.clone(), settings, control);
    let task = tokio::spawn(peering.run(async move {
        let _ = stopped.await;
    }));
    (gate, Some(RunningPeering { stop, task }))
}
