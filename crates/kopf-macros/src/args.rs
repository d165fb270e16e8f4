//! The attribute's arguments checked against what its kind takes, as the pieces of the
//! generated registration (target, id, field, option method calls, timer/daemon settings).

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::quote;
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
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

/// Parses and checks the attribute's arguments for `kind`.
pub(crate) fn parse_args(attr: TokenStream, kind: Kind) -> syn::Result<Args> {
    let (target, opts) = (|input: ParseStream| parse_raw(input, kind)).parse(attr)?;
    let mut args = Args {
        target,
        ..Default::default()
    };
    match (kind.target(), &args.target) {
        (Target::Resource, None) => {
            let span = opts.first().map_or_else(Span::call_site, |o| o.key.span());
            return Err(syn::Error::new(
                span,
                format!(
                    "the resource is missing: it comes first, as a string: {}",
                    kind.example()
                ),
            ));
        }
        (Target::Resource, Some(r)) if r.value().trim().is_empty() => {
            return Err(syn::Error::new(r.span(), "the resource must not be empty"));
        }
        (Target::Crd, None) => {
            let span = opts.first().map_or_else(Span::call_site, |o| o.key.span());
            return Err(syn::Error::new(
                span,
                "the CRD is missing: write e.g. #[kopf::on::convert(\"kopfexamples.kopf.dev\")]",
            ));
        }
        (Target::Crd, Some(crd)) => {
            let name = crd.value();
            let ok = name
                .split_once('.')
                .is_some_and(|(plural, group)| !plural.is_empty() && !group.is_empty());
            if !ok {
                return Err(syn::Error::new(
                    crd.span(),
                    "a CRD's name is `<plural>.<group>`, e.g. \"kopfexamples.kopf.dev\"",
                ));
            }
        }
        (Target::Nothing, Some(lit)) => {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "{} takes no resource: it is about the operator, not objects",
                    kind.attr()
                ),
            ));
        }
        _ => {}
    }
    let taken = options_of(kind);
    let mut seen: Vec<String> = Vec::new();
    // (`value` or `old`/`new` seen, for the checks that need the whole attribute)
    let mut value_key: Option<Ident> = None;
    let mut old_new_key: Option<Ident> = None;
    for Opt { key, given } in opts {
        let name = key.unraw().to_string();
        if !taken.contains(&name.as_str()) {
            return Err(not_taken(kind, &key));
        }
        if seen.contains(&name) {
            return Err(syn::Error::new_spanned(
                &key,
                format!("`{name}` is given twice"),
            ));
        }
        seen.push(name.clone());
        if kind == Kind::Reconcile && name != "id" {
            args.reconciler
                .push(crate::reconcile::option(&key, &name, given)?);
            continue;
        }
        if let Given::Entries(entries) = given {
            let method = match name.as_str() {
                "labels" => quote!(label),
                "annotations" => quote!(annotation),
                _ => {
                    return Err(syn::Error::new_spanned(
                        &key,
                        format!(
                            "`{name}` is written `{name} = ...`; only `labels(...)` and `annotations(...)` take a list of filters"
                        ),
                    ));
                }
            };
            for (k, v) in entries {
                let f = filter(&v, true);
                args.options.push(quote!(.#method(#k, #f)));
            }
            continue;
        }
        // Flags: alone or `= true/false`.
        match name.as_str() {
            "sharp" => {
                let on = flag(&key, &given)?;
                args.spawning.push(quote!(.sharp(#on)));
                continue;
            }
            "from_start" => {
                if flag(&key, &given)? {
                    args.log.push(quote!(.from_start()));
                }
                continue;
            }
            "optional" | "deleted" | "persistent" | "side_effects" | "ignore_failures" => {
                if flag(&key, &given)? {
                    let method = Ident::new(&name, key.span());
                    args.options.push(quote!(.#method()));
                }
                continue;
            }
            _ => {}
        }
        let value = match given {
            Given::Value(v) => v,
            _ => {
                let hint = match name.as_str() {
                    "labels" | "annotations" => {
                        format!("`{name}` takes a list: {name}(\"app\" = \"web\")")
                    }
                    _ => format!("`{name}` needs a value: `{name} = ...`"),
                };
                return Err(syn::Error::new_spanned(&key, hint));
            }
        };
        let method = Ident::new(&name, key.span());
        match name.as_str() {
            "id" => {
                let id = string(&key, &value)?;
                if id.value().is_empty() {
                    return Err(syn::Error::new_spanned(&id, "the id must not be empty"));
                }
                args.id = Some(id);
            }
            "field" => {
                let field = string(&key, &value)?;
                if field.value().split('.').all(str::is_empty) {
                    return Err(syn::Error::new_spanned(
                        &field,
                        "the field is a dotted path, e.g. \"spec.x\"",
                    ));
                }
                args.field = Some(field);
            }
            "labels" | "annotations" => {
                return Err(syn::Error::new_spanned(
                    &key,
                    format!("`{name}` takes a list: {name}(\"app\" = \"web\")"),
                ));
            }
            "retries" => match &value {
                Expr::Lit(ExprLit {
                    lit: Lit::Int(i), ..
                }) => {
                    let n: u32 = i.base10_parse()?;
                    args.options.push(quote!(.retries(#n)));
                }
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "`retries` takes an integer, e.g. `retries = 3`",
                    ));
                }
            },
            "timeout" | "backoff" => {
                let d = seconds(&key, &value)?;
                args.options.push(quote!(.#method(#d)));
            }
            "interval" => {
                let d = seconds(&key, &value)?;
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
                args.interval = Some(d);
            }
            "initial_delay"
            | "idle"
            | "cancellation_backoff"
            | "cancellation_timeout"
            | "cancellation_polling" => {
                let d = seconds(&key, &value)?;
                args.spawning.push(quote!(.#method(#d)));
            }
            "errors" => {
                let mode = string(&key, &value)?;
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
                args.options
                    .push(quote!(.errors(::kopf::__private::ErrorsMode::#variant)));
            }
            "when" => args.options.push(quote!(.when(#value))),
            "regex" => {
                let regex = string(&key, &value)?;
                if let Err(e) = regex_syntax::Parser::new().parse(&regex.value()) {
                    return Err(syn::Error::new_spanned(
                        &regex,
                        format!("not a valid regex: {e}"),
                    ));
                }
                args.regex = Some(regex);
            }
            "idle_timeout" => {
                let d = seconds(&key, &value)?;
                args.log.push(quote!(.idle_timeout(#d)));
            }
            "containers" => match &value {
                Expr::Array(items) => {
                    let names = items
                        .elems
                        .iter()
                        .map(|item| string(&key, item))
                        .collect::<syn::Result<Vec<_>>>()?;
                    args.log.push(quote!(.containers(&[#(#names),*])));
                }
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "`containers` takes a list, e.g. `containers = [\"main\"]`",
                    ));
                }
            },
            "owner_when" => args.options.push(quote!(.owner_when(#value))),
            "owner" | "controller_owner" => {
                let owner_kind = string(&key, &value)?;
                if owner_kind.value().is_empty() {
                    return Err(syn::Error::new_spanned(
                        &owner_kind,
                        "the owner's kind, e.g. \"KopfExample\" or \"kopf.dev/KopfExample\"",
                    ));
                }
                args.options.push(quote!(.#method(#owner_kind)));
            }
            "subresource" => {
                let sub = string(&key, &value)?;
                args.options.push(quote!(.subresource(#sub)));
            }
            "operation" => {
                let op = string(&key, &value)?;
                args.options.push(operation(&op)?);
            }
            "operations" => match &value {
                Expr::Array(items) => {
                    for item in &items.elems {
                        let op = string(&key, item)?;
                        args.options.push(operation(&op)?);
                    }
                }
                other => {
                    return Err(syn::Error::new_spanned(
                        other,
                        "`operations` takes a list, e.g. `operations = [\"CREATE\", \"UPDATE\"]`",
                    ));
                }
            },
            "value" => {
                let f = filter(&value, false);
                args.options.push(quote!(.value(#f)));
                value_key = Some(key);
            }
            "old" => {
                let f = filter(&value, false);
                args.options.push(quote!(.old(#f)));
                old_new_key = Some(key);
            }
            "new" => {
                let f = filter(&value, false);
                args.options.push(quote!(.new_value(#f)));
                old_new_key = Some(key);
            }
            // Every option of `options_of` is handled above.
            _ => return Err(not_taken(kind, &key)),
        }
    }
    let missing = match kind {
        Kind::Log if args.regex.is_none() => {
            Some("#[kopf::on::log] needs `regex = \"...\"`: the lines it handles")
        }
        Kind::Field if args.field.is_none() => {
            Some("#[kopf::on::field] needs `field = \"spec.x\"`")
        }
        _ => None,
    };
    if let Some(message) = missing {
        let span = args
            .target
            .as_ref()
            .map_or_else(Span::call_site, LitStr::span);
        return Err(syn::Error::new(span, message));
    }
    if args.field.is_none()
        && let Some(key) = value_key.as_ref().or(old_new_key.as_ref())
    {
        return Err(syn::Error::new_spanned(
            key,
            format!("`{key}` filters the value of a field: add `field = \"spec.x\"`"),
        ));
    }
    if let (Some(_), Some(key)) = (&value_key, &old_new_key) {
        return Err(syn::Error::new_spanned(
            key,
            "`value` and `old`/`new` do not go together: `value` filters either state, `old`/`new` the states before and after the change",
        ));
    }
    Ok(args)
}
