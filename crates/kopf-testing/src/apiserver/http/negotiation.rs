//! Content negotiation: request bodies by their Content-Type (JSON, YAML, protobuf, the
//! patch types) and aggregated discovery by the Accept header (the transformations an
//! Accept asks for are in `partial`).

use axum::http::{HeaderMap, header};
use bytes::Bytes;
use serde_json::Value;

use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::semantics::PatchType;

pub(super) fn header_str(headers: &HeaderMap, name: header::HeaderName) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// The version of aggregated discovery the Accept header asks for first: `v2`, or `v2beta1`
/// (all kubectl 1.27 to 1.29 accept; kube-apiserver served both until 1.33); `None` for
/// legacy discovery.
pub(super) fn aggregated_version(accept: &str) -> Option<&'static str> {
    accept.split(',').find_map(|range| {
        let params: Vec<&str> = range.split(';').map(str::trim).collect();
        if !params.contains(&"as=APIGroupDiscoveryList") {
            return None;
        }
        Some(if params.contains(&"v=v2beta1") {
            "v2beta1"
        } else {
            "v2"
        })
    })
}

/// Decodes a request body by its Content-Type.
pub(super) fn decode_body(content_type: &str, body: &Bytes, allow_patch: bool) -> ApiResult<Value> {
    let base = content_type.split(';').next().unwrap_or("").trim();
    match base {
        "" | "application/json" | "*/*" => {}
        crate::apiserver::protobuf::MEDIA_TYPE => return crate::apiserver::protobuf::decode(body),
        "application/yaml" => {
            let text = std::str::from_utf8(body)
                .map_err(|_| ApiError::bad_request("the YAML body is not UTF-8 text"))?;
            return serde_saphyr::from_str::<Value>(text)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")));
        }
        _ if allow_patch && PatchType::from_content_type(base).is_some() => {}
        _ => {
            return Err(ApiError::unsupported_media_type(&[
                "application/json",
                "application/yaml",
                "application/vnd.kubernetes.protobuf",
            ]));
        }
    }
    if body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: {}",
            go_json_error(body, &e)
        ))
    })
}

/// serde_json's parse error in the words of Go's `encoding/json`, as kube-apiserver
/// answers a body that is not JSON.
fn go_json_error(body: &[u8], e: &serde_json::Error) -> String {
    if e.is_eof() {
        return "unexpected end of JSON input".to_string();
    }
    // The offending character: serde_json reports 1-based line and column.
    let offset = body
        .split(|b| *b == b'\n')
        .take(e.line().saturating_sub(1))
        .map(|l| l.len() + 1)
        .sum::<usize>()
        + e.column().saturating_sub(1);
    match body.get(offset).map(|b| *b as char) {
        Some(c) if e.to_string().starts_with("trailing characters") => {
            format!("invalid character '{c}' after top-level value")
        }
        Some(c) => format!("invalid character '{c}' looking for beginning of value"),
        None => "unexpected end of JSON input".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::aggregated_version;

    #[test]
    fn aggregated_discovery_in_the_version_asked_first() {
        let v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
        let beta = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
        assert_eq!(
            aggregated_version(&format!("{v2},{beta},application/json")),
            Some("v2")
        );
        assert_eq!(
            aggregated_version(&format!("{beta},application/json")),
            Some("v2beta1")
        );
        assert_eq!(aggregated_version("application/json, */*"), None);
    }
}
