//! Certificates made on the spot: a CA and a serving certificate signed by it, for
//! kopf-rs's two HTTPS servers (the webhook server of `kopf-admission`, the fake API
//! server of `kopf-testing`).
//!
//! [`generate`] makes a CA (`basicConstraints` CA, `keyCertSign`, `cRLSign`,
//! `digitalSignature`) and a serving certificate signed by it (`serverAuth`, with the
//! authority key identifier OpenSSL's strict mode wants), both with new ECDSA P-256 keys,
//! and returns the chain to serve (serving, then CA), the serving key and the CA as PEM
//! and DER. The CA's key is dropped once the serving certificate is signed. What differs
//! between the servers — the CA's name, its path length, the validity, the serving
//! certificate's names and key usages — is the caller's: a [`CaSpec`] and rcgen's
//! `CertificateParams` of the serving certificate.
//!
//! ```
//! use kopf_tls::{CaSpec, generate};
//! use rcgen::{CertificateParams, DistinguishedName, DnType};
//!
//! // A CA named after its key, and a certificate for localhost.
//! let ca = CaSpec::new(|key_id| {
//!     let mut name = DistinguishedName::new();
//!     name.push(DnType::CommonName, format!("my CA {key_id}"));
//!     name
//! });
//! let serving = CertificateParams::new(vec!["localhost".to_string()]).expect("names");
//! let made = generate(ca, serving).expect("certificates");
//! assert_eq!(made.chain.len(), 2);
//! assert_eq!(made.chain[1], made.ca_der);
//! ```

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The name of a CA, made from its key identifier (the first 8 bytes, hex).
type NameFn = Box<dyn FnOnce(&str) -> DistinguishedName>;

/// What a CA made by [`generate`] looks like besides what every one has.
pub struct CaSpec {
    name: NameFn,
    path_length: Option<u8>,
    /// (not before, valid for)
    validity: Option<(SystemTime, Duration)>,
}

impl std::fmt::Debug for CaSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaSpec")
            .field("path_length", &self.path_length)
            .field("validity", &self.validity)
            .finish_non_exhaustive()
    }
}

impl CaSpec {
    /// A CA named by `name(key_id)`, with no path length constraint and rcgen's default
    /// validity.
    pub fn new(name: impl FnOnce(&str) -> DistinguishedName + 'static) -> Self {
        CaSpec {
            name: Box::new(name),
            path_length: None,
            validity: None,
        }
    }

    /// At most `length` CAs below this one (0: it signs only end certificates).
    pub fn path_length(mut self, length: u8) -> Self {
        self.path_length = Some(length);
        self
    }

    /// The CA and the serving certificate valid from `not_before` for `length` (else
    /// rcgen's default validity).
    pub fn validity(mut self, not_before: SystemTime, length: Duration) -> Self {
        self.validity = Some((not_before, length));
        self
    }
}

/// A CA and a serving certificate signed by it.
#[derive(Debug)]
pub struct Generated {
    /// The CA certificate, PEM (what clients trust).
    pub ca_pem: String,
    /// The CA certificate, DER.
    pub ca_der: CertificateDer<'static>,
    /// The chain to serve: the serving certificate, then the CA.
    pub chain: Vec<CertificateDer<'static>>,
    /// The serving certificate's private key (PKCS#8).
    pub key: PrivateKeyDer<'static>,
}

impl Generated {
    /// The serving certificate, DER.
    pub fn serving_der(&self) -> &CertificateDer<'static> {
        &self.chain[0]
    }
}

/// Makes a CA as `ca` says and a serving certificate from `serving` signed by it (its
/// `serverAuth` usage and authority key identifier are set here, and the CA's validity if
/// it has one; its names and key usages are the caller's).
pub fn generate(ca: CaSpec, mut serving: CertificateParams) -> Result<Generated, rcgen::Error> {
    let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::default();
    let key_id: String = params
        .key_identifier(&ca_key)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    params.distinguished_name = (ca.name)(&key_id);
    params.is_ca = IsCa::Ca(match ca.path_length {
        Some(length) => BasicConstraints::Constrained(length),
        None => BasicConstraints::Unconstrained,
    });
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    if let Some((not_before, length)) = ca.validity {
        let since_epoch = not_before.duration_since(UNIX_EPOCH).unwrap_or_default();
        let not_before = rcgen::date_time_ymd(1970, 1, 1) + since_epoch;
        (params.not_before, params.not_after) = (not_before, not_before + length);
        (serving.not_before, serving.not_after) = (not_before, not_before + length);
    }
    let issuer = CertifiedIssuer::self_signed(params, ca_key)?;
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    serving.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let cert = serving.signed_by(&key, &issuer)?;
    Ok(Generated {
        ca_pem: issuer.pem(),
        ca_der: issuer.der().clone(),
        chain: vec![cert.der().clone(), issuer.der().clone()],
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{ServerName, UnixTime};
    use rustls::{CertificateError, Error, RootCertStore};

    use super::*;

    fn verify(made: &Generated, name: &str, at: SystemTime) -> Result<(), Error> {
        let mut roots = RootCertStore::empty();
        roots.add(made.ca_der.clone())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| Error::General(e.to_string()))?;
        let name =
            ServerName::try_from(name.to_string()).map_err(|e| Error::General(e.to_string()))?;
        let at = UnixTime::since_unix_epoch(at.duration_since(UNIX_EPOCH).unwrap_or_default());
        verifier
            .verify_server_cert(made.serving_der(), &made.chain[1..], &name, &[], at)
            .map(|_| ())
    }

    fn named(id: &str) -> DistinguishedName {
        let mut name = DistinguishedName::new();
        name.push(rcgen::DnType::CommonName, format!("test CA {id}"));
        name
    }

    /// A client trusting the CA verifies the served chain for the serving names, not for
    /// others, and not outside the validity.
    #[test]
    fn the_serving_certificate_verifies_against_the_ca() {
        let start = SystemTime::now() - Duration::from_secs(60);
        let day = Duration::from_secs(24 * 3600);
        let ca = CaSpec::new(named).path_length(0).validity(start, day);
        let serving =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .expect("names");
        let made = generate(ca, serving).expect("certificates");
        assert_eq!(made.chain.len(), 2);
        assert_eq!(made.chain[1], made.ca_der);
        assert!(made.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let now = SystemTime::now();
        verify(&made, "localhost", now).expect("valid for localhost");
        verify(&made, "127.0.0.1", now).expect("valid for 127.0.0.1");
        assert!(matches!(
            verify(&made, "example.com", now),
            Err(Error::InvalidCertificate(CertificateError::NotValidForName))
                | Err(Error::InvalidCertificate(
                    CertificateError::NotValidForNameContext { .. }
                ))
        ));
        assert!(matches!(
            verify(&made, "localhost", now + 2 * day),
            Err(Error::InvalidCertificate(CertificateError::Expired))
                | Err(Error::InvalidCertificate(
                    CertificateError::ExpiredContext { .. }
                ))
        ));
    }

    /// Each CA is named after its own key: two generated CAs differ, and neither verifies
    /// the other's serving certificate.
    #[test]
    fn each_ca_is_its_own() {
        let make = || {
            let serving = CertificateParams::new(vec!["localhost".to_string()]).expect("names");
            generate(CaSpec::new(named), serving).expect("certificates")
        };
        let (a, b) = (make(), make());
        assert_ne!(a.ca_pem, b.ca_pem);
        let crossed = Generated {
            ca_pem: a.ca_pem.clone(),
            ca_der: a.ca_der.clone(),
            chain: vec![b.chain[0].clone()],
            key: b.key.clone_key(),
        };
        assert!(verify(&crossed, "localhost", SystemTime::now()).is_err());
    }
}
