//! The operator's HTTP endpoints: the liveness probe (`--liveness URL`: the probe handlers'
//! results as JSON, 503 when a watch stream is dead) and Prometheus metrics
//! (`--metrics ADDR`: `/metrics`). Both may share one address.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use kopf_core::activities::Probes;
use kopf_core::metrics::Metrics;
use serde_json::json;

use crate::error::Error;

/// What the endpoints serve.
#[derive(Clone)]
pub(crate) struct Endpoints {
    pub probes: Arc<Probes>,
    pub metrics: Metrics,
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> axum::response::Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn liveness(endpoints: Endpoints) -> axum::response::Response {
    let dead = endpoints.metrics.dead_watches();
    if !dead.is_empty() {
        let body = json!({"error": "watch streams are failing", "dead_watches": dead});
        return json_response(StatusCode::SERVICE_UNAVAILABLE, &body);
    }
    let mut body = endpoints.probes.run().await;
    // With leader election: whether this replica leads or stands by, per lease.
    let leaderships = endpoints.metrics.leaderships();
    if !leaderships.is_empty()
        && let Some(map) = body.as_object_mut()
        && !map.contains_key("leadership")
    {
        let all: serde_json::Map<String, serde_json::Value> = leaderships
            .into_iter()
            .map(|(lease, state)| (lease, json!(state)))
            .collect();
        map.insert("leadership".into(), serde_json::Value::Object(all));
    }
    json_response(StatusCode::OK, &body)
}

async fn metrics(endpoints: Endpoints) -> axum::response::Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        endpoints.metrics.encode(),
    )
        .into_response()
}

/// Binds every address (one server per address, routes merged) and serves until the
/// returned tasks are aborted. Fails at once when an address cannot be bound.
pub(crate) async fn start(
    liveness_at: Option<(SocketAddr, String)>,
    metrics_at: Option<SocketAddr>,
    endpoints: Endpoints,
) -> Result<Vec<tokio::task::JoinHandle<()>>, Error> {
    let mut routers: BTreeMap<SocketAddr, (Router, Vec<String>)> = BTreeMap::new();
    if let Some((addr, path)) = liveness_at {
        let e = endpoints.clone();
        let (router, paths) = routers.remove(&addr).unwrap_or_default();
        let router = router.route(&path, get(move || liveness(e.clone())));
        routers.insert(addr, (router, [paths, vec![path]].concat()));
    }
    if let Some(addr) = metrics_at {
        let e = endpoints.clone();
        let (router, paths) = routers.remove(&addr).unwrap_or_default();
        let router = router.route("/metrics", get(move || metrics(e.clone())));
        routers.insert(addr, (router, [paths, vec!["/metrics".into()]].concat()));
    }
    let mut tasks = Vec::new();
    for (addr, (router, paths)) in routers {
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            Error::Serve(format!(
                "cannot serve {} on {addr}: {e}; choose another address with --liveness/--metrics",
                paths.join(" and ")
            ))
        })?;
        for path in &paths {
            tracing::info!("Serving http://{addr}{path}");
        }
        tasks.push(tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!("The HTTP endpoint on {addr} failed: {e}");
            }
        }));
    }
    Ok(tasks)
}
