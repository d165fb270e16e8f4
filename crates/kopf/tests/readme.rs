//! The README's "Testing your operator" examples, as tests (so they cannot rot), and a
//! check that the README still shows this code.

use std::time::Duration;

use kopf::testing::{FakeApiServer, FaultRule, OperatorTest, RequestPattern, wait_for_object};
use kopf::{HandlerError, Operator};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

const CRD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/crd.yaml");

#[tokio::test]
async fn creation_writes_the_message() -> Result<(), Box<dyn std::error::Error>> {
    let server = FakeApiServer::start().await?;
    server.apply_file(CRD)?;
    let operator = Operator::new().on_create("kopfexamples", "create_fn", || async {
        Ok::<_, HandlerError>(json!({"message": "hello"}))
    });
    let running = OperatorTest::new(operator).start(&server).await?;
    // One 500 on the status write: the result still lands (the handler runs again).
    let fault = FaultRule::new(RequestPattern::any().subresource("status"), 500, 1);
    server.inject_fault(fault);

    let kind = GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample");
    let ar = ApiResource::from_gvk_with_plural(&kind, "kopfexamples");
    let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &ar);
    let obj = serde_json::from_value(json!({
        "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": "k"}, "spec": {"field": "x"},
    }))?;
    api.create(&PostParams::default(), &obj).await?;
    wait_for_object(&api, "k", "the message", Duration::from_secs(10), |o| {
        o.is_some_and(|o| o.data["status"]["create_fn"]["message"] == "hello")
    })
    .await?;
    running
        .wait_for_log("Handler 'create_fn' succeeded", Duration::from_secs(10))
        .await?;
    running.stop().await?;
    Ok(())
}

/// The operator of the README's simulation example.
mod my_operator {
    pub fn operator() -> kopf::Operator {
        kopf::Operator::new().on_create("kopfexamples", "create_fn", || async {
            Ok::<_, kopf::HandlerError>(serde_json::json!({"message": "hello"}))
        })
    }
}

#[test]
fn survives_kills_and_faults() {
    use kopf::testing::sim::{Scenario, Simulation};
    let scenario = Scenario::new("kopf.dev/v1", "KopfExample", "kopfexamples")
        .create(serde_json::json!({"metadata": {"name": "a"}, "spec": {"field": "x"}}))
        .patch("a", serde_json::json!({"spec": {"field": "y"}}))
        .delete("a");
    Simulation::new(my_operator::operator, scenario)
        .crds(CRD)
        .check(200);
}

/// Every line of the tests above (from their first `let`) is in the README's examples, but
/// the path of the CRD file.
#[test]
fn the_readme_shows_these_tests() -> Result<(), Box<dyn std::error::Error>> {
    for test in [
        "async fn creation_writes_the_message()",
        "fn survives_kills_and_faults()",
    ] {
        the_readme_shows(test)?;
    }
    Ok(())
}

fn the_readme_shows(test: &str) -> Result<(), Box<dyn std::error::Error>> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))?;
    let this = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/readme.rs"))?;
    let body = this
        .split(test)
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .ok_or("the test's body")?;
    for line in body
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains("CRD") && !l.starts_with("use "))
    {
        assert!(readme.contains(line), "the README's example lacks {line:?}");
    }
    Ok(())
}
