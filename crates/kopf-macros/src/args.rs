//! The attribute's arguments checked against what its kind takes, as the pieces of the
//! generated registration (target, id, field, option method calls, timer/daemon settings).

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::quote;
use syn::ext::IdentExt;
use syn::{Expr, ExprLit, Ident, Lit, LitStr};

use crate::errors::not_taken;
use crate::kind::{Kind, Target, options_of};
use crate::syntax::{Given, Opt, parse_raw};
use crate::values::{filter, flag, operation, seconds, string};

/// What the attribute says, checked against the attribute's options.
#[derive(Default)]
pub(crate) struct Args {
    /// The resource, or the CRD of `convert`.
    pub(crate) target: Option<LitStr>,
    pub(crate) id: Option<LitStr>,
    pub(crate) field: Option<LitStr>,
    /// Method calls on `Options` / `WebhookOptions`.
    pub(crate) options: Vec<TokenStream2>,
    /// `interval` of timers.
    pub(crate) interval: Option<TokenStream2>,
    /// Method calls on `TimerOptions` / `DaemonOptions`.
    pub(crate) spawning: Vec<TokenStream2>,
    /// Method calls on `Reconciler`.
    pub(crate) reconciler: Vec<TokenStream2>,
    /// `regex` of pod-log handlers.
    pub(crate) regex: Option<LitStr>,
    /// Method calls on `LogSpec`.
    pub(crate) log: Vec<TokenStream2>,
}

/// What the options seen so far say, for the checks that need the whole attribute.
#[derive(Default)]
struct Seen {
    names: Vec<String>,
    /// `value` given.
    value: Option<Ident>,
    /// `old` or `new` given.
    old_new: Option<Ident>,
}

/// Parses and checks the attribute's arguments for `kind`.
pub(crate) fn parse_args(attr: TokenStream, kind: Kind) -> syn::Result<Args> {
    let (target, opts) = parse_raw(attr.into(), kind)?;
    let first = opts.first().map(|o| o.key.span());
    check_target(kind, target.as_ref(), first)?;
    let mut args = Args {
        target,
        ..Default::default()
    };
    let mut seen = Seen::default();
    for opt in opts {
        args.take(kind, opt, &mut seen)?;
    }
    args.check_whole(kind, &seen)?;
    Ok(args)
}

/// The resource (or CRD) is there when the kind needs one, well-formed, and absent when
/// the kind is about the operator.
fn check_target(kind: Kind, target: Option<&LitStr>, first: Option<Span>) -> syn::Result<()> {
    let span = first.unwrap_or_else(Span::call_site);
    match (kind.target(), target) {
        (Target::Resource, None) => Err(syn::Error::new(
            span,
            format!(
                "the resource is missing: it comes first, as a string: {}",
                kind.example()
            ),
        )),
        (Target::Resource, Some(r)) if r.value().trim().is_empty() => {
            Err(syn::Error::new(r.span(), "the resource must not be empty"))
        }
        (Target::Crd, None) => Err(syn::Error::new(
            span,
            "the CRD is missing: write e.g. #[kopf::on::convert(\"kopfexamples.kopf.dev\")]",
        )),
        (Target::Crd, Some(crd)) => {
            let name = crd.value();
            let ok = name
                .split_once('.')
                .is_some_and(|(plural, group)| !plural.is_empty() && !group.is_empty());
            if ok {
                return Ok(());
            }
            Err(syn::Error::new(
                crd.span(),
                "a CRD's name is `<plural>.<group>`, e.g. \"kopfexamples.kopf.dev\"",
            ))
        }
        (Target::Nothing, Some(lit)) => Err(syn::Error::new(
            lit.span(),
            format!(
                "{} takes no resource: it is about the operator, not objects",
                kind.attr()
            ),
        )),
        _ => Ok(()),
    }
}

impl Args {
    /// One option: taken by the kind, given once, and turned into its method call.
    fn take(&mut self, kind: Kind, opt: Opt, seen: &mut Seen) -> syn::Result<()> {
        let Opt { key, given } = opt;
        let name = key.unraw().to_string();
        if !options_of(kind).contains(&name.as_str()) {
            return Err(not_taken(kind, &key));
        }
        if seen.names.contains(&name) {
            return Err(syn::Error::new_spanned(
                &key,
                format!("`{name}` is given twice"),
            ));
        }
        seen.names.push(name.clone());
        if kind == Kind::Reconcile && name != "id" {
            let calls = crate::reconcile::option(&key, &name, given)?;
            self.reconciler.push(calls);
            return Ok(());
        }
        if let Given::Entries(entries) = given {
            return self.meta_filters(&key, &name, entries);
        }
        if self.flag(&key, &name, &given)? {
            return Ok(());
        }
        let Given::Value(value) = given else {
            let hint = match name.as_str() {
                "labels" | "annotations" => {
                    format!("`{name}` takes a list: {name}(\"app\" = \"web\")")
                }
                _ => format!("`{name}` needs a value: `{name} = ...`"),
            };
            return Err(syn::Error::new_spanned(&key, hint));
        };
        match name.as_str() {
            "value" => seen.value = Some(key.clone()),
            "old" | "new" => seen.old_new = Some(key.clone()),
            _ => {}
        }
        self.value(kind, &key, &name, value)
    }

    /// `labels(...)` and `annotations(...)`: one filter per entry.
    fn meta_filters(
        &mut self,
        key: &Ident,
        name: &str,
        entries: Vec<(LitStr, Expr)>,
    ) -> syn::Result<()> {
        let method = match name {
            "labels" => quote!(label),
            "annotations" => quote!(annotation),
            _ => {
                return Err(syn::Error::new_spanned(
                    key,
                    format!(
                        "`{name}` is written `{name} = ...`; only `labels(...)` and `annotations(...)` take a list of filters"
                    ),
                ));
            }
        };
        for (k, v) in entries {
            let f = filter(&v, true);
            self.options.push(quote!(.#method(#k, #f)));
        }
        Ok(())
    }

    /// The flags (alone or `= true/false`); false if `name` is not one.
    fn flag(&mut self, key: &Ident, name: &str, given: &Given) -> syn::Result<bool> {
        match name {
            "sharp" => {
                let on = flag(key, given)?;
                self.spawning.push(quote!(.sharp(#on)));
            }
            "from_start" => {
                if flag(key, given)? {
                    self.log.push(quote!(.from_start()));
                }
            }
            "optional" | "deleted" | "persistent" | "side_effects" | "ignore_failures" => {
                if flag(key, given)? {
                    let method = Ident::new(name, key.span());
                    self.options.push(quote!(.#method()));
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// An option written `name = value`.
    fn value(&mut self, kind: Kind, key: &Ident, name: &str, value: Expr) -> syn::Result<()> {
        match name {
            "id" | "field" | "when" | "value" | "old" | "new" | "owner" | "controller_owner"
            | "owner_when" => self.filter_option(key, name, value),
            "retries" | "timeout" | "backoff" | "errors" => self.handling_option(key, name, value),
            "interval"
            | "initial_delay"
            | "idle"
            | "cancellation_backoff"
            | "cancellation_timeout"
            | "cancellation_polling" => self.spawning_option(key, name, value),
            "regex" | "idle_timeout" | "containers" => self.log_option(key, name, value),
            "subresource" | "operation" | "operations" => self.webhook_option(key, name, value),
            "reads" => self.reads_option(key, value),
            "labels" | "annotations" => Err(syn::Error::new_spanned(
                key,
                format!("`{name}` takes a list: {name}(\"app\" = \"web\")"),
            )),
            // Every option of `options_of` is handled above.
            _ => Err(not_taken(kind, key)),
        }
    }

    /// `reads = "spec.x"` or `reads = ["spec.x", "data"]`: what a daemon or timer reads
    /// (`Options::reads`), so that only that is kept of each object for it.
    fn reads_option(&mut self, key: &Ident, value: Expr) -> syn::Result<()> {
        let paths = match &value {
            Expr::Array(list) => list
                .elems
                .iter()
                .map(|e| string(key, e))
                .collect::<syn::Result<Vec<_>>>()?,
            _ => vec![string(key, &value)?],
        };
        for path in paths {
            if path.value().split('.').any(str::is_empty) {
                return Err(syn::Error::new_spanned(
                    &path,
                    "what the handler reads is a dotted path, e.g. \"spec.schedule\"",
                ));
            }
            self.options.push(quote!(.reads(#path)));
        }
        Ok(())
    }

    /// What the handler is for: its id, its field, and the filters of objects and values.
    fn filter_option(&mut self, key: &Ident, name: &str, value: Expr) -> syn::Result<()> {
        match name {
            "id" => {
                let id = string(key, &value)?;
                if id.value().is_empty() {
                    return Err(syn::Error::new_spanned(&id, "the id must not be empty"));
                }
                self.id = Some(id);
            }
            "field" => {
                let field = string(key, &value)?;
                if field.value().split('.').all(str::is_empty) {
                    return Err(syn::Error::new_spanned(
                        &field,
                        "the field is a dotted path, e.g. \"spec.x\"",
                    ));
                }
                self.field = Some(field);
            }
            "when" => self.options.push(quote!(.when(#value))),
            "owner_when" => self.options.push(quote!(.owner_when(#value))),
            "owner" | "controller_owner" => {
                let owner_kind = string(key, &value)?;
                if owner_kind.value().is_empty() {
                    return Err(syn::Error::new_spanned(
                        &owner_kind,
                        "the owner's kind, e.g. \"KopfExample\" or \"kopf.dev/KopfExample\"",
                    ));
                }
                let method = Ident::new(name, key.span());
                self.options.push(quote!(.#method(#owner_kind)));
            }
            _ => {
                let f = filter(&value, false);
                let method = match name {
                    "old" => quote!(old),
                    "new" => quote!(new_value),
                    _ => quote!(value),
                };
                self.options.push(quote!(.#method(#f)));
            }
        }
        Ok(())
    }

    /// How the handler's outcome is handled: retries, timeout, backoff, errors mode.
    fn handling_option(&mut self, key: &Ident, name: &str, value: Expr) -> syn::Result<()> {
        match name {
            "retries" => match &value {
                Expr::Lit(ExprLit {
                    lit: Lit::Int(i), ..
                }) => {
                    let n: u32 = i.base10_parse()?;
                    self.options.push(quote!(.retries(#n)));
                }
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "`retries` takes an integer, e.g. `retries = 3`",
                    ));
                }
            },
            "errors" => {
                let mode = string(key, &value)?;
                let variant = match mode.value().as_str() {
                    "temporary" => quote!(Temporary),
                    "permanent" => quote!(Permanent),
                    "ignored" => quote!(Ignored),
                    _ => {
                        return Err(syn::Error::new_spanned(
                            &mode,
                            "`errors` is \"temporary\", \"permanent\" or \"ignored\"",
                        ));
                    }
                };
                self.options
                    .push(quote!(.errors(::kopf::__private::ErrorsMode::#variant)));
            }
            _ => {
                let d = seconds(key, &value)?;
                let method = Ident::new(name, key.span());
                self.options.push(quote!(.#method(#d)));
            }
        }
        Ok(())
    }

    /// The timer's interval and the settings of timers and daemons.
    fn spawning_option(&mut self, key: &Ident, name: &str, value: Expr) -> syn::Result<()> {
        let d = seconds(key, &value)?;
        if name != "interval" {
            let method = Ident::new(name, key.span());
            self.spawning.push(quote!(.#method(#d)));
            return Ok(());
        }
        let zero = match &value {
            Expr::Lit(ExprLit {
                lit: Lit::Int(i), ..
            }) => i.base10_parse::<u64>()? == 0,
            Expr::Lit(ExprLit {
                lit: Lit::Float(f), ..
            }) => f.base10_parse::<f64>()? == 0.0,
            _ => false,
        };
        if zero {
            return Err(syn::Error::new_spanned(
                &value,
                "`interval` must be more than 0 seconds",
            ));
        }
        self.interval = Some(d);
        Ok(())
    }

    /// The pod-log handler's regex and log settings.
    fn log_option(&mut self, key: &Ident, name: &str, value: Expr) -> syn::Result<()> {
        match name {
            "regex" => {
                let regex = string(key, &value)?;
                if let Err(e) = regex_syntax::Parser::new().parse(&regex.value()) {
                    return Err(syn::Error::new_spanned(
                        &regex,
                        format!("not a valid regex: {e}"),
                    ));
                }
                self.regex = Some(regex);
            }
            "idle_timeout" => {
                let d = seconds(key, &value)?;
                self.log.push(quote!(.idle_timeout(#d)));
            }
            _ => match &value {
                Expr::Array(items) => {
                    let names = items
                        .elems
                        .iter()
                        .map(|item| string(key, item))
                        .collect::<syn::Result<Vec<_>>>()?;
                    self.log.push(quote!(.containers(&[#(#names),*])));
                }
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "`containers` takes a list, e.g. `containers = [\"main\"]`",
                    ));
                }
            },
        }
        Ok(())
    }

    /// The admission webhook's subresource and operations.
    fn webhook_option(&mut self, key: &Ident, name: &str, value: Expr) -> syn::Result<()> {
        match name {
            "subresource" => {
                let sub = string(key, &value)?;
                self.options.push(quote!(.subresource(#sub)));
            }
            "operation" => {
                let op = string(key, &value)?;
                self.options.push(operation(&op)?);
            }
            _ => match &value {
                Expr::Array(items) => {
                    for item in &items.elems {
                        let op = string(key, item)?;
                        self.options.push(operation(&op)?);
                    }
                }
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "`operations` takes a list, e.g. `operations = [\"CREATE\", \"UPDATE\"]`",
                    ));
                }
            },
        }
        Ok(())
    }

    /// The checks that need the whole attribute: required options, and filters that need
    /// a field or do not go together.
    fn check_whole(&self, kind: Kind, seen: &Seen) -> syn::Result<()> {
        let missing = match kind {
            Kind::Log if self.regex.is_none() => {
                Some("#[kopf::on::log] needs `regex = \"...\"`: the lines it handles")
            }
            Kind::Field if self.field.is_none() => {
                Some("#[kopf::on::field] needs `field = \"spec.x\"`")
            }
            _ => None,
        };
        if let Some(message) = missing {
            let span = self
                .target
                .as_ref()
                .map_or_else(Span::call_site, LitStr::span);
            return Err(syn::Error::new(span, message));
        }
        if self.field.is_none()
            && let Some(key) = seen.value.as_ref().or(seen.old_new.as_ref())
        {
            return Err(syn::Error::new_spanned(
                key,
                format!("`{key}` filters the value of a field: add `field = \"spec.x\"`"),
            ));
        }
        if let (Some(_), Some(key)) = (&seen.value, &seen.old_new) {
            return Err(syn::Error::new_spanned(
                key,
                "`value` and `old`/`new` do not go together: `value` filters either state, `old`/`new` the states before and after the change",
            ));
        }
        Ok(())
    }
}
