//! The in-process transport: a kube client whose requests are calls of the fake server's
//! router as a `tower::Service`, on the caller's runtime — no socket, no TLS, no
//! connection. A test on a paused tokio clock (`#[tokio::test(start_paused = true)]`)
//! needs it: tokio advances a paused clock whenever the runtime is idle, and a request on a
//! socket leaves the runtime idle while it waits for the answer, so timeouts would fire
//! before the answer came; in process, the request is served by tasks of the same runtime,
//! which is never idle while one is under way.

use super::*;

/// The fake server's HTTP front as a tower service: every request goes to the server's
/// handler, whatever its path.
pub(crate) fn router(shared: Arc<Shared>) -> axum::Router {
    axum::Router::new().fallback(move |req: axum::extract::Request| {
        let s = shared.clone();
        async move { apiserver::http::handle(s, req).await }
    })
}

impl FakeApiServerBuilder {
    /// Starts a server that listens on no socket: it is reached only through
    /// [`FakeApiServer::client`] (or [`client_in_process`](FakeApiServer::client_in_process)),
    /// in process, on the runtime that calls them. Its background work (CRD
    /// establishment, Pod termination, the pod simulator) runs on the runtime that calls
    /// this. TLS is ignored; [`addr`](FakeApiServer::addr) and [`url`](FakeApiServer::url)
    /// name no server (port 0), so kubectl and other processes cannot reach it.
    pub async fn start_in_process(self) -> Result<FakeApiServer, FakeError> {
        let shared = Shared::new(self.settings);
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        *lock(&shared.address) = addr.to_string();
        lock(&shared.state).bootstrap_endpoints(&addr.ip().to_string(), addr.port());
        if let Some(pods) = self.pods {
            apiserver::simulation::spawn(&shared, pods);
        }
        tracing::info!("fake API server in process (no socket)");
        Ok(FakeApiServer {
            shared,
            tls: None,
            addr,
            in_process: true,
            stop: None,
            task: None,
        })
    }
}

impl FakeApiServer {
    /// Starts a server with default settings that listens on no socket (see
    /// [`FakeApiServerBuilder::start_in_process`]): for tests on a paused clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kopf_testing::FakeApiServer;
    /// use kube::api::{Api, PostParams};
    ///
    /// #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// async fn main() -> Result<(), Box<dyn std::error::Error>> {
    ///     let server = FakeApiServer::in_process().await?;
    ///     let configmaps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    ///     let cm: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}}))?;
    ///     // A request takes no time on the paused clock: none of it passes idle.
    ///     let before = tokio::time::Instant::now();
    ///     configmaps.create(&PostParams::default(), &cm).await?;
    ///     assert_eq!(before.elapsed(), Duration::ZERO);
    ///     assert_eq!(server.counters().get("create", "configmaps", ""), 1);
    ///     Ok(())
    /// }
    /// ```
    pub async fn in_process() -> Result<Self, FakeError> {
        Self::builder().start_in_process().await
    }

    /// Whether the server listens on no socket ([`in_process`](Self::in_process)).
    pub fn is_in_process(&self) -> bool {
        self.in_process
    }

    /// A kube client that calls this server in process, whether or not it also listens on
    /// a socket: its requests are served on the runtime that sends them (the client must be
    /// made on that runtime), with no connection and no TLS. Like [`client`](Self::client),
    /// it does not retry: every answer, an injected fault too, reaches the caller. Its
    /// default namespace is `default`.
    pub fn client_in_process(&self) -> kube::Client {
        kube::Client::new(router(self.shared.clone()), "default")
    }

    /// Ends the watches open in process (a server with a socket ends them when it stops).
    pub(crate) fn end_watches(&self) {
        let _ = self.shared.close_tx.send(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams, WatchEvent, WatchParams};

    fn cm(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm
    }

    #[tokio::test(start_paused = true)]
    async fn requests_and_watches_take_no_time_on_a_paused_clock() {
        let server = FakeApiServer::in_process().await.expect("start");
        assert!(server.is_in_process());
        let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
        let started = tokio::time::Instant::now();
        api.create(&PostParams::default(), &cm("a"))
            .await
            .expect("create");
        let mut watch = api
            .watch(&WatchParams::default().timeout(60), "0")
            .await
            .expect("watch")
            .boxed();
        let first = watch.next().await.expect("an event").expect("ok");
        assert!(matches!(first, WatchEvent::Added(c) if c.metadata.name.as_deref() == Some("a")));
        assert_eq!(started.elapsed(), Duration::ZERO, "no time passed idle");
        // With nothing more to come, the paused clock runs to the watch's end (60 s).
        while let Some(event) = watch.next().await {
            assert!(
                matches!(event, Ok(WatchEvent::Bookmark(_))),
                "only bookmarks: {event:?}"
            );
        }
        let ended = started.elapsed();
        assert!(ended >= Duration::from_secs(60), "{ended:?}");
        assert_eq!(server.counters().get("create", "configmaps", ""), 1);
        assert_eq!(server.counters().get("watch", "configmaps", ""), 1);
    }

    #[tokio::test]
    async fn a_server_with_a_socket_is_reached_in_process_too() {
        let server = FakeApiServer::start().await.expect("start");
        assert!(!server.is_in_process());
        let over_socket: Api<ConfigMap> = Api::namespaced(server.client(), "default");
        let in_process: Api<ConfigMap> = Api::namespaced(server.client_in_process(), "default");
        in_process
            .create(&PostParams::default(), &cm("b"))
            .await
            .expect("create");
        let seen = over_socket.get("b").await.expect("get");
        assert_eq!(seen.metadata.name.as_deref(), Some("b"));
        let requests = server.requests();
        assert_eq!(requests.len(), 2, "{requests:?}");
    }
}
