//! The worker's writes: a cycle's plan sent through the applier ([`crate::apply`]), its
//! outcome as the worker needs it ([`CycleEnd`]), and what the API server refused or dropped
//! reported to the user.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use kopf_core::metrics::Metrics;
use kopf_core::plan::PatchPlan;
use kube::api::Api;
use kube::core::{ApiResource, DynamicResourceScope, Resource};
use serde_json::Value;

use crate::apply::{Applied, Pruned, Writer};
use crate::object::api_for;
use crate::resource::ResourceRef;

/// How a cycle ended for the worker.
pub(crate) enum CycleEnd {
    /// Processed: run again after `delay` (retries), and wait for our write `rv` to come
    /// back first.
    Next {
        delay: Option<Duration>,
        rv: Option<u64>,
    },
    /// The object is gone: the worker ends.
    Gone,
    /// A framework error (not a handler's), e.g. a failed write: the object is throttled.
    Failed(String),
    /// The object changed while it was written: its newer state is processed next.
    Conflict(String),
    /// The API server refused handlers' results (id → message): the next cycle, at once,
    /// records that as their failure.
    Rejected(HashMap<String, String>),
}

/// The writes of one resource's objects: their API, the applier, and what the API server
/// dropped from results, already reported.
pub(crate) struct Writes {
    client: kube::Client,
    /// The resource written.
    pub(crate) resource: ResourceRef,
    metrics: Option<Metrics>,
    /// Fields of results the API server dropped, already reported.
    pruned: Mutex<HashSet<Pruned>>,
}

impl Writes {
    pub(crate) fn new(
        client: kube::Client,
        resource: ResourceRef,
        metrics: Option<Metrics>,
    ) -> Self {
        Writes {
            client,
            resource,
            metrics,
            pruned: Mutex::default(),
        }
    }

    /// The API of the object of `body` (in its namespace).
    pub(crate) fn api_for<K>(&self, body: &Value) -> Api<K>
    where
        K: Resource<DynamicType = ApiResource, Scope = DynamicResourceScope>,
    {
        let namespace = body.pointer("/metadata/namespace").and_then(Value::as_str);
        api_for(&self.client, &self.resource, namespace)
    }

    /// Sends a plan's requests (at most one per endpoint, results first; see [`crate::apply`]);
    /// `delay` is the cycle's retry delay, `delivered` what handlers put into the status.
    pub(crate) async fn apply(
        &self,
        body: &Value,
        plan: &PatchPlan,
        delivered: &[(String, Value)],
        delay: Option<Duration>,
    ) -> CycleEnd {
        let writer = Writer {
            api: self.api_for(body),
            status_subresource: self.resource.status_subresource,
            metrics: self.metrics.as_ref(),
        };
        match writer.apply(body, plan, delivered).await {
            Applied::Written { rv, pruned } => {
                self.report_pruned(pruned);
                CycleEnd::Next { delay, rv }
            }
            Applied::Gone => CycleEnd::Next {
                delay: None,
                rv: None,
            },
            Applied::Conflict(message) => CycleEnd::Conflict(message),
            Applied::Rejected { endpoint, handlers } => {
                let mut rejected = HashMap::new();
                for r in handlers {
                    tracing::error!(
                        "Handler '{}' returned a result the API server refuses to store (422 on the PATCH of the object{}): {}{}. This counts as a failure of the handler. Make the CRD's schema accept it: declare {} with the right type, or set `x-kubernetes-preserve-unknown-fields: true` on it.",
                        r.handler,
                        if endpoint == "status" {
                            "'s status"
                        } else {
                            ""
                        },
                        if r.fields.is_empty() {
                            String::new()
                        } else {
                            format!("{}: ", r.fields.join(", "))
                        },
                        r.message,
                        r.fields
                            .first()
                            .map_or_else(|| format!("status.{}", r.handler), |f| f.clone()),
                    );
                    rejected.insert(
                        r.handler,
                        format!("the API server refused to store the result: {}", r.message),
                    );
                }
                CycleEnd::Rejected(rejected)
            }
            Applied::Failed(failure) => CycleEnd::Failed(failure.to_string()),
        }
    }

    /// Warns once per handler and field of this resource about results the API server did
    /// not store (pruned by the CRD's structural schema).
    fn report_pruned(&self, pruned: Vec<Pruned>) {
        if pruned.is_empty() {
            return;
        }
        let ar = &self.resource.api_resource;
        let mut reported = self.pruned.lock().unwrap_or_else(|e| e.into_inner());
        for p in pruned {
            if !reported.insert(p.clone()) {
                continue;
            }
            tracing::warn!(
                "Handler '{}': the API server dropped {} from its result, because the CRD of {}{} does not declare it in its schema. Declare the field, or set `x-kubernetes-preserve-unknown-fields: true` on status (or on status.{}). Reported once per field.",
                p.handler,
                p.path,
                ar.plural,
                if ar.group.is_empty() {
                    String::new()
                } else {
                    format!(".{}", ar.group)
                },
                p.handler,
            );
        }
    }
}
