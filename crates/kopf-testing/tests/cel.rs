//! CRDs' `x-kubernetes-validations` (CEL) in the fake API server: valid objects accepted,
//! invalid ones refused with kube-apiserver's 422 (message, reason, `details.causes`), transition
//! rules on update, and CRDs whose rules do not compile refused.
#![cfg(feature = "cel")]
#![recursion_limit = "256"]

mod common;

use common::{Raw, RawResponse};
use kopf_testing::FakeApiServer;
use serde_json::{Value, json};

const WIDGETS: &str = "/apis/cel.dev/v1/namespaces/default/widgets";

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.cel.dev"},
        "spec": {
            "group": "cel.dev",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-validations": [
                        {"rule": "self.metadata.name.startsWith('w-')", "message": "the name must start with w-"},
                    ],
                    "properties": {"spec": {
                        "type": "object",
                        "x-kubernetes-validations": [
                            {"rule": "self.minReplicas <= self.maxReplicas", "message": "minReplicas must not exceed maxReplicas"},
                            {"rule": "self.mode != 'debug' || has(self.homepage)", "fieldPath": ".homepage",
                             "reason": "FieldValueRequired", "message": "a homepage is needed in debug mode"},
                        ],
                        "properties": {
                            "minReplicas": {"type": "integer"},
                            "maxReplicas": {"type": "integer"},
                            "mode": {"type": "string", "default": "normal"},
                            "name": {"type": "string", "x-kubernetes-validations": [
                                {"rule": "self == oldSelf", "message": "name is immutable", "reason": "FieldValueForbidden"},
                            ]},
                            "memory": {"type": "string", "x-kubernetes-validations": [
                                {"rule": "quantity(self).compareTo(quantity('1Gi')) <= 0",
                                 "messageExpression": "'memory ' + self + ' is over 1Gi'"},
                            ]},
                            "homepage": {"type": "string", "x-kubernetes-validations": [
                                {"rule": "isURL(self)"},
                            ]},
                            "ports": {
                                "type": "array",
                                "x-kubernetes-list-type": "map",
                                "x-kubernetes-list-map-keys": ["name"],
                                "items": {"type": "object", "required": ["name"],
                                    "x-kubernetes-validations": [
                                        {"rule": "self.port > 0 && self.port < 65536",
                                         "messageExpression": "'port ' + string(self.port) + ' is out of range'"},
                                        {"rule": "!has(oldSelf.port) || self.port >= oldSelf.port",
                                         "message": "a port may only grow"},
                                    ],
                                    "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}},
                            },
                            "labels": {"type": "object",
                                "additionalProperties": {"type": "string", "x-kubernetes-validations": [
                                    {"rule": "self.size() <= 5", "message": "at most 5 characters"},
                                ]}},
                        },
                    }},
                }},
            }],
        },
    })
}

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "cel.dev/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

async fn server() -> (FakeApiServer, Raw) {
    let server = FakeApiServer::start().await.expect("server starts");
    server
        .apply_object(widget_crd())
        .expect("the CRD is stored");
    let raw = Raw::new(&server);
    (server, raw)
}

async fn put(raw: &Raw, body: &Value) -> RawResponse {
    let name = body["metadata"]["name"].as_str().unwrap_or("");
    raw.send(
        "PUT",
        &format!("{WIDGETS}/{name}"),
        Some("application/json"),
        body.to_string().as_bytes(),
    )
    .await
}

/// Asserts a 422 Invalid for `name` with exactly these causes `(reason, field, message)`.
fn assert_invalid(r: &RawResponse, name: &str, causes: &[(&str, &str, &str)]) {
    assert_eq!(r.status, 422, "{}", r.body);
    let status = r.json();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["code"], 422);
    let texts: Vec<String> = causes.iter().map(|(_, f, m)| format!("{f}: {m}")).collect();
    let joined = if texts.len() == 1 {
        texts[0].clone()
    } else {
        format!("[{}]", texts.join(", "))
    };
    assert_eq!(
        status["message"],
        format!("Widget.cel.dev \"{name}\" is invalid: {joined}")
    );
    assert_eq!(status["details"]["name"], name);
    assert_eq!(status["details"]["group"], "cel.dev");
    assert_eq!(status["details"]["kind"], "Widget");
    let expected: Vec<Value> = causes
        .iter()
        .map(|(reason, field, message)| json!({"reason": reason, "field": field, "message": message}))
        .collect();
    assert_eq!(status["details"]["causes"], Value::Array(expected));
}

#[tokio::test]
async fn valid_objects_are_accepted() {
    let (_server, raw) = server().await;
    let body = widget(
        "w-ok",
        json!({"minReplicas": 1, "maxReplicas": 3, "name": "a", "memory": "512Mi",
            "homepage": "https://example.com/x", "mode": "debug",
            "ports": [{"name": "http", "port": 80}], "labels": {"team": "abc"}}),
    );
    let r = raw.post_json(WIDGETS, &body).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["spec"]["memory"], "512Mi");
}

#[tokio::test]
async fn a_failing_rule_is_refused_with_its_message() {
    let (_server, raw) = server().await;
    let r = raw
        .post_json(
            WIDGETS,
            &widget("w-1", json!({"minReplicas": 5, "maxReplicas": 3})),
        )
        .await;
    assert_invalid(
        &r,
        "w-1",
        &[(
            "FieldValueInvalid",
            "spec",
            "Invalid value: \"object\": minReplicas must not exceed maxReplicas",
        )],
    );
}

#[tokio::test]
async fn a_rule_at_the_root_sees_the_name_and_reports_no_field() {
    let (_server, raw) = server().await;
    let r = raw
        .post_json(
            WIDGETS,
            &widget("x-1", json!({"minReplicas": 1, "maxReplicas": 3})),
        )
        .await;
    assert_invalid(
        &r,
        "x-1",
        &[(
            "FieldValueInvalid",
            "<nil>",
            "Invalid value: \"object\": the name must start with w-",
        )],
    );
}

#[tokio::test]
async fn message_expression_default_message_field_path_and_reason() {
    let (_server, raw) = server().await;
    // messageExpression on a string (the type in the message is the node's).
    let r = raw
        .post_json(
            WIDGETS,
            &widget(
                "w-2",
                json!({"minReplicas": 1, "maxReplicas": 1, "memory": "2Gi"}),
            ),
        )
        .await;
    assert_invalid(
        &r,
        "w-2",
        &[(
            "FieldValueInvalid",
            "spec.memory",
            "Invalid value: \"string\": memory 2Gi is over 1Gi",
        )],
    );
    // No message: "failed rule: <rule>".
    let r = raw
        .post_json(
            WIDGETS,
            &widget(
                "w-3",
                json!({"minReplicas": 1, "maxReplicas": 1, "homepage": "not a url"}),
            ),
        )
        .await;
    assert_invalid(
        &r,
        "w-3",
        &[(
            "FieldValueInvalid",
            "spec.homepage",
            "Invalid value: \"string\": failed rule: isURL(self)",
        )],
    );
    // fieldPath and reason FieldValueRequired (the rule sits on spec, the error on the field).
    let r = raw
        .post_json(
            WIDGETS,
            &widget(
                "w-4",
                json!({"minReplicas": 1, "maxReplicas": 1, "mode": "debug"}),
            ),
        )
        .await;
    assert_invalid(
        &r,
        "w-4",
        &[(
            "FieldValueRequired",
            "spec.homepage",
            "Required value: a homepage is needed in debug mode",
        )],
    );
}

#[tokio::test]
async fn rules_on_list_items_and_map_values() {
    let (_server, raw) = server().await;
    let r = raw
        .post_json(
            WIDGETS,
            &widget(
                "w-5",
                json!({"minReplicas": 1, "maxReplicas": 1,
                "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 70000}]}),
            ),
        )
        .await;
    assert_invalid(
        &r,
        "w-5",
        &[(
            "FieldValueInvalid",
            "spec.ports[1]",
            "Invalid value: \"object\": port 70000 is out of range",
        )],
    );
    let r = raw
        .post_json(
            WIDGETS,
            &widget(
                "w-6",
                json!({"minReplicas": 1, "maxReplicas": 1, "labels": {"team": "far-too-long"}}),
            ),
        )
        .await;
    assert_invalid(
        &r,
        "w-6",
        &[(
            "FieldValueInvalid",
            "spec.labels[team]",
            "Invalid value: \"string\": at most 5 characters",
        )],
    );
}

#[tokio::test]
async fn transition_rules_are_checked_on_update_only() {
    let (_server, raw) = server().await;
    // On create, `self == oldSelf` is skipped (no old value).
    let created = raw
        .post_json(
            WIDGETS,
            &widget(
                "w-7",
                json!({"minReplicas": 1, "maxReplicas": 2, "name": "first",
                "ports": [{"name": "a", "port": 80}]}),
            ),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let mut body = created.json();
    // Changing another field keeps the immutable one: accepted.
    body["spec"]["maxReplicas"] = json!(4);
    let r = put(&raw, &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mut body = r.json();
    // Changing the immutable field: refused with the rule's reason.
    body["spec"]["name"] = json!("second");
    let r = put(&raw, &body).await;
    assert_invalid(
        &r,
        "w-7",
        &[(
            "FieldValueForbidden",
            "spec.name",
            "Forbidden: name is immutable",
        )],
    );
    // A list-map item correlates with the old item of the same key: the port may not shrink.
    body["spec"]["name"] = json!("first");
    body["spec"]["ports"] = json!([{"name": "a", "port": 79}]);
    let r = put(&raw, &body).await;
    assert_invalid(
        &r,
        "w-7",
        &[(
            "FieldValueInvalid",
            "spec.ports[0]",
            "Invalid value: \"object\": a port may only grow",
        )],
    );
    // A new item (no old item of its key) skips the transition rule.
    body["spec"]["ports"] = json!([{"name": "b", "port": 1}]);
    let r = put(&raw, &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn schema_errors_block_the_rules() {
    let (_server, raw) = server().await;
    let r = raw
        .post_json(
            WIDGETS,
            &widget("w-8", json!({"minReplicas": "one", "maxReplicas": 0})),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    let causes = r.json()["details"]["causes"].clone();
    let last = causes
        .as_array()
        .and_then(|c| c.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        last,
        json!({"reason": "FieldValueInvalid", "field": "<nil>",
            "message": "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"})
    );
    assert!(
        !r.body.contains("minReplicas must not exceed"),
        "{}",
        r.body
    );
}

#[tokio::test]
async fn unchanged_invalid_values_are_ratcheted_on_update() {
    let (server, raw) = server().await;
    // An object stored before the rule existed.
    let mut crd = widget_crd();
    let spec_rules = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["x-kubernetes-validations"]
        .take();
    server
        .apply_object(crd)
        .expect("the CRD without spec rules");
    let created = raw
        .post_json(
            WIDGETS,
            &widget("w-9", json!({"minReplicas": 5, "maxReplicas": 3})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let mut crd = widget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
        spec_rules;
    server
        .apply_object(crd)
        .expect("the CRD with spec rules again");
    // Updating another part of the object: spec is unchanged, its failing rule is a warning.
    let mut body = created.json();
    body["metadata"]["labels"] = json!({"touched": "yes"});
    let r = put(&raw, &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let warning = r.header("Warning").unwrap_or_default();
    assert!(
        warning.contains("minReplicas must not exceed maxReplicas"),
        "{warning:?}"
    );
    // Changing spec without fixing it: refused.
    body = r.json();
    body["spec"]["maxReplicas"] = json!(4);
    let r = put(&raw, &body).await;
    assert_invalid(
        &r,
        "w-9",
        &[(
            "FieldValueInvalid",
            "spec",
            "Invalid value: \"object\": minReplicas must not exceed maxReplicas",
        )],
    );
}

#[tokio::test]
async fn a_crd_whose_rule_does_not_compile_is_refused() {
    let server = FakeApiServer::start().await.expect("server starts");
    let raw = Raw::new(&server);
    let mut crd = widget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"] =
        json!([{"rule": "self.minReplicas <="}]);
    let r = raw
        .post_json(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &crd,
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    let status = r.json();
    assert_eq!(status["reason"], "Invalid");
    let field =
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule";
    let cause = &status["details"]["causes"][0];
    assert_eq!(cause["field"], field);
    assert_eq!(cause["reason"], "FieldValueInvalid");
    let prefix = "Invalid value: apiextensions.ValidationRule{Rule:\"self.minReplicas <=\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>:1:";
    let message = cause["message"].as_str().unwrap_or("");
    assert!(message.starts_with(prefix), "{message}");
    assert!(
        message.ends_with("\n | self.minReplicas <=\n | ...................^"),
        "{message:?}"
    );
    assert_eq!(
        status["message"],
        format!(
            "CustomResourceDefinition.apiextensions.k8s.io \"widgets.cel.dev\" is invalid: {field}: {message}"
        )
    );
    // An unsupported reason is refused too.
    let mut crd = widget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"][0]["reason"] =
        json!("FieldValueBogus");
    let r = raw
        .post_json(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &crd,
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(
        r.json()["details"]["causes"][0],
        json!({"reason": "FieldValueNotSupported",
            "field": "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].reason",
            "message": "Unsupported value: \"FieldValueBogus\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""})
    );
}
