#![warn(missing_docs)]
//! Attribute macros of kopf-rs. Use them as `#[kopf::on::create("kopfexamples")]` (the
//! `kopf` crate re-exports them as `kopf::on::*`, where each has an example); each registers
//! the function for `kopf::run()` / `Operator::from_registry()`.
//!
//! Handlers of objects take the resource first (a string literal), then Kopf's options, all
//! optional; activities (`startup`, `cleanup`, `probe`, `login`) take no resource;
//! `convert` takes the CRD's name. Which options each macro takes:
//!
//! | option | macros | meaning |
//! |---|---|---|
//! | `id = "name"` | all but `login`, `convert` | the handler id (default: the function's name) |
//! | `labels("key" = "value", other = present, "skip" = absent, "x" = some_fn)` | object handlers | label filters; keys are string literals or plain identifiers |
//! | `annotations(...)` | object handlers | annotation filters, same forms |
//! | `when = some_fn` | object handlers | `fn(&serde_json::Value) -> bool` on the whole object |
//! | `field = "spec.x"` | object handlers | the field (mandatory for `field`; restricts changing handlers to it; a presence filter for the others) |
//! | `value = "x"` / `present` / `absent` / `some_fn` | object handlers (with `field`) | the field's value must pass |
//! | `old = ...`, `new = ...` | `update`, `field` (with `field`) | the old/new value must pass |
//! | `retries = 3` | changing handlers, `timer`, `daemon`, `startup` | attempts |
//! | `timeout = 60`, `backoff = 1.5` | changing handlers, `timer`, `daemon`, `startup` (`timeout`: also `cleanup`, `probe`) | seconds |
//! | `errors = "temporary" \| "permanent" \| "ignored"` | changing handlers, `timer`, `daemon`, `index`, `startup` | arbitrary errors mode |
//! | `optional` | `delete` | no finalizer |
//! | `deleted` | `resume` | also objects being deleted |
//! | `interval`, `initial_delay`, `idle` (seconds), `sharp` | `timer` | Kopf's timer options |
//! | `initial_delay`, `cancellation_backoff`, `cancellation_timeout`, `cancellation_polling` (seconds) | `daemon` | Kopf's daemon options (`timer`: `cancellation_timeout` too) |
//! | `operations = ["CREATE", ...]`, `operation`, `subresource`, `persistent`, `side_effects`, `ignore_failures` | `validate`, `mutate` | admission options |
//!
//! Seconds are integers or floats (`timeout = 60`, `backoff = 1.5`); flags are written alone
//! (`sharp`) or as `sharp = true`. Handlers are `async fn`s or plain `fn`s (these run on
//! blocking threads).

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::{Expr, ExprLit, Ident, ItemFn, Lit, LitStr, Token};

/// Which attribute is being expanded.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Create,
    Update,
    Delete,
    Resume,
    Field,
    Timer,
    Daemon,
    Index,
    Event,
    Startup,
    Cleanup,
    Probe,
    Login,
    Validate,
    Mutate,
    Convert,
}

/// What comes first in the attribute.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The resource: `"kopfexamples"`.
    Resource,
    /// The CRD's name: `"kopfexamples.kopf.dev"`.
    Crd,
    /// Nothing: activities are about the operator.
    Nothing,
}

const ALL: &[Kind] = &[
    Kind::Create,
    Kind::Update,
    Kind::Delete,
    Kind::Resume,
    Kind::Field,
    Kind::Timer,
    Kind::Daemon,
    Kind::Index,
    Kind::Event,
    Kind::Startup,
    Kind::Cleanup,
    Kind::Probe,
    Kind::Login,
    Kind::Validate,
    Kind::Mutate,
    Kind::Convert,
];

/// The filters of handlers of objects.
const FILTERS: &[&str] = &["id", "field", "labels", "annotations", "when", "value"];
/// Retrying and timing of handlers with retries.
const RETRYING: &[&str] = &["retries", "timeout", "backoff", "errors"];

/// The options of each attribute.
fn options_of(kind: Kind) -> Vec<&'static str> {
    let mut v: Vec<&str> = Vec::new();
    match kind {
        Kind::Create | Kind::Update | Kind::Delete | Kind::Resume | Kind::Field => {
            v.extend(FILTERS);
            v.extend(RETRYING);
            match kind {
                Kind::Update | Kind::Field => v.extend(["old", "new"]),
                Kind::Delete => v.push("optional"),
                Kind::Resume => v.push("deleted"),
                _ => {}
            }
        }
        Kind::Timer => {
            v.extend(FILTERS);
            v.extend(RETRYING);
            v.extend([
                "interval",
                "initial_delay",
                "idle",
                "sharp",
                "cancellation_timeout",
            ]);
        }
        Kind::Daemon => {
            v.extend(FILTERS);
            v.extend(RETRYING);
            v.extend([
                "initial_delay",
                "cancellation_backoff",
                "cancellation_timeout",
                "cancellation_polling",
            ]);
        }
        Kind::Index => {
            v.extend(FILTERS);
            v.push("errors");
        }
        Kind::Event => v.extend(FILTERS),
        Kind::Startup => {
            v.push("id");
            v.extend(RETRYING);
        }
        Kind::Cleanup | Kind::Probe => v.extend(["id", "timeout"]),
        Kind::Validate | Kind::Mutate => {
            v.extend(FILTERS);
            v.extend([
                "operations",
                "operation",
                "subresource",
                "persistent",
                "side_effects",
                "ignore_failures",
            ]);
        }
        Kind::Login | Kind::Convert => {}
    }
    v
}

/// Why an attribute does not take an option that others take, when there is more to say
/// than which attributes take it.
fn why_not(kind: Kind, key: &str) -> Option<&'static str> {
    let retrying = RETRYING.contains(&key);
    match kind {
        Kind::Validate | Kind::Mutate if retrying => {
            Some("admission handlers run once per request, with no retries")
        }
        Kind::Index if retrying => {
            Some("index handlers are called once per event, with no retries or timeouts")
        }
        Kind::Event if retrying => Some(
            "raw event handlers are called once per event, with no retries (their errors are logged and ignored)",
        ),
        Kind::Cleanup if retrying => {
            Some("cleanup handlers run once when the operator exits (their errors are logged)")
        }
        Kind::Probe if retrying => {
            Some("probe handlers run once per probe (an error is reported as the probe's result)")
        }
        Kind::Startup | Kind::Cleanup | Kind::Probe if FILTERS.contains(&key) => {
            Some("activities are about the operator, not objects")
        }
        Kind::Daemon if matches!(key, "interval" | "idle" | "sharp") => Some(
            "a daemon is called once and runs for as long as it likes; for periodic calls, use #[kopf::on::timer]",
        ),
        Kind::Login => Some(
            "a login handler has no options: the operator calls it to connect, and again after 401 Unauthorized",
        ),
        Kind::Convert => Some(
            "a converter takes only the CRD's name: #[kopf::on::convert(\"kopfexamples.kopf.dev\")]",
        ),
        _ => None,
    }
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Create => "create",
            Kind::Update => "update",
            Kind::Delete => "delete",
            Kind::Resume => "resume",
            Kind::Field => "field",
            Kind::Timer => "timer",
            Kind::Daemon => "daemon",
            Kind::Index => "index",
            Kind::Event => "event",
            Kind::Startup => "startup",
            Kind::Cleanup => "cleanup",
            Kind::Probe => "probe",
            Kind::Login => "login",
            Kind::Validate => "validate",
            Kind::Mutate => "mutate",
            Kind::Convert => "convert",
        }
    }

    fn attr(self) -> String {
        format!("#[kopf::on::{}]", self.name())
    }

    fn target(self) -> Target {
        match self {
            Kind::Startup | Kind::Cleanup | Kind::Probe | Kind::Login => Target::Nothing,
            Kind::Convert => Target::Crd,
            _ => Target::Resource,
        }
    }

    /// An example of the attribute with its first option, for messages.
    fn example(self) -> String {
        let extra = match self {
            Kind::Field => ", field = \"spec.x\"",
            Kind::Timer => ", interval = 60",
            _ => "",
        };
        format!("#[kopf::on::{}(\"kopfexamples\"{extra})]", self.name())
    }

    /// Its options, as a message lists them.
    fn option_list(self) -> String {
        let names: Vec<String> = options_of(self)
            .iter()
            .map(|o| match *o {
                "labels" | "annotations" => format!("`{o}(...)`"),
                _ => format!("`{o}`"),
            })
            .collect();
        if names.is_empty() {
            "no options".to_string()
        } else {
            names.join(", ")
        }
    }
}

/// Every option of any attribute.
fn all_options() -> Vec<&'static str> {
    let mut all: Vec<&str> = ALL.iter().flat_map(|k| options_of(*k)).collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// The edit distance of two short words (for "did you mean").
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(row[j + 1])
            };
            prev = here;
        }
    }
    row[b.len()]
}

/// The message for an option the attribute does not take.
fn not_taken(kind: Kind, key: &Ident) -> syn::Error {
    let name = key.unraw().to_string();
    let owners: Vec<String> = ALL
        .iter()
        .filter(|k| options_of(**k).contains(&name.as_str()))
        .map(|k| k.attr())
        .collect();
    let message = if owners.is_empty() {
        let suggestion = options_of(kind)
            .into_iter()
            .chain(all_options())
            .map(|o| (distance(&name, o), o))
            .filter(|(d, _)| *d <= 2)
            .min_by_key(|(d, _)| *d)
            .map(|(_, o)| format!("did you mean `{o}`? "))
            .unwrap_or_default();
        format!(
            "unknown option `{name}`: {suggestion}{} takes {}",
            kind.attr(),
            kind.option_list()
        )
    } else {
        let mut message = format!("{} does not take `{name}`", kind.attr());
        match why_not(kind, &name) {
            Some(why) => message.push_str(&format!(": {why}")),
            None => message.push_str(&format!(" (an option of {})", owners.join(", "))),
        }
        if !options_of(kind).is_empty() {
            message.push_str(&format!("; it takes {}", kind.option_list()));
        }
        message
    };
    syn::Error::new_spanned(key, message)
}

/// A label or annotation key: a string literal, or a plain identifier.
fn meta_key(input: ParseStream) -> syn::Result<LitStr> {
    if input.peek(LitStr) {
        return input.parse();
    }
    let fork = input.fork();
    if let Ok(ident) = fork.call(Ident::parse_any)
        && (fork.peek(Token![=]) || fork.is_empty() || fork.peek(Token![,]))
    {
        input.call(Ident::parse_any)?;
        return Ok(LitStr::new(&ident.unraw().to_string(), ident.span()));
    }
    Err(input.error(
        "label and annotation keys are string literals or plain identifiers: labels(\"app.kubernetes.io/name\" = \"web\", tier = \"gold\")",
    ))
}

/// One `"key" = value` of `labels(...)` / `annotations(...)`.
fn meta_entry(input: ParseStream) -> syn::Result<(LitStr, Expr)> {
    let key = meta_key(input)?;
    if !input.peek(Token![=]) {
        let k = key.value();
        return Err(syn::Error::new(
            key.span(),
            format!("{k:?} needs a filter: {k:?} = \"value\" (or `present`, `absent`, a function)"),
        ));
    }
    input.parse::<Token![=]>()?;
    let value: Expr = input.parse()?;
    Ok((key, value))
}

/// One option as written.
enum Given {
    /// `sharp`.
    Flag,
    /// `key = value`.
    Value(Expr),
    /// `labels(...)`.
    Entries(Vec<(LitStr, Expr)>),
}

struct Opt {
    key: Ident,
    given: Given,
}

/// What the attribute says, checked against the attribute's options.
#[derive(Default)]
struct Args {
    /// The resource, or the CRD of `convert`.
    target: Option<LitStr>,
    id: Option<LitStr>,
    field: Option<LitStr>,
    /// Method calls on `Options` / `WebhookOptions`.
    options: Vec<TokenStream2>,
    /// `interval` of timers.
    interval: Option<TokenStream2>,
    /// Method calls on `TimerOptions` / `DaemonOptions`.
    spawning: Vec<TokenStream2>,
}

fn seconds(key: &Ident, value: &Expr) -> syn::Result<TokenStream2> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => {
            let n: u64 = i.base10_parse()?;
            Ok(quote!(::std::time::Duration::from_secs(#n)))
        }
        Expr::Lit(ExprLit {
            lit: Lit::Float(f), ..
        }) => {
            let n: f64 = f.base10_parse()?;
            if std::time::Duration::try_from_secs_f64(n).is_err() {
                return Err(syn::Error::new_spanned(
                    f,
                    format!("`{key}` must be a finite, non-negative number of seconds"),
                ));
            }
            Ok(quote!(::std::time::Duration::from_secs_f64(#n)))
        }
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{key}` takes a number of seconds, e.g. `{key} = 60` or `{key} = 1.5`"),
        )),
    }
}

fn string(key: &Ident, value: &Expr) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s.clone()),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{key}` takes a string literal"),
        )),
    }
}

fn flag(key: &Ident, given: &Given) -> syn::Result<bool> {
    match given {
        Given::Flag => Ok(true),
        Given::Value(Expr::Lit(ExprLit {
            lit: Lit::Bool(b), ..
        })) => Ok(b.value),
        Given::Value(other) => Err(syn::Error::new_spanned(
            other,
            format!("`{key}` takes `true` or `false` (or write just `{key}`)"),
        )),
        Given::Entries(_) => Err(syn::Error::new_spanned(
            key,
            format!("`{key}` takes `true` or `false` (or write just `{key}`)"),
        )),
    }
}

fn operation(lit: &LitStr) -> syn::Result<TokenStream2> {
    let variant = match lit.value().as_str() {
        "CREATE" => quote!(Create),
        "UPDATE" => quote!(Update),
        "DELETE" => quote!(Delete),
        "CONNECT" => quote!(Connect),
        _ => {
            return Err(syn::Error::new_spanned(
                lit,
                "operations are \"CREATE\", \"UPDATE\", \"DELETE\" or \"CONNECT\"",
            ));
        }
    };
    Ok(quote!(.operation(::kopf::Operation::#variant)))
}

/// `present`, `absent`, a literal, or any expression (a predicate function).
fn filter(value: &Expr, meta: bool) -> TokenStream2 {
    let ty = if meta {
        quote!(::kopf::MetaFilter)
    } else {
        quote!(::kopf::FieldFilter)
    };
    if let Expr::Path(p) = value
        && let Some(ident) = p.path.get_ident()
    {
        match ident.to_string().as_str() {
            "present" | "PRESENT" => return quote!(#ty::Present),
            "absent" | "ABSENT" => return quote!(#ty::Absent),
            _ => {}
        }
    }
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) if meta => quote!(#ty::Value(::std::string::String::from(#s))),
        Expr::Lit(_) if !meta => quote!(#ty::Value(::kopf::serde_json::json!(#value))),
        _ => quote!(#ty::Predicate(::std::sync::Arc::new(#value))),
    }
}

/// The attribute's tokens, as written (no checks of what the attribute takes yet).
fn parse_raw(input: ParseStream, kind: Kind) -> syn::Result<(Option<LitStr>, Vec<Opt>)> {
    let target = if input.peek(LitStr) {
        Some(input.parse::<LitStr>()?)
    } else {
        None
    };
    let mut opts = Vec::new();
    let mut first = target.is_none();
    while !input.is_empty() {
        if !first {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
        }
        first = false;
        if input.peek(LitStr) {
            let lit: LitStr = input.parse()?;
            let message = match kind.target() {
                Target::Nothing => format!(
                    "{} takes no resource: it is about the operator, not objects",
                    kind.attr()
                ),
                _ => "only the first argument is a string (the resource); options are written `name = value`".to_string(),
            };
            return Err(syn::Error::new_spanned(lit, message));
        }
        let key: Ident = input.call(Ident::parse_any).map_err(|e| {
            syn::Error::new(
                e.span(),
                format!(
                    "expected an option (`name = value`); {} takes {}",
                    kind.attr(),
                    kind.option_list()
                ),
            )
        })?;
        let given = if input.peek(syn::token::Paren) {
            let content;
            syn::parenthesized!(content in input);
            let entries = content.parse_terminated(meta_entry, Token![,])?;
            Given::Entries(entries.into_iter().collect())
        } else if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            Given::Value(input.parse()?)
        } else {
            Given::Flag
        };
        opts.push(Opt { key, given });
    }
    Ok((target, opts))
}

/// Parses and checks the attribute's arguments for `kind`.
fn parse_args(attr: TokenStream, kind: Kind) -> syn::Result<Args> {
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
                    .push(quote!(.errors(::kopf::ErrorsMode::#variant)));
            }
            "when" => args.options.push(quote!(.when(#value))),
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
    if kind == Kind::Field && args.field.is_none() {
        let span = args
            .target
            .as_ref()
            .map_or_else(Span::call_site, LitStr::span);
        return Err(syn::Error::new(
            span,
            "#[kopf::on::field] needs `field = \"spec.x\"`",
        ));
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

/// The handler function (or the compile error of an attribute on something else).
fn parse_fn(item: TokenStream) -> syn::Result<ItemFn> {
    syn::parse::<ItemFn>(item).map_err(|e| {
        syn::Error::new(
            e.span(),
            "kopf handler attributes go on functions (`async fn` or `fn`)",
        )
    })
}

/// `IntoHandler::into_handler(name)`, spanned at the function's name so that a function
/// that cannot be a handler is reported there.
fn into_handler(name: &Ident) -> TokenStream2 {
    quote_spanned!(name.span()=> ::kopf::IntoHandler::into_handler(#name))
}

fn expand(attr: TokenStream, item: TokenStream, kind: Kind) -> TokenStream {
    match try_expand(attr, item, kind) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn try_expand(attr: TokenStream, item: TokenStream, kind: Kind) -> syn::Result<TokenStream2> {
    let args = parse_args(attr, kind)?;
    let func = parse_fn(item)?;
    let name = &func.sig.ident;
    let id = args
        .id
        .as_ref()
        .map(LitStr::value)
        .unwrap_or_else(|| name.unraw().to_string());
    let into = into_handler(name);
    let target = args.target.clone();
    let mut options = args.options;
    let place = quote! {
        file: ::core::file!(),
        line: ::core::line!(),
    };
    let registration = match kind {
        Kind::Create
        | Kind::Update
        | Kind::Delete
        | Kind::Resume
        | Kind::Field
        | Kind::Timer
        | Kind::Daemon
        | Kind::Index
        | Kind::Event => {
            let spec = match kind {
                Kind::Create => {
                    quote!(::kopf::HandlerSpec::from_arc(#id, ::core::option::Option::Some(::kopf::Reason::Create), #into))
                }
                Kind::Update => {
                    quote!(::kopf::HandlerSpec::from_arc(#id, ::core::option::Option::Some(::kopf::Reason::Update), #into))
                }
                Kind::Delete => {
                    quote!(::kopf::HandlerSpec::from_arc(#id, ::core::option::Option::Some(::kopf::Reason::Delete), #into))
                }
                Kind::Resume => quote!(::kopf::HandlerSpec::resume_handler(#id, #into)),
                Kind::Field => {
                    let field = &args.field;
                    quote!(::kopf::HandlerSpec::field_handler(#id, #field, #into))
                }
                Kind::Timer => {
                    let base = match &args.interval {
                        Some(d) => quote!(::kopf::TimerOptions::every(#d)),
                        None => quote!(::kopf::TimerOptions::default()),
                    };
                    let spawning = &args.spawning;
                    quote!(::kopf::HandlerSpec::timer(#id, #base #(#spawning)*, #into))
                }
                Kind::Daemon => {
                    let spawning = &args.spawning;
                    quote!(::kopf::HandlerSpec::daemon(#id, ::kopf::DaemonOptions::new() #(#spawning)*, #into))
                }
                Kind::Index => {
                    quote_spanned!(name.span()=> ::kopf::registry::index_spec(#id, #name))
                }
                _ => quote!(::kopf::HandlerSpec::event(#id, #into)),
            };
            if kind != Kind::Field
                && let Some(f) = &args.field
            {
                options.push(quote!(.field(#f)));
            }
            let variant = Ident::new(
                match kind {
                    Kind::Create => "Create",
                    Kind::Update => "Update",
                    Kind::Delete => "Delete",
                    Kind::Resume => "Resume",
                    Kind::Field => "Field",
                    Kind::Timer => "Timer",
                    Kind::Daemon => "Daemon",
                    Kind::Index => "Index",
                    _ => "Event",
                },
                Span::call_site(),
            );
            quote! {
                ::kopf::registry::Registration {
                    resource: #target,
                    id: #id,
                    kind: ::kopf::registry::Kind::#variant,
                    make: || #spec,
                    options: || ::kopf::Options::new() #(#options)*,
                    #place
                }
            }
        }
        Kind::Startup | Kind::Cleanup | Kind::Probe => {
            let variant = Ident::new(
                match kind {
                    Kind::Startup => "Startup",
                    Kind::Cleanup => "Cleanup",
                    _ => "Probe",
                },
                Span::call_site(),
            );
            quote! {
                ::kopf::registry::ActivityRegistration {
                    activity: ::kopf::registry::Activity::#variant,
                    id: #id,
                    make: || #into,
                    options: || ::kopf::Options::new() #(#options)*,
                    #place
                }
            }
        }
        Kind::Login => {
            let make = quote_spanned!(name.span()=> ::kopf::registry::login_handler(#name));
            quote! {
                ::kopf::registry::LoginRegistration {
                    make: || #make,
                    #place
                }
            }
        }
        Kind::Convert => {
            let make =
                quote_spanned!(name.span()=> ::kopf::admission::Converter::new(#target, #name));
            quote! {
                ::kopf::registry::ConverterRegistration {
                    crd: #target,
                    make: || #make,
                    #place
                }
            }
        }
        Kind::Validate | Kind::Mutate => {
            if let Some(f) = &args.field {
                options.push(quote!(.field(#f)));
            }
            let variant = Ident::new(
                if kind == Kind::Validate {
                    "Validating"
                } else {
                    "Mutating"
                },
                Span::call_site(),
            );
            quote! {
                ::kopf::registry::WebhookRegistration {
                    resource: #target,
                    id: #id,
                    kind: ::kopf::admission::WebhookKind::#variant,
                    make: || #into,
                    options: || ::kopf::WebhookOptions::new() #(#options)*,
                    #place
                }
            }
        }
    };
    Ok(quote! {
        #func

        ::kopf::inventory::submit! { #registration }
    })
}

/// Registers a creation handler (Kopf's `@kopf.on.create`):
/// `#[kopf::on::create("kopfexamples")]`.
///
/// Options: `id`, `labels(...)`, `annotations(...)`, `when`, `field`, `value`, `retries`,
/// `timeout`, `backoff`, `errors`.
#[proc_macro_attribute]
pub fn create(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Create)
}

/// Registers an update handler (Kopf's `@kopf.on.update`):
/// `#[kopf::on::update("kopfexamples")]`.
///
/// Options: those of `create`, and with a `field`, `old = ...` / `new = ...` filters on the
/// values before and after the change.
#[proc_macro_attribute]
pub fn update(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Update)
}

/// Registers a deletion handler (Kopf's `@kopf.on.delete`):
/// `#[kopf::on::delete("kopfexamples")]`. It holds a finalizer on the objects it matches,
/// unless it is `optional`.
///
/// Options: those of `create`, and `optional`.
#[proc_macro_attribute]
pub fn delete(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Delete)
}

/// Registers a resume handler (Kopf's `@kopf.on.resume`): it runs for the objects found
/// when the operator starts. `#[kopf::on::resume("kopfexamples")]`.
///
/// Options: those of `create`, and `deleted` (also objects being deleted).
#[proc_macro_attribute]
pub fn resume(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Resume)
}

/// Registers a field handler (Kopf's `@kopf.on.field`): it runs when the field changes
/// (also on creation when set). `#[kopf::on::field("kopfexamples", field = "spec.x")]`; its
/// id is `<id>/<field>`.
///
/// Options: `field` (mandatory), and those of `update`.
#[proc_macro_attribute]
pub fn field(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Field)
}

/// Registers a timer (Kopf's `@kopf.timer`): called for each matching object every
/// `interval` seconds, for as long as the object exists and matches.
/// `#[kopf::on::timer("kopfexamples", interval = 60)]`. Its result goes to
/// `status.<id>` after each call; it can ask for the `Stopped` flag.
///
/// Options:
/// * `interval = 60` (seconds): the period (without it, the timer is called once, or once
///   per `idle` period);
/// * `initial_delay = 5`: wait this long after the object appears;
/// * `idle = 10`: call only once the object has been unchanged this long;
/// * `sharp` / `sharp = true`: align calls to the interval, whatever their durations;
/// * `cancellation_timeout = 5`: on a stop request, wait this long for a running call;
/// * filters: `id`, `labels(...)`, `annotations(...)`, `when`, `field` (with `value`: a
///   filter on the field's value; the id becomes `<id>/<field>`);
/// * `retries`, `timeout`, `backoff`, `errors`.
#[proc_macro_attribute]
pub fn timer(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Timer)
}

/// Registers a daemon (Kopf's `@kopf.daemon`): called once for each matching object and
/// left running for as long as it likes; it is asked to stop (its `Stopped` argument) when
/// the object is deleted or stops matching, or the operator exits.
/// `#[kopf::on::daemon("kopfexamples")]`.
///
/// Options:
/// * `initial_delay = 5` (seconds): wait this long after the object appears;
/// * `cancellation_backoff = 1`: after the stop request, time to exit on its own before
///   being cancelled;
/// * `cancellation_timeout = 10`: then, how long to wait for the cancelled daemon before
///   abandoning it (without it: as long as it takes);
/// * `cancellation_polling = 60`: without a timeout, how often to warn that it still runs;
/// * filters: `id`, `labels(...)`, `annotations(...)`, `when`, `field` (with `value`; the
///   id becomes `<id>/<field>`);
/// * `retries`, `timeout`, `backoff`, `errors`.
#[proc_macro_attribute]
pub fn daemon(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Daemon)
}

/// Registers an index (Kopf's `@kopf.index`): the function returns key/value pairs for
/// each object (a map, a vector of pairs, a pair, or an `Option` of one), and every handler
/// reads them with an `Index<K, V>` argument of the same key and value types.
/// `#[kopf::on::index("kopfexamples")]`.
///
/// Options: `id` (the index's name for `Indexes::get`), `labels(...)`, `annotations(...)`,
/// `when`, `field` (with `value`: a filter on the field's value), `errors` (default
/// `"ignored"`: an error keeps the object's previous entries).
#[proc_macro_attribute]
pub fn index(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Index)
}

/// Registers a raw event handler (Kopf's `@kopf.on.event`): called for every watch event
/// of matching objects (its `EventType` argument tells which), with no state kept and no
/// finalizer; its errors are logged and ignored. `#[kopf::on::event("kopfexamples")]`.
///
/// Options: `id`, `labels(...)`, `annotations(...)`, `when`, `field` (with `value`; the id
/// becomes `<id>/<field>`).
#[proc_macro_attribute]
pub fn event(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Event)
}

/// Registers a startup handler (Kopf's `@kopf.on.startup`): all of them run, and must
/// succeed, before anything is watched (temporary errors are retried); a permanent failure
/// stops the operator. What they put in the operator's `Memo<T>` is what objects start
/// from. `#[kopf::on::startup]`.
///
/// Options: `id`, `retries`, `timeout`, `backoff`, `errors`.
#[proc_macro_attribute]
pub fn startup(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Startup)
}

/// Registers a cleanup handler (Kopf's `@kopf.on.cleanup`): it runs once when the operator
/// exits, after every resource has stopped; errors are logged. `#[kopf::on::cleanup]`.
///
/// Options: `id`, `timeout`.
#[proc_macro_attribute]
pub fn cleanup(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Cleanup)
}

/// Registers a probe handler (Kopf's `@kopf.on.probe`): its result is reported under its id
/// by the liveness endpoint (`run --liveness`) and `Operator::probes()`.
/// `#[kopf::on::probe]` or `#[kopf::on::probe(id = "objects")]`.
///
/// Options: `id`, `timeout`.
#[proc_macro_attribute]
pub fn probe(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Probe)
}

/// Registers a login handler (Kopf's `@kopf.on.login`): a function of no arguments
/// returning `Result<kube::Config, E>` (`E: Into<HandlerError>`); the operator connects
/// with that configuration instead of the kubeconfig, and calls it again after a 401
/// Unauthorized. With several, they are tried in source order until one succeeds.
/// `#[kopf::on::login]`, without options. Not used by `run --fake`.
#[proc_macro_attribute]
pub fn login(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Login)
}

/// Registers the conversion webhook of a CRD (as `Operator::on_convert`; Kopf has none): a
/// function
/// `fn(serde_json::Value, &str) -> Result<serde_json::Value, E>` (`E: Display`) that
/// returns the object in the version given (e.g. `"v2"`); the framework sets its
/// `apiVersion`. `#[kopf::on::convert("kopfexamples.kopf.dev")]`: the CRD's name, and no
/// options.
#[proc_macro_attribute]
pub fn convert(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Convert)
}

/// Registers a validating admission handler (Kopf's `@kopf.on.validate`):
/// `#[kopf::on::validate("kopfexamples")]`.
///
/// Options: `operations = ["CREATE", "UPDATE"]` (or one `operation`), `subresource =
/// "status"`, `id`, `labels(...)`, `annotations(...)`, `field`, `value`, `when`,
/// `persistent`, `side_effects`, `ignore_failures`.
#[proc_macro_attribute]
pub fn validate(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Validate)
}

/// Registers a mutating admission handler (Kopf's `@kopf.on.mutate`):
/// `#[kopf::on::mutate("kopfexamples")]`, with the options of `validate`.
#[proc_macro_attribute]
pub fn mutate(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, Kind::Mutate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_is_spelled_once_per_attribute() {
        for kind in ALL {
            let mut options = options_of(*kind);
            let n = options.len();
            options.sort_unstable();
            options.dedup();
            assert_eq!(options.len(), n, "{kind:?}");
        }
    }

    #[test]
    fn suggestions_are_close_words() {
        assert_eq!(distance("intervall", "interval"), 1);
        assert_eq!(distance("retry", "retries"), 3);
        assert_eq!(distance("", "id"), 2);
    }
}
