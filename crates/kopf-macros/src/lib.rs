#![warn(missing_docs)]
//! Attribute macros of kopf-rs. Use them as `#[kopf::on::create("kopfexamples")]` (the
//! `kopf` crate re-exports them); each registers the function for `kopf::run()`.
//!
//! Arguments: the resource first (a string literal), then optional `id = "..."` (default:
//! the function name) and, for `field`, the mandatory `field = "spec.x"`.

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, ItemFn, Lit, LitStr, MetaNameValue, Token};

struct Args {
    resource: LitStr,
    id: Option<LitStr>,
    field: Option<LitStr>,
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
        let mut id = None;
        let mut field = None;
        if input.parse::<Option<Token![,]>>()?.is_some() {
            let rest: Punctuated<MetaNameValue, Token![,]> = Punctuated::parse_terminated(input)?;
            for nv in rest {
                let key = nv
                    .path
                    .get_ident()
                    .map(|i| i.to_string())
                    .unwrap_or_default();
                let value = match &nv.value {
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(s), ..
                    }) => s.clone(),
                    other => {
                        return Err(syn::Error::new_spanned(
                            other,
                            format!("`{key}` takes a string literal"),
                        ));
                    }
                };
                match key.as_str() {
                    "id" => id = Some(value),
                    "field" => field = Some(value),
                    _ => {
                        return Err(syn::Error::new_spanned(
                            &nv.path,
                            format!("unknown option `{key}`: expected `id` or `field`"),
                        ));
                    }
                }
            }
        }
        Ok(Args {
            resource,
            id,
            field,
        })
    }
}

fn expand(attr: TokenStream, item: TokenStream, reason: &str) -> TokenStream {
    let args = match syn::parse::<Args>(attr) {
        Ok(a) => a,
        Err(e) => return e.to_compile_error().into(),
    };
    let func = match syn::parse::<ItemFn>(item) {
        Ok(f) => f,
        Err(e) => {
            return syn::Error::new(e.span(), "kopf handler attributes go on functions")
                .to_compile_error()
                .into();
        }
    };
    if func.sig.asyncness.is_none() {
        return syn::Error::new_spanned(
            func.sig.fn_token,
            "kopf handlers must be `async fn` (blocking work can go to tokio::task::spawn_blocking inside)",
        )
        .to_compile_error()
        .into();
    }
    if reason == "field" && args.field.is_none() {
        return syn::Error::new(
            args.resource.span(),
            "#[kopf::on::field] needs `field = \"spec.x\"`",
        )
        .to_compile_error()
        .into();
    }
    if reason != "field" && args.field.is_some() {
        return syn::Error::new(
            args.resource.span(),
            "`field` is only for #[kopf::on::field]",
        )
        .to_compile_error()
        .into();
    }
    let name = &func.sig.ident;
    let id = args
        .id
        .map(|i| i.value())
        .unwrap_or_else(|| name.to_string());
    let resource = args.resource.value();
    let field = match &args.field {
        Some(f) => quote!(::core::option::Option::Some(#f)),
        None => quote!(::core::option::Option::None),
    };
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
