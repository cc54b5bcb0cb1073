//! TLS on the listeners (rustls, with the ring provider): a certificate chain and its private
//! key, both PEM files, read once at start-up. When they are configured, both listeners speak
//! TLS only: the gRPC port offers ALPN `h2`, the HTTP port `http/1.1`. The handshake runs in
//! the connection's task ([`crate::conn`]) and counts against the header timeout, so a client
//! that opens a socket and never finishes the handshake is dropped; a failed handshake ends
//! that connection alone.

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The acceptors of both listeners, made from one certificate and key.
#[derive(Clone)]
pub struct Tls {
    /// The gRPC listener's (ALPN `h2`).
    pub grpc: TlsAcceptor,
    /// The HTTP listener's (ALPN `http/1.1`).
    pub http: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

/// `path`'s bytes, or an error naming `key` (the configuration key) and the file.
fn read(key: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{key}: cannot read {}: {e}", path.display()))
}

impl Tls {
    /// Reads the certificate chain at `cert` and the private key at `key` (PEM; the key in
    /// PKCS#8, PKCS#1 or SEC1 form) and checks that they belong together. Blocking file I/O:
    /// call it off the async executor.
    ///
    /// # Errors
    /// One line naming the configuration key (`tls.cert`, `tls.key`), the file and what is
    /// wrong with it.
    pub fn load(cert: &Path, key: &Path) -> Result<Tls, String> {
        let cert_pem = read("tls.cert", cert)?;
        let key_pem = read("tls.key", key)?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("tls.cert: {}: not a PEM certificate: {e}", cert.display()))?;
        if chain.is_empty() {
            return Err(format!(
                "tls.cert: {}: no certificate in it (expected a PEM \"CERTIFICATE\" block)",
                cert.display()
            ));
        }
        let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            format!(
                "tls.key: {}: no PEM private key in it (expected \"PRIVATE KEY\", \"RSA PRIVATE KEY\" or \"EC PRIVATE KEY\"): {e}",
                key.display()
            )
        })?;
        let config = |alpn: &[u8]| -> Result<TlsAcceptor, String> {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("tls: {e}"))?
                .with_no_client_auth()
                .with_single_cert(chain.clone(), private.clone_key())
                .map_err(|e| {
                    format!(
                        "tls.key: {} does not fit the certificate {}, or is not usable: {e}",
                        key.display(),
                        cert.display()
                    )
                })?;
            config.alpn_protocols = vec![alpn.to_vec()];
            Ok(TlsAcceptor::from(Arc::new(config)))
        };
        Ok(Tls {
            grpc: config(b"h2")?,
            http: config(b"http/1.1")?,
        })
    }
}
