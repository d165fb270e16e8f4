//! The engine's source: the list+watch of a resource (kube's `watcher`, opened by
//! [`crate::stream`]) turned into the engine's events, with what the watch's failures mean for
//! the operator: the backoff, logs and metrics of an outage ([`crate::outage`]), a resource no
//! longer served (404: its CRD deleted, waited for) and one the operator may not list (403
//! before any listing: an error), and the objects a relist no longer has.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use kopf_core::causes::EventKind;
use kopf_core::metrics::Metrics;
use kube::api::Api;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher;

use crate::outage::{FailureLog, WatchBackoff};
use crate::raw::{EventStream, RawObject};
use crate::stream::WatchStream;
use crate::uid::Uid;
use crate::{NamespaceSelector, WatchError};

/// What the source hands to the engine.
// One event at a time, moved once into the engine: boxing the object would cost an
// allocation per event for nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum SourceEvent {
    /// An object of a served namespace, with a uid, as listed, changed or deleted.
    Object {
        /// The object.
        obj: RawObject,
        /// Its uid.
        uid: String,
        /// Listed, modified or deleted.
        kind: EventKind,
    },
    /// A listing is complete: the uids it had (None when none was followed: a listing
    /// interrupted by a pause or a new scope).
    Listed(Option<HashSet<Uid>>),
    /// The watch failed: the next attempt comes after this delay.
    Failed(Duration),
    /// Nothing for the engine (the watcher's own `Init`, an object filtered out).
    Nothing,
    /// The stream ended (the engine stops).
    Ended,
}

/// The list+watch of one resource, and what it knows of its health.
pub(crate) struct Source {
    config: WatchStream,
    api: Api<RawObject>,
    stream: EventStream,
    /// The backoff is ours, not kube's StreamBackoff: that one resets on every item,
    /// including the `Init` the watcher emits before each attempt to list, so it never
    /// grows during an outage of the listing.
    backoff: WatchBackoff,
    outage: FailureLog,
    metrics: Option<Metrics>,
    /// The resource's plural (its logs and metrics).
    plural: String,
    /// `plural.group` (the error when it is forbidden).
    name: String,
    namespaces: NamespaceSelector,
    /// Failures of the watch stream since its last event.
    failing: bool,
    /// A listing has succeeded (a 403 before that means the operator cannot serve it).
    listed_once: bool,
    /// The resource is not served (404): logged once, until it is served again.
    gone: bool,
    /// The uids of the listing in progress: objects missing from a relist went away while
    /// the watch was down (no DELETED event will come for them).
    listing: Option<HashSet<Uid>>,
}

impl Source {
    /// The source of `api`'s objects as `config` lists and watches them (opened at once).
    pub(crate) fn new(
        config: WatchStream,
        api: Api<RawObject>,
        metrics: Option<Metrics>,
        (plural, name): (String, String),
        namespaces: NamespaceSelector,
    ) -> Self {
        let stream = config.open(&api);
        Source {
            config,
            api,
            stream,
            backoff: WatchBackoff::default(),
            outage: FailureLog::default(),
            metrics,
            plural,
            name,
            namespaces,
            failing: true,
            listed_once: false,
            gone: false,
            listing: None,
        }
    }

    /// The next event. Cancel-safe: nothing changes until the stream has an item.
    pub(crate) async fn next(&mut self) -> Result<SourceEvent, WatchError> {
        let item = self.stream.next().await;
        self.take(item)
    }

    /// Lists and watches anew (a new listing, followed for the objects it misses).
    pub(crate) fn reopen(&mut self) {
        self.listing = None;
        self.stream = self.config.open(&self.api);
    }

    /// Closes the stream (its connection with it): nothing is requested until `resume`.
    pub(crate) fn close(&mut self) {
        drop(std::mem::replace(
            &mut self.stream,
            futures::stream::pending().boxed(),
        ));
        self.listing = None;
    }

    /// Opens the stream again after `close`, its backoff reset.
    pub(crate) fn resume(&mut self) {
        self.backoff.reset();
        self.reopen();
    }

    /// Whether `uid` is new in the listing in progress (it is counted in it).
    pub(crate) fn saw(&mut self, uid: &str) -> bool {
        self.listing
            .as_mut()
            .is_some_and(|seen| seen.insert(Uid::from(uid)))
    }

    /// What an item of the stream means for the engine.
    fn take(
        &mut self,
        item: Option<Result<watcher::Event<RawObject>, watcher::Error>>,
    ) -> Result<SourceEvent, WatchError> {
        let Some(item) = item else {
            if let Some(m) = &self.metrics {
                m.watch_ended(&self.plural);
            }
            return Ok(SourceEvent::Ended);
        };
        self.health(&item);
        let (obj, kind) = match item {
            Ok(watcher::Event::InitApply(o)) => (o, EventKind::Listed),
            Ok(watcher::Event::Apply(o)) => (o, EventKind::Modified),
            Ok(watcher::Event::Delete(o)) => (o, EventKind::Deleted),
            Ok(watcher::Event::Init) => {
                self.listing = Some(HashSet::new());
                return Ok(SourceEvent::Nothing);
            }
            Ok(watcher::Event::InitDone) => return Ok(self.listed()),
            Err(e) => return self.failed(e).map(SourceEvent::Failed),
        };
        if !self.namespaces.matches(obj.namespace()) {
            return Ok(SourceEvent::Nothing);
        }
        let Some(uid) = obj.uid().map(str::to_string) else {
            return Ok(SourceEvent::Nothing);
        };
        Ok(SourceEvent::Object { obj, uid, kind })
    }

    /// The metrics and the outage log of an item.
    fn health(&mut self, item: &Result<watcher::Event<RawObject>, watcher::Error>) {
        // What the API server sent (an `Init` is the watcher's own: it comes before
        // every attempt to list, failed or not).
        let alive = matches!(item, Ok(e) if !matches!(e, watcher::Event::Init));
        match (item, &self.metrics) {
            (Err(_), Some(m)) => {
                self.failing = true;
                m.watch_failed(&self.plural);
            }
            (Ok(_), Some(m)) if self.failing && alive => {
                self.failing = false;
                m.watch_alive(&self.plural);
            }
            _ => {}
        }
        if alive {
            self.outage.alive(&self.plural);
            self.backoff.reset();
        }
    }

    /// A listing is complete.
    fn listed(&mut self) -> SourceEvent {
        self.listed_once = true;
        if self.gone {
            self.gone = false;
            tracing::info!(resource = %self.plural, "the resource is served again");
        }
        SourceEvent::Listed(self.listing.take())
    }

    /// The watch failed: the delay before the next attempt, or the error that ends the
    /// engine (forbidden before any listing).
    fn failed(&mut self, e: watcher::Error) -> Result<Duration, WatchError> {
        if let watcher::Error::InitialListFailed(kube::Error::Api(s)) = &e
            && s.code == 403
            && !self.listed_once
        {
            return Err(WatchError::Forbidden {
                resource: self.name.clone(),
                message: s.message.clone(),
            });
        }
        let not_found =
            matches!(&e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404);
        if not_found && !self.gone {
            self.gone = true;
            tracing::warn!(
                resource = %self.plural,
                "the resource is not served anymore (its CRD was deleted?); waiting for it to come back"
            );
        } else if !not_found {
            self.outage
                .failed(&self.plural, &crate::outage::describe(&e));
        }
        Ok(self.retry_delay())
    }

    /// The delay before the next attempt of a failing watch.
    fn retry_delay(&mut self) -> Duration {
        self.backoff.next().unwrap_or_default()
    }
}

/// The objects a complete listing went without (they went away while the watch was down,
/// or while the operator paused): of the `known` ones, those not `seen`, in order.
pub(crate) fn vanished<'k>(
    known: impl Iterator<Item = &'k str>,
    seen: &HashSet<Uid>,
) -> Vec<String> {
    known
        .filter(|uid| !seen.contains(*uid))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relist_reports_the_known_objects_it_went_without() {
        let seen: HashSet<Uid> = ["a", "c"].into_iter().map(Uid::from).collect();
        let known = ["a", "b", "c", "d"].into_iter();
        assert_eq!(vanished(known, &seen), vec!["b", "d"]);
        assert!(vanished(["a"].into_iter(), &seen).is_empty());
    }
}
