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
    ErrorKind, Key, KeyLimits, Mode, Segment, ServeOptions, StepPolicy, StoreHandle, MAX_BATCH,
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
    // Nothing below 1 is given back: a key never used read as 0 once went to -1 (embedded),
    // and ID 0 came next.
    assert!(!f.store.give_back(&none, 0, 0).await.unwrap());
    assert!(!f.store.give_back(&none, -5, 0).await.unwrap());
    assert_eq!(f.store.next_id(&none).await.unwrap(), 1);
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

/// Many tasks on both clients reserve segments of one key, each "serves" a random prefix of
/// its segment and gives the rest back, racing the others' reservations: an ID served is
/// never served again (a range given back is reissued only when the giver served none of it),
/// and a store that takes IDs back did take some.
async fn give_back_races_reservations(f: Fixture, rounds: usize, takes: bool) {
    let k = f.key("giveback-race").await;
    let stores = [Arc::clone(&f.store), Arc::clone(&f.second)];
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let s = Arc::clone(&stores[(t % 2) as usize]);
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            // xorshift64, seeded per task: reproducible, no dependency.
            let mut rng = 0x9E37_79B9_7F4A_7C15_u64 ^ (t + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            let mut next = move |n: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n
            };
            let (mut served, mut given) = (Vec::new(), 0);
            for _ in 0..rounds {
                let size = 1 + next(20) as u32;
                let last = s.reserve(&k, size).await.unwrap();
                let first = last - i64::from(size) + 1;
                let used = next(u64::from(size) + 1) as i64;
                served.extend(first..first + used);
                if first + used <= last {
                    given += usize::from(s.give_back(&k, first + used, last).await.unwrap());
                }
            }
            (served, given)
        }));
    }
    let (mut seen, mut given) = (HashSet::new(), 0);
    for t in tasks {
        let (served, g) = t.await.unwrap();
        given += g;
        for id in served {
            assert!(id >= 1);
            assert!(seen.insert(id), "{id} served twice");
        }
    }
    if takes {
        assert!(given > 0, "no give-back succeeded");
    } else {
        assert_eq!(given, 0);
    }
}

/// How a store keeps registrations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Registrations {
    /// Apart from the values: registering sets no value, unregistering keeps it.
    Apart,
    /// Leaf's `leaf_alloc`: a tag's row is its registration and holds its value, so the
    /// fixture's keys come registered, registering inserts a row at value 0, and unregistering
    /// is refused (Leaf's rows are deleted with SQL).
    LeafRows,
}

/// The keys of `pages` (from `after = prefix` on) that are `prefix:...`: a page at a time of
/// `limit`, until one goes past them.
async fn ours<T, F, Fut>(prefix: &Key, limit: usize, mut page: F, name: fn(&T) -> &Key) -> Vec<T>
where
    F: FnMut(Option<Key>) -> Fut,
    Fut: std::future::Future<Output = Vec<T>>,
{
    let start = format!("{prefix}:");
    let mut after = Some(prefix.clone());
    let mut found = Vec::new();
    loop {
        let got = page(after.clone()).await;
        assert!(got.len() <= limit, "a page of {} for {limit}", got.len());
        for w in got.windows(2) {
            assert!(name(&w[0]) < name(&w[1]), "pages are in byte order");
        }
        if let (Some(a), Some(first)) = (&after, got.first()) {
            assert!(name(first) > a, "a page starts after `after`");
        }
        let full = got.len() == limit;
        let past = got.last().is_some_and(|t| {
            !name(t).as_str().starts_with(&start) && name(t).as_str() > start.as_str()
        });
        after = got.last().map(|t| name(t).clone());
        found.extend(
            got.into_iter()
                .filter(|t| name(t).as_str().starts_with(&start)),
        );
        if !full || past {
            return found;
        }
    }
}

/// The admin calls: `value` reads without changing anything, the same on both clients;
/// `keys` and `registered` page in byte order (keys with `/`, `.`, spaces and non-ASCII
/// characters among them), each listing only its own; registering twice says so, and
/// unregistering keeps the value, so a key registered again goes on above every ID it issued.
async fn admin_calls(f: Fixture, registrations: Registrations) {
    let leaf = registrations == Registrations::LeafRows;
    let prefix = common::key("admin");
    let key = |suffix: &str| Key::new(format!("{prefix}:{suffix}")).unwrap();
    let suffixes = [
        "a", "a/b", "a/b/c", "a b", "a.b", "a-b", "B", "b", "é", "ключ", "✓/x", "z",
    ];

    // Nothing stored.
    let none = key("none");
    assert_eq!(f.store.value(&none).await.unwrap(), None);
    assert!(!f.store.is_registered(&none).await.unwrap());

    // Values: key i reserved i + 1 times... in one reservation of i + 1.
    let mut values = Vec::new();
    for (i, suffix) in suffixes.iter().enumerate() {
        let k = key(suffix);
        f.register(&k).await;
        let fresh = f.store.value(&k).await.unwrap();
        assert_eq!(fresh, leaf.then_some(0), "{k:?}");
        let n = i as u32 + 1;
        assert_eq!(f.store.reserve(&k, n).await.unwrap(), i64::from(n));
        for s in [&f.store, &f.second] {
            assert_eq!(s.value(&k).await.unwrap(), Some(i64::from(n)), "{k:?}");
        }
        values.push((k, i64::from(n)));
    }

    // Registrations: one key with a value, one without.
    let with_value = key("a/b");
    let registered_only = key("registered only");
    for k in [&with_value, &registered_only] {
        let known = leaf && *k == with_value; // the fixture registered it
        assert_eq!(f.store.is_registered(k).await.unwrap(), known, "{k:?}");
        assert_eq!(f.store.register(k).await.unwrap(), !known, "{k:?}");
        assert!(
            !f.second.register(k).await.unwrap(),
            "registered twice: {k:?}"
        );
        assert!(f.second.is_registered(k).await.unwrap(), "{k:?}");
    }
    assert_eq!(f.store.value(&with_value).await.unwrap(), Some(2), "kept");
    assert_eq!(
        f.store.value(&registered_only).await.unwrap(),
        leaf.then_some(0),
        "registering sets no value (a Leaf row starts at max_id 1)"
    );
    if leaf {
        values.push((registered_only.clone(), 0));
    }
    values.sort();

    for limit in [1, 3, 100] {
        let listed = ours(
            &prefix,
            limit,
            |after| {
                let s = Arc::clone(&f.second);
                async move { s.keys(after.as_ref(), limit).await.unwrap() }
            },
            |(k, _)| k,
        )
        .await;
        assert_eq!(listed, values, "keys, {limit} a page");
    }
    let mut expected: Vec<Key> = if leaf {
        values.iter().map(|(k, _)| k.clone()).collect()
    } else {
        vec![with_value.clone(), registered_only.clone()]
    };
    expected.sort();
    for limit in [1, 2, 100] {
        let listed = ours(
            &prefix,
            limit,
            |after| {
                let s = Arc::clone(&f.store);
                async move { s.registered(after.as_ref(), limit).await.unwrap() }
            },
            |k| k,
        )
        .await;
        assert_eq!(listed, expected, "registered, {limit} a page");
    }
    assert!(f.store.keys(None, 0).await.unwrap().is_empty());
    assert!(f.store.registered(None, 0).await.unwrap().is_empty());

    if leaf {
        let e = f.store.unregister(&with_value).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
        assert!(e.message.contains("DELETE"), "{e}");
        assert!(f.store.is_registered(&with_value).await.unwrap());
        // A tag registered here is served from 1.
        assert_eq!(f.second.next_id(&registered_only).await.unwrap(), 1);
        return;
    }
    // Unregistering keeps the value: registered again, the key goes on above it.
    assert!(f.store.unregister(&with_value).await.unwrap());
    assert!(!f.second.unregister(&with_value).await.unwrap());
    assert!(!f.store.is_registered(&with_value).await.unwrap());
    assert_eq!(f.second.value(&with_value).await.unwrap(), Some(2));
    assert!(f.second.register(&with_value).await.unwrap());
    assert_eq!(f.store.next_id(&with_value).await.unwrap(), 3);
    assert!(f.store.unregister(&registered_only).await.unwrap());
    assert_eq!(f.store.value(&registered_only).await.unwrap(), None);
    let left = ours(
        &prefix,
        10,
        |after| {
            let s = Arc::clone(&f.store);
            async move { s.registered(after.as_ref(), 10).await.unwrap() }
        },
        |k| k,
    )
    .await;
    assert_eq!(left, [with_value]);
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

/// The secure etcd of scripts/test.sh (start_etcd_secure), as floe's user, at the default root
/// `/floe/sequences`.
fn etcds_url() -> String {
    let d = floe_testkit::env("FLOE_TEST_ETCD_SECURE_DIR");
    format!(
        "etcds://floe@{}?cacert={d}/ca.pem&cert={d}/client.pem&key={d}/client.key&password_file={d}/password",
        floe_testkit::env("FLOE_TEST_ETCD_SECURE")
    )
}

macro_rules! conformance {
    ($($store:ident: $url:expr, strong_per_task = $n:expr, gives_back = $g:expr, registrations = $r:ident;)*) => {$(
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

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn give_back_races_reservations() {
                super::give_back_races_reservations(open().await, 40, $g).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn admin_calls() {
                super::admin_calls(open().await, Registrations::$r).await;
            }
        }
    )*};
}

conformance! {
    memory: "memory", strong_per_task = 200, gives_back = true, registrations = Apart;
    embedded: "embedded", strong_per_task = 50, gives_back = true, registrations = Apart;
    redis: floe_testkit::env("FLOE_TEST_REDIS"), strong_per_task = 200, gives_back = true, registrations = Apart;
    postgres: floe_testkit::env("FLOE_TEST_POSTGRES"), strong_per_task = 100, gives_back = true, registrations = Apart;
    mysql: floe_testkit::env("FLOE_TEST_MARIADB"), strong_per_task = 100, gives_back = true, registrations = Apart;
    // Leaf's table: every key of the suite is registered (a row) before it is used.
    leaf_alloc: format!("leaf-{}?table=leaf_alloc_conformance", floe_testkit::env("FLOE_TEST_MARIADB")), strong_per_task = 50, gives_back = true, registrations = LeafRows;
    etcd: format!("etcd://{}", floe_testkit::env("FLOE_TEST_ETCD")), strong_per_task = 100, gives_back = true, registrations = Apart;
    // https, client certificates, user floe (RBAC on /floe), tokens forgotten after 3 s unused.
    etcds: etcds_url(), strong_per_task = 100, gives_back = true, registrations = Apart;
    zookeeper: format!("zk://{}", floe_testkit::env("FLOE_TEST_ZOOKEEPER")), strong_per_task = 100, gives_back = true, registrations = Apart;
}

/// The SQL stores keep registered keys in `{table}_registered`, beside the table of values.
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod sql_registrations {
    use super::*;

    fn with_table(url: &str, table: &str) -> String {
        let join = if url.contains('?') { '&' } else { '?' };
        format!("{url}{join}table={table}")
    }

    /// A table name too long for its table of registrations (`{table}_registered` past the
    /// server's limit): the values work on, the registration calls say why they cannot.
    async fn a_long_table_name_keeps_its_values(url: &str, longest: usize) {
        let name = |len: usize| {
            let base = floe_testkit::unique("r").replace('-', "_");
            format!("{base}{}", "x".repeat(len - base.len()))
        };
        let store = fixture(&with_table(url, &name(longest))).await.store;
        let k = common::key("fits");
        assert!(store.register(&k).await.unwrap());
        assert!(store.is_registered(&k).await.unwrap());

        let long = name(longest + 1);
        let store = fixture(&with_table(url, &long)).await.store;
        assert_eq!(store.reserve(&k, 5).await.unwrap(), 5);
        assert_eq!(store.value(&k).await.unwrap(), Some(5));
        assert!(store.give_back(&k, 3, 5).await.unwrap());
        assert_eq!(store.keys(None, 10).await.unwrap(), [(k.clone(), 2)]);
        for e in [
            store.register(&k).await.unwrap_err(),
            store.is_registered(&k).await.unwrap_err(),
            store.unregister(&k).await.unwrap_err(),
            store.registered(None, 0).await.unwrap_err(),
        ] {
            assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
            assert!(e.message.contains(&long), "{e}");
            assert!(
                e.message.contains(&format!("at most {longest} bytes")),
                "{e}"
            );
        }
    }

    /// A table of values named like another's table of registrations is never read or
    /// written as one: the registration calls fail, and its values are kept.
    async fn a_table_of_values_is_never_taken_for_registrations(url: &str) {
        let base = floe_testkit::unique("c").replace('-', "_");
        let values = fixture(&with_table(url, &format!("{base}_registered")))
            .await
            .store;
        let k = common::key("kept");
        assert_eq!(values.reserve(&k, 7).await.unwrap(), 7);
        let store = fixture(&with_table(url, &base)).await.store;
        let e = store.register(&k).await.unwrap_err();
        assert!(e.message.contains("registered_key"), "{e}");
        assert!(store.is_registered(&k).await.is_err());
        assert!(store.registered(None, 10).await.is_err());
        assert_eq!(values.reserve(&k, 1).await.unwrap(), 8);
        assert_eq!(values.keys(None, 10).await.unwrap(), [(k, 8)]);
    }

    #[cfg(feature = "postgres")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_long_table_name() {
        a_long_table_name_keeps_its_values(&floe_testkit::env("FLOE_TEST_POSTGRES"), 52).await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_table_named_like_registrations() {
        a_table_of_values_is_never_taken_for_registrations(&floe_testkit::env(
            "FLOE_TEST_POSTGRES",
        ))
        .await;
    }

    #[cfg(feature = "mysql")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql_long_table_name() {
        a_long_table_name_keeps_its_values(&floe_testkit::env("FLOE_TEST_MARIADB"), 53).await;
    }

    #[cfg(feature = "mysql")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql_table_named_like_registrations() {
        a_table_of_values_is_never_taken_for_registrations(&floe_testkit::env("FLOE_TEST_MARIADB"))
            .await;
    }
}
