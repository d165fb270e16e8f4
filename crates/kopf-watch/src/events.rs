//! The events poster: Kubernetes Events about an object, aggregated, rate-limited per
//! object, and posted without failing anything (a failure is only logged).

use std::sync::Mutex;

use kopf_core::events::{EventSpec, RateLimiter, Reporter, aggregate, event_body};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use serde_json::Value;

/// Posts the Events of one resource's objects, with the budget of each object.
pub(crate) struct Poster {
    client: kube::Client,
    reporter: Reporter,
    /// Each object's budget of events.
    limiter: Mutex<RateLimiter>,
}

impl Poster {
    pub(crate) fn new(client: kube::Client, reporter: Reporter, limiter: RateLimiter) -> Self {
        Poster {
            client,
            reporter,
            limiter: Mutex::new(limiter),
        }
    }

    /// Posts events about an object, rate-limited per object; failures are only logged.
    pub(crate) async fn post(&self, uid: &str, body: &Value, events: Vec<EventSpec>) {
        if events.is_empty() {
            return;
        }
        let ar = ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("", "v1", "Event"),
            "events",
        );
        for mut spec in aggregate(events) {
            let admitted = self
                .limiter
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .admit(uid, &mut spec, tokio::time::Instant::now());
            if !admitted {
                continue;
            }
            let Some((ns, event)) =
                event_body(body, &spec, &self.reporter, kopf_core::clock::now())
            else {
                continue;
            };
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, &ar);
            let obj: DynamicObject = match serde_json::from_value(event) {
                Ok(o) => o,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot build an event");
                    continue;
                }
            };
            if let Err(e) = api.create(&kube::api::PostParams::default(), &obj).await {
                tracing::debug!(error = %e, "posting an event failed");
            }
        }
    }

    /// Forgets the budget of an object that is gone.
    pub(crate) fn forget(&self, uid: &str) {
        self.limiter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget(uid);
    }
}
