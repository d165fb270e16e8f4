//! The generated code: the handler function as written, and its registration for the
//! `kopf` crate's registry (`inventory::submit!`), per kind of attribute.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{Ident, ItemFn, LitStr};

use crate::args::parse_args;
use crate::kind::Kind;

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
    quote_spanned!(name.span()=> ::kopf::__private::IntoHandler::into_handler(#name))
}

/// The expansion of an attribute of `kind` on `item`: the function and its registration,
/// or the compile error.
pub(crate) fn expand(attr: TokenStream, item: TokenStream, kind: Kind) -> TokenStream {
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
                    quote!(::kopf::__private::HandlerSpec::from_arc(#id, ::core::option::Option::Some(::kopf::Reason::Create), #into))
                }
                Kind::Update => {
                    quote!(::kopf::__private::HandlerSpec::from_arc(#id, ::core::option::Option::Some(::kopf::Reason::Update), #into))
                }
                Kind::Delete => {
                    quote!(::kopf::__private::HandlerSpec::from_arc(#id, ::core::option::Option::Some(::kopf::Reason::Delete), #into))
                }
                Kind::Resume => quote!(::kopf::__private::HandlerSpec::resume_handler(#id, #into)),
                Kind::Field => {
                    let field = &args.field;
                    quote!(::kopf::__private::HandlerSpec::field_handler(#id, #field, #into))
                }
                Kind::Timer => {
                    let base = match &args.interval {
                        Some(d) => quote!(::kopf::TimerOptions::every(#d)),
                        None => quote!(::kopf::TimerOptions::default()),
                    };
                    let spawning = &args.spawning;
                    quote!(::kopf::__private::HandlerSpec::timer(#id, #base #(#spawning)*, #into))
                }
                Kind::Daemon => {
                    let spawning = &args.spawning;
                    quote!(::kopf::__private::HandlerSpec::daemon(#id, ::kopf::DaemonOptions::new() #(#spawning)*, #into))
                }
                Kind::Index => {
                    quote_spanned!(name.span()=> ::kopf::registry::index_spec(#id, #name))
                }
                _ => quote!(::kopf::__private::HandlerSpec::event(#id, #into)),
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
        Kind::Log => {
            let regex = &args.regex;
            let log = &args.log;
            quote! {
                ::kopf::registry::LogRegistration {
                    apply: |op: ::kopf::Operator| {
                        op.on_log_configured(
                            #target,
                            #id,
                            #regex,
                            |spec: ::kopf::__private::LogSpec| spec #(#log)*,
                            #name,
                            ::kopf::Options::new() #(#options)*,
                        )
                    },
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
                quote_spanned!(name.span()=> ::kopf::__private::Converter::new(#target, #name));
            quote! {
                ::kopf::registry::ConverterRegistration {
                    crd: #target,
                    make: || #make,
                    #place
                }
            }
        }
        Kind::Reconcile => {
            let make = quote_spanned!(name.span()=> ::kopf::Reconciler::new(#target, #name));
            let calls = &args.reconciler;
            quote! {
                ::kopf::registry::ReconcileRegistration {
                    resource: #target,
                    id: #id,
                    // (a name no user function has: the function and its `cleanup` and
                    // mappers are named inside the closure)
                    apply: |__kopf_operator: ::kopf::Operator| {
                        __kopf_operator.reconcile_with(#make.id(#id) #(#calls)*)
                    },
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
                    kind: ::kopf::__private::WebhookKind::#variant,
                    make: || #into,
                    options: || ::kopf::__private::WebhookOptions::new() #(#options)*,
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
