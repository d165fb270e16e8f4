//! Conformance: a CRD's `additionalPrinterColumns` in `kubectl get` (server-side Tables),
//! evaluated as kube-apiserver evaluates them: kube's JSONPath dialect (filters, recursive
//! descent, slices, negative indices), the first result as the column's value. The real
//! `kubectl` on the PATH prints the server's Table, and its own client-side
//! `-o custom-columns` evaluates the same paths with kube's JSONPath code (joining all
//! results where the server takes the first).
//!
//! These tests need `kubectl` on the PATH (a prerequisite of the tests); leave them out with
//! `cargo test --workspace -- --skip kubectl`.

use std::path::PathBuf;
use std::process::Command;

use kopf_testing::FakeApiServer;
use serde_json::{Value, json};

/// `kubectl` with its own HOME, cache dir and the server's kubeconfig.
struct Kubectl {
    home: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn new(server: &FakeApiServer) -> Self {
        let home = tempfile::tempdir().expect("temp home");
        let kubeconfig = home.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        Kubectl { home, kubeconfig }
    }

    async fn run(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("kubectl");
        cmd.args(args)
            .arg(format!(
                "--cache-dir={}",
                self.home.path().join("cache").display()
            ))
            .env("HOME", self.home.path())
            .env("KUBECONFIG", &self.kubeconfig);
        let shown = format!("{args:?}");
        let out = tokio::task::spawn_blocking(move || cmd.output())
            .await
            .expect("join")
            .unwrap_or_else(|e| {
                panic!("kubectl is not on the PATH ({e}); it is a prerequisite of these tests")
            });
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "kubectl {shown} failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

/// The printer columns: (name, type, jsonPath, priority).
const COLUMNS: &[(&str, &str, &str, i64)] = &[
    (
        "Ready",
        "string",
        ".status.conditions[?(@.type==\"Ready\")].status",
        0,
    ),
    (
        "Why",
        "string",
        ".status.conditions[?(@.status!=\"True\")].reason",
        0,
    ),
    ("Big", "string", ".spec.items[?(@.size>4)].name", 0),
    ("Small", "string", ".spec.items[?(@.size<4)].name", 0),
    ("Tagged", "string", ".spec.items[?(@.tag)].name", 0),
    ("Second", "string", ".spec.items[1:3].name", 0),
    ("Last", "integer", ".spec.items[-1].size", 0),
    ("Deepest", "string", "..deepest", 0),
    ("Any", "string", ".spec.items[*].name", 1),
];

fn crd() -> Value {
    let columns: Vec<Value> = COLUMNS
        .iter()
        .map(|(name, kind, path, priority)| {
            json!({"name": name, "type": kind, "jsonPath": path, "priority": priority})
        })
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.kopf.dev"},
        "spec": {
            "group": "kopf.dev",
            "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}},
            }],
        },
    })
}

fn gadget() -> Value {
    json!({
        "apiVersion": "kopf.dev/v1", "kind": "Gadget",
        "metadata": {"name": "g1", "namespace": "default"},
        "spec": {
            "items": [
                {"name": "alpha", "size": 1},
                {"name": "beta", "size": 5, "tag": "x"},
                {"name": "gamma", "size": 10}
            ],
            "a": {"b": {"deepest": "bottom"}}
        },
        "status": {"conditions": [
            {"type": "Synced", "status": "False", "reason": "Waiting"},
            {"type": "Ready", "status": "True", "reason": "Done"}
        ]}
    })
}

/// The header and the one row of a `kubectl get` table, as (column, value) pairs.
fn table(text: &str) -> Vec<(String, String)> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    let row: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header.len(), row.len(), "one value per column:\n{text}");
    header
        .into_iter()
        .zip(row)
        .map(|(h, v)| (h.to_string(), v.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_shows_printer_columns_with_filters_and_slices() {
    let server = FakeApiServer::start().await.expect("start");
    server.apply_object(crd()).expect("the CRD is stored");
    server.apply_object(gadget()).expect("the gadget is stored");
    let kubectl = Kubectl::new(&server);

    let wide = table(
        &kubectl
            .run(&["get", "gadgets", "-n", "default", "-o", "wide"])
            .await,
    );
    let expected = [
        ("NAME", "g1"),
        ("READY", "True"),
        ("WHY", "Waiting"),
        ("BIG", "beta"),
        ("SMALL", "alpha"),
        ("TAGGED", "beta"),
        ("SECOND", "beta"),
        ("LAST", "10"),
        ("DEEPEST", "bottom"),
        ("ANY", "alpha"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(h, v)| (h.to_string(), v.to_string()))
        .collect();
    assert_eq!(wide, expected);

    // Without -o wide, the priority-1 column is left out.
    let narrow = table(&kubectl.run(&["get", "gadgets", "-n", "default"]).await);
    assert_eq!(narrow, expected[..expected.len() - 1]);

    // kubectl's own evaluation of the same paths agrees, but joins all results where the
    // server takes the first (BIG and SECOND have two).
    let spec: Vec<String> = COLUMNS
        .iter()
        .filter(|c| c.0 != "Any")
        .map(|(name, _, path, _)| format!("{}:{path}", name.to_uppercase()))
        .collect();
    let client = table(
        &kubectl
            .run(&[
                "get",
                "gadgets",
                "-n",
                "default",
                "-o",
                &format!("custom-columns=NAME:.metadata.name,{}", spec.join(",")),
            ])
            .await,
    );
    let joined: Vec<(String, String)> = expected[..expected.len() - 1]
        .iter()
        .map(|(h, v)| match h.as_str() {
            "BIG" | "SECOND" => (h.clone(), "beta,gamma".to_string()),
            _ => (h.clone(), v.clone()),
        })
        .collect();
    assert_eq!(client, joined);
}
