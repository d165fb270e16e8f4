//! `<operator> olm`: an Operator Lifecycle Manager bundle (registry+v1) from what the
//! operator knows: its ClusterServiceVersion (description, version, the deployment of its
//! image, the cluster permissions of `rbac`, the CRDs it owns with an example of each), its
//! CRDs, and the bundle's `metadata/annotations.yaml`. The bundle is checked after it is
//! written against the rules OLM's bundle validation applies (see [`validate_bundle`]).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::cli;
use crate::error::Error;
use crate::operator::Operator;

/// The CRDs in manifest files (every `CustomResourceDefinition` document).
fn crds_in_files(files: &[PathBuf]) -> Result<Vec<Value>, Error> {
    let mut crds = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| Error::Config(format!("cannot read {}: {e}", file.display())))?;
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .map_err(|e| Error::Config(format!("{} is not valid YAML: {e}", file.display())))?;
        crds.extend(
            docs.into_iter().filter(|d| {
                d.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition")
            }),
        );
    }
    Ok(crds)
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The storage version of a CRD (else its first).
fn storage_version(crd: &Value) -> &str {
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    versions
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .or(vs.first())
        })
        .map(|v| str_at(v, "/name"))
        .unwrap_or_default()
}

/// A minimal object of a CRD, for the CSV's `alm-examples`.
fn example_of(crd: &Value) -> Value {
    let group = str_at(crd, "/spec/group");
    json!({
        "apiVersion": format!("{group}/{}", storage_version(crd)),
        "kind": str_at(crd, "/spec/names/kind"),
        "metadata": {"name": format!("example-{}", str_at(crd, "/spec/names/singular"))},
        "spec": {},
    })
}

/// What goes into the bundle besides the operator's own knowledge.
struct Bundle<'a> {
    package: &'a str,
    version: &'a str,
    image: &'a str,
    channel: &'a str,
    description: &'a str,
    rules: Vec<Value>,
    crds: Vec<Value>,
}

impl Bundle<'_> {
    fn csv(&self) -> Value {
        let examples: Vec<Value> = self.crds.iter().map(example_of).collect();
        let owned: Vec<Value> = self
            .crds
            .iter()
            .map(|c| {
                let kind = str_at(c, "/spec/names/kind");
                json!({
                    "name": str_at(c, "/metadata/name"),
                    "version": storage_version(c),
                    "kind": kind,
                    "displayName": kind,
                    "description": format!("{kind}, handled by {}", self.package),
                })
            })
            .collect();
        let labels = json!({"app.kubernetes.io/name": self.package});
        let deployment = json!({
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": self.package,
                    "terminationGracePeriodSeconds": 30,
                    "containers": [{
                        "name": "operator",
                        "image": self.image,
                        "args": ["run", "--all-namespaces", "--standalone",
                                 "--liveness", "http://0.0.0.0:8080/healthz"],
                        "ports": [{"name": "health", "containerPort": 8080}],
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "health"}},
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "runAsNonRoot": true,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }],
                },
            },
        });
        json!({
            "apiVersion": "operators.coreos.com/v1alpha1",
            "kind": "ClusterServiceVersion",
            "metadata": {
                "name": format!("{}.v{}", self.package, self.version),
                "annotations": {
                    "alm-examples": serde_json::to_string(&examples).unwrap_or_else(|_| "[]".into()),
                    "capabilities": "Basic Install",
                    "containerImage": self.image,
                    "operators.operatorframework.io/builder": "kopf-rs",
                },
            },
            "spec": {
                "displayName": self.package,
                "description": self.description,
                "version": self.version,
                "maturity": self.channel,
                "minKubeVersion": "1.27.0",
                "provider": {"name": self.package},
                "keywords": ["kopf-rs"],
                "installModes": [
                    {"type": "OwnNamespace", "supported": false},
                    {"type": "SingleNamespace", "supported": false},
                    {"type": "MultiNamespace", "supported": false},
                    {"type": "AllNamespaces", "supported": true},
                ],
                "install": {
                    "strategy": "deployment",
                    "spec": {
                        "clusterPermissions": [{"serviceAccountName": self.package, "rules": self.rules}],
                        "deployments": [{"name": self.package, "label": labels, "spec": deployment}],
                    },
                },
                "customresourcedefinitions": {"owned": owned},
            },
        })
    }

    fn annotations(&self) -> Value {
        json!({"annotations": {
            "operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
            "operators.operatorframework.io.bundle.manifests.v1": "manifests/",
            "operators.operatorframework.io.bundle.metadata.v1": "metadata/",
            "operators.operatorframework.io.bundle.package.v1": self.package,
            "operators.operatorframework.io.bundle.channels.v1": self.channel,
            "operators.operatorframework.io.bundle.channel.default.v1": self.channel,
        }})
    }

    fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, Error> {
        let write = |path: PathBuf, doc: &Value| -> Result<PathBuf, Error> {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(Error::Output)?;
            }
            let text = serde_saphyr::to_string(doc)
                .map_err(|e| Error::Config(format!("cannot write {}: {e}", path.display())))?;
            std::fs::write(&path, text).map_err(Error::Output)?;
            Ok(path)
        };
        let manifests = dir.join("manifests");
        let mut written = vec![write(
            manifests.join(format!("{}.clusterserviceversion.yaml", self.package)),
            &self.csv(),
        )?];
        for crd in &self.crds {
            let file = format!(
                "{}_{}.yaml",
                str_at(crd, "/spec/group"),
                str_at(crd, "/spec/names/plural")
            );
            written.push(write(manifests.join(file), crd)?);
        }
        written.push(write(
            dir.join("metadata").join("annotations.yaml"),
            &self.annotations(),
        )?);
        Ok(written)
    }
}

/// The problems OLM's bundle validation would find in a bundle directory (empty: none):
/// the annotations (media type, directories, package, channels), the CSV's name
/// (`<package>.v<version>`), its SemVer version, its required fields (display name,
/// description, provider, install modes with one supported, a deployment install strategy
/// whose service accounts have permissions), `alm-examples` (JSON, of owned kinds), and
/// each owned CRD present in `manifests/` with the same name, a served version and kind.
pub fn validate_bundle(dir: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let read = |path: PathBuf| -> Option<Value> {
        let text = std::fs::read_to_string(&path).ok()?;
        serde_saphyr::from_str::<Value>(&text).ok()
    };
    let Some(annotations) = read(dir.join("metadata/annotations.yaml")) else {
        return vec!["metadata/annotations.yaml is missing or not YAML".into()];
    };
    let a = |key: &str| {
        str_at(
            &annotations,
            &format!("/annotations/{}", key.replace('/', "~1")),
        )
        .to_string()
    };
    for (key, want) in [
        (
            "operators.operatorframework.io.bundle.mediatype.v1",
            Some("registry+v1"),
        ),
        (
            "operators.operatorframework.io.bundle.manifests.v1",
            Some("manifests/"),
        ),
        (
            "operators.operatorframework.io.bundle.metadata.v1",
            Some("metadata/"),
        ),
        ("operators.operatorframework.io.bundle.package.v1", None),
        ("operators.operatorframework.io.bundle.channels.v1", None),
    ] {
        let got = a(key);
        match want {
            Some(w) if got != w => problems.push(format!("annotation {key} is {got:?}, not {w:?}")),
            None if got.is_empty() => problems.push(format!("annotation {key} is missing")),
            _ => {}
        }
    }
    let default = a("operators.operatorframework.io.bundle.channel.default.v1");
    let channels = a("operators.operatorframework.io.bundle.channels.v1");
    if !default.is_empty() && !channels.split(',').any(|c| c == default) {
        problems.push(format!(
            "the default channel {default:?} is not among the channels {channels:?}"
        ));
    }
    let package = a("operators.operatorframework.io.bundle.package.v1");
    let docs: Vec<Value> = std::fs::read_dir(dir.join("manifests"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| read(e.path()))
                .collect()
        })
        .unwrap_or_default();
    let kind_of = |d: &Value| str_at(d, "/kind").to_string();
    let csvs: Vec<&Value> = docs
        .iter()
        .filter(|d| kind_of(d) == "ClusterServiceVersion")
        .collect();
    let [csv] = csvs.as_slice() else {
        problems.push(format!(
            "manifests/ has {} ClusterServiceVersions, not 1",
            csvs.len()
        ));
        return problems;
    };
    let version = str_at(csv, "/spec/version");
    if semver::Version::parse(version).is_err() {
        problems.push(format!("spec.version {version:?} is not a SemVer version"));
    }
    let name = str_at(csv, "/metadata/name");
    if name != format!("{package}.v{version}") {
        problems.push(format!(
            "metadata.name {name:?} is not <package>.v<version> ({package}.v{version})"
        ));
    }
    for field in [
        "/spec/displayName",
        "/spec/description",
        "/spec/provider/name",
    ] {
        if str_at(csv, field).is_empty() {
            problems.push(format!("{field} is missing"));
        }
    }
    let modes = csv.pointer("/spec/installModes").and_then(Value::as_array);
    if !modes.is_some_and(|m| {
        m.iter()
            .any(|m| m.get("supported").and_then(Value::as_bool) == Some(true))
    }) {
        problems.push("spec.installModes supports no install mode".into());
    }
    if str_at(csv, "/spec/install/strategy") != "deployment" {
        problems.push("spec.install.strategy is not \"deployment\"".into());
    }
    let accounts: Vec<&str> = ["clusterPermissions", "permissions"]
        .iter()
        .filter_map(|k| {
            csv.pointer(&format!("/spec/install/spec/{k}"))
                .and_then(Value::as_array)
        })
        .flatten()
        .map(|p| str_at(p, "/serviceAccountName"))
        .collect();
    let deployments = csv
        .pointer("/spec/install/spec/deployments")
        .and_then(Value::as_array);
    match deployments {
        Some(ds) if !ds.is_empty() => {
            for d in ds {
                let account = str_at(d, "/spec/template/spec/serviceAccountName");
                if str_at(d, "/name").is_empty() {
                    problems.push("a deployment has no name".into());
                }
                if !account.is_empty() && !accounts.contains(&account) {
                    problems.push(format!(
                        "the service account {account:?} has no permissions"
                    ));
                }
            }
        }
        _ => problems.push("spec.install.spec.deployments is empty".into()),
    }
    let owned = csv
        .pointer("/spec/customresourcedefinitions/owned")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for o in &owned {
        let (name, version, kind) = (
            str_at(o, "/name"),
            str_at(o, "/version"),
            str_at(o, "/kind"),
        );
        let crd = docs.iter().find(|d| {
            kind_of(d) == "CustomResourceDefinition" && str_at(d, "/metadata/name") == name
        });
        match crd {
            None => problems.push(format!("the owned CRD {name} is not in manifests/")),
            Some(crd) => {
                let served = crd
                    .pointer("/spec/versions")
                    .and_then(Value::as_array)
                    .is_some_and(|vs| {
                        vs.iter().any(|v| {
                            str_at(v, "/name") == version
                                && v.get("served").and_then(Value::as_bool) != Some(false)
                        })
                    });
                if !served {
                    problems.push(format!(
                        "the owned CRD {name} serves no version {version:?}"
                    ));
                }
                if str_at(crd, "/spec/names/kind") != kind {
                    problems.push(format!("the owned CRD {name} is not of kind {kind:?}"));
                }
            }
        }
    }
    let examples = str_at(csv, "/metadata/annotations/alm-examples");
    match serde_json::from_str::<Vec<Value>>(if examples.is_empty() { "[]" } else { examples }) {
        Err(e) => problems.push(format!("alm-examples is not a JSON list: {e}")),
        Ok(list) => {
            for ex in list {
                let kind = str_at(&ex, "/kind");
                if !owned.iter().any(|o| str_at(o, "/kind") == kind) {
                    problems.push(format!("alm-examples has a {kind:?}, not an owned kind"));
                }
            }
        }
    }
    problems
}

impl Operator {
    /// `olm`: writes the bundle (see [the module](self)) and checks it.
    pub(crate) async fn write_olm_bundle(&self, args: &cli::OlmArgs) -> Result<(), Error> {
        let about = self.about_or_default();
        let package = args.package.clone().unwrap_or_else(|| about.name.clone());
        let version = args
            .bundle_version
            .clone()
            .or(about.version.clone())
            .ok_or_else(|| Error::Config("the bundle needs a version: --bundle-version X.Y.Z (or the operator's `about` version)".into()))?;
        let rbac = cli::RbacArgs::for_bundle(&package, &args.apply, args.cluster);
        let (rules, _) = self.needed_rules(&rbac, None).await?;
        let files = if args.apply.is_empty() {
            &self.fake_manifests
        } else {
            &args.apply
        };
        let mut crds = self.crds.clone();
        for crd in crds_in_files(files)? {
            if !crds
                .iter()
                .any(|c| c.pointer("/metadata/name") == crd.pointer("/metadata/name"))
            {
                crds.push(crd);
            }
        }
        let description = about
            .description
            .clone()
            .unwrap_or_else(|| format!("{package}: a Kubernetes operator built with kopf-rs."));
        let bundle = Bundle {
            package: &package,
            version: &version,
            image: &args.image,
            channel: &args.channel,
            description: &description,
            rules,
            crds,
        };
        let written = bundle.write(&args.dir)?;
        let problems = validate_bundle(&args.dir);
        if !problems.is_empty() {
            return Err(Error::Config(format!(
                "the bundle in {} would not pass OLM's validation: {}",
                args.dir.display(),
                problems.join("; ")
            )));
        }
        use std::io::Write;
        let list: String = written
            .iter()
            .map(|p| format!("{}\n", p.display()))
            .collect();
        std::io::stdout()
            .write_all(list.as_bytes())
            .map_err(Error::Output)
    }
}
