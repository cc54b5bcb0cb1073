//! `leaf-mysql://`: floe on Leaf's `leaf_alloc` table, beside writers that issue Leaf's own SQL
//! (`IDAllocDaoImpl`: update then select in one transaction), on the test MariaDB.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use floe_sequencer::{
    Capabilities, ErrorKind, Key, Mode, SeqError, ServeOptions, StepPolicy, Store, StoreHandle,
};

use crate::common::leaf::{Table, LEAF_DDL};

async fn open(url: &str) -> Result<Arc<dyn Store>, SeqError> {
    let dir = tempfile::tempdir().unwrap();
    floe_sequencer::open(url, dir.path()).await
}

fn key(tag: &str) -> Key {
    Key::new(tag).unwrap()
}

/// A store that records every range it reserved, `(first, end exclusive)`, as Leaf writes
/// its segments.
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn Store>,
    reserved: Mutex<Vec<(String, i64, i64)>>,
}

#[async_trait]
impl Store for Recording {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        let v = self.inner.reserve(key, n).await?;
        self.reserved
            .lock()
            .unwrap()
            .push((key.as_str().to_string(), v - i64::from(n) + 1, v + 1));
        Ok(v)
    }
    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        self.inner.raise(key, floor).await
    }
}

/// Leaf servers (writers issuing Leaf's exact SQL: two loads of the row's step, then custom
/// steps doubling as Leaf's dynamic step does) and floe (two stores, WEAK and STRONG) on the
/// same tags of one MariaDB at once: every range reserved, Leaf's or floe's, is disjoint from
/// the others, together they tile `[1, max_id)` of each tag exactly, and no ID is issued twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leaf_and_floe_share_tags_without_repeats() {
    let table = Table::fresh("leaf_share", LEAF_DDL).await;
    let tags = ["orders", "users", "coupons"];
    for (i, tag) in tags.iter().enumerate() {
        table.insert(tag, 1, 100 + 50 * i as i32).await;
    }
    let mut floe = Vec::new();
    for _ in 0..2 {
        let store = Arc::new(Recording {
            inner: open(&table.url()).await.unwrap(),
            reserved: Mutex::new(Vec::new()),
        });
        floe.push(store);
    }
    let options = ServeOptions {
        step: StepPolicy {
            min: 50,
            max: 400,
            ..StepPolicy::default()
        },
        ..ServeOptions::default()
    };
    let handles: Vec<_> = floe
        .iter()
        .map(|s| {
            let store: Arc<dyn Store> = s.clone();
            Arc::new(StoreHandle::new("floe", store, options))
        })
        .collect();

    let mut leaf_tasks = Vec::new();
    for _server in 0..2 {
        let table = Table::create(
            &floe_testkit::env("FLOE_TEST_MARIADB"),
            &table.name,
            LEAF_DDL,
        )
        .await;
        leaf_tasks.push(tokio::spawn(async move {
            let mut segments = Vec::new();
            for round in 0..30 {
                for tag in tags {
                    // Leaf's SegmentIDGenImpl: the 1st and 2nd loads use the DB step, later
                    // ones a custom step (here doubling up to 800).
                    let custom = (round >= 2).then(|| 100i64 << (round - 2).min(3));
                    let (first, end) = table.leaf_load(tag, custom).await;
                    segments.push((tag.to_string(), first, end));
                }
            }
            segments
        }));
    }
    let mut floe_tasks = Vec::new();
    for t in 0..6 {
        let h = Arc::clone(&handles[t % 2]);
        floe_tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..1500 {
                let tag = tags[(i + t) % tags.len()];
                let mode = if i % 10 == 0 {
                    Mode::Strong
                } else {
                    Mode::Weak
                };
                ids.push((tag, h.next_id(tag, mode).await.unwrap()));
            }
            ids
        }));
    }
    let mut leaf_segments = Vec::new();
    for t in leaf_tasks {
        leaf_segments.extend(t.await.unwrap());
    }
    let mut issued: BTreeMap<&str, Vec<(i64, i64)>> = BTreeMap::new();
    for (tag, first, end) in &leaf_segments {
        // Leaf hands out every ID of its segments.
        let tag = tags.iter().find(|t| **t == tag).unwrap();
        issued.entry(tag).or_default().push((*first, *end));
    }
    let mut floe_ids = 0;
    for t in floe_tasks {
        for (tag, id) in t.await.unwrap() {
            issued.entry(tag).or_default().push((id, id + 1));
            floe_ids += 1;
        }
    }
    assert_eq!(floe_ids, 6 * 1500);
    for (tag, mut ranges) in issued {
        ranges.sort_unstable();
        assert!(ranges[0].0 >= 1, "{tag}");
        for w in ranges.windows(2) {
            assert!(w[0].1 <= w[1].0, "{tag}: {:?} and {:?} overlap", w[0], w[1]);
        }
    }
    // Every reservation, Leaf's and floe's, is one of Leaf's segments: together they tile
    // [1, max_id) of each tag, with no gap and no overlap.
    let mut reserved = leaf_segments.clone();
    for s in &floe {
        reserved.extend(s.reserved.lock().unwrap().iter().cloned());
    }
    let floe_reservations = reserved.len() - leaf_segments.len();
    assert!(floe_reservations > 20, "{floe_reservations}");
    for tag in tags {
        let mut ranges: Vec<_> = reserved
            .iter()
            .filter(|r| r.0 == tag)
            .map(|r| (r.1, r.2))
            .collect();
        ranges.sort_unstable();
        let mut next = 1;
        for (first, end) in ranges {
            assert_eq!(first, next, "{tag}: a gap or an overlap at {next}");
            next = end;
        }
        assert_eq!(Some(next), table.max_id(tag).await, "{tag}");
    }
}

/// floe continues a table Leaf left (rows as Leaf's DDL and README create them, loaded by a
/// Leaf run): each tag's next ID is exactly its old `max_id`, the first ID Leaf never gave;
/// a tag Leaf never loaded starts at 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floe_continues_where_leaf_stopped() {
    let table = Table::fresh("leaf_left", LEAF_DDL).await;
    table.insert("leaf-segment-test", 1, 2000).await;
    table.insert("orders", 1, 1000).await;
    table.insert("quiet", 1, 2000).await;
    // A Leaf run: two loads of the DB step, then Leaf's doubled step.
    assert_eq!(table.leaf_load("leaf-segment-test", None).await, (1, 2001));
    assert_eq!(
        table.leaf_load("leaf-segment-test", None).await,
        (2001, 4001)
    );
    assert_eq!(
        table.leaf_load("leaf-segment-test", Some(4000)).await,
        (4001, 8001)
    );
    for _ in 0..5 {
        table.leaf_load("orders", None).await;
    }
    assert_eq!(table.max_id("orders").await, Some(5001));

    let store = open(&table.url()).await.unwrap();
    let handle = StoreHandle::new("floe", Arc::clone(&store), ServeOptions::default());
    assert_eq!(
        handle
            .next_id("leaf-segment-test", Mode::Weak)
            .await
            .unwrap(),
        8001
    );
    assert_eq!(handle.next_id("orders", Mode::Strong).await.unwrap(), 5001);
    assert_eq!(handle.next_id("orders", Mode::Strong).await.unwrap(), 5002);
    assert_eq!(handle.next_id("quiet", Mode::Weak).await.unwrap(), 1);
    // floe's fetch is Leaf's segment: max_id moved by floe's step, from 8001.
    let step = i64::from(StepPolicy::default().min);
    assert_eq!(table.max_id("leaf-segment-test").await, Some(8001 + step));
    // And Leaf, loading next, continues above floe's segment.
    assert_eq!(
        table.leaf_load("leaf-segment-test", Some(8000)).await,
        (8001 + step, 16001 + step)
    );
    // bigger_than lifts a tag and never lowers one.
    let floors = BTreeMap::from([(key("orders"), 100_000), (key("quiet"), 5)]);
    store.init(&floors).await.unwrap();
    assert_eq!(table.max_id("orders").await, Some(100_001));
    assert_eq!(store.next_id(&key("orders")).await.unwrap(), 100_001);
    assert_eq!(
        table.max_id("quiet").await,
        Some(1 + step),
        "not lowered to 6"
    );
    store.close().await;
}

/// A tag with no row is refused with UnknownKey, by every call, and nothing is inserted; tags
/// match byte for byte although the table's collation ignores case and trailing spaces; a row
/// with max_id below 1 is refused, not served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tags_are_refused_and_never_inserted() {
    let table = Table::fresh("leaf_unknown", LEAF_DDL).await;
    table.insert("orders", 1, 1000).await;
    table.insert("zero", 0, 1000).await;
    let store = open(&table.url()).await.unwrap();
    let handle = StoreHandle::new("floe", Arc::clone(&store), ServeOptions::default());
    for tag in [
        "nosuch",
        "ORDERS",
        "orders ",
        "Orders",
        "ключ",
        "x".repeat(200).as_str(),
    ] {
        let e = store.reserve(&key(tag), 10).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownKey, "{tag:?}: {e}");
        assert!(e.message.contains(&table.name), "{e}");
        assert!(e.message.contains(tag), "{e}");
        let e = store.raise(&key(tag), 50).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownKey, "{tag:?}: {e}");
        for mode in [Mode::Weak, Mode::Strong] {
            let e = handle.next_id(tag, mode).await.unwrap_err();
            assert_eq!(e.kind, ErrorKind::UnknownKey, "{tag:?} {mode:?}: {e}");
        }
    }
    assert_eq!(table.rows().await, 2, "nothing inserted");
    assert_eq!(
        table.max_id("orders").await,
        Some(1),
        "case variants changed nothing"
    );
    let e = store.reserve(&key("zero"), 5).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    assert!(e.message.contains("max_id 0"), "{e}");
    // Raised, it is served above the floor.
    store.raise(&key("zero"), 10).await.unwrap();
    assert_eq!(store.reserve(&key("zero"), 5).await.unwrap(), 15);
    assert_eq!(store.reserve(&key("orders"), 1).await.unwrap(), 1);
    // A row inserted while floe runs is served at once.
    table.insert("later", 1, 10).await;
    assert_eq!(handle.next_id("later", Mode::Weak).await.unwrap(), 1);
    store.close().await;
}

/// A table that is missing, or is not Leaf's, is refused when the store opens, naming the
/// table (and what is wrong); floe creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_foreign_table_is_a_config_error() {
    let mysql = floe_testkit::env("FLOE_TEST_MARIADB");
    let missing = format!(
        "leaf_missing_{}",
        floe_testkit::unique("t").replace('-', "_")
    );
    let e = open(&format!("leaf-{mysql}?table={missing}"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
    assert!(e.message.contains(&missing), "{e}");
    assert!(e.message.contains("does not exist"), "{e}");
    let probe = Table::fresh("leaf_probe", LEAF_DDL).await;
    let exists: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(&missing)
    .fetch_one(&probe.pool)
    .await
    .unwrap();
    assert_eq!(exists, 0, "floe created nothing");

    for (ddl, wrong) in [
        (
            "CREATE TABLE {t} (biz_tag varchar(128) PRIMARY KEY, max_id int NOT NULL, step int NOT NULL)",
            "column max_id is int",
        ),
        (
            "CREATE TABLE {t} (biz_tag varchar(128) PRIMARY KEY, max_id bigint NOT NULL)",
            "no column step",
        ),
        (
            "CREATE TABLE {t} (k varchar(128) PRIMARY KEY, value bigint NOT NULL)",
            "no column biz_tag, no column max_id, no column step",
        ),
        (
            "CREATE TABLE {t} (biz_tag varchar(128), max_id bigint unsigned NOT NULL, step int NOT NULL)",
            "column max_id is bigint(20) unsigned",
        ),
        (
            "CREATE TABLE {t} (biz_tag varchar(128), max_id bigint NOT NULL, step int NOT NULL)",
            "biz_tag is not its primary key",
        ),
    ] {
        let table = Table::fresh("leaf_foreign", ddl).await;
        let e = open(&table.url()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{e}");
        assert!(e.message.contains(&table.name), "{e}");
        assert!(e.message.contains(wrong), "{wrong}: {e}");
    }
    let e = open(&format!(
        "leaf-{}",
        mysql.rsplit_once('/').unwrap().0.to_string() + "/"
    ))
    .await
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
    assert!(e.message.contains("leaf_alloc"), "{e}");
}

/// The admin calls on a table as Leaf's DDL makes it (its collation ignores case and trailing
/// spaces): the tags listed in byte order with their values (`max_id - 1`), leaving out a tag
/// that is no key; registering inserts a row as Leaf's README does, refuses a tag the table
/// holds only as another, and never touches an existing row; unregistering is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_calls_on_leafs_table() {
    let table = Table::fresh("leaf_admin", LEAF_DDL).await;
    for (tag, max_id) in [("orders", 5001), ("B", 1), ("a b", 7), ("a", 1), ("", 1)] {
        table.insert(tag, max_id, 1000).await;
    }
    let store = open(&table.url()).await.unwrap();
    let listed = |after: Option<&str>, limit| {
        let store = Arc::clone(&store);
        let after = after.map(key);
        async move {
            let keys = store.keys(after.as_ref(), limit).await.unwrap();
            let tags = store.registered(after.as_ref(), limit).await.unwrap();
            assert_eq!(
                tags,
                keys.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>()
            );
            keys.into_iter()
                .map(|(k, v)| (k.as_str().to_string(), v))
                .collect::<Vec<_>>()
        }
    };
    let s = |t: &str, v: i64| (t.to_string(), v);
    // Byte order ("B" before "a"), not the collation's; '' is no key.
    assert_eq!(listed(None, 2).await, [s("B", 0), s("a", 0)]);
    assert_eq!(listed(Some("a"), 2).await, [s("a b", 6), s("orders", 5000)]);
    assert_eq!(listed(Some("orders"), 2).await, []);
    assert_eq!(store.value(&key("orders")).await.unwrap(), Some(5000));
    for other in ["ORDERS", "orders ", "nosuch", "ключ"] {
        assert_eq!(store.value(&key(other)).await.unwrap(), None, "{other:?}");
        assert!(
            !store.is_registered(&key(other)).await.unwrap(),
            "{other:?}"
        );
    }

    assert!(store.is_registered(&key("orders")).await.unwrap());
    assert!(!store.register(&key("orders")).await.unwrap());
    assert_eq!(table.max_id("orders").await, Some(5001), "untouched");
    for other in ["ORDERS".to_string(), "orders ".to_string(), "x".repeat(200)] {
        let e = store.register(&key(&other)).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{other:?}: {e}");
        assert!(e.message.contains(&table.name), "{e}");
    }
    assert_eq!(table.rows().await, 5, "nothing inserted");
    assert!(store.register(&key("new")).await.unwrap());
    assert!(!store.register(&key("new")).await.unwrap());
    let step: i32 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT step FROM {} WHERE biz_tag = 'new'",
        table.name
    )))
    .fetch_one(&table.pool)
    .await
    .unwrap();
    assert_eq!(step, floe_sequencer::stores::leaf_alloc::REGISTERED_STEP);
    assert_eq!((table.max_id("new").await, step), (Some(1), 2000));
    assert_eq!(store.value(&key("new")).await.unwrap(), Some(0));
    assert_eq!(
        table.leaf_load("new", None).await,
        (1, 2001),
        "Leaf serves it"
    );

    let e = store.unregister(&key("orders")).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    assert!(e.message.contains("DELETE FROM"), "{e}");
    assert!(e.message.contains("max_id"), "{e}");
    assert_eq!(table.rows().await, 6);
    store.close().await;
}

/// Give-backs on Leaf's table: taken while nothing was reserved since, by floe or by Leaf's
/// own SQL (whose next segment then starts at the first ID given back); refused after any
/// reservation, and for a tag matched only by the table's collation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn give_backs_meet_leafs_loads() {
    let table = Table::fresh("leaf_giveback", LEAF_DDL).await;
    table.insert("orders", 5001, 1000).await;
    let store = open(&table.url()).await.unwrap();
    let orders = key("orders");
    assert_eq!(store.reserve(&orders, 100).await.unwrap(), 5100);
    assert!(store.give_back(&orders, 5051, 5100).await.unwrap());
    assert_eq!(table.max_id("orders").await, Some(5051));
    assert_eq!(table.leaf_load("orders", None).await, (5051, 6051));
    assert!(!store.give_back(&orders, 5051, 5100).await.unwrap());
    assert_eq!(store.reserve(&orders, 10).await.unwrap(), 6060);
    assert_eq!(table.leaf_load("orders", None).await, (6061, 7061));
    assert!(!store.give_back(&orders, 6051, 6060).await.unwrap());
    assert_eq!(store.reserve(&orders, 10).await.unwrap(), 7070);
    for other in ["ORDERS", "orders ", "ключ"] {
        assert!(!store.give_back(&key(other), 7061, 7070).await.unwrap());
    }
    assert_eq!(table.max_id("orders").await, Some(7071));
    store.close().await;
}

/// Leaf's servers (its own SQL) and floe's stores on one tag at once, floe serving a random
/// part of each segment and giving the rest back: no ID is issued twice, and some give-backs
/// were taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn give_backs_beside_leaf_never_repeat() {
    let table = Table::fresh("leaf_giveback_race", LEAF_DDL).await;
    table.insert("race", 1, 100).await;
    let mut tasks = Vec::new();
    for _server in 0..2 {
        let leaf = Table::create(
            &floe_testkit::env("FLOE_TEST_MARIADB"),
            &table.name,
            LEAF_DDL,
        )
        .await;
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..40 {
                let (first, end) = leaf.leaf_load("race", None).await;
                ids.extend(first..end); // Leaf serves its whole segment
            }
            (ids, 0)
        }));
    }
    for t in 0..4u64 {
        let store = open(&table.url()).await.unwrap();
        tasks.push(tokio::spawn(async move {
            let mut rng = 0x2545_F491_4F6C_DD1D_u64.wrapping_mul(t + 1);
            let mut next = move |n: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n
            };
            let race = key("race");
            let (mut ids, mut given) = (Vec::new(), 0);
            for _ in 0..60 {
                let size = 1 + next(50) as u32;
                let last = store.reserve(&race, size).await.unwrap();
                let first = last - i64::from(size) + 1;
                let used = next(u64::from(size) + 1) as i64;
                ids.extend(first..first + used);
                if first + used <= last {
                    given += usize::from(store.give_back(&race, first + used, last).await.unwrap());
                }
            }
            store.close().await;
            (ids, given)
        }));
    }
    let mut seen = std::collections::HashSet::new();
    let mut given = 0;
    for t in tasks {
        let (ids, g) = t.await.unwrap();
        given += g;
        for id in ids {
            assert!(id >= 1);
            assert!(seen.insert(id), "{id} issued twice");
        }
    }
    assert!(given > 0, "no give-back was taken");
}

/// A table with a column floe does not fill and that has no default: registering is a Config
/// error naming the table, and nothing is inserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_needs_defaults_for_other_columns() {
    let table = Table::fresh(
        "leaf_owner",
        "CREATE TABLE {t} (biz_tag varchar(128) PRIMARY KEY, max_id bigint NOT NULL DEFAULT 1, step int NOT NULL, owner varchar(20) NOT NULL)",
    )
    .await;
    let store = open(&table.url()).await.unwrap();
    // MariaDB's default SQL mode is strict: the insert fails rather than fill the column.
    let e = store.register(&key("orders")).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
    assert!(e.message.contains(&table.name), "{e}");
    assert!(e.message.contains("no default"), "{e}");
    assert_eq!(table.rows().await, 0);
    store.close().await;
}
