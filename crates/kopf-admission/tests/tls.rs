//! The HTTPS server and its certificates, with a rustls client: the generated CA and its
//! names, reloaded certificate files, failed handshakes, and the shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use kopf_admission::https::{ServeError, ServeOptions, serve, serve_with};
use kopf_admission::tls::{Tls, TlsSettings};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CertificateError, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, oneshot};
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream;

fn routes() -> Router {
    Router::new()
        .route("/hello", get(|| async { "hello" }))
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }),
        )
}

struct Served {
    port: u16,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Served {
    async fn start(tls: &Tls, router: Router, options: ServeOptions) -> Served {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
        let port = listener.local_addr().expect("an address").port();
        let (stop, stopped) = oneshot::channel::<()>();
        let tls = tls.clone();
        let task = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            serve_with(listener, &tls, router, shutdown, options).await
        });
        Served {
            port,
            stop: Some(stop),
            task,
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("stopped in time")
            .expect("not panicked")
            .expect("served without failing");
    }
}

fn roots(pem: &[u8]) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        roots.add(cert.expect("PEM")).expect("a root");
    }
    roots
}

fn name(name: &str) -> ServerName<'static> {
    ServerName::try_from(name.to_string()).expect("a server name")
}

/// A TLS connection to the server at 127.0.0.1, verified with `roots` for `server_name`.
async fn connect(
    port: u16,
    roots: RootCertStore,
    server_name: ServerName<'static>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(server_name, tcp)
        .await
}

/// The rustls error of a failed handshake.
fn tls_error(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>())
}

/// GET `path` on an established connection: the status and the body.
async fn get_on(stream: TlsStream<TcpStream>, path: &str) -> Result<(u16, String), String> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let request = hyper::Request::get(path)
        .header("host", "webhooks")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::test]
async fn a_client_trusting_the_generated_ca_verifies_the_server_and_others_do_not() {
    let tls = Tls::load(&TlsSettings::self_signed([
        "webhooks.example.svc",
        "10.1.2.3",
        "0.0.0.0",
    ]))
    .expect("generated");
    let served = Served::start(&tls, routes(), ServeOptions::default()).await;
    let ca = roots(&tls.ca_bundle());

    let stream = connect(served.port, ca.clone(), name("127.0.0.1"))
        .await
        .expect("verified for 127.0.0.1");
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let chain = stream.get_ref().1.peer_certificates().expect("a chain");
    assert_eq!(chain, tls.certificate_chain().as_slice());
    assert_eq!(
        get_on(stream, "/hello").await,
        Ok((200, "hello".to_string()))
    );

    // The names of the settings, and the local ones, verify; others do not.
    for good in ["webhooks.example.svc", "10.1.2.3", "localhost", "::1"] {
        let stream = connect(served.port, ca.clone(), name(good))
            .await
            .unwrap_or_else(|e| panic!("verified for {good}: {e}"));
        assert_eq!(get_on(stream, "/peer").await, Ok((200, "127.0.0.1".into())));
    }
    for bad in ["other.example.svc", "0.0.0.0", "10.1.2.4"] {
        let e = connect(served.port, ca.clone(), name(bad))
            .await
            .expect_err(bad);
        assert!(
            matches!(
                tls_error(&e),
                Some(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                        | CertificateError::NotValidForNameContext { .. }
                ))
            ),
            "{bad}: {e:?}"
        );
    }

    // A client trusting another CA does not verify the server.
    let other = Tls::load(&TlsSettings::self_signed(["webhooks.example.svc"])).expect("generated");
    let e = connect(served.port, roots(&other.ca_bundle()), name("127.0.0.1"))
        .await
        .expect_err("another CA");
    assert!(
        matches!(
            tls_error(&e),
            Some(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer
            ))
        ),
        "{e:?}"
    );
    // The server goes on.
    let stream = connect(served.port, ca, name("127.0.0.1"))
        .await
        .expect("verified");
    assert_eq!(
        get_on(stream, "/hello").await,
        Ok((200, "hello".to_string()))
    );
    served.stop().await;
}

#[tokio::test]
async fn clients_that_fail_or_stall_their_handshake_do_not_stop_the_server() {
    let tls = Tls::load(&TlsSettings::self_signed(Vec::<String>::new())).expect("generated");
    let options = ServeOptions {
        handshake_timeout: Duration::from_millis(200),
        ..ServeOptions::default()
    };
    let served = Served::start(&tls, routes(), options).await;
    let ca = roots(&tls.ca_bundle());

    // Plain HTTP to the HTTPS port.
    let mut plain = TcpStream::connect(("127.0.0.1", served.port))
        .await
        .expect("connected");
    plain
        .write_all(b"GET /hello HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("sent");
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut buf))
        .await
        .expect("closed by the server");
    assert!(!String::from_utf8_lossy(&buf).contains("hello"));

    // A client that says nothing is closed after the handshake timeout.
    let mut silent = TcpStream::connect(("127.0.0.1", served.port))
        .await
        .expect("connected");
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut byte))
        .await
        .expect("closed by the server");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

    // A handshake that is refused by the client (unknown issuer).
    let _ = connect(served.port, RootCertStore::empty(), name("localhost")).await;

    let stream = connect(served.port, ca, name("localhost"))
        .await
        .expect("verified");
    assert_eq!(
        get_on(stream, "/hello").await,
        Ok((200, "hello".to_string()))
    );
    served.stop().await;
}

/// A CA (PEM) and a server certificate for 127.0.0.1 it signs: (CA PEM, chain PEM, key
/// PEM, the server certificate).
fn issued() -> (String, String, String, CertificateDer<'static>) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("a key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).expect("a CA");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("a key");
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("a certificate");
    (
        ca_cert.pem(),
        cert.pem() + &ca_cert.pem(),
        key.serialize_pem(),
        cert.der().clone(),
    )
}

/// The server certificate a new connection gets.
async fn presented(port: u16, cas: &[&str]) -> Option<CertificateDer<'static>> {
    let pem = cas.concat();
    let stream = connect(port, roots(pem.as_bytes()), name("127.0.0.1"))
        .await
        .ok()?;
    stream.get_ref().1.peer_certificates()?.first().cloned()
}

/// Waits (bounded) until new connections get `expected`.
async fn until_presented(port: u16, cas: &[&str], expected: &CertificateDer<'static>) {
    for _ in 0..200 {
        if presented(port, cas).await.as_ref() == Some(expected) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the new certificate was not served in time");
}

#[tokio::test]
async fn changed_certificate_files_are_served_to_new_connections() {
    let dir = tempfile::tempdir().expect("a directory");
    let path = |n: &str| dir.path().join(n);
    let write = |n: &str, content: &str| std::fs::write(path(n), content).expect("written");
    let (ca_a, chain_a, key_a, cert_a) = issued();
    let (ca_b, chain_b, key_b, cert_b) = issued();
    write("tls.crt", &chain_a);
    write("tls.key", &key_a);
    write("ca.crt", &ca_a);
    let mut settings = TlsSettings::files(path("tls.crt"), path("tls.key"), Some(path("ca.crt")));
    settings.check_interval = Duration::from_millis(100);
    let tls = Tls::load(&settings).expect("loaded");
    assert_eq!(tls.ca_bundle(), ca_a.as_bytes());
    let mut changes = tls.subscribe();
    let served = Served::start(&tls, routes(), ServeOptions::default()).await;
    let both = [ca_a.as_str(), ca_b.as_str()];
    assert_eq!(presented(served.port, &[&ca_a]).await, Some(cert_a.clone()));

    // A connection open before the change goes on after it.
    let before = connect(served.port, roots(ca_a.as_bytes()), name("127.0.0.1"))
        .await
        .expect("verified");

    // The CA bundle first, then the pair (key first: a mismatch in between is skipped).
    write("ca.crt", &(ca_a.clone() + &ca_b));
    tokio::time::timeout(Duration::from_secs(10), changes.changed())
        .await
        .expect("the CA bundle changed in time")
        .expect("watched");
    assert_eq!(
        *changes.borrow_and_update(),
        (ca_a.clone() + &ca_b).as_bytes()
    );
    write("tls.key", &key_b);
    write("tls.crt", &chain_b);
    until_presented(served.port, &both, &cert_b).await;
    assert_eq!(tls.certificate_chain()[0], cert_b);
    assert_eq!(
        presented(served.port, &[&ca_a]).await,
        None,
        "the new certificate is not the old CA's"
    );
    assert_eq!(
        get_on(before, "/hello").await,
        Ok((200, "hello".to_string()))
    );

    // Broken rewrites keep the certificate served, and the bundle.
    write("tls.crt", "garbage");
    assert!(tls.reload().is_err());
    assert_eq!(presented(served.port, &both).await, Some(cert_b.clone()));
    write("tls.crt", &chain_a);
    assert!(tls.reload().is_err(), "the key is b's");
    assert_eq!(presented(served.port, &both).await, Some(cert_b.clone()));
    write("ca.crt", "garbage");
    write("tls.crt", &chain_b);
    assert!(tls.reload().is_err());
    assert_eq!(presented(served.port, &both).await, Some(cert_b.clone()));
    assert_eq!(tls.ca_bundle(), (ca_a.clone() + &ca_b).as_bytes());
    assert!(!changes.has_changed().expect("watched"));

    // Fixed: the CA b alone.
    write("ca.crt", &ca_b);
    tokio::time::timeout(Duration::from_secs(10), changes.changed())
        .await
        .expect("the CA bundle changed in time")
        .expect("watched");
    assert_eq!(*changes.borrow_and_update(), ca_b.as_bytes());
    assert_eq!(presented(served.port, &[&ca_b]).await, Some(cert_b));
    served.stop().await;

    // The watcher ends with the last clone.
    drop(tls);
    tokio::time::timeout(Duration::from_secs(10), changes.changed())
        .await
        .expect("closed in time")
        .expect_err("no more changes");
}

#[tokio::test]
async fn the_shutdown_refuses_new_connections_and_lets_requests_in_flight_finish() {
    let tls = Tls::load(&TlsSettings::self_signed(Vec::<String>::new())).expect("generated");
    let (started_tx, started_rx) = oneshot::channel::<()>();
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let slot = Arc::new(Mutex::new(Some((started_tx, release_rx))));
    let router = routes().route(
        "/slow",
        get(move || {
            let slot = slot.clone();
            async move {
                if let Some((started, release)) = slot.lock().await.take() {
                    let _ = started.send(());
                    let _ = release.await;
                }
                "done"
            }
        }),
    );
    let served = Served::start(&tls, router, ServeOptions::default()).await;
    let port = served.port;
    let ca = roots(&tls.ca_bundle());
    let slow = connect(port, ca.clone(), name("localhost"))
        .await
        .expect("verified");
    let idle = connect(port, ca.clone(), name("localhost"))
        .await
        .expect("verified");
    let (mut idle_sender, idle_conn) = hyper::client::conn::http1::handshake(TokioIo::new(idle))
        .await
        .expect("HTTP");
    let idle_conn = tokio::spawn(idle_conn);
    let request = hyper::Request::get("/hello")
        .header("host", "webhooks")
        .body(Empty::<Bytes>::new())
        .expect("a request");
    let response = idle_sender.send_request(request).await.expect("answered");
    assert_eq!(response.status(), 200);
    drop(response);

    let in_flight = tokio::spawn(get_on(slow, "/slow"));
    started_rx.await.expect("the request arrived");
    let Served {
        stop, task: server, ..
    } = served;
    let _ = stop.expect("not stopped").send(());

    // New connections are refused while the request is in flight.
    let mut refused = false;
    for _ in 0..200 {
        match TcpStream::connect(("127.0.0.1", port)).await {
            Err(_) => {
                refused = true;
                break;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    }
    assert!(refused, "the listener is closed after the shutdown");
    // The idle connection was closed by the server.
    tokio::time::timeout(Duration::from_secs(10), idle_conn)
        .await
        .expect("the idle connection closed")
        .expect("not panicked")
        .expect("closed cleanly");
    assert!(!in_flight.is_finished());

    let _ = release_tx.send(());
    let answered = tokio::time::timeout(Duration::from_secs(10), in_flight)
        .await
        .expect("answered in time")
        .expect("not panicked");
    assert_eq!(answered, Ok((200, "done".to_string())));
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("stopped in time")
        .expect("not panicked")
        .expect("served without failing");
}

#[tokio::test]
async fn requests_still_running_after_the_grace_period_are_cut() {
    let tls = Tls::load(&TlsSettings::self_signed(Vec::<String>::new())).expect("generated");
    let (started_tx, started_rx) = oneshot::channel::<()>();
    let slot = Arc::new(Mutex::new(Some(started_tx)));
    let router = Router::new().route(
        "/forever",
        get(move || {
            let slot = slot.clone();
            async move {
                if let Some(started) = slot.lock().await.take() {
                    let _ = started.send(());
                }
                std::future::pending::<&'static str>().await
            }
        }),
    );
    let options = ServeOptions {
        grace: Duration::from_millis(200),
        ..ServeOptions::default()
    };
    let served = Served::start(&tls, router, options).await;
    let stream = connect(served.port, roots(&tls.ca_bundle()), name("localhost"))
        .await
        .expect("verified");
    let in_flight = tokio::spawn(get_on(stream, "/forever"));
    started_rx.await.expect("the request arrived");
    served.stop().await;
    let answered = tokio::time::timeout(Duration::from_secs(10), in_flight)
        .await
        .expect("cut in time")
        .expect("not panicked");
    assert!(answered.is_err(), "{answered:?}");
}

#[tokio::test]
async fn serve_stops_when_the_shutdown_completes() {
    let tls = Tls::load(&TlsSettings::self_signed(Vec::<String>::new())).expect("generated");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bound");
    let port = listener.local_addr().expect("an address").port();
    tokio::time::timeout(
        Duration::from_secs(10),
        serve(listener, &tls, routes(), async {}),
    )
    .await
    .expect("stopped in time")
    .expect("served without failing");
    assert!(TcpStream::connect(("127.0.0.1", port)).await.is_err());
}
