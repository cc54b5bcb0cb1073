//! The start-up decision and heartbeats, with a manual clock. The registry is the real file
//! registry; an unreachable one is a small stand-in that always answers Unavailable.

use std::time::Duration;

use async_trait::async_trait;
use floe_core::clock::ManualClock;
use floe_core::snowflake::{Layout, SnowflakeConfig};
use floe_registry::cache::{CacheEntry, LocalCache};
use floe_registry::file::FileRegistry;
use floe_registry::lease::{acquire, run_heartbeats, LeaseConfig, Source};
use floe_registry::terms::LeaseTerms;
use floe_registry::{
    ErrorKind, IdSpace, Identity, Registration, Registry, RegistryError, WorkerRecord,
};

const T0: u64 = 1_700_000_000_000;

/// A registry that is down; `.0` says which registry it stands for, `.1` its lease terms
/// (`Some` for one that leases, as ZooKeeper and etcd do).
#[derive(Debug)]
struct Down(String, Option<LeaseTerms>);

fn down() -> RegistryError {
    RegistryError::new(ErrorKind::Unavailable, "connection refused")
}

#[async_trait]
impl Registry for Down {
    fn name(&self) -> &'static str {
        "down"
    }
    fn location(&self) -> String {
        self.0.clone()
    }
    fn lease_terms(&self) -> Option<LeaseTerms> {
        self.1
    }
    async fn register(&self, _: &Identity, _: IdSpace) -> Result<Registration, RegistryError> {
        Err(down())
    }
    async fn heartbeat(&self, _: &Identity, _: u32, _: u64) -> Result<(), RegistryError> {
        Err(down())
    }
    async fn release(&self, _: &Identity) -> Result<bool, RegistryError> {
        Err(down())
    }
    async fn list(&self, _: &str) -> Result<Vec<WorkerRecord>, RegistryError> {
        Err(down())
    }
}

struct Env {
    _dir: tempfile::TempDir,
    registry: FileRegistry,
    cache: LocalCache,
    config: LeaseConfig,
}

impl Env {
    /// The file registry of this environment, down.
    fn down(&self) -> Down {
        Down(self.registry.location(), None)
    }
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let registry = FileRegistry::new(dir.path().join("registry")).unwrap();
    let cache = LocalCache::new(dir.path().join("state")).unwrap();
    let config = LeaseConfig::new(
        Identity::new("orders", "10.0.0.1", 8080),
        IdSpace::snowflake(&Layout::LEAF),
    );
    Env {
        _dir: dir,
        registry,
        cache,
        config,
    }
}

#[tokio::test]
async fn first_start_then_restart_resumes_after_the_last_time() {
    let e = env();
    let clock = ManualClock::from_millis(T0);
    let lease = acquire(&e.registry, &e.cache, &e.config, &clock)
        .await
        .unwrap();
    assert_eq!((lease.source, lease.not_before_ms), (Source::Registry, 0));
    let id = lease.id;
    // Alive until T0 + 3000, then the process ends.
    lease
        .heartbeat(&e.registry, &e.cache, T0 + 3000)
        .await
        .unwrap();
    drop(lease);
    clock.set_millis(T0 + 10_000);
    let lease = acquire(&e.registry, &e.cache, &e.config, &clock)
        .await
        .unwrap();
    assert_eq!((lease.id, lease.not_before_ms), (id, T0 + 3000));
    // The generator built from the lease issues after that time.
    let gen = SnowflakeConfig::new(Layout::LEAF)
        .worker(u64::from(lease.id))
        .not_before_ms(lease.not_before_ms)
        .build(clock.clone())
        .unwrap();
    assert!(Layout::LEAF.decode(gen.next_id().unwrap()).timestamp_ms > T0 + 3000);
}

/// A first run: its ID, taken from the registry, heartbeaten into the cache at T0 + 500;
/// the clock is then at T0 + 1000.
async fn a_run_that_left_a_cache(e: &Env, clock: &ManualClock) -> u32 {
    let lease = acquire(&e.registry, &e.cache, &e.config, clock)
        .await
        .unwrap();
    lease
        .heartbeat(&e.registry, &e.cache, T0 + 500)
        .await
        .unwrap();
    clock.set_millis(T0 + 1000);
    lease.id
}

/// A cache entry that cannot be read (a damaged state directory) is ignored with a note that
/// says so; the registry's record still carries the last time, and the start resumes after it.
#[tokio::test]
async fn a_damaged_cache_entry_is_ignored_and_the_start_says_so() {
    let e = env();
    let clock = ManualClock::from_millis(T0);
    let id = a_run_that_left_a_cache(&e, &clock).await;
    let path = e.cache.path(&e.config.identity, &e.registry.location());
    std::fs::write(&path, b"{ not json").unwrap();
    let lease = acquire(&e.registry, &e.cache, &e.config, &clock)
        .await
        .unwrap();
    assert_eq!(
        (lease.id, lease.source, lease.not_before_ms),
        (id, Source::Registry, T0 + 500)
    );
    assert!(
        lease
            .notes
            .iter()
            .any(|n| n.starts_with("local cache ignored: ")),
        "{:?}",
        lease.notes
    );
}

#[tokio::test]
async fn registry_down_at_start_up_uses_the_cache_and_says_so() {
    let e = env();
    let clock = ManualClock::from_millis(T0);
    let id = a_run_that_left_a_cache(&e, &clock).await;
    let lease = acquire(&e.down(), &e.cache, &e.config, &clock)
        .await
        .unwrap();
    assert_eq!(
        (lease.id, lease.source, lease.not_before_ms),
        (id, Source::Cache, T0 + 500)
    );
    assert!(
        lease
            .notes
            .iter()
            .any(|n| n.contains("started from the local cache")),
        "{:?}",
        lease.notes
    );
    // Heartbeats during the outage still reach the cache, and count the registry's failure.
    assert!(
        lease
            .heartbeat(&e.down(), &e.cache, T0 + 2000)
            .await
            .is_ok(),
        "cache-sourced leases do not beat the registry"
    );
    assert_eq!(
        e.cache
            .load(&e.config.identity, &e.registry.location())
            .unwrap()
            .unwrap()
            .last_time_ms,
        T0 + 2000
    );
}

/// A registry that answers Unavailable to its first `.1` registrations, then is the file
/// registry `.0`: a connection lost for a moment at start. `.2`: whether it says it may
/// answer later (a registry never reached says not).
#[derive(Debug)]
struct Blip(FileRegistry, std::sync::atomic::AtomicU32, bool);

#[async_trait]
impl Registry for Blip {
    fn name(&self) -> &'static str {
        "blip"
    }
    fn may_answer_later(&self) -> bool {
        self.2
    }
    fn location(&self) -> String {
        self.0.location()
    }
    async fn register(
        &self,
        who: &Identity,
        space: IdSpace,
    ) -> Result<Registration, RegistryError> {
        let left = self.1.load(std::sync::atomic::Ordering::Relaxed);
        if left > 0 {
            self.1.store(left - 1, std::sync::atomic::Ordering::Relaxed);
            return Err(down());
        }
        self.0.register(who, space).await
    }
    async fn heartbeat(&self, who: &Identity, id: u32, at: u64) -> Result<(), RegistryError> {
        self.0.heartbeat(who, id, at).await
    }
    async fn release(&self, who: &Identity) -> Result<bool, RegistryError> {
        self.0.release(who).await
    }
    async fn list(&self, service: &str) -> Result<Vec<WorkerRecord>, RegistryError> {
        self.0.list(service).await
    }
}

/// A registry unreachable for a moment at start (a leader elected, a server restarted) is
/// asked again, for up to `REGISTER_RETRY`: the start gets its ID from the registry, not from
/// the cache nor a refusal. Down for longer, the start goes on without it as before.
#[tokio::test]
async fn a_registry_lost_for_a_moment_at_start_is_asked_again() {
    let e = env();
    let clock = ManualClock::from_millis(T0);
    let blip = Blip(
        FileRegistry::new(e._dir.path().join("registry")).unwrap(),
        std::sync::atomic::AtomicU32::new(3),
        true,
    );
    let started = std::time::Instant::now();
    let lease = acquire(&blip, &e.cache, &e.config, &clock).await.unwrap();
    assert_eq!(lease.source, Source::Registry, "{:?}", lease.notes);
    assert_eq!(blip.1.load(std::sync::atomic::Ordering::Relaxed), 0);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(750) && took < floe_registry::lease::REGISTER_RETRY,
        "three tries 250 ms apart: {took:?}"
    );
    drop(lease);
    let down = Blip(
        FileRegistry::new(e._dir.path().join("registry")).unwrap(),
        std::sync::atomic::AtomicU32::new(u32::MAX),
        true,
    );
    let started = std::time::Instant::now();
    let lease = acquire(&down, &e.cache, &e.config, &clock).await.unwrap();
    assert_eq!(lease.source, Source::Cache, "{:?}", lease.notes);
    assert!(started.elapsed() >= floe_registry::lease::REGISTER_RETRY);
    drop(lease);
    // A registry never reached (opened unreachable) is not asked again: its answer is final.
    let never = Blip(
        FileRegistry::new(e._dir.path().join("registry")).unwrap(),
        std::sync::atomic::AtomicU32::new(u32::MAX),
        false,
    );
    let started = std::time::Instant::now();
    let lease = acquire(&never, &e.cache, &e.config, &clock).await.unwrap();
    assert_eq!(lease.source, Source::Cache, "{:?}", lease.notes);
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        never.1.load(std::sync::atomic::Ordering::Relaxed),
        u32::MAX - 1,
        "asked once"
    );
}

/// A registry that leases (ZooKeeper, etcd) down at start-up: the cache would give an ID with
/// no lease, which a replacement may be given meanwhile, so the start is refused, naming the
/// switch; with the switch (Leaf's behaviour) it starts from the cache and says so.
#[tokio::test]
async fn a_leasing_registry_down_at_start_up_refuses_the_cache_unless_told() {
    let e = env();
    let clock = ManualClock::from_millis(T0);
    let id = a_run_that_left_a_cache(&e, &clock).await;
    let leasing = Down(
        e.registry.location(),
        Some(LeaseTerms::new(
            Duration::from_secs(6),
            floe_registry::terms::DEFAULT_REACH,
        )),
    );
    let refused = acquire(&leasing, &e.cache, &e.config, &clock)
        .await
        .unwrap_err();
    assert_eq!(refused.kind, ErrorKind::NoWorkerId, "{refused}");
    for part in [
        "refusing to start from the local cache",
        &format!("worker ID {id}"),
        "--start-from-cache",
    ] {
        assert!(refused.message.contains(part), "{refused}");
    }
    let mut config = e.config.clone();
    config.start_from_cache = true;
    let lease = acquire(&leasing, &e.cache, &config, &clock).await.unwrap();
    assert_eq!(
        (lease.id, lease.source, lease.not_before_ms),
        (id, Source::Cache, T0 + 500)
    );
}

#[tokio::test]
async fn a_cache_from_another_registry_is_never_used() {
    // The file registry grants worker 0 and the cache records it...
    let e = env();
    let clock = ManualClock::from_millis(T0);
    let lease = acquire(&e.registry, &e.cache, &e.config, &clock)
        .await
        .unwrap();
    assert_eq!(lease.id, 0);
    drop(lease);
    // ...then the same identity starts against a ZooKeeper that is down: ZooKeeper never
    // granted worker 0 to it, so there is no cache to start from.
    let zk = Down(
        "zk://127.0.0.1:2181/floe".into(),
        Some(LeaseTerms::new(
            Duration::from_secs(6),
            floe_registry::terms::DEFAULT_REACH,
        )),
    );
    let err = acquire(&zk, &e.cache, &e.config, &clock).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoWorkerId, "{err}");
    // Nor one of another root on the same servers.
    let zk_other_root = Down(format!("{}/other", e.registry.location()), None);
    let err = acquire(&zk_other_root, &e.cache, &e.config, &clock)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoWorkerId, "{err}");
}

#[tokio::test]
async fn no_registry_and_no_cache_refuses_unless_the_fallback_was_chosen() {
    let e = env();
    let clock = ManualClock::from_millis(T0);
    let err = acquire(&e.down(), &e.cache, &e.config, &clock)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::NoWorkerId);
    assert!(err.message.contains("refusing to start"), "{err}");
    let config = LeaseConfig {
        port_fallback: true,
        ..e.config.clone()
    };
    let lease = acquire(&e.down(), &e.cache, &config, &clock).await.unwrap();
    assert_eq!(
        (lease.id, lease.source),
        (8080 % 1024, Source::PortFallback)
    );
}

#[tokio::test]
async fn a_clock_behind_the_last_time_refuses_naming_both_times() {
    let e = env();
    let clock = ManualClock::from_millis(T0);
    let lease = acquire(&e.registry, &e.cache, &e.config, &clock)
        .await
        .unwrap();
    lease
        .heartbeat(&e.registry, &e.cache, T0 + 60_000)
        .await
        .unwrap();
    drop(lease);
    let refused = floe_registry::lease::clock_refusals();
    let err = acquire(&e.registry, &e.cache, &e.config, &clock)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::ClockBehind);
    assert!(floe_registry::lease::clock_refusals() > refused);
    assert!(err.message.contains(&format!("now {T0} ms")), "{err}");
    assert!(
        err.message
            .contains(&format!("registry {} ms", T0 + 60_000)),
        "{err}"
    );
    assert!(
        err.message.contains(&format!("cache {} ms", T0 + 60_000)),
        "{err}"
    );
}

#[tokio::test]
async fn the_later_of_registry_and_cache_counts_and_a_small_lag_is_waited_out() {
    let e = env();
    let clock = ManualClock::from_millis(T0);
    let lease = acquire(&e.registry, &e.cache, &e.config, &clock)
        .await
        .unwrap();
    let id = lease.id;
    e.registry
        .heartbeat(&e.config.identity, id, T0 + 100)
        .await
        .unwrap();
    e.cache
        .store(&CacheEntry {
            registry: e.registry.location(),
            identity: e.config.identity.clone(),
            id,
            last_time_ms: T0 + 103,
            lease: None,
        })
        .unwrap();
    drop(lease);
    clock.set_millis(T0 + 100);
    let lease = acquire(&e.registry, &e.cache, &e.config, &clock)
        .await
        .unwrap();
    assert_eq!(lease.not_before_ms, T0 + 103);
    assert_eq!(clock.waits(), 1);
    assert!(clock.now_millis() > T0 + 103);
}

#[tokio::test]
async fn a_full_space_fails_at_start_up() {
    let e = env();
    let clock = ManualClock::from_millis(T0);
    let config = LeaseConfig {
        space: IdSpace::new(1),
        ..e.config.clone()
    };
    let _first = acquire(&e.registry, &e.cache, &config, &clock)
        .await
        .unwrap();
    let other = LeaseConfig {
        identity: Identity::new("orders", "10.0.0.2", 8080),
        ..config
    };
    let err = acquire(&e.registry, &e.cache, &other, &clock)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::SpaceFull);
}

#[tokio::test(start_paused = true)]
async fn heartbeats_run_every_interval_and_count_failures() {
    let e = env();
    let clock = ManualClock::from_millis(T0);
    let lease = acquire(&e.registry, &e.cache, &e.config, &clock)
        .await
        .unwrap();
    // Paused tokio time: the recorded time follows tokio's clock, so every beat's value is
    // known (ticks at 0 s, 3 s and 6 s before the 8 s shutdown).
    let start = tokio::time::Instant::now();
    let last = || T0 + start.elapsed().as_millis() as u64;
    let shutdown = tokio::time::sleep(Duration::from_secs(8));
    run_heartbeats(
        &lease,
        &e.registry,
        &e.cache,
        Duration::from_secs(3),
        last,
        shutdown,
    )
    .await;
    let list = e.registry.list("orders").await.unwrap();
    assert_eq!(list[0].last_time_ms, T0 + 6000, "{list:?}");
    assert_eq!(
        lease
            .stats
            .heartbeat_failures
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    // Against an unreachable registry, each beat is counted as a failure.
    run_heartbeats(
        &lease,
        &e.down(),
        &e.cache,
        Duration::from_secs(3),
        last,
        tokio::time::sleep(Duration::from_secs(7)),
    )
    .await;
    assert_eq!(
        lease
            .stats
            .heartbeat_failures
            .load(std::sync::atomic::Ordering::Relaxed),
        3
    );
}

#[tokio::test]
async fn an_id_whose_record_goes_under_a_live_holder_fences_its_generator() {
    let e = env();
    let clock = ManualClock::from_millis(T0);
    let lease = acquire(&e.registry, &e.cache, &e.config, &clock)
        .await
        .unwrap();
    let gen = SnowflakeConfig::new(Layout::LEAF)
        .worker(u64::from(lease.id))
        .fence(lease.fence.clone())
        .build(clock.clone())
        .unwrap();
    gen.next_id().unwrap();
    // An operator's `floe worker release` is refused while this process runs.
    let refused = e.registry.release(&e.config.identity).await.unwrap_err();
    assert_eq!(refused.kind, ErrorKind::Conflict, "{refused}");
    gen.next_id().unwrap();
    // The record goes anyway (edited by hand): the next heartbeat stops the generator.
    std::fs::write(e.registry.dir().join("registry.json"), r#"{"services":{}}"#).unwrap();
    let err = lease
        .heartbeat(&e.registry, &e.cache, T0 + 10)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Conflict);
    assert_eq!(
        gen.next_id().unwrap_err(),
        floe_core::snowflake::SnowflakeError::LeaseLost
    );
    assert_eq!(lease.fence.periods(), 1);
}

#[tokio::test]
async fn a_taken_over_id_starts_after_its_previous_holders_last_time() {
    let e = env();
    let clock = ManualClock::from_millis(T0);
    let small = IdSpace::new(1);
    let config = LeaseConfig {
        space: small,
        ..e.config.clone()
    };
    let old = acquire(&e.registry, &e.cache, &config, &clock)
        .await
        .unwrap();
    old.heartbeat(&e.registry, &e.cache, T0 + 1_000)
        .await
        .unwrap();
    drop(old);
    let other = LeaseConfig {
        identity: Identity::new("orders", "10.0.0.2", 8080),
        reclaim_after: Some(Duration::from_secs(60)),
        ..config
    };
    // Off by default: the space is simply full.
    let default = LeaseConfig {
        reclaim_after: None,
        ..other.clone()
    };
    clock.set_millis(T0 + 120_000);
    assert_eq!(
        acquire(&e.registry, &e.cache, &default, &clock)
            .await
            .unwrap_err()
            .kind,
        ErrorKind::SpaceFull
    );
    // Too recent for the idle bound: full.
    clock.set_millis(T0 + 30_000);
    assert_eq!(
        acquire(&e.registry, &e.cache, &other, &clock)
            .await
            .unwrap_err()
            .kind,
        ErrorKind::SpaceFull
    );
    // Idle long enough: taken over, starting after the previous holder's last time, and after
    // the moment it was taken (the previous holder, gone without closing, may have issued up
    // to then: a time unit longer than a millisecond could be that very one).
    clock.set_millis(T0 + 120_000);
    let lease = acquire(&e.registry, &e.cache, &other, &clock)
        .await
        .unwrap();
    assert_eq!((lease.id, lease.not_before_ms), (0, T0 + 120_000));
    assert!(
        lease
            .notes
            .iter()
            .any(|n| n.contains("took over worker ID 0")),
        "{:?}",
        lease.notes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn with_a_time_bound_a_crash_then_a_clock_behind_never_repeats() {
    let e = env();
    let config = LeaseConfig {
        horizon_kind: Some("snowflake".into()),
        horizon: floe_registry::horizon::HorizonConfig {
            refresh: Duration::ZERO, // moved by hand below
            ..Default::default()
        },
        ..e.config.clone()
    };
    let clock = ManualClock::from_millis(T0);
    let lease = acquire(&e.registry, &e.cache, &config, &clock)
        .await
        .unwrap();
    let build = |lease: &floe_registry::lease::Lease, clock: &ManualClock| {
        SnowflakeConfig::new(Layout::LEAF)
            .worker(u64::from(lease.id))
            .not_before_ms(lease.not_before_ms)
            .horizon(lease.horizon().unwrap())
            .build(clock.clone())
            .unwrap()
    };
    let gen = build(&lease, &clock);
    let mut seen = std::collections::HashSet::new();
    // 2.5 s of IDs, the bound moved ahead every 200 ms; no heartbeat ever reaches the
    // registry or the cache after start-up.
    for step in 0..2_500u64 {
        if step % 200 == 0 {
            lease.durable_horizon().unwrap().advance_now();
        }
        assert!(seen.insert(gen.next_id().unwrap()));
        clock.advance(Duration::from_millis(1));
    }
    let last = gen.last_timestamp_ms();
    // kill -9: nothing is closed, nothing recorded.
    std::mem::forget(gen);
    drop(lease);
    // The clock is now 1.4 s behind the last issued time: the restart waits past the bound.
    clock.set_millis(last - 1_400);
    let lease = acquire(&e.registry, &e.cache, &config, &clock)
        .await
        .unwrap();
    assert!(
        lease.not_before_ms >= last,
        "{} < {last}",
        lease.not_before_ms
    );
    assert!(
        lease.notes.iter().any(|n| n.contains("waited")),
        "{:?}",
        lease.notes
    );
    let gen = build(&lease, &clock);
    for _ in 0..1_000 {
        assert!(seen.insert(gen.next_id().unwrap()), "repeated ID");
        clock.advance(Duration::from_micros(300));
    }
    // A clock an hour behind refuses, naming the bound.
    drop(gen);
    drop(lease);
    clock.set_millis(last - 3_600_000);
    let err = acquire(&e.registry, &e.cache, &config, &clock)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::ClockBehind);
    assert!(err.message.contains("time bound"), "{err}");
}

/// A new holder whose clock is behind the previous holder's (which did not close cleanly)
/// issues nothing before that holder's reach: its last recorded time, a heartbeat and its
/// window later, instead of repeating the previous holder's IDs.
#[tokio::test]
async fn a_takeover_by_a_clock_behind_waits_for_or_refuses_the_previous_holders_reach() {
    let e = env();
    let small = IdSpace::new(1);
    let config = LeaseConfig {
        space: small,
        horizon_kind: Some("snowflake".into()),
        ..e.config.clone()
    };
    let clock = ManualClock::from_millis(T0);
    let old = acquire(&e.registry, &e.cache, &config, &clock)
        .await
        .unwrap();
    old.heartbeat(&e.registry, &e.cache, T0 + 100_000)
        .await
        .unwrap();
    drop(old);
    let other = LeaseConfig {
        identity: Identity::new("orders", "10.0.0.2", 8080),
        reclaim_after: Some(Duration::from_millis(100)),
        ..config
    };
    // A clock behind the previous holder's last time finds nothing idle: nothing taken.
    let behind = ManualClock::from_millis(T0 + 97_000);
    let full = acquire(&e.registry, &e.cache, &other, &behind)
        .await
        .unwrap_err();
    assert_eq!(full.kind, ErrorKind::SpaceFull, "{full}");
    // The previous holder's reach: T0 + 100 s + a heartbeat (3 s; the file registry keeps no
    // window); this clock is 2 s short of it: it waits, and issues nothing at or before it. (A
    // lag longer than the wait a start allows refuses, as any clock behind a recorded time.)
    let behind = ManualClock::from_millis(T0 + 101_000);
    let lease = acquire(&e.registry, &e.cache, &other, &behind)
        .await
        .unwrap();
    assert_eq!(lease.id, 0);
    assert_eq!(lease.not_before_ms, T0 + 103_000);
    assert!(
        behind.waited() >= Duration::from_secs(2),
        "{:?}",
        behind.waited()
    );
}
