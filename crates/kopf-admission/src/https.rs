//! Serving a router over HTTPS.
//!
//! Each connection gets its own task: a TLS handshake bounded in time (a client that
//! stalls cannot hold a task), then HTTP/1.1 by hyper, with a bound on the time to send a
//! request's headers (idle keep-alive connections are closed after it). A failed
//! handshake is logged with the peer's address and never ends the server. The handshake
//! uses the certificate [`Tls`] serves at that moment, so reloaded certificate files apply
//! to new connections without restarting the listener.
//!
//! When the shutdown future completes, the listener is closed (new connections are
//! refused), handshakes under way are dropped, idle connections are closed, and requests
//! in flight get a grace period to finish ([`ServeOptions::grace`], 5 s by default) before
//! their connections are closed too.
//!
//! Handlers can read the client's address with axum's
//! [`ConnectInfo<SocketAddr>`](axum::extract::ConnectInfo).

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tower::Service;

use crate::tls::Tls;

/// How long a client may take for its TLS handshake, by default.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's headers, by default.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long requests in flight may take to finish after the shutdown, by default.
pub const GRACE: Duration = Duration::from_secs(5);

/// How long the server waits for its clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeOptions {
    /// The longest TLS handshake ([`HANDSHAKE_TIMEOUT`]).
    pub handshake_timeout: Duration,
    /// The longest wait for a request's headers, including the wait for the next request
    /// on a kept-alive connection ([`HEADER_READ_TIMEOUT`]).
    pub header_read_timeout: Duration,
    /// How long requests in flight may take to finish after the shutdown ([`GRACE`]).
    pub grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            handshake_timeout: HANDSHAKE_TIMEOUT,
            header_read_timeout: HEADER_READ_TIMEOUT,
            grace: GRACE,
        }
    }
}

/// Failures of the server itself (those of single connections are only logged).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The listener cannot accept connections any more.
    #[error("the webhook server cannot accept connections on {addr}: {source}")]
    Accept {
        /// The listener's address, if known.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// Serves `router` over HTTPS on `listener` with the certificate of `tls` until
/// `shutdown` completes, then stops accepting and lets requests in flight finish (at
/// most [`GRACE`]). See [`serve_with`].
pub async fn serve(
    listener: TcpListener,
    tls: &Tls,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    serve_with(listener, tls, router, shutdown, ServeOptions::default()).await
}

/// [`serve`] with other timeouts.
///
/// Errors accepting a connection are logged and, unless they are about that connection
/// only, followed by a pause (e.g. when out of file descriptors); only a listener that is
/// not listening ends the server with [`ServeError::Accept`]. Connections still open when
/// it returns are closed.
pub async fn serve_with(
    listener: TcpListener,
    tls: &Tls,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
    options: ServeOptions,
) -> Result<(), ServeError> {
    let acceptor = TlsAcceptor::from(tls.server_config());
    let addr = listener
        .local_addr()
        .map_or_else(|_| "its address".to_string(), |a| a.to_string());
    let (closing_tx, closing_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut failures: u32 = 0;
    let result = loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break Ok(()),
            Some(joined) = connections.join_next(), if !connections.is_empty() => {
                if let Err(e) = joined
                    && e.is_panic()
                {
                    tracing::error!("A webhook connection's task panicked: {e}");
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    failures = 0;
                    connections.spawn(connection(
                        stream,
                        peer,
                        acceptor.clone(),
                        router.clone(),
                        closing_rx.clone(),
                        options.clone(),
                    ));
                }
                Err(e) if about_one_connection(&e) => {
                    tracing::debug!("A webhook connection failed before it was accepted: {e}");
                }
                Err(source) if source.kind() == std::io::ErrorKind::InvalidInput => {
                    break Err(ServeError::Accept { addr, source });
                }
                Err(e) => {
                    // E.g. out of file descriptors: wait for some connections to end.
                    failures = failures.saturating_add(1);
                    let pause = Duration::from_millis(50 * u64::from(failures.min(20)));
                    tracing::error!(
                        "The webhook server cannot accept connections on {addr}: {e}; \
                         trying again in {pause:?}."
                    );
                    tokio::select! {
                        () = &mut shutdown => break Ok(()),
                        () = tokio::time::sleep(pause) => {}
                    }
                }
            },
        }
    };
    drop(listener);
    let _ = closing_tx.send(true);
    if !connections.is_empty() {
        tracing::debug!(
            "Waiting for {} webhook connection(s) to finish.",
            connections.len()
        );
    }
    let drained = tokio::time::timeout(options.grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "{} webhook connection(s) still busy {:?} after the shutdown: closing them.",
            connections.len(),
            options.grace
        );
        connections.shutdown().await;
    }
    result
}

/// Accept errors that concern the connection being accepted, not the listener.
fn about_one_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted | WouldBlock
    )
}

/// Handshake errors that are a client going away (probes that only connect, scanners).
fn went_away(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe
    )
}

/// One connection: the handshake, then HTTP until the client or the shutdown ends it.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    router: Router,
    mut closing: watch::Receiver<bool>,
    options: ServeOptions,
) {
    let _ = stream.set_nodelay(true);
    let handshake = tokio::time::timeout(options.handshake_timeout, acceptor.accept(stream));
    let stream = tokio::select! {
        done = handshake => match done {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) if went_away(&e) => {
                tracing::debug!("The TLS handshake with {peer} failed: {e}");
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!("The TLS handshake with {peer} failed: {e}");
                return;
            }
            Err(_) => {
                tracing::debug!(
                    "The TLS handshake with {peer} took longer than {:?}: closed.",
                    options.handshake_timeout
                );
                return;
            }
        },
        () = closed(&mut closing) => return,
    };
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        router.clone().call(request)
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout);
    let conn = http.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = closed(&mut closing) => {
            // Ends the connection after the request in flight, if any (at once if idle).
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!("The webhook connection from {peer} ended: {e}");
    }
}

/// Completes when the server shuts down (or is gone).
async fn closed(closing: &mut watch::Receiver<bool>) {
    let _ = closing.wait_for(|closing| *closing).await;
}
