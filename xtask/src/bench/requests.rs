//! The fake server's request log as the benchmark reads it: the driver's client, the records,
//! and the counts and latencies per endpoint.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::model::DRIVER;
use anyhow::{Context, Result};
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

pub(super) fn kopfexamples(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    Api::namespaced_with(client.clone(), "default", &ar)
}

pub(super) async fn driver_client(kubeconfig: &Path) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(DRIVER),
    ));
    Ok(kube::Client::try_from(config)?)
}

/// One request of the fake server's log.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Record {
    seq: u64,
    micros: u64,
    method: String,
    path: String,
    #[serde(default)]
    query: String,
    #[serde(default)]
    user_agent: String,
    status: u16,
}

impl Record {
    pub(super) fn by_operator(&self) -> bool {
        !self.user_agent.contains(DRIVER)
    }

    /// `verb resource[/subresource]`, e.g. `patch kopfexamples/status`.
    pub(super) fn endpoint(&self) -> String {
        let parts: Vec<&str> = self.path.split('/').filter(|p| !p.is_empty()).collect();
        let rest: &[&str] = match parts.as_slice() {
            ["api", _, rest @ ..] => rest,
            ["apis", _, _, rest @ ..] => rest,
            _ => return format!("{} {}", self.method.to_lowercase(), self.path),
        };
        let rest = match rest {
            ["namespaces", _, rest @ ..] if !rest.is_empty() => rest,
            other => other,
        };
        let watch = self
            .query
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1");
        let (verb, what) = match (self.method.as_str(), rest) {
            ("GET", [resource]) if watch => ("watch", resource.to_string()),
            ("GET", [resource]) => ("list", resource.to_string()),
            (m, [resource]) => (verb_of(m), resource.to_string()),
            (m, [resource, _name]) => (verb_of(m), resource.to_string()),
            (m, [resource, _name, sub, ..]) => (verb_of(m), format!("{resource}/{sub}")),
            (m, []) => (verb_of(m), "discovery".into()),
        };
        format!("{verb} {what}")
    }

    /// The object's name for object endpoints of kopfexamples.
    pub(super) fn object(&self) -> Option<(&str, bool)> {
        let (_, rest) = self.path.split_once("/kopfexamples/")?;
        match rest.split_once('/') {
            Some((name, "status")) => Some((name, true)),
            Some(_) => None,
            None => Some((rest, false)),
        }
    }
}

pub(super) fn verb_of(method: &str) -> &'static str {
    match method {
        "GET" => "get",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "other",
    }
}

pub(super) async fn control(client: &kube::Client, method: &str, path: &str) -> Result<String> {
    let request = http::Request::builder()
        .method(method)
        .uri(format!("/__kopf/{path}"))
        .body(Vec::new())?;
    Ok(client.request_text(request).await?)
}

pub(super) async fn requests(client: &kube::Client) -> Result<Vec<Record>> {
    let text = control(client, "GET", "requests").await?;
    let value: Value = serde_json::from_str(&text).context("the request log")?;
    let items = value.get("items").cloned().unwrap_or(value);
    serde_json::from_value(items).context("request records")
}

/// Requests per `per` (object or update) by endpoint, the operator's only.
pub(super) fn per_endpoint(records: &[Record], per: usize) -> BTreeMap<String, f64> {
    let mut counts: BTreeMap<String, f64> = BTreeMap::new();
    for r in records.iter().filter(|r| r.by_operator()) {
        *counts.entry(r.endpoint()).or_default() += 1.0;
    }
    for v in counts.values_mut() {
        *v /= per.max(1) as f64;
    }
    counts
}

/// Latency percentiles (ms): each driver write of an object's spec to the operator's next
/// status write of that object.
pub(super) fn latencies(records: &[Record]) -> BTreeMap<&'static str, f64> {
    let mut pending: HashMap<String, Vec<u64>> = HashMap::new();
    let mut samples: Vec<f64> = Vec::new();
    let mut sorted: Vec<&Record> = records.iter().collect();
    sorted.sort_by_key(|r| r.seq);
    for r in sorted {
        if r.method != "PATCH" || !(200..300).contains(&r.status) {
            continue;
        }
        let Some((name, status)) = r.object() else {
            continue;
        };
        if !r.by_operator() && !status {
            pending.entry(name.to_string()).or_default().push(r.micros);
        } else if r.by_operator()
            && status
            && let Some(writes) = pending.remove(name)
        {
            samples.extend(
                writes
                    .iter()
                    .map(|w| r.micros.saturating_sub(*w) as f64 / 1000.0),
            );
        }
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| {
        samples
            .get(((samples.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    BTreeMap::from([
        ("p50", at(0.5)),
        ("p99", at(0.99)),
        ("max", samples.last().copied().unwrap_or(f64::NAN)),
        ("samples", samples.len() as f64),
    ])
}
