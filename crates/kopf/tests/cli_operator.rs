//! The command line of operator binaries as a new user meets it: the operator's own name and
//! version, the hint of `run --fake` for kubectl and its kubeconfig of its own, the namespaces
//! it watches as given, and what to do when a CRD is missing, for the mode it runs in.
//! The tests that run binaries run the `minimal` example (built here if missing).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use kopf::cli::{About, Cli, Command, PROBE_ANSWER};
use kopf_testing::{FakeApiServer, OperatorRunner, Signal};

/// An example's binary, built once per test process (`cargo test --test cli_operator`
/// alone does not build the examples, and a stale one would test old code).
fn example_binary(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.iter().any(|b| b == name) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "-q", "-p", "kopf", "--example", name])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the example {name}");
        built.push(name.to_string());
    }
    dir.join("examples").join(name)
}

/// Runs the minimal example to its end (30 s at most) in a fresh HOME, with no KUBECONFIG.
fn minimal(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let home = tempfile::tempdir().expect("tempdir");
    let mut command = std::process::Command::new(example_binary("minimal"));
    command
        .args(args)
        .env("HOME", home.path())
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("the operator runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The one line of a failed start that says what went wrong.
fn error_line(output: &Output) -> String {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("Error")).collect();
    assert_eq!(errors.len(), 1, "one error line: {stderr}");
    errors[0].to_string()
}

/// A manifest without the example CRD (a ConfigMap).
fn no_crd_manifest(dir: &tempfile::TempDir) -> PathBuf {
    let path = dir.path().join("configmap.yaml");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: default}\n",
    )
    .expect("write");
    path
}

/// What `--version` and `--help` print for this about (clap's rendering, as the binary
/// prints it).
fn rendered(about: &About, flag: &str) -> String {
    let error = Cli::try_parse_for(about, ["my-operator", flag])
        .err()
        .unwrap_or_else(|| panic!("{flag} is answered"));
    error.to_string()
}

#[test]
fn the_operator_has_its_own_name_version_and_description() {
    let version = env!("CARGO_PKG_VERSION");
    let about = About::new("my-operator", "1.2.0").description("Greets everyone.");
    assert_eq!(
        rendered(&about, "--version"),
        format!("my-operator 1.2.0 (kopf-rs {version})\n")
    );
    let help = rendered(&about, "--help");
    assert!(help.starts_with("Greets everyone.\n"), "{help}");
    assert!(
        help.contains("run ") && help.contains("rbac ") && !help.contains("__kopf-probe"),
        "the probe is hidden: {help}"
    );
    assert_eq!(
        about.probe_answer(),
        format!("{PROBE_ANSWER}my-operator 1.2.0 (kopf-rs {version})")
    );

    // What a binary knows without help from its crate: its name, kopf-rs's version.
    let bare = About::from_binary();
    assert_eq!(bare.version, None);
    assert_eq!(bare.version_text(), format!("(kopf-rs {version})"));
    assert!(rendered(&bare, "--help").starts_with("A Kubernetes operator built with kopf-rs.\n"));

    // The macro reads the package of the crate it is written in: here, kopf's tests.
    let here = kopf::about!();
    assert_eq!(here.name, "kopf");
    assert_eq!(here.version.as_deref(), Some(version));
    assert_eq!(
        here.description.as_deref(),
        Some(env!("CARGO_PKG_DESCRIPTION"))
    );
    assert_eq!(
        About::from_cargo(Some("op"), Some(""), Some("")),
        About {
            name: "op".into(),
            version: None,
            description: None
        },
        "empty values are none"
    );

    // clap's own parse (no about): a neutral name, kopf-rs's version.
    let plain = clap::Parser::try_parse_from(["operator", "--version"])
        .map(|cli: Cli| cli.command)
        .expect_err("answered")
        .to_string();
    assert_eq!(plain, format!("operator (kopf-rs {version})\n"));
    let probe: Cli = clap::Parser::try_parse_from(["operator", "__kopf-probe"]).expect("parses");
    assert!(matches!(probe.command, Command::Probe));
}

#[test]
fn the_binary_answers_version_and_the_probe() {
    let version = env!("CARGO_PKG_VERSION");
    let out = minimal(&["--version"], &[]);
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), format!("minimal (kopf-rs {version})\n"));
    let out = minimal(&["__kopf-probe"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("{PROBE_ANSWER}minimal (kopf-rs {version})\n")
    );
    assert_eq!(text(&out.stderr), "", "nothing else: no logging set up");
}

#[test]
fn a_missing_crd_is_explained_for_the_mode_the_operator_runs_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = no_crd_manifest(&dir);
    let manifest_text = manifest.to_string_lossy().into_owned();

    // run --fake: --apply the CRD.
    let line = error_line(&minimal(&["run", "--fake", "--apply", &manifest_text], &[]));
    assert!(
        line.contains(r#"no served resource matches "kopfexamples""#)
            && line.contains(&format!(
                "none of the manifests applied to the embedded API server of --fake ({manifest_text})"
            ))
            && line.contains("--apply FILE (`run --fake --apply crd.yaml`)")
            && !line.contains("kubectl get crd"),
        "{line}"
    );

    // rbac: --apply the CRD, or --cluster.
    let line = error_line(&minimal(&["rbac", "--apply", &manifest_text], &[]));
    assert!(
        line.contains(r#"no served resource matches "kopfexamples""#)
            && line.contains("the embedded API server of `rbac`")
            && line.contains("`rbac --apply crd.yaml`")
            && line.contains("`rbac --cluster`")
            && !line.contains("kubectl get crd"),
        "{line}"
    );
}

#[tokio::test]
async fn a_missing_crd_on_a_cluster_is_looked_for_with_kubectl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bare = FakeApiServer::start().await.expect("start");
    let kubeconfig = dir.path().join("kubeconfig");
    bare.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    // (A blocking process: on its own thread, the server keeps serving.)
    let output = tokio::task::spawn_blocking(move || {
        minimal(&["rbac", "--cluster"], &[("KUBECONFIG", &kubeconfig)])
    })
    .await
    .expect("joined");
    let line = error_line(&output);
    assert!(
        line.contains(r#"no served resource matches "kopfexamples""#)
            && line.contains("is its CustomResourceDefinition applied? (kubectl get crd)")
            && !line.contains("--apply"),
        "{line}"
    );
}

/// The `--fake` banner: where the API server is and how kubectl reaches it.
fn banner(op: &OperatorRunner) -> String {
    let logs = op.logs();
    logs.lines()
        .find(|l| l.contains("Point kubectl at it"))
        .unwrap_or_else(|| panic!("a banner: {logs}"))
        .to_string()
}

/// The kubeconfig path of a `--fake` banner.
fn banner_kubeconfig(op: &OperatorRunner) -> PathBuf {
    let banner = banner(op);
    let path = banner
        .split("KUBECONFIG=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("a kubeconfig in {banner}"));
    PathBuf::from(path)
}

fn fake_operator(args: &[&str]) -> OperatorRunner {
    OperatorRunner::command(example_binary("minimal"))
        .args(["run", "--fake"])
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("KOPF_RUN_FAKE_KUBECONFIG")
        .start()
        .expect("the operator starts")
}

#[tokio::test]
async fn fake_operators_side_by_side_have_their_own_kubeconfig_and_name_their_resources() {
    let mut one = fake_operator(&["-n", "team-*"]);
    let mut two = fake_operator(&[]);
    for op in [&mut one, &mut two] {
        op.wait_for_log("watching", Duration::from_secs(30))
            .await
            .expect("watching");
    }
    let (path_one, path_two) = (banner_kubeconfig(&one), banner_kubeconfig(&two));
    assert_ne!(path_one, path_two, "one kubeconfig per process");
    for (op, path) in [(&one, &path_one), (&two, &path_two)] {
        assert!(
            path.starts_with(std::env::temp_dir())
                && path.to_string_lossy().contains(&format!(
                    "kopf-fake-minimal-{}{}kubeconfig",
                    op.pid(),
                    std::path::MAIN_SEPARATOR
                )),
            "{}",
            path.display()
        );
        assert!(path.is_file(), "{} is written", path.display());
        let banner = banner(op);
        assert!(
            banner.ends_with(&format!(
                "KUBECONFIG={} kubectl get kopfexamples",
                path.display()
            )),
            "the served resource: {banner}"
        );
    }
    // The namespaces watched, as given.
    assert!(
        one.has_logged("watching namespaces=team-* resource=kopfexamples"),
        "{}",
        one.logs()
    );
    assert!(
        two.has_logged("watching namespaces=* resource=kopfexamples"),
        "{}",
        two.logs()
    );
    // Each removes its own at exit.
    for (op, path) in [(&mut one, &path_one), (&mut two, &path_two)] {
        op.signal(Signal::Term).await.expect("SIGTERM");
        let status = op.wait(Duration::from_secs(30)).await.expect("exits");
        assert!(status.success(), "{status}: {}", op.logs());
        assert!(!path.exists(), "{} is removed", path.display());
        assert!(
            !path.parent().is_some_and(Path::exists),
            "and its directory"
        );
    }
}

/// A kube client from a kubeconfig file.
async fn kubeconfig_client(path: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("a kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("a configuration");
    kube::Client::try_from(config).expect("a client")
}

/// `--fake-tls` and `fake-apiserver --tls`: HTTPS, with the generated CA in the kubeconfig;
/// the operator's own client trusts it (it handles the example object).
#[tokio::test]
async fn the_fake_api_server_serves_https_when_asked() {
    let mut op = fake_operator(&["--fake-tls"]);
    op.wait_for_log("Handler 'create_fn' succeeded", Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}: {}", op.logs()));
    assert!(
        op.has_logged("Running against the embedded fake API server at https://127.0.0.1:"),
        "{}",
        op.logs()
    );
    let path = banner_kubeconfig(&op);
    let text = std::fs::read_to_string(&path).expect("kubeconfig");
    assert!(text.contains("certificate-authority-data: "), "{text}");
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(kubeconfig_client(&path).await);
    assert!(namespaces.get("default").await.is_ok());
    op.signal(Signal::Term).await.expect("SIGTERM");
    assert!(
        op.wait(Duration::from_secs(30))
            .await
            .expect("exits")
            .success()
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubeconfig");
    let mut server = OperatorRunner::command(example_binary("minimal"))
        .args(["fake-apiserver", "--tls", "--kubeconfig"])
        .arg(&path)
        .env_remove("RUST_LOG")
        .start()
        .expect("the server starts");
    server
        .wait_for_log("listening on https://127.0.0.1:", Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}: {}", server.logs()));
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(kubeconfig_client(&path).await);
    assert!(namespaces.get("default").await.is_ok());
    server.signal(Signal::Term).await.expect("SIGTERM");
    assert!(
        server
            .wait(Duration::from_secs(30))
            .await
            .expect("exits")
            .success()
    );
}

#[tokio::test]
async fn a_chosen_fake_kubeconfig_is_kept_and_namespace_exclusions_stay_with_their_pattern() {
    let dir = tempfile::tempdir().expect("tempdir");
    let chosen = dir.path().join("kc");
    let mut op = fake_operator(&[
        "--fake-kubeconfig",
        &chosen.to_string_lossy(),
        "-n",
        "team-*,!team-legacy",
        "-n",
        "ops",
    ]);
    op.wait_for_log("watching", Duration::from_secs(30))
        .await
        .expect("watching");
    assert_eq!(banner_kubeconfig(&op), chosen);
    assert!(
        op.has_logged("watching namespaces=team-*,!team-legacy,ops resource=kopfexamples"),
        "{}",
        op.logs()
    );
    // The example object is in `default`: not served. One in `ops`, created after it, is:
    // once that one is handled, the example object would have been too.
    let client = kubeconfig_client(&chosen).await;
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let ops = serde_json::from_value(serde_json::json!({"metadata": {"name": "ops"}}))
        .expect("a namespace");
    namespaces
        .create(&Default::default(), &ops)
        .await
        .expect("namespace ops");
    let kind = kube::core::GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample");
    let ar = kube::core::ApiResource::from_gvk_with_plural(&kind, "kopfexamples");
    let served: kube::Api<kube::core::DynamicObject> =
        kube::Api::namespaced_with(client, "ops", &ar);
    let object = serde_json::from_value(serde_json::json!({
        "apiVersion": "kopf.dev/v1", "kind": "KopfExample",
        "metadata": {"name": "served"}, "spec": {"field": "x"},
    }))
    .expect("an object");
    served
        .create(&Default::default(), &object)
        .await
        .expect("created in ops");
    op.wait_for_log("Handler 'create_fn' succeeded", Duration::from_secs(30))
        .await
        .expect("the object in ops is handled");
    let handled: Vec<String> = op
        .logs()
        .lines()
        .filter(|l| l.contains("Handler 'create_fn' succeeded"))
        .map(str::to_string)
        .collect();
    assert!(
        handled.len() == 1 && handled[0].contains("served"),
        "only the object in ops: {handled:?}"
    );
    op.signal(Signal::Term).await.expect("SIGTERM");
    let status = op.wait(Duration::from_secs(30)).await.expect("exits");
    assert!(status.success(), "{status}");
    assert!(chosen.is_file(), "a kubeconfig the user chose is kept");
}

#[tokio::test]
async fn a_stop_signal_right_after_the_banner_stops_gracefully_and_cleans_up() {
    for _ in 0..3 {
        let mut op = fake_operator(&[]);
        op.wait_for_log("Point kubectl at it", Duration::from_secs(30))
            .await
            .expect("the banner");
        let path = banner_kubeconfig(&op);
        op.signal(Signal::Term).await.expect("SIGTERM");
        let status = op.wait(Duration::from_secs(30)).await.expect("exits");
        assert!(status.success(), "{status}: {}", op.logs());
        assert!(op.has_logged("Stop requested"), "{}", op.logs());
        assert!(!path.exists(), "{} is removed", path.display());
    }
}

/// `rbac --verify --as` a ServiceAccount: ❌ for exactly what its ClusterRole lacks and a
/// failing exit status, then, with the generated RBAC applied, all ✅ and success.
#[tokio::test]
async fn rbac_verify_shows_the_missing_permissions_until_they_are_granted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = FakeApiServer::start().await.expect("start");
    for manifest in kopf::cli::example_manifests() {
        server.apply_file(manifest).expect("the example's CRDs");
    }
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let generated = tokio::task::spawn_blocking(|| minimal(&["rbac"], &[]))
        .await
        .expect("joined");
    assert!(generated.status.success(), "{}", text(&generated.stderr));
    let generated = text(&generated.stdout);
    server.apply_yaml("rbac.yaml", &generated).expect("applied");
    // The same ClusterRole without `patch` on kopfexamples and without Events.
    server
        .apply_object(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "minimal"},
            "rules": [
                {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["list", "watch"]},
                {"apiGroups": ["kopf.dev"], "resources": ["kopfexamples"], "verbs": ["list", "watch"]},
                {"apiGroups": ["kopf.dev"], "resources": ["kopfexamples/status"], "verbs": ["patch"]},
                {"apiGroups": ["kopf.dev"], "resources": ["clusterkopfpeerings", "kopfpeerings"], "verbs": ["get", "list", "watch", "patch"]},
            ],
        }))
        .expect("the incomplete role");
    let verify = move || {
        let kubeconfig = kubeconfig.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                minimal(
                    &[
                        "rbac",
                        "--verify",
                        "--as",
                        "system:serviceaccount:default:minimal",
                    ],
                    &[("KUBECONFIG", &kubeconfig)],
                )
            })
            .await
            .expect("joined")
        }
    };
    let refused = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .filter(|l| l.ends_with('❌'))
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .collect()
    };

    let out = verify().await;
    let stdout = text(&out.stdout);
    assert_eq!(
        refused(&stdout),
        ["events create", "kopfexamples.kopf.dev patch"],
        "{stdout}"
    );
    let granted = stdout.lines().filter(|l| l.ends_with('✅')).count();
    assert_eq!(granted, 13, "{stdout}");
    assert!(
        stdout.contains("# Missing: 2 of 15.")
            && stdout.contains(
                "- apiGroups:\n  - kopf.dev\n  resources:\n  - kopfexamples\n  verbs:\n  - patch\n"
            ),
        "the rules to add: {stdout}"
    );
    assert!(
        error_line(&out).contains(
            "2 of the 15 permissions the operator needs are missing for system:serviceaccount:default:minimal"
        ),
        "{}",
        text(&out.stderr)
    );

    server.apply_yaml("rbac.yaml", &generated).expect("applied");
    let out = verify().await;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(refused(&stdout).is_empty(), "{stdout}");
    assert!(stdout.contains("# All 15 present."), "{stdout}");
}

/// `olm`: a bundle of the minimal operator (its CRD from its development manifests) that
/// passes the bundle checks; a bundle without its CRD does not.
#[test]
fn olm_writes_a_bundle_that_passes_the_checks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bundle = dir.path().join("bundle");
    let out = minimal(
        &[
            "olm",
            "--image",
            "registry.example.com/minimal:0.3.1",
            "--bundle-version",
            "0.3.1",
            "--dir",
            &bundle.to_string_lossy(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(kopf::cli::validate_bundle(&bundle), Vec::<String>::new());
    let csv_path = bundle.join("manifests/minimal.clusterserviceversion.yaml");
    let csv: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&csv_path).expect("the CSV"))
            .expect("YAML");
    assert_eq!(csv["metadata"]["name"], "minimal.v0.3.1");
    assert_eq!(
        csv["spec"]["customresourcedefinitions"]["owned"][0]["name"],
        "kopfexamples.kopf.dev"
    );
    let rules = &csv["spec"]["install"]["spec"]["clusterPermissions"][0]["rules"];
    assert!(
        rules
            .as_array()
            .expect("rules")
            .iter()
            .any(|r| r["resources"][0] == "kopfexamples"
                && r["verbs"]
                    .as_array()
                    .is_some_and(|v| v.iter().any(|v| v == "patch"))),
        "the rules of `rbac`: {rules}"
    );
    let deployment = &csv["spec"]["install"]["spec"]["deployments"][0]["spec"];
    assert_eq!(
        deployment["template"]["spec"]["containers"][0]["image"],
        "registry.example.com/minimal:0.3.1"
    );
    let examples: Vec<serde_json::Value> = serde_json::from_str(
        csv["metadata"]["annotations"]["alm-examples"]
            .as_str()
            .expect("examples"),
    )
    .expect("JSON");
    assert_eq!(examples[0]["kind"], "KopfExample");
    let printed = text(&out.stdout);
    assert!(printed.contains("metadata/annotations.yaml"), "{printed}");

    // Without its CRD, the bundle fails the checks.
    std::fs::remove_file(bundle.join("manifests/kopf.dev_kopfexamples.yaml")).expect("remove");
    assert_eq!(
        kopf::cli::validate_bundle(&bundle),
        ["the owned CRD kopfexamples.kopf.dev is not in manifests/"]
    );
    // A version that is not SemVer: the checks refuse the bundle.
    let out = minimal(
        &[
            "olm",
            "--image",
            "x",
            "--bundle-version",
            "1.2",
            "--dir",
            &dir.path().join("b2").to_string_lossy(),
        ],
        &[],
    );
    assert!(
        error_line(&out).contains("spec.version \"1.2\" is not a SemVer version"),
        "{}",
        text(&out.stderr)
    );
}
