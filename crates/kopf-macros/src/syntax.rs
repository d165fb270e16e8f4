//! The attribute's tokens as written: the target literal, then `key`, `key = value` and
//! `key(entries...)` options (nothing is checked against the attribute's options yet).
//!
//! The list itself is split by darling's `NestedMeta` (literals, paths, `name = expr` and
//! `name(...)`); what is inside `labels(...)`/`annotations(...)`/`watches(...)` is not
//! Rust-attribute syntax (`"app.kubernetes.io/name" = "web"`), so its entries are read here.

use darling::ast::NestedMeta;
use proc_macro2::TokenStream as TokenStream2;
use syn::ext::IdentExt;
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, Lit, LitStr, MacroDelimiter, Meta, Token};

use crate::kind::{Kind, Target};

/// A label or annotation key: a string literal, or a plain identifier.
pub(crate) fn meta_key(input: ParseStream) -> syn::Result<LitStr> {
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
pub(crate) fn meta_entry(input: ParseStream) -> syn::Result<(LitStr, Expr)> {
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
pub(crate) enum Given {
    /// `sharp`.
    Flag,
    /// `key = value`.
    Value(Expr),
    /// `labels(...)`.
    Entries(Vec<(LitStr, Expr)>),
}

pub(crate) struct Opt {
    pub(crate) key: Ident,
    pub(crate) given: Given,
}

/// The attribute's tokens, as written (no checks of what the attribute takes yet).
pub(crate) fn parse_raw(attr: TokenStream2, kind: Kind) -> syn::Result<(Option<LitStr>, Vec<Opt>)> {
    let mut items = NestedMeta::parse_meta_list(attr)?.into_iter().peekable();
    let target = match items.peek() {
        Some(NestedMeta::Lit(Lit::Str(lit))) => {
            let lit = lit.clone();
            items.next();
            Some(lit)
        }
        _ => None,
    };
    let opts = items
        .map(|item| option(item, kind))
        .collect::<syn::Result<_>>()?;
    Ok((target, opts))
}

/// One option of the list (a literal past the first is an error).
fn option(item: NestedMeta, kind: Kind) -> syn::Result<Opt> {
    let meta = match item {
        NestedMeta::Meta(meta) => meta,
        NestedMeta::NameValueInvalidExpr(invalid) => return Err(invalid.error.into()),
        NestedMeta::Lit(Lit::Str(lit)) => {
            let message = match kind.target() {
                Target::Nothing => format!(
                    "{} takes no resource: it is about the operator, not objects",
                    kind.attr()
                ),
                _ => "only the first argument is a string (the resource); options are written `name = value`".to_string(),
            };
            return Err(syn::Error::new_spanned(lit, message));
        }
        NestedMeta::Lit(lit) => return Err(not_an_option(&lit, kind)),
    };
    let key = match meta.path().get_ident() {
        Some(ident) => ident.clone(),
        None => return Err(not_an_option(meta.path(), kind)),
    };
    let given = match meta {
        Meta::Path(_) => Given::Flag,
        Meta::NameValue(nv) => Given::Value(nv.value),
        Meta::List(list) if matches!(list.delimiter, MacroDelimiter::Paren(_)) => {
            let entries = list.parse_args_with(|input: ParseStream| {
                Punctuated::<_, Token![,]>::parse_terminated_with(input, meta_entry)
            })?;
            Given::Entries(entries.into_iter().collect())
        }
        Meta::List(list) => return Err(not_an_option(&list, kind)),
    };
    Ok(Opt { key, given })
}

/// The error of something that is not an option where an option goes.
fn not_an_option(at: &dyn quote::ToTokens, kind: Kind) -> syn::Error {
    syn::Error::new_spanned(
        at,
        format!(
            "expected an option (`name = value`); {} takes {}",
            kind.attr(),
            kind.option_list()
        ),
    )
}
