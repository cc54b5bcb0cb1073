//! Helpers shared by the sequencer tests: the stores under test, each on the real server
//! scripts/test.sh starts, and unique keys.
#![allow(dead_code)] // each test binary uses a part of them

use std::sync::Arc;

use floe_sequencer::{Key, Store};

/// A key no other test (or earlier run on the same server) uses.
pub fn key(name: &str) -> Key {
    Key::new(floe_testkit::unique(name)).unwrap()
}

/// The store under test, a second client of the same store (another "process": its own
/// connections and caches; the same instance for stores one process owns), and what must live
/// as long as they do.
pub struct Fixture {
    pub store: Arc<dyn Store>,
    pub second: Arc<dyn Store>,
    pub _dir: tempfile::TempDir,
    /// The last ID a key of the store can give: `i64::MAX`, but `i64::MAX - 1` on Leaf's
    /// table (its `max_id` is one past the last ID and a signed bigint).
    pub last: i64,
    registry: Registry,
}

/// How a store learns of a key before it serves it.
enum Registry {
    /// Any key is served (every store but Leaf's).
    Open,
    /// Leaf's `leaf_alloc`: a key is served once it has its row.
    #[cfg(feature = "mysql")]
    LeafAlloc(leaf::Table),
}

impl Fixture {
    /// A fresh key (as [`key`]), registered in the store when it serves registered keys only.
    pub async fn key(&self, name: &str) -> Key {
        let k = key(name);
        self.register(&k).await;
        k
    }

    /// Registers `key` in a store that serves registered keys only (Leaf's table: its row at
    /// `max_id` 1, so its first ID is 1); nothing elsewhere.
    pub async fn register(&self, key: &Key) {
        let _ = key;
        match &self.registry {
            Registry::Open => {}
            #[cfg(feature = "mysql")]
            Registry::LeafAlloc(table) => table.insert(key.as_str(), 1, 1).await,
        }
    }
}

/// How the store of `url` learns of keys, and its last ID.
async fn registry(url: &str) -> (Registry, i64) {
    #[cfg(feature = "mysql")]
    if url.starts_with("leaf-") {
        let table = leaf::Table::for_url(url, leaf::WIDE_DDL).await;
        return (Registry::LeafAlloc(table), i64::MAX - 1);
    }
    let _ = url;
    (Registry::Open, i64::MAX)
}

/// Opens the store of `url` twice (once for a store one process owns). For `leaf-mysql://`,
/// the table of the URL is created first (Leaf's columns, with a binary 255-byte `biz_tag`
/// so that every key of the suite fits), as Leaf's operators create theirs.
pub async fn fixture(url: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (registry, last) = registry(url).await;
    let store = floe_sequencer::open(url, dir.path())
        .await
        .unwrap_or_else(|e| panic!("open {url}: {e}"));
    let second = if store.capabilities().shared {
        floe_sequencer::open(url, dir.path()).await.unwrap()
    } else {
        Arc::clone(&store)
    };
    Fixture {
        store,
        second,
        _dir: dir,
        last,
        registry,
    }
}

/// Leaf's `leaf_alloc` table on the test MariaDB, written as Leaf's operators and servers
/// write it.
#[cfg(feature = "mysql")]
pub mod leaf {
    use sqlx::mysql::MySqlPool;
    use sqlx::AssertSqlSafe;

    /// Leaf's DDL (its scripts/leaf_alloc.sql), the table's name left as `{t}`.
    pub const LEAF_DDL: &str = "CREATE TABLE IF NOT EXISTS {t} (
        biz_tag varchar(128) NOT NULL DEFAULT '',
        max_id bigint(20) NOT NULL DEFAULT '1',
        step int(11) NOT NULL,
        description varchar(256) DEFAULT NULL,
        update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
        PRIMARY KEY (biz_tag)
    ) ENGINE=InnoDB";

    /// Leaf's columns with a binary `biz_tag` of 255 bytes: for the conformance suite, whose
    /// keys are up to 255 bytes and differ in case only.
    pub const WIDE_DDL: &str = "CREATE TABLE IF NOT EXISTS {t} (
        biz_tag varbinary(255) NOT NULL DEFAULT '',
        max_id bigint(20) NOT NULL DEFAULT '1',
        step int(11) NOT NULL,
        description varchar(256) DEFAULT NULL,
        update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
        PRIMARY KEY (biz_tag)
    ) ENGINE=InnoDB";

    /// A table of the test MariaDB, through a pool of its own.
    pub struct Table {
        pub pool: MySqlPool,
        pub name: String,
    }

    impl Table {
        /// The table `?table=` of a `leaf-mysql://` URL names (default `leaf_alloc`), created
        /// with `ddl` if missing.
        pub async fn for_url(url: &str, ddl: &str) -> Table {
            let (base, query) = url.split_once('?').unwrap_or((url, ""));
            let name = query
                .split('&')
                .find_map(|p| p.strip_prefix("table="))
                .unwrap_or("leaf_alloc");
            let mysql = format!("mysql://{}", base.split_once("://").unwrap().1);
            Table::create(&mysql, name, ddl).await
        }

        /// The table `name` on the server of `mysql_url`, created with `ddl` if missing.
        pub async fn create(mysql_url: &str, name: &str, ddl: &str) -> Table {
            let pool = MySqlPool::connect(mysql_url).await.unwrap();
            let table = Table {
                pool,
                name: name.to_string(),
            };
            table.exec(&ddl.replace("{t}", name)).await;
            table
        }

        /// A fresh table named after `prefix`, with `ddl`, on the test MariaDB.
        pub async fn fresh(prefix: &str, ddl: &str) -> Table {
            let name = format!("{prefix}_{}", floe_testkit::unique("t").replace('-', "_"));
            Table::create(&floe_testkit::env("FLOE_TEST_MARIADB"), &name, ddl).await
        }

        /// The `leaf-mysql://` URL of this table.
        pub fn url(&self) -> String {
            let mysql = floe_testkit::env("FLOE_TEST_MARIADB");
            format!(
                "leaf-{mysql}{}table={}",
                if mysql.contains('?') { '&' } else { '?' },
                self.name
            )
        }

        /// Runs one statement (text built by the test).
        pub async fn exec(&self, text: &str) {
            sqlx::raw_sql(AssertSqlSafe(text.to_string()))
                .execute(&self.pool)
                .await
                .unwrap_or_else(|e| panic!("{text}: {e}"));
        }

        /// A tag's row, as an operator inserts it (Leaf's README).
        pub async fn insert(&self, tag: &str, max_id: i64, step: i32) {
            sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO {} (biz_tag, max_id, step, description) VALUES (?, ?, ?, 'floe test')",
                self.name
            )))
            .bind(tag)
            .bind(max_id)
            .bind(step)
            .execute(&self.pool)
            .await
            .unwrap();
        }

        /// A tag's `max_id` now (`None`: no row).
        pub async fn max_id(&self, tag: &str) -> Option<i64> {
            sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT max_id FROM {} WHERE biz_tag = ?",
                self.name
            )))
            .bind(tag)
            .fetch_optional(&self.pool)
            .await
            .unwrap()
        }

        /// How many rows the table has.
        pub async fn rows(&self) -> i64 {
            sqlx::query_scalar(AssertSqlSafe(format!("SELECT COUNT(*) FROM {}", self.name)))
                .fetch_one(&self.pool)
                .await
                .unwrap()
        }

        /// One segment of `tag` exactly as Leaf's `IDAllocDaoImpl` loads it: in one
        /// transaction, its update (`+ step` with `custom_step` None, Leaf's first two loads;
        /// `+ custom_step` after) then its select, then commit. Leaf's segment is
        /// `[max_id - step_used, max_id)`: returned as (first, end exclusive).
        pub async fn leaf_load(&self, tag: &str, custom_step: Option<i64>) -> (i64, i64) {
            let t = &self.name;
            let mut tx = self.pool.begin().await.unwrap();
            match custom_step {
                None => sqlx::query(AssertSqlSafe(format!(
                    "UPDATE {t} SET max_id = max_id + step WHERE biz_tag = ?"
                )))
                .bind(tag)
                .execute(&mut *tx)
                .await
                .unwrap(),
                Some(step) => sqlx::query(AssertSqlSafe(format!(
                    "UPDATE {t} SET max_id = max_id + ? WHERE biz_tag = ?"
                )))
                .bind(step)
                .bind(tag)
                .execute(&mut *tx)
                .await
                .unwrap(),
            };
            let (_tag, max_id, step): (Vec<u8>, i64, i32) = sqlx::query_as(AssertSqlSafe(format!(
                "SELECT biz_tag, max_id, step FROM {t} WHERE biz_tag = ?"
            )))
            .bind(tag)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
            tx.commit().await.unwrap();
            let used = custom_step.unwrap_or(i64::from(step));
            (max_id - used, max_id)
        }
    }
}
