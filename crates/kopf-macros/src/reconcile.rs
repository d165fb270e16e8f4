//! The options of `#[kopf::reconcile]`, as method calls on `kopf::Reconciler` (its id is
//! taken by `args` like every attribute's).

use proc_macro2::TokenStream as TokenStream2;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Ident, Lit, LitStr};

use crate::syntax::Given;
use crate::values::{duration, duration_tokens, parse_duration, string};

/// `Reconciler::<name>(...)` for one option (`name`: the option without `r#`).
pub(crate) fn option(key: &Ident, name: &str, given: Given) -> syn::Result<TokenStream2> {
    let value = match (name, given) {
        ("watches", Given::Entries(entries)) => {
            let mut calls = TokenStream2::new();
            for (resource, mapper) in entries {
                non_empty(&resource, "a watched resource")?;
                let span = mapper.span();
                calls.extend(quote_spanned!(span=> .watches(#resource, #mapper)));
            }
            return Ok(calls);
        }
        ("watches", _) => {
            return Err(syn::Error::new_spanned(
                key,
                "`watches` takes a list of resources and their mappers: watches(\"secrets\" = secret_owners), where `fn secret_owners(secret: &T) -> Vec<kopf::reconcile::ObjectRef>`",
            ));
        }
        (_, Given::Value(v)) => v,
        (_, _) => {
            return Err(syn::Error::new_spanned(
                key,
                format!("`{name}` needs a value: `{name} = ...`"),
            ));
        }
    };
    match name {
        "owns" => owns(&value),
        "cleanup" => match &value {
            Expr::Path(path) => {
                let span = path.span();
                Ok(quote_spanned!(span=> .cleanup(#path)))
            }
            other => Err(syn::Error::new_spanned(
                other,
                "`cleanup` takes the name of a function: `cleanup = remove_children`, an `async fn(Arc<K>, ReconcileContext) -> Result<(), E>`",
            )),
        },
        "debounce" | "timeout" => {
            let d = duration(key, &value)?;
            let method = Ident::new(name, key.span());
            Ok(quote!(.#method(#d)))
        }
        "concurrency" => match &value {
            Expr::Lit(ExprLit {
                lit: Lit::Int(i), ..
            }) if i.base10_parse::<usize>().is_ok_and(|n| n > 0) => {
                let n: usize = i.base10_parse()?;
                Ok(quote!(.concurrency(#n)))
            }
            other => Err(syn::Error::new_spanned(
                other,
                "`concurrency` takes a positive integer: the most reconciles of the resource at once, e.g. `concurrency = 8`",
            )),
        },
        "backoff" => backoff(key, &value),
        // `kind::options_of` lists no other option of #[kopf::reconcile] (`id` is taken by
        // `args`).
        _ => Err(crate::errors::not_taken(crate::kind::Kind::Reconcile, key)),
    }
}

/// `owns = ["configmaps", ...]` (or one string): one `.owns(...)` per resource.
fn owns(value: &Expr) -> syn::Result<TokenStream2> {
    let items: Vec<&Expr> = match value {
        Expr::Array(items) => items.elems.iter().collect(),
        one @ Expr::Lit(_) => vec![one],
        other => return Err(owns_error(other)),
    };
    let mut calls = TokenStream2::new();
    for item in items {
        let Expr::Lit(ExprLit {
            lit: Lit::Str(resource),
            ..
        }) = item
        else {
            return Err(owns_error(item));
        };
        non_empty(resource, "an owned resource")?;
        calls.extend(quote!(.owns(#resource)));
    }
    Ok(calls)
}

/// `backoff = "1s..300s"`: exponential delays from the first bound up to the second.
fn backoff(key: &Ident, value: &Expr) -> syn::Result<TokenStream2> {
    let hint = "`backoff` of #[kopf::reconcile] is a range of delays, doubling from the first up to the second: `backoff = \"1s..300s\"`";
    let lit = string(key, value).map_err(|_| syn::Error::new_spanned(value, hint))?;
    let text = lit.value();
    let bound = |s: &str| {
        let s = s.trim();
        // Bare numbers are seconds, as everywhere else.
        s.parse::<f64>()
            .ok()
            .and_then(|n| std::time::Duration::try_from_secs_f64(n).ok())
            .or_else(|| parse_duration(s))
    };
    let Some((base, max)) = text
        .split_once("..")
        .and_then(|(a, b)| Some((bound(a)?, bound(b)?)))
    else {
        return Err(syn::Error::new_spanned(&lit, hint));
    };
    if base.is_zero() {
        return Err(syn::Error::new_spanned(
            &lit,
            "the first delay of `backoff` must be more than 0",
        ));
    }
    if base > max {
        return Err(syn::Error::new_spanned(
            &lit,
            "the first delay of `backoff` is longer than the last: write `\"<first>..<longest>\"`",
        ));
    }
    let (base, max) = (duration_tokens(base), duration_tokens(max));
    Ok(quote!(.backoff(::kopf::__private::Backoff::exponential(#base, #max))))
}

fn owns_error(at: &Expr) -> syn::Error {
    syn::Error::new_spanned(
        at,
        "`owns` takes a list of resources: `owns = [\"configmaps\", \"deployments.apps\"]`",
    )
}

fn non_empty(lit: &LitStr, what: &str) -> syn::Result<()> {
    if lit.value().trim().is_empty() {
        return Err(syn::Error::new_spanned(
            lit,
            format!("{what} must not be empty"),
        ));
    }
    Ok(())
}
