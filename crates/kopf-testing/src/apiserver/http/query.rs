//! The query string: its parameters decoded, and the label and field selectors of lists,
//! watches and deletecollection checked against what the resource supports (and the
//! KEP-5866 shard selector of lists and watches).

use serde_json::Value;

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::selectors::{FieldSelector, LabelSelector, field_value};
use crate::apiserver::shards::ShardSelector;

/// Query parameters.
#[derive(Debug, Default, Clone)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    pub(super) fn parse(raw: Option<&str>) -> Self {
        Query(
            raw.map(|q| {
                form_urlencoded_pairs(q)
                    .into_iter()
                    .collect::<Vec<(String, String)>>()
            })
            .unwrap_or_default(),
        )
    }

    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub(super) fn bool(&self, key: &str) -> ApiResult<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some("1" | "t" | "T" | "TRUE" | "true" | "True") => Ok(Some(true)),
            Some("0" | "f" | "F" | "FALSE" | "false" | "False" | "") => Ok(Some(false)),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid boolean value for {key}: {other:?}"
            ))),
        }
    }
}

pub(super) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn form_urlencoded_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

/// Selectors of a list, watch or deletecollection request, validated for the resource.
pub(super) struct Selectors {
    pub(super) label: LabelSelector,
    pub(super) field: FieldSelector,
    /// `shardSelector` (lists and watches only; see [`Selectors::with_shards`]).
    pub(super) shard: Option<ShardSelector>,
}

impl Selectors {
    pub(super) fn parse(def: &ResourceDef, query: &Query) -> ApiResult<Self> {
        let label = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let field = FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        for r in field.requirements() {
            if !supported_field(def, &r.field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {}",
                    r.field
                )));
            }
        }
        Ok(Selectors {
            label,
            field,
            shard: None,
        })
    }

    /// Adds the query's `shardSelector` (KEP-5866) when the server supports it; a server
    /// without the feature ignores the parameter, malformed or not.
    pub(super) fn with_shards(mut self, query: &Query, supported: bool) -> ApiResult<Self> {
        self.shard = match query.get("shardSelector") {
            Some(s) if supported => {
                Some(ShardSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?)
            }
            _ => None,
        };
        Ok(self)
    }

    pub(super) fn matches(&self, obj: &Value) -> bool {
        self.label.matches_object(obj)
            && self.field.matches(|f| object_field(obj, f))
            && self.shard.as_ref().is_none_or(|s| s.matches(obj))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.label.is_empty() && self.field.is_empty() && self.shard.is_none()
    }
}

fn supported_field(def: &ResourceDef, field: &str) -> bool {
    if matches!(field, "metadata.name" | "metadata.namespace") {
        return true;
    }
    match (def.group.as_str(), def.plural.as_str()) {
        ("" | "events.k8s.io", "events") => {
            field.starts_with("involvedObject.")
                || matches!(field, "reason" | "reportingComponent" | "source" | "type")
        }
        ("", "pods") => matches!(
            field,
            "spec.nodeName"
                | "spec.restartPolicy"
                | "spec.schedulerName"
                | "spec.serviceAccountName"
                | "spec.hostNetwork"
                | "status.phase"
                | "status.podIP"
                | "status.nominatedNodeName"
        ),
        ("", "secrets") => field == "type",
        ("", "namespaces") => field == "status.phase",
        ("", "nodes") => field == "spec.unschedulable",
        ("apps", "replicasets") => field == "status.replicas",
        ("batch", "jobs") => field == "status.successful",
        _ => false,
    }
}

/// The value of `field` in the object's field set, as kube-apiserver's `*ToSelectableFields`
/// compute them: Go's zero values for the absent booleans and counts (`fmt.Sprint(false)`,
/// `strconv.Itoa(0)`), so `spec.unschedulable==false` selects a Node without the field.
fn object_field(obj: &Value, field: &str) -> Option<String> {
    let or = |path: &str, zero: &str| Some(field_value(obj, path).unwrap_or_else(|| zero.into()));
    match field {
        "source" => field_value(obj, "source.component"),
        "spec.hostNetwork" | "spec.unschedulable" => or(field, "false"),
        // Job: `strconv.Itoa(int(job.Status.Succeeded))`.
        "status.successful" => or("status.succeeded", "0"),
        // ReplicaSet: `strconv.Itoa(int(rs.Status.Replicas))`.
        "status.replicas" => or(field, "0"),
        _ => field_value(obj, field),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_decoding() {
        let q = Query::parse(Some("fieldSelector=metadata.name%3Dx%2Cb&watch=1&x"));
        assert_eq!(q.get("fieldSelector"), Some("metadata.name=x,b"));
        assert_eq!(q.bool("watch").ok().flatten(), Some(true));
        assert!(Query::parse(Some("watch=maybe")).bool("watch").is_err());
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    fn selects(selector: &str, obj: Value) -> bool {
        FieldSelector::parse(selector)
            .expect("parses")
            .matches(|f| object_field(&obj, f))
    }

    #[test]
    fn field_sets_have_go_zero_values() {
        use serde_json::json;
        // A Node without spec.unschedulable is schedulable: kube-rs' cordon test selects
        // nodes with `spec.unschedulable==false`.
        let node = json!({"metadata": {"name": "n"}});
        assert!(selects("spec.unschedulable==false", node.clone()));
        assert!(!selects("spec.unschedulable==true", node));
        assert!(selects(
            "spec.unschedulable==true",
            json!({"spec": {"unschedulable": true}})
        ));
        // Job's `status.successful` is the count of succeeded pods.
        assert!(selects("status.successful=0", json!({"status": {}})));
        assert!(selects(
            "status.successful=2",
            json!({"status": {"succeeded": 2}})
        ));
        assert!(selects("status.replicas=0", json!({})));
        assert!(selects(
            "status.replicas=3",
            json!({"status": {"replicas": 3}})
        ));
    }
}
