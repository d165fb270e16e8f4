//! How the [`Operator`] connects: the login handler or the kubeconfig, and the client layer
//! (rate limit, request timeout, retries, metrics) around the client.

use crate::config::client_config;
use crate::error::Error;
use crate::{client, login};

use super::Operator;

impl Operator {
    /// The operator's client: from the login handler if there is one (logging in again
    /// after 401 answers), else from `KUBECONFIG` / `~/.kube/config` / the in-cluster
    /// account (see [`client_config`]).
    ///
    /// The client is rate-limited ([`rate_limit`](Self::rate_limit)), gives up on an attempt
    /// after the [`request_timeout`](Self::request_timeout), sends requests again after
    /// transient failures (429, 502, 503, 504, 500 for GET and PATCH, no answer; up to 5 times,
    /// with a WARNING for the first failure of an outage and a summary every 10 s; not while
    /// the server has never answered), and counts its requests and retries in the
    /// [`metrics`](Self::metrics) if they are on.
    pub async fn connect(&self) -> Result<kube::Client, Error> {
        Ok(self.connect_to().await?.0)
    }

    /// [`connect`](Self::connect), with the server's URL when it comes from the kubeconfig
    /// (for a readable error when the server cannot be reached).
    pub(crate) async fn connect_to(&self) -> Result<(kube::Client, Option<http::Uri>), Error> {
        let (client, server, url) = match &self.login {
            Some(login) => {
                // (The login logs the server's URL once it knows it.)
                let (client, server) =
                    login::connect(login.clone(), self.inactivity_timeout).await?;
                (client, server, None)
            }
            None => {
                let config = client_config(None, self.inactivity_timeout).await?;
                let url = config.cluster_url.clone();
                tracing::info!(
                    "Connecting to the Kubernetes API server at {}.",
                    url.to_string().trim_end_matches('/')
                );
                let client = kube::Client::try_from(config).map_err(Error::Client)?;
                (client, url.clone(), Some(url))
            }
        };
        Ok((self.wrap_client_at(client, Some(&server)), url))
    }

    /// The operator's client behaviour around `client`: the [rate limit](Self::rate_limit),
    /// the [request timeout](Self::request_timeout), retries of transient failures (`429 Too
    /// Many Requests` after its `Retry-After`; 502, 503, 504; 500 for GET and PATCH; no
    /// answer; once the server has answered) with a WARNING for the first failure of an
    /// outage and a summary every 10 s, and the request
    /// [metrics](Self::metrics). [`connect`](Self::connect) and `run --fake` use it; use it
    /// for a client given to [`run_until`](Self::run_until). The client should not retry by
    /// itself (kube's `default_retry` off, as [`client_config`] sets it), or failures are
    /// retried, silently, twice over.
    pub fn wrap_client(&self, client: kube::Client) -> kube::Client {
        self.wrap_client_at(client, None)
    }

    /// [`wrap_client`](Self::wrap_client), naming the API server at `server` in errors.
    pub(crate) fn wrap_client_at(
        &self,
        client: kube::Client,
        server: Option<&http::Uri>,
    ) -> kube::Client {
        let (qps, burst) = self.rate_limit;
        client::wrap(
            client,
            client::Settings {
                limit: client::RateLimit::new(qps, burst),
                metrics: self.metrics.clone(),
                request_timeout: self.request_timeout,
                server: server.map(|url| url.to_string().trim_end_matches('/').to_string()),
            },
            self.stopping.clone(),
        )
    }
}
