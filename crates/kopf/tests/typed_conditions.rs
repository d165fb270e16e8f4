//! A typed status with `Vec<kopf::conditions::Condition>` (`#[derive(CustomResource)]`): its generated
//! CRD is accepted and Established by the fake API server, the conditions a handler sets
//! survive the server's pruning and read back typed, and the schema is enforced (a
//! condition without its required fields is refused).

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kopf::testing::{FakeApiServer, OperatorTest, wait_for_object};
use kopf::{
    HandlerError, Operator, Selector,
    conditions::{Condition, ConditionStatus, Conditions},
};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A database, as an operator's own resource.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Database",
    namespaced,
    status = "DatabaseStatus"
)]
pub struct DatabaseSpec {
    /// How big.
    pub size: String,
}

/// Only the conditions: a structural schema keeps nothing else.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct DatabaseStatus {
    /// Set by the handlers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "kopf::conditions::list_schema")]
    pub conditions: Vec<Condition>,
}

async fn create_fn(conditions: Conditions) -> Result<(), HandlerError> {
    conditions.set(
        "Ready",
        ConditionStatus::True,
        "Created",
        "the database is there",
    )?;
    Ok(())
}

fn ready(db: Option<&Database>) -> Option<&Condition> {
    db?.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
}

#[tokio::test]
async fn a_typed_status_with_conditions_is_established_kept_and_enforced() -> TestResult {
    let server = FakeApiServer::start().await?;
    server.apply_object(serde_json::to_value(Database::crd())?)?;
    let crds: Api<CustomResourceDefinition> = Api::all(server.client());
    let crd = crds.get("databases.example.com").await?;
    let established = crd
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established, "the CRD is not Established");

    let operator = Operator::new().on_create(Selector::of::<Database>(), "create_fn", create_fn);
    let running = OperatorTest::new(operator).start(&server).await?;
    let api: Api<Database> = Api::namespaced(server.client(), "default");
    let spec = DatabaseSpec { size: "1Gi".into() };
    api.create(&PostParams::default(), &Database::new("db", spec))
        .await?;
    let done = wait_for_object(&api, "db", "Ready", Duration::from_secs(10), |db| {
        ready(db).is_some()
    })
    .await?;
    running
        .wait_for_log("Handler 'create_fn' succeeded", Duration::from_secs(10))
        .await?;
    running.stop().await?;

    let condition = ready(done.as_ref()).ok_or("no Ready condition")?;
    assert_eq!(condition.status, ConditionStatus::True);
    assert_eq!(condition.reason, "Created");
    assert_eq!(condition.message, "the database is there");
    assert_eq!(condition.observed_generation, Some(1));
    condition
        .last_transition_time
        .parse::<kopf::jiff::Timestamp>()?;

    // The schema is the API server's to enforce: a condition without reason, message and
    // lastTransitionTime is refused.
    let partial = json!({"status": {"conditions": [{"type": "Other", "status": "True"}]}});
    let refused = api
        .patch_status("db", &PatchParams::default(), &Patch::Merge(&partial))
        .await
        .expect_err("a condition without its required fields is refused");
    match refused {
        kube::Error::Api(status) => assert_eq!(status.code, 422, "{status:?}"),
        other => panic!("not the API server's refusal: {other}"),
    }
    Ok(())
}
