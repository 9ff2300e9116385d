//! TLS on the writer's links to PostgreSQL, with the meaning libpq gives an address's
//! `sslmode`, so that one address means the same to the read pool and to the writer.
//!
//! The read pool (sqlx) reads `sslmode` and `sslrootcert` itself. The writer's connection
//! (tokio-postgres) knows only `disable`, `prefer` and `require`, and checks no
//! certificate by itself: [`WriterAddress::parse`] takes those two parameters out of the
//! address, gives tokio-postgres the rest, and builds the rustls configuration the mode
//! asks for:
//! - `disable`: no TLS.
//! - `prefer` (the default): TLS when the server offers it, else plain; `require`: TLS or
//!   no connection. In both the server's certificate is not checked (libpq's meaning:
//!   they keep the link from being read, not a server from pretending).
//! - `verify-ca`: TLS, and the server's certificate must chain to `sslrootcert` (a PEM
//!   file of certificates; the system's roots when it is not given).
//! - `verify-full`: and must name the host the address names.
//!
//! Client certificates (`sslcert`, `sslkey`) are refused with a clear error rather than
//! ignored: the writer would connect without them and the read pool with them.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::WebPkiSupportedAlgorithms;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};

use crate::store::StoreError;

/// How an address asks the link to the server to be protected (libpq's `sslmode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it; the certificate not checked.
    Prefer,
    /// TLS always; the certificate not checked.
    Require,
    /// TLS; the certificate chains to a trusted root.
    VerifyCa,
    /// TLS; the certificate chains to a trusted root and names the host.
    VerifyFull,
}

impl FromStr for SslMode {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<SslMode, StoreError> {
        Ok(match s {
            "disable" => SslMode::Disable,
            // (libpq's `allow`: plain first, TLS if the server insists; TLS first is
            // as good for a coordinator)
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(StoreError::Open(format!(
                    "bad PostgreSQL address: sslmode={other} is none of disable, allow, prefer, \
                     require, verify-ca, verify-full"
                )));
            }
        })
    }
}

/// The writer's address: tokio-postgres's settings, and the TLS its connections use.
#[derive(Clone)]
pub struct WriterAddress {
    /// Everything but TLS (its mode set from the address's `sslmode`).
    pub config: tokio_postgres::Config,
    /// `None`: plain connections (`sslmode=disable`).
    pub tls: Option<MakeRustlsConnect>,
    /// The mode it was built for.
    pub mode: SslMode,
}

impl WriterAddress {
    /// Reads a `postgres://` address (see the module docs).
    pub fn parse(address: &str) -> Result<WriterAddress, StoreError> {
        let bad =
            |e: &dyn std::fmt::Display| StoreError::Open(format!("bad PostgreSQL address: {e}"));
        let mut url = url::Url::parse(address).map_err(|e| bad(&e))?;
        let (mut mode, mut root) = (SslMode::Prefer, None);
        let (mut rest, mut taken) = (Vec::new(), false);
        for (key, value) in url.query_pairs().into_owned() {
            taken |= key.starts_with("ssl");
            match key.as_str() {
                "sslmode" => mode = value.parse()?,
                "sslrootcert" => root = Some(PathBuf::from(value)),
                "sslcert" | "sslkey" => {
                    return Err(StoreError::Open(
                        "bad PostgreSQL address: client certificates (sslcert, sslkey) are not \
                         supported; use a password"
                            .into(),
                    ));
                }
                _ => rest.push((key, value)),
            }
        }
        // (the address as given when it names no TLS parameter)
        let passed = if !taken {
            address
        } else {
            if rest.is_empty() {
                url.set_query(None);
            } else {
                url.query_pairs_mut().clear().extend_pairs(rest);
            }
            url.as_str()
        };
        let mut config = tokio_postgres::Config::from_str(passed).map_err(|e| bad(&e))?;
        config.ssl_mode(match mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        let tls = client_config(mode, root)?.map(MakeRustlsConnect::new);
        Ok(WriterAddress { config, tls, mode })
    }
}

/// The rustls configuration `mode` asks for (`None` for no TLS).
fn client_config(mode: SslMode, root: Option<PathBuf>) -> Result<Option<ClientConfig>, StoreError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Open(format!("TLS to PostgreSQL: {e}")))?;
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ServerCertVerifier> = match mode {
        SslMode::Disable => return Ok(None),
        SslMode::Prefer | SslMode::Require => Arc::new(Lenient {
            chain: None,
            algorithms,
        }),
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let roots = Arc::new(roots(root)?);
            let chain = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| StoreError::Open(format!("TLS to PostgreSQL: {e}")))?;
            if mode == SslMode::VerifyCa {
                Arc::new(Lenient {
                    chain: Some(chain),
                    algorithms,
                })
            } else {
                chain
            }
        }
    };
    Ok(Some(
        builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth(),
    ))
}

/// The roots a verified link trusts: `sslrootcert`'s certificates, or the system's.
fn roots(root: Option<PathBuf>) -> Result<RootCertStore, StoreError> {
    let mut store = RootCertStore::empty();
    let certs: Vec<CertificateDer<'static>> = match &root {
        Some(path) => CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<_, _>>())
            .map_err(|e| {
                StoreError::Open(format!(
                    "TLS to PostgreSQL: cannot read sslrootcert {}: {e}",
                    path.display()
                ))
            })?,
        None => rustls_native_certs::load_native_certs().certs,
    };
    let (added, _) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(StoreError::Open(match root {
            Some(path) => format!(
                "TLS to PostgreSQL: no certificate in sslrootcert {}",
                path.display()
            ),
            None => "TLS to PostgreSQL: the system has no root certificates; name the server's \
                     CA with sslrootcert="
                .into(),
        }));
    }
    Ok(store)
}

/// The certificate checks short of `verify-full`: none (`prefer`, `require`: libpq checks
/// nothing in these modes; see the module docs) or the chain alone (`verify-ca`: `chain`,
/// the name the certificate gives not compared with the host). Either way the
/// handshake's signatures are checked against the certificate presented.
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_s_tls_parameters_are_read_and_the_rest_passed_on() {
        let a = WriterAddress::parse(
            "postgres://e2fleet:s3cret@db.internal:5433/fleet?sslmode=require&application_name=x",
        )
        .unwrap();
        assert_eq!(a.mode, SslMode::Require);
        assert!(a.tls.is_some());
        assert_eq!(
            a.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        assert_eq!(a.config.get_dbname(), Some("fleet"));
        assert_eq!(a.config.get_ports(), &[5433]);
        assert_eq!(a.config.get_application_name(), Some("x"));

        let plain = WriterAddress::parse("postgres://e2fleet@db/fleet?sslmode=disable").unwrap();
        assert_eq!(plain.mode, SslMode::Disable);
        assert!(plain.tls.is_none());
        assert_eq!(
            plain.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable
        );

        let default = WriterAddress::parse("postgres://e2fleet@db/fleet").unwrap();
        assert_eq!(default.mode, SslMode::Prefer, "libpq's default");
        assert!(default.tls.is_some());
    }

    #[test]
    fn bad_tls_parameters_are_refused_with_why() {
        for (address, says) in [
            ("postgres://u@db/f?sslmode=sometimes", "sslmode=sometimes"),
            (
                "postgres://u@db/f?sslcert=/c.pem&sslkey=/k.pem",
                "client certificates",
            ),
            (
                "postgres://u@db/f?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
                "cannot read sslrootcert /nonexistent/ca.pem",
            ),
        ] {
            let e = WriterAddress::parse(address)
                .err()
                .expect(address)
                .to_string();
            assert!(e.contains(says), "{address}: {e}");
        }
    }
}
