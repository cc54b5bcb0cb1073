//! ZooKeeper over TLS (`zks://`, cargo feature `zookeeper-tls`), against the real server from
//! scripts/test.sh that speaks TLS on its secure port and wants a client certificate
//! (FLOE_TEST_ZOOKEEPER_TLS: ZooKeeper 3.8, Netty, PEM stores, a throw-away CA).
#![cfg(feature = "zookeeper-tls")]

use std::time::{Duration, Instant};

use floe_core::clock::SystemClock;
use floe_core::snowflake::Layout;
use floe_registry::cache::LocalCache;
use floe_registry::lease::{acquire, LeaseConfig};
use floe_registry::{ErrorKind, IdSpace, Identity};

mod common;

use common::unique_root;
use floe_testkit::env;

const PASSWORD: &str = "tl5-s3cret";

/// `?cacert=...&cert=...&key=...` of the test server's CA and client certificate.
fn certs() -> String {
    format!(
        "cacert={}&cert={}&key={}",
        env("FLOE_TEST_ZOOKEEPER_TLS_CA"),
        env("FLOE_TEST_ZOOKEEPER_TLS_CERT"),
        env("FLOE_TEST_ZOOKEEPER_TLS_KEY")
    )
}

/// A registry over TLS leases a worker; its record is on the server (read back on the server's
/// plain port), creator-only; the secure port does not speak plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_over_tls_leases_a_worker() {
    let server = env("FLOE_TEST_ZOOKEEPER_TLS");
    let root = unique_root("floe-tls");
    let url = format!("zks://floe:{PASSWORD}@{server}{root}?{}", certs());
    let registry = floe_registry::open(&url).await.unwrap();
    assert_eq!(registry.location(), format!("zks://{server}{root}"));
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let lease = acquire(
        registry.as_ref(),
        &cache,
        &LeaseConfig::new(
            Identity::new("orders", "h1", 8080),
            IdSpace::snowflake(&Layout::LEAF),
        ),
        &SystemClock,
    )
    .await
    .unwrap();
    lease.heartbeat(registry.as_ref(), &cache, 0).await.unwrap();

    let plain = zookeeper_client::Client::connector()
        .with_auth("digest", format!("floe:{PASSWORD}").as_bytes())
        .connect(&env("FLOE_TEST_ZOOKEEPER_TLS_PLAIN"))
        .await
        .unwrap();
    let worker = format!("{root}/orders/workers/{}", lease.id);
    // Creator-only: the creator's every identity, the digest user and (ZooKeeper's x509
    // provider) the subject of its client certificate; nobody else.
    let (acls, _) = plain.get_acl(&worker).await.unwrap();
    let mut ids: Vec<String> = acls
        .iter()
        .map(|a| {
            assert_eq!(
                a.permission(),
                zookeeper_client::Permission::ALL,
                "{acls:?}"
            );
            format!("{}:{}", a.scheme(), a.id())
        })
        .collect();
    ids.sort();
    assert_eq!(ids.len(), 2, "{acls:?}");
    assert!(ids[0].starts_with("digest:floe:"), "{acls:?}");
    assert_eq!(ids[1], "x509:CN=floe", "{acls:?}");

    // Plain text to the secure port: nothing (bounded by the session timeout asked).
    let started = Instant::now();
    let e = floe_registry::open(&format!("zk://{server}{root}?session_timeout=2"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(started.elapsed() < Duration::from_secs(10), "{e}");
}

/// A server certificate of another CA, or no client certificate for a server that wants one:
/// no session, in bounded time, and never the key in a message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_or_no_client_certificate_gets_no_session() {
    let server = env("FLOE_TEST_ZOOKEEPER_TLS");
    let root = unique_root("floe-tls-bad");
    let dir = tempfile::tempdir().unwrap();
    let other = floe_testkit::test_ca(dir.path());
    for url in [
        format!(
            "zks://{server}{root}?session_timeout=2&cacert={}&cert={}&key={}",
            other.ca.display(),
            env("FLOE_TEST_ZOOKEEPER_TLS_CERT"),
            env("FLOE_TEST_ZOOKEEPER_TLS_KEY")
        ),
        format!(
            "zks://{server}{root}?session_timeout=2&cacert={}",
            env("FLOE_TEST_ZOOKEEPER_TLS_CA")
        ),
    ] {
        let started = Instant::now();
        let e = floe_registry::open(&url).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{url}: {e}");
        assert!(started.elapsed() < Duration::from_secs(10), "{url}: {e}");
        assert!(!e.message.contains("PRIVATE KEY"), "{e}");
    }
}

/// The TLS options are checked before anything is opened: each mistake names its option.
#[test]
fn tls_options_are_checked_naming_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let ca = env("FLOE_TEST_ZOOKEEPER_TLS_CA");
    let cert = env("FLOE_TEST_ZOOKEEPER_TLS_CERT");
    for (url, says) in [
        ("zks://127.0.0.1:1/x".to_string(), "needs cacert="),
        (
            format!("zks://127.0.0.1:1/x?cacert={}", junk.display()),
            "cacert",
        ),
        (
            "zks://127.0.0.1:1/x?cacert=/nonexistent/ca.pem".to_string(),
            "cannot read it",
        ),
        (
            format!("zks://127.0.0.1:1/x?cacert={ca}&cert={cert}"),
            "cert= needs key=",
        ),
        (format!("zk://127.0.0.1:1/x?cacert={ca}"), "write zks://"),
        (
            format!(
                "leaf+zks://127.0.0.1:1/snowflake?cacert={ca}&cert={cert}&key={}",
                junk.display()
            ),
            "no certificate and private key",
        ),
    ] {
        let e = floe_registry::check_url(&url).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{url}: {e}");
        assert!(e.message.contains(says), "{url}: {e}");
    }
    floe_registry::check_url(&format!(
        "leaf+zks://127.0.0.1:1?cacert={ca}&cert={cert}&key={}",
        env("FLOE_TEST_ZOOKEEPER_TLS_KEY")
    ))
    .unwrap();
}
