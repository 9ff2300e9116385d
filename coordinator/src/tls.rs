//! TLS for the coordinator's one port (`serve --tls-cert FILE --tls-key FILE`, or
//! `serve --tls-self-signed --tls-name HOST[,IP...]`): gRPC, the dashboard and the JSON
//! API all move to `https://`. ALPN offers HTTP/2 (gRPC) and HTTP/1.1 (browsers, curl).
//! Handshakes run in each connection's own task with a deadline
//! ([`crate::server::listener`]), so a client that stalls in its handshake holds up
//! nobody else.
//!
//! [`self_signed`] makes a fleet's own small PKI once: a CA (the one file workers trust,
//! `--ca-cert ca.pem`) and a server certificate it signs for the coordinator's names. A
//! bare self-signed certificate would not do: rustls (like browsers) refuses a CA
//! certificate used as the server's own ("CaUsedAsEndEntity").

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;

/// A server TLS configuration from PEM files: the certificate chain (leaf first) and its
/// private key (PKCS#8, PKCS#1 or SEC1).
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("{}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in the file", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
    let mut config = ServerConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| format!("certificate and key do not go together: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The files of a fleet's own PKI (see [`self_signed`]).
#[derive(Clone, Debug)]
pub struct SelfSigned {
    /// The CA certificate: what every client passes as `--ca-cert`.
    pub ca: std::path::PathBuf,
    /// The server certificate chain (server, then CA).
    pub cert: std::path::PathBuf,
    /// The server key (0600).
    pub key: std::path::PathBuf,
    /// The names the server certificate is valid for.
    pub names: Vec<String>,
    /// Whether this call made (or re-made) the server certificate.
    pub created: bool,
}

const CA_NAME: &str = "e2fleet fleet CA";

fn write_private(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn ca_params() -> rcgen::CertificateParams {
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, CA_NAME);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(2099, 12, 31);
    params
}

/// Makes (once) a fleet's own CA and a server certificate for `names` (host names and IP
/// addresses) in `dir`: `ca.pem` (give it to every client as `--ca-cert`), `ca-key.pem`,
/// `server.pem` and `server-key.pem` (keys 0600), and a `.gitignore` that keeps the folder
/// out of any git working tree it lands in. Later starts reuse them; a server
/// certificate for other names is made again with the same CA, so clients keep working.
pub fn self_signed(dir: &Path, names: &[String]) -> Result<SelfSigned, String> {
    if names.is_empty() {
        return Err("--tls-name: give at least one host name or address".into());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // the folder holds private keys: a `git add .` in a working tree must not take them
    let ignore = dir.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(
            &ignore,
            "# private keys of the fleet's CA and server: never commit\n*\n",
        )
        .map_err(|e| format!("cannot write {}: {e}", ignore.display()))?;
    }
    let files = SelfSigned {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server-key.pem"),
        names: names.to_vec(),
        created: false,
    };
    let ca_key_path = dir.join("ca-key.pem");
    let names_path = dir.join("server-names.txt");
    let bad = |e: rcgen::Error| format!("cannot make the certificates: {e}");
    let ca_key = if ca_key_path.exists() && files.ca.exists() {
        let pem = std::fs::read_to_string(&ca_key_path)
            .map_err(|e| format!("cannot read {}: {e}", ca_key_path.display()))?;
        rcgen::KeyPair::from_pem(&pem).map_err(bad)?
    } else {
        let key = rcgen::KeyPair::generate().map_err(bad)?;
        let ca = ca_params().self_signed(&key).map_err(bad)?;
        write_private(&ca_key_path, &key.serialize_pem())?;
        std::fs::write(&files.ca, ca.pem())
            .map_err(|e| format!("cannot write {}: {e}", files.ca.display()))?;
        key
    };
    let wanted = names.join(",");
    let current = std::fs::read_to_string(&names_path).unwrap_or_default();
    if current.trim() == wanted && files.cert.exists() && files.key.exists() {
        return Ok(files);
    }
    // the issuer as the CA certificate on disk names it: same name, same key
    let issuer = ca_params().self_signed(&ca_key).map_err(bad)?;
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(bad)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, names[0].as_str());
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(2099, 12, 31);
    let key = rcgen::KeyPair::generate().map_err(bad)?;
    let cert = params.signed_by(&key, &issuer, &ca_key).map_err(bad)?;
    let ca_pem = std::fs::read_to_string(&files.ca)
        .map_err(|e| format!("cannot read {}: {e}", files.ca.display()))?;
    std::fs::write(&files.cert, format!("{}{}", cert.pem(), ca_pem))
        .map_err(|e| format!("cannot write {}: {e}", files.cert.display()))?;
    write_private(&files.key, &key.serialize_pem())?;
    std::fs::write(&names_path, &wanted)
        .map_err(|e| format!("cannot write {}: {e}", names_path.display()))?;
    Ok(SelfSigned {
        created: true,
        ..files
    })
}
