//! The connection to a running `floe serve` (`gen --server`, `seq --server`): its endpoint,
//! TLS and bearer token, and a gRPC status as a failure with its exit code. The commands ask
//! for their IDs through it ([`crate::gen`], [`crate::seq`]).
//!
//! One ID is asked for with `NextIds` / `NextSequence`; more with `StreamIds` /
//! `StreamSequence` and a batch of 0, so that the server cuts the stream into messages of its
//! own `max_batch` (which the client does not know): every count from 1 to the server's stream
//! limit works against any server configuration, and a million IDs never travel as one message.
//!
//! One current-thread runtime drives the connection. Each answer is awaited with `block_on`
//! and written to standard output outside it (blocking I/O off the executor), flushed message
//! by message; while the output blocks, HTTP/2 flow control holds the server back. A closed
//! output (`| head`) ends the command quietly at the next message; dropping the stream and the
//! connection cancels it on the server.

use std::time::Duration;

use floe_server::proto_floe::admin_client::AdminClient;
use floe_server::proto_floe::floe_client::FloeClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Uri};
use tonic::{Code, Status, Streaming};

use crate::{inspect, Failure};

/// How long connecting (TCP and the HTTP/2 handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest message the client reads: a server's largest batch (1,000,000 IDs, at most
/// 18 bytes each on the wire) fits.
const MAX_MESSAGE: usize = 64 << 20;

/// How `gen --server` and `seq --server` reach a server that asks for TLS or tokens.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ClientArgs {
    /// With --server https://...: trust this CA certificate (PEM) besides the system's roots.
    #[arg(long, env = "FLOE_CA_CERT", value_name = "FILE")]
    pub(crate) ca_cert: Option<std::path::PathBuf>,
    /// With --server: send the first token of this file (one token a line; blank lines and #
    /// comments left out) as `authorization: Bearer TOKEN`.
    #[arg(long, env = "FLOE_TOKEN_FILE", value_name = "FILE")]
    pub(crate) token_file: Option<std::path::PathBuf>,
}

impl ClientArgs {
    /// The bearer token to send, read from `--token-file`.
    fn token(&self) -> Result<Option<MetadataValue<Ascii>>, String> {
        let Some(path) = &self.token_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--token-file: cannot read {}: {e}", path.display()))?;
        let token = floe_server::auth::token_lines(&text).next().ok_or_else(|| {
            format!(
                "--token-file: {} holds no token (one token a line; blank lines and # comments are left out)",
                path.display()
            )
        })?;
        let mut value: MetadataValue<Ascii> = format!("Bearer {token}").parse().map_err(|_| {
            format!(
                "--token-file: {}: the token holds characters a header cannot carry",
                path.display()
            )
        })?;
        value.set_sensitive(true);
        Ok(Some(value))
    }

    /// TLS for an `https://` server: the system's roots, and `--ca-cert`'s.
    fn tls(&self) -> Result<ClientTlsConfig, String> {
        let mut tls = ClientTlsConfig::new().with_native_roots();
        if let Some(path) = &self.ca_cert {
            let pem = std::fs::read(path)
                .map_err(|e| format!("--ca-cert: cannot read {}: {e}", path.display()))?;
            if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                return Err(format!(
                    "--ca-cert: {}: no PEM certificate in it (expected a \"CERTIFICATE\" block)",
                    path.display()
                ));
            }
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        Ok(tls)
    }
}

/// Adds the bearer token, if any, to every request.
#[derive(Clone)]
pub(crate) struct Bearer(Option<MetadataValue<Ascii>>);

impl Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(token) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", token.clone());
        }
        Ok(request)
    }
}

/// The `--server` value as a gRPC endpoint: `http://HOST:PORT`, `https://HOST:PORT` or
/// `HOST:PORT`.
#[cfg(test)]
fn endpoint(url: &str) -> Result<Endpoint, String> {
    endpoint_with(url, &ClientArgs::default())
}

/// `endpoint`, with TLS for `https://` from `client`.
fn endpoint_with(url: &str, client: &ClientArgs) -> Result<Endpoint, String> {
    let bad = |why: &str| {
        format!(
            "--server: {why}: expected http://HOST:PORT, https://HOST:PORT or HOST:PORT (the server's gRPC address), found {}",
            inspect::shown(url)
        )
    };
    let lower = url.to_ascii_lowercase();
    let tls = lower.starts_with("https://");
    if client.ca_cert.is_some() && !tls {
        return Err(format!(
            "--ca-cert: given for a server without TLS: use https://HOST:PORT, found {}",
            inspect::shown(url)
        ));
    }
    let full = match lower.find("://") {
        Some(_) if lower.starts_with("http://") || tls => url.to_string(),
        Some(_) => return Err(bad("an unknown scheme")),
        None => format!("http://{url}"),
    };
    let uri: Uri = full.parse().map_err(|_| bad("not a URL"))?;
    let authority = uri.authority().ok_or_else(|| bad("no host"))?;
    if authority.as_str().contains('@') {
        return Err(bad("a user name"));
    }
    if authority.host().is_empty() {
        return Err(bad("no host"));
    }
    if authority.port_u16().is_none() {
        return Err(bad("no port"));
    }
    if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
        return Err(bad("a path"));
    }
    let endpoint = Endpoint::from_shared(full)
        .map(|e| e.connect_timeout(CONNECT_TIMEOUT))
        .map_err(|_| bad("not a URL"))?;
    if tls {
        endpoint
            .tls_config(client.tls()?)
            .map_err(|e| format!("--server: TLS: {}", chain(&e)))
    } else {
        Ok(endpoint)
    }
}

/// An error and its causes on one line, each said once.
/// Whether a connection failed in its TLS handshake (tokio-rustls reports rustls's refusal,
/// an untrusted or mismatched certificate, as an I/O error of kind `InvalidData`).
fn tls_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::InvalidData)
        {
            return true;
        }
        source = s.source();
    }
    false
}

fn chain(e: &dyn std::error::Error) -> String {
    with_causes(e.to_string(), e.source())
}

/// `first`, then each cause in `source`'s chain that it does not already say.
fn with_causes(first: String, mut source: Option<&dyn std::error::Error>) -> String {
    let mut parts: Vec<String> = vec![first];
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    one_line(&parts.join(": "))
}

fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

/// gRPC's name of a status code.
fn code_name(code: Code) -> &'static str {
    floe_server::observe::grpc_code_name(code)
}

/// A status as one line: `server: CODE: message` (its exit code by the code), with its cause when the status was
/// made on this side (a connection that broke, an answer that is not gRPC).
pub(crate) fn status(s: Status) -> Failure {
    let message = if s.message().is_empty() {
        s.code().description().to_string()
    } else {
        s.message().to_string()
    };
    let source = std::error::Error::source(&s);
    let made_here = source.is_some();
    let message = format!(
        "server: {}: {}",
        code_name(s.code()),
        with_causes(message, source)
    );
    if made_here {
        // Not the server's answer: the connection broke (or what answered is not gRPC).
        return Failure::Unavailable(message);
    }
    Failure::from_status(s.code(), message)
}

/// A connection to a server, and the runtime that drives it.
pub(crate) struct Client {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) floe: FloeClient<InterceptedService<Channel, Bearer>>,
    /// The admin API (`floe.v1.Admin`) on the same connection.
    pub(crate) admin: AdminClient<InterceptedService<Channel, Bearer>>,
}

impl Client {
    pub(crate) fn connect(url: &str, client: &ClientArgs) -> Result<Client, Failure> {
        let endpoint = endpoint_with(url, client)?;
        let token = client.token()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Failure::Other(format!("cannot start the async runtime: {e}")))?;
        let channel = rt.block_on(endpoint.connect()).map_err(|e| {
            let message = format!("cannot reach the server at {url}: {}", chain(&e));
            if tls_refused(&e) {
                // The server answered, with a certificate this client does not trust: the
                // client's configuration (--ca-cert), not an outage.
                Failure::Usage(message)
            } else {
                Failure::Unavailable(message)
            }
        })?;
        let admin = AdminClient::with_interceptor(channel.clone(), Bearer(token.clone()))
            .max_decoding_message_size(MAX_MESSAGE);
        let floe = FloeClient::with_interceptor(channel, Bearer(token))
            .max_decoding_message_size(MAX_MESSAGE);
        Ok(Client { rt, floe, admin })
    }

    /// The next message of `stream`, or `None` at its end.
    pub(crate) fn next<T>(&self, stream: &mut Streaming<T>) -> Result<Option<T>, Failure> {
        self.rt.block_on(stream.message()).map_err(status)
    }
}

/// How many more IDs a message brings, checked against what is still missing.
pub(crate) fn take(got: &mut u64, count: u64, n: usize) -> Result<(), Failure> {
    let total = u64::try_from(n)
        .ok()
        .and_then(|n| got.checked_add(n))
        .filter(|&t| t <= count)
        .ok_or_else(|| format!("server: answered more IDs than the {count} asked for"))?;
    *got = total;
    Ok(())
}

/// Whether every ID asked for came.
pub(crate) fn finished(got: u64, count: u64) -> Result<(), Failure> {
    if got == count {
        Ok(())
    } else {
        Err(format!("server: answered {got} of the {count} IDs asked for").into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls() {
        for ok in [
            "http://127.0.0.1:34904",
            "127.0.0.1:34904",
            "localhost:1",
            "HTTP://[::1]:34904",
            "http://example.com:80/",
            "https://127.0.0.1:34904",
            "HTTPS://localhost:1",
        ] {
            assert!(endpoint(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("grpc://h:1", "unknown scheme"),
            ("http://h", "no port"),
            ("h", "no port"),
            ("http://h:1/x", "a path"),
            ("http://h:1?q", "a path"),
            ("http://u@h:1", "user name"),
            ("", "expected http://HOST:PORT"),
            ("https://h", "no port"),
            ("http://:1", "expected http://HOST:PORT"),
            ("h:99999", "expected http://HOST:PORT"),
            ("h 1:2", "expected http://HOST:PORT"),
        ] {
            let e = endpoint(bad).unwrap_err();
            assert!(e.starts_with("--server: "), "{bad}: {e}");
            assert!(e.contains(why), "{bad}: {e}");
            assert!(!e.contains('\n'), "{bad}: {e}");
        }
    }

    #[test]
    fn statuses_are_one_line_with_grpc_names() {
        let Failure::Usage(m) = status(Status::invalid_argument("count: bad\nsecond")) else {
            panic!("not a usage failure");
        };
        assert_eq!(m, "server: INVALID_ARGUMENT: count: bad second");
        let Failure::Usage(m) = status(Status::new(Code::NotFound, "")) else {
            panic!("not a usage failure");
        };
        assert_eq!(m, "server: NOT_FOUND: Some requested entity was not found");
    }

    #[test]
    fn counts_are_checked() {
        let mut got = 0;
        take(&mut got, 5, 3).unwrap();
        take(&mut got, 5, 2).unwrap();
        assert!(take(&mut got, 5, 1).is_err());
        assert_eq!(got, 5);
        finished(5, 5).unwrap();
        assert!(finished(4, 5).is_err());
        let mut got = u64::MAX - 1;
        assert!(take(&mut got, u64::MAX, 2).is_err());
    }
}
