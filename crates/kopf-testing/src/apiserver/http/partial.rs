//! Metadata-only responses: a GET, list or watch whose `Accept` asks for
//! `as=PartialObjectMetadata` or `as=PartialObjectMetadataList` (`g=meta.k8s.io;v=v1`)
//! gets its objects as `PartialObjectMetadata` (apiVersion `meta.k8s.io/v1`, the metadata
//! only) and its lists as `PartialObjectMetadataList`, as kube-apiserver answers them. A
//! response hook: the routes serve full objects, [`present`] cuts them down.

use axum::body::Body;
use axum::http::{HeaderMap, Response, StatusCode, header};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Value, json};

use super::negotiation::header_str;

const API_VERSION: &str = "meta.k8s.io/v1";

/// Whether the client asked for metadata only (the first media type of its `Accept`).
fn wants_partial(headers: &HeaderMap) -> bool {
    let accept = header_str(headers, header::ACCEPT);
    accept.split(',').next().is_some_and(|first| {
        first.contains("as=PartialObjectMetadata") && first.contains("g=meta.k8s.io")
    })
}

/// An object as `PartialObjectMetadata`.
fn partial(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": API_VERSION,
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// An object or a list (by its `items`) as metadata only.
fn cut(body: Value) -> Value {
    match body.get("items").and_then(Value::as_array) {
        Some(items) => json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": API_VERSION,
            "metadata": body.get("metadata").cloned().unwrap_or_else(|| json!({})),
            "items": items.iter().map(partial).collect::<Vec<_>>(),
        }),
        None => partial(&body),
    }
}

/// A watch event line with its object cut (ERROR events keep their Status).
fn cut_event(line: &[u8]) -> Bytes {
    match serde_json::from_slice::<Value>(line) {
        Ok(mut event) if event["type"] != "ERROR" && event.get("object").is_some() => {
            event["object"] = partial(&event["object"]);
            let mut text = event.to_string();
            text.push('\n');
            Bytes::from(text)
        }
        _ => {
            let mut out = line.to_vec();
            out.push(b'\n');
            Bytes::from(out)
        }
    }
}

/// The response as metadata only when the request asked for it (a successful GET, list or
/// watch of objects); any other response unchanged.
pub(super) async fn present(
    headers: &HeaderMap,
    verb: &str,
    resp: Response<Body>,
) -> Response<Body> {
    if resp.status() != StatusCode::OK
        || !matches!(verb, "get" | "list" | "watch")
        || !wants_partial(headers)
    {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    if verb == "watch" {
        // One event per line; a line may span chunks.
        let mut pending: Vec<u8> = Vec::new();
        let events = body.into_data_stream().map(move |chunk| {
            let chunk = chunk?;
            pending.extend_from_slice(&chunk);
            let mut out = Vec::new();
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line = &line[..line.len() - 1];
                if !line.iter().all(u8::is_ascii_whitespace) {
                    out.extend_from_slice(&cut_event(line));
                }
            }
            Ok::<_, axum::Error>(Bytes::from(out))
        });
        return Response::from_parts(parts, Body::from_stream(events));
    }
    let cut_body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => Body::from(cut(v).to_string()),
            Err(_) => Body::from(bytes),
        },
        Err(e) => Body::from(format!("cannot read the response: {e}")),
    };
    let mut resp = Response::from_parts(parts, cut_body);
    resp.headers_mut().remove(header::CONTENT_LENGTH);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_lists_and_events_keep_only_their_metadata() {
        let obj = json!({"kind": "KopfExample", "apiVersion": "kopf.dev/v1",
            "metadata": {"name": "a", "labels": {"x": "y"}}, "spec": {"big": true}});
        assert_eq!(
            cut(obj.clone()),
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "a", "labels": {"x": "y"}}})
        );
        let list = cut(
            json!({"kind": "KopfExampleList", "metadata": {"resourceVersion": "7"},
            "items": [obj.clone()]}),
        );
        assert_eq!(list["kind"], "PartialObjectMetadataList");
        assert_eq!(list["metadata"]["resourceVersion"], "7");
        assert_eq!(list["items"][0]["kind"], "PartialObjectMetadata");
        assert!(list["items"][0].get("spec").is_none());
        let event = cut_event(
            json!({"type": "ADDED", "object": obj})
                .to_string()
                .as_bytes(),
        );
        let event: Value = serde_json::from_slice(&event).expect("json");
        assert_eq!(event["object"]["kind"], "PartialObjectMetadata");
        assert!(event["object"].get("spec").is_none());
        let error = json!({"type": "ERROR", "object": {"kind": "Status", "code": 410}});
        let same: Value =
            serde_json::from_slice(&cut_event(error.to_string().as_bytes())).expect("json");
        assert_eq!(same, error);
    }

    #[test]
    fn only_when_asked() {
        let mut h = HeaderMap::new();
        assert!(!wants_partial(&h));
        h.insert(
            header::ACCEPT,
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
                .parse()
                .expect("header"),
        );
        assert!(wants_partial(&h));
    }
}
