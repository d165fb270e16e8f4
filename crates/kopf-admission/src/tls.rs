//! The webhook server's certificate: PEM files reloaded when they change, or a CA and a
//! certificate signed by it generated at start.
//!
//! [`Tls::load`] reads or generates the certificate and builds a rustls [`ServerConfig`]
//! (ring provider, TLS 1.2 and 1.3, ALPN `http/1.1`) whose certificate resolver can be
//! swapped: new handshakes pick up a reloaded pair while the listener and the connections
//! already open go on.
//!
//! [`Tls::ca_bundle`] is the PEM the API server must trust (the `caBundle` of the webhook
//! configurations, base64-encoded by the caller), and [`Tls::subscribe`] tells when it
//! changes.
//!
//! ## Generated certificates
//!
//! [`CertSource::SelfSigned`] generates two ECDSA P-256 certificates: a CA
//! (`basicConstraints` CA with path length 0, `keyCertSign`) and a server certificate
//! signed by it (not a CA, `serverAuth`), served as the chain server + CA. A single
//! self-signed CA-flagged certificate (Kopf's way) does not work here: rustls' verifier
//! rejects a CA certificate used as the server's own. The CA's key lives only while the
//! server certificate is signed: nothing else can ever be signed by this CA. Both are
//! valid from an hour before the start (clock skew) for ten years; a restart generates
//! new ones.
//!
//! The subject alternative names of the server certificate are `localhost`, `127.0.0.1`
//! and `::1` (always: for local tools and health checks), then the names of the settings:
//! IP addresses (also in brackets, `[::1]`) as IP SANs, normalised, except the unspecified
//! `0.0.0.0` and `::`; the rest as DNS names, lower-cased, without a trailing dot,
//! wildcards (`*.example.svc`) allowed. Duplicates are dropped.
//!
//! ## Certificate files
//!
//! [`CertSource::Files`] reads a certificate chain (PEM, the server's certificate first)
//! and its private key (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC; RSA, ECDSA P-256/P-384 or
//! Ed25519). The files are read again every [`TlsSettings::check_interval`]; when their
//! content changed, the new pair is checked and swapped in. A pair that cannot be used
//! (unreadable, not PEM, a key not matching the certificate, e.g. half-way through a
//! rewrite) is logged once, and the previous pair goes on serving.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kopf_tls::CaSpec;
use rcgen::{CertificateParams, DistinguishedName, DnType, IsCa, KeyUsagePurpose, SanType};
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, DnsName, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;

/// How often certificate files are checked for changes by default.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// The validity of generated certificates (from an hour before the start).
const GENERATED_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The names always in a generated certificate.
const ALWAYS_SANS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Where the server's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    /// PEM files, read again when they change (checked every
    /// [`TlsSettings::check_interval`]).
    Files {
        /// The certificate chain, the server's certificate first.
        cert: PathBuf,
        /// The private key of the server's certificate.
        key: PathBuf,
        /// The CA bundle clients must trust; None: the certificate file itself.
        ca: Option<PathBuf>,
    },
    /// A CA and a server certificate signed by it, generated at start (for development,
    /// or when the operator manages its webhook configurations itself).
    SelfSigned {
        /// Host names and IP addresses the certificate is for, besides `localhost`,
        /// `127.0.0.1` and `::1` (see the [module docs](self)).
        sans: Vec<String>,
    },
}

/// What [`Tls::load`] loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// Where the certificate comes from.
    pub source: CertSource,
    /// How often certificate files are checked for changes ([`DEFAULT_CHECK_INTERVAL`]);
    /// zero: never.
    pub check_interval: Duration,
}

impl TlsSettings {
    /// A CA and certificate generated at start for these names, see
    /// [`CertSource::SelfSigned`].
    pub fn self_signed<S: Into<String>>(sans: impl IntoIterator<Item = S>) -> Self {
        TlsSettings {
            source: CertSource::SelfSigned {
                sans: sans.into_iter().map(Into::into).collect(),
            },
            check_interval: DEFAULT_CHECK_INTERVAL,
        }
    }

    /// A certificate and key from PEM files, see [`CertSource::Files`].
    pub fn files(cert: impl Into<PathBuf>, key: impl Into<PathBuf>, ca: Option<PathBuf>) -> Self {
        TlsSettings {
            source: CertSource::Files {
                cert: cert.into(),
                key: key.into(),
                ca,
            },
            check_interval: DEFAULT_CHECK_INTERVAL,
        }
    }
}

/// Failures to read, check or generate the certificate. The messages name the file and
/// what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file cannot be read.
    #[error("cannot read the webhook {} {}: {source}; {}", .file.noun(), .path.display(), .file.hint())]
    Read {
        /// Which file.
        file: FileKind,
        /// Its path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file holds no usable PEM section of the expected kind.
    #[error("the webhook {} {} {problem}; {}", .file.noun(), .path.display(), .file.hint())]
    Pem {
        /// Which file.
        file: FileKind,
        /// Its path.
        path: PathBuf,
        /// What is wrong, e.g. "holds no PEM certificate".
        problem: String,
    },
    /// A certificate is not valid X.509.
    #[error(
        "the webhook {} {} holds an invalid certificate: {source}; {}",
        .file.noun(),
        .path.display(),
        .file.hint()
    )]
    Certificate {
        /// Which file.
        file: FileKind,
        /// Its path.
        path: PathBuf,
        /// The cause.
        source: rustls::Error,
    },
    /// The key is of a kind the server cannot sign with.
    #[error(
        "the webhook key {} cannot be used: {source}; give an RSA, ECDSA (P-256, P-384) or Ed25519 key",
        .path.display()
    )]
    Key {
        /// The key file.
        path: PathBuf,
        /// The cause.
        source: rustls::Error,
    },
    /// The key is not the certificate's.
    #[error(
        "the webhook key {} does not match the certificate {}; give the key the certificate was issued for (--webhook-key)",
        .key.display(),
        .cert.display()
    )]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// A name for the generated certificate is neither an IP address nor a DNS name.
    #[error(
        "{name:?} cannot be a name of the webhook certificate: it is neither an IP address nor a DNS name"
    )]
    Name {
        /// The name.
        name: String,
    },
    /// The CA or the certificate could not be generated.
    #[error("cannot generate the webhook certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The rustls configuration could not be built.
    #[error("cannot configure TLS for the webhook server: {0}")]
    Config(#[source] rustls::Error),
}

/// The files of [`CertSource::Files`], for [`TlsError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// The certificate (chain).
    Cert,
    /// The private key.
    Key,
    /// The CA bundle.
    Ca,
}

impl FileKind {
    fn noun(self) -> &'static str {
        match self {
            FileKind::Cert => "certificate",
            FileKind::Key => "key",
            FileKind::Ca => "CA bundle",
        }
    }

    fn hint(self) -> &'static str {
        match self {
            FileKind::Cert => {
                "set --webhook-cert to a PEM file, or omit it for a self-signed certificate"
            }
            FileKind::Key => "set --webhook-key to the PEM private key of --webhook-cert",
            FileKind::Ca => {
                "set --webhook-ca to a PEM file of CA certificates, or omit it to use the certificate file"
            }
        }
    }
}

/// The loaded TLS state: a rustls [`ServerConfig`] whose certificate can be swapped, and
/// the CA bundle. Clones share it; with [`CertSource::Files`], the files are watched
/// until the last clone is dropped.
#[derive(Clone)]
pub struct Tls {
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<ServerConfig>,
    resolver: Arc<Resolver>,
    ca: watch::Sender<Vec<u8>>,
    reloader: Option<Arc<Reloader>>,
    watcher: Option<tokio::task::AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(w) = &self.watcher {
            w.abort();
        }
    }
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("files", &self.inner.reloader.as_ref().map(|r| &r.paths))
            .field("watching", &self.inner.watcher.is_some())
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Reads the certificate files or generates a CA and a certificate, and builds the
    /// server configuration. With [`CertSource::Files`] and a non-zero check interval,
    /// called within a Tokio runtime, it also starts watching the files (logged, and
    /// not watched, outside a runtime).
    pub fn load(settings: &TlsSettings) -> Result<Tls, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (key, ca, paths) = match &settings.source {
            CertSource::SelfSigned { sans } => {
                let (key, ca) = generate(sans, &provider)?;
                (key, ca, None)
            }
            CertSource::Files { cert, key, ca } => {
                let paths = Paths {
                    cert: cert.clone(),
                    key: key.clone(),
                    ca: ca.clone(),
                };
                let contents = paths.read()?;
                let loaded = paths.parse(&contents, &provider)?;
                (loaded.key, loaded.ca, Some((paths, contents)))
            }
        };
        let resolver = Arc::new(Resolver {
            current: RwLock::new(key),
        });
        let mut config = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let (ca_tx, _) = watch::channel(ca);
        let reloader = paths.map(|(paths, contents)| {
            Arc::new(Reloader {
                paths,
                provider,
                resolver: resolver.clone(),
                ca: ca_tx.clone(),
                state: Mutex::new(State {
                    good: contents,
                    bad: None,
                }),
            })
        });
        let watcher = match &reloader {
            Some(r) if !settings.check_interval.is_zero() => {
                match tokio::runtime::Handle::try_current() {
                    Ok(rt) => Some(
                        rt.spawn(watch_files(r.clone(), settings.check_interval))
                            .abort_handle(),
                    ),
                    Err(_) => {
                        tracing::warn!(
                            "The webhook certificate {} will not be reloaded when it changes: \
                             it was loaded outside a Tokio runtime.",
                            r.paths.cert.display()
                        );
                        None
                    }
                }
            }
            _ => None,
        };
        Ok(Tls {
            inner: Arc::new(Inner {
                config: Arc::new(config),
                resolver,
                ca: ca_tx,
                reloader,
                watcher,
            }),
        })
    }

    /// The server configuration: its certificate is always the current one.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.inner.config.clone()
    }

    /// The PEM bundle of the CA certificates clients must trust (for the `caBundle` of the
    /// webhook configurations, base64-encoded): the generated CA, the `ca` file, or else
    /// the certificate file itself (as Kopf does). The current value: it changes when the
    /// files are reloaded.
    pub fn ca_bundle(&self) -> Vec<u8> {
        self.inner.ca.borrow().clone()
    }

    /// Tells of CA bundle changes (only when the bundle's bytes change); the receiver
    /// holds the current bundle, seen.
    pub fn subscribe(&self) -> watch::Receiver<Vec<u8>> {
        self.inner.ca.subscribe()
    }

    /// The certificate chain served now (the server's certificate first).
    pub fn certificate_chain(&self) -> Vec<CertificateDer<'static>> {
        self.inner.resolver.current().cert.clone()
    }

    /// Reads the certificate files now, and swaps in the pair if it changed: `Ok(true)`
    /// if it did, `Ok(false)` if the files did not change (or the certificate was
    /// generated), an error (the previous pair kept) if they cannot be used. Blocking
    /// file I/O; the watcher does the same every check interval.
    pub fn reload(&self) -> Result<bool, TlsError> {
        match &self.inner.reloader {
            None => Ok(false),
            Some(r) => match r.check() {
                Check::Unchanged { .. } => Ok(false),
                Check::Reloaded => Ok(true),
                Check::Failed { error, .. } => Err(error),
            },
        }
    }
}

/// The certificate resolver of the server configuration: the current pair, swapped on
/// reloads.
#[derive(Debug)]
struct Resolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl Resolver {
    fn current(&self) -> Arc<CertifiedKey> {
        match self.current.read() {
            Ok(k) => k.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set(&self, key: Arc<CertifiedKey>) {
        match self.current.write() {
            Ok(mut k) => *k = key,
            Err(poisoned) => *poisoned.into_inner() = key,
        }
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The paths of [`CertSource::Files`].
#[derive(Debug)]
struct Paths {
    cert: PathBuf,
    key: PathBuf,
    ca: Option<PathBuf>,
}

/// The bytes of the files.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Option<Vec<u8>>,
}

/// A usable pair and its CA bundle.
struct Loaded {
    key: Arc<CertifiedKey>,
    ca: Vec<u8>,
}

fn read_file(file: FileKind, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        file,
        path: path.to_owned(),
        source,
    })
}

fn pem_problem(e: &pem::Error, what: &str) -> String {
    match e {
        pem::Error::NoItemsFound => format!("holds no PEM {what}"),
        other => format!("is not valid PEM ({other})"),
    }
}

impl Paths {
    fn read(&self) -> Result<Contents, TlsError> {
        Ok(Contents {
            cert: read_file(FileKind::Cert, &self.cert)?,
            key: read_file(FileKind::Key, &self.key)?,
            ca: match &self.ca {
                Some(ca) => Some(read_file(FileKind::Ca, ca)?),
                None => None,
            },
        })
    }

    /// Parses the certificates, checks that the key is the first certificate's.
    fn parse(&self, contents: &Contents, provider: &CryptoProvider) -> Result<Loaded, TlsError> {
        let chain = certificates(FileKind::Cert, &self.cert, &contents.cert)?;
        let key = PrivateKeyDer::from_pem_slice(&contents.key).map_err(|e| TlsError::Pem {
            file: FileKind::Key,
            path: self.key.clone(),
            problem: pem_problem(&e, "private key (PKCS#8, PKCS#1 or SEC1)"),
        })?;
        let signing = provider
            .key_provider
            .load_private_key(key)
            .map_err(|source| TlsError::Key {
                path: self.key.clone(),
                source,
            })?;
        let key = CertifiedKey::new(chain, signing);
        match key.keys_match() {
            // A key that cannot tell its public key is checked by the handshakes.
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(rustls::Error::InconsistentKeys(_)) => {
                return Err(TlsError::Mismatch {
                    cert: self.cert.clone(),
                    key: self.key.clone(),
                });
            }
            Err(source) => {
                return Err(TlsError::Certificate {
                    file: FileKind::Cert,
                    path: self.cert.clone(),
                    source,
                });
            }
        }
        let ca = match (&self.ca, &contents.ca) {
            (Some(path), Some(ca)) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in certificates(FileKind::Ca, path, ca)? {
                    roots.add(cert).map_err(|source| TlsError::Certificate {
                        file: FileKind::Ca,
                        path: path.clone(),
                        source,
                    })?;
                }
                ca.clone()
            }
            _ => contents.cert.clone(),
        };
        Ok(Loaded {
            key: Arc::new(key),
            ca,
        })
    }
}

/// The certificates of a PEM file: at least one.
fn certificates(
    file: FileKind,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |problem: String| TlsError::Pem {
        file,
        path: path.to_owned(),
        problem,
    };
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(pem_problem(&e, "certificate")))?;
    if chain.is_empty() {
        return Err(bad("holds no PEM certificate (BEGIN CERTIFICATE)".into()));
    }
    Ok(chain)
}

/// What the files were last time.
struct State {
    /// The pair served.
    good: Contents,
    /// The last failure, if the files changed since `good` and cannot be used: the
    /// contents, or the read error's message.
    bad: Option<Result<Contents, String>>,
}

/// Re-reads [`CertSource::Files`] and swaps the pair in.
struct Reloader {
    paths: Paths,
    provider: Arc<CryptoProvider>,
    resolver: Arc<Resolver>,
    ca: watch::Sender<Vec<u8>>,
    state: Mutex<State>,
}

/// What [`Reloader::check`] found.
enum Check {
    /// The files are those served (`recovered`: after a failure).
    Unchanged { recovered: bool },
    /// A new pair is served.
    Reloaded,
    /// The files cannot be used (`repeated`: the same failure as last time).
    Failed { error: TlsError, repeated: bool },
}

impl Reloader {
    fn check(&self) -> Check {
        let mut state = match self.state.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        let contents = match self.paths.read() {
            Ok(c) => c,
            Err(error) => {
                let failure = Err(error.to_string());
                let repeated = state.bad.as_ref() == Some(&failure);
                state.bad = Some(failure);
                return Check::Failed { error, repeated };
            }
        };
        if contents == state.good {
            let recovered = state.bad.take().is_some();
            return Check::Unchanged { recovered };
        }
        match self.paths.parse(&contents, &self.provider) {
            Ok(loaded) => {
                self.resolver.set(loaded.key);
                self.ca.send_if_modified(|ca| {
                    let changed = *ca != loaded.ca;
                    if changed {
                        *ca = loaded.ca;
                    }
                    changed
                });
                state.good = contents;
                state.bad = None;
                Check::Reloaded
            }
            Err(error) => {
                let failure = Ok(contents);
                let repeated = state.bad.as_ref() == Some(&failure);
                state.bad = Some(failure);
                Check::Failed { error, repeated }
            }
        }
    }
}

/// Checks the files every `interval`, logging reloads and (once each) failures.
async fn watch_files(reloader: Arc<Reloader>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await; // The first tick is now: the files were just read.
    loop {
        ticks.tick().await;
        let r = reloader.clone();
        let check = match tokio::task::spawn_blocking(move || r.check()).await {
            Ok(check) => check,
            Err(e) => {
                tracing::error!("Checking the webhook certificate files failed: {e}");
                continue;
            }
        };
        let cert = reloader.paths.cert.display();
        match check {
            Check::Unchanged { recovered: false } => {}
            Check::Unchanged { recovered: true } => {
                tracing::info!(
                    "The webhook certificate {cert} is back to the one served; serving it."
                );
            }
            Check::Reloaded => {
                tracing::info!("Reloaded the webhook certificate {cert}: new connections use it.");
            }
            Check::Failed { repeated: true, .. } => {}
            Check::Failed {
                error,
                repeated: false,
            } => {
                tracing::error!("{error}; still serving the previous certificate.");
            }
        }
    }
}

/// The names of a generated certificate: [`ALWAYS_SANS`], then `requested`, normalised
/// (see the module docs).
fn subject_alt_names(requested: &[String]) -> Result<Vec<SanType>, TlsError> {
    let mut sans: Vec<SanType> = Vec::new();
    for name in ALWAYS_SANS
        .iter()
        .copied()
        .chain(requested.iter().map(String::as_str))
    {
        let trimmed = name.trim();
        let unbracketed = trimmed
            .strip_prefix('[')
            .and_then(|n| n.strip_suffix(']'))
            .unwrap_or(trimmed);
        let san = if unbracketed.is_empty() {
            continue;
        } else if let Ok(ip) = unbracketed.parse::<IpAddr>() {
            let ip = ip.to_canonical();
            if ip.is_unspecified() {
                continue;
            }
            SanType::IpAddress(ip)
        } else {
            let dns = trimmed.trim_end_matches('.').to_ascii_lowercase();
            let base = dns.strip_prefix("*.").unwrap_or(&dns);
            if DnsName::try_from(base).is_err() {
                return Err(TlsError::Name { name: name.into() });
            }
            SanType::DnsName(
                dns.try_into()
                    .map_err(|_| TlsError::Name { name: name.into() })?,
            )
        };
        if !sans.contains(&san) {
            sans.push(san);
        }
    }
    Ok(sans)
}

/// Generates a CA and a server certificate signed by it: the served pair (chain server +
/// CA) and the CA's PEM.
fn generate(
    requested: &[String],
    provider: &CryptoProvider,
) -> Result<(Arc<CertifiedKey>, Vec<u8>), TlsError> {
    let sans = subject_alt_names(requested)?;
    // A name of its own per generated CA (from its key): a client trusting another one
    // then reports an unknown issuer, not a bad signature.
    let ca = CaSpec::new(|id| {
        let mut name = DistinguishedName::new();
        name.push(DnType::OrganizationName, "kopf-rs");
        name.push(DnType::CommonName, format!("kopf-rs webhook CA {id}"));
        name
    })
    .path_length(0)
    .validity(
        SystemTime::now()
            .checked_sub(Duration::from_secs(3600))
            .unwrap_or(UNIX_EPOCH),
        GENERATED_VALIDITY,
    );
    let common_name = sans
        .iter()
        .find_map(|san| match san {
            SanType::DnsName(dns) if !ALWAYS_SANS.contains(&dns.as_str()) => {
                Some(dns.as_str().to_owned())
            }
            _ => None,
        })
        .unwrap_or_else(|| "localhost".into());
    let mut leaf = CertificateParams::default();
    leaf.distinguished_name = DistinguishedName::new();
    leaf.distinguished_name
        .push(DnType::OrganizationName, "kopf-rs");
    leaf.distinguished_name
        .push(DnType::CommonName, common_name);
    leaf.subject_alt_names = sans;
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let made = kopf_tls::generate(ca, leaf)?;
    let key = CertifiedKey::from_der(made.chain, made.key, provider).map_err(TlsError::Config)?;
    Ok((Arc::new(key), made.ca_pem.into_bytes()))
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn names(sans: &[&str]) -> Result<Vec<SanType>, TlsError> {
        subject_alt_names(&sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn dns(name: &str) -> SanType {
        SanType::DnsName(name.try_into().expect("a DNS name"))
    }

    #[test]
    fn sans_are_normalised_with_the_local_names_first() {
        let sans = names(&[
            "0.0.0.0",
            "::",
            " [::1] ",
            "Operator.Example.SVC.",
            "10.0.0.1",
            "::ffff:10.0.0.1",
            "*.webhooks.svc",
            "LOCALHOST",
            "fd00::2",
            "",
        ])
        .expect("valid names");
        assert_eq!(
            sans,
            vec![
                dns("localhost"),
                SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                SanType::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST)),
                dns("operator.example.svc"),
                SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
                dns("*.webhooks.svc"),
                SanType::IpAddress("fd00::2".parse().expect("an IP")),
            ]
        );
    }

    #[test]
    fn names_that_are_neither_ips_nor_dns_names_are_refused() {
        for bad in [
            "host:8443",
            "under score!",
            "a..b",
            "-leading.example",
            "ünï.example",
        ] {
            let e = names(&[bad]).expect_err(bad);
            assert_eq!(
                e.to_string(),
                format!(
                    "{bad:?} cannot be a name of the webhook certificate: it is neither an IP \
                     address nor a DNS name"
                )
            );
        }
    }

    #[test]
    fn the_generated_chain_is_a_leaf_then_its_ca_and_the_bundle_is_the_ca() {
        let tls = Tls::load(&TlsSettings::self_signed(["webhooks.example"])).expect("generated");
        let chain = tls.certificate_chain();
        assert_eq!(chain.len(), 2);
        let bundle = tls.ca_bundle();
        let cas = CertificateDer::pem_slice_iter(&bundle)
            .collect::<Result<Vec<_>, _>>()
            .expect("PEM");
        assert_eq!(cas, vec![chain[1].clone()]);
        assert_ne!(chain[0], chain[1]);
        assert!(!tls.reload().expect("nothing to reload"));
        // Another load, another CA.
        let other = Tls::load(&TlsSettings::self_signed(["webhooks.example"])).expect("generated");
        assert_ne!(other.ca_bundle(), bundle);
    }

    struct Pair {
        cert: String,
        key: String,
    }

    fn pair(name: &str) -> Pair {
        let p = rcgen::generate_simple_self_signed(vec![name.to_string()]).expect("a pair");
        Pair {
            cert: p.cert.pem(),
            key: p.signing_key.serialize_pem(),
        }
    }

    struct Dir {
        dir: tempfile::TempDir,
    }

    impl Dir {
        fn new() -> Self {
            Dir {
                dir: tempfile::tempdir().expect("a temporary directory"),
            }
        }
        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }
        fn write(&self, name: &str, content: impl AsRef<[u8]>) {
            std::fs::write(self.path(name), content).expect("written");
        }
        fn settings(&self, ca: bool) -> TlsSettings {
            let mut s = TlsSettings::files(
                self.path("tls.crt"),
                self.path("tls.key"),
                ca.then(|| self.path("ca.crt")),
            );
            s.check_interval = Duration::ZERO;
            s
        }
        fn error(&self, ca: bool) -> String {
            let e = Tls::load(&self.settings(ca)).expect_err("an unusable pair");
            // The messages quote the paths; compare them without the directory.
            e.to_string()
                .replace(&format!("{}/", self.dir.path().display()), "")
        }
    }

    #[test]
    fn file_errors_name_the_file_and_what_to_do() {
        let d = Dir::new();
        let a = pair("a.example");
        let b = pair("b.example");
        assert!(d.error(false).starts_with(
            "cannot read the webhook certificate tls.crt: No such file or directory (os error 2); \
             set --webhook-cert to a PEM file, or omit it for a self-signed certificate"
        ));
        d.write("tls.crt", &a.cert);
        assert_eq!(
            d.error(false),
            "cannot read the webhook key tls.key: No such file or directory (os error 2); set \
             --webhook-key to the PEM private key of --webhook-cert"
        );
        d.write("tls.key", &a.key);
        assert_eq!(
            d.error(true),
            "cannot read the webhook CA bundle ca.crt: No such file or directory (os error 2); \
             set --webhook-ca to a PEM file of CA certificates, or omit it to use the \
             certificate file"
        );

        d.write("tls.crt", "garbage");
        assert_eq!(
            d.error(false),
            "the webhook certificate tls.crt holds no PEM certificate (BEGIN CERTIFICATE); set \
             --webhook-cert to a PEM file, or omit it for a self-signed certificate"
        );
        d.write("tls.crt", &a.key);
        assert!(d.error(false).contains("holds no PEM certificate"));
        d.write(
            "tls.crt",
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        );
        let e = d.error(false);
        assert!(
            e.starts_with("the webhook certificate tls.crt is not valid PEM (base64 decode error"),
            "{e}"
        );
        d.write(
            "tls.crt",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        let e = d.error(false);
        assert!(
            e.starts_with("the webhook certificate tls.crt holds an invalid certificate: "),
            "{e}"
        );
        assert!(
            e.ends_with(
                "; set --webhook-cert to a PEM file, or omit it for a self-signed certificate"
            ),
            "{e}"
        );

        d.write("tls.crt", &a.cert);
        d.write("tls.key", &a.cert);
        assert_eq!(
            d.error(false),
            "the webhook key tls.key holds no PEM private key (PKCS#8, PKCS#1 or SEC1); set \
             --webhook-key to the PEM private key of --webhook-cert"
        );
        d.write("tls.key", &b.key);
        assert_eq!(
            d.error(false),
            "the webhook key tls.key does not match the certificate tls.crt; give the key the \
             certificate was issued for (--webhook-key)"
        );

        d.write("tls.key", &a.key);
        d.write("ca.crt", "not a CA");
        assert_eq!(
            d.error(true),
            "the webhook CA bundle ca.crt holds no PEM certificate (BEGIN CERTIFICATE); set \
             --webhook-ca to a PEM file of CA certificates, or omit it to use the certificate \
             file"
        );
        d.write("ca.crt", &b.cert);
        let tls = Tls::load(&d.settings(true)).expect("a usable pair");
        assert_eq!(tls.ca_bundle(), b.cert.as_bytes());
        let tls = Tls::load(&d.settings(false)).expect("a usable pair");
        assert_eq!(tls.ca_bundle(), a.cert.as_bytes());
    }

    #[test]
    fn reloads_swap_usable_pairs_and_keep_the_previous_one_otherwise() {
        let d = Dir::new();
        let (a, b) = (pair("a.example"), pair("b.example"));
        d.write("tls.crt", &a.cert);
        d.write("tls.key", &a.key);
        let tls = Tls::load(&d.settings(false)).expect("loaded");
        let mut changes = tls.subscribe();
        let served_a = tls.certificate_chain();
        assert!(!tls.reload().expect("unchanged"));

        // Half-way through a rewrite: the new certificate, the old key.
        d.write("tls.crt", &b.cert);
        let e = tls.reload().expect_err("mismatched");
        assert!(matches!(e, TlsError::Mismatch { .. }), "{e}");
        assert_eq!(tls.certificate_chain(), served_a);
        assert!(!changes.has_changed().expect("open"));
        assert!(tls.reload().is_err(), "still mismatched");

        d.write("tls.key", &b.key);
        assert!(tls.reload().expect("reloaded"));
        assert_ne!(tls.certificate_chain(), served_a);
        assert!(changes.has_changed().expect("open"));
        assert_eq!(*changes.borrow_and_update(), b.cert.as_bytes());
        assert_eq!(tls.ca_bundle(), b.cert.as_bytes());

        // Gone, then back: the same pair, no change announced.
        let served_b = tls.certificate_chain();
        std::fs::remove_file(d.path("tls.key")).expect("removed");
        assert!(matches!(
            tls.reload(),
            Err(TlsError::Read {
                file: FileKind::Key,
                ..
            })
        ));
        d.write("tls.key", &b.key);
        assert!(!tls.reload().expect("unchanged"));
        assert_eq!(tls.certificate_chain(), served_b);
        assert!(!changes.has_changed().expect("open"));
    }

    #[test]
    fn failures_are_reported_once_until_the_files_change() {
        let d = Dir::new();
        let a = pair("a.example");
        d.write("tls.crt", &a.cert);
        d.write("tls.key", &a.key);
        let tls = Tls::load(&d.settings(false)).expect("loaded");
        let reloader = tls.inner.reloader.clone().expect("files");
        let repeated = |check: Check| match check {
            Check::Failed { repeated, .. } => Some(repeated),
            _ => None,
        };
        d.write("tls.key", "garbage");
        assert_eq!(repeated(reloader.check()), Some(false));
        assert_eq!(repeated(reloader.check()), Some(true));
        d.write("tls.key", "other garbage");
        assert_eq!(repeated(reloader.check()), Some(false));
        std::fs::remove_file(d.path("tls.key")).expect("removed");
        assert_eq!(repeated(reloader.check()), Some(false));
        assert_eq!(repeated(reloader.check()), Some(true));
        d.write("tls.key", &a.key);
        assert!(matches!(
            reloader.check(),
            Check::Unchanged { recovered: true }
        ));
        assert!(matches!(
            reloader.check(),
            Check::Unchanged { recovered: false }
        ));
    }
}
