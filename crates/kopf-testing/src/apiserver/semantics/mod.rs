//! The API semantics: create, update, patch, delete, lists, CRD lifecycle, namespaces and
//! garbage collection, on top of the [`Store`].
//!
//! Everything here is synchronous and runs under one lock, which keeps resourceVersions,
//! history and watch fan-out strictly ordered.

pub mod events;
pub(crate) mod webhook_configs;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::apiserver::catalog::{self, ResourceDef};
use crate::apiserver::error::{ApiError, ApiResult, Cause, cause};
use crate::apiserver::managed_fields;
use crate::apiserver::patch::{self, PatchError};
use crate::apiserver::schema;
use crate::apiserver::storage::{ObjKey, ResKey, Store, object_rv};

/// The finalizer apiextensions puts on CRDs while their objects are removed.
pub const CRD_CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";
const PROTECTED_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];
const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// The current time as `metav1.Time` (RFC 3339, seconds, `Z`).
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The patch body types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json`
    Merge,
    /// `application/json-patch+json`
    Json,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml`
    Apply,
}

impl PatchType {
    /// Parses a Content-Type.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }

    /// Short name for counters.
    pub fn as_str(self) -> &'static str {
        match self {
            PatchType::Merge => "merge",
            PatchType::Json => "json",
            PatchType::Strategic => "strategic",
            PatchType::Apply => "apply",
        }
    }
}

/// Options of write requests, from the query string and DeleteOptions.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldManager`.
    pub field_manager: Option<String>,
    /// `force` (apply only).
    pub force: Option<bool>,
    /// The User-Agent, for the default field manager.
    pub user_agent: String,
    /// The write is a server-side apply (set by the apply path).
    pub apply: bool,
    /// `fieldValidation`: `Ignore`, `Warn` (the default) or `Strict`.
    pub field_validation: Option<String>,
}

/// Options of DELETE requests.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `Orphan`, `Background` or `Foreground`.
    pub propagation: Option<String>,
    /// `orphanDependents` (deprecated).
    pub orphan_dependents: Option<bool>,
    /// `preconditions.uid`.
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub precondition_rv: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `gracePeriodSeconds`.
    pub grace_period: Option<i64>,
}

/// Server configuration that the state consults.
#[derive(Debug, Clone)]
pub struct StateConfig {
    /// Establish CRDs at once (true) or leave it to a delayed task (false).
    pub establish_immediately: bool,
    /// The longest a terminating scheduled Pod waits for the simulated kubelet.
    pub pod_termination_cap: std::time::Duration,
}

/// The result of a write: HTTP code and body.
#[derive(Debug, Clone)]
pub struct Written {
    /// 200 or 201 (202 for some deletes).
    pub code: u16,
    /// The response body.
    pub body: Value,
    /// `Warning` headers.
    pub warnings: Vec<String>,
}

impl Written {
    fn ok(body: Value) -> Self {
        Written {
            code: 200,
            body,
            warnings: Vec::new(),
        }
    }
}

/// What a PATCH amounts to.
#[derive(Debug, Clone)]
pub(crate) enum PatchTarget {
    /// An apply patch of a missing object: create it from the applied configuration.
    Create(Value, WriteOptions),
    /// The patched object, to be written over the stored one.
    Update(Value, WriteOptions),
}

/// The whole API state.
pub struct State {
    /// Objects and history.
    pub store: Store,
    builtins: Vec<ResourceDef>,
    crds: BTreeMap<String, Vec<ResourceDef>>,
    /// Bumped whenever the set of served resources changes.
    pub catalog_generation: u64,
    /// CRDs waiting for a delayed Established.
    pub to_establish: Vec<String>,
    /// Terminating Pods the simulated kubelet removes after a delay.
    pub to_reap: Vec<(ResKey, ObjKey, std::time::Duration)>,
    config: StateConfig,
    ip_counter: u32,
}

fn meta(obj: &Value) -> &Value {
    obj.get("metadata").unwrap_or(&Value::Null)
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).get(field).and_then(Value::as_str)
}

fn meta_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        // metadata was made an object just above.
        _ => unreachable!("metadata is an object"),
    }
}

fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .get("finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Content of an object outside metadata (and outside status when `skip_status`).
fn content_without_meta(obj: &Value, skip_status: bool) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if skip_status {
            m.remove("status");
        }
    }
    o
}

fn without_volatile(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    o
}

fn is_valid_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_valid_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_valid_dns_label)
}

impl State {
    /// A fresh state with the built-in resources and the initial namespaces.
    pub fn new(history_limit: usize, config: StateConfig) -> Self {
        let mut state = State {
            store: Store::new(history_limit, 0),
            builtins: catalog::builtins(),
            crds: BTreeMap::new(),
            catalog_generation: 1,
            to_establish: Vec::new(),
            to_reap: Vec::new(),
            config,
            ip_counter: 1,
        };
        for ns in INITIAL_NAMESPACES {
            let def = state.builtin_def("", "namespaces");
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            if let Some(def) = def
                && let Err(e) = state.create(&def, None, body, &WriteOptions::default())
            {
                tracing::error!(namespace = ns, error = %e, "cannot create an initial namespace");
            }
        }
        state
    }

    /// Updates the configuration.
    pub fn set_config(&mut self, config: StateConfig) {
        self.config = config;
    }

    fn builtin_def(&self, group: &str, plural: &str) -> Option<ResourceDef> {
        self.builtins
            .iter()
            .find(|d| d.group == group && d.plural == plural)
            .cloned()
    }

    /// Every served resource definition.
    pub fn defs(&self) -> Vec<&ResourceDef> {
        self.builtins
            .iter()
            .chain(self.crds.values().flatten())
            .collect()
    }

    /// Finds the served resource for group/version/plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<ResourceDef> {
        self.defs()
            .into_iter()
            .find(|d| d.group == group && d.version == version && d.plural == plural)
            .cloned()
    }

    /// The storage key of a resource (events.k8s.io events share core storage).
    pub fn res_key(def: &ResourceDef) -> ResKey {
        if def.group == "events.k8s.io" && def.plural == "events" {
            (String::new(), "events".into())
        } else {
            def.storage_key()
        }
    }

    /// Renders a stored object for a resource view: sets apiVersion/kind, converts events.
    pub fn present(def: &ResourceDef, obj: &Value) -> Value {
        if def.group == "events.k8s.io" && def.plural == "events" {
            return events::to_events_v1(obj);
        }
        let mut o = obj.clone();
        if let Some(m) = o.as_object_mut() {
            m.insert("apiVersion".into(), Value::String(def.api_version()));
            m.insert("kind".into(), Value::String(def.kind.clone()));
        }
        if def.is_custom()
            && let Some(schema) = &def.schema
        {
            schema::prune_and_default(&mut o, schema);
        }
        o
    }

    fn key_of(def: &ResourceDef, namespace: Option<&str>, name: &str) -> ObjKey {
        let ns = if def.namespaced {
            namespace.unwrap_or("").to_string()
        } else {
            String::new()
        };
        (ns, name.to_string())
    }

    /// GET one object.
    pub fn get(&self, def: &ResourceDef, namespace: Option<&str>, name: &str) -> ApiResult<Value> {
        let key = Self::key_of(def, namespace, name);
        self.store
            .get(&Self::res_key(def), &key)
            .map(|o| Self::present(def, &o))
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))
    }

    /// The stored object, as stored (not presented).
    pub(crate) fn get_stored(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> ApiResult<Arc<Value>> {
        let key = Self::key_of(def, namespace, name);
        self.store
            .get(&Self::res_key(def), &key)
            .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))
    }

    fn check_namespace_for_create(
        &self,
        def: &ResourceDef,
        namespace: &str,
        name: &str,
    ) -> ApiResult<()> {
        let ns = self
            .store
            .get(
                &(String::new(), "namespaces".into()),
                &(String::new(), namespace.into()),
            )
            .ok_or_else(|| ApiError::not_found("", "namespaces", namespace))?;
        if meta(&ns).get("deletionTimestamp").is_some() {
            let mut err = ApiError::forbidden(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "unable to create new content in namespace {namespace} because it is being terminated"
                ),
            );
            if let Some(d) = err.details.as_mut() {
                d["causes"] = json!([{"reason": "NamespaceTerminating",
                    "message": format!("namespace {namespace} is being terminated"),
                    "field": "metadata.namespace"}]);
            }
            return Err(err);
        }
        Ok(())
    }

    /// Normalises a request body: an object with apiVersion/kind of the resource and the
    /// namespace of the URL.
    pub(crate) fn normalise_body(
        def: &ResourceDef,
        namespace: Option<&str>,
        mut body: Value,
    ) -> ApiResult<Value> {
        if !body.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of the request must be a JSON object of kind {}",
                def.kind
            )));
        }
        if def.group == "events.k8s.io" && def.plural == "events" {
            body = events::to_core(&body);
        }
        let expected_av = if def.group == "events.k8s.io" {
            "v1".to_string()
        } else {
            def.api_version()
        };
        if let Some(kind) = body.get("kind").and_then(Value::as_str)
            && kind != def.kind
            && !kind.is_empty()
        {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the kind of the resource ({})",
                def.kind
            )));
        }
        if let Some(av) = body.get("apiVersion").and_then(Value::as_str)
            && !av.is_empty()
            && av != def.api_version()
            && av != expected_av
        {
            // Custom resources with several versions may be written through any served version.
            let same_group = av.split('/').next() == Some(def.group.as_str());
            if !(def.is_custom() && same_group) {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({av}) does not match the expected API version ({})",
                    def.api_version()
                )));
            }
        }
        body["apiVersion"] = Value::String(expected_av);
        body["kind"] = Value::String(def.kind.clone());
        let m = meta_mut(&mut body);
        if def.namespaced {
            let url_ns = namespace.unwrap_or("");
            match m.get("namespace").and_then(Value::as_str) {
                Some(ns) if !ns.is_empty() && ns != url_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    m.insert("namespace".into(), Value::String(url_ns.to_string()));
                }
            }
        } else {
            m.remove("namespace");
        }
        Ok(body)
    }

    /// POST: create an object.
    pub fn create(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        let obj = self.create_prepare(def, namespace, body)?;
        let mut warnings = Vec::new();
        let obj = self.create_finish(def, namespace, obj, opts, &mut warnings, true)?;
        self.create_commit(def, namespace, obj, warnings, opts.dry_run)
    }

    /// The first step of a create: the normalised body with the server-set metadata (name,
    /// uid, creationTimestamp, generation), in an existing, active namespace, before
    /// defaulting and validation.
    pub(crate) fn create_prepare(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        body: Value,
    ) -> ApiResult<Value> {
        let mut obj = Self::normalise_body(def, namespace, body)?;
        if def.namespaced && namespace.is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(
                "the namespace of the object must be given in the URL",
            ));
        }
        let m = meta_mut(&mut obj);
        if m.get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        {
            return Err(ApiError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let name = match m.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => match m.get("generateName").and_then(Value::as_str) {
                Some(g) if !g.is_empty() => {
                    let base: String = g.chars().take(58).collect();
                    let mut name = format!("{base}{}", random_suffix());
                    let res = Self::res_key(def);
                    for _ in 0..8 {
                        let key = Self::key_of(def, namespace, &name);
                        if self.store.get(&res, &key).is_none() {
                            break;
                        }
                        name = format!("{base}{}", random_suffix());
                    }
                    name
                }
                _ => {
                    return Err(ApiError::invalid(
                        &def.group,
                        &def.kind,
                        "",
                        vec![cause(
                            "FieldValueRequired",
                            "metadata.name",
                            "Required value: name or generateName is required",
                        )],
                    ));
                }
            },
        };
        let m = meta_mut(&mut obj);
        m.insert("name".into(), Value::String(name.clone()));
        m.insert(
            "uid".into(),
            Value::String(uuid::Uuid::new_v4().to_string()),
        );
        m.insert("creationTimestamp".into(), Value::String(now()));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("selfLink");
        if def.generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        if def.namespaced {
            self.check_namespace_for_create(def, namespace.unwrap_or(""), &name)?;
        }
        if def.status
            && def.is_custom()
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
        Ok(obj)
    }

    /// The second step of a create: defaults, validation (unless `validate` is false: the
    /// object mutating admission webhooks see is defaulted, not validated), managedFields.
    pub(crate) fn create_finish(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        mut obj: Value,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
        validate: bool,
    ) -> ApiResult<Value> {
        let name = meta_str(&obj, "name").unwrap_or("").to_string();
        self.validate_and_default(
            def,
            None,
            &mut obj,
            warnings,
            opts.field_validation.as_deref(),
            validate,
        )?;
        if !validate {
            return Ok(obj);
        }
        let manager = managed_fields::manager_name(opts.field_manager.as_deref(), &opts.user_agent);
        if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        if opts.apply {
            let applied = obj.clone();
            if let Ok(with_fields) =
                managed_fields::apply(&obj, &applied, def, &manager, true, None, &now())
            {
                obj = with_fields;
            }
        } else {
            managed_fields::record_update(None, &mut obj, def, &manager, None, &now());
        }
        let res = Self::res_key(def);
        let key = Self::key_of(def, namespace, &name);
        if self.store.get(&res, &key).is_some() {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        Ok(obj)
    }

    /// The last step of a create: stores the finished object (unless `dry_run`).
    pub(crate) fn create_commit(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        obj: Value,
        warnings: Vec<String>,
        dry_run: bool,
    ) -> ApiResult<Written> {
        let name = meta_str(&obj, "name").unwrap_or("").to_string();
        let res = Self::res_key(def);
        let key = Self::key_of(def, namespace, &name);
        if self.store.get(&res, &key).is_some() {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        if dry_run {
            return Ok(Written {
                code: 201,
                body: Self::present(def, &obj),
                warnings,
            });
        }
        let stored = self.store.put(&res, &key, obj);
        let body = Self::present(def, &stored);
        if def.group == "apiextensions.k8s.io" && self.config.establish_immediately {
            self.establish_crd(&name);
        } else if def.group == "apiextensions.k8s.io" {
            self.to_establish.push(name.clone());
        }
        Ok(Written {
            code: 201,
            body,
            warnings,
        })
    }

    /// Type-specific defaults and validation (namespaces, services, pods, CRDs, custom resources).
    fn validate_and_default(
        &mut self,
        def: &ResourceDef,
        old: Option<&Value>,
        obj: &mut Value,
        warnings: &mut Vec<String>,
        field_validation: Option<&str>,
        validate: bool,
    ) -> ApiResult<()> {
        let name = meta_str(obj, "name").unwrap_or("").to_string();
        if def.is_custom()
            && let Some(schema) = &def.schema
        {
            let unknown = schema::unknown_fields(obj, schema);
            match field_validation.unwrap_or("Warn") {
                "Strict" if !unknown.is_empty() => {
                    let list: Vec<String> = unknown
                        .iter()
                        .map(|f| format!("unknown field \"{f}\""))
                        .collect();
                    return Err(ApiError::bad_request(format!(
                        "{}.{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
                        def.kind,
                        def.group,
                        def.version,
                        def.kind,
                        list.join(", ")
                    )));
                }
                "Ignore" => {}
                _ => warnings.extend(unknown.iter().map(|f| format!("unknown field \"{f}\""))),
            }
        }
        match (def.group.as_str(), def.plural.as_str()) {
            ("", "namespaces") => {
                if validate && !is_valid_dns_label(&name) {
                    return Err(ApiError::invalid(
                        "",
                        "Namespace",
                        &name,
                        vec![cause(
                            "FieldValueInvalid",
                            "metadata.name",
                            format!(
                                "Invalid value: \"{name}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
                            ),
                        )],
                    ));
                }
                let labels = meta_mut(obj).entry("labels").or_insert_with(|| json!({}));
                labels["kubernetes.io/metadata.name"] = Value::String(name.clone());
                if old.is_none() {
                    if obj.pointer("/spec/finalizers").is_none() {
                        obj["spec"] = json!({"finalizers": ["kubernetes"]});
                    }
                    obj["status"] = json!({"phase": "Active"});
                }
            }
            ("", "services") if old.is_none() => {
                let ip = format!(
                    "10.96.{}.{}",
                    self.ip_counter / 250,
                    self.ip_counter % 250 + 1
                );
                self.ip_counter += 1;
                let spec = obj
                    .as_object_mut()
                    .map(|o| o.entry("spec").or_insert_with(|| json!({})));
                if let Some(spec) = spec.and_then(Value::as_object_mut) {
                    spec.entry("type").or_insert_with(|| json!("ClusterIP"));
                    spec.entry("sessionAffinity")
                        .or_insert_with(|| json!("None"));
                    if spec.get("type") != Some(&json!("ExternalName")) {
                        spec.entry("clusterIP").or_insert_with(|| json!(ip));
                        let cip = spec.get("clusterIP").cloned().unwrap_or(json!(ip));
                        spec.entry("clusterIPs").or_insert_with(|| json!([cip]));
                    }
                    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                        for p in ports {
                            if let Some(p) = p.as_object_mut() {
                                p.entry("protocol").or_insert_with(|| json!("TCP"));
                                if let Some(port) = p.get("port").cloned() {
                                    p.entry("targetPort").or_insert(port);
                                }
                            }
                        }
                    }
                }
                obj["status"] = json!({"loadBalancer": {}});
            }
            ("", "pods") if old.is_none() => {
                if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.entry("restartPolicy")
                        .or_insert_with(|| json!("Always"));
                    spec.entry("dnsPolicy")
                        .or_insert_with(|| json!("ClusterFirst"));
                    spec.entry("schedulerName")
                        .or_insert_with(|| json!("default-scheduler"));
                    spec.entry("terminationGracePeriodSeconds")
                        .or_insert_with(|| json!(30));
                    spec.entry("enableServiceLinks")
                        .or_insert_with(|| json!(true));
                    if let Some(cs) = spec.get_mut("containers").and_then(Value::as_array_mut) {
                        for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                            c.entry("terminationMessagePath")
                                .or_insert_with(|| json!("/dev/termination-log"));
                            c.entry("terminationMessagePolicy")
                                .or_insert_with(|| json!("File"));
                            let latest = c
                                .get("image")
                                .and_then(Value::as_str)
                                .is_some_and(|i| !i.contains(':') || i.ends_with(":latest"));
                            c.entry("imagePullPolicy").or_insert_with(|| {
                                json!(if latest { "Always" } else { "IfNotPresent" })
                            });
                        }
                    }
                }
                obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
            }
            ("apps", "deployments") if old.is_none() => {
                if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.entry("replicas").or_insert_with(|| json!(1));
                    spec.entry("revisionHistoryLimit")
                        .or_insert_with(|| json!(10));
                    spec.entry("progressDeadlineSeconds")
                        .or_insert_with(|| json!(600));
                    spec.entry("strategy").or_insert_with(|| {
                        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
                    });
                }
            }
            ("" | "events.k8s.io", "events") if old.is_none() && validate => {
                validate_event(obj, def.group == "events.k8s.io")?;
            }
            (
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations" | "mutatingwebhookconfigurations",
            ) => {
                let mutating = def.plural == "mutatingwebhookconfigurations";
                webhook_configs::default_configuration(obj, mutating);
                if validate {
                    webhook_configs::validate_configuration(obj, &def.kind, mutating)?;
                }
            }
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                if validate {
                    validate_crd(obj)?;
                }
                if old.is_none() {
                    let storage = obj
                        .pointer("/spec/versions")
                        .and_then(Value::as_array)
                        .and_then(|vs| {
                            vs.iter()
                                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                        })
                        .and_then(|v| v.get("name"))
                        .cloned()
                        .unwrap_or(Value::Null);
                    obj["status"] = json!({
                        "acceptedNames": {"plural": "", "kind": ""},
                        "storedVersions": [storage],
                    });
                }
            }
            _ => {}
        }
        if def.is_custom()
            && let Some(schema) = &def.schema
        {
            schema::prune_and_default(obj, schema);
            let errors = if validate {
                schema::validate(obj, schema)
            } else {
                Vec::new()
            };
            if !errors.is_empty() {
                return Err(ApiError::invalid(
                    &def.group,
                    &def.kind,
                    &name,
                    errors
                        .into_iter()
                        .map(|e| cause(&e.reason, &e.field, e.message))
                        .collect(),
                ));
            }
        }
        Ok(())
    }

    /// PUT: replace an object (also PUT on `/status`).
    pub fn update(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        let (old, new) = self.update_target(def, namespace, name, body)?;
        self.write_over(def, &old, new, subresource, opts)
    }

    /// The stored object a PUT replaces and the normalised new object (checked for the name
    /// and, for custom resources and CRDs, a resourceVersion).
    pub(crate) fn update_target(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        body: Value,
    ) -> ApiResult<(Arc<Value>, Value)> {
        let new = Self::normalise_body(def, namespace, body)?;
        match meta_str(&new, "name") {
            Some(n) if n != name => {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => {}
        }
        let old = self.get_stored(def, namespace, name)?;
        if meta_str(&new, "resourceVersion").is_none_or(str::is_empty)
            && (def.is_custom() || def.group == "apiextensions.k8s.io")
        {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                name,
                vec![cause(
                    "FieldValueInvalid",
                    "metadata.resourceVersion",
                    "Invalid value: 0x0: must be specified for an update",
                )],
            ));
        }
        Ok((old, new))
    }

    /// PATCH an object with one of the four patch types.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        patch_type: PatchType,
        body: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        let existing = self
            .store
            .get(&Self::res_key(def), &Self::key_of(def, namespace, name));
        let current = existing.as_ref().map(|o| Self::present(def, o));
        let target = Self::patch_target(
            def,
            namespace,
            name,
            subresource,
            patch_type,
            body,
            opts,
            current.as_ref(),
        )?;
        match (target, existing) {
            (PatchTarget::Create(applied, opts), _) => self.create(def, namespace, applied, &opts),
            (PatchTarget::Update(new, opts), Some(old)) => {
                self.write_over(def, &old, new, subresource, &opts)
            }
            (PatchTarget::Update(..), None) => {
                Err(ApiError::not_found(&def.group, &def.plural, name))
            }
        }
    }

    /// What a PATCH amounts to: the patched object (from `current`, the stored object as
    /// the request's version presents it), or a create when an apply patch meets no object.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch_target(
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        patch_type: PatchType,
        body: &[u8],
        opts: &WriteOptions,
        current: Option<&Value>,
    ) -> ApiResult<PatchTarget> {
        if patch_type != PatchType::Apply && opts.force.is_some() {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                name,
                vec![cause(
                    "FieldValueForbidden",
                    "force",
                    "Forbidden: may not be specified for non-apply patch",
                )],
            ));
        }
        if patch_type == PatchType::Strategic && (def.is_custom() || def.group == "events.k8s.io") {
            return Err(ApiError::unsupported_media_type(&[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ]));
        }
        let current = match current {
            Some(o) => o,
            None if patch_type == PatchType::Apply && subresource.is_none() => {
                let applied = parse_apply_body(body)?;
                check_apply_manager(def, name, opts)?;
                let mut applied = applied;
                if meta_str(&applied, "name").is_none() {
                    meta_mut(&mut applied).insert("name".into(), json!(name));
                }
                let opts = WriteOptions {
                    apply: true,
                    ..opts.clone()
                };
                return Ok(PatchTarget::Create(applied, opts));
            }
            None => return Err(ApiError::not_found(&def.group, &def.plural, name)),
        };
        let patched = match patch_type {
            PatchType::Merge => patch::apply_merge_patch(current, body),
            PatchType::Json => patch::apply_json_patch(current, body),
            PatchType::Strategic => patch::apply_strategic_merge_patch(current, body, &def.kind),
            PatchType::Apply => {
                check_apply_manager(def, name, opts)?;
                let applied = parse_apply_body(body)?;
                if let Some(n) = meta_str(&applied, "name")
                    && n != name
                {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({n}) does not match the name on the URL ({name})"
                    )));
                }
                let manager = opts.field_manager.clone().unwrap_or_default();
                let force = opts.force.unwrap_or(false);
                match managed_fields::apply(
                    current,
                    &applied,
                    def,
                    &manager,
                    force,
                    subresource,
                    &now(),
                ) {
                    Ok(merged) => Ok(merged),
                    Err(conflicts) => {
                        let causes: Vec<Value> = conflicts
                            .iter()
                            .map(|c| json!({"reason": "FieldManagerConflict", "message": c.describe(), "field": c.field}))
                            .collect();
                        let mut details =
                            json!({"name": name, "kind": def.plural, "causes": causes});
                        if !def.group.is_empty() {
                            details["group"] = json!(def.group);
                        }
                        return Err(ApiError::new(
                            409,
                            "Conflict",
                            managed_fields::conflict_message(&conflicts),
                        )
                        .with_details(details));
                    }
                }
            }
        };
        let new = patched.map_err(|e| match e {
            PatchError::Malformed(m) => ApiError::bad_request(m),
            PatchError::Apply(m) => ApiError::new(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
            )
            .with_details(json!({"causes": [{"reason": "FieldValueInvalid", "message": m, "field": "patch"}]})),
        })?;
        let new = Self::normalise_body(def, namespace, new)?;
        let opts = WriteOptions {
            apply: patch_type == PatchType::Apply,
            ..opts.clone()
        };
        Ok(PatchTarget::Update(new, opts))
    }

    /// Common update path of PUT and PATCH.
    fn write_over(
        &mut self,
        def: &ResourceDef,
        old: &Value,
        new: Value,
        subresource: Option<&str>,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        let new = self.over_prepare(def, old, new, subresource)?;
        let mut warnings = Vec::new();
        let new = self.over_finish(def, old, new, subresource, opts, &mut warnings, true)?;
        self.over_commit(def, old, new, warnings, opts.dry_run)
    }

    /// The first step of an update: checks the resourceVersion, uid and name, restores the
    /// server-owned metadata and what the subresource may not change.
    pub(crate) fn over_prepare(
        &self,
        def: &ResourceDef,
        old: &Value,
        mut new: Value,
        subresource: Option<&str>,
    ) -> ApiResult<Value> {
        let name = meta_str(old, "name").unwrap_or("").to_string();
        match meta_str(&new, "resourceVersion") {
            Some(rv) if !rv.is_empty() && Some(rv) != meta_str(old, "resourceVersion") => {
                return Err(ApiError::stale(&def.group, &def.plural, &name));
            }
            _ => {}
        }
        if let Some(uid) = meta_str(&new, "uid")
            && !uid.is_empty()
            && Some(uid) != meta_str(old, "uid")
        {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                &name,
                vec![cause(
                    "FieldValueInvalid",
                    "metadata.uid",
                    format!("Invalid value: \"{uid}\": field is immutable"),
                )],
            ));
        }
        if let Some(n) = meta_str(&new, "name")
            && n != name
        {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                &name,
                vec![cause(
                    "FieldValueInvalid",
                    "metadata.name",
                    format!("Invalid value: \"{n}\": field is immutable"),
                )],
            ));
        }
        // Server-owned metadata comes from the stored object.
        let old_meta = meta(old).clone();
        {
            let m = meta_mut(&mut new);
            for field in [
                "uid",
                "name",
                "namespace",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old_meta.get(field) {
                    Some(v) => m.insert(field.into(), v.clone()),
                    None => m.remove(field),
                };
            }
            m.remove("selfLink");
        }
        if subresource == Some("status") {
            // Only .status changes through /status (the managedFields an apply computed
            // are kept for the next step).
            let mut merged = old.clone();
            match new.get("status") {
                Some(s) => merged["status"] = s.clone(),
                None => {
                    if let Some(o) = merged.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            if let Some(fields) = meta(&new).get("managedFields").cloned() {
                meta_mut(&mut merged).insert("managedFields".into(), fields);
            }
            new = merged;
        } else if def.status {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(o) = new.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
        }
        if meta(old).get("deletionTimestamp").is_some() {
            let before = finalizers(old);
            let added: Vec<String> = finalizers(&new)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    &def.group,
                    &def.kind,
                    &name,
                    vec![cause(
                        "FieldValueForbidden",
                        "metadata.finalizers",
                        format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                        ),
                    )],
                ));
            }
        }
        Ok(new)
    }

    /// The second step of an update: defaults, validation (unless `validate` is false),
    /// managedFields and generation.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn over_finish(
        &mut self,
        def: &ResourceDef,
        old: &Value,
        mut new: Value,
        subresource: Option<&str>,
        opts: &WriteOptions,
        warnings: &mut Vec<String>,
        validate: bool,
    ) -> ApiResult<Value> {
        let applied_fields = if opts.apply {
            meta(&new).get("managedFields").cloned()
        } else {
            None
        };
        self.validate_and_default(
            def,
            Some(old),
            &mut new,
            warnings,
            opts.field_validation.as_deref(),
            validate,
        )?;
        if !validate {
            return Ok(new);
        }
        let old_meta = meta(old);
        match applied_fields {
            Some(fields) => {
                meta_mut(&mut new).insert("managedFields".into(), fields);
            }
            None => {
                let manager =
                    managed_fields::manager_name(opts.field_manager.as_deref(), &opts.user_agent);
                managed_fields::record_update(
                    Some(old),
                    &mut new,
                    def,
                    &manager,
                    subresource,
                    &now(),
                );
            }
        }
        if def.generation
            && content_without_meta(&new, def.status) != content_without_meta(old, def.status)
        {
            let g = meta(old)
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        {
            // Keep the stored RV for the no-op comparison.
            let m = meta_mut(&mut new);
            if let Some(rv) = old_meta.get("resourceVersion") {
                m.insert("resourceVersion".into(), rv.clone());
            }
        }
        Ok(new)
    }

    /// The last step of an update: stores the finished object (unless it changes nothing or
    /// `dry_run`), or removes it when it leaves a deleted object without finalizers.
    pub(crate) fn over_commit(
        &mut self,
        def: &ResourceDef,
        old: &Value,
        new: Value,
        warnings: Vec<String>,
        dry_run: bool,
    ) -> ApiResult<Written> {
        let name = meta_str(old, "name").unwrap_or("").to_string();
        let res = Self::res_key(def);
        let key = Self::key_of(def, meta_str(old, "namespace"), &name);
        let terminating = meta(&new).get("deletionTimestamp").is_some();
        let deletes = terminating && finalizers(&new).is_empty() && {
            // A namespace also waits for its spec.finalizers.
            !(def.group.is_empty() && def.plural == "namespaces")
                || new
                    .pointer("/spec/finalizers")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty)
        };
        if !deletes && without_volatile(&new) == without_volatile(old) {
            return Ok(Written {
                code: 200,
                body: Self::present(def, old),
                warnings,
            });
        }
        if dry_run {
            return Ok(Written {
                code: 200,
                body: Self::present(def, &new),
                warnings,
            });
        }
        if deletes {
            // Watchers see one DELETED event carrying the last stored state.
            let body = Self::present(def, &new);
            self.remove_object(def, &res, &key, "Background");
            self.reconcile();
            return Ok(Written {
                code: 200,
                body,
                warnings,
            });
        }
        let stored = self.store.put(&res, &key, new);
        if def.group == "apiextensions.k8s.io" && self.crds.contains_key(&name) {
            self.register_crd(&stored);
        }
        if terminating {
            self.reconcile();
        }
        Ok(Written {
            code: 200,
            body: Self::present(def, &stored),
            warnings,
        })
    }

    /// DELETE one object.
    pub fn delete(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Written> {
        let old = self.get_stored(def, namespace, name)?;
        Self::delete_preconditions(def, &old, name, opts)?;
        let is_namespace = def.group.is_empty() && def.plural == "namespaces";
        if is_namespace && PROTECTED_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(
                "",
                "namespaces",
                name,
                "this namespace may not be deleted",
            ));
        }
        let policy = opts.propagation.clone().unwrap_or_else(|| {
            if opts.orphan_dependents == Some(true) {
                "Orphan".into()
            } else {
                "Background".into()
            }
        });
        if !["Orphan", "Background", "Foreground"].contains(&policy.as_str()) {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                name,
                vec![cause(
                    "FieldValueNotSupported",
                    "propagationPolicy",
                    format!(
                        "Unsupported value: \"{policy}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
                    ),
                )],
            ));
        }
        let is_crd = def.group == "apiextensions.k8s.io";
        let pod_grace = if def.group.is_empty() && def.plural == "pods" {
            pod_grace_period(&old, opts.grace_period)
        } else {
            0
        };
        let graceful = !finalizers(&old).is_empty() || is_namespace || is_crd || pod_grace > 0;
        let res = Self::res_key(def);
        let key = Self::key_of(def, namespace, name);
        if opts.dry_run {
            return Ok(Written::ok(Self::present(def, &old)));
        }
        if graceful {
            if meta(&old).get("deletionTimestamp").is_some() {
                return Ok(Written::ok(Self::present(def, &old)));
            }
            let mut new = (*old).clone();
            let m = meta_mut(&mut new);
            let deadline = jiff::Timestamp::now()
                .checked_add(jiff::SignedDuration::from_secs(pod_grace))
                .unwrap_or_else(|_| jiff::Timestamp::now());
            m.insert(
                "deletionTimestamp".into(),
                json!(deadline.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
            );
            m.insert("deletionGracePeriodSeconds".into(), json!(pod_grace));
            if pod_grace > 0 {
                // The simulated kubelet confirms the termination after the grace period
                // (capped by the server setting).
                let wait = std::time::Duration::from_secs(pod_grace as u64)
                    .min(self.config.pod_termination_cap);
                self.to_reap.push((res.clone(), key.clone(), wait));
            }
            if def.generation {
                let g = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
                if g > 0 {
                    m.insert("generation".into(), json!(g + 1));
                }
            }
            if is_crd {
                let fins = m.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(a) = fins.as_array_mut()
                    && !a.iter().any(|f| f == CRD_CLEANUP_FINALIZER)
                {
                    a.push(json!(CRD_CLEANUP_FINALIZER));
                }
                let conds = new
                    .as_object_mut()
                    .map(|o| o.entry("status").or_insert_with(|| json!({})));
                if let Some(status) = conds.and_then(Value::as_object_mut) {
                    let list = status.entry("conditions").or_insert_with(|| json!([]));
                    if let Some(list) = list.as_array_mut() {
                        list.retain(|c| c.get("type") != Some(&json!("Terminating")));
                        list.push(json!({"type": "Terminating", "status": "True", "lastTransitionTime": now(),
                            "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress"}));
                    }
                }
            }
            if is_namespace {
                new["status"] = json!({"phase": "Terminating"});
            }
            let stored = self.store.put(&res, &key, new);
            let body = Self::present(def, &stored);
            self.reconcile();
            let code = if opts.orphan_dependents == Some(false) {
                202
            } else {
                200
            };
            // The object may be gone already (e.g. an empty namespace).
            return Ok(Written {
                code,
                body,
                warnings: Vec::new(),
            });
        }
        let last = self.remove_object(def, &res, &key, &policy);
        self.reconcile();
        let body = if def.return_deleted_object {
            last.map(|l| Self::present(def, &l)).unwrap_or(Value::Null)
        } else {
            let mut details =
                json!({"name": name, "kind": def.plural, "uid": meta_str(&old, "uid")});
            if !def.group.is_empty() {
                details["group"] = json!(def.group);
            }
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
        };
        Ok(Written::ok(body))
    }

    /// The preconditions (uid, resourceVersion) of a DELETE, checked against the stored object.
    pub(crate) fn delete_preconditions(
        def: &ResourceDef,
        old: &Value,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<()> {
        if let Some(uid) = &opts.precondition_uid
            && Some(uid.as_str()) != meta_str(old, "uid")
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(old, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_rv
            && Some(rv.as_str()) != meta_str(old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(old, "resourceVersion").unwrap_or("")
                ),
            ));
        }
        Ok(())
    }

    /// Removes an object now and applies the garbage-collection policy to its dependents.
    fn remove_object(
        &mut self,
        def: &ResourceDef,
        res: &ResKey,
        key: &ObjKey,
        policy: &str,
    ) -> Option<Arc<Value>> {
        let uid = self
            .store
            .get(res, key)
            .and_then(|o| meta_str(&o, "uid").map(str::to_string));
        if policy == "Foreground"
            && let Some(uid) = &uid
        {
            self.collect_dependents(uid, "Background");
        }
        let last = self.store.remove(res, key);
        if def.group == "apiextensions.k8s.io" {
            self.unregister_crd(&key.1);
        }
        if policy != "Foreground"
            && let Some(uid) = &uid
        {
            self.collect_dependents(uid, policy);
        }
        last
    }

    /// Deletes (Background) or orphans (Orphan) the dependents of a removed owner.
    fn collect_dependents(&mut self, owner_uid: &str, policy: &str) {
        for (res, key) in self.store.dependents(owner_uid) {
            let Some(obj) = self.store.get(&res, &key) else {
                continue;
            };
            let Some(def) = self
                .defs()
                .into_iter()
                .find(|d| Self::res_key(d) == res)
                .cloned()
            else {
                continue;
            };
            if policy == "Orphan" {
                let mut new = (*obj).clone();
                if let Some(refs) = meta_mut(&mut new)
                    .get_mut("ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
                }
                self.store.put(&res, &key, new);
                continue;
            }
            // Dependents with other living owners stay.
            let other_owners = meta(&obj)
                .get("ownerReferences")
                .and_then(Value::as_array)
                .map(|refs| {
                    refs.iter()
                        .filter_map(|r| r.get("uid").and_then(Value::as_str))
                        .any(|u| u != owner_uid && self.uid_exists(u))
                })
                .unwrap_or(false);
            if other_owners {
                continue;
            }
            let opts = DeleteOptions {
                propagation: Some("Background".into()),
                ..Default::default()
            };
            let ns = (!key.0.is_empty()).then_some(key.0.as_str());
            if let Err(e) = self.delete(&def, ns, &key.1, &opts) {
                tracing::debug!(error = %e, "garbage collection could not delete a dependent");
            }
        }
    }

    fn uid_exists(&self, uid: &str) -> bool {
        self.store.resources().iter().any(|res| {
            self.store
                .list(res, None)
                .iter()
                .any(|(_, o)| meta_str(o, "uid") == Some(uid))
        })
    }

    /// Advances terminating namespaces and CRDs: deletes their content, then drops their
    /// finalizers once nothing remains.
    pub fn reconcile(&mut self) {
        for _ in 0..8 {
            let mut changed = false;
            let ns_res: ResKey = (String::new(), "namespaces".into());
            let terminating: Vec<String> = self
                .store
                .list(&ns_res, None)
                .into_iter()
                .filter(|(_, o)| meta(o).get("deletionTimestamp").is_some())
                .map(|(k, _)| k.1)
                .collect();
            for ns in terminating {
                changed |= self.finalize_namespace(&ns);
            }
            let crd_res: ResKey = (
                "apiextensions.k8s.io".into(),
                "customresourcedefinitions".into(),
            );
            let crds: Vec<Arc<Value>> = self
                .store
                .list(&crd_res, None)
                .into_iter()
                .filter(|(_, o)| {
                    meta(o).get("deletionTimestamp").is_some()
                        && finalizers(o).iter().any(|f| f == CRD_CLEANUP_FINALIZER)
                })
                .map(|(_, o)| o)
                .collect();
            for crd in crds {
                changed |= self.finalize_crd(&crd);
            }
            if !changed {
                break;
            }
        }
    }

    fn finalize_namespace(&mut self, ns: &str) -> bool {
        let mut changed = false;
        let namespaced: Vec<ResourceDef> = {
            let mut seen = std::collections::HashSet::new();
            self.defs()
                .into_iter()
                .filter(|d| d.namespaced && seen.insert(Self::res_key(d)))
                .cloned()
                .collect()
        };
        let mut remaining = 0;
        for def in &namespaced {
            for (key, obj) in self.store.list(&Self::res_key(def), Some(ns)) {
                remaining += 1;
                if meta(&obj).get("deletionTimestamp").is_none() {
                    let opts = DeleteOptions::default();
                    if let Err(e) = self.delete(def, Some(ns), &key.1, &opts) {
                        tracing::debug!(error = %e, "namespace cleanup could not delete an object");
                    }
                    changed = true;
                }
            }
        }
        if remaining > 0 && changed {
            return true;
        }
        let still: usize = namespaced
            .iter()
            .map(|d| self.store.list(&Self::res_key(d), Some(ns)).len())
            .sum();
        if still > 0 {
            return changed;
        }
        let res: ResKey = (String::new(), "namespaces".into());
        let key: ObjKey = (String::new(), ns.to_string());
        let Some(obj) = self.store.get(&res, &key) else {
            return changed;
        };
        let spec_fins = obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if spec_fins {
            let mut new = (*obj).clone();
            new["spec"]["finalizers"] = json!([]);
            self.store.put(&res, &key, new);
            changed = true;
        }
        if let Some(obj) = self.store.get(&res, &key)
            && finalizers(&obj).is_empty()
        {
            self.store.remove(&res, &key);
            changed = true;
        }
        changed
    }

    fn finalize_crd(&mut self, crd: &Value) -> bool {
        let name = meta_str(crd, "name").unwrap_or("").to_string();
        let mut changed = false;
        let defs = self.crds.get(&name).cloned().unwrap_or_default();
        if let Some(def) = defs.first() {
            let res = Self::res_key(def);
            let objects = self.store.list(&res, None);
            if !objects.is_empty() {
                for (key, obj) in objects {
                    if meta(&obj).get("deletionTimestamp").is_none() {
                        let ns = (!key.0.is_empty()).then_some(key.0.clone());
                        if let Err(e) =
                            self.delete(def, ns.as_deref(), &key.1, &DeleteOptions::default())
                        {
                            tracing::debug!(error = %e, "CRD cleanup could not delete an object");
                        }
                        changed = true;
                    }
                }
                if self.store.count(&res) > 0 {
                    return changed;
                }
            }
        }
        // Nothing left: drop our finalizer; the object goes when no finalizers remain.
        let res: ResKey = (
            "apiextensions.k8s.io".into(),
            "customresourcedefinitions".into(),
        );
        let key: ObjKey = (String::new(), name.clone());
        let mut new = crd.clone();
        if let Some(fins) = meta_mut(&mut new)
            .get_mut("finalizers")
            .and_then(Value::as_array_mut)
        {
            fins.retain(|f| f != CRD_CLEANUP_FINALIZER);
        }
        if finalizers(&new).is_empty() {
            self.store.remove(&res, &key);
            self.unregister_crd(&name);
        } else {
            self.store.put(&res, &key, new);
        }
        true
    }

    /// DELETE on a collection: deletes every matching object; returns them as a list.
    pub fn delete_collection(
        &mut self,
        def: &ResourceDef,
        namespace: Option<&str>,
        matching: &dyn Fn(&Value) -> bool,
        opts: &DeleteOptions,
    ) -> ApiResult<Value> {
        let res = Self::res_key(def);
        let ns = if def.namespaced { namespace } else { None };
        let targets: Vec<(ObjKey, Arc<Value>)> = self
            .store
            .list(&res, ns)
            .into_iter()
            .filter(|(_, o)| matching(o))
            .collect();
        let mut items = Vec::new();
        for (key, obj) in targets {
            let ns = (!key.0.is_empty()).then_some(key.0.as_str());
            match self.delete(def, ns, &key.1, opts) {
                Ok(w) if w.body.get("kind") == Some(&json!("Status")) => {
                    items.push(Self::present(def, &obj))
                }
                Ok(w) => items.push(w.body),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(json!({
            "kind": format!("{}List", def.kind),
            "apiVersion": def.api_version(),
            "metadata": {"resourceVersion": self.store.rv().to_string()},
            "items": items,
        }))
    }

    /// Marks a CRD NamesAccepted and Established and starts serving its resources.
    pub fn establish_crd(&mut self, name: &str) {
        let res: ResKey = (
            "apiextensions.k8s.io".into(),
            "customresourcedefinitions".into(),
        );
        let key: ObjKey = (String::new(), name.to_string());
        let Some(crd) = self.store.get(&res, &key) else {
            return;
        };
        if meta(&crd).get("deletionTimestamp").is_some() {
            return;
        }
        let mut new = (*crd).clone();
        let names = new.pointer("/spec/names").cloned().unwrap_or(json!({}));
        let mut accepted = names.clone();
        if let Some(kind) = names.get("kind").and_then(Value::as_str) {
            if accepted.get("singular").is_none() {
                accepted["singular"] = json!(kind.to_lowercase());
            }
            if accepted.get("listKind").is_none() {
                accepted["listKind"] = json!(format!("{kind}List"));
            }
        }
        let t = now();
        new["status"]["acceptedNames"] = accepted;
        new["status"]["conditions"] = json!([
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": t,
             "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": t,
             "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
        ]);
        let stored = self.store.put(&res, &key, new);
        self.register_crd(&stored);
    }

    fn register_crd(&mut self, crd: &Value) {
        let name = meta_str(crd, "name").unwrap_or("").to_string();
        match catalog::from_crd(crd) {
            Ok(defs) => {
                self.crds.insert(name, defs);
                self.catalog_generation += 1;
            }
            Err(e) => tracing::warn!(crd = %name, error = %e, "cannot serve a CRD"),
        }
    }

    fn unregister_crd(&mut self, name: &str) {
        if self.crds.remove(name).is_some() {
            self.catalog_generation += 1;
        }
    }
}

fn check_apply_manager(def: &ResourceDef, name: &str, opts: &WriteOptions) -> ApiResult<()> {
    if opts.field_manager.as_deref().is_none_or(str::is_empty) {
        return Err(ApiError::invalid(
            &def.group,
            &def.kind,
            name,
            vec![cause(
                "FieldValueRequired",
                "fieldManager",
                "Required value: is required for apply patch",
            )],
        ));
    }
    Ok(())
}

fn parse_apply_body(body: &[u8]) -> ApiResult<Value> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("the apply patch is not UTF-8 text"))?;
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

/// Validates an Event (stored in the core/v1 shape) as the API server does for the view it
/// was written through.
fn validate_event(ev: &Value, events_v1: bool) -> ApiResult<()> {
    let name = meta_str(ev, "name").unwrap_or("").to_string();
    let s = |f: &str| ev.get(f).and_then(Value::as_str).unwrap_or("");
    let (f_component, f_note, f_regarding) = if events_v1 {
        ("reportingController", "note", "regarding")
    } else {
        ("reportingComponent", "message", "involvedObject")
    };
    let mut causes = Vec::new();
    let has_time = ev.get("eventTime").is_some_and(|t| !t.is_null());
    if events_v1 && !has_time {
        causes.push(cause("FieldValueRequired", "eventTime", "Required value"));
    }
    if has_time {
        if s("reportingComponent").is_empty() {
            causes.push(cause("FieldValueRequired", f_component, "Required value"));
        }
        for (field, limit) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
            let v = s(field);
            if v.is_empty() {
                causes.push(cause("FieldValueRequired", field, "Required value"));
            } else if v.len() > limit {
                causes.push(cause(
                    "FieldValueInvalid",
                    field,
                    format!("Invalid value: \"\": can have at most {limit} characters"),
                ));
            }
        }
        if s("message").len() > 1024 {
            causes.push(cause(
                "FieldValueInvalid",
                f_note,
                "Invalid value: \"\": can have at most 1024 characters",
            ));
        }
    } else {
        let ns = meta_str(ev, "namespace").unwrap_or("");
        let involved = ev
            .pointer("/involvedObject/namespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let ok = if involved.is_empty() {
            ns.is_empty() || ns == "default"
        } else {
            ns == involved
        };
        if !ok {
            causes.push(cause(
                "FieldValueInvalid",
                &format!("{f_regarding}.namespace"),
                format!("Invalid value: \"{involved}\": does not match event.namespace"),
            ));
        }
    }
    if events_v1 {
        let t = s("type");
        if t != "Normal" && t != "Warning" {
            causes.push(cause(
                "FieldValueInvalid",
                "type",
                format!("Invalid value: \"{t}\": has invalid value: {t}"),
            ));
        }
        if ev
            .get("source")
            .is_some_and(|v| v.as_object().is_some_and(|m| !m.is_empty()))
        {
            causes.push(cause(
                "FieldValueInvalid",
                "deprecatedSource",
                "Invalid value: \"object\": deprecatedSource is deprecated, do not use it",
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        let group = if events_v1 { "events.k8s.io" } else { "" };
        Err(ApiError::invalid(group, "Event", &name, causes))
    }
}

/// Validates a CustomResourceDefinition body.
fn validate_crd(crd: &Value) -> ApiResult<()> {
    let name = meta_str(crd, "name").unwrap_or("").to_string();
    let mut causes = Vec::new();
    let group = crd
        .pointer("/spec/group")
        .and_then(Value::as_str)
        .unwrap_or("");
    let plural = crd
        .pointer("/spec/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = crd
        .pointer("/spec/names/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    if group.is_empty() {
        causes.push(cause("FieldValueRequired", "spec.group", "Required value"));
    } else if !is_valid_dns_subdomain(group) || !group.contains('.') {
        causes.push(cause(
            "FieldValueInvalid",
            "spec.group",
            format!("Invalid value: \"{group}\": should be a domain with at least one dot"),
        ));
    }
    if plural.is_empty() {
        causes.push(cause(
            "FieldValueRequired",
            "spec.names.plural",
            "Required value",
        ));
    } else if !is_valid_dns_label(plural) {
        causes.push(cause(
            "FieldValueInvalid",
            "spec.names.plural",
            format!("Invalid value: \"{plural}\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"),
        ));
    }
    if kind.is_empty() {
        causes.push(cause(
            "FieldValueRequired",
            "spec.names.kind",
            "Required value",
        ));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(cause(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    match crd.pointer("/spec/scope").and_then(Value::as_str) {
        Some("Namespaced") | Some("Cluster") => {}
        Some(other) => causes.push(cause(
            "FieldValueNotSupported",
            "spec.scope",
            format!(
                "Unsupported value: \"{other}\": supported values: \"Cluster\", \"Namespaced\""
            ),
        )),
        None => causes.push(cause("FieldValueRequired", "spec.scope", "Required value")),
    }
    match crd.pointer("/spec/versions").and_then(Value::as_array) {
        Some(versions) if !versions.is_empty() => {
            let storage = versions
                .iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .count();
            if storage != 1 {
                causes.push(cause(
                    "FieldValueInvalid",
                    "spec.versions",
                    format!("Invalid value: {}: must have exactly one version marked as storage version", storage),
                ));
            }
            for (i, v) in versions.iter().enumerate() {
                if v.pointer("/schema/openAPIV3Schema").is_none() {
                    causes.push(cause(
                        "FieldValueRequired",
                        &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                        "Required value: schemas are required",
                    ));
                }
            }
        }
        _ => causes.push(cause(
            "FieldValueInvalid",
            "spec.versions",
            "Invalid value: null: must have exactly one version marked as storage version",
        )),
    }
    causes.extend(validate_crd_conversion(crd));
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            &name,
            causes,
        ))
    }
}

/// The grace period of a Pod deletion: 0 for unscheduled and finished Pods (deleted at
/// once), else the requested period, `spec.terminationGracePeriodSeconds`, or 30;
/// negative values become 1.
fn pod_grace_period(pod: &Value, requested: Option<i64>) -> i64 {
    let scheduled = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !scheduled || finished {
        return 0;
    }
    let grace = requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30);
    if grace < 0 { 1 } else { grace }
}

impl State {
    /// The simulated kubelet: removes a terminating Pod whose grace period is over, unless
    /// finalizers still hold it.
    pub fn reap(&mut self, res: &ResKey, key: &ObjKey) {
        let Some(obj) = self.store.get(res, key) else {
            return;
        };
        if meta(&obj).get("deletionTimestamp").is_none() || !finalizers(&obj).is_empty() {
            return;
        }
        self.store.remove(res, key);
        self.reconcile();
    }
}

/// Reads `metadata.resourceVersion` of a stored object.
pub fn rv_of(obj: &Value) -> u64 {
    object_rv(obj).unwrap_or(0)
}

/// Validates `spec.conversion` of a CRD.
pub(crate) fn validate_crd_conversion(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(conversion) = crd.pointer("/spec/conversion").filter(|c| !c.is_null()) else {
        return causes;
    };
    let strategy = conversion
        .get("strategy")
        .and_then(Value::as_str)
        .unwrap_or("");
    let webhook = conversion.get("webhook").filter(|w| !w.is_null());
    match strategy {
        "None" => {
            if webhook.is_some() {
                causes.push(cause(
                    "FieldValueForbidden",
                    "spec.conversion.webhook",
                    "Forbidden: should not be set when strategy is not set to Webhook",
                ));
            }
        }
        "Webhook" => match webhook {
            None => causes.push(cause(
                "FieldValueRequired",
                "spec.conversion.webhook",
                "Required value: required when strategy is set to Webhook",
            )),
            Some(w) => {
                match w.get("clientConfig").filter(|c| !c.is_null()) {
                    None => causes.push(cause(
                        "FieldValueRequired",
                        "spec.conversion.webhook.clientConfig",
                        "Required value: required when strategy is set to Webhook",
                    )),
                    Some(cc) => causes.extend(webhook_configs::validate_client_config(
                        cc,
                        "spec.conversion.webhook.clientConfig",
                    )),
                }
                let versions: Vec<&str> = w
                    .get("conversionReviewVersions")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if versions.is_empty() {
                    causes.push(cause(
                        "FieldValueRequired",
                        "spec.conversion.webhook.conversionReviewVersions",
                        "Required value: must include at least one of v1, v1beta1",
                    ));
                } else if !versions.iter().any(|v| *v == "v1" || *v == "v1beta1") {
                    causes.push(cause(
                        "FieldValueInvalid",
                        "spec.conversion.webhook.conversionReviewVersions",
                        format!(
                            "Invalid value: []string{{{}}}: must include at least one of v1, v1beta1",
                            versions
                                .iter()
                                .map(|v| format!("{v:?}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            }
        },
        "" => causes.push(cause(
            "FieldValueRequired",
            "spec.conversion.strategy",
            "Required value",
        )),
        other => causes.push(cause(
            "FieldValueNotSupported",
            "spec.conversion.strategy",
            format!("Unsupported value: \"{other}\": supported values: \"None\", \"Webhook\""),
        )),
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_strategies() {
        let crd = |c: Value| json!({"spec": {"conversion": c}});
        assert!(validate_crd_conversion(&crd(json!({"strategy": "None"}))).is_empty());
        assert_eq!(
            validate_crd_conversion(&crd(json!({"strategy": "Webhook"})))[0].field,
            "spec.conversion.webhook"
        );
        assert_eq!(
            validate_crd_conversion(&crd(json!({"strategy": "Bogus"})))[0].reason,
            "FieldValueNotSupported"
        );
        let ok = crd(json!({"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": "https://127.0.0.1:1/convert"}, "conversionReviewVersions": ["v1"]}}));
        assert!(validate_crd_conversion(&ok).is_empty());
    }
}
