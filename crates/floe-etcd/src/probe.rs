//! Why a new connection broke at its first call, when hyper only says "connection closed":
//! etcd refusing the client certificate (TLS 1.3 tells it after the handshake, in an alert
//! hyper does not pass on), or plain text sent to a TLS port. A second, bare TLS handshake
//! finds out; it sends no request. Used only after such a failure.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::AsyncReadExt;

/// Accepts any server certificate: the probe only asks whether the server speaks TLS and
/// whether it takes the client certificate (the CA is checked by the real connection).
#[derive(Debug)]
struct AnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The rustls error in an I/O error, if any.
fn rustls_error(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
}

/// What a bare handshake with `host:port` shows, within `within`: `Some(why)` when the server
/// refused the client certificate `identity` (or its absence), or when it speaks TLS while
/// `tls` is off. `None`: nothing found (the failure was something else).
pub(crate) async fn probe(
    host: &str,
    port: u16,
    tls: bool,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    within: Duration,
) -> Option<String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)));
    let mut config = match identity {
        Some((certs, key)) => builder.with_client_auth_cert(certs, key).ok()?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host).ok()?.to_owned();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let look = async {
        let tcp = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        let mut stream = match connector.connect(name, tcp).await {
            Ok(stream) => stream,
            Err(e) => {
                return match rustls_error(&e) {
                    Some(rustls::Error::AlertReceived(alert)) if tls => Some(format!(
                        "etcd refused the client certificate (TLS alert {alert:?}): check cert= and key= (a client certificate signed by a CA of etcd's --trusted-ca-file)"
                    )),
                    Some(rustls::Error::AlertReceived(_)) => Some(
                        "the server speaks TLS: use an etcds:// URL (with cacert=, and cert= and key= if etcd asks for client certificates)"
                            .to_string(),
                    ),
                    _ => None,
                };
            }
        };
        if !tls {
            return Some(
                "the server speaks TLS: use an etcds:// URL (with cacert=, and cert= and key= if etcd asks for client certificates)"
                    .to_string(),
            );
        }
        // TLS 1.3: a refused client certificate comes as an alert after the handshake.
        let mut byte = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(500), stream.read(&mut byte)).await {
            Ok(Err(e)) => match rustls_error(&e) {
                Some(rustls::Error::AlertReceived(alert)) => Some(format!(
                    "etcd refused the client certificate (TLS alert {alert:?}): check cert= and key= (a client certificate signed by a CA of etcd's --trusted-ca-file)"
                )),
                _ => None,
            },
            _ => None,
        }
    };
    tokio::time::timeout(within, look).await.ok().flatten()
}
