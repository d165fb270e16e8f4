//! The webhook server's certificate: PEM files re-read when they change, or a CA and a
//! server certificate generated at start for development. Only rustls' *ring* provider is
//! used.
//!
//! The generated pair is a CA (ECDSA P-256, `CA:true`, key cert sign) and a leaf signed by
//! it (`CA:false`, server auth) with the settings' SANs: webpki refuses a CA-flagged
//! certificate as a server's own certificate, so one self-signed CA certificate would not
//! do. IP SANs are written as IP addresses; `0.0.0.0` and `::` are left out.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;

/// Where the server's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    /// PEM files, re-read when they change.
    Files {
        /// The certificate chain (the server's certificate first).
        cert: PathBuf,
        /// Its private key.
        key: PathBuf,
        /// The CA bundle for `caBundle` (default: the certificate file itself).
        ca: Option<PathBuf>,
    },
    /// A CA and a server certificate signed by it, generated at start.
    SelfSigned {
        /// Subject alternative names: host names or IP addresses.
        sans: Vec<String>,
    },
}

/// How to load the certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The source.
    pub source: CertSource,
    /// How often the files are checked for changes.
    pub check_interval: Duration,
}

/// Failures to load or generate the certificate.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error(
        "cannot read the webhook {what} {path}: {source}; set --webhook-cert/--webhook-key to PEM files, or omit them for a generated certificate"
    )]
    Read {
        /// certificate, key or CA bundle.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file holds no usable PEM.
    #[error("the webhook {what} {path} is not usable: {reason}")]
    Pem {
        /// certificate, key or CA bundle.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The key does not belong to the certificate, or the provider rejects it.
    #[error("the webhook key {key} does not fit the certificate {cert}: {reason}")]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        reason: String,
    },
    /// Generating the development certificate failed.
    #[error("cannot generate the webhook certificate: {0}")]
    Generate(String),
    /// The rustls configuration failed.
    #[error("cannot configure TLS for the webhooks: {0}")]
    Config(String),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

#[derive(Debug)]
struct Resolver(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().ok().map(|k| k.clone())
    }
}

/// The loaded certificate: a rustls configuration whose certificate is swapped when the
/// files change, and the CA bundle for the webhook configurations.
#[derive(Clone)]
pub struct Tls {
    config: Arc<rustls::ServerConfig>,
    resolver: Arc<Resolver>,
    ca: Arc<watch::Sender<Vec<u8>>>,
    watcher: Option<Arc<WatcherGuard>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

/// Ends the file watcher when the last `Tls` clone is dropped.
struct WatcherGuard(tokio::task::JoinHandle<()>);

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

fn certs(
    what: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Pem {
            what,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            what,
            path: path.to_path_buf(),
            reason: "no CERTIFICATE block found".into(),
        });
    }
    Ok(certs)
}

/// Reads a certificate/key pair and the CA bundle from files.
fn load_files(
    cert: &Path,
    key: &Path,
    ca: Option<&Path>,
) -> Result<(CertifiedKey, Vec<u8>), TlsError> {
    let cert_pem = read("certificate", cert)?;
    let chain = certs("certificate", cert, &cert_pem)?;
    let key_pem = read("key", key)?;
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Pem {
        what: "key",
        path: key.to_path_buf(),
        reason: e.to_string(),
    })?;
    let certified =
        CertifiedKey::from_der(chain, private, &provider()).map_err(|e| TlsError::Mismatch {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            reason: e.to_string(),
        })?;
    let bundle = match ca {
        Some(ca) => {
            let pem = read("CA bundle", ca)?;
            certs("CA bundle", ca, &pem)?;
            pem
        }
        None => cert_pem,
    };
    Ok((certified, bundle))
}

fn generate(sans: &[String]) -> Result<(CertifiedKey, Vec<u8>), TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose, SanType,
    };
    let err = |e: rcgen::Error| TlsError::Generate(e.to_string());
    let ca_key = KeyPair::generate().map_err(err)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    // A distinct name per generated CA: a client trusting another one reports an
    // unknown issuer rather than a bad signature.
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("kopf-rs webhook CA {stamp:x}"));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(err)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut names: Vec<SanType> = Vec::new();
    for san in sans {
        let san = san.trim_matches(|c| c == '[' || c == ']');
        let entry = match san.parse::<IpAddr>() {
            Ok(ip) if ip.is_unspecified() => continue,
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(san.to_string().try_into().map_err(err)?),
        };
        if !names.contains(&entry) {
            names.push(entry);
        }
    }
    let leaf_key = KeyPair::generate().map_err(err)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params.subject_alt_names = names;
    params.is_ca = IsCa::ExplicitNoCa;
    params.distinguished_name.push(
        DnType::CommonName,
        sans.first()
            .cloned()
            .unwrap_or_else(|| "kopf-rs webhooks".into()),
    );
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let leaf = params.signed_by(&leaf_key, &issuer).map_err(err)?;
    let private = PrivateKeyDer::try_from(leaf_key.serialize_der())
        .map_err(|e| TlsError::Generate(e.to_string()))?;
    let chain = vec![leaf.der().clone(), ca_cert.der().clone()];
    let certified = CertifiedKey::from_der(chain, private, &provider())
        .map_err(|e| TlsError::Generate(e.to_string()))?;
    Ok((certified, ca_cert.pem().into_bytes()))
}

fn modified(paths: &[&Path]) -> Vec<Option<SystemTime>> {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

impl Tls {
    /// Loads the files or generates the certificate. For files, a task (on the current
    /// tokio runtime, if any) checks them every `check_interval` and swaps a changed pair
    /// in for new handshakes; a broken pair is logged and the old one kept.
    pub fn load(settings: &TlsSettings) -> Result<Tls, TlsError> {
        let (certified, bundle) = match &settings.source {
            CertSource::Files { cert, key, ca } => load_files(cert, key, ca.as_deref())?,
            CertSource::SelfSigned { sans } => generate(sans)?,
        };
        let resolver = Arc::new(Resolver(RwLock::new(Arc::new(certified))));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let (ca, _) = watch::channel(bundle);
        let mut tls = Tls {
            config: Arc::new(config),
            resolver,
            ca: Arc::new(ca),
            watcher: None,
        };
        if let CertSource::Files { cert, key, ca } = &settings.source
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let (cert, key, ca) = (cert.clone(), key.clone(), ca.clone());
            let (resolver, sender) = (tls.resolver.clone(), tls.ca.clone());
            let interval = settings.check_interval.max(Duration::from_millis(10));
            let task = runtime.spawn(async move {
                let paths = |c: &PathBuf, k: &PathBuf, a: &Option<PathBuf>| {
                    let mut v = vec![c.clone(), k.clone()];
                    v.extend(a.clone());
                    v
                };
                let all = paths(&cert, &key, &ca);
                let refs: Vec<&Path> = all.iter().map(PathBuf::as_path).collect();
                let mut seen = modified(&refs);
                loop {
                    tokio::time::sleep(interval).await;
                    let now = modified(&refs);
                    if now == seen {
                        continue;
                    }
                    seen = now;
                    match load_files(&cert, &key, ca.as_deref()) {
                        Ok((certified, bundle)) => {
                            if let Ok(mut current) = resolver.0.write() {
                                *current = Arc::new(certified);
                            }
                            tracing::info!("Reloaded the webhook certificate {}.", cert.display());
                            sender.send_if_modified(|b| {
                                let changed = *b != bundle;
                                *b = bundle;
                                changed
                            });
                        }
                        Err(e) => tracing::error!("{e}; still serving the previous certificate"),
                    }
                }
            });
            tls.watcher = Some(Arc::new(WatcherGuard(task)));
        }
        Ok(tls)
    }

    /// The rustls configuration (its certificate follows the reloads).
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.config.clone()
    }

    /// The CA bundle (PEM) the API server must trust: the generated CA, the `ca` file, or
    /// the certificate file itself.
    pub fn ca_bundle(&self) -> Vec<u8> {
        self.ca.borrow().clone()
    }

    /// Changes of the CA bundle (after a reload of the files).
    pub fn subscribe(&self) -> watch::Receiver<Vec<u8>> {
        self.ca.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_pair_is_a_ca_and_a_leaf_with_the_sans() {
        let tls = Tls::load(&TlsSettings {
            source: CertSource::SelfSigned {
                sans: vec!["localhost".into(), "0.0.0.0".into(), "127.0.0.1".into()],
            },
            check_interval: Duration::from_secs(60),
        })
        .expect("generated");
        let bundle = tls.ca_bundle();
        let pem = String::from_utf8_lossy(&bundle);
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        assert_eq!(pem.matches("BEGIN CERTIFICATE").count(), 1);
    }

    #[test]
    fn file_errors_name_the_file_and_what_to_do() {
        let dir = tempfile::tempdir().expect("dir");
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        let load = || {
            Tls::load(&TlsSettings {
                source: CertSource::Files {
                    cert: cert.clone(),
                    key: key.clone(),
                    ca: None,
                },
                check_interval: Duration::from_secs(60),
            })
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        let missing = load().expect_err("missing");
        assert!(
            missing.contains("tls.crt") && missing.contains("--webhook-cert"),
            "{missing}"
        );
        std::fs::write(&cert, "garbage").expect("write");
        let garbage = load().expect_err("garbage");
        assert!(garbage.contains("no CERTIFICATE"), "{garbage}");
        // A key that does not belong to the certificate.
        let a = rcgen::generate_simple_self_signed(vec!["a".to_string()]).expect("a");
        let b = rcgen::generate_simple_self_signed(vec!["b".to_string()]).expect("b");
        std::fs::write(&cert, a.cert.pem()).expect("write");
        std::fs::write(&key, b.signing_key.serialize_pem()).expect("write");
        let mismatch = load().expect_err("mismatch");
        assert!(mismatch.contains("does not fit"), "{mismatch}");
        std::fs::write(&key, a.signing_key.serialize_pem()).expect("write");
        load().expect("a matching pair");
    }
}
