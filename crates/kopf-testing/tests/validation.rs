//! Malformed requests, answered as kube-apiserver answers them: one table of requests, each
//! with kube's code, reason and message (and the field of its first cause), and the check
//! that none of them stored anything. Then a property: whatever the server accepts, a kube
//! client can decode (nothing stored poisons a list).

mod common;

use common::{Raw, server_with_crd};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use proptest::prelude::*;
use serde_json::{Value, json};

const CM: &str = "/api/v1/namespaces/default/configmaps";
const JSON: Option<&str> = Some("application/json");
const MERGE: Option<&str> = Some("application/merge-patch+json");
const APPLY: Option<&str> = Some("application/apply-patch+yaml");

/// One malformed request and kube's answer.
struct Case {
    what: &'static str,
    method: &'static str,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    code: u16,
    reason: &'static str,
    /// The whole message when it starts with `=`, else a part of it.
    message: String,
    /// The field of the first cause, when kube gives causes.
    field: Option<&'static str>,
}

fn case(what: &'static str, method: &'static str, path: impl Into<String>) -> Case {
    Case {
        what,
        method,
        path: path.into(),
        content_type: None,
        body: Vec::new(),
        code: 0,
        reason: "",
        message: String::new(),
        field: None,
    }
}

impl Case {
    fn json(mut self, body: Value) -> Self {
        self.content_type = JSON;
        self.body = body.to_string().into_bytes();
        self
    }

    fn raw(mut self, content_type: Option<&'static str>, body: impl Into<Vec<u8>>) -> Self {
        self.content_type = content_type;
        self.body = body.into();
        self
    }

    fn answer(mut self, code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        self.code = code;
        self.reason = reason;
        self.message = message.into();
        self
    }

    fn field(mut self, field: &'static str) -> Self {
        self.field = Some(field);
        self
    }
}

fn cm_named(name: impl Into<String>) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name.into()}})
}

fn cm_meta(meta: Value) -> Value {
    let mut meta = meta;
    meta["name"] = json!("c");
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
}

const SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn invalid_name(name: &str) -> String {
    format!(
        "=ConfigMap \"{name}\" is invalid: metadata.name: Invalid value: \"{name}\": {SUBDOMAIN}"
    )
}

fn cases() -> Vec<Case> {
    let long = "a".repeat(300);
    let mut big_annotations = serde_json::Map::new();
    big_annotations.insert("a".into(), json!("x".repeat(256 * 1024)));
    let kex = "/apis/kopf.dev/v1/namespaces/default/kopfexamples";
    let existing = format!("{CM}/existing");
    vec![
        // Names, per kind.
        case("upper-case name", "POST", CM).json(cm_named("Foo")).answer(422, "Invalid", invalid_name("Foo")).field("metadata.name"),
        case("name with a space", "POST", CM).json(cm_named("a b")).answer(422, "Invalid", invalid_name("a b")).field("metadata.name"),
        case("name with a slash", "POST", CM).json(cm_named("a/b")).answer(422, "Invalid", invalid_name("a/b")).field("metadata.name"),
        case("unicode name", "POST", CM).json(cm_named("héllo")).answer(422, "Invalid", invalid_name("héllo")).field("metadata.name"),
        case("300-character name", "POST", CM).json(cm_named(long.clone())).answer(422, "Invalid", format!("=ConfigMap \"{long}\" is invalid: metadata.name: Invalid value: \"{long}\": must be no more than 253 characters")).field("metadata.name"),
        case("name starting with a dash", "POST", CM).json(cm_named("-x")).answer(422, "Invalid", invalid_name("-x")).field("metadata.name"),
        case("name ending with a dot", "POST", CM).json(cm_named("x.")).answer(422, "Invalid", invalid_name("x.")).field("metadata.name"),
        case("Service name starting with a digit", "POST", "/api/v1/namespaces/default/services")
            .json(json!({"metadata": {"name": "1abc"}, "spec": {"ports": [{"port": 80}]}}))
            .answer(422, "Invalid", "metadata.name: Invalid value: \"1abc\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')").field("metadata.name"),
        case("Namespace name with a dot", "POST", "/api/v1/namespaces").json(json!({"metadata": {"name": "a.b"}}))
            .answer(422, "Invalid", "=Namespace \"a.b\" is invalid: metadata.name: Invalid value: \"a.b\": must not contain dots").field("metadata.name"),
        case("Namespace name of 64 characters", "POST", "/api/v1/namespaces").json(json!({"metadata": {"name": "n".repeat(64)}}))
            .answer(422, "Invalid", "must be no more than 63 characters").field("metadata.name"),
        case("upper-case generateName", "POST", CM).json(json!({"metadata": {"generateName": "Foo-"}}))
            .answer(422, "Invalid", "metadata.generateName: Invalid value: \"Foo-\": a lowercase RFC 1123 subdomain").field("metadata.generateName"),
        case("ClusterRole name with a slash", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles").json(json!({"metadata": {"name": "a/b"}, "rules": []}))
            .answer(422, "Invalid", "=ClusterRole.rbac.authorization.k8s.io \"a/b\" is invalid: metadata.name: Invalid value: \"a/b\": may not contain '/'").field("metadata.name"),
        case("custom resource with an upper-case name", "POST", kex).json(json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "Upper"}}))
            .answer(422, "Invalid", "KopfExample.kopf.dev \"Upper\" is invalid: metadata.name: Invalid value: \"Upper\": ").field("metadata.name"),
        // Types the decoder refuses.
        case("a label value that is a number", "POST", CM).json(cm_meta(json!({"labels": {"a": 1}})))
            .answer(400, "BadRequest", "=ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"),
        case("a label value that is a bool", "POST", CM).json(cm_meta(json!({"labels": {"a": true}})))
            .answer(400, "BadRequest", "cannot unmarshal bool into Go struct field ObjectMeta.metadata.labels of type string"),
        case("labels as a list", "POST", CM).json(cm_meta(json!({"labels": ["a"]})))
            .answer(400, "BadRequest", "cannot unmarshal array into Go struct field ObjectMeta.metadata.labels of type map[string]string"),
        case("an annotation value that is an object", "POST", CM).json(cm_meta(json!({"annotations": {"a": {"b": 1}}})))
            .answer(400, "BadRequest", "cannot unmarshal object into Go struct field ObjectMeta.metadata.annotations of type string"),
        case("finalizers as a string", "POST", CM).json(cm_meta(json!({"finalizers": "x"})))
            .answer(400, "BadRequest", "cannot unmarshal string into Go struct field ObjectMeta.metadata.finalizers of type []string"),
        case("a finalizer that is a number", "POST", CM).json(cm_meta(json!({"finalizers": [1]})))
            .answer(400, "BadRequest", "cannot unmarshal number into Go struct field ObjectMeta.metadata.finalizers of type string"),
        case("metadata as a list", "POST", CM).json(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": []}))
            .answer(400, "BadRequest", "=ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal array into Go struct field ConfigMap.metadata of type v1.ObjectMeta"),
        case("metadata as a string", "POST", CM).json(json!({"metadata": "x"}))
            .answer(400, "BadRequest", "cannot unmarshal string into Go struct field ConfigMap.metadata of type v1.ObjectMeta"),
        case("apiVersion as a number", "POST", CM).json(json!({"apiVersion": 5, "kind": "ConfigMap", "metadata": {"name": "c"}}))
            .answer(400, "BadRequest", "=couldn't get version/kind; json parse error: json: cannot unmarshal number into Go struct field .apiVersion of type string"),
        case("kind as a list", "POST", CM).json(json!({"kind": [], "metadata": {"name": "c"}}))
            .answer(400, "BadRequest", "cannot unmarshal array into Go struct field .kind of type string"),
        case("a body that is a list", "POST", CM).json(json!([1, 2]))
            .answer(400, "BadRequest", "couldn't get version/kind; json parse error: json: cannot unmarshal array"),
        case("a body that is a string", "POST", CM).json(json!("x"))
            .answer(400, "BadRequest", "couldn't get version/kind; json parse error: json: cannot unmarshal string"),
        case("a body that is not JSON", "POST", CM).raw(JSON, "{\"metadata\": ")
            .answer(400, "BadRequest", "=couldn't get version/kind; json parse error: unexpected end of JSON input"),
        case("a body with a stray character", "POST", CM).raw(JSON, "{\"metadata\": x}")
            .answer(400, "BadRequest", "=couldn't get version/kind; json parse error: invalid character 'x' looking for beginning of value"),
        case("generation as a string", "POST", CM).json(cm_meta(json!({"generation": "1"})))
            .answer(400, "BadRequest", "cannot unmarshal string into Go struct field ObjectMeta.metadata.generation of type int64"),
        case("generation with a fraction", "POST", CM).json(cm_meta(json!({"generation": 1.5})))
            .answer(400, "BadRequest", "cannot unmarshal number 1.5 into Go struct field ObjectMeta.metadata.generation of type int64"),
        case("ownerReferences as an object", "POST", CM).json(cm_meta(json!({"ownerReferences": {}})))
            .answer(400, "BadRequest", "cannot unmarshal object into Go struct field ObjectMeta.metadata.ownerReferences of type []v1.OwnerReference"),
        case("an owner's uid as a number", "POST", CM).json(cm_meta(json!({"ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "n", "uid": 5}]})))
            .answer(400, "BadRequest", "cannot unmarshal number into Go struct field OwnerReference.metadata.ownerReferences.uid of type string"),
        case("an owner's controller as a string", "POST", CM).json(cm_meta(json!({"ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "n", "uid": "u", "controller": "yes"}]})))
            .answer(400, "BadRequest", "cannot unmarshal string into Go struct field OwnerReference.metadata.ownerReferences.controller of type bool"),
        case("a name that is a number", "POST", CM).json(json!({"metadata": {"name": 5}}))
            .answer(400, "BadRequest", "cannot unmarshal number into Go struct field ObjectMeta.metadata.name of type string"),
        // Metadata kube validates.
        case("a label key with a space and a bang", "POST", CM).json(cm_meta(json!({"labels": {"bad key!": "v"}})))
            .answer(422, "Invalid", "metadata.labels: Invalid value: \"bad key!\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')").field("metadata.labels"),
        case("a label key with two slashes", "POST", CM).json(cm_meta(json!({"labels": {"a/b/c": "v"}})))
            .answer(422, "Invalid", "Invalid value: \"a/b/c\": a qualified name must consist of").field("metadata.labels"),
        case("a label key with an empty prefix", "POST", CM).json(cm_meta(json!({"labels": {"/x": "v"}})))
            .answer(422, "Invalid", "Invalid value: \"/x\": prefix part must be non-empty").field("metadata.labels"),
        case("a label key with a long name part", "POST", CM).json(cm_meta(json!({"labels": {"k".repeat(64): "v"}})))
            .answer(422, "Invalid", "name part must be no more than 63 characters").field("metadata.labels"),
        case("a label value with a space", "POST", CM).json(cm_meta(json!({"labels": {"k": "bad value"}})))
            .answer(422, "Invalid", "metadata.labels: Invalid value: \"bad value\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')").field("metadata.labels"),
        case("a label value of 64 characters", "POST", CM).json(cm_meta(json!({"labels": {"k": "v".repeat(64)}})))
            .answer(422, "Invalid", "must be no more than 63 characters").field("metadata.labels"),
        case("an annotation key with a space", "POST", CM).json(cm_meta(json!({"annotations": {"Bad Key": "v"}})))
            .answer(422, "Invalid", "metadata.annotations: Invalid value: \"Bad Key\": name part must consist of").field("metadata.annotations"),
        case("annotations over 256 KiB", "POST", CM).json(cm_meta(json!({"annotations": big_annotations})))
            .answer(422, "Invalid", "=ConfigMap \"c\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes").field("metadata.annotations"),
        case("a finalizer with a space", "POST", CM).json(cm_meta(json!({"finalizers": ["a b"]})))
            .answer(422, "Invalid", "metadata.finalizers: Invalid value: \"a b\": name part must consist of").field("metadata.finalizers"),
        case("an owner reference without a uid", "POST", CM).json(cm_meta(json!({"ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "n"}]})))
            .answer(422, "Invalid", "metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty").field("metadata.ownerReferences.uid"),
        case("an owner reference without a version", "POST", CM).json(cm_meta(json!({"ownerReferences": [{"apiVersion": "", "kind": "X", "name": "n", "uid": "u"}]})))
            .answer(422, "Invalid", "version must not be empty").field("metadata.ownerReferences.apiVersion"),
        case("two controllers", "POST", CM).json(cm_meta(json!({"ownerReferences": [
                {"apiVersion": "v1", "kind": "X", "name": "a", "uid": "1", "controller": true},
                {"apiVersion": "v1", "kind": "X", "name": "b", "uid": "2", "controller": true}]})))
            .answer(422, "Invalid", "Only one reference can have Controller set to true. Found \"true\" in references for X/a and X/b").field("metadata.ownerReferences"),
        // Sizes.
        case("ConfigMap data over 1 MiB", "POST", CM).json(json!({"metadata": {"name": "big"}, "data": {"k": "x".repeat(1024 * 1024 + 1)}}))
            .answer(422, "Invalid", "=ConfigMap \"big\" is invalid: []: Too long: may not be more than 1048576 bytes").field("[]"),
        case("Secret data over 1 MiB", "POST", "/api/v1/namespaces/default/secrets").json(json!({"metadata": {"name": "big"}, "stringData": {"k": "x".repeat(1024 * 1024 + 1)}}))
            .answer(422, "Invalid", "=Secret \"big\" is invalid: data: Too long: may not be more than 1048576 bytes").field("data"),
        case("a body over 3 MiB", "POST", CM).json(json!({"metadata": {"name": "huge"}, "data": {"k": "x".repeat(3 * 1024 * 1024)}}))
            .answer(413, "RequestEntityTooLarge", "=Request entity too large: limit is 3145728"),
        case("a custom resource over etcd's 1.5 MiB", "POST", kex).json(json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": {"name": "huge"}, "spec": {"k": "x".repeat(1600 * 1024)}}))
            .answer(500, "", "=etcdserver: request is too large"),
        // Query parameters.
        case("create with dryRun=Bogus", "POST", format!("{CM}?dryRun=Bogus")).json(cm_named("dry"))
            .answer(422, "Invalid", "=CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Bogus\"}: supported values: \"All\"").field("dryRun"),
        case("update with dryRun=Bogus", "PUT", format!("{existing}?dryRun=Bogus")).json(cm_named("existing"))
            .answer(422, "Invalid", "=UpdateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Bogus\"}: supported values: \"All\""),
        case("delete with dryRun=Bogus", "DELETE", format!("{existing}?dryRun=Bogus"))
            .answer(422, "Invalid", "=DeleteOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Bogus\"}: supported values: \"All\"").field("dryRun"),
        case("delete with gracePeriodSeconds=abc", "DELETE", format!("{existing}?gracePeriodSeconds=abc"))
            .answer(400, "BadRequest", "=strconv.ParseInt: parsing \"abc\": invalid syntax"),
        case("delete with propagationPolicy=Bogus", "DELETE", format!("{existing}?propagationPolicy=Bogus"))
            .answer(422, "Invalid", "=DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Bogus\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\"").field("propagationPolicy"),
        case("delete with both orphanDependents and a policy", "DELETE", existing.clone()).json(json!({"propagationPolicy": "Orphan", "orphanDependents": true}))
            .answer(422, "Invalid", "propagationPolicy: Invalid value: \"Orphan\": orphanDependents and deletionPropagation cannot be both set").field("propagationPolicy"),
        case("list with resourceVersion=abc", "GET", format!("{CM}?resourceVersion=abc"))
            .answer(422, "Invalid", "=configmaps \"\" is invalid: resourceVersion: Invalid value: \"abc\": strconv.ParseUint: parsing \"abc\": invalid syntax").field("resourceVersion"),
        case("list with limit=abc", "GET", format!("{CM}?limit=abc"))
            .answer(400, "BadRequest", "=strconv.ParseInt: parsing \"abc\": invalid syntax"),
        case("list with a match and no resourceVersion", "GET", format!("{CM}?resourceVersionMatch=Exact"))
            .answer(422, "Invalid", "=ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided").field("resourceVersionMatch"),
        case("list with an unknown match", "GET", format!("{CM}?resourceVersionMatch=Bogus&resourceVersion=1"))
            .answer(422, "Invalid", "resourceVersionMatch: Unsupported value: \"Bogus\": supported values: \"Exact\", \"NotOlderThan\", \"\""),
        case("list with Exact at 0", "GET", format!("{CM}?resourceVersionMatch=Exact&resourceVersion=0"))
            .answer(422, "Invalid", "resourceVersionMatch \\\"exact\\\" is forbidden for resourceVersion \\\"0\\\"".replace("\\\"", "\"")),
        case("list with sendInitialEvents", "GET", format!("{CM}?sendInitialEvents=true"))
            .answer(422, "Invalid", "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list").field("sendInitialEvents"),
        case("list from a future resourceVersion", "GET", format!("{CM}?resourceVersion=99999999"))
            .answer(504, "Timeout", "Too large resource version: 99999999, current: "),
        case("watch with timeoutSeconds=abc", "GET", format!("{CM}?watch=true&timeoutSeconds=abc"))
            .answer(400, "BadRequest", "=strconv.ParseInt: parsing \"abc\": invalid syntax"),
        case("watch with a match and no sendInitialEvents", "GET", format!("{CM}?watch=1&resourceVersionMatch=NotOlderThan"))
            .answer(422, "Invalid", "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"),
        case("watch with resourceVersion=abc", "GET", format!("{CM}?watch=1&resourceVersion=abc"))
            .answer(422, "Invalid", "resourceVersion: Invalid value: \"abc\": strconv.ParseUint"),
        // Patches.
        case("merge patch with force", "PATCH", format!("{existing}?force=true")).raw(MERGE, "{}")
            .answer(422, "Invalid", "=PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch").field("force"),
        // kube reads a boolean parameter that is not "0" or "false" as true, and any force
        // at all (even false) on a non-apply patch is refused.
        case("merge patch with force=maybe", "PATCH", format!("{existing}?force=maybe")).raw(MERGE, "{}")
            .answer(422, "Invalid", "=PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch").field("force"),
        case("merge patch with force=false", "PATCH", format!("{existing}?force=false")).raw(MERGE, "{}")
            .answer(422, "Invalid", "=PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch").field("force"),
        // ValidateFieldManager: at most 128 bytes, printable characters only.
        case("create with a fieldManager of 129 bytes", "POST", format!("{CM}?fieldManager={}", "m".repeat(129))).json(cm_named("fm"))
            .answer(422, "Invalid", "=CreateOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long: may not be more than 128 bytes").field("fieldManager"),
        case("update with a fieldManager of 129 bytes", "PUT", format!("{existing}?fieldManager={}", "m".repeat(129))).json(cm_named("existing"))
            .answer(422, "Invalid", "=UpdateOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long: may not be more than 128 bytes").field("fieldManager"),
        case("patch with a fieldManager of 129 bytes", "PATCH", format!("{existing}?fieldManager={}", "m".repeat(129))).raw(MERGE, "{}")
            .answer(422, "Invalid", "=PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Too long: may not be more than 128 bytes").field("fieldManager"),
        case("create with a control character in fieldManager", "POST", format!("{CM}?fieldManager=a%01b")).json(cm_named("fm"))
            .answer(422, "Invalid", "=CreateOptions.meta.k8s.io \"\" is invalid: fieldManager: Invalid value: \"a\\x01b\": invalid character U+0001 (at position 1)").field("fieldManager"),
        case("create with fieldValidation=Bogus", "POST", format!("{CM}?fieldValidation=Bogus")).json(cm_named("fv"))
            .answer(422, "Invalid", "=CreateOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"Bogus\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"").field("fieldValidation"),
        case("create with a long fieldManager and dryRun=Bogus", "POST", format!("{CM}?dryRun=Bogus&fieldManager={}", "m".repeat(129))).json(cm_named("fm"))
            .answer(422, "Invalid", "=CreateOptions.meta.k8s.io \"\" is invalid: [fieldManager: Too long: may not be more than 128 bytes, dryRun: Unsupported value: []string{\"Bogus\"}: supported values: \"All\"]").field("fieldManager"),
        // metav1.Time's decoder: a string must be an RFC 3339 time, anything else a string.
        case("create with a creationTimestamp that is not a time", "POST", CM).json(cm_meta(json!({"creationTimestamp": "yesterday"})))
            .answer(400, "BadRequest", "=ConfigMap in version \"v1\" cannot be handled as a ConfigMap: parsing time \"yesterday\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"yesterday\" as \"2006\""),
        case("update with a creationTimestamp that is not a time", "PUT", existing.clone())
            .json(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "existing", "creationTimestamp": "2024-01-01"}}))
            .answer(400, "BadRequest", "=ConfigMap in version \"v1\" cannot be handled as a ConfigMap: parsing time \"2024-01-01\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"\" as \"T\""),
        case("create with a creationTimestamp that is a number", "POST", CM).json(cm_meta(json!({"creationTimestamp": 5})))
            .answer(400, "BadRequest", "=ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go value of type string"),
        case("merge patch with a creationTimestamp that is not a time", "PATCH", existing.clone()).raw(MERGE, r#"{"metadata": {"creationTimestamp": "2024-13-01T00:00:00Z"}}"#)
            .answer(422, "Invalid", ": parsing time \"2024-13-01T00:00:00Z\": month out of range").field("patch"),
        case("merge patch with a deletionTimestamp that is not a time", "PATCH", existing.clone()).raw(MERGE, r#"{"metadata": {"deletionTimestamp": "soon"}}"#)
            .answer(422, "Invalid", ": parsing time \"soon\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"soon\" as \"2006\"").field("patch"),
        case("merge patch with a creationTimestamp that is a list", "PATCH", existing.clone()).raw(MERGE, r#"{"metadata": {"creationTimestamp": []}}"#)
            .answer(422, "Invalid", ": json: cannot unmarshal array into Go value of type string").field("patch"),
        case("merge patch making a label a number", "PATCH", existing.clone()).raw(MERGE, r#"{"metadata": {"labels": {"a": 1}}}"#)
            .answer(422, "Invalid", "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string").field("patch"),
        case("apply patch that is not YAML", "PATCH", format!("{existing}?fieldManager=t")).raw(APPLY, "{{{")
            .answer(400, "BadRequest", "error decoding YAML: "),
        case("apply patch that is a list", "PATCH", format!("{existing}?fieldManager=t")).raw(APPLY, "- a\n- b\n")
            .answer(400, "BadRequest", "=error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array into Go value of type map[string]interface {}"),
        case("apply patch of another version", "PATCH", format!("{existing}?fieldManager=t")).raw(APPLY, "apiVersion: v2\nkind: ConfigMap\nmetadata:\n  name: existing\n")
            .answer(400, "BadRequest", "=Incorrect version specified in apply patch. Specified patch version: v2, expected: v1"),
        case("apply patch without a field manager", "PATCH", existing.clone()).raw(APPLY, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: existing\n")
            .answer(422, "Invalid", "fieldManager: Required value: is required for apply patch"),
        // Request objects of subresources and reviews.
        case("a TokenRequest that is a list", "POST", "/api/v1/namespaces/default/serviceaccounts/default/token").json(json!([]))
            .answer(400, "BadRequest", "couldn't get version/kind; json parse error: json: cannot unmarshal array"),
        case("a TokenRequest whose spec is a string", "POST", "/api/v1/namespaces/default/serviceaccounts/default/token").json(json!({"spec": "x"}))
            .answer(400, "BadRequest", "=TokenRequest in version \"v1\" cannot be handled as a TokenRequest: json: cannot unmarshal string into Go struct field TokenRequest.spec of type v1.TokenRequestSpec"),
        case("a TokenReview that is a number", "POST", "/apis/authentication.k8s.io/v1/tokenreviews").json(json!(1))
            .answer(400, "BadRequest", "couldn't get version/kind; json parse error: json: cannot unmarshal number"),
        // The fake's own fault control.
        case("a fault with code 0", "POST", "/__kopf/faults/respond").json(json!({"code": 0}))
            .answer(400, "BadRequest", "=bad fault rule: code 0 is not an HTTP error status: a fault answers with 400 to 599"),
        case("a fault with code 1000", "POST", "/__kopf/faults/respond").json(json!({"code": 1000}))
            .answer(400, "BadRequest", "bad fault rule: code 1000 is not an HTTP error status"),
        case("a watch delay that is not a number", "POST", "/__kopf/faults/watch-delay").json(json!({"millis": "soon"}))
            .answer(400, "BadRequest", "bad watch delay: millis must be a non-negative integer"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_kubes_answers_and_store_nothing() {
    let server = server_with_crd().await;
    let raw = Raw::new(&server);
    let made = raw.post_json(CM, &cm_named("existing")).await;
    assert_eq!(made.status, 201, "{}", made.body);
    let before: Vec<String> = names(&server);
    let cases = cases();
    assert!(cases.len() >= 50, "{} cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let r = raw.send(c.method, &c.path, c.content_type, &c.body).await;
        let status: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        let message = status["message"].as_str().unwrap_or("");
        let ok_message = match c.message.strip_prefix('=') {
            Some(exact) => message == exact,
            None => message.contains(&c.message),
        };
        let ok_field = c
            .field
            .is_none_or(|f| status.pointer("/details/causes/0/field") == Some(&json!(f)));
        let ok = r.status == c.code
            && status["kind"] == "Status"
            && status["reason"] == c.reason
            && status["code"] == c.code
            && ok_message
            && ok_field;
        if !ok {
            let body: String = r.body.chars().take(600).collect();
            failures.push(format!(
                "{}: {} {}\n   expected {} {:?} {:?} field {:?}\n   got {} {body}",
                c.what, c.method, c.path, c.code, c.reason, c.message, c.field, r.status
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from kube-apiserver:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert_eq!(
        names(&server),
        before,
        "a refused request stored or deleted something"
    );
    assert!(
        server
            .objects()
            .iter()
            .all(|o| o["metadata"]["name"] != "huge")
    );
}

fn names(server: &kopf_testing::FakeApiServer) -> Vec<String> {
    let mut names: Vec<String> = server
        .objects()
        .iter()
        .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_watch_from_a_future_resource_version_ends_with_kubes_timeout() {
    let server = server_with_crd().await;
    let raw = Raw::new(&server);
    let r = raw
        .get(&format!("{CM}?watch=1&resourceVersion=99999999"))
        .await;
    assert_eq!(r.status, 200);
    let event: Value = serde_json::from_str(r.body.lines().next().unwrap_or("")).expect("an event");
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["code"], 504);
    assert_eq!(event["object"]["reason"], "Timeout");
    assert_eq!(
        event["object"]["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert_eq!(event["object"]["details"]["retryAfterSeconds"], 1);
}

#[tokio::test]
async fn what_kube_accepts_in_query_parameters_the_fake_accepts() {
    let server = server_with_crd().await;
    let raw = Raw::new(&server);
    for name in ["a", "b", "c"] {
        let made = raw.post_json(CM, &cm_named(name)).await;
        assert_eq!(made.status, 201, "{}", made.body);
    }
    // A negative limit is no limit (kube's storage pages only for a limit above 0).
    let r = raw.get(&format!("{CM}?limit=-1")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let list = r.json();
    assert_eq!(list["items"].as_array().map(Vec::len), Some(3));
    assert!(list["metadata"].get("continue").is_none(), "{list}");
    // allowWatchBookmarks=maybe asks for bookmarks (the watch ends with one); =false not.
    let r = raw
        .get(&format!(
            "{CM}?watch=1&allowWatchBookmarks=maybe&timeoutSeconds=1"
        ))
        .await;
    assert!(r.body.contains("\"BOOKMARK\""), "{}", r.body);
    let r = raw
        .get(&format!(
            "{CM}?watch=1&allowWatchBookmarks=false&timeoutSeconds=1"
        ))
        .await;
    assert!(!r.body.contains("\"BOOKMARK\""), "{}", r.body);
    // force=maybe is a forced apply: it takes a field another manager owns.
    let apply = |manager: &str, force: &str| format!("{CM}/a?fieldManager={manager}{force}");
    let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: one\n";
    let r = raw
        .send("PATCH", &apply("first", ""), APPLY, body.as_bytes())
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let other = body.replace("one", "two");
    let r = raw
        .send("PATCH", &apply("second", ""), APPLY, other.as_bytes())
        .await;
    assert_eq!(r.status, 409, "a conflict without force: {}", r.body);
    let r = raw
        .send(
            "PATCH",
            &apply("second", "&force=maybe"),
            APPLY,
            other.as_bytes(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["data"]["k"], "two");
    // A fieldManager of exactly 128 bytes is fine.
    let r = raw
        .post_json(
            &format!("{CM}?fieldManager={}", "m".repeat(128)),
            &cm_named("d"),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
}

#[tokio::test]
async fn query_booleans_read_as_kube_reads_them() {
    // kube's conversion: only "0" and "false" (any case) are false; "maybe" is a watch.
    let server = server_with_crd().await;
    let raw = Raw::new(&server);
    let r = raw.get(&format!("{CM}?watch=maybe&timeoutSeconds=1")).await;
    assert_eq!(r.status, 200);
    assert!(
        r.body.is_empty() || r.body.contains("\"type\""),
        "a watch stream: {}",
        r.body
    );
    let r = raw.get(&format!("{CM}?watch=False")).await;
    assert_eq!(r.json()["kind"], "ConfigMapList");
}

#[tokio::test]
async fn kinds_get_kubes_create_defaults() {
    let server = server_with_crd().await;
    let raw = Raw::new(&server);
    let r = raw
        .post_json(
            "/api/v1/namespaces/default/secrets",
            &json!({"metadata": {"name": "s"}, "stringData": {"password": "hunter2"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["type"], "Opaque");
    // stringData is written into data and not stored.
    assert_eq!(r.json()["data"], json!({"password": "aHVudGVyMg=="}));
    assert!(r.json().get("stringData").is_none());
    let r = raw
        .post_json(
            "/apis/batch/v1/namespaces/default/jobs",
            &json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["spec"]["backoffLimit"], 6);
    assert_eq!(r.json()["spec"]["completions"], 1);
    // RBAC names may hold colons (kube's path-segment rule, not DNS).
    let r = raw
        .post_json(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            &json!({"metadata": {"name": "example:reader"}, "rules": []}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
}

/// Any JSON value, a few levels deep: what a fuzzing client may put into metadata.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "[a-zA-Z0-9 ./:_-]{0,12}".prop_map(Value::from),
        "\\PC{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            prop::collection::btree_map("[a-zA-Z/._-]{0,10}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn any_metadata() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            "[a-z0-9][a-z0-9.-]{0,20}[a-z0-9]".prop_map(Value::from),
            any_json()
        ],
        prop::option::of(any_json()),
        prop::option::of(any_json()),
        prop::option::of(any_json()),
        prop::option::of(any_json()),
    )
        .prop_map(|(name, labels, annotations, finalizers, owners)| {
            let mut m = serde_json::Map::new();
            m.insert("name".into(), name);
            for (k, v) in [
                ("labels", labels),
                ("annotations", annotations),
                ("finalizers", finalizers),
                ("ownerReferences", owners),
            ] {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            }
            Value::Object(m)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Whatever the server stores, a kube client can list and read back.
    #[test]
    fn anything_accepted_decodes_as_a_dynamic_object(meta in any_metadata(), custom in any::<bool>()) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        rt.block_on(async move {
            let server = server_with_crd().await;
            let raw = Raw::new(&server);
            let (path, body, ar) = if custom {
                let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"), "kopfexamples");
                ("/apis/kopf.dev/v1/namespaces/default/kopfexamples", json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample", "metadata": meta, "spec": {}}), ar)
            } else {
                let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "ConfigMap"), "configmaps");
                (CM, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}), ar)
            };
            let r = raw.post_json(path, &body).await;
            prop_assert!(matches!(r.status, 201 | 400 | 409 | 422), "{} {}", r.status, r.body);
            let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &ar);
            let listed = api.list(&ListParams::default()).await;
            prop_assert!(listed.is_ok(), "the list no longer decodes after {} {}: {:?}", r.status, body, listed.err());
            if r.status == 201 {
                let name = r.json()["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let got = api.get(&name).await;
                prop_assert!(got.is_ok(), "{body} was stored and does not decode: {:?}", got.err());
            }
            Ok(())
        })?;
    }
}
