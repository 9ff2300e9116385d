//! How clients (workers, the admin CLI) reach the coordinator: `http://` in the clear, or
//! `https://` with TLS, trusting the system's roots or a given CA certificate (for a
//! fleet with its own, e.g. self-signed, certificate).

use std::path::Path;
use std::time::Duration;

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

/// An endpoint for `url`; `ca_cert` is a PEM file of certificates to trust for `https://`
/// (the system's roots when `None`).
pub fn endpoint(url: &str, ca_cert: Option<&Path>) -> Result<Endpoint, String> {
    let mut endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| format!("bad coordinator URL {url:?}: {e}"))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true);
    if url.starts_with("https://") {
        let mut tls = ClientTlsConfig::new();
        tls = match ca_cert {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    format!("cannot read the CA certificate {}: {e}", path.display())
                })?;
                tls.ca_certificate(Certificate::from_pem(pem))
            }
            None => tls.with_native_roots(),
        };
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| format!("TLS setup: {e}"))?;
    } else if ca_cert.is_some() {
        return Err("--ca-cert needs an https:// coordinator URL".into());
    }
    Ok(endpoint)
}
