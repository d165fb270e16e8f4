//! HTTPS serving, as kube-apiserver serves only HTTPS: a CA generated when the server starts
//! and a serving certificate signed by it, for `127.0.0.1`, `::1`, `localhost` and the
//! in-cluster names (`kubernetes`, `kubernetes.default`, `kubernetes.default.svc`,
//! `kubernetes.default.svc.cluster.local`). The kubeconfig carries the CA as
//! `certificate-authority-data`, so kubectl, kube-rs and the Python client verify the server
//! as they would a cluster's. rustls with the *ring* provider; HTTP/1.1 only (ALPN
//! `http/1.1`: Go clients that offer `h2` fall back to it).
//!
//! TLS handshakes run in tasks of their own, so a client that connects and says nothing
//! (a port probe) delays nobody; a handshake not done in 10 s is dropped.
//!
//! Served as plain HTTP (the default), the port also completes a TLS handshake: a
//! connection whose first byte opens a TLS handshake record (0x16, which no HTTP request
//! starts with) gets a certificate made for the purpose (on the first such connection) and
//! is then served over TLS. Python Kopf's cluster detection (`kopf.WebhookAutoServer`,
//! `WebhookAutoTunnel`) reads the API server's certificate with a TLS handshake to the
//! kubeconfig's host and port whatever the URL's scheme, and stops the operator with
//! `SSLError: WRONG_VERSION_NUMBER` when the port answers in plain HTTP. No kubeconfig
//! trusts that certificate: clients that verify TLS use `tls(true)`.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use kopf_tls::CaSpec;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyUsagePurpose};
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;

/// The names the serving certificate is valid for.
pub const SERVING_NAMES: [&str; 7] = [
    "127.0.0.1",
    "::1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// How long a client has to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the serving certificates could not be made.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot make the serving certificates: {step}: {reason}")]
pub struct TlsError {
    /// What was being made.
    pub step: &'static str,
    /// The cause.
    pub reason: String,
}

fn failed<E: std::fmt::Display>(step: &'static str) -> impl FnOnce(E) -> TlsError {
    move |e| TlsError {
        step,
        reason: e.to_string(),
    }
}

/// A generated CA and the rustls configuration serving a certificate signed by it.
#[derive(Clone)]
pub struct ServingTls {
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    cert_der: CertificateDer<'static>,
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for ServingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingTls").finish_non_exhaustive()
    }
}

impl ServingTls {
    /// A fresh CA (`CN=kopf-fake-apiserver-ca@<unix time>`, as kube's self-signed CAs are
    /// named) and a serving certificate for [`SERVING_NAMES`] (ECDSA P-256 keys).
    pub fn generate() -> Result<Self, TlsError> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let ca = CaSpec::new(move |_| {
            let mut name = DistinguishedName::new();
            name.push(
                DnType::CommonName,
                format!("kopf-fake-apiserver-ca@{stamp}"),
            );
            name
        });
        let names: Vec<String> = SERVING_NAMES.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).map_err(failed("the serving names"))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let made = kopf_tls::generate(ca, params).map_err(failed("the certificates"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(failed("the TLS versions"))?
            .with_no_client_auth()
            .with_single_cert(made.chain.clone(), made.key)
            .map_err(failed("the TLS configuration"))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ServingTls {
            cert_der: made.chain[0].clone(),
            ca_pem: made.ca_pem,
            ca_der: made.ca_der,
            config: Arc::new(config),
        })
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA certificate, DER.
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_der
    }

    /// The serving certificate, DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// A listener serving TLS on an accepted TCP listener (for `axum::serve`).
    pub fn listen(&self, listener: TcpListener) -> TlsListener {
        TlsListener::new(listener, self.config.clone())
    }
}

/// Serves `app` on `listener` until `stopped` completes: over TLS with `tls`, else plain
/// HTTP. Errors are logged.
pub fn spawn_serving(
    listener: TcpListener,
    app: axum::Router,
    tls: Option<&ServingTls>,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    let ended = |result: std::io::Result<()>| {
        if let Err(e) = result {
            tracing::error!(error = %e, "the fake API server stopped with an error");
        }
    };
    match tls {
        Some(tls) => {
            let listener = tls.listen(listener);
            tokio::spawn(async move {
                ended(
                    axum::serve(listener, app)
                        .with_graceful_shutdown(stopped)
                        .await,
                );
            })
        }
        None => {
            let listener = PlainListener::new(listener);
            tokio::spawn(async move {
                ended(
                    axum::serve(listener, app)
                        .with_graceful_shutdown(stopped)
                        .await,
                );
            })
        }
    }
}

/// A TCP listener whose connections come out as TLS streams once their handshakes are done.
pub type TlsListener = Accepted<TlsStream<TcpStream>>;

impl TlsListener {
    fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> Self {
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        Accepted::spawn(listener, move |tcp, peer| {
            let acceptor = acceptor.clone();
            async move { handshake(&acceptor, tcp, peer).await }
        })
    }
}

/// A listener whose connections are each made ready (a TLS handshake, a look at the first
/// byte) in a task of their own, and served in the order they are ready.
pub struct Accepted<T> {
    local: std::io::Result<SocketAddr>,
    ready: mpsc::Receiver<(T, SocketAddr)>,
    acceptor: JoinHandle<()>,
}

impl<T: Send + 'static> Accepted<T> {
    /// Accepts the connections of `listener` until the listener is dropped: each with
    /// TCP_NODELAY, as kube-apiserver (Go sets it on every connection: small writes such as
    /// watch events go out at once, not after a delayed ACK), made ready by `prepare` in a
    /// task of its own (`None`: dropped), so that a client that connects and says nothing
    /// delays nobody.
    fn spawn<F, Fut>(listener: TcpListener, prepare: F) -> Self
    where
        F: Fn(TcpStream, SocketAddr) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Option<T>> + Send + 'static,
    {
        let local = listener.local_addr();
        let (tx, ready) = mpsc::channel(64);
        let acceptor = tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, as axum does.
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let _ = tcp.set_nodelay(true);
                let prepared = prepare(tcp, peer);
                let tx = tx.clone();
                tokio::spawn(async move {
                    if let Some(conn) = prepared.await {
                        let _ = tx.send((conn, peer)).await;
                    }
                });
            }
        });
        Accepted {
            local,
            ready,
            acceptor,
        }
    }
}

impl<T> Drop for Accepted<T> {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl<T> axum::serve::Listener for Accepted<T>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Io = T;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The acceptor task ended (it never does while the listener lives): serve nothing.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        match &self.local {
            Ok(a) => Ok(*a),
            Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
        }
    }
}

/// A client's TLS handshake, within [`HANDSHAKE_TIMEOUT`]; `None` (logged at debug) when it
/// fails.
async fn handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
) -> Option<TlsStream<TcpStream>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}

/// The first byte of a TLS record carrying a handshake (a ClientHello opens with one).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// A connection of the plain HTTP port: plain, or TLS when the client opened a handshake.
pub enum PlainOrTls {
    /// An HTTP client.
    Plain(TcpStream),
    /// A client that opened with a TLS handshake (see the module's documentation).
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for PlainOrTls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            PlainOrTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            PlainOrTls::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for PlainOrTls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            PlainOrTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            PlainOrTls::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            PlainOrTls::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            PlainOrTls::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            PlainOrTls::Plain(s) => s.is_write_vectored(),
            PlainOrTls::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            PlainOrTls::Plain(s) => Pin::new(s).poll_flush(cx),
            PlainOrTls::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            PlainOrTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            PlainOrTls::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The plain HTTP listener: each connection is looked at (its first byte, not consumed) in
/// a task of its own, and served plain, or over TLS when it opens a handshake.
pub type PlainListener = Accepted<PlainOrTls>;

impl PlainListener {
    fn new(listener: TcpListener) -> Self {
        // Made on the first TLS handshake, kept for the next ones.
        let tls: Arc<OnceLock<Option<tokio_rustls::TlsAcceptor>>> = Arc::default();
        Accepted::spawn(listener, move |tcp, peer| {
            let tls = tls.clone();
            async move {
                let mut first = [0u8; 1];
                let peeked = tokio::time::timeout(HANDSHAKE_TIMEOUT, tcp.peek(&mut first)).await;
                match peeked {
                    // Closed before saying anything.
                    Ok(Ok(0)) => None,
                    Ok(Ok(_)) if first[0] == TLS_HANDSHAKE_RECORD => {
                        plain_port_tls(&tls, tcp, peer)
                            .await
                            .map(|stream| PlainOrTls::Tls(Box::new(stream)))
                    }
                    // HTTP, or a client yet to speak: hyper serves (or times out) it.
                    _ => Some(PlainOrTls::Plain(tcp)),
                }
            }
        })
    }
}

/// The TLS handshake of a client on the plain HTTP port, with a certificate made on the
/// first one; `None` (logged) when it fails.
async fn plain_port_tls(
    tls: &OnceLock<Option<tokio_rustls::TlsAcceptor>>,
    tcp: TcpStream,
    peer: SocketAddr,
) -> Option<TlsStream<TcpStream>> {
    let acceptor = tls.get_or_init(|| match ServingTls::generate() {
        Ok(made) => Some(tokio_rustls::TlsAcceptor::from(made.config)),
        Err(e) => {
            tracing::warn!(error = %e, "no certificate for TLS handshakes on the plain HTTP port");
            None
        }
    });
    let acceptor = acceptor.as_ref()?;
    tracing::debug!(%peer, "a TLS handshake on the plain HTTP port (a certificate probe?)");
    handshake(acceptor, tcp, peer).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{ServerName, UnixTime};

    #[test]
    fn the_serving_certificate_is_valid_for_the_loopback_and_cluster_names() {
        let tls = ServingTls::generate().expect("certificates");
        assert!(tls.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let mut roots = rustls::RootCertStore::empty();
        roots.add(tls.ca_der().clone()).expect("root");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("verifier");
        let verify = |name: &str| {
            let name = ServerName::try_from(name.to_string()).expect("name");
            verifier.verify_server_cert(&tls.cert_der, &[], &name, &[], UnixTime::now())
        };
        for name in SERVING_NAMES {
            assert!(verify(name).is_ok(), "{name}: {:?}", verify(name));
        }
        assert!(verify("example.com").is_err());
        assert!(verify("10.0.0.1").is_err());
    }
}

#[cfg(test)]
mod plain_port {
    use std::sync::Arc;

    use rustls::DigitallySignedStruct;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// Takes any certificate, as `ssl.get_server_certificate` does.
    #[derive(Debug)]
    struct AnyCertificate(Arc<CryptoProvider>);

    impl ServerCertVerifier for AnyCertificate {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }

    async fn get_version<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
        mut stream: S,
    ) -> String {
        stream
            .write_all(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .expect("request written");
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .await
            .expect("response read");
        String::from_utf8_lossy(&response).into_owned()
    }

    /// The plain HTTP port serves HTTP, and completes a TLS handshake (with a certificate
    /// for the loopback address) for a client that opens one: Python Kopf's cluster
    /// detection reads the certificate so, whatever the URL's scheme.
    #[tokio::test]
    async fn the_plain_port_answers_a_tls_handshake_too() {
        let server = crate::FakeApiServer::start().await.expect("start");
        assert!(server.url().starts_with("http://"));
        let addr = server.url().trim_start_matches("http://").to_string();
        let plain = get_version(TcpStream::connect(&addr).await.expect("connect")).await;
        assert!(plain.starts_with("HTTP/1.1 200 OK"), "{plain}");
        assert!(plain.contains("\"gitVersion\":\"v1.31.0\""), "{plain}");

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let name = ServerName::try_from("127.0.0.1").expect("name");
        for _ in 0..2 {
            let tcp = TcpStream::connect(&addr).await.expect("connect");
            let tls = connector
                .connect(name.clone(), tcp)
                .await
                .expect("handshake");
            let certificates = tls.get_ref().1.peer_certificates().map(<[_]>::len);
            assert_eq!(certificates, Some(2), "the serving certificate and its CA");
            let over_tls = get_version(tls).await;
            assert!(over_tls.starts_with("HTTP/1.1 200 OK"), "{over_tls}");
            assert!(
                over_tls.contains("\"gitVersion\":\"v1.31.0\""),
                "{over_tls}"
            );
        }
        // Plain HTTP still, after the certificate was made.
        let plain = get_version(TcpStream::connect(&addr).await.expect("connect")).await;
        assert!(plain.starts_with("HTTP/1.1 200 OK"), "{plain}");
    }
}
