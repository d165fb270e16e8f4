//! Login handlers (Kopf's `@kopf.on.login`): the operator's credentials come from a
//! function instead of the kubeconfig, and the function runs again whenever the API server
//! answers 401 Unauthorized (expired tokens, rotated certificates).
//!
//! The client the operator uses wraps the one built from the login's configuration: each
//! request goes through the current one; a 401 answer replaces it with a fresh login (once
//! per expired client, however many requests failed with it). The failed request itself
//! fails as usual and is retried by whoever sent it (watches restart, handlers retry).
//!
//! As with the kubeconfig, kube's own hidden retry is off: the operator's client layer
//! retries transient failures, visibly (see `client.rs`).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use kopf_core::handler::{BoxFuture, HandlerError};

use crate::error::Error;

/// A login function: the configuration (server, credentials) to connect with.
pub(crate) type LoginFn =
    Arc<dyn Fn() -> BoxFuture<Result<kube::Config, HandlerError>> + Send + Sync>;

#[derive(Clone)]
struct Relogin {
    /// The current client and its generation.
    current: Arc<tokio::sync::RwLock<(u64, kube::Client)>>,
    login: LoginFn,
    inactivity: Duration,
}

impl tower::Service<Request<kube::client::Body>> for Relogin {
    type Response = Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = BoxFuture<Result<Self::Response, kube::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let (generation, client) = this.current.read().await.clone();
            let response = client.send(request).await?;
            if response.status() == http::StatusCode::UNAUTHORIZED {
                this.relogin(generation).await;
            }
            Ok(response)
        })
    }
}

impl Relogin {
    async fn relogin(&self, expired: u64) {
        let mut current = self.current.write().await;
        if current.0 != expired {
            return; // another request already logged in again
        }
        tracing::warn!("The API server answered 401 Unauthorized: logging in again.");
        match login_client(&self.login, self.inactivity).await {
            Ok((client, _)) => *current = (expired + 1, client),
            Err(e) => tracing::error!("Logging in again failed: {e:?}"),
        }
    }
}

/// A client from the login's configuration, and the API server's URL.
async fn login_client(
    login: &LoginFn,
    inactivity: Duration,
) -> Result<(kube::Client, http::Uri), Error> {
    let mut config = login()
        .await
        .map_err(|e| Error::Config(format!("the login handler failed: {e}")))?;
    config.read_timeout = Some(inactivity);
    config.default_retry = false;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(crate::config::USER_AGENT),
    ));
    let url = config.cluster_url.clone();
    let client = kube::Client::try_from(config).map_err(Error::Client)?;
    Ok((client, url))
}

/// A client that logs in with `login` now and again after every 401, and the API server's
/// URL of the first login.
pub(crate) async fn connect(
    login: LoginFn,
    inactivity: Duration,
) -> Result<(kube::Client, http::Uri), Error> {
    let (first, url) = login_client(&login, inactivity).await?;
    tracing::info!("Activity 'login' succeeded.");
    tracing::info!(
        "Connecting to the Kubernetes API server at {}.",
        url.to_string().trim_end_matches('/')
    );
    let namespace = first.default_namespace().to_string();
    let service = Relogin {
        current: Arc::new(tokio::sync::RwLock::new((0, first))),
        login,
        inactivity,
    };
    Ok((kube::Client::new(service, namespace), url))
}
