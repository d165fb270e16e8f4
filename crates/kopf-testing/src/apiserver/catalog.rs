//! The resource catalogue: which group/version/plural the server serves, with the
//! facts discovery, OpenAPI and the storage rules need (scope, kind, subresources,
//! whether `metadata.generation` is tracked).
//!
//! Built-in types are listed here; custom resources are added and removed as
//! CustomResourceDefinitions become Established or are deleted.

use serde_json::Value;

use crate::apiserver::kinds::{self, Kind, Subresource};

/// The `/scale` subresource of a custom resource: where its numbers live.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleSpec {
    /// JSON path of the desired replicas, e.g. `.spec.replicas`.
    pub spec_replicas_path: String,
    /// JSON path of the observed replicas, e.g. `.status.replicas`.
    pub status_replicas_path: String,
    /// Optional JSON path of the label selector string.
    pub label_selector_path: Option<String>,
}

/// One served resource in one group-version.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceDef {
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name (the URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Has a `/status` subresource.
    pub status: bool,
    /// Has a `/scale` subresource (built-ins: true with no spec; CRs: with paths).
    pub scale: Option<ScaleSpec>,
    /// `metadata.generation` is maintained.
    pub generation: bool,
    /// Served from a CustomResourceDefinition (the name of the CRD).
    pub crd: Option<String>,
    /// The CRD's `openAPIV3Schema` for this version.
    pub schema: Option<Value>,
    /// Preferred (first served / storage) version of the group for this resource.
    pub storage_version: bool,
    /// DELETE answers with the deleted object rather than a Status (Pods, ServiceAccounts).
    pub return_deleted_object: bool,
    /// The CRD's `additionalPrinterColumns` for this version (Tables).
    pub printer_columns: Option<Value>,
}

impl ResourceDef {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether this is a custom resource.
    pub fn is_custom(&self) -> bool {
        self.crd.is_some()
    }

    /// The storage key of the resource (version-independent).
    pub fn storage_key(&self) -> (String, String) {
        (self.group.clone(), self.plural.clone())
    }

    /// The verbs of the main resource of a stored kind.
    pub fn verbs() -> &'static [&'static str] {
        kinds::ALL_VERBS
    }

    /// The row of a built-in resource (None for custom resources).
    pub fn kind_info(&self) -> Option<&'static Kind> {
        if self.is_custom() {
            return None;
        }
        kinds::kind_of(&self.group, &self.plural)
    }

    /// The verbs this resource serves.
    pub fn served_verbs(&self) -> &'static [&'static str] {
        self.kind_info().map_or(kinds::ALL_VERBS, |k| k.verbs)
    }

    /// Whether objects of this resource are stored (not computed per request).
    pub fn is_stored(&self) -> bool {
        self.kind_info().is_none_or(|k| k.stored)
    }

    /// Whether a field selector may use `label` on this resource.
    pub fn selects_field(&self, label: &str) -> bool {
        match self.kind_info() {
            Some(k) => k.selects_field(label),
            None => matches!(label, "metadata.name" | "metadata.namespace"),
        }
    }

    /// The value of a field label of an object (kube's field set of the kind).
    pub fn field_of(&self, obj: &Value, label: &str) -> Option<String> {
        match self.kind_info() {
            Some(k) => k.field_of(obj, label),
            None => crate::apiserver::selectors::field_value(obj, label),
        }
    }

    /// The other subresource of that name (not `status` or `scale`), if served.
    pub fn subresource(&self, name: &str) -> Option<&'static Subresource> {
        self.kind_info().and_then(|k| k.subresource(name))
    }
}

/// The built-in resources the server serves: one definition per row of
/// [`KINDS`](crate::apiserver::kinds::KINDS) and served version.
pub fn builtins() -> Vec<ResourceDef> {
    kinds::KINDS
        .iter()
        .flat_map(|k| {
            k.versions
                .iter()
                .enumerate()
                .map(move |(i, version)| ResourceDef {
                    group: k.group.into(),
                    version: (*version).into(),
                    plural: k.plural.into(),
                    singular: k.kind.to_lowercase(),
                    kind: k.kind.into(),
                    namespaced: k.namespaced,
                    short_names: k.short_names.iter().map(|s| s.to_string()).collect(),
                    categories: k.categories.iter().map(|s| s.to_string()).collect(),
                    status: k.status,
                    scale: k.scale.then(|| ScaleSpec {
                        spec_replicas_path: ".spec.replicas".into(),
                        status_replicas_path: ".status.replicas".into(),
                        label_selector_path: None,
                    }),
                    generation: k.generation,
                    crd: None,
                    schema: None,
                    storage_version: i == 0,
                    return_deleted_object: k.return_deleted_object,
                    printer_columns: None,
                })
        })
        .collect()
}

/// Builds the resource definitions served by one CRD object (one per served version).
/// Returns an error text when the CRD is malformed.
pub fn from_crd(crd: &Value) -> Result<Vec<ResourceDef>, String> {
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or("metadata.name is missing")?;
    let spec = crd.get("spec").ok_or("spec is missing")?;
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .ok_or("spec.group is missing")?;
    let names = spec.get("names").ok_or("spec.names is missing")?;
    let plural = names
        .get("plural")
        .and_then(Value::as_str)
        .ok_or("spec.names.plural is missing")?;
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .ok_or("spec.names.kind is missing")?;
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let short_names = strings(names.get("shortNames"));
    let categories = strings(names.get("categories"));
    let namespaced = spec.get("scope").and_then(Value::as_str) != Some("Cluster");
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or("spec.versions is missing")?;
    let mut defs = Vec::new();
    for v in versions {
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let version = v
            .get("name")
            .and_then(Value::as_str)
            .ok_or("spec.versions[].name is missing")?;
        let subresources = v.get("subresources");
        let status = subresources.and_then(|s| s.get("status")).is_some();
        let scale = subresources
            .and_then(|s| s.get("scale"))
            .map(|s| ScaleSpec {
                spec_replicas_path: s
                    .get("specReplicasPath")
                    .and_then(Value::as_str)
                    .unwrap_or(".spec.replicas")
                    .to_string(),
                status_replicas_path: s
                    .get("statusReplicasPath")
                    .and_then(Value::as_str)
                    .unwrap_or(".status.replicas")
                    .to_string(),
                label_selector_path: s
                    .get("labelSelectorPath")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            });
        defs.push(ResourceDef {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            singular: singular.clone(),
            kind: kind.to_string(),
            namespaced,
            short_names: short_names.clone(),
            categories: categories.clone(),
            status,
            scale,
            generation: true,
            crd: Some(name.to_string()),
            schema: v.pointer("/schema/openAPIV3Schema").cloned(),
            storage_version: v.get("storage").and_then(Value::as_bool) == Some(true),
            return_deleted_object: false,
            printer_columns: v.get("additionalPrinterColumns").cloned(),
        });
    }
    Ok(defs)
}

/// Orders versions as Kubernetes does for preference: GA > beta > alpha, higher numbers first,
/// non-conforming names last in alphabetical order.
pub fn version_priority(v: &str) -> (u8, u8, u64, u64, String) {
    let parse = |s: &str| -> Option<(u64, u8, u64)> {
        let rest = s.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let major: u64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((major, 3, 0));
        }
        let (level, num) = if let Some(n) = tail.strip_prefix("beta") {
            (2, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (1, n)
        } else {
            return None;
        };
        Some((major, level, num.parse().ok()?))
    };
    match parse(v) {
        // Reverse so that sorting ascending puts the preferred first.
        Some((major, level, minor)) => (
            0,
            3 - level,
            u64::MAX - major,
            u64::MAX - minor,
            String::new(),
        ),
        None => (1, 0, 0, 0, v.to_string()),
    }
}
