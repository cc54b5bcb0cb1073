//! One behaviour suite, run against every store: each on the real server scripts/test.sh
//! starts (redis-server, postgresql, mariadb-server, etcd-server, zookeeper), `embedded` on a
//! temporary directory, and `memory`; Leaf's `leaf_alloc` table on mariadb-server too (its
//! keys registered first). And floe on Leaf's and Layotto's data, as they leave it
//! ([`migrate`]).

mod common;
mod migrate;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use common::{fixture, Fixture};
use floe_sequencer::{
    ErrorKind, KeyLimits, Mode, Segment, ServeOptions, StepPolicy, StoreHandle, MAX_BATCH,
};

/// Unknown keys start at 1; STRONG counts up by one; a segment follows on.
async fn first_ids_start_at_one(f: Fixture) {
    let k = f.key("first").await;
    assert_eq!(f.store.next_id(&k).await.unwrap(), 1);
    assert_eq!(f.store.next_id(&k).await.unwrap(), 2);
    assert_eq!(
        f.store.segment(&k, 10).await.unwrap(),
        Some(Segment { start: 3, end: 12 })
    );
    assert_eq!(f.second.next_id(&k).await.unwrap(), 13);
    assert_eq!(f.store.next_id(&k).await.unwrap(), 14);
}

/// Many concurrent callers, on two clients ("processes"), STRONG and WEAK: no duplicate.
async fn no_duplicates_under_concurrency(f: Fixture, strong_per_task: usize) {
    let k = f.key("dups").await;
    let small = ServeOptions {
        step: StepPolicy {
            min: 50,
            max: 400,
            ..StepPolicy::default()
        },
        ..ServeOptions::default()
    };
    let handles = [
        Arc::new(StoreHandle::new("a", Arc::clone(&f.store), small)),
        Arc::new(StoreHandle::new("b", Arc::clone(&f.second), small)),
    ];
    let mut tasks = Vec::new();
    for t in 0..8 {
        let h = Arc::clone(&handles[t % 2]);
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..(strong_per_task + 500) {
                let mode = if i % 4 == 0 && ids.len() < strong_per_task * 4 {
                    Mode::Strong
                } else {
                    Mode::Weak
                };
                ids.push(h.next_id(k.as_str(), mode).await.unwrap());
            }
            ids
        }));
    }
    let mut seen = HashSet::new();
    let mut total = 0;
    for t in tasks {
        for id in t.await.unwrap() {
            assert!(id >= 1);
            assert!(seen.insert(id), "{id} issued twice");
            total += 1;
        }
    }
    assert_eq!(seen.len(), total);
}

/// STRONG in real time: when one call returns before another starts, its ID is smaller; also
/// across the two clients.
async fn strong_follows_real_time(f: Fixture, per_task: usize) {
    let k = f.key("order").await;
    // Through the STRONG queues of two handles (group commit), and the store's own next_id.
    let handles = [
        Arc::new(StoreHandle::new(
            "a",
            Arc::clone(&f.store),
            ServeOptions::default(),
        )),
        Arc::new(StoreHandle::new(
            "b",
            Arc::clone(&f.second),
            ServeOptions::default(),
        )),
    ];
    let epoch = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..6 {
        let h = Arc::clone(&handles[t % 2]);
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            let mut calls = Vec::new();
            let mut last = 0;
            for _ in 0..per_task {
                let start = epoch.elapsed();
                let id = if t >= 4 {
                    h.store().next_id(&k).await.unwrap()
                } else {
                    h.next_id(k.as_str(), Mode::Strong).await.unwrap()
                };
                let end = epoch.elapsed();
                assert!(id > last, "one caller's STRONG IDs must increase");
                last = id;
                calls.push((start, end, id));
            }
            calls
        }));
    }
    let mut calls = Vec::new();
    for t in tasks {
        calls.extend(t.await.unwrap());
    }
    // For each call, every call that ended before it started has a smaller ID.
    let mut by_end = calls.clone();
    by_end.sort_by_key(|c| c.1);
    calls.sort_by_key(|c| c.0);
    let (mut i, mut max_before) = (0, 0);
    for (start, _, id) in &calls {
        while i < by_end.len() && by_end[i].1 < *start {
            max_before = max_before.max(by_end[i].2);
            i += 1;
        }
        assert!(
            max_before < *id,
            "ID {id} started after a call returned {max_before}"
        );
    }
}

/// Segments reserved concurrently by both clients, with single IDs between them, never overlap.
async fn segments_never_overlap(f: Fixture) {
    let k = f.key("segments").await;
    let stores = [Arc::clone(&f.store), Arc::clone(&f.second)];
    let mut tasks = Vec::new();
    for t in 0..6 {
        let s = Arc::clone(&stores[t % 2]);
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for i in 0..15u32 {
                let size = 1 + (i * 7 + t as u32) % 50;
                let seg = s.segment(&k, size).await.unwrap().expect("segments");
                assert_eq!(seg.len(), u64::from(size));
                got.push(seg);
                let id = s.next_id(&k).await.unwrap();
                got.push(Segment { start: id, end: id });
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_by_key(|s| s.start);
    assert_eq!(all[0].start, 1);
    for w in all.windows(2) {
        assert!(w[0].end < w[1].start, "{:?} overlaps {:?}", w[0], w[1]);
    }
}

/// `bigger_than` applies to the keys as named, never lowers a key, and holds for WEAK too.
async fn bigger_than_is_honoured(f: Fixture) {
    let (a, b, c) = (
        f.key("bt-a").await,
        f.key("bt-b").await,
        f.key("bt-c").await,
    );
    for _ in 0..10 {
        f.store.next_id(&c).await.unwrap();
    }
    let floors = BTreeMap::from([(a.clone(), 1000), (b.clone(), 5), (c.clone(), 3)]);
    f.store.init(&floors).await.unwrap();
    assert_eq!(f.store.next_id(&a).await.unwrap(), 1001);
    assert_eq!(
        f.second.next_id(&c).await.unwrap(),
        11,
        "a floor never lowers a key"
    );
    let handle = StoreHandle::new("s", Arc::clone(&f.second), ServeOptions::default());
    assert_eq!(handle.next_id(b.as_str(), Mode::Weak).await.unwrap(), 6);
    // A floor past values already issued lifts the key.
    f.store
        .init(&BTreeMap::from([(a.clone(), 5_000_000_000)]))
        .await
        .unwrap();
    assert_eq!(f.second.next_id(&a).await.unwrap(), 5_000_000_001);
}

/// A sequence that would pass its last ID (`i64::MAX`; one less on Leaf's table) fails with
/// Exhausted and changes nothing.
async fn exhaustion_is_reported(f: Fixture) {
    let k = f.key("max").await;
    let last = f.last;
    f.store
        .init(&BTreeMap::from([(k.clone(), last - 12)]))
        .await
        .unwrap();
    let err = f.store.segment(&k, 20).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Exhausted, "{err}");
    assert!(err.message.contains(k.as_str()), "{err}");
    assert_eq!(
        f.store.segment(&k, 10).await.unwrap(),
        Some(Segment {
            start: last - 11,
            end: last - 2
        })
    );
    assert_eq!(f.second.next_id(&k).await.unwrap(), last - 1);
    assert_eq!(f.store.next_id(&k).await.unwrap(), last);
    for _ in 0..2 {
        let err = f.store.next_id(&k).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Exhausted, "{err}");
    }
    let handle = StoreHandle::new("s", Arc::clone(&f.store), ServeOptions::default());
    let err = handle.next_id(k.as_str(), Mode::Weak).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Exhausted, "{err}");
}

/// Keys are compared byte for byte, whatever characters they hold, up to 255 bytes.
async fn keys_are_exact(f: Fixture) {
    let base = common::key("Keys");
    let names = [
        format!("{base}"),
        format!("{base}").to_lowercase(),
        format!("{base}/../x"),
        format!("{base}.."),
        format!("{base} ключ ✓ %2F"),
        format!("{base}{}", "z".repeat(255 - base.as_str().len())),
    ];
    for (i, name) in names.iter().enumerate() {
        let k = floe_sequencer::Key::new(name.as_str()).unwrap();
        f.register(&k).await;
        f.store.segment(&k, i as u32 + 1).await.unwrap();
    }
    for (i, name) in names.iter().enumerate() {
        let k = floe_sequencer::Key::new(name.as_str()).unwrap();
        assert_eq!(
            f.second.next_id(&k).await.unwrap(),
            i as i64 + 2,
            "{name:?}"
        );
    }
}

/// A store takes back only the end of the last reservation of a key: the next reservation,
/// by any client, then starts at the first ID given back; anything reserved since, a range that
/// does not end at the key's value, or a key never used, and nothing changes. A store that
/// cannot (`takes = false`) always says no: the IDs are a gap.
async fn give_back_takes_only_the_last_reservation(f: Fixture, takes: bool) {
    let k = f.key("giveback").await;
    assert_eq!(f.store.reserve(&k, 10).await.unwrap(), 10);
    assert_eq!(f.store.give_back(&k, 6, 10).await.unwrap(), takes);
    let next = f.second.next_id(&k).await.unwrap();
    assert_eq!(next, if takes { 6 } else { 11 });
    // Reserved since (the value is `next`, not 10).
    assert!(!f.store.give_back(&k, next + 1, 10).await.unwrap());
    // Not the end of the last reservation; an empty range.
    assert!(!f.store.give_back(&k, next, next + 5).await.unwrap());
    assert!(!f.store.give_back(&k, next + 1, next).await.unwrap());
    assert_eq!(f.store.next_id(&k).await.unwrap(), next + 1);
    // A key never used.
    let none = f.key("giveback-none").await;
    assert!(!f.store.give_back(&none, 1, 5).await.unwrap());
    // At the top of the range: nothing wraps.
    let top = f.key("giveback-top").await;
    f.store.raise(&top, f.last - 3).await.unwrap();
    assert_eq!(f.store.reserve(&top, 3).await.unwrap(), f.last);
    assert_eq!(
        f.store.give_back(&top, f.last - 2, f.last).await.unwrap(),
        takes
    );
    if takes {
        assert_eq!(f.second.next_id(&top).await.unwrap(), f.last - 2);
    }
}

/// Keys dropped from memory all the time (room for 2 of 6 keys, 1 ms idle) while tasks ask
/// for them, WEAK and STRONG, on both clients: no ID twice, and each task sees each key's IDs
/// of each mode increase (a dropped key's buffer is parked, served again by the key's next
/// buffer on the same client, or given back to the store when more than 2 are parked and
/// nothing was reserved after it).
async fn dropped_keys_never_reissue(f: Fixture, per_task: usize) {
    let mut keys = Vec::new();
    for i in 0..6 {
        keys.push(f.key(&format!("evicted{i}")).await);
    }
    let small = ServeOptions {
        step: StepPolicy {
            min: 20,
            max: 20,
            ..StepPolicy::default()
        },
        ..ServeOptions::default()
    };
    let limits = KeyLimits {
        idle: std::time::Duration::from_millis(1),
        max_keys: 2,
    };
    let handles = [
        Arc::new(
            StoreHandle::new("a", Arc::clone(&f.store), small)
                .key_limits(limits)
                .unwrap(),
        ),
        Arc::new(
            StoreHandle::new("b", Arc::clone(&f.second), small)
                .key_limits(limits)
                .unwrap(),
        ),
    ];
    let mut tasks = Vec::new();
    for t in 0..6 {
        let h = Arc::clone(&handles[t % 2]);
        let keys = keys.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..per_task {
                let k = (i * 7 + t * 3) % keys.len();
                let mode = if i % 3 == 0 { Mode::Strong } else { Mode::Weak };
                ids.push((k, mode, h.next_id(keys[k].as_str(), mode).await.unwrap()));
            }
            ids
        }));
    }
    let mut seen: Vec<HashSet<i64>> = vec![HashSet::new(); keys.len()];
    for t in tasks {
        let mut last = BTreeMap::new();
        for (k, mode, id) in t.await.unwrap() {
            assert!(seen[k].insert(id), "{id} issued twice for key {k}");
            if let Some(prev) = last.insert((k, mode == Mode::Strong), id) {
                assert!(id > prev, "{mode:?} key {k}: {id} after {prev}");
            }
        }
    }
    for h in &handles {
        assert!(h.keys_in_memory() <= keys.len());
    }
}

/// WEAK batches (some larger than a segment) and single IDs, mixed, from 8 tasks on two
/// handles ("processes"): every batch is whole, its runs ascend one after the other, and no ID
/// is issued twice.
async fn weak_batches_never_repeat(f: Fixture, per_task: usize) {
    let k = f.key("wbatch").await;
    let small = ServeOptions {
        step: StepPolicy {
            min: 50,
            max: 400,
            ..StepPolicy::default()
        },
        ..ServeOptions::default()
    };
    let handles = [
        Arc::new(StoreHandle::new("a", Arc::clone(&f.store), small)),
        Arc::new(StoreHandle::new("b", Arc::clone(&f.second), small)),
    ];
    let mut tasks = Vec::new();
    for t in 0..8 {
        let h = Arc::clone(&handles[t % 2]);
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            let mut multi_run = 0;
            for i in 0..per_task {
                if i % 3 == 0 {
                    ids.push(h.next_id(k.as_str(), Mode::Weak).await.unwrap());
                    continue;
                }
                let count = 1 + ((i * 37 + t * 11) % 700) as u32;
                let batch = h.next_ids(k.as_str(), Mode::Weak, count).await.unwrap();
                assert_eq!(batch.len(), u64::from(count), "a batch is whole");
                for w in batch.runs().windows(2) {
                    assert!(w[0].1 < w[1].0, "runs ascend: {:?}", batch.runs());
                }
                multi_run += usize::from(batch.runs().len() > 1);
                ids.extend(batch.iter());
            }
            (ids, multi_run)
        }));
    }
    let mut seen = HashSet::new();
    let mut multi_run = 0;
    for t in tasks {
        let (ids, m) = t.await.unwrap();
        multi_run += m;
        for id in ids {
            assert!(id >= 1);
            assert!(seen.insert(id), "{id} issued twice");
        }
    }
    assert!(multi_run > 0, "some batch spanned two segments");
}

/// STRONG batches and single IDs from 6 tasks on two handles: a batch is one run of `count`
/// consecutive IDs, and every ID of a call is above every ID of every call that returned before
/// it started (real-time order), across the two handles.
async fn strong_batches_follow_real_time(f: Fixture, per_task: usize) {
    let k = f.key("sbatch").await;
    let handles = [
        Arc::new(StoreHandle::new(
            "a",
            Arc::clone(&f.store),
            ServeOptions::default(),
        )),
        Arc::new(StoreHandle::new(
            "b",
            Arc::clone(&f.second),
            ServeOptions::default(),
        )),
    ];
    let epoch = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..6 {
        let h = Arc::clone(&handles[t % 2]);
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            let mut calls = Vec::new();
            for i in 0..per_task {
                let count = if i % 4 == 0 {
                    1
                } else {
                    1 + ((i * 13 + t * 7) % 60) as u32
                };
                let start = epoch.elapsed();
                let (first, last) = if count == 1 && t % 2 == 0 {
                    let id = h.next_id(k.as_str(), Mode::Strong).await.unwrap();
                    (id, id)
                } else {
                    let batch = h.next_ids(k.as_str(), Mode::Strong, count).await.unwrap();
                    assert_eq!(batch.runs().len(), 1, "one run: {:?}", batch.runs());
                    assert_eq!(batch.len(), u64::from(count));
                    (batch.first().unwrap(), batch.last().unwrap())
                };
                let end = epoch.elapsed();
                calls.push((start, end, first, last));
            }
            calls
        }));
    }
    let mut calls = Vec::new();
    for t in tasks {
        calls.extend(t.await.unwrap());
    }
    let mut runs: Vec<_> = calls.iter().map(|c| (c.2, c.3)).collect();
    runs.sort_unstable();
    for w in runs.windows(2) {
        assert!(w[0].1 < w[1].0, "{:?} overlaps {:?}", w[0], w[1]);
    }
    let mut by_end = calls.clone();
    by_end.sort_by_key(|c| c.1);
    calls.sort_by_key(|c| c.0);
    let (mut i, mut max_before) = (0, 0);
    for (start, _, first, _) in &calls {
        while i < by_end.len() && by_end[i].1 < *start {
            max_before = max_before.max(by_end[i].3);
            i += 1;
        }
        assert!(
            max_before < *first,
            "batch from {first} started after a call returned {max_before}"
        );
    }
}

/// `count` is 1 to MAX_BATCH in both modes (else InvalidArgument naming it); MAX_BATCH itself
/// is served whole; near i64::MAX a batch that does not fit fails as Exhausted, never short, and
/// a STRONG one changes nothing.
async fn batch_bounds(f: Fixture) {
    let k = f.key("bbounds").await;
    let h = StoreHandle::new("s", Arc::clone(&f.store), ServeOptions::default());
    for mode in [Mode::Weak, Mode::Strong] {
        for bad in [0, MAX_BATCH + 1, u32::MAX] {
            let e = h.next_ids(k.as_str(), mode, bad).await.unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
            assert!(e.message.contains("count"), "{e}");
            assert!(e.message.contains(&MAX_BATCH.to_string()), "{e}");
        }
        let all = h.next_ids(k.as_str(), mode, MAX_BATCH).await.unwrap();
        assert_eq!(all.len(), u64::from(MAX_BATCH));
        assert_eq!(all.iter().collect::<HashSet<_>>().len(), MAX_BATCH as usize);
    }
    let e = h.next_ids("", Mode::Weak, 1).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");

    let end = f.key("bbounds-max").await;
    f.store
        .init(&BTreeMap::from([(end.clone(), i64::MAX - 12)]))
        .await
        .unwrap();
    let e = h
        .next_ids(end.as_str(), Mode::Strong, 20)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exhausted, "{e}");
    let b = h.next_ids(end.as_str(), Mode::Strong, 2).await.unwrap();
    assert_eq!(
        b.runs(),
        &[(i64::MAX - 11, i64::MAX - 10)],
        "nothing changed"
    );
    // WEAK: the 10 left are taken by the batch, which still fails whole.
    let e = h.next_ids(end.as_str(), Mode::Weak, 20).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exhausted, "{e}");
    let e = h.next_id(end.as_str(), Mode::Weak).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exhausted, "{e}");
}

macro_rules! conformance {
    ($($store:ident: $url:expr, strong_per_task = $n:expr, gives_back = $g:expr;)*) => {$(
        mod $store {
            use super::*;

            async fn open() -> Fixture {
                fixture(&$url).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn first_ids_start_at_one() {
                super::first_ids_start_at_one(open().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn no_duplicates_under_concurrency() {
                super::no_duplicates_under_concurrency(open().await, $n).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn strong_follows_real_time() {
                super::strong_follows_real_time(open().await, $n).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn segments_never_overlap() {
                super::segments_never_overlap(open().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn bigger_than_is_honoured() {
                super::bigger_than_is_honoured(open().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn exhaustion_is_reported() {
                super::exhaustion_is_reported(open().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn dropped_keys_never_reissue() {
                super::dropped_keys_never_reissue(open().await, $n).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn weak_batches_never_repeat() {
                super::weak_batches_never_repeat(open().await, $n).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn strong_batches_follow_real_time() {
                super::strong_batches_follow_real_time(open().await, $n).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn batch_bounds() {
                super::batch_bounds(open().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn keys_are_exact() {
                super::keys_are_exact(open().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn give_back_takes_only_the_last_reservation() {
                super::give_back_takes_only_the_last_reservation(open().await, $g).await;
            }
        }
    )*};
}

conformance! {
    memory: "memory", strong_per_task = 200, gives_back = true;
    embedded: "embedded", strong_per_task = 50, gives_back = true;
    redis: floe_testkit::env("FLOE_TEST_REDIS"), strong_per_task = 200, gives_back = false;
    postgres: floe_testkit::env("FLOE_TEST_POSTGRES"), strong_per_task = 100, gives_back = false;
    mysql: floe_testkit::env("FLOE_TEST_MARIADB"), strong_per_task = 100, gives_back = false;
    // Leaf's table: every key of the suite is registered (a row) before it is used.
    leaf_alloc: format!("leaf-{}?table=leaf_alloc_conformance", floe_testkit::env("FLOE_TEST_MARIADB")), strong_per_task = 50, gives_back = false;
    etcd: format!("etcd://{}", floe_testkit::env("FLOE_TEST_ETCD")), strong_per_task = 100, gives_back = false;
    zookeeper: format!("zk://{}", floe_testkit::env("FLOE_TEST_ZOOKEEPER")), strong_per_task = 100, gives_back = false;
}
