//! What every cluster has (the Service `default/kubernetes` with its Endpoints and
//! EndpointSlice, the bootstrap RBAC policy, APIServices) and the built-in resources with
//! endpoints of their own (componentstatuses, TokenRequest and TokenReview, eviction,
//! ephemeral containers, CertificateSigningRequests, ReplicationControllers).

mod common;

use common::{Raw, kopfexample_crd};
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kopf_testing::FakeApiServer;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn the_kubernetes_service_points_at_the_server() {
    let server = FakeApiServer::start().await.expect("start");
    let port = server
        .url()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse::<i32>().ok());
    let port = port.expect("the server's port");
    let svc: Api<Service> = Api::namespaced(server.client(), "default");
    let kubernetes = svc.get("kubernetes").await.expect("default/kubernetes");
    let spec = kubernetes.spec.expect("spec");
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.1"));
    let ports = spec.ports.expect("ports");
    assert_eq!(
        (ports[0].name.as_deref(), ports[0].port),
        (Some("https"), 443)
    );
    let target = serde_json::to_value(&ports[0].target_port).expect("json");
    assert_eq!(target, json!(port));
    let ep: Api<Endpoints> = Api::namespaced(server.client(), "default");
    let subsets = ep.get("kubernetes").await.expect("endpoints").subsets;
    let subset = &subsets.expect("subsets")[0];
    let address = &subset.addresses.as_ref().expect("addresses")[0];
    assert_eq!(address.ip, "127.0.0.1");
    assert_eq!(subset.ports.as_ref().expect("ports")[0].port, port);
    let slices: Api<EndpointSlice> = Api::namespaced(server.client(), "default");
    let slice = slices.get("kubernetes").await.expect("endpointslice");
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(slice.endpoints[0].addresses, vec!["127.0.0.1".to_string()]);
    let labels = slice.metadata.labels.expect("labels");
    assert_eq!(labels["kubernetes.io/service-name"], "kubernetes");
}

#[tokio::test]
async fn deleting_a_service_answers_the_deleted_service() {
    let server = FakeApiServer::start().await.expect("start");
    let svc: Api<Service> = Api::namespaced(server.client(), "default");
    let body: Service = serde_json::from_value(json!({"metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80}]}}))
    .expect("service");
    svc.create(&PostParams::default(), &body)
        .await
        .expect("create");
    let deleted = svc
        .delete("s", &DeleteParams::default())
        .await
        .expect("delete");
    let deleted = deleted.left().expect("the deleted Service, not a Status");
    assert_eq!(deleted.metadata.name.as_deref(), Some("s"));
}

#[tokio::test]
async fn nodes_without_unschedulable_are_schedulable_for_field_selectors() {
    let server = FakeApiServer::start().await.expect("start");
    let nodes: Api<Node> = Api::all(server.client());
    for (name, spec) in [("a", json!({})), ("b", json!({"unschedulable": true}))] {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))
            .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create");
    }
    let pick = |sel: &str| ListParams::default().fields(sel);
    let schedulable = nodes
        .list(&pick("spec.unschedulable=false"))
        .await
        .expect("list");
    let names: Vec<_> = schedulable
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    assert_eq!(names, vec!["a".to_string()]);
    let cordoned = nodes
        .list(&pick("spec.unschedulable=true"))
        .await
        .expect("list");
    assert_eq!(cordoned.items.len(), 1);
}

#[tokio::test]
async fn bootstrap_roles_and_bindings_decide_reviews() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let roles = raw
        .get("/apis/rbac.authorization.k8s.io/v1/clusterroles")
        .await
        .json();
    let roles = names(&roles);
    for role in [
        "admin",
        "cluster-admin",
        "edit",
        "system:basic-user",
        "system:discovery",
        "system:public-info-viewer",
        "view",
    ] {
        assert!(roles.contains(&role.to_string()), "{role}: {roles:?}");
    }
    let crb = raw
        .get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/cluster-admin")
        .await;
    assert_eq!(crb.json()["subjects"][0]["name"], "system:masters");
    let edit = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "dev-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dev"}]});
    let r = raw
        .post_json(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
            &edit,
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let review = |attrs: Value, user: &str, groups: Value| {
        let mut spec = json!({"user": user, "groups": groups});
        if attrs.get("path").is_some() {
            spec["nonResourceAttributes"] = attrs;
        } else {
            spec["resourceAttributes"] = attrs;
        }
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
    };
    let path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let allowed = |r: common::RawResponse| r.json()["status"]["allowed"] == true;
    let res = |verb: &str, group: &str, resource: &str| json!({"namespace": "default", "verb": verb, "group": group, "resource": resource});
    let authenticated = json!(["system:authenticated"]);
    // edit: workloads yes (through its aggregated view rules too), RBAC no.
    let dev = |attrs| review(attrs, "dev", authenticated.clone());
    assert!(allowed(
        raw.post_json(path, &dev(res("create", "apps", "deployments")))
            .await
    ));
    assert!(allowed(
        raw.post_json(path, &dev(res("list", "", "pods"))).await
    ));
    assert!(!allowed(
        raw.post_json(
            path,
            &dev(res("create", "rbac.authorization.k8s.io", "roles"))
        )
        .await
    ));
    // Every authenticated user may read discovery; nobody else may list pods.
    let other = |attrs| review(attrs, "someone", authenticated.clone());
    let version = json!({"path": "/version", "verb": "get"});
    assert!(allowed(raw.post_json(path, &other(version.clone())).await));
    assert!(!allowed(
        raw.post_json(path, &other(res("list", "", "pods"))).await
    ));
    let anonymous = review(
        json!({"path": "/apis", "verb": "get"}),
        "anon",
        json!(["system:unauthenticated"]),
    );
    assert!(!allowed(raw.post_json(path, &anonymous).await));
    let anonymous = review(version, "anon", json!(["system:unauthenticated"]));
    assert!(allowed(raw.post_json(path, &anonymous).await));
}

#[tokio::test]
async fn apiservices_follow_the_served_group_versions() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let path = "/apis/apiregistration.k8s.io/v1/apiservices";
    let list = names(&raw.get(path).await.json());
    for name in ["v1.", "v1.apps", "v1.apiregistration.k8s.io", "v1.batch"] {
        assert!(list.contains(&name.to_string()), "{name}: {list:?}");
    }
    assert!(!list.contains(&"v1.kopf.dev".to_string()));
    let apps = raw.get(&format!("{path}/v1.apps")).await.json();
    assert_eq!(apps["status"]["conditions"][0]["type"], "Available");
    assert_eq!(apps["status"]["conditions"][0]["status"], "True");
    assert_eq!(apps["spec"]["group"], "apps");
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let r = raw.post_json(crds, &kopfexample_crd()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let mut served = false;
    for _ in 0..50 {
        if names(&raw.get(path).await.json()).contains(&"v1.kopf.dev".to_string()) {
            served = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(served, "an APIService for the CRD's group-version");
    // kube-rs discovery reads every group, apiregistration.k8s.io among them.
    let discovery = kube::Discovery::new(server.client())
        .run()
        .await
        .expect("discovery");
    assert!(discovery.has_group("apiregistration.k8s.io"));
    assert!(discovery.has_group("kopf.dev"));
    let r = raw
        .send(
            "DELETE",
            &format!("{crds}/kopfexamples.kopf.dev"),
            None,
            b"",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mut gone = false;
    for _ in 0..100 {
        if !names(&raw.get(path).await.json()).contains(&"v1.kopf.dev".to_string()) {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(gone, "the CRD's APIService goes with it");
}

#[tokio::test]
async fn replication_controllers_scale() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let base = "/api/v1/namespaces/default/replicationcontrollers";
    let rc = json!({"metadata": {"name": "rc"}, "spec": {"replicas": 2, "selector": {"a": "b"},
        "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let r = raw.post_json(base, &rc).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["metadata"]["generation"], 1);
    let scale = raw.get(&format!("{base}/rc/scale")).await.json();
    assert_eq!(scale["spec"]["replicas"], 2);
    let r = raw
        .send(
            "PATCH",
            &format!("{base}/rc/scale"),
            Some("application/merge-patch+json"),
            br#"{"spec": {"replicas": 5}}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        raw.get(&format!("{base}/rc")).await.json()["spec"]["replicas"],
        5
    );
    let list = raw.get("/api/v1").await.json();
    let resources: Vec<&str> = list["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for name in [
        "replicationcontrollers/scale",
        "replicationcontrollers/status",
        "pods/eviction",
        "pods/ephemeralcontainers",
        "serviceaccounts/token",
        "componentstatuses",
    ] {
        assert!(resources.contains(&name), "{name}: {resources:?}");
    }
}

fn csr(name: &str) -> Value {
    use base64::Engine;
    let pem = "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n";
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": "example.com/signer", "usages": ["client auth"]}})
}

#[tokio::test]
async fn certificate_signing_requests_are_validated_and_approved() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let base = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let mut bad = csr("bad");
    bad["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("signerName");
    let r = raw.post_json(base, &bad).await;
    assert_eq!(r.status, 422, "{}", r.body);
    let status = r.json();
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["causes"][0]["field"], "spec.signerName");
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldValueRequired"
    );
    let r = raw.post_json(base, &csr("good")).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let mut approved = r.json();
    approved["status"] = json!({"conditions": [{"type": "Approved", "status": "True",
        "reason": "Test", "message": "approved by the test"}]});
    approved["spec"]["signerName"] = json!("example.com/other");
    let r = raw
        .send(
            "PUT",
            &format!("{base}/good/approval"),
            Some("application/json"),
            approved.to_string().as_bytes(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let stored = raw.get(&format!("{base}/good")).await.json();
    assert_eq!(stored["status"]["conditions"][0]["type"], "Approved");
    assert_eq!(
        stored["spec"]["signerName"], "example.com/signer",
        "only conditions change"
    );
}

#[tokio::test]
async fn service_account_tokens_are_reviewed() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let sa = json!({"metadata": {"name": "robot"}});
    let r = raw
        .post_json("/api/v1/namespaces/default/serviceaccounts", &sa)
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600}});
    let token_path = "/api/v1/namespaces/default/serviceaccounts/robot/token";
    let r = raw.post_json(token_path, &request).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let answer = r.json();
    assert_eq!(answer["kind"], "TokenRequest");
    let token = answer["status"]["token"]
        .as_str()
        .expect("a token")
        .to_string();
    assert_eq!(token.split('.').count(), 3, "JWT-shaped: {token}");
    assert!(answer["status"]["expirationTimestamp"].is_string());
    let short = json!({"spec": {"expirationSeconds": 60}});
    assert_eq!(raw.post_json(token_path, &short).await.status, 422);
    let missing = "/api/v1/namespaces/default/serviceaccounts/nobody/token";
    assert_eq!(raw.post_json(missing, &request).await.status, 404);
    let review = |token: &str| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token}})
    };
    let reviews = "/apis/authentication.k8s.io/v1/tokenreviews";
    let r = raw.post_json(reviews, &review(&token)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let status = r.json()["status"].clone();
    assert_eq!(status["authenticated"], true, "{status}");
    assert_eq!(
        status["user"]["username"],
        "system:serviceaccount:default:robot"
    );
    let groups = status["user"]["groups"].to_string();
    assert!(
        groups.contains("system:serviceaccounts:default"),
        "{groups}"
    );
    let forged = format!("{}x", &token[..token.len() - 1]);
    let status = raw.post_json(reviews, &review(&forged)).await.json()["status"].clone();
    assert_ne!(status["authenticated"], true, "{status}");
    // A token of a deleted ServiceAccount is no longer valid.
    let r = raw
        .send(
            "DELETE",
            "/api/v1/namespaces/default/serviceaccounts/robot",
            None,
            b"",
        )
        .await;
    assert_eq!(r.status, 200);
    let status = raw.post_json(reviews, &review(&token)).await.json()["status"].clone();
    assert_ne!(status["authenticated"], true, "{status}");
    // Only create is served.
    assert_eq!(raw.get(reviews).await.status, 405);
}

#[tokio::test]
async fn pods_are_evicted_and_get_ephemeral_containers() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let pods = "/api/v1/namespaces/default/pods";
    for name in ["a", "b"] {
        let pod = json!({"metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        assert_eq!(raw.post_json(pods, &pod).await.status, 201);
    }
    let patch = json!({"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox"}],
        "containers": [{"name": "c", "image": "changed"}]}});
    let r = raw
        .send(
            "PATCH",
            &format!("{pods}/a/ephemeralcontainers"),
            Some("application/merge-patch+json"),
            patch.to_string().as_bytes(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let pod = raw.get(&format!("{pods}/a")).await.json();
    assert_eq!(pod["spec"]["ephemeralContainers"][0]["name"], "debug");
    assert_eq!(
        pod["spec"]["containers"][0]["image"], "i",
        "only ephemeral containers change"
    );
    let got = raw.get(&format!("{pods}/a/ephemeralcontainers")).await;
    assert_eq!(got.status, 200);
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "b", "namespace": "default"}});
    let r = raw
        .post_json(&format!("{pods}/b/eviction"), &eviction)
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["status"], "Success");
    assert_eq!(raw.get(&format!("{pods}/b")).await.status, 404);
    let r = raw
        .post_json(&format!("{pods}/a/eviction"), &eviction)
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(raw.get(&format!("{pods}/a")).await.status, 200);
}

#[tokio::test]
async fn component_statuses_are_healthy() {
    let server = FakeApiServer::start().await.expect("start");
    let raw = Raw::new(&server);
    let list = raw.get("/api/v1/componentstatuses").await;
    assert_eq!(list.status, 200);
    assert!(
        list.header("warning")
            .is_some_and(|w| w.contains("deprecated"))
    );
    assert_eq!(
        names(&list.json()),
        vec!["controller-manager", "etcd-0", "scheduler"]
    );
    let etcd = raw.get("/api/v1/componentstatuses/etcd-0").await.json();
    assert_eq!(etcd["kind"], "ComponentStatus");
    assert_eq!(etcd["conditions"][0]["type"], "Healthy");
    assert_eq!(etcd["conditions"][0]["status"], "True");
    assert_eq!(raw.get("/api/v1/componentstatuses/nope").await.status, 404);
    let r = raw
        .post_json(
            "/api/v1/componentstatuses",
            &json!({"metadata": {"name": "x"}}),
        )
        .await;
    assert_eq!(r.status, 405, "{}", r.body);
    // kube-rs reads them as dynamic objects.
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "ComponentStatus"),
        "componentstatuses",
    );
    let cs: Api<DynamicObject> = Api::all_with(server.client(), &ar);
    assert_eq!(
        cs.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        3
    );
}
