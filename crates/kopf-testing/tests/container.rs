//! A container cluster (feature `testcontainers`) on a real Docker engine: the fake API
//! server's image started with testcontainers, the minimal example operator (a process on
//! the host, as `cargo xtask e2e` runs it) connected through the cluster's kubeconfig, an
//! object handled, the operator stopped with SIGTERM, the container removed.
//!
//! `cargo xtask image` runs it (CI does): it builds the image and the operator and names
//! them in `KOPF_TEST_FAKE_APISERVER_IMAGE` and `KOPF_TEST_OPERATOR_BINARY`. Without them, or
//! without a Docker engine, the test fails and says so.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kopf_testing::{Cluster, ClusterKind, ContainerCluster, OperatorRunner};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};

fn required(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: this test needs the fake API server's image and the minimal \
             example's binary; run it with `cargo xtask image`, which builds both and sets \
             KOPF_TEST_FAKE_APISERVER_IMAGE and KOPF_TEST_OPERATOR_BINARY"
        )
    })
}

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[tokio::test]
async fn an_operator_handles_an_object_on_the_fake_api_server_in_a_container() {
    let image = required("KOPF_TEST_FAKE_APISERVER_IMAGE");
    let operator = required("KOPF_TEST_OPERATOR_BINARY");
    let root = repository_root();

    let started = Instant::now();
    let cluster = Cluster::container(ContainerCluster::fake_apiserver(&image))
        .await
        .expect("the fake API server's container starts (is the Docker engine running?)");
    assert_eq!(cluster.kind(), ClusterKind::Container);
    assert!(
        cluster.description().contains(&image),
        "{}",
        cluster.description()
    );
    eprintln!(
        "{} in {:.1} s",
        cluster.description(),
        started.elapsed().as_secs_f64()
    );
    cluster
        .apply_file(root.join("examples/crd.yaml"))
        .await
        .expect("kubectl applies the CRD");

    let client = cluster.client().await.expect("a kube client");
    let version = client
        .apiserver_version()
        .await
        .expect("the server answers /version");
    assert_eq!(version.major, "1");

    let mut op = OperatorRunner::command(&operator)
        .args(["run", "--all-namespaces", "--standalone"])
        .env("KUBECONFIG", cluster.kubeconfig())
        .name("minimal")
        .start()
        .expect("the operator starts");
    cluster
        .apply_file(root.join("examples/obj.yaml"))
        .await
        .expect("kubectl applies the object");

    let gvk = GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "kopfexamples");
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &resource);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        let object = api.get("kopf-example-1").await.expect("the object");
        let status = &object.data["status"]["create_fn"];
        if !status.is_null() {
            break status.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no status.create_fn after 60 s; the operator's output:\n{}",
            op.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status["message"], "hello world", "{status}");

    let exit = op
        .stop(Duration::from_secs(30))
        .await
        .expect("the operator stops");
    assert!(exit.success(), "exit {exit:?}; output:\n{}", op.logs());
    cluster.teardown().await.expect("the container is removed");
}
