//! Handlers registered by the attribute macros (`#[kopf::on::create(...)]`), collected at
//! link time and turned into an [`Operator`](crate::Operator) by [`crate::run`].

use std::sync::Arc;

use kopf_core::handler::{Handler, HandlerSpec};

use crate::{Operator, Options, Reason};

/// The kind of a registered handler.
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
}

/// One handler registered by a macro.
pub struct Registration {
    /// The resource selector.
    pub resource: &'static str,
    /// The handler id.
    pub id: &'static str,
    /// Which kind of handler.
    pub kind: Kind,
    /// The field of field handlers.
    pub field: Option<&'static str>,
    /// Builds the handler.
    pub make: fn() -> Arc<dyn Handler>,
    /// Builds the options (filters, retries, timeouts...).
    pub options: fn() -> Options,
    /// Where it was registered (handlers run in source order).
    pub file: &'static str,
    /// See `file`.
    pub line: u32,
}

inventory::collect!(Registration);

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

impl Operator {
    /// An operator with every handler registered by the attribute macros in this binary.
    pub fn from_registry() -> Self {
        let mut regs: Vec<&Registration> = inventory::iter::<Registration>.into_iter().collect();
        // Link order is not source order: run handlers in the order of their source files
        // and lines, as Kopf runs them in the order of their decorators.
        regs.sort_by_key(|r| (r.file, r.line));
        let mut op = Operator::new();
        for r in regs {
            let handler = (r.make)();
            let mut options = (r.options)();
            let spec = match r.kind {
                Kind::Create => HandlerSpec::from_arc(r.id, Some(Reason::Create), handler),
                Kind::Update => HandlerSpec::from_arc(r.id, Some(Reason::Update), handler),
                Kind::Delete => HandlerSpec::from_arc(r.id, Some(Reason::Delete), handler),
                Kind::Resume => HandlerSpec::resume_handler(r.id, handler),
                Kind::Field => {
                    HandlerSpec::field_handler(r.id, r.field.unwrap_or_default(), handler)
                }
            };
            if r.kind != Kind::Field {
                options.field = r.field.map(str::to_string);
            }
            op = op.register(r.resource, spec, options);
        }
        #[cfg(feature = "admission")]
        {
            let mut hooks: Vec<&WebhookRegistration> =
                inventory::iter::<WebhookRegistration>.into_iter().collect();
            hooks.sort_by_key(|r| (r.file, r.line));
            for r in hooks {
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
        }
        op
    }
}
