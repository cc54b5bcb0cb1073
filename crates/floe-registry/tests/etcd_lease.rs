//! etcd's lease fencing against real servers started by scripts/test.sh: FLOE_TEST_ETCD, and
//! FLOE_TEST_ETCD_KILLABLE (with its pid and start script) for the test that kills it.
#![cfg(feature = "etcd")]

mod common;

use common::{generator, unique_root, until};
use floe_testkit::{env, Server};

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_core::clock::{Clock, SystemClock};
use floe_core::fence::Fence;
use floe_core::snowflake::{Layout, SnowflakeError};
use floe_registry::cache::LocalCache;
use floe_registry::lease::{acquire, LeaseConfig};
use floe_registry::{ErrorKind, IdSpace, Identity, WorkerRecord};

/// A client of the test server, for what an operator would do by hand.
fn admin(server: &str) -> floe_etcd::Client {
    floe_etcd::Client::connect([server], floe_etcd::ConnectOptions::default()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_revoked_and_its_record_removed_loses_the_id_for_good() {
    let server = env("FLOE_TEST_ETCD");
    let root = unique_root("floe-revoke");
    let registry = floe_registry::open(&format!("etcd://{server}{root}?ttl=3&reach=2"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let identity = Identity::new("orders", "h1", 8080);
    let config = LeaseConfig::new(identity, IdSpace::snowflake(&Layout::LEAF));
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    let fence: Arc<Fence> = lease.fence.clone();
    let gen = generator(&lease);
    let before = gen.next_id().unwrap();

    // Someone revokes our lease and removes our worker record (an operator, by mistake).
    let admin = admin(&server);
    let holder = format!("{root}/orders/holders/h1:8080");
    let worker = format!("{root}/orders/workers/{}", lease.id);
    let record = admin.get(worker.as_str()).await.unwrap().kvs[0]
        .value
        .clone();
    let lease_id = admin.get(holder.as_str()).await.unwrap().kvs[0].lease;
    admin.delete(worker.as_str()).await.unwrap();
    admin.lease_revoke(lease_id).await.unwrap();

    // The keeper notices within a keep-alive period, and finds the record gone when it
    // tries to hold the ID again: the registry may give the ID to another at once, so the
    // generator stops now (lease rule 2 would otherwise let it run to the end of its window).
    until("the fence to rise", Duration::from_secs(5), || {
        !fence.admits_now(&SystemClock)
    })
    .await;
    assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);
    // For good: the record put back changes nothing, and a heartbeat says why.
    admin.put(worker.as_str(), record, 0).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);
    let e = lease
        .heartbeat(registry.as_ref(), &cache, 0)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
    assert!(e.message.contains("its record is gone"), "{e}");
    assert!(lease.is_lost());
    assert!(gen.next_id().is_err() && before > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_past_the_ttl_fences_then_recovers() {
    let server = env("FLOE_TEST_ETCD_KILLABLE");
    let pid = env("FLOE_TEST_ETCD_KILLABLE_PID");
    let start = env("FLOE_TEST_ETCD_KILLABLE_START");
    let registry = floe_registry::open(&format!(
        "etcd://{server}{}?ttl=3&reach=2",
        unique_root("floe-kill")
    ))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let config = LeaseConfig::new(
        Identity::new("orders", "h1", 8080),
        IdSpace::snowflake(&Layout::LEAF),
    );
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    let fence = lease.fence.clone();
    let gen = generator(&lease);
    let before = gen.next_id().unwrap();

    assert!(Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap()
        .success());
    // Unreachable for 2/3 of the TTL: the generator stops before the lease can expire.
    let killed = Instant::now();
    until("the fence to rise", Duration::from_secs(8), || {
        !fence.admits_now(&SystemClock)
    })
    .await;
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "{:?}",
        killed.elapsed()
    );
    assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);

    // etcd comes back on the same data: the ID is held again, generation goes on.
    let _server = Server(
        Command::new("bash")
            .arg(&start)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    until("the fence to fall", Duration::from_secs(30), || {
        fence.admits_now(&SystemClock)
    })
    .await;
    assert!(gen.next_id().unwrap() > before);
    assert_eq!(fence.periods(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_taken_under_a_live_lease_stays_fenced_through_keep_alives() {
    let server = env("FLOE_TEST_ETCD");
    let root = unique_root("floe-taken");
    let registry = floe_registry::open(&format!("etcd://{server}{root}?ttl=3&reach=2"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let config = LeaseConfig::new(
        Identity::new("orders", "h1", 8080),
        IdSpace::snowflake(&Layout::LEAF),
    );
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    let gen = generator(&lease);
    gen.next_id().unwrap();
    // Another identity takes the ID over (an operator's take-over, by mistake); our lease
    // stays alive.
    let admin = admin(&server);
    let worker = format!("{root}/orders/workers/{}", lease.id);
    let mut record: WorkerRecord =
        serde_json::from_slice(&admin.get(worker.as_str()).await.unwrap().kvs[0].value).unwrap();
    record.identity = Identity::new("orders", "h9", 9);
    admin
        .put(worker.as_str(), serde_json::to_vec(&record).unwrap(), 0)
        .await
        .unwrap();
    let err = lease
        .heartbeat(registry.as_ref(), &cache, gen.last_timestamp_ms())
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Conflict, "{err}");
    assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);
    // The lease's keep-alives go on succeeding (every TTL/3 = 1 s): they must not let the
    // generator go on with an ID that is someone else's.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);
    assert!(!lease.fence.admits_now(&SystemClock));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_used_elsewhere_while_the_lease_was_lost_stays_fenced() {
    let server = env("FLOE_TEST_ETCD");
    let root = unique_root("floe-used");
    let registry = floe_registry::open(&format!("etcd://{server}{root}?ttl=3&reach=2"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let config = LeaseConfig::new(
        Identity::new("orders", "h1", 8080),
        IdSpace::snowflake(&Layout::LEAF),
    );
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    let gen = generator(&lease);
    gen.next_id().unwrap();
    let recorded = gen.last_timestamp_ms();
    lease
        .heartbeat(registry.as_ref(), &cache, recorded)
        .await
        .unwrap();
    // The record shows a later time than this process recorded (another process held the ID
    // and may have issued IDs up to it), and the lease is lost.
    let admin = admin(&server);
    let worker = format!("{root}/orders/workers/{}", lease.id);
    let holder = format!("{root}/orders/holders/h1:8080");
    let mut record: WorkerRecord =
        serde_json::from_slice(&admin.get(worker.as_str()).await.unwrap().kvs[0].value).unwrap();
    record.last_time_ms = recorded + 60_000;
    admin
        .put(worker.as_str(), serde_json::to_vec(&record).unwrap(), 0)
        .await
        .unwrap();
    let lease_id = admin.get(holder.as_str()).await.unwrap().kvs[0].lease;
    admin.lease_revoke(lease_id).await.unwrap();

    // The keeper fences, holds a new lease, finds the ID used and gives it up: fenced for good,
    // the identity not kept claimed, and every heartbeat says why.
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = loop {
        match lease.heartbeat(registry.as_ref(), &cache, recorded).await {
            Err(e) if e.kind == ErrorKind::Conflict => break e,
            other => {
                assert!(Instant::now() < deadline, "not given up: {other:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(err.message.contains("another process used it"), "{err}");
    assert!(err.message.contains("restart floe"), "{err}");
    assert!(!lease.fence.admits_now(&SystemClock));
    assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);
    // The identity is not kept claimed (the keeper ends its new lease at its next round).
    let mut gone = false;
    for _ in 0..50 {
        if admin.get(holder.as_str()).await.unwrap().kvs.is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "{holder} is still claimed");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);
    let record: WorkerRecord =
        serde_json::from_slice(&admin.get(worker.as_str()).await.unwrap().kvs[0].value).unwrap();
    assert_eq!(record.last_time_ms, recorded + 60_000, "never moved back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_claimed_by_another_process_while_the_lease_was_lost_stays_fenced() {
    let server = env("FLOE_TEST_ETCD");
    let root = unique_root("floe-claimed");
    let url = format!("etcd://{server}{root}?ttl=3&reach=2");
    let registry = floe_registry::open(&url).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let config = LeaseConfig::new(
        Identity::new("orders", "h1", 8080),
        IdSpace::snowflake(&Layout::LEAF),
    );
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    let gen = generator(&lease);
    gen.next_id().unwrap();
    // The lease ends (as it does for a process cut off past its TTL), and a replacement with
    // the same identity (a pod rescheduled on a fresh state directory) claims it at once.
    let admin = admin(&server);
    let holder = format!("{root}/orders/holders/h1:8080");
    let lease_id = admin.get(holder.as_str()).await.unwrap().kvs[0].lease;
    admin.lease_revoke(lease_id).await.unwrap();
    let other = floe_registry::open(&url).await.unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let other_cache = LocalCache::new(other_dir.path()).unwrap();
    let other_lease = acquire(other.as_ref(), &other_cache, &config, &SystemClock)
        .await
        .unwrap();
    assert_eq!(other_lease.id, lease.id);

    // The first process learns it lost the identity: fenced for good, saying why; its cache
    // forgets the ID; a clean stop is no error and leaves the replacement's claim alone.
    let deadline = Instant::now() + Duration::from_secs(10);
    let err = loop {
        match lease.heartbeat(registry.as_ref(), &cache, 1).await {
            Err(e) if e.kind == ErrorKind::Conflict => break e,
            other => {
                assert!(Instant::now() < deadline, "not given up: {other:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(err.message.contains("by another process"), "{err}");
    assert!(!lease.fence.admits_now(&SystemClock));
    assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);
    assert_eq!(
        cache.load(&config.identity, &registry.location()).unwrap(),
        None
    );
    lease.close(registry.as_ref(), &cache, 1).await.unwrap();
    assert!(other_lease.fence.admits_now(&SystemClock));
    let still = admin.get(holder.as_str()).await.unwrap().kvs[0].lease;
    assert_ne!(still, lease_id);
}

/// A node stopped cleanly, the registry wiped (or restored from a backup older than the node's
/// record) meanwhile, the node started again: its cache says it held an ID under this registry,
/// which no longer knows it. Another node the registry forgot may still issue with the ID it
/// now gives: the restart waits until such a node's heartbeat has found its record gone, and
/// says why. A new identity, which the registry never knew, does not wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_a_registry_that_forgot_it_waits_before_the_first_id() {
    let server = env("FLOE_TEST_ETCD");
    let root = unique_root("floe-forgot");
    let registry = floe_registry::open(&format!("etcd://{server}{root}?ttl=3&reach=2"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let config = LeaseConfig::new(
        Identity::new("orders", "h1", 8080),
        IdSpace::snowflake(&Layout::LEAF),
    );
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    let now_ms = SystemClock.now_nanos() / 1_000_000;
    lease
        .close(registry.as_ref(), &cache, now_ms)
        .await
        .unwrap();

    // The registry is wiped: every key under its root.
    let admin = admin(&server);
    let keys = admin.get_prefix(root.as_str()).await.unwrap().kvs;
    assert!(!keys.is_empty());
    for kv in keys {
        admin.delete(kv.key).await.unwrap();
    }
    let began = Instant::now();
    let again = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    // reach 2 s, below the heartbeat's 3 s interval and 2 s timeout (5 s): 5 s, its margin
    // (a tenth), 2% and 50 ms.
    let waited = began.elapsed();
    assert!(waited >= Duration::from_millis(5_660), "{waited:?}");
    assert!(
        again
            .notes
            .iter()
            .any(|n| n.contains("had no record of orders/h1:8080") && n.contains("5660 ms")),
        "{:?}",
        again.notes
    );

    // A node the registry never knew: no wait.
    let other = LeaseConfig::new(
        Identity::new("orders", "h2", 8080),
        IdSpace::snowflake(&Layout::LEAF),
    );
    let began = Instant::now();
    let fresh = acquire(registry.as_ref(), &cache, &other, &SystemClock)
        .await
        .unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "{:?}",
        fresh.notes
    );
    assert!(!fresh.notes.iter().any(|n| n.contains("had no record")));
}

/// etcd out of reach for twice its TTL (its leases expire meanwhile) at the default reach
/// (15 min): generation never stops; a process restarted on the same state directory during
/// the outage continues the lease at once, though the registry cannot be asked; once etcd
/// answers again the claim is held again under a new lease, with the same registration number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_past_the_ttl_stops_nobody_and_a_restart_continues_its_lease() {
    let proxy = common::Proxy::start(&env("FLOE_TEST_ETCD")).await;
    let url = format!("etcd://{}{}?ttl=3", proxy.addr, unique_root("floe-outage"));
    let registry = floe_registry::open(&url).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let identity = Identity::new("orders", "h1", 8080);
    let config = LeaseConfig::new(identity.clone(), IdSpace::snowflake(&Layout::LEAF));
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    let (id, fence) = (lease.id, lease.fence.clone());
    let holder = registry.list("orders").await.unwrap()[0].holder;
    let gen = generator(&lease);
    let mut ids: std::collections::HashSet<u64> =
        (0..1_000).map(|_| gen.next_id().unwrap()).collect();
    lease
        .heartbeat(registry.as_ref(), &cache, gen.last_timestamp_ms())
        .await
        .unwrap();

    proxy.cut();
    let cut = Instant::now();
    while cut.elapsed() < Duration::from_secs(7) {
        assert!(
            fence.admits_now(&SystemClock),
            "fenced {:?} into the outage",
            cut.elapsed()
        );
        assert!(ids.insert(gen.next_id().unwrap()));
        let _ = lease
            .heartbeat(registry.as_ref(), &cache, gen.last_timestamp_ms())
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Killed (no close), and started again while etcd is still out of reach.
    let last = gen.last_timestamp_ms();
    drop((gen, lease, registry));
    let launched = Instant::now();
    let registry = floe_registry::open_or_unreachable(&url).await.unwrap();
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    assert_eq!(
        (lease.id, lease.source),
        (id, floe_registry::lease::Source::Continued),
        "{:?}",
        lease.notes
    );
    let gen = generator(&lease);
    let first = gen.next_id().unwrap();
    assert!(
        launched.elapsed() < Duration::from_secs(2),
        "first ID {:?} after the launch",
        launched.elapsed()
    );
    assert!(Layout::LEAF.decode(first).timestamp_ms > last);
    assert!(ids.insert(first));

    // etcd answers again: the claim is held again (a heartbeat goes through), same holder.
    proxy.restore();
    let back = Instant::now();
    while lease
        .heartbeat(registry.as_ref(), &cache, gen.last_timestamp_ms())
        .await
        .is_err()
    {
        assert!(back.elapsed() < Duration::from_secs(20), "not held again");
        assert!(ids.insert(gen.next_id().unwrap()));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!lease.is_lost());
    let records = registry.list("orders").await.unwrap();
    assert_eq!((records[0].id, records[0].holder), (id, holder));
    for _ in 0..1_000 {
        assert!(ids.insert(gen.next_id().unwrap()));
    }
}

/// Kills (drops) a running lease after a heartbeat wrote its mark, and returns the IDs issued
/// and the last timestamp.
async fn run_then_crash(
    registry: &dyn floe_registry::Registry,
    cache: &LocalCache,
    config: &LeaseConfig,
) -> (u32, std::collections::HashSet<u64>, u64) {
    let lease = acquire(registry, cache, config, &SystemClock)
        .await
        .unwrap();
    let gen = generator(&lease);
    let ids = (0..1_000).map(|_| gen.next_id().unwrap()).collect();
    lease
        .heartbeat(registry, cache, gen.last_timestamp_ms())
        .await
        .unwrap();
    (lease.id, ids, gen.last_timestamp_ms())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reboot_etcd_confirming_the_token_skips_the_wait_and_a_copy_waits() {
    let identity = Identity::new("orders", "h1", 8080);
    let config = LeaseConfig::new(identity.clone(), IdSpace::snowflake(&Layout::LEAF));

    // The default reach: a takeover would wait 16.8 min.
    let url = format!(
        "etcd://{}{}?ttl=2",
        env("FLOE_TEST_ETCD"),
        unique_root("floe-token")
    );
    let registry = floe_registry::open(&url).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let (id, mut ids, last) = run_then_crash(registry.as_ref(), &cache, &config).await;
    // "Rebooted": the mark's boot is not this one, so the start cannot continue on its own.
    let path = cache.path(&identity, &registry.location());
    let text = std::fs::read_to_string(&path).unwrap();
    let mut entry: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(entry["lease"]["boot_id"].is_string(), "{entry}");
    entry["lease"]["boot_id"] = "00000000-0000-0000-0000-000000000000".into();
    std::fs::write(&path, entry.to_string()).unwrap();
    let launched = Instant::now();
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    assert_eq!(
        (lease.id, lease.source),
        (id, floe_registry::lease::Source::Registry)
    );
    let notes = lease.notes.join("\n");
    assert!(
        notes.contains("confirmed this state directory's lease token"),
        "{notes}"
    );
    assert!(notes.contains("before this machine's last boot"), "{notes}");
    // The crashed process's lease ends within its TTL (2 s) and a bit: no takeover wait.
    assert!(
        launched.elapsed() < Duration::from_secs(8),
        "{:?}",
        launched.elapsed()
    );
    let gen = generator(&lease);
    let first = gen.next_id().unwrap();
    assert!(Layout::LEAF.decode(first).timestamp_ms > last);
    for _ in 0..1_000 {
        assert!(ids.insert(gen.next_id().unwrap()));
    }
    drop((gen, lease));

    // A copy of a state directory (another inode: a restored backup, a volume copied to
    // another machine) proves nothing about the process that wrote it, which may be cut off
    // and still issuing: it waits the takeover wait (2.3 s at a 2 s reach).
    let url = format!(
        "etcd://{}{}?ttl=2&reach=2",
        env("FLOE_TEST_ETCD"),
        unique_root("floe-token")
    );
    let registry = floe_registry::open(&url).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let (id, _, _) = run_then_crash(registry.as_ref(), &cache, &config).await;
    let copy = tempfile::tempdir().unwrap();
    for file in std::fs::read_dir(dir.path()).unwrap() {
        let file = file.unwrap();
        std::fs::copy(file.path(), copy.path().join(file.file_name())).unwrap();
    }
    let copied = LocalCache::new(copy.path()).unwrap();
    // Its first ID also waits for the previous holder's reach by its clock (its last time, a
    // heartbeat and its reach), a little past the takeover wait here.
    let config = LeaseConfig {
        max_clock_wait: Duration::from_secs(5),
        ..config
    };
    let launched = Instant::now();
    let lease = acquire(registry.as_ref(), &copied, &config, &SystemClock)
        .await
        .unwrap();
    let notes = lease.notes.join("\n");
    assert_eq!(lease.id, id);
    assert!(!notes.contains("lease token"), "{notes}");
    assert!(notes.contains("did not close it cleanly"), "{notes}");
    let wait = floe_registry::terms::LeaseTerms::takeover_wait(2_000, Duration::ZERO);
    assert!(launched.elapsed() >= wait, "{:?}", launched.elapsed());
}
