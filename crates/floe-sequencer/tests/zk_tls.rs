//! The ZooKeeper store over TLS (`zks://`, cargo feature `zookeeper-tls`), against the real
//! server from scripts/test.sh that speaks TLS on its secure port and wants a client
//! certificate (FLOE_TEST_ZOOKEEPER_TLS).
#![cfg(feature = "zookeeper-tls")]

mod common;

use std::time::{Duration, Instant};

use floe_sequencer::ErrorKind;

fn env(name: &str) -> String {
    floe_testkit::env(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_over_tls_hands_out_sequences() {
    let server = env("FLOE_TEST_ZOOKEEPER_TLS");
    let root = format!("/{}/sequences", floe_testkit::unique("floe-store-tls"));
    let url = format!(
        "zks://floe:pw@{server}{root}?cacert={}&cert={}&key={}",
        env("FLOE_TEST_ZOOKEEPER_TLS_CA"),
        env("FLOE_TEST_ZOOKEEPER_TLS_CERT"),
        env("FLOE_TEST_ZOOKEEPER_TLS_KEY")
    );
    let dir = tempfile::tempdir().unwrap();
    let store = floe_sequencer::open(&url, dir.path()).await.unwrap();
    let second = floe_sequencer::open(&url, dir.path()).await.unwrap();
    let key = common::key("tls");
    assert_eq!(store.reserve(&key, 10).await.unwrap(), 10);
    assert_eq!(second.reserve(&key, 5).await.unwrap(), 15);
    // On that server: read back on its plain-text port.
    let plain = zookeeper_client::Client::connector()
        .with_auth("digest", b"floe:pw")
        .connect(&env("FLOE_TEST_ZOOKEEPER_TLS_PLAIN"))
        .await
        .unwrap();
    let node = format!(
        "{root}/{}",
        floe_sequencer::stores::zookeeper::node_name(&key)
    );
    let (data, _) = plain.get_data(&node).await.unwrap();
    assert_eq!(data, b"15");
    store.close().await;
    second.close().await;

    // No client certificate for a server that wants one: no store, in bounded time.
    let started = Instant::now();
    let Err(e) = floe_sequencer::open(
        &format!(
            "zks://{server}{root}?cacert={}",
            env("FLOE_TEST_ZOOKEEPER_TLS_CA")
        ),
        dir.path(),
    )
    .await
    else {
        panic!("opened without a client certificate")
    };
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(started.elapsed() < Duration::from_secs(20), "{e}");
    // A TLS option on a plain-text URL is refused, naming it.
    let Err(e) =
        floe_sequencer::open(&format!("zk://{server}{root}?cacert=/x.pem"), dir.path()).await
    else {
        panic!("cacert= on zk://")
    };
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
    assert!(e.to_string().contains("write zks://"), "{e}");
}
