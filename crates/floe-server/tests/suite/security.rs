//! TLS on both listeners and bearer tokens, against a whole server assembled from its
//! configuration ([`floe_server::Server`]) in-process, with a private CA made here (rcgen).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{self, http_with, Node};
use floe_server::proto::runtime_client::RuntimeClient;
use floe_server::proto::GetNextIdRequest;
use floe_server::proto_floe::floe_client::FloeClient;
use floe_server::proto_floe::{Kind, NextIdsRequest};
use floe_server::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::Code;

use floe_testkit::Certs;

/// A private CA and a server certificate it signed, as PEM files in `dir`.
fn certs(dir: &Path) -> floe_testkit::Certs {
    floe_testkit::test_ca(dir)
}

fn config(state: &Path) -> ServerConfig {
    let mut c = ServerConfig {
        state_dir: state.to_path_buf(),
        ..ServerConfig::default()
    };
    c.listen.grpc = "127.0.0.1:0".into();
    c.listen.http = "127.0.0.1:0".into();
    c.listen.allow_hosts = vec!["floe".into()];
    c.stores.insert("main".into(), "memory".into());
    c.ids.kinds = vec!["ulid".into(), "uuid7".into()];
    c
}

fn tls_config(state: &Path, certs: &Certs) -> ServerConfig {
    let mut c = config(state);
    c.tls.cert = Some(certs.cert.clone());
    c.tls.key = Some(certs.key.clone());
    c
}

/// A TLS client that trusts only the test CA and offers `alpn`.
fn connector(ca: &Path, alpn: &[u8]) -> tokio_rustls::TlsConnector {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// One HTTP/1.1 request over TLS: status, header block, body; and the ALPN protocol agreed.
async fn https(
    addr: &str,
    ca: &Path,
    path: &str,
    headers: &[&str],
) -> (u16, String, String, Option<Vec<u8>>) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let mut s = connector(ca, b"http/1.1").connect(name, tcp).await.unwrap();
    let alpn = s.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n");
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str("Connection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut text = Vec::new();
    // A server may close without close_notify once it has answered: what was read counts.
    let _ = s.read_to_end(&mut text).await;
    let text = String::from_utf8_lossy(&text).into_owned();
    let code = text[9..12].parse().unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (code, head.to_string(), body.to_string(), alpn)
}

async fn tls_channel(
    grpc: &str,
    ca: &Path,
    domain: &str,
) -> Result<Channel, tonic::transport::Error> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca).unwrap()))
        .domain_name(domain);
    Endpoint::from_shared(format!("https://{grpc}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_http_speak_tls_with_the_configured_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    let node = Node::start(&tls_config(dir.path(), &certs)).await;

    // gRPC over TLS, the name checked against the certificate (ALPN h2).
    let channel = tls_channel(&node.grpc, &certs.ca, "localhost")
        .await
        .unwrap();
    let ids = FloeClient::new(channel)
        .next_ids(NextIdsRequest {
            kind: Kind::Ulid as i32,
            count: 3,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids.binary.len().max(ids.numbers.len()), 3, "{ids:?}");

    // HTTP/1.1 over TLS (ALPN http/1.1).
    let (code, _, body, alpn) = https(&node.http, &certs.ca, "/v1/ids/uuid7", &[]).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"id\""), "{body}");
    assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));

    // A client that checks another name refuses the server's certificate.
    let wrong = tls_channel(&node.grpc, &certs.ca, "elsewhere.example").await;
    assert!(
        wrong.is_err(),
        "a certificate for another name was accepted"
    );
    node.stop().await;
}

/// An HTTP/1 client at the TLS gRPC port (`curl --http1.1 https://...`): ALPN agrees on
/// http/1.1 there too, and the answer is the one-line hint naming the HTTP listener (https);
/// gRPC clients (ALPN h2) go on being served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_over_tls_at_the_grpc_port_is_told_where_the_http_api_is() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    let node = Node::start(&tls_config(dir.path(), &certs)).await;
    let (code, head, body, alpn) = https(&node.grpc, &certs.ca, "/v1/ids/ulid", &[]).await;
    assert_eq!(code, 426, "{head}");
    assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
    assert!(
        head.to_ascii_lowercase().contains("\r\nupgrade: h2\r\n"),
        "{head}"
    );
    assert_eq!(
        body,
        format!(
            "this is floe's gRPC port (gRPC over HTTP/2); its HTTP API is on https://{}/\n",
            node.http
        )
    );
    let channel = tls_channel(&node.grpc, &certs.ca, "localhost")
        .await
        .unwrap();
    let ids = FloeClient::new(channel)
        .next_ids(NextIdsRequest {
            kind: Kind::Ulid as i32,
            count: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids.binary.len().max(ids.numbers.len()), 2, "{ids:?}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_to_a_tls_port_gets_no_answer_and_the_port_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    let node = Node::start(&tls_config(dir.path(), &certs)).await;

    // Plain HTTP: never an HTTP answer (a TLS alert at most, then the connection closes).
    let mut s = TcpStream::connect(&node.http).await.unwrap();
    s.write_all(b"GET /v1/ids/ulid HTTP/1.1\r\nHost: floe\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got))
        .await
        .expect("closed")
        .ok();
    assert!(
        !String::from_utf8_lossy(&got).contains("HTTP/1.1"),
        "{got:?}"
    );

    // Plain gRPC fails.
    let plain = async {
        let mut client = FloeClient::connect(format!("http://{}", node.grpc)).await?;
        client
            .next_ids(NextIdsRequest {
                kind: Kind::Ulid as i32,
                count: 1,
                ..Default::default()
            })
            .await
            .map_err(|e| Box::new(e) as Box<dyn std::error::Error>)?;
        Ok::<(), Box<dyn std::error::Error>>(())
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(10), plain)
            .await
            .expect("answered in time")
            .is_err(),
        "plain gRPC was served on a TLS port"
    );

    // Neither broke the accept loops.
    let (code, _, body, _) = https(&node.http, &certs.ca, "/v1/ids/ulid", &[]).await;
    assert_eq!(code, 200, "{body}");
    let channel = tls_channel(&node.grpc, &certs.ca, "localhost")
        .await
        .unwrap();
    FloeClient::new(channel)
        .next_ids(NextIdsRequest {
            kind: Kind::Ulid as i32,
            count: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_the_handshake_is_dropped_at_the_header_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    let mut c = tls_config(dir.path(), &certs);
    c.limits.header_timeout_secs = 1;
    let node = Node::start(&c).await;
    for addr in [&node.http, &node.grpc] {
        let opened = Instant::now();
        let mut s = TcpStream::connect(addr).await.unwrap();
        // Half a ClientHello's record header, then nothing.
        s.write_all(&[0x16, 0x03]).await.unwrap();
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(8), s.read(&mut buf))
            .await
            .expect("the server closed the connection");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        let took = opened.elapsed();
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }
    node.stop().await;
}

#[tokio::test]
async fn bad_certificate_and_key_files_fail_at_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a PEM file\n").unwrap();
    let other_key = dir.path().join("other-key.pem");
    std::fs::write(
        &other_key,
        rcgen::KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    let missing = dir.path().join("missing.pem");
    let start = |cert: &Path, key: &Path| {
        let mut c = config(dir.path());
        c.tls.cert = Some(cert.to_path_buf());
        c.tls.key = Some(key.to_path_buf());
        async move { common::start_server(&c).await.map(|_| ()).unwrap_err() }
    };
    let e = start(&missing, &certs.key).await;
    assert!(e.message.starts_with("tls.cert: cannot read "), "{e}");
    assert!(e.message.contains("missing.pem"), "{e}");
    let e = start(&certs.cert, &missing).await;
    assert!(e.message.starts_with("tls.key: cannot read "), "{e}");
    let e = start(&garbage, &certs.key).await;
    assert!(
        e.message.starts_with("tls.cert: ") && e.message.contains("garbage.pem"),
        "{e}"
    );
    assert!(e.message.contains("no certificate"), "{e}");
    // A certificate cut short, and an encrypted key: said in words, not bytes.
    let text = std::fs::read_to_string(&certs.cert).unwrap();
    let short = dir.path().join("short.pem");
    std::fs::write(&short, &text[..text.len() - 40]).unwrap();
    let e = start(&short, &certs.key).await;
    assert!(e.message.contains("damaged or cut short"), "{e}");
    assert!(!e.message.contains("[45"), "{e}");
    let encrypted = dir.path().join("encrypted.pem");
    std::fs::write(
        &encrypted,
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    let e = start(&certs.cert, &encrypted).await;
    assert!(e.message.contains("an encrypted private key"), "{e}");
    let e = start(&certs.cert, &garbage).await;
    assert!(
        e.message.starts_with("tls.key: ") && e.message.contains("garbage.pem"),
        "{e}"
    );
    let e = start(&certs.cert, &other_key).await;
    assert!(
        e.message.starts_with("tls.key: ") && e.message.contains("other-key.pem"),
        "{e}"
    );
    assert!(e.message.contains("is not the key of"), "{e}");
    assert!(!e.message.contains('\n'), "{e}");
    // One file without the other is named before anything is read.
    let mut c = config(dir.path());
    c.tls.cert = Some(certs.cert.clone());
    let e = common::start_server(&c).await.map(|_| ()).unwrap_err();
    assert!(e.message.starts_with("tls.key: missing"), "{e}");
}

// --- Tokens ---

const TOKENS: &str = "# the ops team\n\nfirst-token-abc\n  second-token-xyz  \n# retired: old\n";

fn token_config(state: &Path) -> ServerConfig {
    let file = state.join("tokens");
    std::fs::write(&file, TOKENS).unwrap();
    let mut c = config(state);
    c.auth.token_file = Some(file);
    c
}

/// The HTTP routes of every kind: floe's IDs and sequences, the store list, Leaf's, the status
/// page and its JSON (they show key names and identities).
const HTTP_ROUTES: &[&str] = &[
    "/",
    "/v1/status",
    "/cache",
    "/decodeSnowflakeId?snowflakeId=1",
    "/v1/ids/ulid",
    "/v1/sequencer/main/k",
    "/v1/stores",
    "/api/segment/get/k",
    "/api/snowflake/get/k",
    "/no/such/route",
];

/// The status of each gRPC service kind: floe.v1, Layotto's Runtime, reflection, health.
async fn grpc_codes(grpc: &str, token: Option<&str>) -> Vec<(&'static str, Code)> {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    let channel = Endpoint::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    fn with<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        if let Some(t) = token {
            r.metadata_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        r
    }
    let code = |r: Result<(), tonic::Status>| r.map_or_else(|s| s.code(), |()| Code::Ok);
    let floe = FloeClient::new(channel.clone())
        .next_ids(with(
            NextIdsRequest {
                kind: Kind::Ulid as i32,
                count: 1,
                ..Default::default()
            },
            token,
        ))
        .await
        .map(drop);
    let layotto = RuntimeClient::new(channel.clone())
        .get_next_id(with(
            GetNextIdRequest {
                store_name: "main".into(),
                key: "k".into(),
                ..Default::default()
            },
            token,
        ))
        .await
        .map(drop);
    let reflection = async {
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut answers = ServerReflectionClient::new(channel.clone())
            .server_reflection_info(with(tokio_stream::iter([request]), token))
            .await?
            .into_inner();
        answers.message().await.map(drop)
    }
    .await;
    let health = HealthClient::new(channel)
        .check(with(HealthCheckRequest::default(), token))
        .await
        .map(drop);
    vec![
        ("floe.v1", code(floe)),
        ("layotto", code(layotto)),
        ("reflection", code(reflection)),
        ("health", code(health)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_needs_one_of_the_tokens_and_health_is_open_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&token_config(dir.path())).await;

    for path in HTTP_ROUTES {
        for (headers, why) in [
            (&[][..], "no token"),
            (&["Authorization: Bearer wrong-token"][..], "a wrong token"),
            (
                &["Authorization: Bearer first-token-ab"][..],
                "a prefix of a token",
            ),
            (
                &["Authorization: Basic Zmlyc3QtdG9rZW4tYWJj"][..],
                "another scheme",
            ),
            (&["Authorization: first-token-abc"][..], "no scheme"),
        ] {
            let (code, head, body) = http_with(&node.http, "GET", path, headers).await;
            if *path == "/" && headers.is_empty() {
                // A person at the status page is sent to the sign-in form.
                assert_eq!(code, 303, "{head}");
                assert!(head.contains("location: /login"), "{head}");
                continue;
            }
            assert_eq!(code, 401, "{path} with {why}: {head} {body}");
            assert!(
                head.to_ascii_lowercase()
                    .contains("www-authenticate: bearer"),
                "{path} with {why}: {head}"
            );
            assert_eq!(body["error"], "unauthenticated", "{body}");
            assert!(!body.to_string().contains("token-"), "{body}");
        }
        for token in ["first-token-abc", "second-token-xyz"] {
            let auth = format!("Authorization: Bearer {token}");
            let (code, head, body) = http_with(&node.http, "GET", path, &[auth.as_str()]).await;
            assert_ne!(code, 401, "{path} with {token}: {head} {body}");
        }
    }
    // Two Authorization headers: which one counts would be a guess, so neither does.
    let (code, _, _) = http_with(
        &node.http,
        "GET",
        "/v1/ids/ulid",
        &[
            "Authorization: Bearer first-token-abc",
            "Authorization: Bearer wrong-token",
        ],
    )
    .await;
    assert_eq!(code, 401);
    // The token lets a request through to its route: it is served.
    let (code, _, body) = http_with(
        &node.http,
        "GET",
        "/v1/ids/ulid",
        &["authorization: bearer second-token-xyz"],
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let (code, _, body) = http_with(&node.http, "GET", "/healthz", &[]).await;
    assert_eq!(code, 200, "health is open by default: {body}");
    for path in ["/readyz", "/metrics"] {
        let (code, _, body) = http_with(&node.http, "GET", path, &[]).await;
        assert_eq!(code, 200, "{path} is open by default: {body}");
    }

    for token in [None, Some("wrong-token"), Some("# retired: old")] {
        for (what, code) in grpc_codes(&node.grpc, token).await {
            let expected = if what == "health" {
                Code::Ok
            } else {
                Code::Unauthenticated
            };
            assert_eq!(code, expected, "{what} with {token:?}");
        }
    }
    for token in ["first-token-abc", "second-token-xyz"] {
        for (what, code) in grpc_codes(&node.grpc, Some(token)).await {
            assert_eq!(code, Code::Ok, "{what} with {token}");
        }
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_needs_a_token_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = token_config(dir.path());
    c.auth.health_needs_token = true;
    let node = Node::start(&c).await;
    let (code, head, _) = http_with(&node.http, "GET", "/healthz", &[]).await;
    assert_eq!(code, 401, "{head}");
    let (code, _, _) = http_with(
        &node.http,
        "GET",
        "/healthz",
        &["Authorization: Bearer first-token-abc"],
    )
    .await;
    assert_eq!(code, 200);
    for (what, code) in grpc_codes(&node.grpc, None).await {
        assert_eq!(code, Code::Unauthenticated, "{what}");
    }
    for (what, code) in grpc_codes(&node.grpc, Some("first-token-abc")).await {
        assert_eq!(code, Code::Ok, "{what}");
    }
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_tls_together() {
    let dir = tempfile::tempdir().unwrap();
    let certs = certs(dir.path());
    let mut c = token_config(dir.path());
    c.tls = tls_config(dir.path(), &certs).tls;
    let node = Node::start(&c).await;
    let (code, head, _, _) = https(&node.http, &certs.ca, "/v1/ids/ulid", &[]).await;
    assert_eq!(code, 401, "{head}");
    let (code, _, body, _) = https(
        &node.http,
        &certs.ca,
        "/v1/ids/ulid",
        &["Authorization: Bearer first-token-abc"],
    )
    .await;
    assert_eq!(code, 200, "{body}");
    node.stop().await;
}

#[tokio::test]
async fn an_empty_or_missing_token_file_fails_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, "# nobody yet\n\n   \n").unwrap();
    let mut c = config(dir.path());
    c.auth.token_file = Some(file);
    let e = common::start_server(&c).await.map(|_| ()).unwrap_err();
    assert!(e.message.starts_with("auth.token_file: "), "{e}");
    assert!(e.message.contains("holds no token"), "{e}");
    c.auth.token_file = Some(dir.path().join("nope"));
    let e = common::start_server(&c).await.map(|_| ()).unwrap_err();
    assert!(
        e.message.starts_with("auth.token_file: cannot read "),
        "{e}"
    );
    assert!(e.message.contains("nope"), "{e}");
}

/// A certificate that cannot serve is refused at start with one line naming `tls.cert`, the
/// file and why: expired, not valid yet by the server's clock (an injected one here), or a CA
/// certificate where the server's own is expected.
#[tokio::test]
async fn certificates_that_cannot_serve_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let day = |y, m, d| rcgen::date_time_ymd(y, m, d);
    let expired =
        floe_testkit::test_ca_named(dir.path(), "old-", Some((day(2020, 1, 1), day(2021, 1, 1))));
    let later = floe_testkit::test_ca_named(
        dir.path(),
        "later-",
        Some((day(2090, 1, 1), day(2091, 1, 1))),
    );
    let start = |cert: &Path, key: &Path| {
        let mut c = config(dir.path());
        c.tls.cert = Some(cert.to_path_buf());
        c.tls.key = Some(key.to_path_buf());
        async move { common::start_server(&c).await.map(|_| ()).unwrap_err() }
    };
    let e = start(&expired.cert, &expired.key).await;
    assert!(
        e.message.starts_with("tls.cert: ") && e.message.contains("old-cert.pem"),
        "{e}"
    );
    assert!(e.message.contains("expired on 2021-01-01"), "{e}");
    let e = start(&later.cert, &later.key).await;
    assert!(e.message.contains("is not valid before 2090-01-01"), "{e}");
    // The CA's certificate, given as the server's.
    let e = start(&later.ca, &later.key).await;
    assert!(
        e.message.contains("later-ca.pem") && e.message.contains("is a CA certificate"),
        "{e}"
    );
    assert!(!e.message.contains('\n'), "{e}");
    assert_eq!(e.kind, floe_server::StartErrorKind::Config, "{e}");
    // Validity is read on the server's clock: in 2090-06 the later certificate serves.
    let mut c = config(dir.path());
    c.tls.cert = Some(later.cert.clone());
    c.tls.key = Some(later.key.clone());
    let in_2090 = day(2090, 6, 1).unix_timestamp() * 1000;
    let now =
        (floe_core::clock::Clock::now_nanos(&floe_core::clock::SystemClock) / 1_000_000) as i64;
    let clock = floe_core::clock::OffsetClock::default();
    clock.set_offset_ms(in_2090 - now);
    let server = common::start_on(&c, Arc::new(clock)).await;
    assert!(server.is_ok(), "{:?}", server.err());
}

/// Whether a TLS handshake with `addr` (the HTTP port; `h2`: the gRPC port), trusting only
/// `ca`, succeeds.
async fn handshake_with(addr: &str, ca: &Path, alpn: &[u8]) -> std::io::Result<()> {
    let tcp = TcpStream::connect(addr).await?;
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    connector(ca, alpn).connect(name, tcp).await.map(drop)
}

async fn handshake(addr: &str, ca: &Path) -> std::io::Result<()> {
    handshake_with(addr, ca, b"http/1.1").await
}

/// A metric's value in a Prometheus text page (the first sample whose line starts with
/// `series`).
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// SIGHUP's reload: a new certificate and token file serve from the next handshake and request
/// on, while a connection opened before goes on; a bad file is refused and the ones served stay;
/// the certificate's expiry and failed handshakes show in /metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_swaps_certificate_and_tokens_without_dropping_connections() {
    let dir = tempfile::tempdir().unwrap();
    let a = floe_testkit::test_ca_named(dir.path(), "a-", None);
    let until = rcgen::date_time_ymd(2099, 1, 1);
    let b = floe_testkit::test_ca_named(
        dir.path(),
        "b-",
        Some((rcgen::date_time_ymd(2020, 1, 1), until)),
    );
    let (cert, key, tokens) = (
        dir.path().join("cert.pem"),
        dir.path().join("key.pem"),
        dir.path().join("tokens"),
    );
    std::fs::copy(&a.cert, &cert).unwrap();
    std::fs::copy(&a.key, &key).unwrap();
    std::fs::write(&tokens, "old-token\n").unwrap();
    let mut c = config(dir.path());
    c.tls.cert = Some(cert.clone());
    c.tls.key = Some(key.clone());
    c.auth.token_file = Some(tokens.clone());
    let node = Node::start(&c).await;

    let ulid = |token: &'static str| {
        let mut r = tonic::Request::new(NextIdsRequest {
            kind: Kind::Ulid as i32,
            count: 1,
            ..Default::default()
        });
        r.metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
        r
    };
    // A connection made before the reload, trusting the first CA.
    let mut before = FloeClient::new(tls_channel(&node.grpc, &a.ca, "localhost").await.unwrap());
    before.next_ids(ulid("old-token")).await.unwrap();
    handshake(&node.http, &a.ca).await.unwrap();
    assert!(handshake(&node.http, &b.ca).await.is_err());

    std::fs::copy(&b.cert, &cert).unwrap();
    std::fs::copy(&b.key, &key).unwrap();
    std::fs::write(&tokens, "new-token\n").unwrap();
    let done = node.reloader.reload().await.unwrap();
    assert_eq!(done.len(), 2, "{done:?}");
    assert!(done[0].contains("valid until 2099-01-01"), "{done:?}");

    // The open connection goes on, with the new tokens.
    let refused = before.next_ids(ulid("old-token")).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    before.next_ids(ulid("new-token")).await.unwrap();
    // New connections get the new certificate.
    handshake(&node.http, &b.ca).await.unwrap();
    handshake_with(&node.grpc, &b.ca, b"h2").await.unwrap();
    assert!(handshake(&node.http, &a.ca).await.is_err());

    // A bad file: refused, naming it; what is served stays.
    std::fs::write(&cert, "not a certificate\n").unwrap();
    let e = node.reloader.reload().await.unwrap_err();
    assert!(e.starts_with("tls.cert: ") && e.contains("cert.pem"), "{e}");
    std::fs::copy(&b.cert, &cert).unwrap();
    std::fs::write(&tokens, "# nobody\n").unwrap();
    let e = node.reloader.reload().await.unwrap_err();
    assert!(e.starts_with("auth.token_file: "), "{e}");
    assert!(!e.contains("new-token"), "{e}");
    handshake(&node.http, &b.ca).await.unwrap();
    before.next_ids(ulid("new-token")).await.unwrap();

    // The expiry of what is served, and the handshakes that failed.
    let (code, _, page, _) = https(&node.http, &b.ca, "/metrics", &[]).await;
    assert_eq!(code, 200);
    let expiry = sample(
        &page,
        "floe_tls_certificate_expiry_seconds{certificate=\"listeners\"}",
    );
    assert_eq!(expiry, Some(until.unix_timestamp() as f64), "{page}");
    let failed = sample(
        &page,
        "floe_tls_handshake_failures_total{listener=\"http\",reason=\"error\"}",
    );
    assert!(failed.is_some_and(|n| n >= 1.0), "{page}");
    node.stop().await;
}

/// With tokens on, a person opens the status page in a browser: `/` sends them to a form, a
/// token posted there (never in a URL) gives an HttpOnly, SameSite=Strict session cookie that
/// opens the status pages and nothing else; a reload of the tokens ends the sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_opens_in_a_browser_after_signing_in() {
    let dir = tempfile::tempdir().unwrap();
    let c = token_config(dir.path());
    let node = Node::start(&c).await;
    // A form posted to /login with `extra` headers, as a browser sends it.
    let post = |extra: &'static [&'static str], body: &'static str| {
        let addr = node.http.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let mut headers = vec!["Content-Type: application/x-www-form-urlencoded"];
                headers.extend_from_slice(extra);
                floe_testkit::http::request_with_body(
                    &addr, "floe", "POST", "/login", &headers, body,
                )
                .unwrap()
            })
            .await
            .unwrap()
        }
    };
    let (code, _, form) = http_with(&node.http, "GET", "/login", &[]).await;
    assert_eq!(code, 200);
    assert!(
        form.as_str()
            .unwrap()
            .contains("<form method=\"post\" action=\"/login\""),
        "{form}"
    );
    let refused = post(&[], "token=wrong-token").await;
    assert_eq!(refused.status, 401);
    assert!(!refused.head.to_ascii_lowercase().contains("set-cookie"));
    assert!(!refused.body.contains("wrong-token"), "{}", refused.body);
    // As a browser posts the form (the page keeps the Origin on same-origin requests: its
    // referrer policy is same-origin, not no-referrer, which would send `Origin: null`).
    assert!(
        form.as_str().unwrap().contains("content=\"same-origin\""),
        "{form}"
    );
    let signed = post(
        &["Origin: http://floe", "Sec-Fetch-Site: same-origin"],
        "token=second-token-xyz",
    )
    .await;
    assert_eq!(signed.status, 303, "{}", signed.head);
    let head = signed.head.to_ascii_lowercase();
    assert!(head.contains("location: /"), "{head}");
    let cookie = signed
        .head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("set-cookie:")
                .then(|| l[11..].trim().to_string())
        })
        .unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    let with_cookie = format!("Cookie: {pair}");
    let (code, _, page) = http_with(&node.http, "GET", "/", &[&with_cookie]).await;
    assert_eq!(code, 200, "{page}");
    assert!(page.as_str().unwrap().contains("<html"), "{page}");
    let (code, _, json) = http_with(&node.http, "GET", "/v1/status", &[&with_cookie]).await;
    assert_eq!(code, 200, "{json}");
    // The session opens the status pages only.
    for path in ["/v1/ids/ulid", "/v1/stores", "/cache", "/api/segment/get/k"] {
        let (code, _, _) = http_with(&node.http, "GET", path, &[&with_cookie]).await;
        assert_eq!(code, 401, "{path}");
    }
    // A sign-in from another site's page is refused by the origin check.
    let foreign = post(&["Origin: https://evil.example"], "token=second-token-xyz").await;
    assert_eq!(foreign.status, 403, "{}", foreign.head);
    // A reload that leaves the tokens as they were (a certificate renewal) keeps the
    // sessions; new tokens end them.
    let done = node.reloader.reload().await.unwrap();
    assert!(done.iter().any(|d| d.contains("unchanged")), "{done:?}");
    let (code, _, _) = http_with(&node.http, "GET", "/", &[&with_cookie]).await;
    assert_eq!(code, 200);
    std::fs::write(c.auth.token_file.as_ref().unwrap(), "third-token\n").unwrap();
    node.reloader.reload().await.unwrap();
    let (code, _, _) = http_with(&node.http, "GET", "/", &[&with_cookie]).await;
    assert_eq!(code, 303);
    node.stop().await;
}
