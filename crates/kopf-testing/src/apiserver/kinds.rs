//! The built-in kinds as data: one row per resource with the storage properties
//! kube-apiserver's registry gives it (scope, names, `/status` and `/scale`, whether
//! `metadata.generation` is kept, whether DELETE answers with the deleted object, the
//! field labels of field selectors, the verbs and the other subresources it serves).
//!
//! Adding a built-in kind is adding a row to [`KINDS`]; the resource definitions
//! ([`builtins`](crate::apiserver::catalog::builtins)), discovery, OpenAPI, field
//! selectors and DELETE answers read it.

use serde_json::Value;

use crate::apiserver::selectors::field_value;

/// A field label of field selectors: its name, where its value is read and the value
/// kube's field set has when the field is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldLabel {
    /// The label (`spec.nodeName`).
    pub label: &'static str,
    /// The dotted path its value is read from, when it is not the label itself.
    pub path: Option<&'static str>,
    /// The value when the field is absent (kube's field sets always carry some labels).
    pub default: Option<&'static str>,
}

/// A field label read from the path of its name.
pub const fn field(label: &'static str) -> FieldLabel {
    FieldLabel {
        label,
        path: None,
        default: None,
    }
}

/// A field label with the value it has when the field is absent.
pub const fn field_or(label: &'static str, default: &'static str) -> FieldLabel {
    FieldLabel {
        label,
        path: None,
        default: Some(default),
    }
}

/// A subresource other than `/status` and `/scale`, as discovery lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subresource {
    /// Its name (`eviction`).
    pub name: &'static str,
    /// Its verbs.
    pub verbs: &'static [&'static str],
    /// The group of the kind it takes and answers (`""`: the resource's own).
    pub group: &'static str,
    /// The version of that kind (`""`: the resource's own).
    pub version: &'static str,
    /// The kind it takes and answers (`""`: the resource's own).
    pub kind: &'static str,
    /// The part of the object a write through it changes (empty: not an object write).
    pub writes: &'static [&'static str],
}

const fn sub(name: &'static str, verbs: &'static [&'static str]) -> Subresource {
    Subresource {
        name,
        verbs,
        group: "",
        version: "",
        kind: "",
        writes: &[],
    }
}

const fn sub_writing(
    name: &'static str,
    verbs: &'static [&'static str],
    writes: &'static [&'static str],
) -> Subresource {
    Subresource {
        name,
        verbs,
        group: "",
        version: "",
        kind: "",
        writes,
    }
}

const fn sub_of(
    name: &'static str,
    verbs: &'static [&'static str],
    group: &'static str,
    version: &'static str,
    kind: &'static str,
) -> Subresource {
    Subresource {
        name,
        verbs,
        group,
        version,
        kind,
        writes: &[],
    }
}

/// The verbs of a stored resource.
pub const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const READ_ONLY: &[&str] = &["get", "list"];
const CREATE_ONLY: &[&str] = &["create"];
const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];

/// The rule an object's name follows (kube's `ValidateXxxName` of the kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// A DNS-1123 subdomain: most kinds, and custom resources.
    Subdomain,
    /// A DNS-1123 label: Namespaces.
    Label,
    /// A DNS-1035 label: Services.
    Dns1035,
    /// Any path segment (no `/`, no `%`, not `.` or `..`): RBAC objects (`system:discovery`)
    /// and APIServices (`v1.`).
    PathSegment,
}

/// One built-in resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Served versions, preferred first.
    pub versions: &'static [&'static str],
    /// Plural (the URL segment).
    pub plural: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names.
    pub short_names: &'static [&'static str],
    /// Categories.
    pub categories: &'static [&'static str],
    /// Has `/status`.
    pub status: bool,
    /// Has `/scale` (at `.spec.replicas` and `.status.replicas`).
    pub scale: bool,
    /// Keeps `metadata.generation`.
    pub generation: bool,
    /// DELETE answers with the deleted object (`ReturnDeletedObject` in kube's registry).
    pub return_deleted_object: bool,
    /// Field labels besides `metadata.name` and `metadata.namespace`.
    pub fields: &'static [FieldLabel],
    /// The verbs of the resource itself.
    pub verbs: &'static [&'static str],
    /// Other subresources.
    pub subresources: &'static [Subresource],
    /// Objects are stored (false: computed on each request, e.g. componentstatuses,
    /// or only created for an answer, e.g. tokenreviews).
    pub stored: bool,
    /// The rule of its objects' names.
    pub names: NameRule,
}

const BASE: Kind = Kind {
    group: "",
    versions: &["v1"],
    plural: "",
    kind: "",
    namespaced: true,
    short_names: &[],
    categories: &[],
    status: false,
    scale: false,
    generation: false,
    return_deleted_object: false,
    fields: &[],
    verbs: ALL_VERBS,
    subresources: &[],
    stored: true,
    names: NameRule::Subdomain,
};

const ALL: &[&str] = &["all"];
const RBAC: &str = "rbac.authorization.k8s.io";
const ADMISSION: &str = "admissionregistration.k8s.io";
const EVENT_FIELDS: &[FieldLabel] = &[
    field("involvedObject.kind"),
    field("involvedObject.namespace"),
    field("involvedObject.name"),
    field("involvedObject.uid"),
    field("involvedObject.apiVersion"),
    field("involvedObject.resourceVersion"),
    field("involvedObject.fieldPath"),
    field("reason"),
    field("reportingComponent"),
    FieldLabel {
        label: "source",
        path: Some("source.component"),
        default: None,
    },
    field("type"),
];

/// The built-in resources, in discovery order within their group-version.
pub const KINDS: &[Kind] = &[
    Kind {
        plural: "namespaces",
        names: NameRule::Label,
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        status: true,
        fields: &[field("status.phase")],
        subresources: &[sub("finalize", &["update"])],
        ..BASE
    },
    Kind {
        plural: "configmaps",
        kind: "ConfigMap",
        short_names: &["cm"],
        ..BASE
    },
    Kind {
        plural: "secrets",
        kind: "Secret",
        fields: &[field("type")],
        ..BASE
    },
    Kind {
        plural: "serviceaccounts",
        kind: "ServiceAccount",
        short_names: &["sa"],
        return_deleted_object: true,
        subresources: &[sub_of(
            "token",
            CREATE_ONLY,
            "authentication.k8s.io",
            "v1",
            "TokenRequest",
        )],
        ..BASE
    },
    Kind {
        plural: "pods",
        kind: "Pod",
        short_names: &["po"],
        categories: ALL,
        status: true,
        return_deleted_object: true,
        fields: &[
            field("spec.nodeName"),
            field("spec.restartPolicy"),
            field("spec.schedulerName"),
            field("spec.serviceAccountName"),
            field_or("spec.hostNetwork", "false"),
            field("status.phase"),
            field("status.podIP"),
            field("status.nominatedNodeName"),
        ],
        subresources: &[
            sub_writing(
                "ephemeralcontainers",
                GET_PATCH_UPDATE,
                &["spec", "ephemeralContainers"],
            ),
            sub_of("eviction", CREATE_ONLY, "policy", "v1", "Eviction"),
            sub("log", &["get"]),
        ],
        ..BASE
    },
    Kind {
        plural: "services",
        names: NameRule::Dns1035,
        kind: "Service",
        short_names: &["svc"],
        categories: ALL,
        status: true,
        return_deleted_object: true,
        ..BASE
    },
    Kind {
        plural: "endpoints",
        kind: "Endpoints",
        short_names: &["ep"],
        ..BASE
    },
    Kind {
        plural: "events",
        kind: "Event",
        short_names: &["ev"],
        fields: EVENT_FIELDS,
        ..BASE
    },
    Kind {
        plural: "nodes",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        status: true,
        fields: &[field_or("spec.unschedulable", "false")],
        ..BASE
    },
    Kind {
        plural: "persistentvolumeclaims",
        kind: "PersistentVolumeClaim",
        short_names: &["pvc"],
        status: true,
        ..BASE
    },
    Kind {
        plural: "replicationcontrollers",
        kind: "ReplicationController",
        short_names: &["rc"],
        categories: ALL,
        status: true,
        scale: true,
        generation: true,
        fields: &[field_or("status.replicas", "0")],
        ..BASE
    },
    Kind {
        plural: "componentstatuses",
        kind: "ComponentStatus",
        namespaced: false,
        short_names: &["cs"],
        verbs: READ_ONLY,
        stored: false,
        ..BASE
    },
    Kind {
        group: "events.k8s.io",
        plural: "events",
        kind: "Event",
        short_names: &["ev"],
        fields: EVENT_FIELDS,
        ..BASE
    },
    Kind {
        group: "coordination.k8s.io",
        plural: "leases",
        kind: "Lease",
        ..BASE
    },
    Kind {
        group: "apps",
        plural: "deployments",
        kind: "Deployment",
        short_names: &["deploy"],
        categories: ALL,
        status: true,
        scale: true,
        generation: true,
        ..BASE
    },
    Kind {
        group: "apps",
        plural: "replicasets",
        kind: "ReplicaSet",
        short_names: &["rs"],
        categories: ALL,
        status: true,
        scale: true,
        generation: true,
        fields: &[field_or("status.replicas", "0")],
        ..BASE
    },
    Kind {
        group: "apps",
        plural: "statefulsets",
        kind: "StatefulSet",
        short_names: &["sts"],
        categories: ALL,
        status: true,
        scale: true,
        generation: true,
        ..BASE
    },
    Kind {
        group: "apps",
        plural: "daemonsets",
        kind: "DaemonSet",
        short_names: &["ds"],
        categories: ALL,
        status: true,
        generation: true,
        ..BASE
    },
    Kind {
        group: "batch",
        plural: "jobs",
        kind: "Job",
        categories: ALL,
        status: true,
        generation: true,
        // Job: `strconv.Itoa(int(job.Status.Succeeded))`.
        fields: &[FieldLabel {
            label: "status.successful",
            path: Some("status.succeeded"),
            default: Some("0"),
        }],
        ..BASE
    },
    Kind {
        group: "batch",
        plural: "cronjobs",
        kind: "CronJob",
        short_names: &["cj"],
        categories: ALL,
        status: true,
        generation: true,
        ..BASE
    },
    Kind {
        group: RBAC,
        plural: "roles",
        names: NameRule::PathSegment,
        kind: "Role",
        ..BASE
    },
    Kind {
        group: RBAC,
        plural: "rolebindings",
        names: NameRule::PathSegment,
        kind: "RoleBinding",
        ..BASE
    },
    Kind {
        group: RBAC,
        plural: "clusterroles",
        names: NameRule::PathSegment,
        kind: "ClusterRole",
        namespaced: false,
        ..BASE
    },
    Kind {
        group: RBAC,
        plural: "clusterrolebindings",
        names: NameRule::PathSegment,
        kind: "ClusterRoleBinding",
        namespaced: false,
        ..BASE
    },
    Kind {
        group: "apiextensions.k8s.io",
        plural: "customresourcedefinitions",
        kind: "CustomResourceDefinition",
        namespaced: false,
        short_names: &["crd", "crds"],
        status: true,
        generation: true,
        ..BASE
    },
    Kind {
        group: ADMISSION,
        plural: "validatingwebhookconfigurations",
        kind: "ValidatingWebhookConfiguration",
        namespaced: false,
        generation: true,
        ..BASE
    },
    Kind {
        group: ADMISSION,
        plural: "mutatingwebhookconfigurations",
        kind: "MutatingWebhookConfiguration",
        namespaced: false,
        generation: true,
        ..BASE
    },
    Kind {
        group: "discovery.k8s.io",
        plural: "endpointslices",
        kind: "EndpointSlice",
        generation: true,
        ..BASE
    },
    Kind {
        group: "apiregistration.k8s.io",
        plural: "apiservices",
        names: NameRule::PathSegment,
        kind: "APIService",
        namespaced: false,
        status: true,
        ..BASE
    },
    Kind {
        group: "certificates.k8s.io",
        plural: "certificatesigningrequests",
        kind: "CertificateSigningRequest",
        namespaced: false,
        short_names: &["csr"],
        status: true,
        fields: &[field("spec.signerName")],
        subresources: &[sub_writing(
            "approval",
            GET_PATCH_UPDATE,
            &["status", "conditions"],
        )],
        ..BASE
    },
    Kind {
        group: "authentication.k8s.io",
        plural: "tokenreviews",
        kind: "TokenReview",
        namespaced: false,
        verbs: CREATE_ONLY,
        stored: false,
        ..BASE
    },
];

/// The row of a built-in resource.
pub fn kind_of(group: &str, plural: &str) -> Option<&'static Kind> {
    KINDS
        .iter()
        .find(|k| k.group == group && k.plural == plural)
}

impl Kind {
    /// Whether `label` selects objects of this kind in a field selector.
    pub fn selects_field(&self, label: &str) -> bool {
        matches!(label, "metadata.name" | "metadata.namespace")
            || self.fields.iter().any(|f| f.label == label)
    }

    /// The value of a field label of an object, as kube's field set of the kind has it.
    pub fn field_of(&self, obj: &Value, label: &str) -> Option<String> {
        match self.fields.iter().find(|f| f.label == label) {
            Some(f) => field_value(obj, f.path.unwrap_or(f.label))
                .or_else(|| f.default.map(str::to_string)),
            None => field_value(obj, label),
        }
    }

    /// The subresource of that name, if served.
    pub fn subresource(&self, name: &str) -> Option<&'static Subresource> {
        self.subresources.iter().find(|s| s.name == name)
    }
}

/// The part of an object a write through a subresource changes: `status` for `/status`,
/// what the row says for the others; None for writes of the whole object.
pub fn written_part(
    group: &str,
    plural: &str,
    subresource: &str,
) -> Option<&'static [&'static str]> {
    if subresource == "status" {
        return Some(&["status"]);
    }
    kind_of(group, plural)
        .and_then(|k| k.subresource(subresource))
        .map(|s| s.writes)
        .filter(|w| !w.is_empty())
}

/// `old` with the part at `path` taken from `new` (removed when `new` has none).
pub fn with_part_of(old: &Value, new: &Value, path: &[&str]) -> Value {
    let mut merged = old.clone();
    let Some((last, parents)) = path.split_last() else {
        return merged;
    };
    let from = parents
        .iter()
        .try_fold(new, |v, k| v.get(k))
        .and_then(|v| v.get(last));
    let mut at = &mut merged;
    for key in parents {
        if !at.get(key).is_some_and(Value::is_object) {
            if from.is_none() {
                return merged;
            }
            at[key] = Value::Object(serde_json::Map::new());
        }
        at = &mut at[key];
    }
    match (from, at.as_object_mut()) {
        (Some(v), Some(o)) => {
            o.insert(last.to_string(), v.clone());
        }
        (None, Some(o)) => {
            o.remove(*last);
        }
        _ => {}
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_are_unique_and_fields_default() {
        for (i, k) in KINDS.iter().enumerate() {
            assert!(
                KINDS[i + 1..]
                    .iter()
                    .all(|o| (o.group, o.plural) != (k.group, k.plural)),
                "{} listed twice",
                k.plural
            );
        }
        let nodes = kind_of("", "nodes").expect("nodes");
        assert_eq!(
            nodes.field_of(&json!({"spec": {}}), "spec.unschedulable"),
            Some("false".into())
        );
        assert_eq!(
            nodes.field_of(
                &json!({"spec": {"unschedulable": true}}),
                "spec.unschedulable"
            ),
            Some("true".into())
        );
        let events = kind_of("", "events").expect("events");
        assert_eq!(
            events.field_of(&json!({"source": {"component": "k"}}), "source"),
            Some("k".into())
        );
        assert!(kind_of("", "services").is_some_and(|k| k.return_deleted_object));
    }
}
