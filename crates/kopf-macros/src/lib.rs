#![warn(missing_docs)]
//! Attribute macros of kopf-rs. Use them as `#[kopf::on::create("kopfexamples")]` (the
//! `kopf` crate re-exports them); each registers the function for `kopf::run()`.
//!
//! The resource comes first (a string literal); then Kopf's options, all optional:
//!
//! | option | meaning |
//! |---|---|
//! | `id = "name"` | the handler id (default: the function's name) |
//! | `field = "spec.x"` | the field (mandatory for `field`; restricts the others) |
//! | `labels("key" = "value", "other" = present, "skip" = absent, "x" = some_fn)` | label filters |
//! | `annotations(...)` | annotation filters, same forms |
//! | `when = some_fn` | `fn(&serde_json::Value) -> bool` on the whole object |
//! | `value = "x"` / `old = present` / `new = absent` / `= some_fn` | field value filters |
//! | `retries = 3`, `timeout = 60`, `backoff = 1.5` | attempts; seconds |
//! | `errors = "temporary" \| "permanent" \| "ignored"` | arbitrary errors mode |
//! | `optional` | delete handlers: no finalizer |
//! | `deleted` | resume handlers: also objects being deleted |
//!
//! Handlers are `async fn`s or plain `fn`s (these run on blocking threads).

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, Ident, ItemFn, Lit, LitStr, Token};

const OPTIONS: &str = "`id`, `field`, `labels(...)`, `annotations(...)`, `when`, `value`, `old`, `new`, `retries`, `timeout`, `backoff`, `errors`, `optional`, `deleted` (admission handlers: `operations`, `subresource`, `persistent`, `side_effects`, `ignore_failures`)";

/// One `"key" = value` of `labels(...)` / `annotations(...)`.
struct MetaEntry {
    key: LitStr,
    value: Expr,
}

impl Parse for MetaEntry {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key: LitStr = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "label and annotation keys are string literals: labels(\"app\" = \"web\")",
            )
        })?;
        input.parse::<Token![=]>()?;
        let value: Expr = input.parse()?;
        Ok(MetaEntry { key, value })
    }
}

#[derive(Default)]
struct Args {
    resource: Option<LitStr>,
    id: Option<LitStr>,
    field: Option<LitStr>,
    options: Vec<TokenStream2>,
    /// Every option key given, for the checks of what each attribute accepts.
    keys: Vec<Ident>,
}

/// Options only admission handlers take.
const WEBHOOK_ONLY: &[&str] = &[
    "operations",
    "operation",
    "subresource",
    "persistent",
    "side_effects",
    "ignore_failures",
];
/// Options admission handlers do not take.
const CHANGING_ONLY: &[&str] = &[
    "retries", "timeout", "backoff", "errors", "old", "new", "optional", "deleted",
];

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

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.is_empty() {
            return Err(syn::Error::new(
                Span::call_site(),
                "the resource is missing: write e.g. #[kopf::on::create(\"kopfexamples\")]",
            ));
        }
        let resource: LitStr = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "the first argument must be the resource as a string, e.g. \"kopfexamples\"",
            )
        })?;
        if resource.value().trim().is_empty() {
            return Err(syn::Error::new(
                resource.span(),
                "the resource must not be empty",
            ));
        }
        let mut args = Args {
            resource: Some(resource),
            ..Default::default()
        };
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let key: Ident = input.parse()?;
            let name = key.to_string();
            args.keys.push(key.clone());
            if input.peek(syn::token::Paren) {
                let content;
                syn::parenthesized!(content in input);
                let entries: Punctuated<MetaEntry, Token![,]> =
                    Punctuated::parse_terminated(&content)?;
                let method = match name.as_str() {
                    "labels" => quote!(label),
                    "annotations" => quote!(annotation),
                    _ => {
                        return Err(syn::Error::new_spanned(
                            &key,
                            format!(
                                "unknown option `{name}(...)`: expected `labels(...)` or `annotations(...)`"
                            ),
                        ));
                    }
                };
                for e in entries {
                    let k = e.key;
                    let f = filter(&e.value, true);
                    args.options.push(quote!(.#method(#k, #f)));
                }
                continue;
            }
            if !input.peek(Token![=]) {
                match name.as_str() {
                    "optional" => args.options.push(quote!(.optional())),
                    "deleted" => args.options.push(quote!(.deleted())),
                    "persistent" | "side_effects" | "ignore_failures" => {
                        args.options.push(quote!(.#key()))
                    }
                    _ => {
                        return Err(syn::Error::new_spanned(
                            &key,
                            format!(
                                "`{name}` needs a value (`{name} = ...`); options are {OPTIONS}"
                            ),
                        ));
                    }
                }
                continue;
            }
            input.parse::<Token![=]>()?;
            let value: Expr = input.parse()?;
            match name.as_str() {
                "id" => args.id = Some(string(&key, &value)?),
                "field" => args.field = Some(string(&key, &value)?),
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
                    args.options.push(quote!(.#key(#d)));
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
                }
                "old" => {
                    let f = filter(&value, false);
                    args.options.push(quote!(.old(#f)));
                }
                "new" => {
                    let f = filter(&value, false);
                    args.options.push(quote!(.new_value(#f)));
                }
                "optional" | "deleted" => match &value {
                    Expr::Lit(ExprLit {
                        lit: Lit::Bool(b), ..
                    }) => {
                        if b.value {
                            args.options.push(quote!(.#key()));
                        }
                    }
                    other => {
                        return Err(syn::Error::new_spanned(
                            other,
                            format!("`{name}` takes `true` or `false` (or write just `{name}`)"),
                        ));
                    }
                },
                _ => {
                    return Err(syn::Error::new_spanned(
                        &key,
                        format!("unknown option `{name}`: expected one of {OPTIONS}"),
                    ));
                }
            }
        }
        Ok(args)
    }
}

/// What every handler attribute starts with: its arguments, the function, the resource and
/// the handler's id; or the compile error (an option given that is one of `misplaced`, whose
/// message says why).
struct Parsed {
    args: Args,
    func: ItemFn,
    resource: LitStr,
    id: String,
}

fn parse_handler(
    attr: TokenStream,
    item: TokenStream,
    misplaced: &[&str],
    why: impl Fn(&Ident) -> String,
) -> Result<Parsed, TokenStream> {
    let args = syn::parse::<Args>(attr).map_err(|e| TokenStream::from(e.to_compile_error()))?;
    if let Some(key) = args
        .keys
        .iter()
        .find(|k| misplaced.contains(&k.to_string().as_str()))
    {
        return Err(syn::Error::new_spanned(key, why(key))
            .to_compile_error()
            .into());
    }
    let func = syn::parse::<ItemFn>(item).map_err(|e| {
        TokenStream::from(
            syn::Error::new(e.span(), "kopf handler attributes go on functions").to_compile_error(),
        )
    })?;
    let Some(resource) = args.resource.clone() else {
        return Err(
            syn::Error::new(Span::call_site(), "the resource is missing")
                .to_compile_error()
                .into(),
        );
    };
    let id = args
        .id
        .as_ref()
        .map(|i| i.value())
        .unwrap_or_else(|| func.sig.ident.to_string());
    Ok(Parsed {
        args,
        func,
        resource,
        id,
    })
}

fn expand(attr: TokenStream, item: TokenStream, reason: &str) -> TokenStream {
    let Parsed {
        args,
        func,
        resource,
        id,
    } = match parse_handler(attr, item, WEBHOOK_ONLY, |key| {
        format!(
            "`{key}` is an option of admission handlers (#[kopf::on::validate], #[kopf::on::mutate])"
        )
    }) {
        Ok(p) => p,
        Err(e) => return e,
    };
    if reason == "field" && args.field.is_none() {
        return syn::Error::new(
            resource.span(),
            "#[kopf::on::field] needs `field = \"spec.x\"`",
        )
        .to_compile_error()
        .into();
    }
    let name = &func.sig.ident;
    let field = match &args.field {
        Some(f) => quote!(::core::option::Option::Some(#f)),
        None => quote!(::core::option::Option::None),
    };
    let options = &args.options;
    let mut variant = reason.to_string();
    if let Some(first) = variant.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    let reason_ident = syn::Ident::new(&variant, Span::call_site());
    quote! {
        #func

        ::kopf::inventory::submit! {
            ::kopf::registry::Registration {
                resource: #resource,
                id: #id,
                kind: ::kopf::registry::Kind::#reason_ident,
                field: #field,
                make: || ::kopf::IntoHandler::into_handler(#name),
                options: || ::kopf::Options::new() #(#options)*,
                file: ::core::file!(),
                line: ::core::line!(),
            }
        }
    }
    .into()
}

/// Registers a creation handler: `#[kopf::on::create("kopfexamples")]`.
#[proc_macro_attribute]
pub fn create(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, "create")
}

/// Registers an update handler: `#[kopf::on::update("kopfexamples")]`.
#[proc_macro_attribute]
pub fn update(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, "update")
}

/// Registers a deletion handler: `#[kopf::on::delete("kopfexamples")]`.
#[proc_macro_attribute]
pub fn delete(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, "delete")
}

/// Registers a resume handler: `#[kopf::on::resume("kopfexamples")]`.
#[proc_macro_attribute]
pub fn resume(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, "resume")
}

/// Registers a field handler: `#[kopf::on::field("kopfexamples", field = "spec.field")]`.
#[proc_macro_attribute]
pub fn field(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr, item, "field")
}

fn expand_webhook(attr: TokenStream, item: TokenStream, kind: &str) -> TokenStream {
    let Parsed {
        args,
        func,
        resource,
        id,
    } = match parse_handler(attr, item, CHANGING_ONLY, |key| {
        format!(
            "admission handlers do not take `{key}`: they run once per request, with no retries"
        )
    }) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let name = &func.sig.ident;
    let mut options = args.options;
    if let Some(f) = &args.field {
        options.push(quote!(.field(#f)));
    }
    let kind = syn::Ident::new(kind, Span::call_site());
    quote! {
        #func

        ::kopf::inventory::submit! {
            ::kopf::registry::WebhookRegistration {
                resource: #resource,
                id: #id,
                kind: ::kopf::admission::WebhookKind::#kind,
                make: || ::kopf::IntoHandler::into_handler(#name),
                options: || ::kopf::WebhookOptions::new() #(#options)*,
                file: ::core::file!(),
                line: ::core::line!(),
            }
        }
    }
    .into()
}

/// Registers a validating admission handler: `#[kopf::on::validate("kopfexamples")]`, with
/// `operations = ["CREATE", "UPDATE"]`, `subresource = "status"`, `labels(...)`,
/// `annotations(...)`, `field`, `value`, `when`, `persistent`, `side_effects`,
/// `ignore_failures`.
#[proc_macro_attribute]
pub fn validate(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand_webhook(attr, item, "Validating")
}

/// Registers a mutating admission handler: `#[kopf::on::mutate("kopfexamples")]`, with the
/// options of `validate`.
#[proc_macro_attribute]
pub fn mutate(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand_webhook(attr, item, "Mutating")
}
