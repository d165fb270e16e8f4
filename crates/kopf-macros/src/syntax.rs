//! The attribute's tokens as written: the target literal, then `key`, `key = value` and
//! `key(entries...)` options (nothing is checked against the attribute's options yet).

use syn::ext::IdentExt;
use syn::parse::ParseStream;
use syn::{Expr, Ident, LitStr, Token};

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
pub(crate) fn parse_raw(input: ParseStream, kind: Kind) -> syn::Result<(Option<LitStr>, Vec<Opt>)> {
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
