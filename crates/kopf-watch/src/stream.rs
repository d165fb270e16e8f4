//! The list+watch stream of one resource: kube's `watcher` with the server-side selectors
//! (the user's, and the one derived from the handlers' label filters, see
//! [`narrowing`](crate::narrowing)), and streaming lists (`sendInitialEvents`) with a
//! fallback to list+watch.
//!
//! # Streaming lists and servers that do not support them
//!
//! A streaming list is one watch request (`sendInitialEvents=true`,
//! `resourceVersionMatch=NotOlderThan`) whose initial events end with a BOOKMARK annotated
//! `k8s.io/initial-events-end`; kube's watcher reports the listing done only then. Servers
//! without the feature (before Kubernetes 1.27, or with the `WatchList` feature gate off)
//! reject the request: `resourceVersionMatch` is forbidden on a watch without
//! `sendInitialEvents` (400/422). A server (or a proxy) that drops the parameters silently
//! would instead send the objects and never the bookmark, and the listing would never end
//! (deletions are dropped meanwhile, indexes never report ready). So:
//!
//! - a 400 or 422 to the first request of a streaming list: the engine lists instead, from
//!   then on (one failed request per engine, logged at info);
//! - no event for [`INITIAL_IDLE`] during the initial events, or no end after
//!   [`INITIAL_LIMIT`]: the same (logged at warning), with a fresh list+watch.
//!
//! Other failures of the first request (403, 404, the server down) are reported as a failed
//! listing, as with list+watch, so that the engine's handling of them is the same.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kopf_core::handler::HandlerSpec;
use kube::api::Api;
use kube::core::{ApiResource, PartialObjectMeta};
use kube::runtime::watcher;
use tokio::time::Instant;

use crate::early::{self, EarlyWatch};
use crate::error::WatchError;
use crate::narrowing;
use crate::raw::{EventStream, RawObject, metadata_object};
use crate::resource::ResourceRef;
use crate::settings::Settings;

/// A streaming list that sends nothing for this long before its end is taken as a server
/// that ignores `sendInitialEvents`.
pub const INITIAL_IDLE: Duration = Duration::from_secs(10);
/// A streaming list that has not ended after this long is given up for list+watch.
pub const INITIAL_LIMIT: Duration = Duration::from_secs(120);

/// How one resource is listed and watched; opened again after pauses and scope changes.
pub(crate) struct WatchStream {
    config: watcher::Config,
    /// Metadata-only list+watch (the resource's handlers need nothing else): the objects
    /// come as `PartialObjectMetadata`, made objects of this type with no spec and no status.
    metadata: Option<ApiResource>,
    /// Streaming lists are still to be tried (cleared when the server lacks them).
    streaming: Arc<AtomicBool>,
    resource: String,
    idle: Duration,
    limit: Duration,
    /// See [`Settings::early_changes_after`].
    early_after: Option<Duration>,
}

/// The watch's label and field selectors: the user's (checked), and the one derived from
/// the handlers' filters (logged).
fn selectors(
    settings: &Settings,
    handlers: &[HandlerSpec],
    resource: &str,
) -> Result<watcher::Config, WatchError> {
    let invalid =
        |option: &'static str, selector: &str, reason: String| WatchError::InvalidSelector {
            option,
            selector: selector.into(),
            reason: reason.into(),
        };
    let user_labels = settings.label_selector.as_deref();
    if let Some(s) = user_labels {
        narrowing::check_label_selector(s)
            .map_err(|e| invalid("label selector (-l/--label-selector)", s, e))?;
    }
    if let Some(s) = settings.field_selector.as_deref() {
        narrowing::check_field_selector(s)
            .map_err(|e| invalid("field selector (--field-selector)", s, e))?;
    }
    let derived = if settings.derive_label_selectors {
        match narrowing::derive(handlers) {
            Ok(selector) => {
                tracing::info!(
                    resource,
                    selector = %selector,
                    "watching only the objects with these labels: every handler of the resource filters on them"
                );
                Some(selector)
            }
            Err(why) => {
                tracing::debug!(resource, "no label selector derived: {why}");
                None
            }
        }
    } else {
        None
    };
    let mut config = watcher::Config::default();
    if let Some(labels) = narrowing::combine(user_labels, derived.as_deref()) {
        config = config.labels(&labels);
    }
    if let Some(fields) = settings.field_selector.as_deref() {
        config = config.fields(fields.trim());
    }
    Ok(config)
}

/// The resource of a metadata-only watch, when its handlers need nothing else (logged); an
/// error when declared conditions need the status.
fn metadata_only(
    handlers: &[HandlerSpec],
    ar: &ApiResource,
    resource: &str,
) -> Result<Option<ApiResource>, WatchError> {
    if !narrowing::metadata_only(handlers) {
        return Ok(None);
    }
    if let Some(h) = handlers.iter().find(|h| {
        h.declared::<kopf_core::conditions::ConditionsSpec>()
            .is_some()
    }) {
        return Err(WatchError::MetadataOnly {
            resource: resource.to_string(),
            reason: format!(
                "its declared conditions ('{}') are written with a test of the status, which a metadata-only watch does not have",
                h.id
            )
            .into(),
        });
    }
    tracing::info!(
        resource,
        "watching metadata only: the handlers see no spec and no status"
    );
    Ok(Some(ar.clone()))
}

impl WatchStream {
    /// The stream of `resource` with `handlers`: the user's selectors are checked here, the
    /// derived one logged.
    pub(crate) fn new(
        settings: &Settings,
        handlers: &[HandlerSpec],
        resource: &ResourceRef,
    ) -> Result<Self, WatchError> {
        let ar = &resource.api_resource;
        let resource = &if ar.group.is_empty() {
            ar.plural.clone()
        } else {
            format!("{}.{}", ar.plural, ar.group)
        };
        let config = selectors(settings, handlers, resource)?;
        let metadata = metadata_only(handlers, ar, resource)?;
        Ok(WatchStream {
            config,
            metadata,
            streaming: Arc::new(AtomicBool::new(settings.streaming_lists)),
            resource: resource.to_string(),
            idle: INITIAL_IDLE,
            limit: INITIAL_LIMIT,
            early_after: settings.early_changes_after,
        })
    }

    /// A new list+watch of `api` (a streaming list while the server has not refused one),
    /// with the changes made during a long listing delivered ahead of it (see [`early`]).
    pub(crate) fn open(&self, api: &Api<RawObject>) -> EventStream {
        let events = self.list_and_watch(api);
        match self.early_after {
            None => events,
            Some(after) => early::changes_first(
                events,
                EarlyWatch {
                    api: api.clone(),
                    labels: self.config.label_selector.clone(),
                    fields: self.config.field_selector.clone(),
                    metadata: self.metadata.clone(),
                    resource: self.resource.clone(),
                },
                after,
            ),
        }
    }

    fn list_and_watch(&self, api: &Api<RawObject>) -> EventStream {
        let plain = {
            let (api, config, metadata) = (api.clone(), self.config.clone(), self.metadata.clone());
            move || raw(&api, config.clone(), metadata.as_ref())
        };
        if !self.streaming.load(Ordering::SeqCst) {
            return plain();
        }
        let streaming = raw(
            api,
            self.config.clone().streaming_lists(),
            self.metadata.as_ref(),
        );
        with_fallback(
            streaming,
            plain,
            self.streaming.clone(),
            self.resource.clone(),
            (self.idle, self.limit),
        )
        .boxed()
    }
}

/// kube's watcher: of whole objects, or (`metadata`: the resource) of their metadata, made
/// objects with no spec and no status so that the engine reads one kind of event.
fn raw(
    api: &Api<RawObject>,
    config: watcher::Config,
    metadata: Option<&ApiResource>,
) -> EventStream {
    let Some(ar) = metadata else {
        return watcher(api.clone(), config).boxed();
    };
    let ar = ar.clone();
    let object = move |m: PartialObjectMeta<RawObject>| metadata_object(m, &ar);
    // `metadata_watcher` is deprecated for `watcher` on an `Api<PartialObjectMeta<K>>`,
    // which needs a static `K`; this resource's type is only known at run time.
    #[allow(deprecated)]
    let events = kube::runtime::metadata_watcher(api.clone(), config);
    events
        .map(move |item| {
            item.map(|event| match event {
                watcher::Event::Apply(m) => watcher::Event::Apply(object(m)),
                watcher::Event::Delete(m) => watcher::Event::Delete(object(m)),
                watcher::Event::InitApply(m) => watcher::Event::InitApply(object(m)),
                watcher::Event::Init => watcher::Event::Init,
                watcher::Event::InitDone => watcher::Event::InitDone,
            })
        })
        .boxed()
}

/// Where a streaming list is.
enum Phase {
    /// Before its initial events end: since when, and the last event.
    Initial { since: Instant, last: Instant },
    /// Watching (or not started yet: no `Init` seen).
    Watching,
    /// Given up for list+watch.
    Plain,
}

/// Whether a failure of a streaming list's first request says the server lacks them.
fn unsupported(e: &watcher::Error) -> bool {
    let code = match e {
        watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s.code,
        watcher::Error::WatchError(s) => s.code,
        _ => return false,
    };
    matches!(code, 400 | 422)
}

/// `streaming`, replaced by `plain()` (for good: `flag` cleared) when the server does not
/// support streaming lists.
fn with_fallback<F>(
    streaming: EventStream,
    plain: F,
    flag: Arc<AtomicBool>,
    resource: String,
    (idle, limit): (Duration, Duration),
) -> impl Stream<Item = Result<watcher::Event<RawObject>, watcher::Error>> + Send
where
    F: Fn() -> EventStream + Send + 'static,
{
    let state = (streaming, Phase::Watching, plain, flag, resource);
    futures::stream::unfold(
        state,
        move |(mut inner, mut phase, plain, flag, resource)| async move {
            loop {
                let item = match phase {
                    Phase::Initial { since, last } => {
                        let deadline = (last + idle).min(since + limit);
                        match tokio::time::timeout_at(deadline, inner.next()).await {
                            Ok(item) => item,
                            Err(_) => {
                                tracing::warn!(
                                    resource = %resource,
                                    "the streaming list sent no end of its initial events (the API server ignores sendInitialEvents?); listing instead"
                                );
                                flag.store(false, Ordering::SeqCst);
                                inner = plain();
                                phase = Phase::Plain;
                                continue;
                            }
                        }
                    }
                    Phase::Watching | Phase::Plain => inner.next().await,
                };
                let item = item?;
                let streaming = !matches!(phase, Phase::Plain);
                match &item {
                    Err(e) if streaming && unsupported(e) => {
                        tracing::info!(
                            resource = %resource,
                            "the API server does not support streaming lists ({e}); listing instead"
                        );
                        flag.store(false, Ordering::SeqCst);
                        inner = plain();
                        phase = Phase::Plain;
                        continue;
                    }
                    Ok(watcher::Event::Init) if streaming => {
                        let now = Instant::now();
                        phase = Phase::Initial {
                            since: now,
                            last: now,
                        };
                    }
                    Ok(watcher::Event::InitApply(_)) => {
                        if let Phase::Initial { last, .. } = &mut phase {
                            *last = Instant::now();
                        }
                    }
                    Ok(watcher::Event::InitDone) if streaming => phase = Phase::Watching,
                    _ => {}
                }
                // A streaming list's first request failed: a failed listing, for the engine.
                let item = match item {
                    Err(watcher::Error::WatchStartFailed(e)) if streaming => {
                        Err(watcher::Error::InitialListFailed(e))
                    }
                    other => other,
                };
                return Some((item, (inner, phase, plain, flag, resource)));
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    type Item = Result<watcher::Event<RawObject>, watcher::Error>;

    fn obj(name: &str) -> RawObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}
        }))
        .expect("object")
    }

    /// A stream of `items`, then silence.
    fn scripted(items: Vec<Item>) -> EventStream {
        futures::stream::iter(items)
            .chain(futures::stream::pending())
            .boxed()
    }

    fn plain_events() -> EventStream {
        scripted(vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(obj("listed"))),
            Ok(watcher::Event::InitDone),
        ])
    }

    fn names(items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|i| match i {
                Ok(watcher::Event::Init) => "init".into(),
                Ok(watcher::Event::InitApply(o)) => {
                    format!(
                        "listed:{}",
                        kube::Resource::meta(o).name.as_deref().unwrap_or("")
                    )
                }
                Ok(watcher::Event::InitDone) => "done".into(),
                Ok(watcher::Event::Apply(_)) => "apply".into(),
                Ok(watcher::Event::Delete(_)) => "delete".into(),
                Err(e) => format!("error:{e}"),
            })
            .collect()
    }

    async fn take(stream: impl Stream<Item = Item>, n: usize) -> Vec<Item> {
        stream.take(n).collect().await
    }

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                "Invalid",
            )
            .with_code(code)
            .boxed(),
        )
    }

    const TIMES: (Duration, Duration) = (INITIAL_IDLE, INITIAL_LIMIT);

    #[tokio::test(start_paused = true)]
    async fn a_refused_streaming_list_falls_back_for_good() {
        let flag = Arc::new(AtomicBool::new(true));
        let streaming = scripted(vec![Err(watcher::Error::WatchStartFailed(status(422)))]);
        let s = with_fallback(streaming, plain_events, flag.clone(), "x".into(), TIMES);
        let got = take(s, 3).await;
        assert_eq!(names(&got), ["init", "listed:listed", "done"]);
        assert!(!flag.load(Ordering::SeqCst), "not tried again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_streaming_list_without_its_end_falls_back() {
        let flag = Arc::new(AtomicBool::new(true));
        let streaming = scripted(vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(obj("streamed"))),
        ]);
        let started = Instant::now();
        let s = with_fallback(streaming, plain_events, flag.clone(), "x".into(), TIMES);
        let got = take(s, 5).await;
        assert_eq!(
            names(&got),
            ["init", "listed:streamed", "init", "listed:listed", "done"]
        );
        assert_eq!(started.elapsed(), INITIAL_IDLE, "given up when idle");
        assert!(!flag.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn a_streaming_list_that_ends_stays() {
        let flag = Arc::new(AtomicBool::new(true));
        let streaming = scripted(vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(obj("streamed"))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(obj("later"))),
        ]);
        let s = with_fallback(streaming, plain_events, flag.clone(), "x".into(), TIMES);
        let mut s = Box::pin(s);
        let got = take(&mut s, 4).await;
        assert_eq!(names(&got), ["init", "listed:streamed", "done", "apply"]);
        // Silence after the listing is a quiet watch, not a missing end.
        let quiet = tokio::time::timeout(INITIAL_LIMIT * 2, s.next()).await;
        assert!(quiet.is_err(), "nothing more, and no fallback");
        assert!(flag.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn other_failures_of_the_first_request_are_a_failed_listing() {
        let flag = Arc::new(AtomicBool::new(true));
        let streaming = scripted(vec![Err(watcher::Error::WatchStartFailed(status(403)))]);
        let s = with_fallback(streaming, plain_events, flag.clone(), "x".into(), TIMES);
        let got = take(s, 1).await;
        assert!(
            matches!(&got[..], [Err(watcher::Error::InitialListFailed(kube::Error::Api(s)))] if s.code == 403),
            "{:?}",
            names(&got)
        );
        assert!(flag.load(Ordering::SeqCst), "streaming still to be used");
    }
}
