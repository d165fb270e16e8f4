//! Option values turned into code: seconds, strings, flags, admission operations and
//! label/annotation/field filters.

use proc_macro2::TokenStream as TokenStream2;
use quote::quote;
use syn::{Expr, ExprLit, Ident, Lit, LitStr};

use crate::syntax::Given;

pub(crate) fn seconds(key: &Ident, value: &Expr) -> syn::Result<TokenStream2> {
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

pub(crate) fn string(key: &Ident, value: &Expr) -> syn::Result<LitStr> {
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

pub(crate) fn flag(key: &Ident, given: &Given) -> syn::Result<bool> {
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

pub(crate) fn operation(lit: &LitStr) -> syn::Result<TokenStream2> {
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
    Ok(quote!(.operation(::kopf::__private::Operation::#variant)))
}

/// `present`, `absent`, a literal, or any expression (a predicate function).
pub(crate) fn filter(value: &Expr, meta: bool) -> TokenStream2 {
    let ty = if meta {
        quote!(::kopf::__private::MetaFilter)
    } else {
        quote!(::kopf::__private::FieldFilter)
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

/// A duration as a string with a unit: `"500ms"`, `"30s"`, `"1.5s"`, `"5m"`, `"1h"` (None:
/// not one).
pub(crate) fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let text = text.trim();
    let at = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(at);
    let number: f64 = number.parse().ok()?;
    let factor = match unit.trim() {
        "ms" => 0.001,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    std::time::Duration::try_from_secs_f64(number * factor).ok()
}

/// A duration computed here, as code.
pub(crate) fn duration_tokens(d: std::time::Duration) -> TokenStream2 {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    quote!(::std::time::Duration::new(#secs, #nanos))
}

/// The message of a value that is not a duration.
fn not_a_duration(key: &Ident) -> String {
    format!(
        "`{key}` takes a duration: seconds (`{key} = 30`, `{key} = 1.5`) or a string with a unit (`{key} = \"500ms\"`, \"30s\", \"5m\", \"1h\")"
    )
}

/// A duration: seconds as the other options take them (`30`, `1.5`), or a string with a
/// unit (`"500ms"`, `"30s"`).
pub(crate) fn duration(key: &Ident, value: &Expr) -> syn::Result<TokenStream2> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(_) | Lit::Float(_),
            ..
        }) => seconds(key, value),
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => match parse_duration(&s.value()) {
            Some(d) => Ok(duration_tokens(d)),
            None => Err(syn::Error::new_spanned(s, not_a_duration(key))),
        },
        other => Err(syn::Error::new_spanned(other, not_a_duration(key))),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::parse_duration;

    #[test]
    fn durations_with_units() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration(" 1h "), Some(Duration::from_secs(3600)));
        for bad in ["30", "s", "1 fortnight", "-1s", "1.2.3s", ""] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
