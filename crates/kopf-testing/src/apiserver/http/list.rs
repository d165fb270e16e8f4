//! Lists: selectors (a shard selector is reported in `metadata.shardInfo`), pagination
//! with continue tokens, consistent reads at a resourceVersion, conversion and Tables.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Response;
use serde_json::{Value, json};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::semantics::State;
use crate::apiserver::sync::lock;
use crate::apiserver::webhooks::conversion::{self, CrdConversion};

use super::partial::Transform;
use super::query::{Query, Selectors};
use super::response::json_response;
use super::shared::Shared;

pub(super) async fn list(
    shared: &Arc<Shared>,
    def: &ResourceDef,
    ns: Option<&str>,
    query: &Query,
    transform: Transform,
) -> ApiResult<Response<Body>> {
    let shards = lock(&shared.settings).sharded_list_and_watch;
    let sel = Selectors::parse(def, query)?.with_shards(query, shards)?;
    super::params::validate_list_options(query, false)?;
    let limit: Option<usize> = match query.int("limit")? {
        Some(l) if l > 0 => Some(usize::try_from(l).unwrap_or(usize::MAX)),
        _ => None,
    };
    let rv_param = query.get("resourceVersion").unwrap_or("");
    let rv_match = query.get("resourceVersionMatch").unwrap_or("");
    let cont = query.get("continue").filter(|c| !c.is_empty());
    let asked_rv = super::params::parse_rv(def, rv_param)?;
    let res = State::res_key(def);
    let scope = if def.namespaced { ns } else { None };
    let (at_rv, start) = if let Some(token) = cont {
        let t = decode_continue(token)?;
        (Some(t.rv), Some((t.ns, t.name)))
    } else if rv_match == "Exact" {
        (Some(asked_rv), None)
    } else {
        (None, None)
    };
    let (list_rv, page, conv) = {
        let state = lock(&shared.state);
        if asked_rv > state.store.rv() && cont.is_none() {
            return Err(super::params::too_large_rv(asked_rv, state.store.rv()));
        }
        let list_rv = at_rv.unwrap_or_else(|| state.store.rv());
        let page = state.store.list_page(
            &res,
            scope,
            at_rv,
            start.as_ref(),
            limit,
            sel.is_empty(),
            |obj| sel.matches(obj),
        );
        // No page: the history no longer reaches the resourceVersion asked for, or the
        // continue token's.
        let Some(page) = page else {
            return Err(match at_rv.filter(|_| cont.is_none()) {
                Some(rv) => ApiError::expired(format!(
                    "too old resource version: {rv} ({})",
                    state.store.compacted()
                )),
                None => ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue value from the response.",
                ),
            });
        };
        let conv = if def.is_custom() {
            CrdConversion::lookup_webhook(&state, def)
        } else {
            None
        };
        (list_rv, page, conv)
    };
    let out = page.items;
    let next = page.next;
    let remaining = page.remaining;
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if let Some(shard) = &sel.shard {
        metadata["shardInfo"] = json!({"selector": shard.as_str()});
    }
    if let Some((ns, name)) = next {
        metadata["continue"] = json!(encode_continue(&ContinueToken {
            rv: list_rv,
            ns,
            name
        }));
        if sel.is_empty() {
            metadata["remainingItemCount"] = json!(remaining);
        }
    }
    let raws: Vec<Arc<Value>> = out.into_iter().map(|(_, o)| o).collect();
    let items: Vec<Value> = conversion::present_all(&**shared, conv.as_ref(), def, raws)
        .await?
        .into_iter()
        .map(|o| list_item(def, o))
        .collect();
    let list = json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(), "metadata": metadata, "items": items});
    Ok(json_response(200, &transform.list(def, list)?, &[]))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    ns: String,
    name: String,
}

fn encode_continue(t: &ContinueToken) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(t).unwrap_or_default())
}

fn decode_continue(s: &str) -> ApiResult<ContinueToken> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|_| ApiError::bad_request("continue key is not valid: illegal base64 data"))?;
    serde_json::from_slice(&bytes).map_err(|_| {
        ApiError::bad_request("continue key is not valid: incorrect encoded start resourceVersion")
    })
}

/// Items of built-in lists carry no apiVersion/kind; custom resources keep them.
fn list_item(def: &ResourceDef, mut o: Value) -> Value {
    if !def.is_custom()
        && let Some(m) = o.as_object_mut()
    {
        m.remove("apiVersion");
        m.remove("kind");
    }
    o
}
