#![warn(missing_docs)]
//! # kopf
//!
//! Kubernetes operators in a few lines of Rust, with Kopf's handler model and wire format:
//! register handlers for resources, and the framework watches, detects causes from the
//! diff-base, runs the handlers with retries, keeps the finalizer, stores results in
//! `status.<handler-id>` and progress in annotations — with at most one PATCH per endpoint
//! per processing cycle.
//!
//! Handler arguments are extractors (the axum pattern): `Spec<T>`, `Name`, `Namespace`,
//! `Labels`, `Body`, `Meta`, `Status<T>`, `Old<T>`, `New<T>`, `Diff`, `Reason`, `Retry`,
//! `Started`, `Runtime`, `PatchHandle`, `EventsHandle`, or the whole `Cause`.
//!
//! ```no_run
//! use kopf::{HandlerError, Name, Operator, Spec};
//! use serde_json::{json, Value};
//!
//! async fn create_fn(Spec(spec): Spec, Name(name): Name) -> Result<Value, HandlerError> {
//!     tracing::info!("created {name} with field {}", spec["field"]);
//!     Ok(json!({"message": "hello world"}))       // lands in status.create_fn
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), kopf::Error> {
//!     Operator::new()
//!         .on_create("kopfexamples", "create_fn", create_fn)
//!         .main()                                  // `run -A`, `run --fake`, ...
//!         .await
//! }
//! ```
//!
//! This is the first slice of the engine: create, update, delete, resume and field handlers,
//! temporary/permanent errors with retries, finalizers and progress in Kopf's format. Timers,
//! daemons, indexes, filters, sub-handlers, extractors, macros and the `kopf run` command line
//! come next.

pub mod cli;
pub mod registry;

// The attribute macros expand to `::kopf::...` paths, also inside this crate's own tests.
extern crate self as kopf;

#[doc(hidden)]
pub use inventory;

/// Attribute macros that register handlers for [`run`]: `#[kopf::on::create("kopfexamples")]`,
/// `update`, `delete`, `resume`, and `field(..., field = "spec.x")`.
pub mod on {
    pub use kopf_macros::{create, delete, field, resume, update};
}

/// Runs the handlers registered with the attribute macros: parses the command line
/// (`run -A`, `run --fake`...), connects, and serves until SIGINT/SIGTERM.
pub async fn run() -> Result<(), Error> {
    Operator::from_registry().main().await
}

use std::future::Future;
use std::time::Duration;

use clap::Parser;

pub use kopf_core::causes::Reason;
pub use kopf_core::extract::{
    Annotations, Body, Diff as DiffArg, FromCause, IntoHandler, IntoHandlerResult, Labels, Meta,
    Name, Namespace, New, Old, PermanentError, Retry, Runtime, Spec, Started, Status,
    TemporaryError, Uid,
};
pub use kopf_core::handler::{
    Cause, ErrorsMode, Handler, HandlerError, HandlerResult, HandlerSpec, MetaFilter, WhenFilter,
};
pub use kopf_core::handler::{EventsHandle, PatchHandle};
pub use kopf_core::processing::{Lifecycle, Persistence};
pub use kopf_diff::{Diff, DiffItem, Op};
pub use kopf_watch::{Discovered, Selector};

/// Errors of running an operator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No Kubernetes client could be built.
    #[error("cannot connect to Kubernetes: {0}")]
    Client(#[source] kube::Error),
    /// A resource could not be served.
    #[error(transparent)]
    Watch(#[from] kopf_watch::WatchError),
    /// The embedded fake API server failed.
    #[cfg(feature = "testing")]
    #[error(transparent)]
    Fake(#[from] kopf_testing::FakeError),
    /// `--fake` was given to a binary built without the `testing` feature.
    #[error("--fake needs kopf's `testing` feature (on by default)")]
    NoFake,
}

/// Options of one handler registration.
#[derive(Clone, Default)]
pub struct Options {
    /// Label filters: the handler runs only for objects whose labels pass all of them.
    pub labels: Vec<(String, MetaFilter)>,
    /// Annotation filters.
    pub annotations: Vec<(String, MetaFilter)>,
    /// A filter on the whole object, evaluated last.
    pub when: Option<WhenFilter>,
    /// Maximum attempts.
    pub retries: Option<u32>,
    /// Maximum time since the first attempt.
    pub timeout: Option<Duration>,
    /// Delay before retrying after arbitrary errors (default 60 s).
    pub backoff: Option<Duration>,
    /// What to do with arbitrary errors.
    pub errors: Option<ErrorsMode>,
    /// Delete handlers: do not require the finalizer.
    pub optional: bool,
}

/// An operator: handlers per resource, run until stopped.
#[derive(Default, Clone)]
pub struct Operator {
    registrations: Vec<(Selector, HandlerSpec)>,
    namespace: Option<String>,
    filter: kopf_watch::NamespaceSelector,
    worker_limit: Option<usize>,
    streaming_lists: bool,
    persistence: Persistence,
}

impl Operator {
    /// An operator without handlers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a handler with options.
    pub fn register(
        mut self,
        resource: impl Into<Selector>,
        mut spec: HandlerSpec,
        options: Options,
    ) -> Self {
        if let Some(r) = options.retries {
            spec.retries = Some(r);
        }
        spec.timeout = options.timeout.or(spec.timeout);
        if let Some(b) = options.backoff {
            spec.backoff = b;
        }
        if let Some(e) = options.errors {
            spec.errors = e;
        }
        if options.optional {
            spec.requires_finalizer = false;
        }
        spec.labels.extend(options.labels);
        spec.annotations.extend(options.annotations);
        if options.when.is_some() {
            spec.when = options.when;
        }
        self.registrations.push((resource.into(), spec));
        self
    }

    /// A handler for a reason with options (retries, timeout, backoff, errors mode, filters).
    pub fn on_with<Args>(
        self,
        reason: Reason,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
        options: Options,
    ) -> Self {
        let spec = HandlerSpec::from_arc(id, Some(reason), handler.into_handler());
        self.register(resource, spec, options)
    }

    /// A creation handler.
    pub fn on_create<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        let spec = HandlerSpec::from_arc(id, Some(Reason::Create), handler.into_handler());
        self.register(resource, spec, Options::default())
    }

    /// An update handler.
    pub fn on_update<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        let spec = HandlerSpec::from_arc(id, Some(Reason::Update), handler.into_handler());
        self.register(resource, spec, Options::default())
    }

    /// A deletion handler (requires the finalizer unless registered with `optional`).
    pub fn on_delete<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        let spec = HandlerSpec::from_arc(id, Some(Reason::Delete), handler.into_handler());
        self.register(resource, spec, Options::default())
    }

    /// A resume handler: runs for objects found when the operator starts.
    pub fn on_resume<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        let mut spec = HandlerSpec::from_arc(id, None, handler.into_handler());
        spec.initial = true;
        self.register(resource, spec, Options::default())
    }

    /// A field handler: runs when the dotted `field` changes (also on creation when set).
    /// Its id gets the field as a suffix: `<id>/<field>`.
    pub fn on_field<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        field: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        let mut spec = HandlerSpec::from_arc(format!("{id}/{field}"), None, handler.into_handler());
        spec.field = Some(field.split('.').map(str::to_string).collect());
        self.register(resource, spec, Options::default())
    }

    /// Serve only one namespace (default: all namespaces).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Serve namespaces matching `-n`-style patterns (`team-*`, `!kube-*`, `a,b`) through one
    /// cluster-wide watch.
    pub fn namespace_patterns<S: AsRef<str>>(mut self, patterns: &[S]) -> Self {
        self.filter = kopf_watch::NamespaceSelector::new(patterns);
        self
    }

    /// Which ready handlers run per cycle (default: all at once, one PATCH per endpoint;
    /// `Lifecycle::Asap` is Kopf's one-handler-per-cycle default).
    pub fn lifecycle(mut self, lifecycle: Lifecycle) -> Self {
        self.persistence.lifecycle = lifecycle;
        self
    }

    /// Start watching with streaming lists (`sendInitialEvents`) instead of list + watch.
    pub fn streaming_lists(mut self, on: bool) -> Self {
        self.streaming_lists = on;
        self
    }

    /// Process at most this many objects at the same time.
    pub fn worker_limit(mut self, limit: usize) -> Self {
        self.worker_limit = Some(limit);
        self
    }

    /// Where state is kept on objects (prefix, finalizer...).
    pub fn persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }

    /// The whole program: parses the command line (`run -n NS -A --fake ...`), sets up
    /// logging, connects to the cluster of the current kubeconfig (or, with `--fake`, to an
    /// embedded fake API server with the given manifests), and runs until SIGINT/SIGTERM.
    pub async fn main(self) -> Result<(), Error> {
        let cli::Command::Run(args) = cli::Cli::parse().command;
        self.run_with_args(args).await
    }

    /// Like [`main`](Self::main) with already parsed arguments.
    pub async fn run_with_args(mut self, args: cli::RunArgs) -> Result<(), Error> {
        cli::init_logging(&args);
        if !args.namespaces.is_empty() && !args.all_namespaces {
            // One namespace is served by one watch; several by one watch each.
            if args.namespaces.len() > 1 {
                tracing::warn!("several namespaces are served one watch each");
            }
        }
        let namespaces = if args.all_namespaces {
            Vec::new()
        } else {
            args.namespaces.clone()
        };
        if !args.fake {
            let client = kube::Client::try_default().await.map_err(Error::Client)?;
            return self.run_namespaces(client, namespaces).await;
        }
        #[cfg(feature = "testing")]
        {
            let server = kopf_testing::FakeApiServer::start().await?;
            for m in &args.apply {
                let n = server.apply_file(m)?;
                tracing::info!("applied {n} object(s) from {}", m.display());
            }
            server.write_kubeconfig(&args.fake_kubeconfig)?;
            tracing::info!(
                "Running against the embedded fake API server at {}. Point kubectl at it: KUBECONFIG={} kubectl get all",
                server.url(),
                args.fake_kubeconfig.display()
            );
            let client = server.client();
            self.namespace = None;
            let result = self.run_namespaces(client, namespaces).await;
            server.shutdown().await;
            result
        }
        #[cfg(not(feature = "testing"))]
        {
            Err(Error::NoFake)
        }
    }

    async fn run_namespaces(
        self,
        client: kube::Client,
        namespaces: Vec<String>,
    ) -> Result<(), Error> {
        let shutdown = async {
            #[cfg(unix)]
            {
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
                }
            }
            #[cfg(not(unix))]
            {
                let _ = tokio::signal::ctrl_c().await;
            }
            tracing::info!("Stop requested; stopping.");
        };
        match namespaces.as_slice() {
            [] => self.run_until(client, shutdown).await,
            [one] => {
                let ns = one.clone();
                self.namespace(ns).run_until(client, shutdown).await
            }
            many => {
                let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
                let mut tasks = Vec::new();
                for ns in many {
                    let mut op = self.clone();
                    op.namespace = Some(ns.clone());
                    let client = client.clone();
                    let mut rx = stop_rx.clone();
                    tasks.push(tokio::spawn(async move {
                        op.run_until(client, async move {
                            let _ = rx.wait_for(|s| *s).await;
                        })
                        .await
                    }));
                }
                shutdown.await;
                let _ = stop_tx.send(true);
                for t in tasks {
                    if let Ok(Err(e)) = t.await {
                        return Err(e);
                    }
                }
                Ok(())
            }
        }
    }

    /// Runs until SIGINT (Ctrl-C).
    pub async fn run(self, client: kube::Client) -> Result<(), Error> {
        self.run_until(client, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
    }

    /// Runs until `shutdown` completes.
    pub async fn run_until(
        self,
        client: kube::Client,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), Error> {
        // One discovery for all selectors; one engine per resolved resource with every
        // handler whose selector names it.
        let served = kopf_watch::discover(&client).await?;
        let mut by_resource: Vec<(kopf_watch::Discovered, Vec<HandlerSpec>)> = Vec::new();
        for (selector, spec) in self.registrations {
            for found in selector.resolve(&served)? {
                match by_resource
                    .iter_mut()
                    .find(|(d, _)| d.api_resource == found.api_resource)
                {
                    Some((_, specs)) => specs.push(spec.clone()),
                    None => by_resource.push((found, vec![spec.clone()])),
                }
            }
        }
        let mut engines = Vec::new();
        for (found, specs) in by_resource {
            engines.push(
                kopf_watch::Engine::new(client.clone(), found.into(), specs)
                    .namespace(self.namespace.clone())
                    .namespace_filter(self.filter.clone())
                    .worker_limit(self.worker_limit)
                    .streaming_lists(self.streaming_lists)
                    .persistence(self.persistence.clone()),
            );
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        for engine in engines {
            let mut rx = stop_rx.clone();
            tasks.push(tokio::spawn(async move {
                engine
                    .run(async move {
                        let _ = rx.wait_for(|stop| *stop).await;
                    })
                    .await
            }));
        }
        shutdown.await;
        let _ = stop_tx.send(true);
        for t in tasks {
            match t.await {
                Ok(Err(e)) => return Err(e.into()),
                Ok(Ok(())) => {}
                Err(e) => tracing::error!(error = %e, "a resource's watcher stopped abnormally"),
            }
        }
        Ok(())
    }
}
