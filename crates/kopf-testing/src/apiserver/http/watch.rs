//! Watch streams: the start (synthetic ADDED events, a replay from a resourceVersion, or
//! 410), live changes from the store's fan-out, bookmarks, timeouts, conversion, Tables.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Response, header};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::control::OpenWatch;
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::gojson::{self, EventObject};
use crate::apiserver::selectors::FieldSelector;
use crate::apiserver::semantics::State;
use crate::apiserver::storage::{Change, ChangeType, Version};
use crate::apiserver::sync::lock;
use crate::apiserver::webhooks::conversion::{self, CrdConversion};

use super::partial::Transform;
use super::query::{Query, Selectors};
use super::shared::Shared;

struct WatchSpec {
    def: ResourceDef,
    namespace: Option<String>,
    selectors: Selectors,
    bookmarks: bool,
    /// What the client asked events' objects to be (metadata, Table rows).
    transform: Transform,
    /// Whether a Table went out (later ones carry no column definitions).
    table_sent: AtomicBool,
    /// The CRD's conversion when it is by webhook.
    conversion: Option<CrdConversion>,
    /// [`State::view_fingerprint`] of `def`: stored versions presented as they are in this
    /// view are sent as their stored text.
    fingerprint: u64,
}

/// An event waiting to be rendered: a stored object (converted and presented when sent),
/// or an event whose object is final but for the transformation (ERROR, BOOKMARK).
enum PendingEvent {
    Object(&'static str, Arc<Value>),
    /// An object whose stored JSON text is what this watch presents: sent as it is.
    Stored(&'static str, Bytes),
    Ready(&'static str, Value),
}

impl WatchSpec {
    fn concerns(&self, c: &Change) -> bool {
        c.res == State::res_key(&self.def)
            && self.namespace.as_deref().is_none_or(|ns| c.key.0 == ns)
    }

    /// Whether a stored version is sent as its stored text (no table, no conversion, and
    /// this view presents it as it is).
    fn sends_as_stored(&self, v: &Version) -> bool {
        self.transform.is_identity()
            && self.conversion.is_none()
            && v.presented_as() == Some(self.fingerprint)
    }

    /// The event a change produces for this watch, if any: its type and the stored object.
    fn event(&self, c: &Change) -> Option<PendingEvent> {
        if !self.concerns(c) {
            return None;
        }
        let (kind, parsed) = if self.selectors.is_empty() {
            // Everything matches: the change's own type.
            (c.kind.as_str(), None)
        } else {
            let object = c.object.value();
            let now = c.kind != ChangeType::Deleted && self.selectors.matches(&object);
            let prev = c.prev.as_ref().map(|p| p.value());
            let before = prev.as_ref().is_some_and(|p| self.selectors.matches(p));
            let kind = match c.kind {
                ChangeType::Added if now => "ADDED",
                ChangeType::Modified if now && before => "MODIFIED",
                ChangeType::Modified if now => "ADDED",
                ChangeType::Modified if before => {
                    // Leaving the selectors: DELETED with the state that matched, stamped
                    // with the change's resourceVersion (as the API server's watch cache
                    // does).
                    let mut prev = prev.unwrap_or(Value::Null);
                    if let Some(meta) = prev.get_mut("metadata").and_then(Value::as_object_mut) {
                        meta.insert("resourceVersion".into(), json!(c.rv.to_string()));
                    }
                    return Some(PendingEvent::Object("DELETED", Arc::new(prev)));
                }
                ChangeType::Deleted if self.selectors.matches(&object) => "DELETED",
                _ => return None,
            };
            (kind, Some(object))
        };
        if self.sends_as_stored(&c.object) {
            return Some(PendingEvent::Stored(kind, c.object.json().clone()));
        }
        let object = parsed.unwrap_or_else(|| c.object.value());
        Some(PendingEvent::Object(kind, Arc::new(object)))
    }

    /// Converts (by webhook, when the CRD says so) and renders stored objects as event
    /// lines, with one conversion request for all of them.
    async fn render_events(
        &self,
        shared: &Arc<Shared>,
        mut pending: Vec<PendingEvent>,
    ) -> ApiResult<Vec<Bytes>> {
        // The objects move out (the last reference to each, presented without a copy).
        let raws: Vec<Arc<Value>> = pending
            .iter_mut()
            .filter_map(|p| match p {
                PendingEvent::Object(_, o) => Some(std::mem::replace(o, Arc::new(Value::Null))),
                PendingEvent::Stored(..) | PendingEvent::Ready(..) => None,
            })
            .collect();
        let mut presented = if raws.is_empty() {
            Vec::new().into_iter()
        } else {
            conversion::present_all(&**shared, self.conversion.as_ref(), &self.def, raws)
                .await?
                .into_iter()
        };
        let mut out = Vec::with_capacity(pending.len());
        for p in pending {
            match p {
                PendingEvent::Ready(kind, v) => out.push(line(kind, &self.render_presented(v))),
                PendingEvent::Stored(kind, json) => out.push(stored_event_line(kind, &json)),
                PendingEvent::Object(kind, _) => {
                    let o = presented.next().unwrap_or(Value::Null);
                    out.push(line(kind, &self.render_presented(o)));
                }
            }
        }
        Ok(out)
    }

    /// A presented object as the watch delivers it: itself, its metadata, or a one-row
    /// Table (the first with the column definitions).
    fn render_presented(&self, o: Value) -> Value {
        if self.transform.is_identity() {
            return o;
        }
        let first = !self.table_sent.swap(true, Ordering::Relaxed);
        self.transform.event_object(&self.def, o, first)
    }

    /// The line of a bookmark, transformed as the client asked.
    fn bookmark_line(&self, rv: u64) -> Bytes {
        line("BOOKMARK", &self.render_presented(self.bookmark(rv, false)))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Value {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"kind": self.def.kind, "apiVersion": self.def.api_version(), "metadata": metadata})
    }
}

/// One line of the watch stream: an event of this type with this object, and a newline.
fn line(kind: &str, object: &Value) -> Bytes {
    Bytes::from(gojson::event_line(kind, EventObject::Value(object)))
}

/// The line of an event whose object is a stored JSON text: the same bytes as [`line`],
/// without parsing and re-serialising the object.
fn stored_event_line(kind: &str, object: &Bytes) -> Bytes {
    Bytes::from(gojson::event_line(kind, EventObject::Text(object)))
}

pub(super) fn watch(
    shared: &Arc<Shared>,
    def: &ResourceDef,
    ns: Option<&str>,
    name: Option<&str>,
    query: &Query,
    transform: Transform,
) -> ApiResult<Response<Body>> {
    let shards = lock(&shared.settings).sharded_list_and_watch;
    let mut selectors = Selectors::parse(def, query)?.with_shards(query, shards)?;
    if let Some(name) = name {
        // GET .../<name>?watch=true watches one object.
        let combined = match query.get("fieldSelector") {
            Some(f) if !f.is_empty() => format!("{f},metadata.name={name}"),
            _ => format!("metadata.name={name}"),
        };
        selectors.field =
            FieldSelector::parse(&combined).map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    super::params::validate_list_options(query, true)?;
    let send_initial = query.bool("sendInitialEvents")?;
    let bookmarks = query.bool("allowWatchBookmarks")?.unwrap_or(false);
    let settings = lock(&shared.settings).clone();
    let timeout = match query.int("timeoutSeconds")? {
        Some(t) if t > 0 => Duration::from_secs(t.unsigned_abs()),
        _ => settings.default_watch_timeout.unwrap_or_else(|| {
            use rand::Rng;
            Duration::from_secs(rand::rng().random_range(1800..3600))
        }),
    };
    let spec = WatchSpec {
        def: def.clone(),
        namespace: if def.namespaced {
            ns.map(str::to_string)
        } else {
            None
        },
        selectors,
        bookmarks,
        transform,
        table_sent: AtomicBool::new(false),
        conversion: if def.is_custom() {
            CrdConversion::lookup_webhook(&lock(&shared.state), def)
        } else {
            None
        },
        fingerprint: State::view_fingerprint(def),
    };
    let rv_param = query.get("resourceVersion").unwrap_or("").to_string();
    let asked_rv = super::params::parse_rv(def, &rv_param)?;
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(256);

    // Decide the start under the lock, subscribing before reading, so nothing is missed.
    let expire = lock(&shared.faults).take_expire(&def.plural);
    let mut initial: Vec<PendingEvent> = Vec::new();
    let live;
    let start_rv;
    {
        let state = lock(&shared.state);
        live = state.store.subscribe();
        let current = state.store.rv();
        let synthetic = rv_param.is_empty() || rv_param == "0" || send_initial == Some(true);
        if expire {
            let status =
                ApiError::expired(format!("too old resource version: {rv_param} ({current})"));
            initial.push(PendingEvent::Ready("ERROR", status.to_status()));
            start_rv = None;
        } else if synthetic {
            let scope = spec.namespace.as_deref();
            for (_, obj) in state.store.list(&State::res_key(def), scope) {
                if spec.selectors.matches(&obj) {
                    initial.push(PendingEvent::Object("ADDED", obj));
                }
            }
            if send_initial == Some(true) {
                initial.push(PendingEvent::Ready(
                    "BOOKMARK",
                    spec.bookmark(current, true),
                ));
            }
            start_rv = Some(current);
        } else if asked_rv > current {
            let status = super::params::too_large_rv(asked_rv, current);
            initial.push(PendingEvent::Ready("ERROR", status.to_status()));
            start_rv = None;
        } else {
            let n = asked_rv;
            match state.store.changes_since(n) {
                Some(changes) => {
                    initial.extend(changes.iter().filter_map(|c| spec.event(c)));
                    start_rv = Some(current.max(n));
                }
                None => {
                    let status = ApiError::expired(format!(
                        "too old resource version: {n} ({})",
                        state.store.compacted()
                    ));
                    initial.push(PendingEvent::Ready("ERROR", status.to_status()));
                    start_rv = None;
                }
            }
        }
    }
    let watch_id = {
        let mut intro = lock(&shared.intro);
        intro.watch_seq += 1;
        let id = intro.watch_seq;
        intro.watches.push(OpenWatch {
            id,
            resource: format!("{}/{}", def.api_version(), def.plural),
            namespace: spec.namespace.clone().unwrap_or_default(),
            label_selector: query.get("labelSelector").unwrap_or("").into(),
            field_selector: query.get("fieldSelector").unwrap_or("").into(),
            shard_selector: spec
                .selectors
                .shard
                .as_ref()
                .map(|s| s.as_str().to_string())
                .unwrap_or_default(),
            resource_version: rv_param.clone(),
        });
        id
    };
    let shared2 = shared.clone();
    let close_rx = shared.close_tx.subscribe();
    tokio::spawn(async move {
        run_watch(
            &shared2,
            spec,
            initial,
            start_rv,
            live,
            close_rx,
            tx,
            timeout,
            settings.bookmark_interval,
        )
        .await;
        lock(&shared2.intro).watches.retain(|w| w.id != watch_id);
    });
    let mut resp = Response::new(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}

#[allow(clippy::too_many_arguments)]
async fn run_watch(
    shared: &Arc<Shared>,
    spec: WatchSpec,
    initial: Vec<PendingEvent>,
    start_rv: Option<u64>,
    mut live: broadcast::Receiver<Arc<Change>>,
    mut close_rx: broadcast::Receiver<Option<String>>,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    timeout: Duration,
    bookmark_interval: Duration,
) {
    let initial = match spec.render_events(shared, initial).await {
        Ok(events) => events,
        Err(e) => {
            let _ = tx.send(Ok(line("ERROR", &e.to_status()))).await;
            return;
        }
    };
    for ev in initial {
        if !send_event(shared, &tx, ev).await {
            return;
        }
    }
    let Some(mut last_rv) = start_rv else {
        return; // An ERROR event was sent: close.
    };
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval(bookmark_interval.max(Duration::from_millis(10)));
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = &mut deadline => {
                if spec.bookmarks {
                    let _ = tx.send(Ok(spec.bookmark_line(last_rv))).await;
                }
                return;
            }
            _ = tx.closed() => return,
            closed = close_rx.recv() => match closed {
                Ok(Some(res)) if res != spec.def.plural => continue,
                _ => return,
            },
            _ = ticker.tick(), if spec.bookmarks => {
                // Everything up to the store's RV has been broadcast; drain it, then mark it.
                let rv = lock(&shared.state).store.rv();
                loop {
                    match live.try_recv() {
                        Ok(c) if c.rv <= rv => {
                            if c.rv > last_rv {
                                last_rv = c.rv;
                                if !send_change(shared, &spec, &tx, &c).await {
                                    return;
                                }
                            }
                        }
                        Ok(c) => {
                            // A newer change: deliver it and stop draining.
                            last_rv = c.rv;
                            if !send_change(shared, &spec, &tx, &c).await {
                                return;
                            }
                            break;
                        }
                        Err(broadcast::error::TryRecvError::Empty) => {
                            last_rv = last_rv.max(rv);
                            break;
                        }
                        Err(_) => return,
                    }
                }
                if tx.send(Ok(spec.bookmark_line(last_rv))).await.is_err() {
                    return;
                }
            }
            change = live.recv() => match change {
                Ok(c) => {
                    if c.rv <= last_rv {
                        continue;
                    }
                    last_rv = c.rv;
                    if !send_change(shared, &spec, &tx, &c).await {
                        return;
                    }
                }
                // Lagged or closed: end the stream; the client resumes from its last RV.
                Err(_) => return,
            },
        }
    }
}

/// Sends the event of a change (if the watch sees it); false when the stream must end.
async fn send_change(
    shared: &Arc<Shared>,
    spec: &WatchSpec,
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
    c: &Change,
) -> bool {
    let Some(event) = spec.event(c) else {
        return true;
    };
    match spec.render_events(shared, vec![event]).await {
        Ok(events) => {
            for ev in events {
                if !send_event(shared, tx, ev).await {
                    return false;
                }
            }
            true
        }
        Err(e) => {
            let _ = tx.send(Ok(line("ERROR", &e.to_status()))).await;
            false
        }
    }
}

async fn send_event(
    shared: &Arc<Shared>,
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
    ev: Bytes,
) -> bool {
    let delay = lock(&shared.faults).watch_event_delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    tx.send(Ok(ev)).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_event_line_is_the_serialised_event() {
        let object = json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {"name": "a", "resourceVersion": "7"}, "spec": {"x": [1, "é\n"]}});
        let stored = Version::new(&object, None);
        for kind in ["ADDED", "MODIFIED", "DELETED"] {
            assert_eq!(stored_event_line(kind, stored.json()), line(kind, &object));
        }
    }
}
