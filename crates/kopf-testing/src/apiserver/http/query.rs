//! The query string: its parameters decoded, and the label and field selectors of lists,
//! watches and deletecollection checked against what the resource supports (and the
//! KEP-5866 shard selector of lists and watches).

use serde_json::Value;

use crate::apiserver::catalog::ResourceDef;
use crate::apiserver::error::{ApiError, ApiResult};
use crate::apiserver::kinds::Kind;
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

    /// Every value of a repeated parameter, in order.
    pub(super) fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A boolean parameter as kube-apiserver reads it: absent is None; `0` and `false` (in
    /// any case) are false; any other value, the empty one and `maybe` too, is true.
    pub(super) fn bool(&self, key: &str) -> ApiResult<Option<bool>> {
        Ok(self
            .get(key)
            .map(|v| !(v == "0" || v.eq_ignore_ascii_case("false"))))
    }

    /// An integer parameter (`limit`, `timeoutSeconds`, `gracePeriodSeconds`): a value Go's
    /// `strconv.ParseInt` refuses is a 400 with its message.
    pub(super) fn int(&self, key: &str) -> ApiResult<Option<i64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => parse_int(v).map(Some).map_err(ApiError::bad_request),
        }
    }
}

/// Go's `strconv.ParseInt(v, 10, 64)`, with its error text.
pub(super) fn parse_int(v: &str) -> Result<i64, String> {
    let digits = v.strip_prefix(['+', '-']).unwrap_or(v);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("strconv.ParseInt: parsing {v:?}: invalid syntax"));
    }
    v.parse::<i64>()
        .map_err(|_| format!("strconv.ParseInt: parsing {v:?}: value out of range"))
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
    /// The built-in kind, whose field set the field selector reads.
    kind: Option<&'static Kind>,
}

impl Selectors {
    pub(super) fn parse(def: &ResourceDef, query: &Query) -> ApiResult<Self> {
        let label = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let field = FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        for r in field.requirements() {
            if !def.selects_field(&r.field) {
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
            kind: def.kind_info(),
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
            && self.field.matches(|f| match self.kind {
                Some(k) => k.field_of(obj, f),
                None => field_value(obj, f),
            })
            && self.shard.as_ref().is_none_or(|s| s.matches(obj))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.label.is_empty() && self.field.is_empty() && self.shard.is_none()
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
        for (v, b) in [
            ("maybe", true),
            ("", true),
            ("f", true),
            ("FALSE", false),
            ("0", false),
        ] {
            let q = Query::parse(Some(&format!("watch={v}")));
            assert_eq!(q.bool("watch").ok().flatten(), Some(b), "{v:?}");
        }
        assert_eq!(
            Query::parse(Some("limit=abc"))
                .int("limit")
                .unwrap_err()
                .message,
            "strconv.ParseInt: parsing \"abc\": invalid syntax"
        );
        assert!(
            parse_int("99999999999999999999")
                .unwrap_err()
                .ends_with("value out of range")
        );
        assert_eq!(parse_int("-5"), Ok(-5));
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    fn selects(group: &str, plural: &str, selector: &str, obj: Value) -> bool {
        let kind = crate::apiserver::kinds::kind_of(group, plural).expect("a built-in kind");
        FieldSelector::parse(selector)
            .expect("parses")
            .matches(|f| kind.field_of(&obj, f))
    }

    #[test]
    fn field_sets_have_go_zero_values() {
        use serde_json::json;
        // A Node without spec.unschedulable is schedulable: kube-rs' cordon test selects
        // nodes with `spec.unschedulable==false`.
        let node = json!({"metadata": {"name": "n"}});
        assert!(selects(
            "",
            "nodes",
            "spec.unschedulable==false",
            node.clone()
        ));
        assert!(!selects("", "nodes", "spec.unschedulable==true", node));
        assert!(selects(
            "",
            "nodes",
            "spec.unschedulable==true",
            json!({"spec": {"unschedulable": true}})
        ));
        // Job's `status.successful` is the count of succeeded pods.
        let jobs = |sel: &str, obj: Value| selects("batch", "jobs", sel, obj);
        assert!(jobs("status.successful=0", json!({"status": {}})));
        assert!(jobs(
            "status.successful=2",
            json!({"status": {"succeeded": 2}})
        ));
        let rs = |sel: &str, obj: Value| selects("apps", "replicasets", sel, obj);
        assert!(rs("status.replicas=0", json!({})));
        assert!(rs("status.replicas=3", json!({"status": {"replicas": 3}})));
    }
}
