//! `uninstall`: takes the operator's own state off every object it handles, so that the
//! operator can go without leaving objects stuck: its finalizer (a deleted namespace or CRD
//! would wait for it forever), its annotations (progress records, the diff-base, the touch
//! annotation) and its status storage (`status.kopf`, or the name the persistence settings
//! give). Other finalizers, annotations and status fields are left alone, and so is the
//! pause annotation (the user's).
//!
//! `--dry-run` reads and reports, and writes nothing. Each object is written with one merge
//! PATCH of its metadata, guarded by its resourceVersion (a concurrent change is read again,
//! up to 5 times), and one of its status when the status has to change.

use std::collections::BTreeSet;

use kopf_core::handler::HandlerKind;
use kopf_core::progress::ProgressLocation;
use kopf_diff::essence::DiffBaseLocation;
use kopf_watch::Discovered;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Map, Value, json};

use crate::cli::UninstallArgs;
use crate::error::Error;
use crate::operator::Operator;

/// Times a write is tried again after a concurrent change of the object.
const CONFLICT_RETRIES: usize = 5;

/// What was (or would be) taken off one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleaned {
    /// `plural.group` of the resource (`plural` for the core group).
    pub resource: String,
    /// The object's namespace (None: cluster-scoped).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The operator's finalizer was on it.
    pub finalizer: bool,
    /// The operator's annotations on it.
    pub annotations: Vec<String>,
    /// The status fields of the operator's storage on it (`status.kopf`...).
    pub status: Vec<String>,
}

/// What `uninstall` did, or would do with `--dry-run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UninstallReport {
    /// Nothing was written.
    pub dry_run: bool,
    /// The resources looked at.
    pub resources: Vec<String>,
    /// The objects that had the operator's state, with what it was.
    pub cleaned: Vec<Cleaned>,
    /// Objects looked at in all.
    pub objects: usize,
    /// Objects whose state could not be taken off, and why (the others were cleaned).
    pub failed: Vec<(Cleaned, String)>,
}

/// What of an object is the operator's own, from its persistence settings.
struct Ours {
    finalizer: String,
    prefixes: Vec<String>,
    status_names: BTreeSet<String>,
    paused_annotation: Option<String>,
}

impl Ours {
    fn of(operator: &Operator) -> Self {
        let p = &operator.persistence;
        let mut status_names = BTreeSet::from([kopf_diff::essence::STATUS_NAME.to_string()]);
        if let DiffBaseLocation::Status { name } = &p.essence.location {
            status_names.insert(name.clone());
        }
        if let ProgressLocation::Status { name } = &p.progress.location {
            status_names.insert(name.clone());
        }
        Ours {
            finalizer: p.finalizer.clone(),
            prefixes: vec![
                format!("{}/", p.essence.prefix),
                format!("{}/", p.progress.keys.prefix),
            ],
            status_names,
            paused_annotation: operator.settings.paused_annotation.clone(),
        }
    }

    /// What of `body` is ours (None: nothing).
    fn found(&self, resource: &str, body: &Value) -> Option<Cleaned> {
        let text = |path: &str| body.pointer(path).and_then(Value::as_str);
        let finalizer = body
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|v| v.as_str() == Some(&self.finalizer)));
        let annotations: Vec<String> = body
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(Map::keys)
            .filter(|k| self.prefixes.iter().any(|p| k.starts_with(p.as_str())))
            .filter(|k| self.paused_annotation.as_deref() != Some(k.as_str()))
            .cloned()
            .collect();
        let status: Vec<String> = self
            .status_names
            .iter()
            .filter(|n| body.get("status").and_then(|s| s.get(n.as_str())).is_some())
            .map(|n| format!("status.{n}"))
            .collect();
        (finalizer || !annotations.is_empty() || !status.is_empty()).then(|| Cleaned {
            resource: resource.to_string(),
            namespace: text("/metadata/namespace").map(str::to_string),
            name: text("/metadata/name").unwrap_or_default().to_string(),
            finalizer,
            annotations,
            status,
        })
    }

    /// The metadata patch that takes `found` off `body`, guarded by its resourceVersion.
    fn metadata_patch(&self, body: &Value, found: &Cleaned) -> Option<Value> {
        if !found.finalizer && found.annotations.is_empty() {
            return None;
        }
        let mut meta = Map::new();
        meta.insert(
            "resourceVersion".into(),
            body.pointer("/metadata/resourceVersion")
                .cloned()
                .unwrap_or(Value::Null),
        );
        if found.finalizer {
            let rest: Vec<Value> = body
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|v| v.as_str() != Some(&self.finalizer))
                .cloned()
                .collect();
            meta.insert("finalizers".into(), Value::Array(rest));
        }
        if !found.annotations.is_empty() {
            let nulls: Map<String, Value> = found
                .annotations
                .iter()
                .map(|k| (k.clone(), Value::Null))
                .collect();
            meta.insert("annotations".into(), Value::Object(nulls));
        }
        Some(json!({"metadata": meta}))
    }

    /// The status patch that takes `found`'s status fields off.
    fn status_patch(found: &Cleaned) -> Option<Value> {
        let fields: Map<String, Value> = found
            .status
            .iter()
            .filter_map(|f| f.strip_prefix("status."))
            .map(|n| (n.to_string(), Value::Null))
            .collect();
        (!fields.is_empty()).then(|| json!({"status": fields}))
    }
}

impl Operator {
    /// Takes the operator's own state off every object of the resources it handles (see
    /// the [module](crate::uninstall)), in the namespaces `args` names; with
    /// `args.dry_run`, only says what it would take off.
    pub async fn uninstall(
        &self,
        client: &kube::Client,
        args: &UninstallArgs,
    ) -> Result<UninstallReport, Error> {
        let all = kopf_watch::discover(client).await?;
        let resources = self.stateful_resources(&all)?;
        let ours = Ours::of(self);
        let mut report = UninstallReport {
            dry_run: args.dry_run,
            resources: resources.iter().map(resource_name).collect(),
            cleaned: Vec::new(),
            objects: 0,
            failed: Vec::new(),
        };
        for resource in &resources {
            for api in apis(client, resource, args) {
                clean_all(&api, resource, &ours, args.dry_run, &mut report).await?;
            }
        }
        Ok(report)
    }

    /// The served resources whose handlers keep state on objects (every registered one
    /// but those with only raw-event and index handlers).
    fn stateful_resources(&self, all: &[Discovered]) -> Result<Vec<Discovered>, Error> {
        let mut found: Vec<Discovered> = Vec::new();
        for (selector, spec) in &self.registrations {
            if matches!(spec.kind, HandlerKind::Event | HandlerKind::Index(_)) {
                continue;
            }
            for d in selector.resolve(all)? {
                if !found.iter().any(|f| f.api_resource == d.api_resource) {
                    found.push(d);
                }
            }
        }
        Ok(found)
    }

    /// `uninstall` as a command: connects, cleans (or not), prints the table.
    pub(crate) async fn print_uninstall(&self, args: UninstallArgs) -> Result<(), Error> {
        use std::io::Write;
        let client = self.connect().await?;
        let report = self.uninstall(&client, &args).await?;
        std::io::stdout()
            .write_all(report.to_string().as_bytes())
            .map_err(Error::Output)?;
        match report.failed.len() {
            0 => Ok(()),
            failed => Err(Error::Uninstall { failed }),
        }
    }
}

/// The APIs to list `resource` through: every namespace, or each one named.
fn apis(
    client: &kube::Client,
    resource: &Discovered,
    args: &UninstallArgs,
) -> Vec<Api<DynamicObject>> {
    let ar = &resource.api_resource;
    if !resource.namespaced || args.all_namespaces || args.namespaces.is_empty() {
        return vec![Api::all_with(client.clone(), ar)];
    }
    args.namespaces
        .iter()
        .map(|ns| Api::namespaced_with(client.clone(), ns, ar))
        .collect()
}

/// Every object of one API, page by page.
async fn clean_all(
    api: &Api<DynamicObject>,
    resource: &Discovered,
    ours: &Ours,
    dry_run: bool,
    report: &mut UninstallReport,
) -> Result<(), Error> {
    let name = resource_name(resource);
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await.map_err(Error::Client)?;
        for object in &page.items {
            report.objects += 1;
            let body = serde_json::to_value(object).unwrap_or_default();
            let Some(found) = ours.found(&name, &body) else {
                continue;
            };
            if dry_run {
                report.cleaned.push(found);
                continue;
            }
            match clean_one(api, resource, ours, body, found.clone()).await {
                Ok(cleaned) => report.cleaned.push(cleaned),
                Err(e) => report.failed.push((found, e.to_string())),
            }
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(()),
        }
    }
}

/// Takes `found` off one object: its metadata (guarded: read again after a conflict), then
/// its status. What was taken off.
async fn clean_one(
    api: &Api<DynamicObject>,
    resource: &Discovered,
    ours: &Ours,
    mut body: Value,
    mut found: Cleaned,
) -> Result<Cleaned, Error> {
    let namespaced = match &found.namespace {
        Some(ns) if resource.namespaced => {
            Api::namespaced_with(api.clone().into_client(), ns, &resource.api_resource)
        }
        _ => api.clone(),
    };
    let params = PatchParams::default();
    for attempt in 0.. {
        let Some(patch) = ours.metadata_patch(&body, &found) else {
            break;
        };
        match namespaced
            .patch(&found.name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < CONFLICT_RETRIES => {
                let fresh = namespaced.get(&found.name).await.map_err(Error::Client)?;
                body = serde_json::to_value(fresh).unwrap_or_default();
                match ours.found(&found.resource, &body) {
                    Some(again) => found = again,
                    None => return Ok(found),
                }
            }
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(found),
            Err(e) => return Err(Error::Client(e)),
        }
    }
    if let Some(patch) = Ours::status_patch(&found) {
        let result = if resource.status_subresource {
            namespaced
                .patch_status(&found.name, &params, &Patch::Merge(&patch))
                .await
        } else {
            namespaced
                .patch(&found.name, &params, &Patch::Merge(&patch))
                .await
        };
        match result {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(Error::Client(e)),
        }
    }
    Ok(found)
}

fn resource_name(resource: &Discovered) -> String {
    let ar = &resource.api_resource;
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

impl std::fmt::Display for UninstallReport {
    /// A table of the objects and what was taken off them, and a summary line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header = [
            "RESOURCE",
            "NAMESPACE",
            "NAME",
            "FINALIZER",
            "ANNOTATIONS",
            "STATUS",
        ];
        let rows: Vec<[String; 6]> = self
            .cleaned
            .iter()
            .map(|c| {
                [
                    c.resource.clone(),
                    c.namespace.clone().unwrap_or_else(|| "-".into()),
                    c.name.clone(),
                    if c.finalizer { "removed" } else { "-" }.into(),
                    match c.annotations.len() {
                        0 => "-".into(),
                        n => n.to_string(),
                    },
                    if c.status.is_empty() {
                        "-".into()
                    } else {
                        c.status.join(",")
                    },
                ]
            })
            .collect();
        if !rows.is_empty() {
            let widths: Vec<usize> = (0..6)
                .map(|i| {
                    rows.iter()
                        .map(|r| r[i].len())
                        .chain([header[i].len()])
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let line = |cells: Vec<&str>| {
                let padded: Vec<String> = cells
                    .iter()
                    .zip(&widths)
                    .map(|(c, w)| format!("{c:<w$}"))
                    .collect();
                padded.join("  ").trim_end().to_string()
            };
            writeln!(f, "{}", line(header.to_vec()))?;
            for r in &rows {
                writeln!(f, "{}", line(r.iter().map(String::as_str).collect()))?;
            }
        }
        for (c, why) in &self.failed {
            let ns = c
                .namespace
                .as_deref()
                .map_or(String::new(), |n| format!("{n}/"));
            writeln!(f, "FAILED {} {ns}{}: {why}", c.resource, c.name)?;
        }
        let verb = if self.dry_run {
            "would be cleaned (dry run: nothing was changed)"
        } else {
            "cleaned"
        };
        writeln!(
            f,
            "{} of {} objects of {} {verb}.",
            self.cleaned.len(),
            self.objects,
            match self.resources.as_slice() {
                [] => "no resource".to_string(),
                names => names.join(", "),
            }
        )
    }
}
