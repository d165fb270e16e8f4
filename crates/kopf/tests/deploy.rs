//! The committed deployment files match what the operators generate.

#[path = "../examples/minimal.rs"]
mod minimal_example;

#[path = "../examples/children.rs"]
mod children_example;

use clap::{CommandFactory, Parser};
use kopf::cli::{Cli, Command, RbacArgs};

fn default_rbac_args() -> RbacArgs {
    match Cli::try_parse_from(["operator", "rbac"])
        .expect("parses")
        .command
    {
        Command::Rbac(args) => args,
        other => panic!("not rbac: {other:?}"),
    }
}

fn committed(name: &str) -> String {
    let path = format!("{}/../../deploy/rbac/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test]
async fn the_committed_rbac_is_what_the_operators_generate() {
    let args = default_rbac_args();
    let minimal = minimal_example::operator()
        .fake_manifests(kopf::cli::example_manifests())
        .rbac(&args)
        .await
        .expect("generated");
    assert_eq!(
        minimal,
        committed("examples.yaml"),
        "regenerate: cargo run --example minimal -- rbac > deploy/rbac/examples.yaml"
    );
    assert!(minimal.contains("kopfexamples/status"), "{minimal}");
    let children = children_example::operator()
        .fake_manifests(kopf::cli::example_manifests())
        .rbac(&args)
        .await
        .expect("generated");
    assert_eq!(
        children,
        committed("children.yaml"),
        "regenerate: cargo run --example children -- rbac > deploy/rbac/children.yaml"
    );
    assert!(children.contains("configmaps"), "{children}");
}

#[tokio::test]
async fn rbac_names_a_resource_that_is_not_there() {
    let err = minimal_example::operator()
        .rbac(&default_rbac_args())
        .await
        .expect_err("no CRD applied");
    assert!(
        format!("{err:?}").contains("no served resource matches \"kopfexamples\""),
        "{err:?}"
    );
}

#[tokio::test]
async fn rbac_for_leader_election_lets_the_operator_hold_a_lease() {
    let leases = "- apiGroups:\n  - coordination.k8s.io\n  resources:\n  - leases\n  verbs:\n  - get\n  - create\n  - update\n";
    let plain = minimal_example::operator()
        .fake_manifests(kopf::cli::example_manifests())
        .rbac(&default_rbac_args())
        .await
        .expect("generated");
    assert!(!plain.contains("leases"), "{plain}");
    let args = match Cli::try_parse_from(["operator", "rbac", "--leader-election"])
        .expect("parses")
        .command
    {
        Command::Rbac(args) => args,
        other => panic!("not rbac: {other:?}"),
    };
    for rbac in [
        minimal_example::operator()
            .fake_manifests(kopf::cli::example_manifests())
            .rbac(&args)
            .await
            .expect("generated"),
        minimal_example::operator()
            .leader_election(kopf::LeaderElection::new("x"))
            .fake_manifests(kopf::cli::example_manifests())
            .rbac(&default_rbac_args())
            .await
            .expect("generated"),
    ] {
        assert!(rbac.contains(leases), "{rbac}");
    }
}

#[tokio::test]
async fn the_replicas_deployment_applies_and_its_settings_are_options_of_run() {
    let path = format!(
        "{}/../../deploy/operator-replicas.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let server = kopf::testing::FakeApiServer::start()
        .await
        .expect("the fake server starts");
    server
        .apply_yaml("operator-replicas.yaml", &text)
        .expect("the manifests apply");
    // Every KOPF_RUN_* variable of the Deployment is an option of `run`, and they parse.
    let run = Cli::command();
    let run = run.find_subcommand("run").expect("run");
    let known: Vec<String> = run
        .get_arguments()
        .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().to_string()))
        .collect();
    let used: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            let at = l.find("name: KOPF_RUN_")?;
            let rest = &l[at + "name: ".len()..];
            Some(&rest[..rest.find(',')?])
        })
        .collect();
    assert!(used.contains(&"KOPF_RUN_LEADER_ELECTION"), "{used:?}");
    for var in &used {
        assert!(
            known.iter().any(|k| k == var),
            "{var} is not an option of run"
        );
    }
    let args = [
        "operator",
        "run",
        "--leader-election=kopf-operator-leader",
        "-A",
    ];
    let parsed = Cli::try_parse_from(args).expect("parses");
    let Command::Run(run) = parsed.command else {
        panic!("not run");
    };
    assert_eq!(
        run.leader_election("kopf-operator", None).map(|e| e.name),
        Some("kopf-operator-leader".to_string())
    );
}
