//! ZooKeeper stopped with SIGKILL during a run, then started again on the same data.
//!
//! The server is the disposable instance scripts/test.sh starts (FLOE_TEST_ZOOKEEPER_KILLABLE,
//! with its pid and config), used by this test only.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use floe_core::clock::SystemClock;
use floe_core::snowflake::Layout;
use floe_registry::cache::LocalCache;
use floe_registry::lease::{acquire, LeaseConfig, Source};
use floe_registry::{IdSpace, Identity};

mod common;

use common::generator;
use floe_testkit::{env, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_killed_during_a_run_then_restarted() {
    let addr = env("FLOE_TEST_ZOOKEEPER_KILLABLE");
    let pid = env("FLOE_TEST_ZOOKEEPER_KILLABLE_PID");
    let cfg = env("FLOE_TEST_ZOOKEEPER_KILLABLE_CFG");
    let url = format!("zk://{addr}/floe-outage");
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let identity = Identity::new("orders", "h1", 7000);
    let config = LeaseConfig::new(identity.clone(), IdSpace::snowflake(&Layout::LEAF));

    let registry = floe_registry::open(&url).await.unwrap();
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    assert_eq!(lease.source, Source::Registry);
    let gen = generator(&lease);
    let mut ids: HashSet<u64> = (0..10_000).map(|_| gen.next_id().unwrap()).collect();
    lease
        .heartbeat(registry.as_ref(), &cache, gen.last_timestamp_ms())
        .await
        .unwrap();

    // SIGKILL: no clean shutdown.
    assert!(Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap()
        .success());
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
        std::thread::sleep(Duration::from_millis(50));
    }

    // Generating does not need the registry.
    for _ in 0..100_000 {
        assert!(ids.insert(gen.next_id().unwrap()));
    }
    // A heartbeat fails within its bound and is counted; the local cache still takes the time.
    let during = gen.last_timestamp_ms();
    let started = Instant::now();
    assert!(lease
        .heartbeat(registry.as_ref(), &cache, during)
        .await
        .is_err());
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(lease.stats.heartbeat_failures.load(Ordering::Relaxed), 1);
    assert_eq!(
        cache
            .load(&identity, &registry.location())
            .unwrap()
            .unwrap()
            .last_time_ms,
        during
    );
    let id = lease.id;
    drop(lease);
    drop(registry);

    // ZooKeeper comes back on the same data directory.
    let start = || {
        Server(
            Command::new("java")
                .args([
                    "-cp",
                    "/usr/share/java/zookeeper.jar:/usr/share/java/*",
                    "org.apache.zookeeper.server.ZooKeeperServerMain",
                    &cfg,
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let server = start();
    let deadline = Instant::now() + Duration::from_secs(30);
    let registry = loop {
        match floe_registry::open(&url).await {
            Ok(r) => break r,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("ZooKeeper did not come back: {e}"),
        }
    };
    // A restarted floe on the same state directory continues its lease at once (this boot,
    // this directory, its window still open): no wait for the dead session's holder node, no
    // takeover wait; and starts after the time only the cache saw.
    let began = Instant::now();
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    assert_eq!(
        (lease.id, lease.source),
        (id, Source::Continued),
        "{:?}",
        lease.notes
    );
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    assert!(
        lease.not_before_ms >= during,
        "{} < {during}",
        lease.not_before_ms
    );
    let gen = generator(&lease);
    for _ in 0..10_000 {
        let next = gen.next_id().unwrap();
        assert!(Layout::LEAF.decode(next).timestamp_ms > during);
        assert!(ids.insert(next), "duplicate after the restart");
    }
    let expiry = registry.lease_terms().unwrap().expiry;
    // The claim is held again once the dead session's holder node is gone (the server
    // expires that session a timeout after it came back): heartbeats go through.
    held_again(
        &lease,
        registry.as_ref(),
        &cache,
        gen.last_timestamp_ms(),
        expiry,
    )
    .await;
    assert!(!lease.is_lost());

    // Down again, under this live lease, past the client's own deadline (1.4 session
    // timeouts): the registry gives its session up, but generation goes on (lease rule 2:
    // the window, 13.5 min at the default reach, runs from the last confirmation). ZooKeeper
    // then restarts from its snapshot with that session alive for one more timeout, its
    // holder node still there: the registry's own old session, not another process. It waits
    // for it to go and holds the same ID again.
    let fence = lease.fence.clone();
    drop(server); // SIGKILL, and reaped
    tokio::time::sleep(expiry * 7 / 5 + Duration::from_secs(2)).await;
    assert!(fence.admits_now(&SystemClock), "fenced by a 10 s outage");
    for _ in 0..10_000 {
        assert!(
            ids.insert(gen.next_id().unwrap()),
            "duplicate during the second outage"
        );
    }
    let _server = start();
    held_again(
        &lease,
        registry.as_ref(),
        &cache,
        gen.last_timestamp_ms(),
        expiry,
    )
    .await;
    assert!(!lease.is_lost());
    for _ in 0..10_000 {
        assert!(
            ids.insert(gen.next_id().unwrap()),
            "duplicate after the second restart"
        );
    }
}

/// Waits until a heartbeat of `lease` goes through: its claim held again.
async fn held_again(
    lease: &floe_registry::lease::Lease,
    registry: &dyn floe_registry::Registry,
    cache: &LocalCache,
    last_ms: u64,
    expiry: Duration,
) {
    let since = Instant::now();
    while lease.heartbeat(registry, cache, last_ms).await.is_err() {
        assert!(
            since.elapsed() < expiry * 3 + Duration::from_secs(10),
            "not held again {:?} after ZooKeeper came back",
            since.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// After a reboot (the state directory's mark names another boot), ZooKeeper confirming the
/// directory's lease token lets the restart take its ID back with no takeover wait (16.8 min
/// at the default reach).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reboot_zookeeper_confirming_the_token_skips_the_wait() {
    let url = format!(
        "zk://{}{}",
        env("FLOE_TEST_ZOOKEEPER"),
        common::unique_root("floe-token")
    );
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let identity = Identity::new("orders", "h1", 7001);
    let config = LeaseConfig::new(identity.clone(), IdSpace::snowflake(&Layout::LEAF));
    let registry = floe_registry::open(&url).await.unwrap();
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    let gen = generator(&lease);
    let mut ids: HashSet<u64> = (0..1_000).map(|_| gen.next_id().unwrap()).collect();
    lease
        .heartbeat(registry.as_ref(), &cache, gen.last_timestamp_ms())
        .await
        .unwrap();
    let (id, last) = (lease.id, gen.last_timestamp_ms());
    let location = registry.location();
    // Gone without closing its record (its session ends with its client).
    drop((gen, lease, registry));
    let path = cache.path(&identity, &location);
    let mut entry: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    entry["lease"]["boot_id"] = "00000000-0000-0000-0000-000000000000".into();
    std::fs::write(&path, entry.to_string()).unwrap();

    let launched = Instant::now();
    let registry = floe_registry::open(&url).await.unwrap();
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    let notes = lease.notes.join("\n");
    assert_eq!((lease.id, lease.source), (id, Source::Registry), "{notes}");
    assert!(
        notes.contains("confirmed this state directory's lease token"),
        "{notes}"
    );
    let session_end = Duration::from_secs(30);
    assert!(launched.elapsed() < session_end, "{:?}", launched.elapsed());
    let gen = generator(&lease);
    let first = gen.next_id().unwrap();
    assert!(Layout::LEAF.decode(first).timestamp_ms > last);
    assert!(ids.insert(first));
    for _ in 0..1_000 {
        assert!(ids.insert(gen.next_id().unwrap()));
    }
}
