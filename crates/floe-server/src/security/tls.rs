//! TLS on the listeners (rustls, with the ring provider): a certificate chain and its private
//! key, both PEM files. When they are configured, both listeners speak TLS only: the gRPC port
//! offers ALPN `h2` (and `http/1.1`, for the one-line hint it answers HTTP/1 clients), the
//! HTTP port `http/1.1`. The handshake runs in the connection's task
//! ([`crate::conn`]) and counts against the header timeout, so a client that opens a socket
//! and never finishes the handshake is dropped; a failed handshake ends that connection alone.
//!
//! The files are checked before they are used, at start-up and at each reload: a certificate
//! that has expired or is not valid yet (by the server's clock), a CA certificate given where
//! the server's own is expected, or a key that is not the certificate's is refused with one
//! line naming the key and the file. Both acceptors take their certificate from one
//! [`Certificate`] slot: [`Tls::replace`] swaps it (SIGHUP), and the next handshake uses the
//! new one while open connections go on with theirs.

use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// A checked certificate chain and key, ready to serve.
pub struct Certificate {
    key: Arc<CertifiedKey>,
    /// When the server's certificate stops being valid, in Unix seconds.
    pub not_after_s: i64,
    /// Its subject, for the log.
    pub subject: String,
}

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate")
            .field("subject", &self.subject)
            .field("not_after_s", &self.not_after_s)
            .finish_non_exhaustive()
    }
}

/// A Unix time in seconds as an RFC 3339 date, for messages.
pub(crate) fn date(unix_s: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix_s)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{unix_s} (Unix seconds)"))
}

impl Certificate {
    /// Reads the certificate chain at `cert` and the private key at `key` (PEM; the key in
    /// PKCS#8, PKCS#1 or SEC1 form) and checks them at `now_ms` (Unix ms). Blocking file I/O:
    /// call it off the async executor.
    ///
    /// # Errors
    /// One line naming the configuration key (`tls.cert`, `tls.key`), the file and what is
    /// wrong with it.
    pub fn load(cert: &Path, key: &Path, now_ms: u64) -> Result<Certificate, String> {
        let cert_pem = super::read_file("tls.cert", cert)?;
        let key_pem = super::read_file("tls.key", key)?;
        Certificate::parse(&cert_pem, &key_pem, cert, key, now_ms)
    }

    /// [`load`](Self::load) of bytes already read (`cert`, `key`: their files, for messages).
    fn parse(
        cert_pem: &[u8],
        key_pem: &[u8],
        cert: &Path,
        key: &Path,
        now_ms: u64,
    ) -> Result<Certificate, String> {
        // Not the parser's error: it shows the bytes it stopped at.
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                format!(
                    "tls.cert: {}: not a PEM certificate (damaged or cut short?)",
                    cert.display()
                )
            })?;
        let Some(leaf) = chain.first() else {
            return Err(format!(
                "tls.cert: {}: no certificate in it (expected a PEM \"CERTIFICATE\" block)",
                cert.display()
            ));
        };
        let (_, parsed) = x509_parser::parse_x509_certificate(leaf).map_err(|e| {
            format!(
                "tls.cert: {}: the first certificate does not parse: {e}",
                cert.display()
            )
        })?;
        let subject = parsed.subject().to_string();
        if parsed.is_ca() {
            return Err(format!(
                "tls.cert: {}: the first certificate ({subject}) is a CA certificate: give the server's own certificate first, then the CAs that signed it",
                cert.display()
            ));
        }
        let now_s = i64::try_from(now_ms / 1000).unwrap_or(i64::MAX);
        let validity = parsed.validity();
        let (not_before, not_after) = (
            validity.not_before.timestamp(),
            validity.not_after.timestamp(),
        );
        if now_s > not_after {
            return Err(format!(
                "tls.cert: {}: the certificate ({subject}) expired on {}",
                cert.display(),
                date(not_after)
            ));
        }
        if now_s < not_before {
            return Err(format!(
                "tls.cert: {}: the certificate ({subject}) is not valid before {} (is this machine's clock behind?)",
                cert.display(),
                date(not_before)
            ));
        }
        if key_pem
            .windows(b"ENCRYPTED PRIVATE KEY".len())
            .any(|w| w == b"ENCRYPTED PRIVATE KEY")
        {
            return Err(format!(
                "tls.key: {}: an encrypted private key, which floe cannot use: decrypt it (openssl pkey -in KEY -out PLAIN.pem) and keep that file readable by floe alone",
                key.display()
            ));
        }
        let private = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| {
            format!(
                "tls.key: {}: no PEM private key in it (expected \"PRIVATE KEY\", \"RSA PRIVATE KEY\" or \"EC PRIVATE KEY\")",
                key.display()
            )
        })?;
        let provider = rustls::crypto::ring::default_provider();
        let signing = provider
            .key_provider
            .load_private_key(private)
            .map_err(|e| format!("tls.key: {}: not a usable key: {e}", key.display()))?;
        let certified = CertifiedKey::new(chain, signing);
        match certified.keys_match() {
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(rustls::Error::InconsistentKeys(_)) => {
                return Err(format!(
                    "tls.key: {} is not the key of the certificate {}",
                    key.display(),
                    cert.display()
                ))
            }
            Err(other) => {
                return Err(format!(
                    "tls.cert: {}: the certificate cannot be used: {other}",
                    cert.display()
                ))
            }
        }
        Ok(Certificate {
            key: Arc::new(certified),
            not_after_s: not_after,
            subject,
        })
    }
}

/// The certificate both listeners serve: swapped whole on a reload (its key and its expiry
/// together).
#[derive(Debug)]
struct Slot(ArcSwap<Certificate>);

impl ResolvesServerCert for Slot {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0.load().key))
    }
}

/// The acceptors of both listeners, sharing one certificate slot.
#[derive(Clone)]
pub struct Tls {
    /// The gRPC listener's (ALPN `h2`, then `http/1.1` for the hint to HTTP/1 clients).
    pub grpc: TlsAcceptor,
    /// The HTTP listener's (ALPN `http/1.1`).
    pub http: TlsAcceptor,
    slot: Arc<Slot>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

impl Tls {
    /// Reads and checks the certificate chain at `cert` and the private key at `key` at
    /// `now_ms` (see [`Certificate::load`]). Blocking file I/O: call it off the async
    /// executor.
    ///
    /// # Errors
    /// As [`Certificate::load`].
    pub fn load(cert: &Path, key: &Path, now_ms: u64) -> Result<Tls, String> {
        Tls::new(Certificate::load(cert, key, now_ms)?)
    }

    /// Acceptors serving `certificate`.
    ///
    /// # Errors
    /// When rustls refuses its protocol versions (never with the ring provider).
    pub fn new(certificate: Certificate) -> Result<Tls, String> {
        let slot = Arc::new(Slot(ArcSwap::from_pointee(certificate)));
        let config = |alpn: &[&[u8]]| -> Result<TlsAcceptor, String> {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("tls: {e}"))?
                .with_no_client_auth()
                .with_cert_resolver(Arc::clone(&slot) as Arc<dyn ResolvesServerCert>);
            config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            Ok(TlsAcceptor::from(Arc::new(config)))
        };
        Ok(Tls {
            // http/1.1 after h2: an HTTP/1 client is answered a hint ([`crate::serve`]).
            grpc: config(&[b"h2", b"http/1.1"])?,
            http: config(&[b"http/1.1"])?,
            slot,
        })
    }

    /// Serves `certificate` from the next handshake on; open connections keep theirs.
    pub fn replace(&self, certificate: Certificate) {
        self.slot.0.store(Arc::new(certificate));
    }

    /// When the served certificate stops being valid, in Unix seconds.
    pub fn not_after_s(&self) -> i64 {
        self.slot.0.load().not_after_s
    }
}
