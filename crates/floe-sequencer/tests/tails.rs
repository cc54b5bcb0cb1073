//! Restart without waste (`floe_sequencer::tails`): a graceful stop keeps the unused tails of
//! WEAK segments and the next start serves them first; a crash, a lock held elsewhere, another
//! store identity or a `bigger_than` above them never reuse them. On the embedded store and on
//! the real PostgreSQL server scripts/test.sh starts.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::Arc;

use common::key;
use floe_sequencer::{
    Key, Mode, SavedTails, Sequencer, ServeOptions, StepPolicy, StoreHandle, TailDir,
};

/// Segments of 100 IDs: a key that served 30 holds 70 of its first segment and, once a tenth
/// was used, a fetched second one.
fn options() -> ServeOptions {
    ServeOptions {
        step: StepPolicy {
            min: 100,
            max: 100,
            ..StepPolicy::default()
        },
        ..ServeOptions::default()
    }
}

/// One "process": the state directory's tail lock (when it gets it), the tails it read, and
/// its sequencer of one store `main`.
struct Process {
    tails: Option<TailDir>,
    sequencer: Sequencer,
}

async fn start(url: &str, state: &Path) -> Process {
    start_holding(url, state, floe_sequencer::KeyLimits::default()).await
}

/// [`start`], its store holding keys within `limits`.
async fn start_holding(url: &str, state: &Path, limits: floe_sequencer::KeyLimits) -> Process {
    let tails = TailDir::lock(state).unwrap();
    let mut saved = match &tails {
        Some(dir) => dir.take().unwrap(),
        None => SavedTails::new(),
    };
    // A crashed "process" of this test may still hold the embedded file for a moment (a
    // segment fetch under way when it was dropped): a real kill -9 frees it at once.
    let mut tries = 0;
    let store = loop {
        match floe_sequencer::open(url, state).await {
            Ok(store) => break store,
            Err(e)
                if (e.message.contains("is held") || e.message.contains("already open"))
                    && tries < 200 =>
            {
                tries += 1
            }
            Err(e) => panic!("open {url}: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    let mut handle = StoreHandle::new("main", store, options())
        .key_limits(limits)
        .unwrap();
    if tails.is_some() {
        handle = handle.with_tails(url, state, &mut saved);
    }
    let mut sequencer = Sequencer::new();
    sequencer.add(handle);
    Process { tails, sequencer }
}

impl Process {
    async fn weak(&self, key: &Key, n: usize) -> Vec<i64> {
        let mut ids = Vec::new();
        for _ in 0..n {
            ids.push(
                self.sequencer
                    .next_id("main", key.as_str(), Mode::Weak)
                    .await
                    .unwrap(),
            );
        }
        ids
    }

    /// Lets the prefetch of each key's next segment land, so the tail holds two segments.
    async fn settle(&self, keys: &[&Key]) {
        let handle = self.sequencer.store("main").unwrap();
        for k in keys {
            let weak = handle.weak_key(k);
            for _ in 0..200 {
                let info = weak.info();
                if info.next.is_some() && !info.fetching {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            assert!(weak.info().next.is_some(), "the next segment was fetched");
        }
    }

    /// Waits until no key's fetch is under way, and its task has ended.
    async fn fetches_done(&self) {
        let handle = self.sequencer.store("main").unwrap();
        for _ in 0..400 {
            if handle.weak_buffers().iter().all(|(_, info)| !info.fetching) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        // The task lets go of the buffer just after it marks the fetch done.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    async fn stop(self) -> u64 {
        let dir = self.tails.as_ref().expect("the tail lock");
        self.sequencer.close_keeping(dir).await.unwrap()
    }

    /// kill -9: nothing is written, the lock goes with the process.
    fn crash(self) {
        drop(self);
    }
}

fn no_repeats(all: &[i64]) {
    let mut seen = HashSet::new();
    for id in all {
        assert!(seen.insert(*id), "{id} issued twice");
    }
}

/// Served 30 of 100 + a fetched 100, stopped gracefully: 170 IDs kept; the restart continues
/// at 31 (no skip) through both segments and on into fresh ones; the tails are served once.
async fn graceful_restart_continues(url: &str) {
    let state = tempfile::tempdir().unwrap();
    let (a, b) = (key("tail-a"), key("tail-b"));
    let p = start(url, state.path()).await;
    let mut all_a = p.weak(&a, 30).await;
    let mut all_b = p.weak(&b, 15).await;
    p.settle(&[&a, &b]).await;
    assert_eq!(p.stop().await, 70 + 100 + 85 + 100);

    let p = start(url, state.path()).await;
    let after = p.weak(&a, 200).await;
    assert_eq!(
        after[0],
        all_a[29] + 1,
        "continues the old segment, no skip"
    );
    let first_b = p.weak(&b, 1).await[0];
    assert_eq!(first_b, all_b[14] + 1);
    all_a.extend(after);
    all_b.push(first_b);
    // A crash now: the tails were read and removed at start, so they are never served again.
    p.crash();
    let p = start(url, state.path()).await;
    let again = p.weak(&a, 10).await;
    assert!(
        again[0] > *all_a.iter().max().unwrap(),
        "skips after a crash"
    );
    all_a.extend(again);
    let again = p.weak(&b, 10).await;
    assert!(again[0] > all_b[14] + 185, "skips after a crash");
    all_b.extend(again);
    no_repeats(&all_a);
    no_repeats(&all_b);
}

/// kill -9 (no close): the restart finds nothing and skips past everything reserved.
async fn crash_skips(url: &str) {
    let state = tempfile::tempdir().unwrap();
    let a = key("crash");
    let p = start(url, state.path()).await;
    let mut all = p.weak(&a, 30).await;
    p.settle(&[&a]).await;
    p.crash();
    let p = start(url, state.path()).await;
    let first = p.weak(&a, 1).await[0];
    assert!(first > all[29] + 170, "skipped both segments: {first}");
    all.push(first);
    no_repeats(&all);
}

/// A key dropped from memory before the stop (room for one key) parked its tail: it goes on
/// where it stopped before the stop, and after the restart, as the key that stayed does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_dropped_before_a_graceful_stop_goes_on_after_it() {
    let state = tempfile::tempdir().unwrap();
    let (a, b) = (key("parked-a"), key("parked-b"));
    let one = floe_sequencer::KeyLimits {
        max_keys: 1,
        ..floe_sequencer::KeyLimits::default()
    };
    let p = start_holding("embedded", state.path(), one).await;
    assert_eq!(p.weak(&a, 5).await, vec![1, 2, 3, 4, 5]);
    // a's first fetch has let go of its buffer (a key with a fetch under way is never
    // dropped: b would be held beside it, over the limit).
    p.fetches_done().await;
    assert_eq!(p.weak(&b, 3).await, vec![1, 2, 3]);
    let handle = p.sequencer.store("main").unwrap();
    assert_eq!(handle.keys_in_memory(), 1, "a was dropped for b");
    assert!(handle.tails_pending() >= 95, "a's tail parked");
    p.stop().await;
    let p = start_holding("embedded", state.path(), one).await;
    assert_eq!(p.weak(&a, 2).await, vec![6, 7]);
    assert_eq!(p.weak(&b, 2).await, vec![4, 5]);
    assert_eq!(p.weak(&a, 1).await, vec![8]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_graceful_restart_continues() {
    graceful_restart_continues("embedded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_crash_skips() {
    crash_skips("embedded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_graceful_restart_continues() {
    graceful_restart_continues(&floe_testkit::env("FLOE_TEST_POSTGRES")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_crash_skips() {
    crash_skips(&floe_testkit::env("FLOE_TEST_POSTGRES")).await;
}

fn hold_lock(state: &Path) -> File {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(state.join("sequencer-tails.lock"))
        .unwrap();
    f.try_lock().unwrap();
    f
}

/// Tails whose lock another process holds are neither read nor removed: that process serves
/// fresh segments (a skip), and the tails wait for the one that gets the lock. The union never
/// repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tails_under_a_lock_held_elsewhere_are_not_used() {
    let url = floe_testkit::env("FLOE_TEST_POSTGRES");
    let state = tempfile::tempdir().unwrap();
    let a = key("locked");
    let p = start(&url, state.path()).await;
    let mut all = p.weak(&a, 30).await;
    p.settle(&[&a]).await;
    assert_eq!(p.stop().await, 170);

    let other = hold_lock(state.path()); // another process holds the state directory
    let p = start(&url, state.path()).await;
    assert!(p.tails.is_none(), "no lock, no tails");
    let fresh = p.weak(&a, 5).await;
    assert!(fresh[0] > all[29] + 170, "fresh segment: {}", fresh[0]);
    all.extend(fresh);
    assert!(state.path().join("sequencer-tails").exists(), "left alone");
    p.crash();
    drop(other);

    let p = start(&url, state.path()).await;
    let tail = p.weak(&a, 170).await;
    assert_eq!(tail[0], all[29] + 1, "the lock holder gets them");
    all.extend(tail);
    all.extend(p.weak(&a, 5).await);
    no_repeats(&all);
}

/// Tails saved for a store are served only to the store of the same name and identity (its URL
/// without a password); a password alone does not change it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tails_follow_the_store_identity() {
    let url = floe_testkit::env("FLOE_TEST_POSTGRES");
    let state = tempfile::tempdir().unwrap();
    let a = key("ident");
    let p = start(&url, state.path()).await;
    let last = *p.weak(&a, 30).await.last().unwrap();
    p.settle(&[&a]).await;
    p.stop().await;

    let dir = TailDir::lock(state.path()).unwrap().unwrap();
    let mut saved = dir.take().unwrap();
    let store = floe_sequencer::open(&url, state.path()).await.unwrap();
    let elsewhere = format!("{url}_elsewhere");
    let h = StoreHandle::new("main", Arc::clone(&store), options()).with_tails(
        &elsewhere,
        state.path(),
        &mut saved,
    );
    assert_eq!(h.tails_pending(), 0, "another identity");
    let h = StoreHandle::new("other", Arc::clone(&store), options()).with_tails(
        &url,
        state.path(),
        &mut saved,
    );
    assert_eq!(h.tails_pending(), 0, "another name");
    let with_password = url.replacen("postgres@", "postgres:secret@", 1);
    assert_ne!(with_password, url);
    let h = StoreHandle::new("main", store, options()).with_tails(
        &with_password,
        state.path(),
        &mut saved,
    );
    assert_eq!(h.tails_pending(), 170);
    assert_eq!(h.next_id(a.as_str(), Mode::Weak).await.unwrap(), last + 1);
    assert_eq!(saved.ids(), 0, "taken out");
}

/// A `bigger_than` given at restart cuts the tails above it, before or after with_tails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bigger_than_cuts_tails() {
    let state = tempfile::tempdir().unwrap();
    let (a, b) = (key("floor-a"), key("floor-b"));
    let p = start("embedded", state.path()).await;
    let last_a = *p.weak(&a, 30).await.last().unwrap();
    let last_b = *p.weak(&b, 30).await.last().unwrap();
    p.settle(&[&a, &b]).await;
    p.stop().await;

    let dir = TailDir::lock(state.path()).unwrap().unwrap();
    let mut saved = dir.take().unwrap();
    let store = floe_sequencer::open("embedded", state.path())
        .await
        .unwrap();
    let before = StoreHandle::new("main", Arc::clone(&store), options());
    // Floor on a: inside its first tail segment, applied before the tails are loaded.
    before
        .init(&BTreeMap::from([(a.clone(), last_a + 50)]))
        .await
        .unwrap();
    let h = before.with_tails("embedded", state.path(), &mut saved);
    // Floor on b: past both its tail segments, applied after.
    h.init(&BTreeMap::from([(b.clone(), last_b + 1000)]))
        .await
        .unwrap();
    assert_eq!(
        h.next_id(a.as_str(), Mode::Weak).await.unwrap(),
        last_a + 51
    );
    assert!(h.next_id(b.as_str(), Mode::Weak).await.unwrap() > last_b + 1000);
}

/// A store that is not durable keeps nothing: its counters start again after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_keeps_nothing() {
    let state = tempfile::tempdir().unwrap();
    let a = key("mem");
    let p = start("memory", state.path()).await;
    p.weak(&a, 30).await;
    assert_eq!(p.stop().await, 0);
}

/// close_keeping while 8 tasks still ask for 3 keys (a stop racing requests): whatever the
/// race, the IDs served before, during and after the stop, and after the restart (through the
/// kept tails and on), never repeat; and the restart continues every key with no skip past
/// its tail when the load had stopped first (the other tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_racing_requests_never_repeats() {
    let state = tempfile::tempdir().unwrap();
    let keys: Vec<Key> = (0..3).map(|i| key(&format!("race{i}"))).collect();
    let p = Arc::new(start("embedded", state.path()).await);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (p, keys, stop) = (Arc::clone(&p), keys.clone(), Arc::clone(&stop));
        tasks.push(tokio::spawn(async move {
            let mut ids = vec![Vec::new(); 3];
            let mut i = t;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || i < t + 300 {
                let k = i % 3;
                if let Ok(id) = p
                    .sequencer
                    .next_id("main", keys[k].as_str(), Mode::Weak)
                    .await
                {
                    ids[k].push(id);
                }
                i += 1;
                if i % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            ids
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let kept = {
        let dir = p.tails.as_ref().unwrap();
        p.sequencer.close_keeping(dir).await.unwrap()
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut all = vec![Vec::new(); 3];
    for t in tasks {
        for (k, ids) in t.await.unwrap().into_iter().enumerate() {
            all[k].extend(ids);
        }
    }
    let p = Arc::into_inner(p).expect("tasks ended");
    p.crash(); // the tails are on disk already
    let p = start("embedded", state.path()).await;
    let pending = p.sequencer.store("main").unwrap().tails_pending();
    assert_eq!(pending, kept, "what was kept is offered once");
    for (k, key) in keys.iter().enumerate() {
        all[k].extend(p.weak(key, 400).await);
        no_repeats(&all[k]);
    }
}
