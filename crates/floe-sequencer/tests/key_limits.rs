//! The keys a store holds in memory ([`KeyLimits`]): idle keys are dropped (on tokio's paused
//! clock: no test waits for the wall clock), a full map drops its least recently used keys, a
//! key in use is never dropped, and a dropped key's buffered IDs are gaps, never repeats, even
//! with requests racing the eviction.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use floe_sequencer::stores::memory::MemoryStore;
use floe_sequencer::{
    ErrorKind, Key, KeyLimits, Mode, SeqError, ServeOptions, StepPolicy, Store, StoreHandle,
};
use floe_testkit::Rng;

fn options(step: u32) -> ServeOptions {
    ServeOptions {
        step: StepPolicy {
            min: step,
            max: step,
            ..StepPolicy::default()
        },
        // Longer than the slowest store call a test makes (on the paused clock).
        timeout: Duration::from_secs(3600),
    }
}

fn handle(store: Arc<dyn Store>, step: u32, limits: KeyLimits) -> StoreHandle {
    StoreHandle::new("s", store, options(step))
        .key_limits(limits)
        .unwrap()
}

fn limits(idle_secs: u64, max_keys: usize) -> KeyLimits {
    KeyLimits {
        idle: Duration::from_secs(idle_secs),
        max_keys,
    }
}

/// Lets the paused clock run (it jumps to each timer: no wall-clock wait) until `done`, or
/// fails after `limit` of virtual time.
async fn until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let step = Duration::from_millis(100);
    let mut waited = Duration::ZERO;
    while !done() {
        assert!(waited < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(step).await;
        waited += step;
    }
}

/// A store whose reservations can be held for a while (virtual time) and are counted.
#[derive(Debug, Default)]
struct Slow {
    inner: MemoryStore,
    delay_ms: AtomicU64,
    segments: AtomicU32,
}

#[async_trait]
impl Store for Slow {
    fn kind(&self) -> &'static str {
        "slow"
    }

    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        let delay = self.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if n > 1 {
            self.segments.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.reserve(key, n).await
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        self.inner.raise(key, floor).await
    }
}

#[test]
fn limits_are_checked() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let err = StoreHandle::new("s", Arc::clone(&store), ServeOptions::default())
        .key_limits(limits(60, 0))
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Config);
    assert!(err.message.starts_with("max_keys:"), "{err}");
    let err = StoreHandle::new("s", store, ServeOptions::default())
        .key_limits(KeyLimits {
            idle: Duration::ZERO,
            max_keys: 10,
        })
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Config);
    assert!(err.message.starts_with("idle:"), "{err}");
    assert_eq!(KeyLimits::default(), limits(60, 100_000));
}

/// On the embedded store (durable): a key idle for longer than `idle` is dropped, one used
/// since is kept; the dropped key's next WEAK ID continues its buffer (parked), never one it
/// served by any way (WEAK, a thread's block, STRONG).
#[tokio::test(start_paused = true)]
async fn an_idle_key_is_dropped_and_goes_on_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let store = floe_sequencer::open("embedded", dir.path()).await.unwrap();
    let h = handle(store, 100, limits(60, 1000));
    let mut served = Vec::new();
    for _ in 0..5 {
        served.push(h.next_id("a", Mode::Weak).await.unwrap());
    }
    {
        let a = h.weak_key(&Key::new("a").unwrap());
        for _ in 0..5 {
            served.push(a.next_local().await.unwrap());
        }
    }
    for _ in 0..3 {
        served.push(h.next_id("a", Mode::Strong).await.unwrap());
    }
    assert_eq!(h.keys_in_memory(), 1);

    tokio::time::advance(Duration::from_secs(40)).await;
    h.next_id("b", Mode::Weak).await.unwrap();
    assert_eq!(h.keys_in_memory(), 2);
    // "a" is idle past 60 s by the sweep at 75 s (sweeps run every idle / 4); "b" is not.
    until("a dropped", Duration::from_secs(40), || {
        h.keys_in_memory() == 1
    })
    .await;
    assert_eq!(h.keys_in_memory(), 1, "b stays");

    // The buffer's unused IDs were parked: "a" goes on above every WEAK ID it served, the
    // rest of the thread's block of 3 (at most 2 IDs) a gap; its STRONG IDs were reserved
    // after the buffer's segment, as they would have been with the buffer kept.
    let weak_before = *served[..10].iter().max().unwrap();
    let next = h.next_id("a", Mode::Weak).await.unwrap();
    assert!(
        next > weak_before && next <= weak_before + 3,
        "{next} after {served:?}"
    );
    let mut all: HashSet<i64> = served.iter().copied().collect();
    assert_eq!(all.len(), served.len());
    assert!(all.insert(next));
    // "b" too, once idle.
    until("b dropped", Duration::from_secs(120), || {
        h.keys_in_memory() == 1
    })
    .await;
    assert_eq!(h.keys_in_memory(), 1, "a is back, b gone");
}

/// A key with work under way is never dropped, however long it has been: not while its
/// segment fetch is pending, nor while a buffer handed out by `weak_key` is held.
#[tokio::test(start_paused = true)]
async fn a_key_in_use_is_never_dropped() {
    let store = Arc::new(Slow::default());
    let h = Arc::new(handle(
        Arc::clone(&store) as Arc<dyn Store>,
        100,
        limits(60, 1000),
    ));
    // A fetch that takes 300 s of virtual time, with its caller waiting.
    store.delay_ms.store(300_000, Ordering::SeqCst);
    let waiting = {
        let h = Arc::clone(&h);
        tokio::spawn(async move { h.next_id("slow", Mode::Weak).await })
    };
    tokio::time::sleep(Duration::from_secs(200)).await;
    assert!(!waiting.is_finished());
    assert_eq!(
        h.keys_in_memory(),
        1,
        "not dropped while its fetch is pending"
    );
    assert_eq!(waiting.await.unwrap().unwrap(), 1);
    store.delay_ms.store(0, Ordering::SeqCst);

    // Held by a caller for 200 s: kept; let go: dropped.
    let held = h.weak_key(&Key::new("held").unwrap());
    assert_eq!(held.next_local().await.unwrap(), 1);
    tokio::time::sleep(Duration::from_secs(200)).await;
    assert_eq!(h.keys_in_memory(), 1, "slow went, held stays");
    assert!(held.next_local().await.unwrap() > 1);
    drop(held);
    until("held dropped", Duration::from_secs(100), || {
        h.keys_in_memory() == 0
    })
    .await;
}

/// Idle keys still go when the runtime that first served the handle is gone and another one
/// serves it (the sweeper task is started again).
#[test]
fn idle_keys_go_on_being_dropped_under_a_second_runtime() {
    let paused = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
    };
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let h = handle(store, 100, limits(60, 1000));
    let first = paused();
    first.block_on(h.next_id("a", Mode::Weak)).unwrap();
    drop(first);
    paused().block_on(async {
        h.next_id("b", Mode::Weak).await.unwrap();
        assert_eq!(h.keys_in_memory(), 2);
        until("a and b dropped", Duration::from_secs(120), || {
            h.keys_in_memory() == 0
        })
        .await;
    });
}

/// A full map drops its least recently used key (a batch of one at 16 keys): the key used
/// again just before is kept and goes on from its buffer; the dropped one goes on from its
/// parked tail when it comes back.
#[tokio::test(start_paused = true)]
async fn a_full_map_drops_the_least_recently_used_key() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let h = handle(store, 100, limits(3600, 16));
    let key = |i: usize| format!("k{i}");
    for i in 0..16 {
        assert_eq!(h.next_id(&key(i), Mode::Weak).await.unwrap(), 1);
        tokio::time::advance(Duration::from_millis(5)).await;
    }
    assert_eq!(h.next_id(&key(0), Mode::Weak).await.unwrap(), 2);
    tokio::time::advance(Duration::from_millis(5)).await;
    // A 17th key: k1, the least recently used, goes.
    assert_eq!(h.next_id(&key(16), Mode::Weak).await.unwrap(), 1);
    assert_eq!(h.keys_in_memory(), 16);
    assert_eq!(h.next_id(&key(0), Mode::Weak).await.unwrap(), 3, "kept");
    tokio::time::advance(Duration::from_millis(5)).await;
    assert_eq!(h.next_id(&key(2), Mode::Weak).await.unwrap(), 2, "kept");
    tokio::time::advance(Duration::from_millis(5)).await;
    // k1 comes back where it stopped (its tail was parked); k3 (now the least recently used)
    // makes room for it, and goes on where it stopped too.
    assert_eq!(h.next_id(&key(1), Mode::Weak).await.unwrap(), 2);
    assert_eq!(h.keys_in_memory(), 16);
    assert_eq!(h.next_id(&key(3), Mode::Weak).await.unwrap(), 2);
}

/// Every key held is in use: a new key is held all the same, over the limit (never served
/// apart from its buffer, which could break the order of WEAK IDs), and the map comes back
/// within the limit as soon as keys can go.
#[tokio::test(start_paused = true)]
async fn a_map_full_of_keys_in_use_holds_one_more_until_keys_can_go() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let h = handle(store, 100, limits(3600, 2));
    let a = h.weak_key(&Key::new("a").unwrap());
    let b = h.strong_key(&Key::new("b").unwrap());
    assert_eq!(h.keys_in_memory(), 2);
    tokio::time::advance(Duration::from_millis(5)).await;
    assert_eq!(h.next_id("c", Mode::Weak).await.unwrap(), 1);
    assert_eq!(h.next_id("c", Mode::Weak).await.unwrap(), 2);
    assert_eq!(
        h.keys_in_memory(),
        3,
        "over the limit while a and b are held"
    );
    assert_eq!(a.next().await.unwrap(), 1);
    drop(a);
    tokio::time::advance(Duration::from_millis(5)).await;
    // A new key: a and c can go (a first, the least recently used), and both must, to make
    // room for d within 2 keys.
    assert_eq!(h.next_id("d", Mode::Weak).await.unwrap(), 1);
    assert_eq!(h.keys_in_memory(), 2);
    // Each dropped buffer's unused IDs were parked: c and a go on where they stopped.
    assert_eq!(
        h.next_id("c", Mode::Weak).await.unwrap(),
        3,
        "c's parked tail"
    );
    assert_eq!(
        h.next_id("a", Mode::Weak).await.unwrap(),
        2,
        "a's parked tail"
    );
    assert_eq!(b.next().await.unwrap(), 1);
}

/// A store that yields a random number of times in each reservation, so that fetches and
/// increments are in flight while keys are dropped.
#[derive(Debug)]
struct Jittery {
    inner: MemoryStore,
    rng: std::sync::Mutex<Rng>,
    segments: AtomicU32,
    given_back: AtomicU32,
}

#[async_trait]
impl Store for Jittery {
    fn kind(&self) -> &'static str {
        "jittery"
    }

    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        let yields = self.rng.lock().unwrap().below(4);
        for _ in 0..yields {
            tokio::task::yield_now().await;
        }
        if n > 1 {
            self.segments.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.reserve(key, n).await
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        self.inner.raise(key, floor).await
    }

    async fn give_back(&self, key: &Key, first: i64, last: i64) -> Result<bool, SeqError> {
        let yields = self.rng.lock().unwrap().below(4);
        for _ in 0..yields {
            tokio::task::yield_now().await;
        }
        let given = self.inner.give_back(key, first, last).await?;
        if given {
            self.given_back.fetch_add(1, Ordering::SeqCst);
        }
        Ok(given)
    }
}

/// Requests (WEAK, a thread's blocks, STRONG) on 24 keys from 8 tasks on 4 threads, with room
/// for 4 keys and a 2 ms idle time: keys are dropped all the time, under requests, pending
/// fetches and increments in flight. No ID is issued twice, each task sees each key's STRONG
/// and WEAK IDs increase (WEAK IDs follow the order of the requests), and the map comes back
/// within its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_racing_evictions_never_share_an_id() {
    const KEYS: u64 = 24;
    let store = Arc::new(Jittery {
        inner: MemoryStore::new(),
        rng: std::sync::Mutex::new(Rng(0x9E37_79B9_7F4A_7C15)),
        segments: AtomicU32::new(0),
        given_back: AtomicU32::new(0),
    });
    let h = Arc::new(handle(
        Arc::clone(&store) as Arc<dyn Store>,
        20,
        KeyLimits {
            idle: Duration::from_millis(2),
            max_keys: 4,
        },
    ));
    let tasks: Vec<_> = (0..8u64)
        .map(|t| {
            let h = Arc::clone(&h);
            tokio::spawn(async move {
                let mut rng = Rng(t * 7919 + 1);
                let mut ids: Vec<(u64, &'static str, i64)> = Vec::new();
                for _ in 0..3000 {
                    let k = rng.below(KEYS);
                    let name = format!("k{k}");
                    match rng.below(3) {
                        0 => ids.push((k, "weak", h.next_id(&name, Mode::Weak).await.unwrap())),
                        1 => ids.push((k, "strong", h.next_id(&name, Mode::Strong).await.unwrap())),
                        _ => {
                            let buffer = h.weak_key(&Key::new(name).unwrap());
                            for _ in 0..=rng.below(5) {
                                ids.push((k, "local", buffer.next_local().await.unwrap()));
                            }
                        }
                    }
                }
                ids
            })
        })
        .collect();
    let mut seen: HashMap<u64, HashSet<i64>> = HashMap::new();
    let mut total = 0;
    for t in tasks {
        let ids = t.await.unwrap();
        let mut last: HashMap<(u64, &str), i64> = HashMap::new();
        for (k, mode, id) in ids {
            assert!(seen.entry(k).or_default().insert(id), "{id} twice for k{k}");
            total += 1;
            if mode != "local" {
                if let Some(prev) = last.insert((k, mode), id) {
                    assert!(id > prev, "{mode} k{k}: {id} after {prev}");
                }
            }
        }
    }
    assert!(total >= 24_000);
    // Buffers were dropped and made again many times (each new one fetches a segment).
    let segments = store.segments.load(Ordering::SeqCst);
    assert!(segments > 1000, "only {segments} segment fetches");
    // Once the last background fetches end, a new key brings the map back within 4 keys.
    let mut held = usize::MAX;
    for i in 0..1000 {
        h.next_id(&format!("after{i}"), Mode::Weak).await.unwrap();
        held = h.keys_in_memory();
        if held <= 4 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(held <= 4, "{held} keys held");
    // Parked tails went over the limit and were given back (racing the requests) many times.
    let given = store.given_back.load(Ordering::SeqCst);
    assert!(given > 10, "only {given} tails given back");
}

/// A quiet key goes on 1, 2, 3 however long it was idle: its buffer is dropped from memory
/// (idle past 60 s) and its unused IDs parked, then served first by its next buffer.
#[tokio::test(start_paused = true)]
async fn a_quiet_key_goes_on_one_two_three_an_hour_apart() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let h = handle(store, 1000, limits(60, 1000));
    for want in 1..=3 {
        assert_eq!(h.next_id("slow", Mode::Weak).await.unwrap(), want);
        until("slow dropped", Duration::from_secs(120), || {
            h.keys_in_memory() == 0
        })
        .await;
        assert_eq!(h.tails_pending(), 1000 - want as u64, "parked");
        tokio::time::advance(Duration::from_secs(3600)).await;
    }
    assert_eq!(h.next_id("slow", Mode::Weak).await.unwrap(), 4);
}

/// More keys parked than `max_keys`: the least recently parked are given back to the store
/// (nothing was reserved after them), so they too go on where they stopped; a key whose
/// store value moved on since (another client) is a gap, never a repeat.
#[tokio::test(start_paused = true)]
async fn parked_tails_beyond_the_limit_are_given_back_to_the_store() {
    let memory = Arc::new(MemoryStore::new());
    let store: Arc<dyn Store> = Arc::clone(&memory) as Arc<dyn Store>;
    let h = handle(Arc::clone(&store), 100, limits(3600, 2));
    let key = |i: usize| format!("k{i}");
    for i in 0..8 {
        assert_eq!(h.next_id(&key(i), Mode::Weak).await.unwrap(), 1);
        tokio::time::advance(Duration::from_millis(5)).await;
    }
    // k7 moves on in the store meanwhile (another process's segment): its tail is a gap.
    let k7 = Key::new(key(7)).unwrap();
    assert_eq!(memory.reserve(&k7, 100).await.unwrap(), 200);
    // Room for 2 keys held and 16 parked: 40 more keys let the first ones go for good.
    for i in 8..48 {
        h.next_id(&key(i), Mode::Weak).await.unwrap();
        tokio::time::advance(Duration::from_millis(5)).await;
    }
    assert!(h.keys_in_memory() <= 2);
    for i in 0..7 {
        assert_eq!(
            h.next_id(&key(i), Mode::Weak).await.unwrap(),
            2,
            "{}",
            key(i)
        );
        tokio::time::advance(Duration::from_millis(5)).await;
    }
    assert_eq!(h.next_id(&key(7), Mode::Weak).await.unwrap(), 201);
}
