//! The operator against kopf's in-memory API server, with kopf's test runner.

use std::time::Duration;

use kopf::testing::{FakeApiServer, OperatorTest, wait_for_object};
use kube::CustomResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use my_operator::{Greeted, Greeting, GreetingSpec, operator};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn greeted(g: Option<&Greeting>) -> Option<&Greeted> {
    g?.status.as_ref()?.greet_fn.as_ref()
}

#[tokio::test]
async fn a_greeting_gets_its_message_and_follows_its_spec() -> TestResult {
    let server = FakeApiServer::start().await?;
    server.apply_object(serde_json::to_value(Greeting::crd())?)?;
    let running = OperatorTest::new(operator()).start(&server).await?;

    let api: Api<Greeting> = Api::namespaced(server.client(), "default");
    let spec = GreetingSpec {
        name: "world".into(),
        shout: false,
    };
    api.create(&PostParams::default(), &Greeting::new("hello", spec))
        .await?;
    let done = wait_for_object(
        &api,
        "hello",
        "the greeting",
        Duration::from_secs(10),
        |g| greeted(g).is_some(),
    )
    .await?;
    assert_eq!(
        greeted(done.as_ref()).map(|g| g.message.as_str()),
        Some("Hello, world!")
    );

    let shout = serde_json::json!({"spec": {"shout": true}});
    api.patch("hello", &PatchParams::default(), &Patch::Merge(&shout))
        .await?;
    wait_for_object(
        &api,
        "hello",
        "the loud greeting",
        Duration::from_secs(10),
        |g| greeted(g).is_some_and(|g| g.message == "HELLO, WORLD!"),
    )
    .await?;
    running
        .wait_for_log("Handler 'greet_fn' succeeded", Duration::from_secs(10))
        .await?;
    running.stop().await?;
    Ok(())
}

#[tokio::test]
async fn nobody_to_greet_is_a_permanent_failure() -> TestResult {
    let server = FakeApiServer::start().await?;
    server.apply_object(serde_json::to_value(Greeting::crd())?)?;
    let running = OperatorTest::new(operator()).start(&server).await?;
    let api: Api<Greeting> = Api::namespaced(server.client(), "default");
    let spec = GreetingSpec {
        name: String::new(),
        shout: false,
    };
    api.create(&PostParams::default(), &Greeting::new("nobody", spec))
        .await?;
    let line = running
        .wait_for_log(
            "Handler 'greet_fn' failed permanently",
            Duration::from_secs(10),
        )
        .await?;
    assert!(line.contains("nobody to greet"), "{line}");
    running.stop().await?;
    Ok(())
}

/// The dependency block of the guide is this crate's own (so the guide cannot drift).
#[test]
fn the_guide_shows_this_crates_dependencies() -> TestResult {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let guide = std::fs::read_to_string(format!("{root}/docs/your-own-operator.md"))?;
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))?;
    let block = guide
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .ok_or("the guide has no ```toml block")?;
    for line in block
        .lines()
        .filter(|l| l.contains(" = ") && !l.starts_with("kopf "))
    {
        assert!(
            manifest.contains(line),
            "the guide's {line:?} is not in Cargo.toml"
        );
    }
    Ok(())
}
