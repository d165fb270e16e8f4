//! The harness's completion check: one watch of the objects, read into a small type (the
//! name, the resourceVersion and the two status fields; everything else is skipped without
//! being built), so that at 100,000 objects the check costs little next to the systems.

use std::collections::{HashMap, HashSet};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject, ListParams, WatchEvent, WatchParams};
use serde::Deserialize;

/// What the harness reads of an object.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Light {
    #[serde(default)]
    metadata: LightMeta,
    #[serde(default)]
    spec: LightSpec,
    #[serde(default)]
    status: LightStatus,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LightMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    resource_version: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct LightSpec {
    #[serde(default)]
    field: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct LightStatus {
    #[serde(default)]
    create_fn: Option<Message>,
    #[serde(default)]
    update_fn: Option<Field>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Message {
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Field {
    #[serde(default)]
    field: Option<String>,
}

#[derive(Debug, Deserialize)]
struct LightList {
    metadata: LightListMeta,
    items: Vec<Light>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LightListMeta {
    #[serde(default)]
    resource_version: String,
}

/// Which objects are done: `create_fn` set (in the order seen), `update_fn.field` as last seen.
#[derive(Debug, Default)]
pub(super) struct Progress {
    pub(super) created: HashSet<String>,
    /// The created objects in the order they were seen (for picking one at random).
    pub(super) order: Vec<String>,
    pub(super) fields: HashMap<String, String>,
}

impl Progress {
    /// Takes in one object; whether anything changed.
    fn observe(&mut self, obj: &Light) -> bool {
        let name = &obj.metadata.name;
        let mut changed = false;
        if obj
            .status
            .create_fn
            .as_ref()
            .is_some_and(|c| c.message.is_some())
            && self.created.insert(name.clone())
        {
            self.order.push(name.clone());
            changed = true;
        }
        if let Some(field) = obj.status.update_fn.as_ref().and_then(|u| u.field.as_ref())
            && self.fields.get(name) != Some(field)
        {
            self.fields.insert(name.clone(), field.clone());
            changed = true;
        }
        changed
    }
}

/// The objects' names with their `spec.field`, and the list's resourceVersion.
pub(super) async fn list_fields(
    api: &Api<DynamicObject>,
) -> Result<(Vec<(String, Option<String>)>, String)> {
    let request = api_request(api).list(&ListParams::default())?;
    let text = api_client(api).request_text(request).await?;
    let list: LightList = serde_json::from_str(&text)?;
    let fields = list
        .items
        .into_iter()
        .map(|o| (o.metadata.name, o.spec.field))
        .collect();
    Ok((fields, list.metadata.resource_version))
}

fn api_request(api: &Api<DynamicObject>) -> kube::core::Request {
    kube::core::Request::new(api.resource_url())
}

fn api_client(api: &Api<DynamicObject>) -> kube::Client {
    api.clone().into_client()
}

/// Watches from `rv` until aborted; on `410 Gone` (history compacted) it lists again.
pub(super) async fn watch_progress(
    api: Api<DynamicObject>,
    mut rv: String,
    tx: tokio::sync::watch::Sender<Progress>,
) -> Result<()> {
    let client = api_client(&api);
    loop {
        let request = api_request(&api).watch(&WatchParams::default().timeout(290), &rv)?;
        let mut stream = client.request_events::<Light>(request).await?.boxed();
        let mut gone = false;
        while let Some(event) = stream.try_next().await? {
            let obj = match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => o,
                WatchEvent::Bookmark(b) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                WatchEvent::Deleted(_) => continue,
                WatchEvent::Error(e) if e.code == 410 => {
                    gone = true;
                    break;
                }
                WatchEvent::Error(e) => bail!("the progress watch failed: {e:?}"),
            };
            rv.clone_from(&obj.metadata.resource_version);
            tx.send_if_modified(|p| p.observe(&obj));
        }
        if gone {
            let request = api_request(&api).list(&ListParams::default())?;
            let text = client.request_text(request).await?;
            let list: LightList = serde_json::from_str(&text)?;
            tx.send_if_modified(|p| {
                list.items
                    .iter()
                    .fold(false, |changed, o| p.observe(o) | changed)
            });
            rv = list.metadata.resource_version;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn light(json: serde_json::Value) -> Light {
        serde_json::from_value(json).expect("a light object")
    }

    #[test]
    fn an_object_counts_once_created_and_its_field_when_it_changes() {
        let mut p = Progress::default();
        let bare = light(
            serde_json::json!({"metadata": {"name": "a", "resourceVersion": "1",
            "annotations": {"x": "y"}}, "spec": {"field": "v", "duration": "1m"}}),
        );
        assert!(!p.observe(&bare));
        let done = light(serde_json::json!({"metadata": {"name": "a"},
            "status": {"create_fn": {"message": "hello world"}}}));
        assert!(p.observe(&done));
        assert!(!p.observe(&done), "seen twice, counted once");
        assert_eq!(p.order, vec!["a".to_string()]);
        let updated = light(serde_json::json!({"metadata": {"name": "a"},
            "status": {"create_fn": {"message": "hello world"}, "update_fn": {"field": "w"}}}));
        assert!(p.observe(&updated));
        assert_eq!(p.fields.get("a").map(String::as_str), Some("w"));
        assert!(!p.observe(&updated));
    }
}
