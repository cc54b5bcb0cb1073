//! floe on what a Layotto sidecar's sequencer leaves in Redis, etcd, ZooKeeper and MySQL,
//! written here as Layotto writes it (its keys `sequencer|||{app}||{key}`, its commands), on the
//! real servers: in place beside Layotto where that is safe (Redis, etcd), a one-way takeover
//! where it is not (etcd, ZooKeeper, MySQL).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use floe_sequencer::{
    ErrorKind, Key, Mode, SeqError, ServeOptions, StepPolicy, Store, StoreHandle,
};

async fn open(url: &str) -> Result<Arc<dyn Store>, SeqError> {
    let dir = tempfile::tempdir().unwrap();
    floe_sequencer::open(url, dir.path()).await
}

fn key(k: &str) -> Key {
    Key::new(k).unwrap()
}

/// A Layotto app id no other test (or run) uses.
fn app() -> String {
    floe_testkit::unique("app")
}

/// Layotto's stored key for `app`'s `key` (its default `appid` strategy).
fn stored(app: &str, key: &str) -> String {
    format!("sequencer|||{app}||{key}")
}

/// Small WEAK segments, so that floe fetches often.
fn small() -> ServeOptions {
    ServeOptions {
        step: StepPolicy {
            min: 20,
            max: 200,
            ..StepPolicy::default()
        },
        ..ServeOptions::default()
    }
}

/// floe's IDs of `keys` from two handles at once, WEAK, STRONG and STRONG batches: `(key, id)`.
fn floe_load(
    handles: &[Arc<StoreHandle>],
    keys: &[&'static str],
    per_task: usize,
) -> Vec<tokio::task::JoinHandle<Vec<(&'static str, i64)>>> {
    let keys = keys.to_vec();
    (0..4)
        .map(|t| {
            let h = Arc::clone(&handles[t % handles.len()]);
            let keys = keys.clone();
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for i in 0..per_task {
                    let k = keys[(i + t) % keys.len()];
                    match i % 5 {
                        0 => ids.push((k, h.next_id(k, Mode::Strong).await.unwrap())),
                        1 => {
                            let batch = h.next_ids(k, Mode::Strong, 3).await.unwrap();
                            assert_eq!(batch.runs().len(), 1, "one run");
                            ids.extend(batch.iter().map(|id| (k, id)));
                        }
                        _ => ids.push((k, h.next_id(k, Mode::Weak).await.unwrap())),
                    }
                }
                ids
            })
        })
        .collect()
}

/// Every `(key, id)` of `ids` is issued once.
fn assert_unique(ids: impl IntoIterator<Item = (String, i64)>) -> usize {
    let mut seen = HashSet::new();
    for (k, id) in ids {
        assert!(id >= 1, "{k}: {id}");
        assert!(seen.insert((k.clone(), id)), "{k}: {id} issued twice");
    }
    seen.len()
}

mod redis_store {
    use super::*;
    use redis::AsyncCommands;

    async fn conn() -> redis::aio::MultiplexedConnection {
        redis::Client::open(floe_testkit::env("FLOE_TEST_REDIS"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// What Layotto's Redis component left (a key at 1234 after its INCRs and INCRBYs) is
    /// continued at 1235 by `?layotto=APP`; then Layotto-like writers (INCR, its STRONG, and
    /// INCRBY 10000, its WEAK segments) and floe serve the same keys at once: no ID twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn floe_and_layotto_share_keys_in_place() {
        let app = app();
        let mut c = conn().await;
        let _: i64 = c.incr(stored(&app, "order"), 1234).await.unwrap();
        // Another app's key with the same name is not floe's.
        let _: i64 = c.incr(stored("other-app", "order"), 99).await.unwrap();
        let url = format!("{}?layotto={app}", floe_testkit::env("FLOE_TEST_REDIS"));
        let store = open(&url).await.unwrap();
        assert_eq!(store.next_id(&key("order")).await.unwrap(), 1235);
        let fresh = store.next_id(&key("fresh")).await.unwrap();
        assert_eq!(fresh, 1, "a key Layotto never used starts at 1");
        let got: i64 = c.get(stored(&app, "fresh")).await.unwrap();
        assert_eq!(got, 1, "floe's key is Layotto's key");

        let handles = [
            Arc::new(StoreHandle::new("a", Arc::clone(&store), small())),
            Arc::new(StoreHandle::new("b", open(&url).await.unwrap(), small())),
        ];
        let keys = ["order", "fresh", "user"];
        let floe = floe_load(&handles, &keys, 400);
        let mut layotto = Vec::new();
        for w in 0..2 {
            let app = app.clone();
            layotto.push(tokio::spawn(async move {
                let mut c = conn().await;
                let mut ids = Vec::new();
                for i in 0..300 {
                    let k = keys[(i + w) % keys.len()];
                    if i % 50 == 0 {
                        // Layotto's WEAK: a segment [v - 10000 + 1, v].
                        let v: i64 = c.incr(stored(&app, k), 10_000).await.unwrap();
                        ids.extend((v - 9_999..=v).map(|id| (k, id)));
                    } else {
                        let v: i64 = redis::cmd("INCR")
                            .arg(stored(&app, k))
                            .query_async(&mut c)
                            .await
                            .unwrap();
                        ids.push((k, v));
                    }
                }
                ids
            }));
        }
        let mut all = Vec::new();
        for t in floe.into_iter().chain(layotto) {
            all.extend(
                t.await
                    .unwrap()
                    .into_iter()
                    .map(|(k, id)| (k.to_string(), id)),
            );
        }
        all.push(("order".into(), 1235));
        all.push(("fresh".into(), 1));
        assert!(assert_unique(all) > 2 * 300 + 4 * 400);
    }

    /// The admin calls and give-backs on Layotto's keys in place: the app's keys listed as
    /// clients name them (not another app's, nor a key whose rest holds `||`), values as
    /// Layotto left them; registrations apart from them; a give-back taken while nothing was
    /// reserved since, refused after a Layotto INCR; and Layotto's writers racing floe's
    /// reservations and give-backs never get an ID floe served.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn admin_calls_and_give_backs_on_layottos_keys() {
        let app = app();
        let mut c = conn().await;
        for (k, v) in [("order", 1234), ("a/b", 5), ("ключ", 7), ("x||y", 9)] {
            let _: i64 = c.incr(stored(&app, k), v).await.unwrap();
        }
        let _: i64 = c.incr(stored("other-app", "order"), 99).await.unwrap();
        let url = format!("{}?layotto={app}", floe_testkit::env("FLOE_TEST_REDIS"));
        let store = open(&url).await.unwrap();
        let order = key("order");
        assert_eq!(store.value(&order).await.unwrap(), Some(1234));
        assert_eq!(store.value(&key("none")).await.unwrap(), None);
        let page = store.keys(None, 2).await.unwrap();
        assert_eq!(page, [(key("a/b"), 5), (order.clone(), 1234)]);
        let page = store.keys(Some(&order), 2).await.unwrap();
        assert_eq!(page, [(key("ключ"), 7)]);

        assert!(store.register(&order).await.unwrap());
        assert!(!store.register(&order).await.unwrap());
        assert_eq!(
            store.registered(None, 10).await.unwrap(),
            std::slice::from_ref(&order)
        );
        assert_eq!(
            store.keys(None, 10).await.unwrap().len(),
            3,
            "no registration"
        );
        let kind: String = redis::cmd("TYPE")
            .arg([stored(&app, "").as_bytes(), b"\xffregistered"].concat())
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(kind, "zset");

        assert_eq!(store.reserve(&order, 10).await.unwrap(), 1244);
        assert!(store.give_back(&order, 1240, 1244).await.unwrap());
        let layottos: i64 = c.incr(stored(&app, "order"), 1).await.unwrap();
        assert_eq!(layottos, 1240, "Layotto's next ID is the first given back");
        assert_eq!(store.reserve(&order, 10).await.unwrap(), 1250);
        let _: i64 = c.incr(stored(&app, "order"), 1).await.unwrap();
        assert!(!store.give_back(&order, 1241, 1250).await.unwrap());
        assert_eq!(store.value(&order).await.unwrap(), Some(1251));

        let mut tasks = Vec::new();
        for _writer in 0..2 {
            let app = app.clone();
            tasks.push(tokio::spawn(async move {
                let mut c = conn().await;
                let mut ids = Vec::new();
                for i in 0..200 {
                    let n = if i % 20 == 0 { 50 } else { 1 };
                    let v: i64 = c.incr(stored(&app, "order"), n).await.unwrap();
                    ids.extend(v - n + 1..=v);
                }
                (ids, 0)
            }));
        }
        for t in 0..2i64 {
            let store = open(&url).await.unwrap();
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let (mut ids, mut given) = (Vec::new(), 0);
                for i in 0..100i64 {
                    let size = 1 + (i * 7 + t) % 20;
                    let last = store.reserve(&order, size as u32).await.unwrap();
                    let first = last - size + 1;
                    let used = (i + t) % (size + 1);
                    ids.extend(first..first + used);
                    if used < size {
                        given +=
                            usize::from(store.give_back(&order, first + used, last).await.unwrap());
                    }
                }
                (ids, given)
            }));
        }
        let (mut all, mut given) = (Vec::new(), 0);
        for t in tasks {
            let (ids, g) = t.await.unwrap();
            given += g;
            all.extend(ids.into_iter().map(|id| ("order".to_string(), id)));
        }
        assert_unique(all);
        assert!(given > 0, "no give-back was taken");
    }

    /// `prefix=` and `layotto=` name the same thing: both at once is a Config error.
    #[tokio::test]
    async fn prefix_and_layotto_exclude_each_other() {
        let url = format!(
            "{}?layotto=a&prefix=b",
            floe_testkit::env("FLOE_TEST_REDIS")
        );
        let e = open(&url).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{e}");
        assert!(e.message.contains("layotto"), "{e}");
        let e = open(&format!(
            "{}?layotto=a||b",
            floe_testkit::env("FLOE_TEST_REDIS")
        ))
        .await
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{e}");
    }
}

mod etcd_store {
    use super::*;
    use floe_etcd::{Client, Compare, CompareOp, ConnectOptions, Txn, TxnGet, TxnOp};

    fn client() -> Client {
        Client::connect(
            [floe_testkit::env("FLOE_TEST_ETCD")],
            ConnectOptions::both(std::time::Duration::from_secs(5)),
        )
        .unwrap()
    }

    /// One ID as Layotto's etcd component gets it: in one transaction, an empty put and a get
    /// (the same in both branches of its create-revision compare); the ID is the version.
    async fn layotto_next(c: &Client, path: &str) -> i64 {
        let ops = || [TxnOp::put(path, "", 0), TxnOp::get(path)];
        let txn = Txn::new()
            .when([Compare::create_revision(path, CompareOp::Equal, 0)])
            .and_then(ops())
            .or_else(ops());
        let resp = c.txn(txn).await.unwrap();
        resp.gets()[0].kvs[0].version
    }

    /// Layotto's keys served in place (`?layotto=APP`): a key Layotto left at version 57 goes
    /// on at 58, and Layotto-like writers and floe (WEAK, STRONG, STRONG batches, two
    /// handles) share keys at once with no ID twice; Layotto's own next ID is above floe's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn floe_and_layotto_share_keys_in_place() {
        let app = app();
        let c = client();
        let order = format!("/layotto/{}", stored(&app, "order"));
        for _ in 0..57 {
            layotto_next(&c, &order).await;
        }
        let etcd = floe_testkit::env("FLOE_TEST_ETCD");
        let url = format!("etcd://{etcd}?layotto={app}");
        let store = open(&url).await.unwrap();
        assert!(!store.capabilities().segments);
        assert_eq!(store.next_id(&key("order")).await.unwrap(), 58);
        assert_eq!(store.reserve(&key("order"), 5).await.unwrap(), 63);
        assert_eq!(layotto_next(&c, &order).await, 64);

        let handles = [
            Arc::new(StoreHandle::new("a", Arc::clone(&store), small())),
            Arc::new(StoreHandle::new("b", open(&url).await.unwrap(), small())),
        ];
        let keys = ["order", "user"];
        let floe = floe_load(&handles, &keys, 60);
        let mut layotto = Vec::new();
        for w in 0..2 {
            let app = app.clone();
            layotto.push(tokio::spawn(async move {
                let c = client();
                let mut ids = Vec::new();
                for i in 0..80 {
                    let k = keys[(i + w) % keys.len()];
                    let path = format!("/layotto/{}", stored(&app, k));
                    ids.push((k, layotto_next(&c, &path).await));
                }
                ids
            }));
        }
        let mut all = vec![("order".to_string(), 58), ("order".to_string(), 64)];
        all.extend((59..=63).map(|id| ("order".to_string(), id)));
        for t in floe.into_iter().chain(layotto) {
            all.extend(
                t.await
                    .unwrap()
                    .into_iter()
                    .map(|(k, id)| (k.to_string(), id)),
            );
        }
        assert_unique(all);

        // bigger_than is Layotto's: met by the version, or refused (a version cannot be set).
        store
            .init(&BTreeMap::from([(key("order"), 60)]))
            .await
            .unwrap();
        let e = store
            .init(&BTreeMap::from([(key("order"), 1_000_000)]))
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{e}");
        assert!(
            e.message.contains("1000000") && e.message.contains("version"),
            "{e}"
        );
    }

    /// The admin calls on Layotto's keys in place: a key's value is its version, the app's
    /// keys are listed as clients name them (not another app's, nor a rest holding `||`),
    /// registrations sit beside Layotto's prefix path, and a give-back is refused (a version
    /// cannot be lowered): the IDs are gaps.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn admin_calls_on_layottos_keys() {
        let app = app();
        let c = client();
        for (k, n) in [("order", 5), ("a/b", 2), ("ключ", 3), ("x||y", 4)] {
            for _ in 0..n {
                layotto_next(&c, &format!("/layotto/{}", stored(&app, k))).await;
            }
        }
        layotto_next(&c, &format!("/layotto/{}", stored("other-app", "order"))).await;
        let etcd = floe_testkit::env("FLOE_TEST_ETCD");
        let store = open(&format!("etcd://{etcd}?layotto={app}")).await.unwrap();
        let order = key("order");
        assert_eq!(store.value(&order).await.unwrap(), Some(5));
        assert_eq!(store.value(&key("none")).await.unwrap(), None);
        assert_eq!(
            store.keys(None, 2).await.unwrap(),
            [(key("a/b"), 2), (order.clone(), 5)]
        );
        assert_eq!(
            store.keys(Some(&order), 5).await.unwrap(),
            [(key("ключ"), 3)]
        );

        assert_eq!(store.reserve(&order, 3).await.unwrap(), 8);
        assert!(!store.give_back(&order, 7, 8).await.unwrap());
        assert_eq!(store.value(&order).await.unwrap(), Some(8));
        assert_eq!(store.next_id(&order).await.unwrap(), 9);

        assert!(store.register(&order).await.unwrap());
        assert!(!store.register(&order).await.unwrap());
        assert!(store.is_registered(&order).await.unwrap());
        assert_eq!(
            store.registered(None, 10).await.unwrap(),
            std::slice::from_ref(&order)
        );
        let path = format!("/layotto.registered/{}", stored(&app, "order"));
        assert_eq!(c.get(path.as_str()).await.unwrap().kvs.len(), 1, "{path}");
        assert_eq!(
            store.keys(None, 10).await.unwrap().len(),
            3,
            "no registration"
        );
        assert!(store.unregister(&order).await.unwrap());
        assert_eq!(store.value(&order).await.unwrap(), Some(9), "kept");
        assert!(store.registered(None, 10).await.unwrap().is_empty());
    }

    /// `?from_layotto=APP`: floe's own keys are lifted above Layotto's versions at start-up
    /// (under a custom `layotto_prefix` too), and served with segments; another app's keys
    /// are left alone; a second start lowers nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn floe_takes_over_layottos_keys() {
        let app = app();
        let c = client();
        for (path, n) in [
            (format!("/layotto/{}", stored(&app, "order")), 41),
            (format!("/layotto/{}", stored(&app, "user")), 7),
            (format!("/layotto/{}", stored("other-app", "order")), 500),
            (format!("/custom/{}", stored(&app, "coupon")), 12),
        ] {
            for _ in 0..n {
                layotto_next(&c, &path).await;
            }
        }
        let etcd = floe_testkit::env("FLOE_TEST_ETCD");
        let root = format!("/floe-{}", app);
        let url = format!("etcd://{etcd}{root}?from_layotto={app}");
        let store = open(&url).await.unwrap();
        assert!(store.capabilities().segments);
        assert_eq!(store.next_id(&key("order")).await.unwrap(), 42);
        assert_eq!(store.next_id(&key("user")).await.unwrap(), 8);
        assert_eq!(
            store.next_id(&key("coupon")).await.unwrap(),
            1,
            "another prefix"
        );
        let handle = StoreHandle::new("a", Arc::clone(&store), ServeOptions::default());
        assert_eq!(handle.next_id("order", Mode::Weak).await.unwrap(), 43);
        // Again: nothing goes back (floe's order is past Layotto's 41 now).
        let again = open(&url).await.unwrap();
        assert!(again.next_id(&key("order")).await.unwrap() > 43);
        let custom = format!("etcd://{etcd}{root}-c?from_layotto={app}&layotto_prefix=custom");
        let store = open(&custom).await.unwrap();
        assert_eq!(store.next_id(&key("coupon")).await.unwrap(), 13);
    }

    /// The Layotto options that cannot go together are Config errors naming them.
    #[tokio::test]
    async fn conflicting_layotto_options_are_refused() {
        let etcd = floe_testkit::env("FLOE_TEST_ETCD");
        for (url, says) in [
            (format!("etcd://{etcd}?layotto=a&from_layotto=a"), "exclude"),
            (format!("etcd://{etcd}/root?layotto=a"), "root"),
            (
                format!("etcd://{etcd}?layotto_prefix=/x/"),
                "layotto_prefix",
            ),
            (format!("etcd://{etcd}?layotto=a||b"), "||"),
        ] {
            let e = open(&url).await.unwrap_err();
            assert_eq!(e.kind, ErrorKind::Config, "{url}: {e}");
            assert!(e.message.contains(says), "{url}: {e}");
        }
    }
}

mod zookeeper_store {
    use super::*;
    use zookeeper_client::{Acls, Client, CreateMode};

    async fn session() -> Client {
        Client::connector()
            .connect(&floe_testkit::env("FLOE_TEST_ZOOKEEPER"))
            .await
            .unwrap()
    }

    /// One ID as Layotto's ZooKeeper component gets it: `setData` of "" at any version; a
    /// missing node is created EPHEMERAL first. The ID is the data version.
    async fn layotto_next(c: &Client, path: &str) -> i64 {
        match c.set_data(path, b"", None).await {
            Ok(stat) => i64::from(stat.version),
            Err(zookeeper_client::Error::NoNode) => {
                let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
                c.create(path, b"", &ephemeral).await.unwrap();
                Box::pin(layotto_next(c, path)).await
            }
            Err(e) => panic!("{path}: {e}"),
        }
    }

    /// `?from_layotto=APP` while a Layotto session still holds its nodes: floe continues each
    /// key above the node's version, in its own persistent node, and goes on after the session
    /// (and Layotto's count with it) is gone. `?layotto=` is refused, saying why.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn floe_takes_over_from_a_live_layotto_session() {
        let app = app();
        let layotto = session().await;
        for (k, n) in [("order", 25), ("user", 3)] {
            for _ in 0..n {
                layotto_next(&layotto, &format!("/{}", stored(&app, k))).await;
            }
        }
        let other = format!("/{}", stored("other-app", &app));
        layotto_next(&layotto, &other).await;
        let zk = floe_testkit::env("FLOE_TEST_ZOOKEEPER");
        let url = format!("zk://{zk}/floe-{app}?from_layotto={app}");
        let store = open(&url).await.unwrap();
        assert_eq!(store.next_id(&key("order")).await.unwrap(), 26);
        assert_eq!(store.reserve(&key("user"), 10).await.unwrap(), 13);
        // Layotto's session ends: its nodes and counts are gone, floe's keys are not.
        drop(layotto);
        let probe = session().await;
        let gone = format!("/{}", stored(&app, "order"));
        for _ in 0..100 {
            if probe.check_stat(&gone).await.unwrap().is_none() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(
            probe.check_stat(&gone).await.unwrap().is_none(),
            "ephemeral"
        );
        let store = open(&url).await.unwrap();
        assert_eq!(store.next_id(&key("order")).await.unwrap(), 27);

        let e = open(&format!("zk://{zk}?layotto={app}")).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{e}");
        assert!(e.message.contains("ephemeral"), "{e}");
    }
}

mod mysql_store {
    use super::*;
    use sqlx::{AssertSqlSafe, MySqlPool};

    /// Layotto's MySQL component's table (its `CREATE TABLE IF NOT EXISTS`), with rows for
    /// `app`'s keys and another app's.
    async fn layotto_table(pool: &MySqlPool, name: &str, rows: &[(String, i64)]) {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE TABLE IF NOT EXISTS {name} (sequencer_key VARCHAR(255), sequencer_value INT, UNIQUE INDEX (sequencer_key))"
        )))
        .execute(pool)
        .await
        .unwrap();
        for (k, v) in rows {
            sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO {name} (sequencer_key, sequencer_value) VALUES (?, ?)"
            )))
            .bind(k)
            .bind(v)
            .execute(pool)
            .await
            .unwrap();
        }
    }

    /// `?from_layotto=APP&layotto_table=T`: floe's own rows are lifted above the values of
    /// Layotto's table at start-up; another app's rows are left alone; a missing Layotto table
    /// is a Config error naming it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn floe_takes_over_layottos_table() {
        let app = app();
        let mysql = floe_testkit::env("FLOE_TEST_MARIADB");
        let pool = MySqlPool::connect(&mysql).await.unwrap();
        let suffix = floe_testkit::unique("t").replace('-', "_");
        let lt = format!("layotto_{suffix}");
        layotto_table(
            &pool,
            &lt,
            &[
                (stored(&app, "order"), 300),
                (stored(&app, "user"), 9),
                (stored("other-app", "order"), 7000),
            ],
        )
        .await;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "INSERT INTO {lt} (sequencer_key, sequencer_value) VALUES (NULL, NULL)"
        )))
        .execute(&pool)
        .await
        .unwrap();
        let url = format!("{mysql}?table=floe_{suffix}&from_layotto={app}&layotto_table={lt}");
        let store = open(&url).await.unwrap();
        assert_eq!(store.next_id(&key("order")).await.unwrap(), 301);
        assert_eq!(store.next_id(&key("user")).await.unwrap(), 10);
        assert_eq!(store.next_id(&key("coupon")).await.unwrap(), 1);
        let again = open(&url).await.unwrap();
        assert_eq!(
            again.next_id(&key("order")).await.unwrap(),
            302,
            "never lowered"
        );
        let left: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT sequencer_value FROM {lt} WHERE sequencer_key = ?"
        )))
        .bind(stored(&app, "order"))
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(left, 300, "Layotto's table is only read");

        let missing = format!("layotto_missing_{suffix}");
        let e = open(&format!(
            "{mysql}?table=floe_{suffix}&from_layotto={app}&layotto_table={missing}"
        ))
        .await
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{e}");
        assert!(e.message.contains(&missing), "{e}");
        let e = open(&format!("{mysql}?layotto_table={lt}"))
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{e}");
    }
}
