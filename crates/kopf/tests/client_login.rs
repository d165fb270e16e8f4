//! The operator's client from a login handler: the server's URL is logged once known,
//! and only the operator's layer retries (kube's own retry is off on this path too).

use k8s_openapi::api::core::v1::ConfigMap;
use kopf::Operator;
use kopf_testing::{FakeApiServer, FaultRule, RequestPattern};
use kube::api::{Api, ListParams};

mod common;

use common::Logs;

#[tokio::test]
async fn a_logged_in_client_logs_its_server_and_retries_only_in_the_operators_layer() {
    let (logs, _guard) = Logs::capture();

    let server = FakeApiServer::start().await.expect("start");
    server.inject_fault(FaultRule::new(
        RequestPattern::any().verb("list").resource("configmaps"),
        503,
        100,
    ));
    let url = server.url();
    let login_url = url.clone();
    let client = Operator::new()
        .on_login(move || {
            let url = login_url.clone();
            async move {
                let uri = url.parse().map_err(kopf::HandlerError::other)?;
                Ok::<_, kopf::HandlerError>(kube::Config::new(uri))
            }
        })
        .connect()
        .await
        .expect("logged in");
    let text = logs.text();
    assert!(
        text.contains(&format!(
            "Connecting to the Kubernetes API server at {}.",
            url.trim_end_matches('/')
        )),
        "{text}"
    );

    let error = Api::<ConfigMap>::namespaced(client, "default")
        .list(&ListParams::default())
        .await
        .expect_err("503 after the retries");
    assert!(
        matches!(&error, kube::Error::Api(s) if s.code == 503),
        "{error:?}"
    );
    // kube's own retry (3 attempts per request) would make it up to 18.
    let lists = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path == "/api/v1/namespaces/default/configmaps")
        .count();
    assert_eq!(lists, 6, "1 + 5 retries of the operator's layer");
}
