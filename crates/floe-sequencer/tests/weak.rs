//! The WEAK buffer on a store whose outages and latency the test controls (a fake is right
//! here: what is under test is the buffer above the store; the real outages are in
//! outage.rs).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use floe_sequencer::stores::memory::MemoryStore;
use floe_sequencer::weak::WeakKey;
use floe_sequencer::{ErrorKind, Key, SeqError, StepPolicy, Store};

#[derive(Debug, Default)]
struct Flaky {
    inner: MemoryStore,
    down: AtomicBool,
    fetches: AtomicU32,
    sizes: Mutex<Vec<u32>>,
    delay_ms: AtomicU32,
}

#[async_trait]
impl Store for Flaky {
    fn kind(&self) -> &'static str {
        "flaky"
    }

    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        let delay = self.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(u64::from(delay))).await;
        }
        self.fetches.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Err(SeqError::unavailable("flaky: connection refused"));
        }
        self.sizes.lock().unwrap().push(n);
        self.inner.reserve(key, n).await
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        self.inner.raise(key, floor).await
    }
}

fn policy(min: u32, max: u32) -> StepPolicy {
    StepPolicy {
        min,
        max,
        target: Duration::from_secs(10),
    }
}

fn weak(store: &Arc<Flaky>, min: u32, max: u32) -> Arc<WeakKey> {
    Arc::new(WeakKey::new(
        Arc::clone(store) as Arc<dyn Store>,
        Key::new("k").unwrap(),
        policy(min, max),
        Duration::from_secs(2),
    ))
}

async fn settle(w: &WeakKey) {
    for _ in 0..1000 {
        if !w.info().fetching {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the fetch never ended");
}

#[tokio::test]
async fn the_next_segment_is_fetched_once_a_tenth_is_used() {
    let store = Arc::new(Flaky::default());
    let w = weak(&store, 100, 100);
    assert_eq!(w.next().await.unwrap(), 1);
    settle(&w).await;
    assert_eq!(store.fetches.load(Ordering::SeqCst), 1);
    for id in 2..=10 {
        assert_eq!(w.next().await.unwrap(), id);
    }
    assert_eq!(w.info().next, None, "not before a tenth is used");
    assert_eq!(w.next().await.unwrap(), 11);
    settle(&w).await;
    let info = w.info();
    assert_eq!(info.left, 89);
    assert!(info.next.is_some(), "{info:?}");
    assert_eq!(store.fetches.load(Ordering::SeqCst), 2);
    // Through both segments without waiting, in order.
    for id in 12..=200 {
        assert_eq!(w.next().await.unwrap(), id);
    }
}

#[tokio::test]
async fn an_outage_is_served_from_the_buffer_then_reported_then_recovered() {
    let store = Arc::new(Flaky::default());
    let w = weak(&store, 100, 100);
    for id in 1..=11 {
        assert_eq!(w.next().await.unwrap(), id);
    }
    settle(&w).await;
    store.down.store(true, Ordering::SeqCst);
    // Everything buffered (the rest of this segment and the next one) is still served.
    for id in 12..=200 {
        assert_eq!(w.next().await.unwrap(), id);
    }
    let err = w.next().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unavailable);
    assert!(err.message.contains("connection refused"), "{err}");
    assert!(err.is_temporary());
    let err = w.next().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unavailable);
    store.down.store(false, Ordering::SeqCst);
    assert_eq!(w.next().await.unwrap(), 201, "recovers with no restart");
}

#[tokio::test]
async fn callers_waiting_for_one_fetch_share_it() {
    let store = Arc::new(Flaky::default());
    store.delay_ms.store(50, Ordering::SeqCst);
    let w = weak(&store, 1000, 1000);
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let w = Arc::clone(&w);
            tokio::spawn(async move { w.next().await.unwrap() })
        })
        .collect();
    let mut ids = HashSet::new();
    for t in tasks {
        assert!(ids.insert(t.await.unwrap()));
    }
    assert_eq!(ids, (1..=50).collect());
    assert_eq!(
        store.fetches.load(Ordering::SeqCst),
        1,
        "one fetch for all waiters"
    );
}

#[tokio::test]
async fn a_cancelled_caller_does_not_wedge_the_key() {
    let store = Arc::new(Flaky::default());
    store.delay_ms.store(100, Ordering::SeqCst);
    let w = weak(&store, 10, 10);
    let gave_up = tokio::time::timeout(Duration::from_millis(10), w.next()).await;
    assert!(
        gave_up.is_err(),
        "the first call gave up before the fetch ended"
    );
    assert_eq!(w.next().await.unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_step_follows_the_rate() {
    let store = Arc::new(Flaky::default());
    let w = weak(&store, 100, 800);
    let take = |n: usize| {
        let w = Arc::clone(&w);
        async move {
            for _ in 0..n {
                w.next().await.unwrap();
            }
        }
    };
    // Segments used up in no time: the step doubles up to its bound.
    take(3000).await;
    settle(&w).await;
    let sizes = store.sizes.lock().unwrap().clone();
    assert_eq!(&sizes[..5], &[100, 200, 400, 800, 800], "{sizes:?}");
    // Segments that last far longer than the target: the step halves down to its bound.
    for _ in 0..6 {
        tokio::time::advance(Duration::from_secs(60)).await;
        let left = w.info().left as usize;
        take(left + 1).await;
        settle(&w).await;
    }
    let sizes = store.sizes.lock().unwrap().clone();
    assert!(
        sizes.windows(4).any(|w| w == [800, 400, 200, 100]),
        "{sizes:?}"
    );
    assert_eq!(sizes.last(), Some(&100), "{sizes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thread_blocks_are_unique_across_threads() {
    let store = Arc::new(Flaky::default());
    let w = weak(&store, 64, 4096);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let w = Arc::clone(&w);
            tokio::spawn(async move {
                let mut ids = Vec::with_capacity(20_000);
                for i in 0..20_000 {
                    ids.push(w.next_local().await.unwrap());
                    if i % 1000 == 0 {
                        tokio::task::yield_now().await; // move between threads
                    }
                }
                ids
            })
        })
        .collect();
    let mut seen = HashSet::new();
    for t in tasks {
        for id in t.await.unwrap() {
            assert!(seen.insert(id), "{id} twice");
        }
    }
    assert_eq!(seen.len(), 160_000);
    // The shared path and the thread blocks draw from the same segments.
    let id = w.next().await.unwrap();
    assert!(!seen.contains(&id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strong_requests_waiting_together_share_one_increment() {
    use floe_sequencer::strong::StrongKey;
    let store = Arc::new(Flaky::default());
    store.delay_ms.store(20, Ordering::SeqCst);
    let s = Arc::new(StrongKey::new(
        Arc::clone(&store) as Arc<dyn Store>,
        Key::new("k").unwrap(),
        Duration::from_secs(2),
    ));
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let s = Arc::clone(&s);
            tokio::spawn(async move { s.next().await.unwrap() })
        })
        .collect();
    let mut ids = HashSet::new();
    for t in tasks {
        assert!(ids.insert(t.await.unwrap()));
    }
    assert_eq!(ids, (1..=200).collect());
    let increments = store.fetches.load(Ordering::SeqCst);
    assert!(
        increments < 20,
        "{increments} increments for 200 waiting requests"
    );
    // One caller alone still counts up by one, and an outage is reported to every waiter.
    assert_eq!(s.next().await.unwrap(), 201);
    store.down.store(true, Ordering::SeqCst);
    let err = s.next().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unavailable);
    store.down.store(false, Ordering::SeqCst);
    assert_eq!(s.next().await.unwrap(), 202);
}

#[tokio::test]
async fn a_strong_batch_near_the_end_still_issues_what_fits() {
    use floe_sequencer::strong::StrongKey;
    let store = Arc::new(Flaky::default());
    let k = Key::new("k").unwrap();
    store.raise(&k, i64::MAX - 2).await.unwrap();
    store.delay_ms.store(20, Ordering::SeqCst);
    let s = Arc::new(StrongKey::new(
        Arc::clone(&store) as Arc<dyn Store>,
        k,
        Duration::from_secs(2),
    ));
    let tasks: Vec<_> = (0..5)
        .map(|_| {
            let s = Arc::clone(&s);
            tokio::spawn(async move { s.next().await })
        })
        .collect();
    let mut ok = Vec::new();
    let mut exhausted = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(id) => ok.push(id),
            Err(e) => {
                assert_eq!(e.kind, ErrorKind::Exhausted);
                exhausted += 1;
            }
        }
    }
    ok.sort();
    assert_eq!(ok, vec![i64::MAX - 1, i64::MAX]);
    assert_eq!(exhausted, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strong_leader_that_gives_up_leaves_no_one_stranded() {
    use floe_sequencer::strong::StrongKey;
    let store = Arc::new(Flaky::default());
    store.delay_ms.store(50, Ordering::SeqCst);
    let s = Arc::new(StrongKey::new(
        Arc::clone(&store) as Arc<dyn Store>,
        Key::new("k").unwrap(),
        Duration::from_secs(2),
    ));
    // The leader gives up mid-increment while others wait behind it.
    let leader = {
        let s = Arc::clone(&s);
        tokio::spawn(async move { tokio::time::timeout(Duration::from_millis(10), s.next()).await })
    };
    tokio::time::sleep(Duration::from_millis(2)).await;
    let others: Vec<_> = (0..5)
        .map(|_| {
            let s = Arc::clone(&s);
            tokio::spawn(async move { s.next().await.unwrap() })
        })
        .collect();
    assert!(leader.await.unwrap().is_err(), "the leader timed out");
    let mut ids = HashSet::new();
    for t in others {
        assert!(ids.insert(t.await.unwrap()));
    }
    assert_eq!(ids.len(), 5);
    let next = s.next().await.unwrap();
    assert!(ids.iter().all(|id| *id < next));
}

#[tokio::test]
async fn weak_issues_every_id_up_to_the_end_of_the_sequence() {
    let store = Arc::new(Flaky::default());
    store
        .raise(&Key::new("k").unwrap(), i64::MAX - 250)
        .await
        .unwrap();
    let w = weak(&store, 100, 100);
    for want in (i64::MAX - 249)..=i64::MAX {
        assert_eq!(w.next().await.unwrap(), want);
    }
    let err = w.next().await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Exhausted, "{err}");

    // The same through a thread's blocks (a block that ends at i64::MAX).
    let k = Key::new("local").unwrap();
    store.raise(&k, i64::MAX - 250).await.unwrap();
    let w = Arc::new(WeakKey::new(
        Arc::clone(&store) as Arc<dyn Store>,
        k,
        policy(100, 100),
        Duration::from_secs(2),
    ));
    let mut ids = Vec::new();
    loop {
        match w.next_local().await {
            Ok(id) => ids.push(id),
            Err(e) => {
                assert_eq!(e.kind, ErrorKind::Exhausted, "{e}");
                break;
            }
        }
    }
    assert_eq!(ids.last(), Some(&i64::MAX));
    assert!(
        ids.windows(2).all(|p| p[0] < p[1]),
        "increasing on one thread"
    );
    assert!(ids.len() >= 240, "only {} of the last 250 IDs", ids.len());
}

/// The admin API above the store (`floe_sequencer::admin`), on the memory store: a key's state
/// without taking an ID, a floor raised at run time that the buffer, the parked tail and every
/// new segment honour, and registered-keys mode.
mod admin {
    use super::*;
    use floe_sequencer::{KeyLimits, Mode, ServeOptions, StoreHandle};

    fn handle(store: Arc<dyn Store>, limits: KeyLimits) -> StoreHandle {
        StoreHandle::new(
            "s",
            store,
            ServeOptions {
                step: policy(100, 100),
                ..ServeOptions::default()
            },
        )
        .key_limits(limits)
        .unwrap()
    }

    fn key(k: &str) -> Key {
        Key::new(k).unwrap()
    }

    #[tokio::test]
    async fn a_keys_state_is_read_without_taking_an_id() {
        let h = handle(Arc::new(MemoryStore::new()), KeyLimits::default());
        let fresh = h.key_state(&key("k")).await.unwrap();
        assert_eq!(
            (fresh.value, fresh.next_strong, fresh.next_weak),
            (None, Some(1), Some(1))
        );
        assert_eq!(fresh.registered, Some(false));
        for want in 1..=3 {
            assert_eq!(h.next_id("k", Mode::Weak).await.unwrap(), want);
        }
        let s = h.key_state(&key("k")).await.unwrap();
        // The segment 1..=100 is reserved; this process's next WEAK ID is 4, STRONG's 101 or
        // above (a prefetch may have reserved the next segment).
        assert_eq!(s.next_weak, Some(4));
        assert!(s.value.unwrap() >= 100 && s.next_strong == Some(s.value.unwrap() + 1));
        assert_eq!(
            h.next_id("k", Mode::Weak).await.unwrap(),
            4,
            "nothing was taken"
        );
        let page = h.key_states(None, 10).await.unwrap();
        assert_eq!(page.len(), 1);
        assert_eq!(page[0].key, key("k"));
        assert!(h.key_states(None, 0).await.is_err());
        // A page's registrations, read in pages of their own: 1,200 registered keys without a
        // value lie between "k" and "z".
        h.next_id("z", Mode::Strong).await.unwrap();
        for i in 0..1200 {
            h.register(&key(&format!("m{i:04}"))).await.unwrap();
        }
        h.register(&key("z")).await.unwrap();
        let page = h.key_states(None, 10).await.unwrap();
        let seen: Vec<_> = page
            .iter()
            .map(|s| (s.key.as_str(), s.registered))
            .collect();
        assert_eq!(seen, vec![("k", Some(false)), ("z", Some(true))]);
    }

    #[tokio::test]
    async fn a_floor_raised_at_run_time_holds_for_buffer_parked_tail_and_new_segments() {
        let h = handle(Arc::new(MemoryStore::new()), KeyLimits::default());
        for _ in 0..5 {
            h.next_id("k", Mode::Weak).await.unwrap();
        }
        let value = h.raise_floor(&key("k"), 50).await.unwrap();
        assert!(value > 50, "{value}");
        // The buffer held 6..=100: it goes on at 51.
        assert_eq!(h.next_id("k", Mode::Weak).await.unwrap(), 51);
        assert!(h.next_id("k", Mode::Strong).await.unwrap() > 51);
        // Above everything buffered: the buffer is emptied and the next segment is above.
        h.raise_floor(&key("k"), 1_000).await.unwrap();
        let next = h.next_id("k", Mode::Weak).await.unwrap();
        assert!(next > 1_000, "{next}");
        // A parked tail is cut too: "p" is dropped for "q" (room for one key).
        let h = handle(
            Arc::new(MemoryStore::new()),
            KeyLimits {
                max_keys: 1,
                ..KeyLimits::default()
            },
        );
        assert_eq!(h.next_id("p", Mode::Weak).await.unwrap(), 1);
        assert_eq!(h.next_id("q", Mode::Weak).await.unwrap(), 1);
        assert_eq!(
            h.key_state(&key("p")).await.unwrap().next_weak,
            Some(2),
            "parked"
        );
        h.raise_floor(&key("p"), 30).await.unwrap();
        assert_eq!(h.key_state(&key("p")).await.unwrap().next_weak, Some(31));
        assert_eq!(h.next_id("p", Mode::Weak).await.unwrap(), 31);
        // A floor at i64::MAX would leave nothing to issue: refused, nothing changed.
        let e = h.raise_floor(&key("p"), i64::MAX).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
        assert_eq!(h.next_id("p", Mode::Weak).await.unwrap(), 32);
    }

    #[tokio::test]
    async fn registered_keys_mode_refuses_the_others_and_keeps_values_across_registrations() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let h = handle(Arc::clone(&store), KeyLimits::default()).registered_only(true);
        let e = h.next_id("orders", Mode::Weak).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownKey, "{e}");
        assert!(e.message.contains("orders"), "{e}");
        let e = h.next_ids("orders", Mode::Strong, 3).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownKey, "{e}");
        assert!(h.register(&key("orders")).await.unwrap());
        assert!(!h.register(&key("orders")).await.unwrap(), "already");
        assert_eq!(h.next_id("orders", Mode::Weak).await.unwrap(), 1);
        assert_eq!(h.next_id("orders", Mode::Weak).await.unwrap(), 2);
        assert_eq!(
            h.registered_keys(None, 10).await.unwrap(),
            vec![key("orders")]
        );
        assert!(h.unregister(&key("orders")).await.unwrap());
        let e = h.next_id("orders", Mode::Weak).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownKey, "refused at once here: {e}");
        // Registered again: it goes on above every ID it issued (its tail was parked).
        assert!(h.register(&key("orders")).await.unwrap());
        assert_eq!(h.next_id("orders", Mode::Weak).await.unwrap(), 3);
        // Without the mode, any key is served.
        let open = handle(store, KeyLimits::default());
        assert_eq!(open.next_id("anything", Mode::Weak).await.unwrap(), 1);
    }
}
