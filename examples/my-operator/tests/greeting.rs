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
    // (The operator's CRD is applied by the runner: it declares it.)
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
    // The kopf line resolves: a path into a clone of this repository named `kopf-rs`,
    // beside the user's crate (the guide's step 1), that points at the facade's manifest.
    let kopf = block
        .lines()
        .find(|l| l.starts_with("kopf "))
        .ok_or("the guide's block has no kopf line")?;
    let path = kopf
        .split("path = \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .ok_or_else(|| format!("the guide's kopf line is not a path dependency: {kopf}"))?;
    let inside_clone = path
        .strip_prefix("../kopf-rs/")
        .ok_or_else(|| format!("{path} is not in a clone named kopf-rs beside the crate"))?;
    let manifest = std::fs::read_to_string(format!("{root}/{inside_clone}/Cargo.toml"))?;
    assert!(
        manifest.contains("name = \"kopf\""),
        "{path} is not the kopf crate"
    );
    Ok(())
}

/// `my-operator crd`: the CRD of the type, which an API server accepts and establishes.
#[tokio::test]
async fn the_printed_crd_is_established() -> TestResult {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_my-operator"))
        .arg("crd")
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = FakeApiServer::start().await?;
    assert_eq!(
        server.apply_yaml("crd", &String::from_utf8(out.stdout)?)?,
        1
    );
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(server.client());
    let established = wait_for_object(
        &crds,
        Greeting::crd_name(),
        "the CRD established",
        Duration::from_secs(10),
        |crd| {
            crd.and_then(|c| c.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                })
        },
    )
    .await?;
    assert!(established.is_some());
    Ok(())
}

/// `my-operator run --fake` with no `--apply`: its embedded API server serves `Greeting`
/// (the declared CRD), and the operator handles one.
#[tokio::test]
async fn run_fake_serves_the_declared_crd() -> TestResult {
    use std::io::BufRead;
    let dir = std::env::temp_dir().join(format!("my-operator-test-{}", std::process::id()));
    let kubeconfig = dir.join("kubeconfig");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_my-operator"))
        .args(["run", "--fake", "--fake-kubeconfig"])
        .arg(&kubeconfig)
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    // The banner comes once the server serves and the kubeconfig is written.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("Point kubectl at it"))
    {
        let line = rx.recv_timeout(Duration::from_secs(60))?;
        seen.push(line);
    }
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let api: Api<Greeting> = Api::namespaced(kube::Client::try_from(config)?, "default");
    let spec = GreetingSpec {
        name: "fake".into(),
        shout: false,
    };
    api.create(&PostParams::default(), &Greeting::new("served", spec))
        .await?;
    let done = wait_for_object(
        &api,
        "served",
        "the greeting",
        Duration::from_secs(20),
        |g| greeted(g).is_some(),
    )
    .await;
    child.kill()?;
    child.wait()?;
    let _ = std::fs::remove_dir_all(&dir);
    let done = done?;
    assert_eq!(
        greeted(done.as_ref()).map(|g| g.message.as_str()),
        Some("Hello, fake!"),
        "{seen:#?}"
    );
    Ok(())
}
