//! Serving a router over HTTPS: a TLS handshake per connection (bounded in time), HTTP/1.1
//! by hyper, each connection in its own task; handshake failures are logged, never fatal.
//! On shutdown the listener closes and open connections finish their requests.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::tls::Tls;

/// How long a client may take for its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections get to finish after the shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Failures of the server itself (not of single connections).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Accepting connections failed for good.
    #[error("the webhook server cannot accept connections: {0}")]
    Accept(#[source] std::io::Error),
}

/// Serves `router` over HTTPS on `listener` until `shutdown` completes, then stops
/// accepting and gives open connections a few seconds to finish.
pub async fn serve(
    listener: TcpListener,
    tls: &Tls,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let acceptor = TlsAcceptor::from(tls.server_config());
    let (closing_tx, closing_rx) = watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) if is_transient(&e) => {
                    tracing::warn!("The webhook server could not accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(e) => return Err(ServeError::Accept(e)),
            },
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let router = router.clone();
        let mut closing = closing_rx.clone();
        connections.spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!("TLS handshake with {peer} failed: {e}");
                    return;
                }
                Err(_) => {
                    tracing::debug!("TLS handshake with {peer} timed out");
                    return;
                }
            };
            let service = TowerToHyperService::new(router);
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!("Webhook connection from {peer} ended: {e}");
                    }
                }
                _ = async { while !*closing.borrow_and_update() && closing.changed().await.is_ok() {} } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
        // Reap finished connections so the set does not grow.
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = closing_tx.send(true);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("Webhook connections still open after the shutdown: closing them.");
        connections.abort_all();
    }
    Ok(())
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || e
        .raw_os_error()
        .is_some_and(|code| code == 24 || code == 23) // EMFILE, ENFILE
}
