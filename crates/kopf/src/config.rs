//! The client configuration of operators: the kubeconfig, the in-cluster account or a given
//! URL, with the operator's read timeout and User-Agent.

use std::time::Duration;

use crate::error::{Error, one_line};

/// The User-Agent of operators' requests (visible in API server audit logs).
pub const USER_AGENT: &str = concat!("kopf-rs/", env!("CARGO_PKG_VERSION"));

/// The client configuration operators use: the given URL (the embedded fake server), or
/// `KUBECONFIG` / `~/.kube/config` / the in-cluster service account; with a read timeout of
/// `inactivity`, so that a watch connection that went silent (no events, no bookmarks) is
/// reconnected, and [`USER_AGENT`]. kube's own retry of 429, 503 and 504 answers is off: it
/// is silent and slow to notice a recovered server; [`Operator::wrap_client`](crate::Operator::wrap_client) retries
/// instead, visibly.
pub async fn client_config(url: Option<&str>, inactivity: Duration) -> Result<kube::Config, Error> {
    let mut config = match url {
        Some(url) => {
            let uri = url
                .parse()
                .map_err(|e| Error::Config(format!("the URL {url} is not valid: {e}")))?;
            kube::Config::new(uri)
        }
        None => infer_config().await?,
    };
    config.read_timeout = Some(inactivity);
    config.default_retry = false;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    Ok(config)
}

/// The configuration from `KUBECONFIG` (named in the error when it cannot be read),
/// `~/.kube/config`, or the in-cluster service account.
async fn infer_config() -> Result<kube::Config, Error> {
    const FIX: &str = "set KUBECONFIG to a valid kubeconfig, run inside a cluster, or try `run --fake` for an embedded API server";
    if let Some(paths) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) {
        for path in std::env::split_paths(&paths) {
            if let Err(e) = kube::config::Kubeconfig::read_from(&path) {
                return Err(Error::Config(format!(
                    "cannot read the kubeconfig {} (from KUBECONFIG): {}; {FIX}",
                    path.display(),
                    one_line(&e)
                )));
            }
        }
    }
    kube::Config::infer()
        .await
        .map_err(|e| Error::Config(format!("{}; {FIX}", one_line(&e))))
}
