//! `uninstall`: the operator's state taken off its objects, so that deleting them, their
//! namespace and their CRD leaves nothing stuck; `--dry-run` writes nothing.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kopf::cli::UninstallArgs;
use kopf::{HandlerError, Operator, TimerOptions};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use common::{Running, obj, paused_server};

fn operator() -> Operator {
    Operator::new()
        .on_create("kopfexamples", "create_fn", || async {
            Ok::<_, HandlerError>(json!("created"))
        })
        .on_delete("kopfexamples", "delete_fn", || async {
            Ok::<_, HandlerError>(())
        })
        .timer(
            "kopfexamples",
            "tick",
            TimerOptions::every(Duration::from_secs(3600)),
            || async { Ok::<_, HandlerError>(()) },
        )
}

fn kopfexamples(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample"),
        "kopfexamples",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn writes_since(server: &kopf::testing::FakeApiServer, mark: usize) -> Vec<String> {
    server.requests()[mark..]
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

fn args(namespaces: &[&str], dry_run: bool) -> UninstallArgs {
    UninstallArgs {
        dry_run,
        namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        all_namespaces: namespaces.is_empty(),
    }
}

#[tokio::test(start_paused = true)]
async fn after_uninstall_the_objects_their_namespace_and_their_crd_go_without_the_operator() {
    let server = paused_server().await;
    let client = server.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in ["team-a", "team-b"] {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns"),
            )
            .await
            .expect("namespace");
        for name in ["one", "two"] {
            kopfexamples(&client, ns)
                .create(&PostParams::default(), &obj(name, json!({"field": "a"})))
                .await
                .expect("create");
        }
    }
    let running = Running::start(&server, operator()).await;
    running.settled().await;
    running.stop().await;
    let held = kopfexamples(&client, "team-a")
        .get("one")
        .await
        .expect("get");
    assert!(
        held.metadata.finalizers.is_some_and(|f| !f.is_empty()),
        "handled: the finalizer is on"
    );

    // A dry run says what it would take off, and writes nothing.
    let op = operator();
    let mark = server.requests().len();
    let report = op
        .uninstall(&client, &args(&[], true))
        .await
        .expect("dry run");
    assert_eq!(
        writes_since(&server, mark),
        Vec::<String>::new(),
        "no write"
    );
    assert_eq!(report.cleaned.len(), 4, "{report}");
    assert!(
        report
            .cleaned
            .iter()
            .all(|c| c.finalizer && !c.annotations.is_empty()),
        "{report}"
    );
    let text = report.to_string();
    assert!(
        text.contains("would be cleaned (dry run: nothing was changed)"),
        "{text}"
    );
    assert!(
        text.starts_with("RESOURCE ") && text.contains("FINALIZER  ANNOTATIONS  STATUS"),
        "{text}"
    );

    // One namespace cleaned, then both deleted: the cleaned one goes, the other is stuck on
    // the finalizer (which is what uninstall is for).
    let report = op
        .uninstall(&client, &args(&["team-a"], false))
        .await
        .expect("uninstall");
    assert_eq!(report.cleaned.len(), 2, "{report}");
    let cleaned = kopfexamples(&client, "team-a")
        .get("one")
        .await
        .expect("get");
    assert!(cleaned.metadata.finalizers.unwrap_or_default().is_empty());
    assert!(
        cleaned
            .metadata
            .annotations
            .unwrap_or_default()
            .keys()
            .all(|k| !k.starts_with("kopf.zalando.org/")),
        "no annotation of the operator left"
    );
    // (The fake server deletes a namespace's objects with it, as kube's namespace
    // controller does, and ends the namespace when the last of them is gone.)
    for ns in ["team-a", "team-b"] {
        namespaces
            .delete(ns, &DeleteParams::default())
            .await
            .expect("delete the namespace");
    }
    assert!(
        namespaces.get_opt("team-a").await.expect("get").is_none(),
        "team-a is gone"
    );
    assert!(
        namespaces.get_opt("team-b").await.expect("get").is_some(),
        "team-b waits for the finalizer"
    );
    assert_eq!(
        kopfexamples(&client, "team-b")
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .len(),
        2
    );

    // Everything else: team-b goes too, and then the CRD.
    let report = op
        .uninstall(&client, &args(&[], false))
        .await
        .expect("uninstall -A");
    assert_eq!(
        report.cleaned.len(),
        2,
        "the objects left in team-b: {report}"
    );
    assert!(
        namespaces.get_opt("team-b").await.expect("get").is_none(),
        "team-b is gone"
    );
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.delete("kopfexamples.kopf.dev", &DeleteParams::default())
        .await
        .expect("delete the CRD");
    assert!(
        crds.get_opt("kopfexamples.kopf.dev")
            .await
            .expect("get")
            .is_none(),
        "nothing left behind"
    );

    // Nothing left to do: a second run finds nothing.
    let again = op.uninstall(&client, &args(&[], true)).await;
    assert!(
        again.is_err() || again.as_ref().is_ok_and(|r| r.cleaned.is_empty()),
        "{again:?}"
    );
}

#[test]
fn the_command_needs_namespaces_or_all_of_them() {
    use clap::Parser;
    let parse = |args: &[&str]| kopf::cli::Cli::try_parse_from(args);
    let error = parse(&["op", "uninstall"]).expect_err("which objects?");
    assert!(error.to_string().contains("--namespace"), "{error}");
    let parsed = parse(&["op", "uninstall", "-A", "--dry-run"]).expect("all namespaces");
    assert!(matches!(
        parsed.command,
        kopf::cli::Command::Uninstall(UninstallArgs {
            dry_run: true,
            all_namespaces: true,
            ..
        })
    ));
    let parsed = parse(&["op", "uninstall", "-n", "a", "-n", "b"]).expect("two namespaces");
    assert!(matches!(
        parsed.command,
        kopf::cli::Command::Uninstall(UninstallArgs { ref namespaces, .. }) if namespaces == &["a", "b"]
    ));
    assert!(
        parse(&["op", "uninstall", "-A", "-n", "a"]).is_err(),
        "one or the other"
    );
}

#[tokio::test(start_paused = true)]
async fn an_object_that_cannot_be_cleaned_is_reported_and_the_others_are_cleaned() {
    use kopf::testing::{FaultRule, RequestPattern};
    let server = paused_server().await;
    let client = server.client();
    for name in ["one", "two"] {
        kopfexamples(&client, "default")
            .create(&PostParams::default(), &obj(name, json!({"field": "a"})))
            .await
            .expect("create");
    }
    let running = Running::start(&server, operator()).await;
    running.settled().await;
    running.stop().await;
    server.inject_fault(FaultRule {
        pattern: RequestPattern::any()
            .verb("patch")
            .resource("kopfexamples")
            .name("one"),
        code: 403,
        count: None,
        retry_after: None,
        message: Some("patching is forbidden here".into()),
    });
    let report = operator()
        .uninstall(&client, &args(&["default"], false))
        .await
        .expect("a report");
    assert_eq!(report.cleaned.len(), 1, "{report}");
    assert_eq!(report.cleaned[0].name, "two");
    assert_eq!(report.failed.len(), 1, "{report}");
    let text = report.to_string();
    assert!(
        text.contains("FAILED kopfexamples.kopf.dev default/one") && text.contains("forbidden"),
        "{text}"
    );
}
