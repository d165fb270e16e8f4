//! Handlers registered by the attribute macros (`#[kopf::on::create(...)]` and the others
//! of [`kopf::on`](crate::on)), collected at link time and turned into an
//! [`Operator`] by [`Operator::from_registry`] (which [`kopf::run()`](fn@crate::run) uses).
//!
//! The types here are what the macros expand to; there is no need to write them by hand.

use std::future::Future;
use std::sync::Arc;

use kopf_core::extract::IntoIndexer;
use kopf_core::handler::{FieldFilter, Handler, HandlerError, HandlerKind, HandlerSpec, Options};
use serde_json::Value;

use crate::operator::Operator;

/// The kind of a handler of objects registered by a macro.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `#[kopf::on::create]`.
    Create,
    /// `#[kopf::on::update]`.
    Update,
    /// `#[kopf::on::delete]`.
    Delete,
    /// `#[kopf::on::resume]`.
    Resume,
    /// `#[kopf::on::field]`.
    Field,
    /// `#[kopf::on::timer]`.
    Timer,
    /// `#[kopf::on::daemon]`.
    Daemon,
    /// `#[kopf::on::index]`.
    Index,
    /// `#[kopf::on::event]`.
    Event,
}

/// One handler of objects registered by a macro.
pub struct Registration {
    /// The resource selector.
    pub resource: &'static str,
    /// The handler id.
    pub id: &'static str,
    /// Which kind of handler.
    pub kind: Kind,
    /// Builds the handler with its id and kind (and a timer's or daemon's own options).
    pub make: fn() -> HandlerSpec,
    /// Builds the options (filters, retries, timeouts...).
    pub options: fn() -> Options,
    /// Where it was registered (handlers run in source order).
    pub file: &'static str,
    /// See `file`.
    pub line: u32,
}

inventory::collect!(Registration);

/// The kind of an activity registered by a macro.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// `#[kopf::on::startup]`.
    Startup,
    /// `#[kopf::on::cleanup]`.
    Cleanup,
    /// `#[kopf::on::probe]`.
    Probe,
}

/// One activity (startup, cleanup or probe handler) registered by a macro.
pub struct ActivityRegistration {
    /// Which activity.
    pub activity: Activity,
    /// The handler id.
    pub id: &'static str,
    /// Builds the handler.
    pub make: fn() -> Arc<dyn Handler>,
    /// Builds the options (retries, timeout...).
    pub options: fn() -> Options,
    /// Where it was registered (activities run in source order).
    pub file: &'static str,
    /// See `file`.
    pub line: u32,
}

inventory::collect!(ActivityRegistration);

/// A login function, as [`login_handler`] wraps it.
pub struct LoginHandler(crate::login::LoginFn);

impl std::fmt::Debug for LoginHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoginHandler")
    }
}

/// Wraps a login function (what `#[kopf::on::login]` registers): as
/// [`Operator::on_login`] takes it.
pub fn login_handler<F, Fut, E>(login: F) -> LoginHandler
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<kube::Config, E>> + Send + 'static,
    E: Into<HandlerError> + 'static,
{
    LoginHandler(Arc::new(move || {
        let fut = login();
        Box::pin(async move { fut.await.map_err(Into::into) })
    }))
}

/// One login handler registered by `#[kopf::on::login]`.
pub struct LoginRegistration {
    /// Builds the login function.
    pub make: fn() -> LoginHandler,
    /// Where it was registered (several are tried in source order).
    pub file: &'static str,
    /// See `file`.
    pub line: u32,
}

inventory::collect!(LoginRegistration);

/// The spec of an index handler (what `#[kopf::on::index]` registers): its key and value
/// types come from the handler's return type, as with [`Operator::index`].
pub fn index_spec<Args, H: IntoIndexer<Args>>(id: &str, handler: H) -> HandlerSpec {
    let types = kopf_core::index::IndexTypes::of::<H::Key, H::Value>();
    HandlerSpec::index(id, types, handler.into_indexer())
}

/// One pod-log handler registered by `#[kopf::on::log]`: applied to the operator with
/// [`Operator::on_log_configured`].
pub struct LogRegistration {
    /// Adds the handler.
    pub apply: fn(Operator) -> Operator,
    /// Where it was written (registrations are applied in source order).
    pub file: &'static str,
    /// The line.
    pub line: u32,
}

inventory::collect!(LogRegistration);

/// One reconcile registered by `#[kopf::reconcile]`: the resource's [`Reconciler`] with its
/// options, applied to the operator with [`Operator::reconcile_with`].
///
/// [`Reconciler`]: crate::Reconciler
pub struct ReconcileRegistration {
    /// The resource selector.
    pub resource: &'static str,
    /// The reconcile's id.
    pub id: &'static str,
    /// Adds the reconcile (`op.reconcile_with(Reconciler::new(...)...)`).
    pub apply: fn(Operator) -> Operator,
    /// Where it was registered.
    pub file: &'static str,
    /// See `file`.
    pub line: u32,
}

inventory::collect!(ReconcileRegistration);

/// One admission handler registered by `#[kopf::on::validate]` or `#[kopf::on::mutate]`.
#[cfg(feature = "admission")]
pub struct WebhookRegistration {
    /// The resource selector.
    pub resource: &'static str,
    /// The handler id.
    pub id: &'static str,
    /// Validating or mutating.
    pub kind: kopf_admission::WebhookKind,
    /// Builds the handler.
    pub make: fn() -> Arc<dyn Handler>,
    /// Builds the options.
    pub options: fn() -> kopf_admission::WebhookOptions,
    /// Where it was registered.
    pub file: &'static str,
    /// See `file`.
    pub line: u32,
}

#[cfg(feature = "admission")]
inventory::collect!(WebhookRegistration);

/// One conversion function registered by `#[kopf::on::convert]`.
#[cfg(feature = "admission")]
pub struct ConverterRegistration {
    /// The CRD's name (`<plural>.<group>`).
    pub crd: &'static str,
    /// Builds the converter.
    pub make: fn() -> kopf_admission::Converter,
    /// Where it was registered.
    pub file: &'static str,
    /// See `file`.
    pub line: u32,
}

#[cfg(feature = "admission")]
inventory::collect!(ConverterRegistration);

/// The registrations of type `T`, in the order of their source files and lines: link order
/// is not source order, and handlers run in the order of their attributes, as Kopf runs
/// them in the order of their decorators.
fn in_source_order<T: inventory::Collect>(
    place: impl Fn(&T) -> (&'static str, u32),
) -> Vec<&'static T> {
    let mut regs: Vec<&'static T> = inventory::iter::<T>.into_iter().collect();
    regs.sort_by_key(|r| place(r));
    regs
}

/// For timers, daemons, indexes and raw event handlers, `field` (and `value`) filter the
/// objects by the field's value, as Kopf does: a filter on the body, next to `when` (they
/// have no old and new states to compare). The id gets the field as a suffix, except an
/// index's (it is the index's name).
fn field_as_filter(options: &mut Options, spec: &mut HandlerSpec, suffix: bool) {
    let Some(field) = options.field.take() else {
        return;
    };
    let path = kopf_core::handler::split_field(&field);
    let value = options.value.take().unwrap_or(FieldFilter::Present);
    let when = options.when.take();
    options.when = Some(Arc::new(move |body: &Value| {
        value.check(kopf_diff::resolve(Some(body), &path)) && when.as_ref().is_none_or(|w| w(body))
    }));
    if suffix {
        spec.id = format!("{}/{field}", spec.id);
    }
}

impl Operator {
    /// An operator with every handler registered by the attribute macros of
    /// [`kopf::on`](crate::on) in this binary: handlers of objects, activities, login
    /// handlers, admission handlers and converters; and the reconciles of
    /// [`#[kopf::reconcile]`](macro@crate::reconcile). Further builder calls add to them.
    pub fn from_registry() -> Self {
        let mut op = Operator::new();
        for r in in_source_order::<Registration>(|r| (r.file, r.line)) {
            let mut spec = (r.make)();
            let mut options = (r.options)();
            match r.kind {
                Kind::Timer | Kind::Daemon | Kind::Event => {
                    field_as_filter(&mut options, &mut spec, true);
                }
                Kind::Index => {
                    field_as_filter(&mut options, &mut spec, false);
                    if let HandlerKind::Index(types) = &spec.kind {
                        // Declared now, so that probes find the index before any watch.
                        op.settings.indexes.declare(&spec.id, *types);
                    }
                }
                Kind::Create | Kind::Update | Kind::Delete | Kind::Resume | Kind::Field => {}
            }
            op = op.register(r.resource, spec, options);
        }
        for r in in_source_order::<ReconcileRegistration>(|r| (r.file, r.line)) {
            op = (r.apply)(op);
        }
        for r in in_source_order::<LogRegistration>(|r| (r.file, r.line)) {
            op = (r.apply)(op);
        }
        for r in in_source_order::<ActivityRegistration>(|r| (r.file, r.line)) {
            let spec = HandlerSpec::from_arc(r.id, None, (r.make)()).with_options((r.options)());
            match r.activity {
                Activity::Startup => op.startup.push(spec),
                Activity::Cleanup => op.cleanup.push(spec),
                Activity::Probe => op.probes.push(spec),
            }
        }
        let logins: Vec<crate::login::LoginFn> =
            in_source_order::<LoginRegistration>(|r| (r.file, r.line))
                .into_iter()
                .map(|r| (r.make)().0)
                .collect();
        op.login = match logins.len() {
            0 => op.login,
            1 => logins.into_iter().next(),
            _ => Some(first_successful_login(logins)),
        };
        #[cfg(feature = "admission")]
        {
            for r in in_source_order::<WebhookRegistration>(|r| (r.file, r.line)) {
                op.admission
                    .handlers
                    .push(kopf_admission::WebhookHandler::new(
                        r.kind,
                        r.resource,
                        r.id,
                        (r.make)(),
                        (r.options)(),
                    ));
            }
            for r in in_source_order::<ConverterRegistration>(|r| (r.file, r.line)) {
                op.admission.converters.push((r.make)());
            }
        }
        op
    }
}

/// Several login handlers: tried in order, the first configuration obtained is used (the
/// failures before it are logged); if all fail, the last error.
fn first_successful_login(logins: Vec<crate::login::LoginFn>) -> crate::login::LoginFn {
    let logins = Arc::new(logins);
    Arc::new(move || {
        let logins = logins.clone();
        Box::pin(async move {
            let mut last = HandlerError::permanent("no login handler is registered");
            for (n, login) in logins.iter().enumerate() {
                match login().await {
                    Ok(config) => return Ok(config),
                    Err(e) => {
                        tracing::warn!("Login handler #{} failed: {e}", n + 1);
                        last = e;
                    }
                }
            }
            Err(last)
        })
    })
}
