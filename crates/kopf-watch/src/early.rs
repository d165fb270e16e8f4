//! Changes seen during a long listing: a listing of many objects takes seconds (a minute
//! at 100,000), and the watch that carries the changes made meanwhile only starts after
//! it. When a listing is still going after [`Settings::early_changes_after`] (and has
//! brought an object), or after [`EARLY_AFTER_OBJECTS`] objects, a second watch opens, and the changes it brings go to the engine
//! at once, ahead of the rest of the listing; the engine gives them the changed objects'
//! lane.
//!
//! It watches from the current resourceVersion (read with a list of one object): not
//! older than the listing's, as the listing has brought an object by then. The changes
//! made before it opened, during the listing's first moments, come after the listing, as
//! without it. The listing's own watch still follows the listing: nothing depends on the
//! early watch, which ends with the listing or on its first error. What both bring is
//! delivered once and never out of order (`M`: the highest resourceVersion among the
//! objects listed so far, not newer than the listing's own):
//!
//! - a change at or below `M` (as `M` is when the change comes; none is, while the server's
//!   resourceVersions grow) is dropped: the listing's snapshot has it, or a newer state,
//!   for its object; an object listed already has a resourceVersion at or below `M`, so
//!   every change the early watch passes on is newer than what the engine has of it;
//! - a listed state of an object the early watch brought a state (or the deletion) of, at
//!   or above the listed one, is dropped;
//! - after the listing, its watch replays the changes since the listing's resourceVersion:
//!   those of an object at or below what the early watch brought of it are dropped, until
//!   the replay passes the early watch's highest resourceVersion.
//!
//! The cost: a list of one object and a watch per listing that takes longer than the
//! threshold, none for the others.
//!
//! [`Settings::early_changes_after`]: crate::Settings::early_changes_after

use std::collections::HashMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, PartialObjectMeta};
use kube::runtime::watcher;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::raw::{EventStream, RawObject};

/// A listing that has brought this many objects (a page of kube's paginated lists) and
/// goes on is long: the early watch opens then, without waiting for the time threshold.
pub(crate) const EARLY_AFTER_OBJECTS: usize = 500;

/// How to open the early watch: the listing's API, selectors and kind of objects.
#[derive(Clone)]
pub(crate) struct EarlyWatch {
    pub(crate) api: Api<RawObject>,
    pub(crate) labels: Option<String>,
    pub(crate) fields: Option<String>,
    /// Metadata-only: the resource, to make objects of the metadata (as the listing does).
    pub(crate) metadata: Option<ApiResource>,
    pub(crate) resource: String,
}

/// The state of [`changes_first`].
struct State {
    main: EventStream,
    early: EarlyWatch,
    after: Duration,
    /// The early watch's events, while it runs (its task ends when this is dropped).
    running: Option<(mpsc::Receiver<watcher::Event<RawObject>>, Abort)>,
    /// When the early watch is due, during a listing that has brought an object.
    due: Option<Instant>,
    listing: bool,
    /// The highest resourceVersion among the objects listed so far (0: none yet).
    listed_max: u64,
    /// How many objects the listing has brought so far.
    listed: usize,
    /// uid -> the resourceVersion of the last state the early watch brought of it.
    seen: HashMap<String, u64>,
    /// The highest of those.
    seen_max: u64,
}

/// Aborts a task when dropped.
struct Abort(tokio::task::JoinHandle<()>);

impl Drop for Abort {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `main` (kube's list+watch), with the changes made during its long listings delivered
/// ahead of the listing (see the module's docs).
pub(crate) fn changes_first(main: EventStream, early: EarlyWatch, after: Duration) -> EventStream {
    futures::stream::unfold(State::new(main, early, after), |mut s| async move {
        loop {
            let due = s.due.filter(|_| s.listed_max > 0 && s.running.is_none());
            let item = tokio::select! {
                biased;
                event = recv(&mut s.running) => {
                    match event {
                        Some(event) => {
                            if s.brought(&event) {
                                return Some((Ok(event), s));
                            }
                            continue;
                        }
                        // It ended (an error, the watch's timeout): the listing's watch
                        // brings the rest.
                        None => {
                            s.running = None;
                            s.due = None;
                            continue;
                        }
                    }
                }
                () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                    s.due = None;
                    let (tx, rx) = mpsc::channel(256);
                    let task = tokio::spawn(run(s.early.clone(), tx));
                    s.running = Some((rx, Abort(task)));
                    continue;
                }
                item = s.main.next() => item?,
            };
            if let Some(item) = s.filter(item) {
                return Some((item, s));
            }
        }
    })
    .boxed()
}

async fn recv(
    running: &mut Option<(mpsc::Receiver<watcher::Event<RawObject>>, Abort)>,
) -> Option<watcher::Event<RawObject>> {
    match running {
        Some((rx, _)) => rx.recv().await,
        None => std::future::pending().await,
    }
}

type Item = Result<watcher::Event<RawObject>, watcher::Error>;

impl State {
    fn new(main: EventStream, early: EarlyWatch, after: Duration) -> Self {
        State {
            main,
            early,
            after,
            running: None,
            due: None,
            listing: false,
            listed_max: 0,
            listed: 0,
            seen: HashMap::new(),
            seen_max: 0,
        }
    }

    /// Whether a state the early watch brought is to be passed on (newer than what the
    /// listing has); notes it if so.
    fn brought(&mut self, event: &watcher::Event<RawObject>) -> bool {
        let (watcher::Event::Apply(o) | watcher::Event::Delete(o)) = event else {
            return false;
        };
        let (Some(uid), Some(rv)) = (o.uid(), o.rv()) else {
            return false;
        };
        if !self.listing || rv <= self.listed_max {
            return false;
        }
        self.seen.insert(uid.to_string(), rv);
        self.seen_max = self.seen_max.max(rv);
        true
    }

    /// Whether the early watch already brought this state of `o`, or a newer one.
    fn brought_already(&self, o: &RawObject) -> bool {
        o.uid()
            .and_then(|uid| self.seen.get(uid))
            .is_some_and(|seen| o.rv().is_none_or(|rv| rv <= *seen))
    }

    /// An item of the listing's stream: passed on, or dropped as delivered already.
    fn filter(&mut self, item: Item) -> Option<Item> {
        match &item {
            Ok(watcher::Event::Init) => {
                self.listing = true;
                self.listed_max = 0;
                self.listed = 0;
                self.due = Some(Instant::now() + self.after);
                self.running = None;
                self.seen.clear();
                self.seen_max = 0;
            }
            Ok(watcher::Event::InitApply(o)) => {
                self.listed_max = self.listed_max.max(o.rv().unwrap_or_default());
                self.listed += 1;
                if self.listed == EARLY_AFTER_OBJECTS && self.running.is_none() {
                    // A page's worth and more to come: a long listing, no need to wait.
                    self.due = Some(Instant::now());
                }
                if self.brought_already(o) {
                    return None;
                }
            }
            Ok(watcher::Event::InitDone) => {
                self.listing = false;
                self.due = None;
                self.running = None;
            }
            Ok(watcher::Event::Apply(o) | watcher::Event::Delete(o)) if !self.seen.is_empty() => {
                if o.rv().is_some_and(|rv| rv > self.seen_max) {
                    // The replay is past everything the early watch brought.
                    self.seen.clear();
                } else if self.brought_already(o) {
                    return None;
                }
            }
            _ => {}
        }
        Some(item)
    }
}

/// The early watch: from the current resourceVersion (read with a list of one object),
/// its events sent to `tx` until it fails or ends.
async fn run(w: EarlyWatch, tx: mpsc::Sender<watcher::Event<RawObject>>) {
    let mut list = ListParams::default().limit(1);
    let mut params = WatchParams::default();
    if let Some(l) = &w.labels {
        list = list.labels(l);
        params = params.labels(l);
    }
    if let Some(f) = &w.fields {
        list = list.fields(f);
        params = params.fields(f);
    }
    let rv = match w.api.list_metadata(&list).await {
        Ok(l) => l.metadata.resource_version.unwrap_or_default(),
        Err(e) => {
            tracing::debug!(resource = %w.resource, error = %e, "no early watch: the list of one object failed");
            return;
        }
    };
    tracing::debug!(resource = %w.resource, rv, "the listing takes long: watching the changes meanwhile");
    let events = match &w.metadata {
        None => w.api.watch(&params, &rv).await.map(StreamExt::boxed),
        Some(ar) => {
            let ar = ar.clone();
            w.api
                .watch_metadata(&params, &rv)
                .await
                .map(|s| s.map_ok(move |e| metadata_event(e, &ar)).boxed())
        }
    };
    let mut events = match events {
        Ok(events) => events,
        Err(e) => {
            tracing::debug!(resource = %w.resource, error = %e, "no early watch: it failed to start");
            return;
        }
    };
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => watcher::Event::Apply(o),
            Ok(WatchEvent::Deleted(o)) => watcher::Event::Delete(o),
            Ok(WatchEvent::Bookmark(_)) => continue,
            Ok(WatchEvent::Error(e)) => {
                tracing::debug!(resource = %w.resource, error = %e, "the early watch ended");
                return;
            }
            Err(e) => {
                tracing::debug!(resource = %w.resource, error = %e, "the early watch ended");
                return;
            }
        };
        if tx.send(event).await.is_err() {
            return;
        }
    }
}

/// A metadata-only watch event, its object made an object of the resource.
fn metadata_event(
    e: WatchEvent<PartialObjectMeta<RawObject>>,
    ar: &ApiResource,
) -> WatchEvent<RawObject> {
    let object = |m: PartialObjectMeta<RawObject>| crate::raw::metadata_object(m, ar);
    match e {
        WatchEvent::Added(m) => WatchEvent::Added(object(m)),
        WatchEvent::Modified(m) => WatchEvent::Modified(object(m)),
        WatchEvent::Deleted(m) => WatchEvent::Deleted(object(m)),
        WatchEvent::Bookmark(b) => WatchEvent::Bookmark(b),
        WatchEvent::Error(e) => WatchEvent::Error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(uid: &str, rv: u64) -> RawObject {
        RawObject::from_body(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": uid, "uid": uid, "resourceVersion": rv.to_string()}
        }))
    }

    fn state() -> State {
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("url"));
        let client = kube::Client::try_from(config).expect("client");
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        State::new(
            futures::stream::pending().boxed(),
            EarlyWatch {
                api: Api::all_with(client, &ar),
                labels: None,
                fields: None,
                metadata: None,
                resource: "configmaps".into(),
            },
            Duration::from_millis(250),
        )
    }

    fn passes(s: &mut State, event: watcher::Event<RawObject>) -> bool {
        s.filter(Ok(event)).is_some()
    }

    #[tokio::test]
    async fn what_the_early_watch_and_the_listing_both_bring_is_delivered_once_in_order() {
        let mut s = state();
        assert!(passes(&mut s, watcher::Event::Init));
        assert!(passes(&mut s, watcher::Event::InitApply(object("a", 5))));
        // Early changes: newer than every listed object, passed on; not newer, dropped.
        assert!(s.brought(&watcher::Event::Apply(object("a", 12))));
        assert!(s.brought(&watcher::Event::Apply(object("z", 10))));
        assert!(s.brought(&watcher::Event::Delete(object("d", 11))));
        assert!(passes(&mut s, watcher::Event::InitApply(object("b", 7))));
        assert!(!s.brought(&watcher::Event::Apply(object("c", 6))));
        // Listed states older than (or as old as) what the early watch brought: dropped.
        assert!(!passes(&mut s, watcher::Event::InitApply(object("d", 3))));
        assert!(!passes(&mut s, watcher::Event::InitApply(object("z", 10))));
        assert!(passes(&mut s, watcher::Event::InitDone));
        assert!(
            !s.brought(&watcher::Event::Apply(object("z", 20))),
            "after the listing"
        );
        // The listing's watch replays from its resourceVersion: what was brought is dropped.
        assert!(!passes(&mut s, watcher::Event::Apply(object("z", 10))));
        assert!(passes(&mut s, watcher::Event::Apply(object("c", 10))));
        assert!(!passes(&mut s, watcher::Event::Delete(object("d", 11))));
        assert!(!passes(&mut s, watcher::Event::Apply(object("a", 12))));
        // Past the highest: everything passes from then on.
        assert!(passes(&mut s, watcher::Event::Apply(object("z", 13))));
        assert!(s.seen.is_empty());
    }

    #[tokio::test]
    async fn a_listing_is_long_after_its_time_or_a_page_of_objects() {
        let mut s = state();
        assert!(passes(&mut s, watcher::Event::Init));
        let after_time = s.due.expect("due after the time threshold");
        for i in 0..EARLY_AFTER_OBJECTS {
            assert!(passes(
                &mut s,
                watcher::Event::InitApply(object(&format!("o{i}"), 1))
            ));
        }
        assert!(
            s.due.is_some_and(|due| due < after_time),
            "due at once after a page"
        );
        assert!(passes(&mut s, watcher::Event::InitDone));
        assert!(s.due.is_none());
    }
}
