//! `GET /api/v1/namespaces/{ns}/pods/{name}/log`: a container's log from the simulated
//! kubelet ([`kubelet`](crate::apiserver::kubelet)), as kube-apiserver proxies it:
//! `container` (required when the Pod has several), `follow`, `timestamps` (an RFC 3339
//! timestamp and a space before each line), `sinceTime` / `sinceSeconds`, `previous`,
//! `tailLines`; `text/plain`, one line per chunk. A follow stream ends when the container
//! restarts, the Pod goes, or the test drops the streams.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Response, header};
use bytes::Bytes;
use jiff::Timestamp;
use serde_json::Value;

use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::kubelet::{ContainerKey, Cursor, Next};
use crate::apiserver::sync::lock;

use super::query::Query;
use super::shared::Shared;

/// How often a quiet follow stream checks that its Pod still exists.
const POD_CHECK: Duration = Duration::from_millis(500);

fn pod_exists(shared: &Shared, namespace: &str, name: &str) -> bool {
    let state = lock(&shared.state);
    state
        .find("", "v1", "pods")
        .is_some_and(|def| state.get_stored(&def, Some(namespace), name).is_ok())
}

fn line_bytes(at: &Timestamp, text: &str, timestamps: bool) -> Bytes {
    if timestamps {
        Bytes::from(format!("{at} {text}\n"))
    } else {
        Bytes::from(format!("{text}\n"))
    }
}

/// The container a log request reads: the one named, or the pod's only one.
fn container_of(pod: &Value, name: &str, query: &Query) -> ApiResult<String> {
    let containers: Vec<String> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str).map(String::from))
        .collect();
    match query.get("container") {
        Some(c) if containers.iter().any(|n| n == c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None if containers.len() == 1 => Ok(containers[0].clone()),
        None => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            containers.join(" ")
        ))),
    }
}

/// From when a log request reads: `sinceTime` or `sinceSeconds` (at most one).
fn since(query: &Query) -> ApiResult<Option<Timestamp>> {
    match (query.get("sinceTime"), query.get("sinceSeconds")) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(
            "at most one of sinceTime or sinceSeconds may be specified",
        )),
        (Some(t), None) => Ok(Some(t.parse::<Timestamp>().map_err(|e| {
            ApiError::bad_request(format!("sinceTime: {t:?} is not an RFC 3339 time: {e}"))
        })?)),
        (None, Some(s)) => {
            let secs: i64 = s.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                ApiError::bad_request(format!("sinceSeconds: {s:?} is not a positive number"))
            })?;
            Ok(Timestamp::now()
                .checked_sub(jiff::SignedDuration::from_secs(secs))
                .ok())
        }
        (None, None) => Ok(None),
    }
}

/// A followed container log: the lines read so far, then each new line until the
/// container's log ends, the pod is gone or the client leaves.
struct Follow {
    shared: Arc<Shared>,
    namespace: String,
    pod: String,
    key: ContainerKey,
    timestamps: bool,
}

impl Follow {
    async fn run(
        self,
        first: Vec<Bytes>,
        mut cursor: Cursor,
        tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    ) {
        let mut changed = self.shared.kubelet.subscribe();
        for chunk in first {
            if tx.send(Ok(chunk)).await.is_err() {
                return;
            }
        }
        loop {
            changed.borrow_and_update();
            match self.shared.kubelet.next(&self.key, &mut cursor) {
                Next::Lines(lines) => {
                    for (at, text) in lines {
                        if tx
                            .send(Ok(line_bytes(&at, &text, self.timestamps)))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                }
                Next::End => return,
                Next::Wait => {
                    tokio::select! {
                        r = changed.changed() => if r.is_err() { return },
                        () = tokio::time::sleep(POD_CHECK) => {
                            if !pod_exists(&self.shared, &self.namespace, &self.pod) {
                                return;
                            }
                        }
                        () = tx.closed() => return,
                    }
                }
            }
        }
    }
}

/// Serves one log request.
pub(super) fn serve_log(
    shared: &Arc<Shared>,
    namespace: Option<&str>,
    name: &str,
    verb: &str,
    query: &Query,
) -> ApiResult<Response<Body>> {
    if verb != "get" {
        return Err(ApiError::method_not_allowed(verb, "pods/log"));
    }
    let namespace = namespace.unwrap_or("default").to_string();
    let pod = {
        let state = lock(&shared.state);
        let def = state
            .find("", "v1", "pods")
            .ok_or_else(ApiError::path_not_found)?;
        state.get_stored(&def, Some(&namespace), name)?
    };
    let container = container_of(&pod, name, query)?;
    let follow = query.bool("follow")?.unwrap_or(false);
    let timestamps = query.bool("timestamps")?.unwrap_or(false);
    let previous = query.bool("previous")?.unwrap_or(false);
    let since = since(query)?;
    let key: ContainerKey = (namespace.clone(), name.to_string(), container);
    let (mut lines, cursor) = shared.kubelet.read(&key, previous, since);
    if let Some(tail) = query.get("tailLines") {
        let tail: usize = tail
            .parse()
            .map_err(|_| ApiError::bad_request(format!("tailLines: {tail:?} is not a number")))?;
        let skip = lines.len().saturating_sub(tail);
        lines.drain(..skip);
    }
    let first: Vec<Bytes> = lines
        .iter()
        .map(|(at, text)| line_bytes(at, text, timestamps))
        .collect();
    let mut resp = if !follow || previous {
        Response::new(Body::from(first.concat()))
    } else {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
        let follow = Follow {
            shared: shared.clone(),
            namespace,
            pod: name.to_string(),
            key,
            timestamps,
        };
        tokio::spawn(follow.run(first, cursor, tx));
        Response::new(Body::from_stream(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        ))
    };
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(resp)
}
