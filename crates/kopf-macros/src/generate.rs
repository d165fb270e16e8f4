//! The generated code: the handler function as written, and its registration for the
//! `kopf` crate's registry (`inventory::submit!`), per kind of attribute.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{Ident, ItemFn, LitStr};

use crate::args::{Args, parse_args};
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
    let mut args = parse_args(attr, kind)?;
    let func = parse_fn(item)?;
    let name = &func.sig.ident;
    let id = args
        .id
        .as_ref()
        .map(LitStr::value)
        .unwrap_or_else(|| name.unraw().to_string());
    let parts = Parts {
        id,
        name,
        into: into_handler(name),
        target: args.target.clone(),
        place: quote! {
            file: ::core::file!(),
            line: ::core::line!(),
        },
    };
    let registration = match kind {
        Kind::Log => parts.log(&args),
        Kind::Startup | Kind::Cleanup | Kind::Probe => parts.activity(kind, &args),
        Kind::Login => parts.login(),
        Kind::Convert => parts.converter(),
        Kind::Reconcile => parts.reconciler(&args),
        Kind::Validate | Kind::Mutate => parts.webhook(kind, &mut args),
        _ => parts.resource_handler(kind, &mut args),
    };
    Ok(quote! {
        #func

        ::kopf::inventory::submit! { #registration }
    })
}

/// What every registration is made of: the handler's id and function, the target, and
/// the place of the attribute.
struct Parts<'a> {
    id: String,
    name: &'a Ident,
    /// `IntoHandler::into_handler(name)`.
    into: TokenStream2,
    target: Option<LitStr>,
    /// `file:` and `line:` of the registration.
    place: TokenStream2,
}

impl Parts<'_> {
    /// The `HandlerSpec` of a resource handler of `kind` (create … event).
    fn handler_spec(&self, kind: Kind, args: &Args) -> TokenStream2 {
        let Parts { id, into, name, .. } = self;
        let reason = |r: &str| {
            let r = Ident::new(r, Span::call_site());
            quote!(::kopf::__private::HandlerSpec::from_arc(#id, ::core::option::Option::Some(::kopf::Reason::#r), #into))
        };
        match kind {
            Kind::Create => reason("Create"),
            Kind::Update => reason("Update"),
            Kind::Delete => reason("Delete"),
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
        }
    }

    /// The registration of a resource handler (create, update, delete, resume, field,
    /// timer, daemon, index, event).
    fn resource_handler(&self, kind: Kind, args: &mut Args) -> TokenStream2 {
        let spec = self.handler_spec(kind, args);
        if kind != Kind::Field
            && let Some(f) = &args.field
        {
            args.options.push(quote!(.field(#f)));
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
        let Parts {
            id, target, place, ..
        } = self;
        let options = &args.options;
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

    /// The registration of a pod-log handler.
    fn log(&self, args: &Args) -> TokenStream2 {
        let Parts {
            id,
            name,
            target,
            place,
            ..
        } = self;
        let (regex, log, options) = (&args.regex, &args.log, &args.options);
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

    /// The registration of a startup, cleanup or probe handler.
    fn activity(&self, kind: Kind, args: &Args) -> TokenStream2 {
        let variant = Ident::new(
            match kind {
                Kind::Startup => "Startup",
                Kind::Cleanup => "Cleanup",
                _ => "Probe",
            },
            Span::call_site(),
        );
        let Parts {
            id, into, place, ..
        } = self;
        let options = &args.options;
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

    /// The registration of a login handler.
    fn login(&self) -> TokenStream2 {
        let Parts { name, place, .. } = self;
        let make = quote_spanned!(name.span()=> ::kopf::registry::login_handler(#name));
        quote! {
            ::kopf::registry::LoginRegistration {
                make: || #make,
                #place
            }
        }
    }

    /// The registration of a converter.
    fn converter(&self) -> TokenStream2 {
        let Parts {
            name,
            target,
            place,
            ..
        } = self;
        let make = quote_spanned!(name.span()=> ::kopf::__private::Converter::new(#target, #name));
        quote! {
            ::kopf::registry::ConverterRegistration {
                crd: #target,
                make: || #make,
                #place
            }
        }
    }

    /// The registration of a reconciler.
    fn reconciler(&self, args: &Args) -> TokenStream2 {
        let Parts {
            id,
            name,
            target,
            place,
            ..
        } = self;
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

    /// The registration of a validating or mutating webhook.
    fn webhook(&self, kind: Kind, args: &mut Args) -> TokenStream2 {
        if let Some(f) = &args.field {
            args.options.push(quote!(.field(#f)));
        }
        let variant = Ident::new(
            if kind == Kind::Validate {
                "Validating"
            } else {
                "Mutating"
            },
            Span::call_site(),
        );
        let Parts {
            id,
            into,
            target,
            place,
            ..
        } = self;
        let options = &args.options;
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
}
