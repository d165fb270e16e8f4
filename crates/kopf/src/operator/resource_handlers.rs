//! The [`Operator`]'s handlers of objects: changing handlers (create, update, delete,
//! resume, field), raw event handlers, indexes, timers and daemons.

use kopf_core::causes::Reason;
use kopf_core::daemons::{DaemonOptions, TimerOptions};
use kopf_core::extract::{IntoHandler, IntoIndexer};
use kopf_core::handler::{HandlerSpec, Options};
use kopf_watch::Selector;

use super::Operator;

impl Operator {
    /// A handler for a reason with options (filters, retries, timeout, backoff, errors
    /// mode). `Reason::Resume` registers a resume handler.
    pub fn on_with<Args>(
        self,
        reason: Reason,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
        options: Options,
    ) -> Self {
        let handler = handler.into_handler();
        let spec = match reason {
            Reason::Resume => HandlerSpec::resume_handler(id, handler),
            reason => HandlerSpec::from_arc(id, Some(reason), handler),
        };
        self.register(resource, spec, options)
    }

    /// A creation handler: runs once per object, when it is first seen with no diff-base
    /// (Kopf's `@kopf.on.create`); what it returns lands in `status.<id>`.
    ///
    /// ```
    /// use kopf::{HandlerError, Operator, Selector, handler::Spec};
    ///
    /// async fn create_fn(Spec(spec): Spec) -> Result<String, HandlerError> {
    ///     Ok(format!("created with {}", spec["field"]))
    /// }
    /// let operator = Operator::new()
    ///     .on_create("kopfexamples", "create_fn", create_fn)
    ///     // Or by type: Selector::of::<MyResource>() for a #[derive(CustomResource)] type.
    ///     .on_create(Selector::of::<k8s_openapi::api::core::v1::ConfigMap>(), "cm_fn", create_fn);
    /// # let _ = operator;
    /// ```
    pub fn on_create<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_with(Reason::Create, resource, id, handler, Options::default())
    }

    /// An update handler: runs when the object's essence (spec, labels, annotations...)
    /// changed since the last handled state; `Diff`, `Old` and `New` tell what changed.
    ///
    /// ```
    /// use kopf::{HandlerError, Operator, handler::Diff};
    ///
    /// let operator = Operator::new().on_update("kopfexamples", "update_fn", |Diff(diff): Diff| async move {
    ///     Ok::<_, HandlerError>(format!("{} change(s)", diff.len()))
    /// });
    /// # let _ = operator;
    /// ```
    pub fn on_update<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_with(Reason::Update, resource, id, handler, Options::default())
    }

    /// A deletion handler: runs when the object is being deleted, before it goes (the
    /// operator puts its finalizer on every object before any handler of it runs, unless the
    /// handler is registered with `Options::optional`).
    ///
    /// ```
    /// use kopf::{HandlerError, Operator, handler::Name};
    ///
    /// let operator = Operator::new().on_delete("kopfexamples", "delete_fn", |Name(name): Name| async move {
    ///     kopf::tracing::info!("cleaning up after {name}");
    ///     Ok::<_, HandlerError>(())
    /// });
    /// # let _ = operator;
    /// ```
    pub fn on_delete<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_with(Reason::Delete, resource, id, handler, Options::default())
    }

    /// A resume handler: runs for objects found when the operator starts (already handled,
    /// unchanged since), e.g. to restart in-memory work.
    ///
    /// ```
    /// use kopf::{HandlerError, Operator};
    ///
    /// let operator = Operator::new().on_resume("kopfexamples", "resume_fn", || async {
    ///     Ok::<_, HandlerError>(())
    /// });
    /// # let _ = operator;
    /// ```
    pub fn on_resume<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_with(Reason::Resume, resource, id, handler, Options::default())
    }

    /// A field handler: runs when the dotted `field` changes (also on creation when set).
    /// Its id gets the field as a suffix: `<id>/<field>`; `Old` and `New` are the field's.
    ///
    /// ```
    /// use kopf::{HandlerError, Operator, handler::{New, Old}};
    ///
    /// let operator = Operator::new().on_field("kopfexamples", "field_fn", "spec.size",
    ///     |Old(old): Old, New(new): New| async move {
    ///         Ok::<_, HandlerError>(format!("{old:?} -> {new:?}"))
    ///     });
    /// # let _ = operator;
    /// ```
    pub fn on_field<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        field: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_field_with(resource, id, field, handler, Options::default())
    }

    /// A field handler with options (`old`/`new`/`value` filters among them).
    pub fn on_field_with<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        field: &str,
        handler: impl IntoHandler<Args>,
        options: Options,
    ) -> Self {
        let spec = HandlerSpec::field_handler(id, field, handler.into_handler());
        self.register(resource, spec, options)
    }

    /// A raw event handler: called for every watch event of matching objects (the
    /// [`EventType`](crate::handler::EventType) argument tells which), with no state kept; errors are logged and
    /// ignored; it needs no finalizer.
    pub fn on_event<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_event_with(resource, id, handler, Options::default())
    }

    /// A raw event handler with filters: labels, annotations, `when`, and owners. With an
    /// owner filter it is a children handler: it runs for the events of objects owned by the
    /// given kind, and the [`Owner`](crate::handler::Owner) argument names the owner to act on.
    ///
    /// ```
    /// use kopf::{HandlerError, Operator, Options, handler::Owner};
    ///
    /// // Every change of a Pod whose controller is a TrainingJob, with the job's name.
    /// let operator = Operator::new().on_event_with(
    ///     "pods",
    ///     "pod_of_job",
    ///     |Owner(job): Owner| async move {
    ///         kopf::tracing::info!("a pod of {} changed", job.name);
    ///         Ok::<_, HandlerError>(())
    ///     },
    ///     Options::new().controller_owner("example.com/TrainingJob"),
    /// );
    /// # let _ = operator;
    /// ```
    pub fn on_event_with<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: impl IntoHandler<Args>,
        options: Options,
    ) -> Self {
        let spec = HandlerSpec::event(id, handler.into_handler());
        self.register(resource, spec, options)
    }

    /// A pod-log handler: called for each line of the logs of matching Pods' containers in
    /// which `regex` finds a match, with the line ([`LogLine`](crate::handler::LogLine)) and the
    /// regex's groups ([`Captures`](crate::handler::Captures)), besides the usual arguments (the Pod's
    /// `Body`, `Owner`, `Client`...). Each container's lines come in order, each once, across
    /// dropped streams and container restarts (see [`LogSpec`](crate::handler::LogSpec)). An invalid
    /// regex stops the operator at its start, with the handler's id.
    ///
    /// ```
    /// use kopf::{HandlerError, Operator, handler::{Captures, LogLine}};
    ///
    /// let operator = Operator::new().on_log(
    ///     "pods",
    ///     "accuracy",
    ///     r"accuracy=(?P<acc>\d+\.\d+)",
    ///     |line: LogLine, caps: Captures| async move {
    ///         kopf::tracing::info!("{} says {:?}", line.pod, caps.name("acc"));
    ///         Ok::<_, HandlerError>(())
    ///     },
    /// );
    /// # let _ = operator;
    /// ```
    pub fn on_log<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        regex: &str,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        self.on_log_configured(
            resource,
            id,
            regex,
            |spec| spec,
            handler,
            Options::default(),
        )
    }

    /// [`on_log_with`](Self::on_log_with) with the regex as text and the rest of the
    /// [`LogSpec`](crate::handler::LogSpec) set by `configure` (what `#[kopf::on::log]` registers);
    /// an invalid regex stops the operator at its start, with the handler's id.
    pub fn on_log_configured<Args>(
        mut self,
        resource: impl Into<Selector>,
        id: &str,
        regex: &str,
        configure: impl FnOnce(kopf_watch::LogSpec) -> kopf_watch::LogSpec,
        handler: impl IntoHandler<Args>,
        options: Options,
    ) -> Self {
        match kopf_watch::LogSpec::new(regex) {
            Ok(spec) => self.on_log_with(resource, id, configure(spec), handler, options),
            Err(e) => {
                self.invalid.push(format!(
                    "the regex of the log handler '{id}' is invalid: {e}"
                ));
                self
            }
        }
    }

    /// A pod-log handler with its [`LogSpec`](crate::handler::LogSpec) (containers, where to start,
    /// idle timeout) and filters (labels, annotations, owners, `when`: which Pods).
    pub fn on_log_with<Args>(
        mut self,
        resource: impl Into<Selector>,
        id: &str,
        spec: kopf_watch::LogSpec,
        handler: impl IntoHandler<Args>,
        options: Options,
    ) -> Self {
        let follower = kopf_watch::log_follower(
            std::sync::Arc::new(spec),
            id.to_string(),
            handler.into_handler(),
        );
        // The followers read the Pod (a restart) and its log.
        self.rbac_rules.push(serde_json::json!({
            "apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get"],
        }));
        // No finalizer: a follower stops when its Pod goes.
        let spec = HandlerSpec::daemon(id, DaemonOptions::new(), follower);
        self.register(resource, spec, options.optional())
    }

    /// An index: the handler returns key/value pairs for each object (a map, a vector of
    /// pairs, a pair, or an `Option` of one: `None` keeps the previous entries); every
    /// handler reads them with the [`Index<K, V>`](crate::handler::Index) argument. Entries go when the object is
    /// deleted or stops matching; handlers start only once the first listing of every
    /// indexed resource is indexed.
    pub fn index<Args, H: IntoIndexer<Args>>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        handler: H,
    ) -> Self {
        let types = kopf_core::index::IndexTypes::of::<H::Key, H::Value>();
        self.settings.indexes.declare(id, types);
        let spec = HandlerSpec::index(id, types, handler.into_indexer());
        self.register(resource, spec, Options::default())
    }

    /// A timer for each matching object (see [`TimerOptions`]); its result goes to
    /// `status.<id>` after each call. Filters go with [`register`](Self::register) and
    /// [`HandlerSpec::timer`].
    pub fn timer<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        options: TimerOptions,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        let spec = HandlerSpec::timer(id, options, handler.into_handler());
        self.register(resource, spec, Options::default())
    }

    /// A daemon for each matching object (see [`DaemonOptions`]): it runs until it
    /// returns, and is asked to stop (the [`Stopped`](crate::handler::Stopped) argument) when the object is deleted
    /// or stops matching, or the operator exits.
    pub fn daemon<Args>(
        self,
        resource: impl Into<Selector>,
        id: &str,
        options: DaemonOptions,
        handler: impl IntoHandler<Args>,
    ) -> Self {
        let spec = HandlerSpec::daemon(id, options, handler.into_handler());
        self.register(resource, spec, Options::default())
    }
}
