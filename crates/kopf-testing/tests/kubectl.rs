//! Conformance: the real kubectl drives the fake API server over HTTP, as a user would. Each
//! test has its own HOME and cache dir.
//!
//! The kubectl is `KOPF_TEST_KUBECTL` if set (a path), else the `kubectl` on the PATH: any
//! supported minor (1.27 to 1.33). Where kubectl's behaviour differs by minor (1.32 and later
//! send protobuf bodies from typed commands), a test asks the kubectl which minor it is and
//! checks that minor's behaviour. `cargo xtask kubectl-matrix` runs this file once per
//! `kubectl.1.NN` binary found (see README.md).
//!
//! Without kubectl these tests fail with a message saying so; to leave them out on purpose,
//! `cargo test --workspace -- --skip kubectl` (cargo reports them as filtered out, not as
//! passed).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use kopf_testing::FakeApiServer;
use serde_json::Value;

struct Kubectl {
    bin: PathBuf,
    home: tempfile::TempDir,
    kubeconfig: PathBuf,
}

/// `KOPF_TEST_KUBECTL`, or the first `kubectl` on the PATH.
fn find_kubectl() -> Result<PathBuf, String> {
    if let Some(given) = std::env::var_os("KOPF_TEST_KUBECTL") {
        let given = PathBuf::from(given);
        return if given.is_file() {
            Ok(given)
        } else {
            Err(format!(
                "KOPF_TEST_KUBECTL={} is not a file",
                given.display()
            ))
        };
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|p| p.join("kubectl"))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| "kubectl is not on the PATH".to_string())
}

fn kubectl_for(server: &FakeApiServer) -> Kubectl {
    let bin = find_kubectl().unwrap_or_else(|e| {
        panic!(
            "{e}; install kubectl (any of 1.27 to 1.33; a prerequisite of the tests), or leave these tests out: cargo test --workspace -- --skip kubectl"
        )
    });
    let home = tempfile::tempdir().expect("temp home");
    let kubeconfig = home.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    Kubectl {
        bin,
        home,
        kubeconfig,
    }
}

/// The minor of a `version` object (`"32"`, or `"32+"` as some vendors' builds say).
fn minor_of(version: &Value) -> u32 {
    let minor = version["minor"].as_str().unwrap_or_default();
    let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no minor version in {version}"))
}

impl Kubectl {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .arg(format!(
                "--cache-dir={}",
                self.home.path().join("cache").display()
            ))
            .env("HOME", self.home.path())
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    async fn try_run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = self.command(args);
        let stdin = stdin.map(str::to_string);
        tokio::task::spawn_blocking(move || {
            let mut child = cmd.spawn().expect("kubectl starts");
            if let Some(text) = stdin {
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(text.as_bytes())
                    .expect("stdin written");
            } else {
                drop(child.stdin.take());
            }
            child.wait_with_output().expect("kubectl finishes")
        })
        .await
        .expect("join")
    }

    async fn run(&self, args: &[&str]) -> String {
        self.run_in(args, None).await
    }

    async fn run_in(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.try_run(args, stdin).await;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {stderr}\n{stdout}"
        );
        stdout
    }

    /// The minor version of the kubectl that talks to this server, from `kubectl version`
    /// against it: a version dispatcher (one vendor's `kubectl` runs `kubectl.1.NN` after the
    /// server's minor) reports the binary it ran, which `--client` alone cannot know.
    async fn client_minor(&self) -> u32 {
        minor_of(&self.json(&["version"]).await["clientVersion"])
    }

    async fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.run(&all).await).expect("kubectl printed JSON")
    }
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

const WORKLOADS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: cm1
  labels: {app: demo}
data:
  k: v
---
apiVersion: v1
kind: Service
metadata:
  name: svc1
  labels: {app: demo}
spec:
  selector: {app: demo}
  ports:
    - {name: http, port: 80}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: dep1
  labels: {app: demo}
spec:
  replicas: 1
  selector:
    matchLabels: {app: demo}
  template:
    metadata:
      labels: {app: demo}
    spec:
      containers:
        - name: main
          image: busybox:1.36
"#;

/// The scenario of the acceptance criteria: CRDs, custom and built-in objects, patches of
/// every type, labels, watch, explain, apply (client- and server-side), chunked lists,
/// namespaces and deletes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scenario() {
    let server = FakeApiServer::start().await.expect("start");
    let k = kubectl_for(&server);
    let crd = examples().join("crd.yaml");
    let obj = examples().join("obj.yaml");
    let crd = crd.to_str().expect("utf-8 path");
    let obj = obj.to_str().expect("utf-8 path");

    // CRD: apply, wait, apply an object, get it.
    assert!(k.run(&["apply", "-f", crd]).await.contains("created"));
    k.run(&[
        "wait",
        "--for=condition=Established",
        "crd/kopfexamples.kopf.dev",
        "--timeout=10s",
    ])
    .await;
    assert!(
        k.run(&["apply", "-f", obj])
            .await
            .contains("kopf-example-1 created")
    );
    let got = k.json(&["get", "kex", "kopf-example-1"]).await;
    assert_eq!(got["spec"]["field"], "value");
    assert_eq!(got["metadata"]["generation"], 1);
    let listed = k.run(&["get", "kopfexamples"]).await;
    assert!(listed.contains("kopf-example-1"), "{listed}");

    // Patches: merge, JSON, status subresource; strategic on a CR is refused as upstream.
    k.run(&[
        "patch",
        "kex",
        "kopf-example-1",
        "--type=merge",
        "-p",
        r#"{"spec":{"field":"merged"}}"#,
    ])
    .await;
    k.run(&[
        "patch",
        "kex",
        "kopf-example-1",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/spec/extra","value":"j"}]"#,
    ])
    .await;
    k.run(&[
        "patch",
        "kex",
        "kopf-example-1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"create_fn":{"message":"hello"}}}"#,
    ])
    .await;
    let refused = k
        .try_run(
            &[
                "patch",
                "kex",
                "kopf-example-1",
                "-p",
                r#"{"spec":{"field":"smp"}}"#,
            ],
            None,
        )
        .await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("application/strategic-merge-patch+json is not supported")
    );
    let got = k.json(&["get", "kex", "kopf-example-1"]).await;
    assert_eq!(got["spec"]["field"], "merged");
    assert_eq!(got["spec"]["extra"], "j");
    assert_eq!(got["status"]["create_fn"]["message"], "hello");
    // Server-side Tables carry the CRD's printer columns.
    let table = k.run(&["get", "kex"]).await;
    assert!(
        table.contains("DURATION") && table.contains("MESSAGE") && table.contains("hello"),
        "{table}"
    );
    assert_eq!(got["metadata"]["generation"], 3);

    // Labels, annotations, selectors.
    k.run(&["label", "kex", "kopf-example-1", "tier=gold"])
        .await;
    k.run(&["annotate", "kex", "kopf-example-1", "note=yes"])
        .await;
    assert!(
        k.run(&["get", "kex", "-l", "tier=gold"])
            .await
            .contains("kopf-example-1")
    );
    let none = k.try_run(&["get", "kex", "-l", "tier=silver"], None).await;
    assert!(String::from_utf8_lossy(&none.stderr).contains("No resources found"));
    let got = k.json(&["get", "kex", "kopf-example-1"]).await;
    assert_eq!(got["metadata"]["annotations"]["note"], "yes");

    // Watch: `get -w` prints the change made while it runs.
    let watch = k.try_run(
        &[
            "get",
            "kex",
            "-w",
            "--request-timeout=6s",
            "--output-watch-events",
        ],
        None,
    );
    let change = async {
        // Change the object once kubectl's watch is open (kubectl may start slowly).
        for _ in 0..200 {
            if server
                .watches()
                .iter()
                .any(|w| w.resource.ends_with("/kopfexamples"))
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        k.run(&["label", "kex", "kopf-example-1", "watched=yes"])
            .await;
    };
    let (out, ()) = tokio::join!(watch, change);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("ADDED") && printed.contains("MODIFIED"),
        "{printed}"
    );

    // Explain works from the generated OpenAPI v3 document.
    let explained = k.run(&["explain", "kopfexamples.spec"]).await;
    assert!(explained.contains("KopfExample"), "{explained}");

    // Built-ins: client-side apply, update, strategic patch, label, server-side apply, delete.
    k.run_in(&["apply", "-f", "-"], Some(WORKLOADS)).await;
    let updated = WORKLOADS
        .replace("k: v", "k: w")
        .replace("replicas: 1", "replicas: 2");
    let out = k.run_in(&["apply", "-f", "-"], Some(&updated)).await;
    assert!(out.contains("configmap/cm1 configured"), "{out}");
    assert_eq!(k.json(&["get", "cm", "cm1"]).await["data"]["k"], "w");
    assert_eq!(
        k.json(&["get", "deploy", "dep1"]).await["spec"]["replicas"],
        2
    );
    k.run(&[
        "patch",
        "svc",
        "svc1",
        "-p",
        r#"{"spec":{"ports":[{"name":"https","port":443}]}}"#,
    ])
    .await;
    let ports = k.json(&["get", "svc", "svc1"]).await["spec"]["ports"]
        .as_array()
        .map(Vec::len);
    assert_eq!(ports, Some(2), "strategic merge by port");
    k.run(&["label", "deploy", "dep1", "stage=test"]).await;
    assert!(
        k.run(&["get", "all", "-l", "stage=test"])
            .await
            .contains("dep1")
    );
    let ssa = k
        .run_in(&["apply", "--server-side", "-f", "-"], Some(&updated))
        .await;
    assert!(ssa.contains("serverside-applied"), "{ssa}");
    // A value owned by the client-side apply manager conflicts, as on a real server.
    let changed = updated.replace("k: w", "k: ssa");
    let conflict = k
        .try_run(&["apply", "--server-side", "-f", "-"], Some(&changed))
        .await;
    assert!(!conflict.status.success());
    assert!(String::from_utf8_lossy(&conflict.stderr).contains("Apply failed with 1 conflict"));
    k.run_in(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&changed),
    )
    .await;
    assert_eq!(k.json(&["get", "cm", "cm1"]).await["data"]["k"], "ssa");

    // Chunked lists.
    for i in 0..5 {
        k.run_in(
            &["apply", "-f", "-"],
            Some(&format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: many-{i}\n"
            )),
        )
        .await;
    }
    server.clear_requests();
    let many = k.run(&["get", "cm", "--chunk-size=2", "-o", "name"]).await;
    assert_eq!(
        many.lines().filter(|l| l.contains("many-")).count(),
        5,
        "{many}"
    );
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.query.contains("continue=")),
        "pages were fetched"
    );

    // Namespaces: create, use, delete (content goes with it).
    k.run_in(
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n"),
    )
    .await;
    k.run_in(
        &["apply", "-n", "team", "-f", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: inside\n"),
    )
    .await;
    k.run(&["delete", "namespace", "team", "--timeout=10s"])
        .await;
    let gone = k.try_run(&["get", "namespace", "team"], None).await;
    assert!(String::from_utf8_lossy(&gone.stderr).contains("not found"));

    // Deletes wait for the object to disappear.
    k.run_in(&["delete", "-f", "-"], Some(WORKLOADS)).await;
    k.run(&["delete", "-f", obj]).await;
    let gone = k.try_run(&["get", "kex", "kopf-example-1"], None).await;
    assert!(String::from_utf8_lossy(&gone.stderr).contains("not found"));
}

/// `kubectl version` shows the version the server is configured with; a version dispatcher
/// (a `kubectl` that reports itself as `-dispatcher`) runs the binary of the server's minor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_version_shows_the_configured_server_version() {
    let server = FakeApiServer::builder()
        .version("1", "30")
        .start()
        .await
        .expect("start");
    let k = kubectl_for(&server);
    let v = k.json(&["version"]).await;
    assert_eq!(v["serverVersion"]["minor"], "30", "{v}");
    assert_eq!(v["serverVersion"]["gitVersion"], "v1.30.0", "{v}");
    let client = k.json(&["version", "--client"]).await["clientVersion"].clone();
    let dispatcher = client["gitVersion"]
        .as_str()
        .is_some_and(|g| g.contains("dispatcher"));
    if dispatcher {
        assert_eq!(
            v["clientVersion"]["minor"], "30",
            "the dispatcher ran kubectl 1.30: {v}"
        );
    } else {
        assert_eq!(v["clientVersion"], client, "the same binary answered");
    }
    // Discovery-based commands.
    let resources = k.run(&["api-resources"]).await;
    assert!(
        resources.contains("configmaps") && resources.contains("deployments"),
        "{resources}"
    );
}

/// Over HTTPS kubectl verifies the fake's certificate with the kubeconfig's
/// `certificate-authority-data`, and refuses it without (as with any cluster).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_over_https_verifies_the_generated_ca() {
    let server = FakeApiServer::builder()
        .tls(true)
        .start()
        .await
        .expect("start");
    assert!(server.url().starts_with("https://127.0.0.1:"));
    let k = kubectl_for(&server);
    k.run_in(
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: tls}\ndata: {a: b}\n"),
    )
    .await;
    assert_eq!(k.json(&["get", "cm", "tls"]).await["data"]["a"], "b");
    let ns = k
        .run(&[
            "--server",
            &server.url().replace("127.0.0.1", "localhost"),
            "get",
            "ns",
            "default",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(ns.trim(), "namespace/default");
    // Without the CA, the server is not trusted.
    let kubeconfig = std::fs::read_to_string(&k.kubeconfig).expect("kubeconfig");
    assert!(kubeconfig.contains("certificate-authority-data: "));
    let no_ca: String = kubeconfig
        .lines()
        .filter(|l| !l.contains("certificate-authority-data"))
        .map(|l| format!("{l}\n"))
        .collect();
    let no_ca_path = k.home.path().join("kubeconfig-without-ca");
    std::fs::write(&no_ca_path, no_ca).expect("kubeconfig");
    let kubeconfig_flag = format!("--kubeconfig={}", no_ca_path.display());
    let untrusted = k
        .try_run(&[&kubeconfig_flag, "get", "cm", "tls"], None)
        .await;
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert!(!untrusted.status.success());
    assert!(
        stderr.contains("x509: certificate signed by unknown authority"),
        "{stderr}"
    );
    let http = server.url().replace("https", "http");
    let plain = k.try_run(&["--server", &http, "get", "cm"], None).await;
    assert!(
        !plain.status.success(),
        "plain HTTP is not served on a TLS port"
    );
}

/// Typed commands (`kubectl create configmap` and the like): kubectl 1.32 and later send
/// protobuf bodies, earlier ones JSON; the objects come out the same. The server says it is
/// 1.33, so a version dispatcher runs a protobuf-speaking kubectl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_typed_commands_send_protobuf_from_1_32_and_json_before() {
    let server = FakeApiServer::builder()
        .version("1", "33")
        .start()
        .await
        .expect("start");
    let k = kubectl_for(&server);
    let protobuf = k.client_minor().await >= 32;
    k.run(&[
        "create",
        "configmap",
        "pb",
        "--from-literal=a=b",
        "--from-literal=c=",
    ])
    .await;
    let cm = k.json(&["get", "cm", "pb"]).await;
    assert_eq!(cm["data"], serde_json::json!({"a": "b", "c": ""}));
    assert!(
        cm["metadata"].get("generateName").is_none(),
        "empty strings are omitted"
    );
    k.run(&["create", "secret", "generic", "sec", "--from-literal=p=q"])
        .await;
    assert_eq!(k.json(&["get", "secret", "sec"]).await["data"]["p"], "cQ==");
    k.run(&["create", "namespace", "pbns"]).await;
    assert_eq!(
        k.json(&["get", "ns", "pbns"]).await["status"]["phase"],
        "Active"
    );
    k.run(&["create", "serviceaccount", "robot"]).await;
    assert_eq!(k.run(&["auth", "can-i", "get", "pods"]).await.trim(), "yes");
    // configmap, secret, namespace, serviceaccount, the SelfSubjectAccessReview.
    let posted: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .map(|r| r.content_type)
        .collect();
    let expected = if protobuf {
        "application/vnd.kubernetes.protobuf"
    } else {
        "application/json"
    };
    assert!(
        posted.len() >= 5 && posted.iter().all(|t| t.starts_with(expected)),
        "every body is {expected}: {posted:?}"
    );
    // A kind the fake has no protobuf decoder for is refused, saying which; as JSON it is
    // created.
    let deployment = k
        .try_run(&["create", "deployment", "d", "--image=busybox"], None)
        .await;
    let stderr = String::from_utf8_lossy(&deployment.stderr);
    if protobuf {
        assert!(!deployment.status.success());
        assert!(stderr.contains("not apps/v1 Deployment"), "{stderr}");
    } else {
        assert!(deployment.status.success(), "{stderr}");
        let d = k.json(&["get", "deployment", "d"]).await;
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["image"],
            "busybox"
        );
    }
}

/// Admission webhooks as kubectl users see them: denials on stderr, warnings printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shows_webhook_denials_and_warnings() {
    use common::webhook::{TestWebhook, admission_response, configuration, rule, webhook};
    let hook = TestWebhook::start(std::sync::Arc::new(|_, review: &Value| {
        let tier = review
            .pointer("/request/object/metadata/labels/tier")
            .and_then(Value::as_str)
            .unwrap_or("");
        if tier == "bad" {
            admission_response(
                review,
                false,
                serde_json::json!({"status": {"code": 422, "reason": "Invalid",
                    "message": "tier \"bad\" is not allowed"}}),
            )
            .into()
        } else {
            admission_response(
                review,
                true,
                serde_json::json!({"warnings": ["the tier label is deprecated", "use the \"level\" label"]}),
            )
            .into()
        }
    }))
    .await;
    let server = FakeApiServer::start().await.expect("start");
    server
        .apply_object(configuration(
            false,
            "tiers",
            vec![webhook(
                "tier.kopf.dev",
                hook.client_config("/validate"),
                rule(&["CREATE", "UPDATE"], "", "v1", &["configmaps"]),
                serde_json::json!({}),
            )],
        ))
        .expect("configuration");
    let k = kubectl_for(&server);
    let manifest = |name: &str, tier: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels:\n    tier: {tier}\ndata:\n  k: v\n"
        )
    };
    let denied = k
        .try_run(&["apply", "-f", "-"], Some(&manifest("bad1", "bad")))
        .await;
    assert!(!denied.status.success());
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(
        stderr.contains(
            "admission webhook \"tier.kopf.dev\" denied the request: tier \"bad\" is not allowed"
        ),
        "{stderr}"
    );
    assert!(
        k.try_run(&["get", "cm", "bad1"], None)
            .await
            .stderr
            .starts_with(b"Error from server (NotFound)")
    );
    let created = k
        .try_run(&["apply", "-f", "-"], Some(&manifest("good1", "gold")))
        .await;
    let stderr = String::from_utf8_lossy(&created.stderr);
    assert!(created.status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines.contains(&"Warning: the tier label is deprecated"),
        "{stderr}"
    );
    assert!(
        lines.contains(&"Warning: use the \"level\" label"),
        "{stderr}"
    );
    // Updates are reviewed too: kubectl label goes through the webhook.
    let relabel = k
        .try_run(&["label", "cm", "good1", "tier=bad", "--overwrite"], None)
        .await;
    assert!(!relabel.status.success());
    assert!(String::from_utf8_lossy(&relabel.stderr).contains("tier \"bad\" is not allowed"));
}

/// `kubectl get <plural>.<version>.<group>` reads objects converted by a conversion webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_objects_converted_to_another_version() {
    use common::webhook::{TestWebhook, conversion_crd, conversion_handler};
    let hook = TestWebhook::start(conversion_handler(Default::default())).await;
    let server = FakeApiServer::start().await.expect("start");
    server.apply_object(conversion_crd(&hook)).expect("CRD");
    server
        .apply_object(
            serde_json::json!({"apiVersion": "kopf.dev/v1", "kind": "KopfExample",
            "metadata": {"name": "stored-v1", "namespace": "default"}, "spec": {"field": "one"}}),
        )
        .expect("object");
    let k = kubectl_for(&server);
    let got = k
        .json(&["get", "kopfexamples.v2.kopf.dev", "stored-v1"])
        .await;
    assert_eq!(got["apiVersion"], "kopf.dev/v2");
    assert_eq!(got["spec"], serde_json::json!({"value": "one"}));
    // Written through v2 with kubectl, stored in v1.
    k.run_in(
        &["apply", "-f", "-"],
        Some("apiVersion: kopf.dev/v2\nkind: KopfExample\nmetadata:\n  name: written-v2\nspec:\n  value: two\n"),
    )
    .await;
    let stored = server
        .objects()
        .into_iter()
        .find(|o| o["metadata"]["name"] == "written-v2")
        .expect("stored");
    assert_eq!(stored["apiVersion"], "kopf.dev/v1");
    assert_eq!(stored["spec"], serde_json::json!({"field": "two"}));
    let list = k.json(&["get", "kopfexamples.v2.kopf.dev"]).await;
    let items: Vec<(&str, &Value)> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| (i["apiVersion"].as_str().unwrap_or(""), &i["spec"]))
        .collect();
    assert_eq!(
        items,
        [
            ("kopf.dev/v2", &serde_json::json!({"value": "one"})),
            ("kopf.dev/v2", &serde_json::json!({"value": "two"}))
        ]
    );
    let table = k.run(&["get", "kopfexamples.v2.kopf.dev"]).await;
    assert!(
        table.contains("stored-v1") && table.contains("written-v2"),
        "{table}"
    );
    let v1 = k
        .json(&["get", "kopfexamples.v1.kopf.dev", "written-v2"])
        .await;
    assert_eq!(v1["spec"], serde_json::json!({"field": "two"}));
}

/// `kubectl auth can-i --as`: answered from the Roles and bindings applied, not "yes" to
/// everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_follows_the_rbac_objects() {
    let server = FakeApiServer::start().await.expect("start");
    server
        .apply_yaml(
            "rbac.yaml",
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: cm-reader, namespace: default}\n\
             rules: [{apiGroups: [''], resources: [configmaps], verbs: [get, list]}]\n---\n\
             apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: robot-reads, namespace: default}\n\
             roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm-reader}\n\
             subjects: [{kind: ServiceAccount, name: robot, namespace: default}]\n",
        )
        .expect("applied");
    let k = kubectl_for(&server);
    let robot = "--as=system:serviceaccount:default:robot";
    let can = |out: std::process::Output| String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(
        can(k
            .try_run(&["auth", "can-i", "list", "configmaps", robot], None)
            .await),
        "yes"
    );
    for denied in [
        vec!["auth", "can-i", "delete", "configmaps", robot],
        vec![
            "auth",
            "can-i",
            "list",
            "configmaps",
            "-n",
            "kube-system",
            robot,
        ],
        vec!["auth", "can-i", "list", "secrets", robot],
    ] {
        let out = k.try_run(&denied, None).await;
        assert_eq!(can(out.clone()), "no", "{denied:?}");
        assert!(!out.status.success(), "kubectl says no with a failure");
    }
    // Without --as: the server's own user, an administrator.
    assert_eq!(
        k.run(&["auth", "can-i", "delete", "nodes"]).await.trim(),
        "yes"
    );
}

/// What every cluster has, as kubectl shows it: `default/kubernetes`, the component
/// statuses, the bootstrap `view` role (aggregated), `kubectl auth can-i` through it.
#[tokio::test]
async fn kubectl_sees_the_bootstrap_content() {
    let server = FakeApiServer::start().await.expect("start");
    let k = kubectl_for(&server);
    let svc = k
        .json(&["get", "service", "kubernetes", "-o", "json"])
        .await;
    assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1");
    let cs = k.json(&["get", "componentstatuses", "-o", "json"]).await;
    assert_eq!(cs["items"].as_array().map(Vec::len), Some(3), "{cs}");
    let view = k.json(&["get", "clusterrole", "view", "-o", "json"]).await;
    assert!(view["aggregationRule"].is_object(), "{view}");
    k.run_in(
        &[
            "create",
            "rolebinding",
            "viewer",
            "--clusterrole=view",
            "--user=vera",
        ],
        None,
    )
    .await;
    let can = |out: std::process::Output| String::from_utf8_lossy(&out.stdout).trim().to_string();
    let vera = "--as=vera";
    assert_eq!(
        can(k
            .try_run(&["auth", "can-i", "list", "pods", vera], None)
            .await),
        "yes"
    );
    assert_eq!(
        can(k
            .try_run(&["auth", "can-i", "get", "secrets", vera], None)
            .await),
        "no"
    );
}
