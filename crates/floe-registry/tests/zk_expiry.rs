//! ZooKeeper: a session that expires under a live lease, against the real server from
//! scripts/test.sh (FLOE_TEST_ZOOKEEPER). The registry reaches the server through a TCP proxy
//! that the test cuts, as a network partition would, until the server has expired the session
//! (its holder node is gone); the test's own admin client talks to the server directly.
#![cfg(feature = "zookeeper")]

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use floe_core::clock::SystemClock;
use floe_core::snowflake::{Layout, SnowflakeError};
use floe_registry::cache::LocalCache;
use floe_registry::lease::{acquire, Lease, LeaseConfig};
use floe_registry::zookeeper::ZkRegistry;
use floe_registry::{ErrorKind, IdSpace, Identity, Registry, RegistryError, WorkerRecord};
use zookeeper_client::Client;

/// The reach these tests run with: 4 s at the 6 s session (a window of 3.6 s, the takeover wait
/// 4.54 s), so that takeovers happen within seconds.
const REACH: Duration = Duration::from_secs(4);

mod common;

use common::{generator, unique_root, until, Proxy};
use floe_testkit::env;

struct Setup {
    server: String,
    root: String,
    proxy: Proxy,
    registry: ZkRegistry,
    cache: LocalCache,
    _dir: tempfile::TempDir,
    identity: Identity,
}

async fn setup(prefix: &str) -> Setup {
    let server = env("FLOE_TEST_ZOOKEEPER");
    let root = unique_root(prefix);
    let proxy = Proxy::start(&server).await;
    let registry = ZkRegistry::connect(&proxy.addr, &root)
        .await
        .unwrap()
        .with_reach(REACH);
    let dir = tempfile::tempdir().unwrap();
    Setup {
        server,
        root,
        proxy,
        registry,
        cache: LocalCache::new(dir.path()).unwrap(),
        _dir: dir,
        identity: Identity::new("orders", "h1", 8080),
    }
}

impl Setup {
    fn config(&self) -> LeaseConfig {
        LeaseConfig::new(self.identity.clone(), IdSpace::snowflake(&Layout::LEAF))
    }

    async fn lease(&self) -> Lease {
        acquire(&self.registry, &self.cache, &self.config(), &SystemClock)
            .await
            .unwrap()
    }

    async fn admin(&self) -> Client {
        Client::connect(&self.server).await.unwrap()
    }

    fn worker_path(&self, id: u32) -> String {
        format!("{}/orders/workers/{id}", self.root)
    }

    fn holder_path(&self) -> String {
        format!("{}/orders/holders/h1:8080", self.root)
    }

    async fn record(&self, id: u32) -> WorkerRecord {
        let (data, _) = self
            .admin()
            .await
            .get_data(&self.worker_path(id))
            .await
            .unwrap();
        serde_json::from_slice(&data).unwrap()
    }

    async fn write_record(&self, record: &WorkerRecord) {
        self.admin()
            .await
            .set_data(
                &self.worker_path(record.id),
                &serde_json::to_vec(record).unwrap(),
                None,
            )
            .await
            .unwrap();
    }

    /// The session that owns the holder node, if there is one.
    async fn holder_owner(&self) -> Option<i64> {
        let stat = self
            .admin()
            .await
            .check_stat(&self.holder_path())
            .await
            .unwrap();
        stat.map(|s| s.ephemeral_owner)
    }

    /// Cuts the registry off until the server has expired its session (the holder node goes
    /// with it): from then on another process may take the identity or the ID.
    async fn cut_until_expired(&self) {
        assert!(self.holder_owner().await.is_some());
        self.proxy.cut();
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.holder_owner().await.is_some() {
            assert!(Instant::now() < deadline, "the session did not expire");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Heartbeats until the registry answers something other than "re-establishing"
    /// (Unavailable), failing after 20 s.
    async fn beat_until_settled(&self, lease: &Lease, last: u64) -> Result<(), RegistryError> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match lease.heartbeat(&self.registry, &self.cache, last).await {
                Err(e) if e.kind == ErrorKind::Unavailable => {
                    assert!(Instant::now() < deadline, "still unsettled: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => return other,
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_is_replaced_and_the_same_id_held_again() {
    let s = setup("floe-expiry").await;
    let lease = s.lease().await;
    let fence = lease.fence.clone();
    let gen = generator(&lease);
    let mut ids: HashSet<u64> = (0..10_000).map(|_| gen.next_id().unwrap()).collect();
    lease
        .heartbeat(&s.registry, &s.cache, gen.last_timestamp_ms())
        .await
        .unwrap();
    let recorded = s.record(lease.id).await.last_time_ms;
    assert_eq!(recorded, gen.last_timestamp_ms());
    let old_owner = s.holder_owner().await.unwrap();

    s.cut_until_expired().await;
    // The client learns of the expiry (it gives up reconnecting after 1.4 session timeouts):
    // the generator is fenced, and stays so while no new session can be opened.
    until("the fence to rise", Duration::from_secs(15), || {
        !fence.admits_now(&SystemClock)
    })
    .await;
    assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);
    let beat = lease
        .heartbeat(&s.registry, &s.cache, gen.last_timestamp_ms())
        .await
        .unwrap_err();
    assert_eq!(beat.kind, ErrorKind::Unavailable, "{beat}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);

    // The network is back: the keeper opens a new session and holds the same ID again, with
    // no restart, within a bound.
    s.proxy.restore();
    let restored = Instant::now();
    until("the fence to fall", Duration::from_secs(15), || {
        fence.admits_now(&SystemClock)
    })
    .await;
    assert!(
        restored.elapsed() < Duration::from_secs(15),
        "{:?}",
        restored.elapsed()
    );
    assert_eq!(fence.periods(), 1);
    // The holder node is a new session's; the record is still ours, its last time kept.
    let new_owner = s.holder_owner().await.unwrap();
    assert_ne!(new_owner, old_owner);
    let record = s.record(lease.id).await;
    assert_eq!(record.identity, s.identity);
    assert_eq!(record.last_time_ms, recorded);

    // The same worker ID goes on: new IDs unique and after the recorded last time.
    for _ in 0..100_000 {
        let id = gen.next_id().unwrap();
        assert!(Layout::LEAF.decode(id).timestamp_ms >= recorded);
        assert_eq!(Layout::LEAF.decode(id).worker, u64::from(lease.id));
        assert!(ids.insert(id), "duplicate across the expiry");
    }
    // Heartbeats work under the new session and move the last time on.
    s.beat_until_settled(&lease, gen.last_timestamp_ms())
        .await
        .unwrap();
    assert_eq!(
        s.record(lease.id).await.last_time_ms,
        gen.last_timestamp_ms()
    );
    assert_eq!(s.registry.list("orders").await.unwrap().len(), 1);
    // A clean shutdown ends the new session's claim.
    lease
        .close(&s.registry, &s.cache, gen.last_timestamp_ms())
        .await
        .unwrap();
    assert_eq!(s.holder_owner().await, None);
}

/// Restores the network, then heartbeats (with this process's own last time) until the ID is
/// known lost, and checks that it stays so.
async fn stays_fenced(s: &Setup, lease: &Lease, last: u64, expect: &str) {
    s.proxy.restore();
    let gen = generator(lease);
    let err = s.beat_until_settled(lease, last).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Conflict, "{err}");
    assert!(err.message.contains(expect), "{err}");
    assert!(err.message.contains("restart floe"), "{err}");
    assert!(!lease.fence.admits_now(&SystemClock));
    // The local cache forgot it: a restart while the registry is unreachable cannot take an
    // ID that is another process's now.
    assert!(lease.is_lost());
    assert_eq!(
        s.cache.load(&s.identity, &s.registry.location()).unwrap(),
        None
    );
    assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);
    // It is not lowered later: the same answer, still no IDs.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!lease.fence.admits_now(&SystemClock));
    assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);
    let again = lease
        .heartbeat(&s.registry, &s.cache, last)
        .await
        .unwrap_err();
    assert_eq!(again.message, err.message);
    assert!(lease.stats.heartbeat_failures.load(Ordering::Relaxed) >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_taken_over_while_the_session_was_gone_stays_fenced() {
    let s = setup("floe-expiry-taken").await;
    let lease = s.lease().await;
    let gen = generator(&lease);
    gen.next_id().unwrap();
    let recorded = gen.last_timestamp_ms();
    lease
        .heartbeat(&s.registry, &s.cache, recorded)
        .await
        .unwrap();
    s.cut_until_expired().await;
    // Meanwhile another identity takes the ID over.
    let mut record = s.record(lease.id).await;
    record.identity = Identity::new("orders", "h9", 9);
    s.write_record(&record).await;
    stays_fenced(&s, &lease, recorded, "taken over by orders/h9:9").await;
    // The identity is not kept claimed by a process that cannot use it.
    assert_eq!(s.holder_owner().await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_used_by_another_process_while_the_session_was_gone_stays_fenced() {
    let s = setup("floe-expiry-used").await;
    let lease = s.lease().await;
    let gen = generator(&lease);
    gen.next_id().unwrap();
    let recorded = gen.last_timestamp_ms();
    lease
        .heartbeat(&s.registry, &s.cache, recorded)
        .await
        .unwrap();
    s.cut_until_expired().await;
    // Meanwhile another process with the same identity starts, gets the same ID, records a
    // later time (it may have issued IDs up to it) and stops cleanly.
    let other = ZkRegistry::connect(&s.server, &s.root)
        .await
        .unwrap()
        .with_reach(REACH);
    let other_cache = tempfile::tempdir().unwrap();
    let other_cache = LocalCache::new(other_cache.path()).unwrap();
    let other_lease = acquire(&other, &other_cache, &s.config(), &SystemClock)
        .await
        .unwrap();
    assert_eq!(other_lease.id, lease.id);
    let other_last = other_lease.not_before_ms + 60_000;
    other_lease
        .close(&other, &other_cache, other_last)
        .await
        .unwrap();
    stays_fenced(&s, &lease, recorded, "registered again by another process").await;
    // The record's last time is never moved back.
    assert_eq!(s.record(lease.id).await.last_time_ms, other_last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_claimed_by_another_process_while_the_session_was_gone_stays_fenced() {
    let s = setup("floe-expiry-claimed").await;
    let lease = s.lease().await;
    let gen = generator(&lease);
    gen.next_id().unwrap();
    let recorded = gen.last_timestamp_ms();
    lease
        .heartbeat(&s.registry, &s.cache, recorded)
        .await
        .unwrap();
    s.cut_until_expired().await;
    // Meanwhile another process with the same identity starts and is still running.
    let other = ZkRegistry::connect(&s.server, &s.root)
        .await
        .unwrap()
        .with_reach(REACH);
    let other_cache = tempfile::tempdir().unwrap();
    let other_cache = LocalCache::new(other_cache.path()).unwrap();
    let other_lease = acquire(&other, &other_cache, &s.config(), &SystemClock)
        .await
        .unwrap();
    assert_eq!(other_lease.id, lease.id);
    let owner = s.holder_owner().await.unwrap();
    stays_fenced(&s, &lease, recorded, "claimed by another process").await;
    // The other process keeps its claim.
    assert_eq!(s.holder_owner().await, Some(owner));
    assert!(other_lease.fence.admits_now(&SystemClock));
}

/// A cut shorter than the session (every connection refused or closed at once) keeps the
/// session: once the network is back, the registry confirms its claim on the same session
/// within a bound, whatever back-off the client's own reconnects had reached (without a
/// second connection of the session, the client's next try came 6.3 s after the cut, after
/// the server had ended the session, and another process could take the ID).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_shorter_than_the_session_keeps_it() {
    let s = setup("floe-short-cut").await;
    let lease = s.lease().await;
    let fence = lease.fence.clone();
    let gen = generator(&lease);
    gen.next_id().unwrap();
    let owner = s.holder_owner().await.unwrap();
    let expiry = s.registry.lease_terms().unwrap().expiry;

    s.proxy.cut();
    tokio::time::sleep(expiry * 37 / 60).await; // 3.7 s of the default 6 s
    s.proxy.restore();
    let restored = Instant::now();
    until(
        "the claim to be confirmed again",
        Duration::from_secs(2),
        || {
            fence
                .remaining(&SystemClock)
                .is_some_and(|r| r > expiry / 2)
        },
    )
    .await;
    assert!(restored.elapsed() < Duration::from_secs(2));
    // The same session holds the identity, past the moment the server would have ended it.
    assert_eq!(s.holder_owner().await, Some(owner));
    tokio::time::sleep(expiry / 2).await;
    assert_eq!(s.holder_owner().await, Some(owner));
    gen.next_id().unwrap();
    lease
        .heartbeat(&s.registry, &s.cache, gen.last_timestamp_ms())
        .await
        .unwrap();
    // A clean shutdown still ends the claim at once.
    lease
        .close(&s.registry, &s.cache, gen.last_timestamp_ms())
        .await
        .unwrap();
    assert_eq!(s.holder_owner().await, None);
}

/// Sessions are detached (so that a client left behind by a reconnection cannot end them):
/// a registry dropped without a clean close, even outside its runtime, still ends its session
/// at once, and its holder node goes with it, not a session timeout later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_registry_ends_its_session_at_once() {
    let s = setup("floe-dropped").await;
    let registry = ZkRegistry::connect(&s.server, &s.root)
        .await
        .unwrap()
        .with_reach(REACH);
    let registration = registry
        .register(&s.identity, IdSpace::snowflake(&Layout::LEAF))
        .await
        .unwrap();
    assert!(s.holder_owner().await.is_some());
    let dropped = Instant::now();
    // Dropped on a thread outside the runtime (as the CLI drops its lease after block_on):
    // the session is ended on the runtime the registry was opened on.
    std::thread::spawn(move || {
        drop(registration);
        drop(registry);
    })
    .join()
    .unwrap();
    let mut owner = s.holder_owner().await;
    while owner.is_some() && dropped.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        owner = s.holder_owner().await;
    }
    assert_eq!(owner, None, "the holder node outlived its registry by 3 s");
}
