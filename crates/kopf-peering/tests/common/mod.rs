//! What the lease tests share: a client per replica that the fake server can tell apart,
//! and the Leases as a test client reads them.

#![allow(dead_code)]

use kopf_testing::FakeApiServer;
use kube::api::{Api, ApiResource, DynamicObject};
use serde_json::Value;

/// A client whose requests the server can tell apart (its User-Agent is `test/<who>`), with
/// no retries of its own (every injected failure reaches the code under test).
pub fn client_of(server: &FakeApiServer, who: &str) -> kube::Client {
    let uri = server.url().parse().expect("the server's URL");
    let mut config = kube::Config::new(uri);
    config.default_retry = false;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&format!("test/{who}")).expect("a header value"),
    ));
    kube::Client::try_from(config).expect("a client")
}

/// The `spec` of the Lease `name` in `default`, if it exists.
pub async fn lease_spec(server: &FakeApiServer, name: &str) -> Option<Value> {
    let ar = ApiResource {
        group: "coordination.k8s.io".into(),
        version: "v1".into(),
        api_version: "coordination.k8s.io/v1".into(),
        kind: "Lease".into(),
        plural: "leases".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &ar);
    let lease = api.get_opt(name).await.expect("a lease or none")?;
    Some(lease.data["spec"].clone())
}
