//! Each server store's server killed with SIGKILL and started again on the same data (with
//! its durable settings on): calls fail with a clear, temporary error while it is down; WEAK
//! serves what it buffered; then both modes recover with no restart of floe, and nothing issued
//! before is issued again.
//!
//! The servers are the disposable `FLOE_TEST_*_KILLABLE` instances scripts/test.sh starts (with
//! their pid and a start script).

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::key;
use floe_sequencer::{ErrorKind, Mode, ServeOptions, StepPolicy, StoreHandle};
use floe_testkit::{env, kill9, restart};

async fn killed_and_restarted(url: String, server: &str) {
    let pid = env(&format!("{server}_PID"));
    let start = env(&format!("{server}_START"));
    let dir = tempfile::tempdir().unwrap();
    let store = floe_sequencer::open(&url, dir.path()).await.unwrap();
    let handle = StoreHandle::new(
        "s",
        store,
        ServeOptions {
            step: StepPolicy {
                min: 100,
                max: 100,
                ..StepPolicy::default()
            },
            timeout: Duration::from_secs(2),
        },
    );
    let k = key("outage");
    let mut issued = HashSet::new();
    for _ in 0..20 {
        assert!(issued.insert(handle.next_id(k.as_str(), Mode::Strong).await.unwrap()));
        assert!(issued.insert(handle.next_id(k.as_str(), Mode::Weak).await.unwrap()));
    }
    // Let the WEAK prefetch land, so the buffer holds the rest of one segment and the next.
    let deadline = Instant::now() + Duration::from_secs(5);
    while handle.weak_key(&k).info().next.is_none() {
        assert!(Instant::now() < deadline, "no prefetch");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let buffered = handle.weak_key(&k).info().left + 100;

    kill9(&pid);
    let err = handle.next_id(k.as_str(), Mode::Strong).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err}");
    assert!(err.is_temporary());
    // WEAK goes on from its buffer, then says the store is unavailable.
    for _ in 0..buffered {
        assert!(issued.insert(handle.next_id(k.as_str(), Mode::Weak).await.unwrap()));
    }
    let err = handle.next_id(k.as_str(), Mode::Weak).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err}");

    let _server = restart(&start);
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        match handle.next_id(k.as_str(), Mode::Strong).await {
            Ok(id) => break id,
            Err(e) => {
                assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
                assert!(Instant::now() < deadline, "no recovery: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let max_before = *issued.iter().max().unwrap();
    assert!(first > max_before, "{first} after {max_before}: reissued");
    for _ in 0..300 {
        let id = handle.next_id(k.as_str(), Mode::Weak).await.unwrap();
        assert!(id > max_before && issued.insert(id), "{id} reissued");
        let id = handle.next_id(k.as_str(), Mode::Strong).await.unwrap();
        assert!(id > max_before && issued.insert(id), "{id} reissued");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis() {
    killed_and_restarted(env("FLOE_TEST_REDIS_KILLABLE"), "FLOE_TEST_REDIS_KILLABLE").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    killed_and_restarted(
        env("FLOE_TEST_POSTGRES_KILLABLE"),
        "FLOE_TEST_POSTGRES_KILLABLE",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    killed_and_restarted(
        env("FLOE_TEST_MARIADB_KILLABLE"),
        "FLOE_TEST_MARIADB_KILLABLE",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd() {
    killed_and_restarted(
        format!("etcd://{}", env("FLOE_TEST_ETCD_STORE_KILLABLE")),
        "FLOE_TEST_ETCD_STORE_KILLABLE",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper() {
    killed_and_restarted(
        format!("zk://{}", env("FLOE_TEST_ZOOKEEPER_STORE_KILLABLE")),
        "FLOE_TEST_ZOOKEEPER_STORE_KILLABLE",
    )
    .await;
}
