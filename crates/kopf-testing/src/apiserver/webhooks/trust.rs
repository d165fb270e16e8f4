//! Verifying a webhook's certificate as Go's `crypto/x509` (kube-apiserver) does.
//!
//! webpki refuses a certificate that is also a CA when it is the server's own certificate
//! (`CaUsedAsEndEntity`). Go does not: a server certificate identical to one of the trusted
//! roots is a chain of its own, accepted when it is valid now and for the host name. That is
//! what Python Kopf's `WebhookServer` makes: one self-signed certificate with `CA:TRUE`, put
//! into the `caBundle` as the only root.
//!
//! [`GoLikeVerifier`] defers everything to rustls' webpki verifier and handles only that
//! case: when webpki refuses a certificate that is byte for byte one of the bundle's roots,
//! the certificate is accepted if it is within its validity period and valid for the server
//! name. Everything else (unknown issuers, other names, expired certificates, signatures of
//! the handshake) is webpki's answer; a CA certificate that is not one of the roots is
//! refused as signed by an unknown authority, as Go says of Python Kopf's certificate with a
//! stale bundle. (Go would also accept a `CA:TRUE` server certificate *issued by* a root;
//! webpki does not, and this verifier does not change that.)

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

/// A server certificate verifier trusting exactly a CA bundle, as Go's `crypto/x509` does.
#[derive(Debug)]
pub(crate) struct GoLikeVerifier {
    inner: Arc<WebPkiServerVerifier>,
    roots: Vec<CertificateDer<'static>>,
}

impl GoLikeVerifier {
    /// A verifier for these roots (at least one: webpki's builder refuses none).
    pub fn new(
        roots: Vec<CertificateDer<'static>>,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Self, String> {
        let mut store = rustls::RootCertStore::empty();
        for cert in &roots {
            store
                .add(cert.clone())
                .map_err(|e| format!("the caBundle holds an unusable certificate: {e}"))?;
        }
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
            .build()
            .map_err(|e| format!("cannot configure TLS: {e}"))?;
        Ok(GoLikeVerifier { inner, roots })
    }

    /// Go's checks of a server certificate that is itself a trusted root: validity and name.
    fn verify_trusted_root(
        &self,
        end_entity: &CertificateDer<'_>,
        server_name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let (not_before, not_after) =
            validity(end_entity).ok_or(Error::InvalidCertificate(CertificateError::BadEncoding))?;
        let time = now.as_secs();
        if time < not_before {
            return Err(Error::InvalidCertificate(
                CertificateError::NotValidYetContext {
                    time: now,
                    not_before: UnixTime::since_unix_epoch(std::time::Duration::from_secs(
                        not_before,
                    )),
                },
            ));
        }
        if time > not_after {
            return Err(Error::InvalidCertificate(
                CertificateError::ExpiredContext {
                    time: now,
                    not_after: UnixTime::since_unix_epoch(std::time::Duration::from_secs(
                        not_after,
                    )),
                },
            ));
        }
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        Ok(ServerCertVerified::assertion())
    }
}

/// Whether webpki refused a certificate for being a CA used as an end entity.
fn is_ca_as_end_entity(e: &Error) -> bool {
    matches!(e, Error::InvalidCertificate(CertificateError::Other(other))
        if format!("{other:?}").contains("CaUsedAsEndEntity"))
}

impl ServerCertVerifier for GoLikeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => Ok(verified),
            // Only webpki's refusal of a CA certificate as the end entity: any other failure
            // (a wrong key usage, a bad signature) stands, as it does in Go.
            Err(e)
                if is_ca_as_end_entity(&e)
                    && self.roots.iter().any(|r| r.as_ref() == end_entity.as_ref()) =>
            {
                tracing::debug!(error = %e, "the webhook's certificate is one of the caBundle's roots: checked as Go does");
                self.verify_trusted_root(end_entity, server_name, now)
            }
            // A CA certificate that is not a root: webpki stops at its CA-ness before looking
            // for its issuer; Go (whose bundle has no such certificate) names the issuer.
            Err(e) if is_ca_as_end_entity(&e) => {
                Err(Error::InvalidCertificate(CertificateError::UnknownIssuer))
            }
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A DER element: its tag and contents, and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// `notBefore` and `notAfter` of a certificate, in seconds since the Unix epoch.
fn validity(cert: &[u8]) -> Option<(u64, u64)> {
    const SEQUENCE: u8 = 0x30;
    let (SEQUENCE, certificate, _) = element(cert)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = element(certificate)? else {
        return None;
    };
    let mut rest = tbs;
    // version [0] EXPLICIT (optional), serialNumber, signature, issuer, validity.
    let (tag, _, after) = element(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    for _ in 0..3 {
        rest = element(rest)?.2;
    }
    let (SEQUENCE, validity, _) = element(rest)? else {
        return None;
    };
    let (t1, before, after) = element(validity)?;
    let (t2, not_after, _) = element(after)?;
    Some((time(t1, before)?, time(t2, not_after)?))
}

/// A UTCTime (`YYMMDDHHMMSSZ`, 1950–2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) as Unix
/// seconds.
fn time(tag: u8, text: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?;
    let digits = text.strip_suffix('Z').filter(|d| d.is_ascii())?;
    let (year, rest) = match tag {
        0x17 if digits.len() == 12 => {
            let yy: i16 = digits[..2].parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &digits[2..])
        }
        0x18 if digits.len() == 14 => (digits[..4].parse().ok()?, &digits[4..]),
        _ => return None,
    };
    let two = |i: usize| rest.get(i..i + 2)?.parse::<i8>().ok();
    let dt =
        jiff::civil::DateTime::new(year, two(0)?, two(2)?, two(4)?, two(6)?, two(8)?, 0).ok()?;
    let seconds = dt
        .to_zoned(jiff::tz::TimeZone::UTC)
        .ok()?
        .timestamp()
        .as_second();
    u64::try_from(seconds).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose, date_time_ymd,
    };

    /// A self-signed CA certificate serving as its own server certificate, as Python Kopf's
    /// `WebhookServer.build_certificate` makes them.
    fn kopf_like(sans: &[&str], years: Option<(i32, i32)>) -> CertificateDer<'static> {
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        if let Some((from, to)) = years {
            params.not_before = date_time_ymd(from, 1, 1);
            params.not_after = date_time_ymd(to, 1, 1);
        }
        params.self_signed(&key).expect("certificate").der().clone()
    }

    fn verify(
        roots: &[&CertificateDer<'static>],
        cert: &CertificateDer<'static>,
        name: &str,
    ) -> Result<ServerCertVerified, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = roots.iter().map(|c| (*c).clone()).collect();
        let verifier = GoLikeVerifier::new(roots, provider).expect("verifier");
        let name = ServerName::try_from(name.to_string()).expect("name");
        verifier.verify_server_cert(cert, &[], &name, &[], UnixTime::now())
    }

    #[test]
    fn a_self_signed_ca_that_is_its_own_root_is_trusted_for_its_names() {
        let cert = kopf_like(&["localhost", "127.0.0.1"], None);
        // webpki alone refuses it (what this verifier is for).
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut store = rustls::RootCertStore::empty();
        store.add(cert.clone()).expect("root");
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
            .build()
            .expect("webpki");
        let name = ServerName::try_from("localhost").expect("name");
        let refused = webpki
            .verify_server_cert(&cert, &[], &name, &[], UnixTime::now())
            .expect_err("webpki refuses a CA as the end entity");
        assert!(
            format!("{refused:?}").contains("CaUsedAsEndEntity"),
            "{refused:?}"
        );
        // Go's rules accept it, for each of its names.
        assert!(verify(&[&cert], &cert, "localhost").is_ok());
        assert!(verify(&[&cert], &cert, "127.0.0.1").is_ok());
    }

    #[test]
    fn wrong_names_expired_and_untrusted_certificates_are_refused() {
        let cert = kopf_like(&["localhost", "127.0.0.1"], None);
        let wrong = verify(&[&cert], &cert, "example.com").expect_err("other host");
        assert!(
            matches!(
                wrong,
                Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })
            ),
            "{wrong:?}"
        );
        assert!(verify(&[&cert], &cert, "10.1.2.3").is_err());
        let expired = kopf_like(&["localhost"], Some((2001, 2002)));
        let e = verify(&[&expired], &expired, "localhost").expect_err("expired");
        assert!(
            matches!(
                e,
                Error::InvalidCertificate(CertificateError::ExpiredContext { .. })
            ),
            "{e:?}"
        );
        let future = kopf_like(&["localhost"], Some((2090, 2099)));
        let e = verify(&[&future], &future, "localhost").expect_err("not yet valid");
        assert!(
            matches!(
                e,
                Error::InvalidCertificate(CertificateError::NotValidYetContext { .. })
            ),
            "{e:?}"
        );
        // A bundle with another certificate (not this one) does not make it trusted.
        let other = kopf_like(&["localhost"], None);
        let e = verify(&[&other], &cert, "localhost").expect_err("unknown authority");
        assert!(
            matches!(
                e,
                Error::InvalidCertificate(CertificateError::UnknownIssuer)
            ),
            "{e:?}"
        );
    }

    #[test]
    fn validity_reads_utc_and_generalized_times() {
        let cert = kopf_like(&["localhost"], Some((2001, 2060)));
        let (from, to) = validity(&cert).expect("validity");
        assert_eq!(from, 978_307_200); // 2001-01-01T00:00:00Z (UTCTime)
        assert_eq!(to, 2_840_140_800); // 2060-01-01T00:00:00Z (GeneralizedTime)
        assert_eq!(validity(b"\x30\x03\x02\x01\x00"), None);
    }
}
