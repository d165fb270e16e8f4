//! Sharding as an engine sees it ([`kopf_core::shards`]): the watch of a sharded resource
//! asks the API server for the held ranges only (`shardSelector`, KEP-5866; servers without
//! it send everything, and the engine filters by the same hash), and the objects of ranges
//! given up stop being processed before the change is acknowledged.

use kopf_core::shards::{Scope, ScopeControl, ScopeObserver, selector};

/// A client for the watch of a sharded resource: every GET (its lists and watches) carries
/// the `shardSelector` of the scope as it is when the request is sent.
fn sharded_client(client: kube::Client, observer: &ScopeObserver) -> kube::Client {
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

/// The shard scope of one engine's resource: the ranges it holds (None: not sharded, it
/// owns every object), and the changes of the scope, adopted once the work on the objects
/// given up has ended.
pub(crate) struct Shards {
    observer: Option<ScopeObserver>,
    scope: Option<Scope>,
}

impl Shards {
    /// The scope of `control` (None, or a resource with index handlers, which must see
    /// every object: not sharded).
    pub(crate) fn new(control: Option<&ScopeControl>, indexed: bool) -> Self {
        let observer = match control {
            Some(control) if !indexed => Some(control.observer()),
            _ => None,
        };
        let scope = observer.as_ref().map(|o| o.scope());
        Shards { observer, scope }
    }

    /// The client of the watch: it asks for the held ranges only.
    pub(crate) fn client(&self, client: kube::Client) -> kube::Client {
        match &self.observer {
            Some(o) => sharded_client(client, o),
            None => client,
        }
    }

    /// Whether an object is in the held ranges (events of other ranges are dropped: a
    /// server that ignores shardSelector sends them).
    pub(crate) fn owns(&self, uid: &str) -> bool {
        self.scope.as_ref().is_none_or(|scope| scope.owns(uid))
    }

    /// Waits for the next change of the scope (never, without sharding); false when its
    /// control is gone (the observer is dropped then: no more changes come).
    pub(crate) async fn changed(&mut self) -> bool {
        match &mut self.observer {
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

    /// The scope to adopt now, and whether it adds ranges (the watch must list again, with
    /// the new selector); None without sharding.
    pub(crate) fn next(&self) -> Option<(Scope, bool)> {
        let (Some(o), Some(current)) = (&self.observer, &self.scope) else {
            return None;
        };
        let next = o.scope();
        let added = next.held.difference(&current.held).next().is_some();
        Some((next, added))
    }

    /// Acknowledges `next` once the work on the objects given up has ended.
    pub(crate) fn adopted(&mut self, next: Scope) {
        let Some(o) = &self.observer else {
            return;
        };
        tracing::debug!(epoch = next.epoch, ranges = ?next.held, "Shard scope adopted.");
        o.ack(next.epoch);
        self.scope = Some(next);
    }

    /// Acknowledges the current scope at once (paused: nothing is processed).
    pub(crate) fn adopted_idle(&mut self) {
        if let Some(o) = &self.observer {
            let next = o.scope();
            o.ack(next.epoch);
            self.scope = Some(next);
        }
    }
}

/// Until the workers of the objects given up have ended (each of their senders closed);
/// how many there are is said at once.
pub(crate) fn handed_over(
    ending: Vec<std::sync::Arc<crate::shared::StateSender>>,
) -> impl std::future::Future<Output = ()> {
    if !ending.is_empty() {
        tracing::info!(
            objects = ending.len(),
            "Shards given up: stopping the work on {} objects before handing them over.",
            ending.len()
        );
    }
    async move {
        for tx in &ending {
            tx.closed().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_scope_is_adopted_only_when_acknowledged() {
        let unsharded = Shards::new(None, false);
        assert!(unsharded.owns("any") && unsharded.next().is_none());
        let control = ScopeControl::new(2);
        assert!(
            Shards::new(Some(&control), true).next().is_none(),
            "indexed resources see every object"
        );
        let mut shards = Shards::new(Some(&control), false);
        assert!(!shards.owns("any"), "no range held yet");
        let epoch = control.set([0, 1].into());
        let (next, added) = shards.next().expect("sharded");
        assert!(added, "ranges were added: the watch lists again");
        assert!(!control.is_adopted(epoch) && !shards.owns("any"));
        shards.adopted(next);
        assert!(control.is_adopted(epoch) && shards.owns("any"));
        let epoch = control.set([1].into());
        let (next, added) = shards.next().expect("sharded");
        assert!(!added, "only given up");
        shards.adopted(next);
        assert!(control.is_adopted(epoch));
        control.set([0].into());
        shards.adopted_idle();
        assert!(control.is_adopted(control.scope().epoch), "paused: at once");
    }

    #[test]
    fn selectors_are_encoded_for_the_query() {
        assert_eq!(
            encode("shardRange(object.metadata.uid, '0x0', '0x8') || x"),
            "shardRange%28object.metadata.uid%2C%20%270x0%27%2C%20%270x8%27%29%20%7C%7C%20x"
        );
    }
}
