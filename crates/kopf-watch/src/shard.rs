//! Sharding as an engine sees it ([`kopf_core::shards`]): the watch of a sharded resource
//! asks the API server for the held ranges only (`shardSelector`, KEP-5866; servers without
//! it send everything, and the engine filters by the same hash), and the objects of ranges
//! given up stop being processed before the change is acknowledged.

use std::collections::HashMap;

use kopf_core::shards::{Scope, ScopeObserver, selector};

use crate::shared::Slot;

/// A client for the watch of a sharded resource: every GET (its lists and watches) carries
/// the `shardSelector` of the scope as it is when the request is sent.
pub(crate) fn sharded_client(client: kube::Client, observer: &ScopeObserver) -> kube::Client {
    let default_ns = client.default_namespace().to_string();
    let scope = observer.receiver();
    let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
        let client = client.clone();
        let selector = selector(&scope.borrow());
        async move {
            if request.method() == http::Method::GET && !selector.is_empty() {
                let uri = request.uri();
                let joined = match uri.query() {
                    Some(q) if !q.is_empty() => format!("{q}&"),
                    _ => String::new(),
                };
                let path_and_query =
                    format!("{}?{joined}shardSelector={}", uri.path(), encode(&selector));
                let mut parts = uri.clone().into_parts();
                parts.path_and_query = Some(path_and_query.parse()?);
                *request.uri_mut() = http::Uri::from_parts(parts)?;
            }
            client
                .send(request)
                .await
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
        }
    });
    kube::Client::new(service, default_ns)
}

/// Waits for the next change of the scope (never, without sharding); false when its control
/// is gone (the observer is dropped then: no more changes come).
pub(crate) async fn changed(observer: &mut Option<ScopeObserver>) -> bool {
    match observer {
        Some(o) => {
            if o.changed().await {
                return true;
            }
            std::future::pending::<()>().await;
            false
        }
        None => std::future::pending().await,
    }
}

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 2);
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A new scope being adopted: the workers of objects outside it are told to end; once they
/// have (the engine waits, joining its workers meanwhile), it is acknowledged.
pub(crate) struct Handover {
    /// Ranges were added (the watch must list again, with the new selector).
    pub(crate) added: bool,
    ending: Vec<tokio::sync::watch::Sender<Option<crate::shared::Observed>>>,
    next: Scope,
}

impl Handover {
    /// Until every ending worker has ended.
    pub(crate) async fn ended(&self) {
        for tx in &self.ending {
            tx.closed().await;
        }
    }

    /// Acknowledges the scope (the work on the objects given up has ended).
    pub(crate) fn acknowledge(self, observer: &ScopeObserver, current: &mut Scope) {
        tracing::debug!(epoch = self.next.epoch, ranges = ?self.next.held, "Shard scope adopted.");
        observer.ack(self.next.epoch);
        *current = self.next;
    }
}

/// Adopts a new scope: the objects outside it leave (their workers are told to end, their
/// daemons and timers stopped).
pub(crate) fn adopt(
    observer: &ScopeObserver,
    current: &Scope,
    workers: &mut HashMap<crate::uid::Uid, Slot>,
    held: Option<&mut HashMap<String, std::sync::Arc<serde_json::Value>>>,
) -> Handover {
    let next = observer.scope();
    let added = next.held.difference(&current.held).next().is_some();
    let leaving: Vec<crate::uid::Uid> = workers
        .keys()
        .filter(|uid| !next.owns(uid.as_str()))
        .cloned()
        .collect();
    let mut ending = Vec::new();
    for uid in leaving {
        // Idle objects (no worker) just leave.
        if let Some(live) = workers.remove(&uid).and_then(|slot| slot.live) {
            live.tx.send_replace(None);
            ending.push(live.tx);
        }
    }
    if let Some(held) = held {
        held.retain(|uid, _| next.owns(uid));
    }
    if !ending.is_empty() {
        tracing::info!(
            objects = ending.len(),
            "Shards given up: stopping the work on {} objects before handing them over.",
            ending.len()
        );
    }
    Handover {
        added,
        ending,
        next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_are_encoded_for_the_query() {
        assert_eq!(
            encode("shardRange(object.metadata.uid, '0x0', '0x8') || x"),
            "shardRange%28object.metadata.uid%2C%20%270x0%27%2C%20%270x8%27%29%20%7C%7C%20x"
        );
    }
}
