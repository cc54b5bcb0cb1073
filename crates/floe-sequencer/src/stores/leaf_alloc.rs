//! `leaf-mysql://user[:password]@host:port/db[?table=leaf_alloc&pool=16]` (also
//! `leaf-mariadb://`; feature `mysql`): serves on Meituan Leaf's segment table as it is, so that
//! Leaf servers and floe servers can serve the same tags at the same time.
//!
//! - **Table:** Leaf's own, `leaf_alloc (biz_tag varchar(128) PRIMARY KEY, max_id bigint, step
//!   int, description, update_time)`, one row per tag. floe never creates it, nor a row in it:
//!   at start-up a table that is missing, or lacks `biz_tag` (the key), a signed `bigint`
//!   `max_id` or an integer `step`, is refused with a `Config` error naming it.
//! - **Allocation, Leaf's custom-step update in one statement:** `UPDATE leaf_alloc SET max_id
//!   = LAST_INSERT_ID(max_id + ?) WHERE biz_tag = ? AND` (the tag byte for byte) `AND max_id
//!   BETWEEN 1 AND ?`, its own transaction; the `max_id` written comes back in the answer
//!   (`LAST_INSERT_ID(expr)` sets the OK packet's insert ID). The row is locked only while the
//!   statement runs, so every reservation, Leaf's or floe's, gets its own range, and a floe
//!   node paused or cut off between two statements holds no lock that stalls the others
//!   (Leaf's `IDAllocDao` holds it from its update to its commit, two round trips later). A
//!   reservation of `n` owns Leaf's segment `[max_id - n, max_id)` of the `max_id` it wrote:
//!   it starts at the old `max_id` (a fresh row, `max_id` 1, starts at 1). So the last ID a
//!   tag can give is `i64::MAX - 1` (the `max_id` after it is `i64::MAX`); a reservation past
//!   it fails with `Exhausted` and changes nothing (the update is guarded: `AND max_id BETWEEN
//!   1 AND i64::MAX - n`). A row with `max_id` below 1 is refused as `Corrupt` (floe's IDs are
//!   positive); raise it with `bigger_than` or an `UPDATE`.
//! - **Registered tags only:** a tag with no row is refused with
//!   [`ErrorKind::UnknownKey`] (HTTP 404 `unknown_key`, gRPC `NOT_FOUND`) and nothing is
//!   inserted. Tags are matched byte for byte, as Leaf's tag cache does: under the table's
//!   case-insensitive collation `ORDERS` would find the row of `orders`, so every statement
//!   also compares the tag's bytes, and the tag is refused. Unlike Leaf (which re-reads the tags every 60 s), each
//!   reservation finds the row anew: a row inserted is served at once; a row deleted is refused once
//!   the segments already taken are used up.
//! - **`bigger_than` (raise):** `UPDATE ... SET max_id = GREATEST(max_id, floor + 1)`, one
//!   statement with the tag matched the same way: the next ID is above the floor, and `max_id`
//!   is never lowered. A floor of `i64::MAX` leaves the tag exhausted.
//! - **Segment sizes:** floe's step policy sizes every fetch, as on every store (`--step-min`,
//!   `--step-max`, `--step-target-secs`): the first fetch of a tag reserves `--step-min`, and
//!   the size doubles while a segment lasts less than the target, up to `--step-max` (default
//!   1,000,000, Leaf's own bound), and halves when it lasts more than twice as long. The row's
//!   `step` is Leaf's setting for Leaf's servers: floe reads it back with the row, as Leaf
//!   does, and leaves it alone. Leaf's rule (the row's step on a tag's first two loads, then
//!   doubling while a segment lasts under 15 minutes, never below the row's step) is matched by
//!   `--step-min` set to the tags' step and `--step-target-secs 900`. Sizes never matter for
//!   uniqueness: every reservation adds its own size to `max_id` under the row lock.
//! - **STRONG** is served: each STRONG increment is its own transaction on the row, so floe's
//!   STRONG IDs of a tag strictly increase in real time across every floe process, and each is
//!   above every segment reserved (by Leaf or floe) before it was asked for. Leaf serves from
//!   segments cached in its memory, so an ID a Leaf server returns *after* a floe STRONG ID may
//!   be smaller (it comes from a segment reserved earlier): across Leaf and floe, IDs are
//!   unique and trend upwards, never in one real-time order. Each STRONG increment costs one
//!   round trip; waiting requests share one.
//! - **Durable** with InnoDB's defaults; **TLS** and the pool as the `mysql://` store
//!   ([`super::mysql`]): `?ssl-mode=VERIFY_IDENTITY&ssl-ca=/path/ca.pem`, `?pool=16`.
//! - **Give back:** a tag's value is `max_id - 1` (the last ID reserved), so giving back
//!   `first ..= last` is `UPDATE leaf_alloc SET max_id = first WHERE biz_tag = ? AND max_id =
//!   last + 1` (the tag matched byte for byte, `first` at least 1): one statement under the
//!   row's lock, which Leaf's own update takes too, so a segment reserved since by Leaf or
//!   floe makes it change nothing; the next reservation, Leaf's or floe's, starts at `first`.
//! - **Admin calls: the registrations are the table's rows.** [`Store::value`] is the row's
//!   `max_id - 1` (0 for a fresh row); [`Store::keys`] and [`Store::registered`] list the
//!   rows' tags in byte order (of their UTF-8; tags that are no floe key, such as `''`, are
//!   left out), with their values; [`Store::is_registered`] is whether the tag has its row,
//!   byte for byte. [`Store::register`] inserts a row as Leaf's README does, `max_id` 1 and
//!   `step` [`REGISTERED_STEP`], and never touches an existing row; a tag that the column
//!   holds only as another one (its collation ignores case and trailing spaces, or it cuts a
//!   tag too long) is refused with `InvalidArgument`, and nothing is inserted.
//!   [`Store::unregister`] is `Unsupported`: a row deleted loses its `max_id`, and a tag
//!   added again starts at its new row's `max_id` (1), reissuing every ID it gave; Leaf's own
//!   servers serve the rows too, so floe leaves their deletion to SQL (once no Leaf or floe
//!   server serves the tag, with a `max_id` above every ID it gave if it may come back).

use async_trait::async_trait;
use floe_core::sequence::Key;
use sqlx::mysql::{MySqlDatabaseError, MySqlPool, MySqlRow};
use sqlx::{MySql, Row};

use std::sync::Arc;

use super::sql::{connect_mysql, map_err, page_limit, q, sql};
use crate::{ErrorKind, SeqError, Store};

/// The `step` of a row [`Store::register`] inserts: Leaf's README's (its table's `step` has no
/// default). Leaf's servers load segments of it; floe sizes its own by its step policy.
pub const REGISTERED_STEP: i32 = 2000;

/// Leaf's `leaf_alloc` table through a connection pool.
#[derive(Debug)]
pub struct LeafAllocStore {
    pool: MySqlPool,
    table: String,
    address: String,
    update: Arc<str>,
    select: Arc<str>,
    raise: Arc<str>,
    give_back: Arc<str>,
    page: Arc<str>,
    insert: Arc<str>,
}

/// A column floe needs, and the data types it accepts.
struct Needed {
    name: &'static str,
    types: &'static [&'static str],
    shown: &'static str,
}

const NEEDED: [Needed; 3] = [
    Needed {
        name: "biz_tag",
        types: &["varchar", "char", "varbinary", "binary"],
        shown: "biz_tag varchar(128) PRIMARY KEY",
    },
    Needed {
        name: "max_id",
        types: &["bigint"],
        shown: "max_id bigint",
    },
    Needed {
        name: "step",
        types: &["tinyint", "smallint", "mediumint", "int", "bigint"],
        shown: "step int",
    },
];

impl LeafAllocStore {
    /// Connects and checks that Leaf's table is there, with the columns floe uses.
    ///
    /// # Errors
    /// `Config` for a bad URL, refused credentials, an unknown database, or a table that is
    /// missing or lacks a column (naming the table and the column); `Unavailable` when the
    /// server does not answer.
    pub async fn connect(url: &str) -> Result<LeafAllocStore, SeqError> {
        let (pool, opts) = connect_mysql("leaf-mysql", url, "leaf_alloc").await?;
        let t = &opts.table;
        check_table(&pool, t).await?;
        Ok(LeafAllocStore {
            // One statement, its own transaction: the row is locked only while it runs, never
            // across a round trip to floe (a paused or cut-off floe node then stalls no
            // other). The new max_id comes back in the OK packet (LAST_INSERT_ID(expr)).
            update: sql(format!(
                "UPDATE {t} SET max_id = LAST_INSERT_ID(max_id + ?) WHERE biz_tag = ? AND {TAG_BYTES} = ? AND max_id BETWEEN 1 AND ?"
            )),
            select: sql(format!(
                "SELECT biz_tag, max_id, step FROM {t} WHERE biz_tag = ?"
            )),
            raise: sql(format!(
                "UPDATE {t} SET max_id = GREATEST(max_id, ?) WHERE biz_tag = ? AND {TAG_BYTES} = ?"
            )),
            // The tag matched byte for byte (of its UTF-8), the index found by `biz_tag = ?`.
            give_back: sql(format!(
                "UPDATE {t} SET max_id = ? WHERE biz_tag = ? AND {TAG_BYTES} = ? AND max_id = ?"
            )),
            page: sql(format!(
                "SELECT {TAG_BYTES}, max_id FROM {t} WHERE {TAG_BYTES} > ? ORDER BY {TAG_BYTES} LIMIT ?"
            )),
            insert: sql(format!(
                "INSERT INTO {t} (biz_tag, max_id, step) VALUES (?, 1, {REGISTERED_STEP})"
            )),
            pool,
            table: opts.table,
            address: opts.address,
        })
    }

    /// Where it connects (no credentials), for messages.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The table it serves on.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Maps sqlx's errors of a call on `key`. A key the column's character set cannot hold
    /// (MariaDB's "illegal mix of collations", `ключ` against a latin1 `biz_tag`) is no tag of
    /// the table: `UnknownKey`. The message is made only for an error: a reservation passes
    /// this to each of its statements.
    fn err<'a>(&'a self, what: &'a str, key: &'a Key) -> impl Fn(sqlx::Error) -> SeqError + 'a {
        move |e| match mysql_number(&e) {
            Some(1267 | 1270 | 1271) => self.unknown(key),
            _ => map_err(
                "leaf-mysql",
                &format!("{what} tag {:?} in {}", key.as_str(), self.table),
                e,
            ),
        }
    }

    fn unknown(&self, key: &Key) -> SeqError {
        SeqError::new(
            ErrorKind::UnknownKey,
            format!(
                "leaf-mysql: tag {:?} is not in {} (Leaf serves only the biz_tags of its table: insert its row to use it)",
                key.as_str(),
                self.table
            ),
        )
    }

    /// The key's `max_id` read through `ex`: `None` when no row is the key's, byte for byte.
    async fn row<'e>(
        &self,
        ex: impl sqlx::Executor<'e, Database = MySql>,
        key: &Key,
    ) -> Result<Option<i64>, SeqError> {
        let row: Option<MySqlRow> = sqlx::query(q(&self.select))
            .bind(key.as_str())
            .fetch_optional(ex)
            .await
            .map_err(self.err("read", key))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let tag: Vec<u8> = row.try_get(0).map_err(self.err("read", key))?;
        if tag != key.as_str().as_bytes() {
            return Ok(None);
        }
        row.try_get(1).map(Some).map_err(self.err("read", key))
    }

    /// The key's `max_id`, `None` without its row; a key the column cannot hold has none.
    async fn max_id(&self, key: &Key) -> Result<Option<i64>, SeqError> {
        match self.row(&self.pool, key).await {
            Err(e) if e.kind == ErrorKind::UnknownKey => Ok(None),
            found => found,
        }
    }

    /// The value of a row of `max_id`: the last ID reserved, `max_id - 1`.
    fn value_of(&self, tag: &str, max_id: i64) -> Result<i64, SeqError> {
        max_id.checked_sub(1).ok_or_else(|| {
            SeqError::new(
                ErrorKind::Corrupt,
                format!(
                    "leaf-mysql: tag {tag:?} has max_id {max_id} in {}: floe's IDs start at 1",
                    self.table
                ),
            )
        })
    }

    /// A page of the table's tags that are floe keys, in byte order, after `after`: at most
    /// `limit`, each with its value. Rows whose tag is no key are passed over, reading on
    /// until the page is full or the table ends.
    async fn page(&self, after: Option<&Key>, limit: usize) -> Result<Vec<(Key, i64)>, SeqError> {
        let mut from = after.map_or_else(Vec::new, |k| k.as_str().as_bytes().to_vec());
        let mut page = Vec::new();
        while page.len() < limit {
            let want = limit - page.len();
            let rows: Vec<(Vec<u8>, i64)> = sqlx::query_as(q(&self.page))
                .bind(from.as_slice())
                .bind(page_limit(want))
                .fetch_all(&self.pool)
                .await
                .map_err(|e| {
                    map_err("leaf-mysql", &format!("list the tags of {}", self.table), e)
                })?;
            let end = rows.len() < want;
            for (tag, max_id) in rows {
                let key = std::str::from_utf8(&tag)
                    .ok()
                    .and_then(|t| Key::new(t).ok());
                if let Some(key) = key {
                    let value = self.value_of(key.as_str(), max_id)?;
                    page.push((key, value));
                }
                from = tag;
            }
            if end {
                break;
            }
        }
        Ok(page)
    }

    /// `register`'s insert and check in one transaction: whether the row is new.
    async fn insert(&self, key: &Key) -> Result<bool, SeqError> {
        let refuse = |why: &str| {
            SeqError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "leaf-mysql: cannot register tag {:?} in {}: {why}",
                    key.as_str(),
                    self.table
                ),
            )
        };
        let mut tx = self.pool.begin().await.map_err(self.err("begin on", key))?;
        let inserted = sqlx::query(q(&self.insert))
            .bind(key.as_str())
            .execute(&mut *tx)
            .await;
        let new = match inserted {
            Ok(_) => true,
            Err(e) => match mysql_number(&e) {
                Some(1062) => false, // a row of the tag, or of one equal under its collation
                Some(1406) => return Err(refuse("it is longer than the biz_tag column")),
                Some(1267 | 1270 | 1271 | 1366) => {
                    return Err(refuse("the biz_tag column's character set cannot hold it"))
                }
                Some(1364) => {
                    return Err(SeqError::config(format!(
                        "leaf-mysql: cannot register tag {:?} in {}: the table has a column with no default besides biz_tag, max_id and step, the columns floe fills (as Leaf's DDL has none)",
                        key.as_str(),
                        self.table
                    )))
                }
                _ => return Err(self.err("insert", key)(e)),
            },
        };
        // Byte for byte: a collation that ignores case or trailing spaces finds another tag's
        // row, and a lax SQL mode cuts a tag too long and inserts the rest.
        if self.row(&mut *tx, key).await?.is_none() {
            return Err(refuse(
                "the biz_tag column holds it only as another tag (its collation ignores case and trailing spaces, or it cuts a tag too long); nothing was inserted",
            ));
        }
        tx.commit().await.map_err(self.err("commit on", key))?;
        Ok(new)
    }
}

/// The server's error number of a MySQL error.
fn mysql_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number),
        _ => None,
    }
}

/// A tag as the bytes of its UTF-8, whatever the column's character set and collation: what
/// floe's keys are compared and ordered by.
const TAG_BYTES: &str = "CAST(CONVERT(biz_tag USING utf8mb4) AS BINARY)";

/// Checks that `table` is in the connection's database with the columns of [`NEEDED`].
async fn check_table(pool: &MySqlPool, table: &str) -> Result<(), SeqError> {
    let db: Option<String> = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(pool)
        .await
        .map_err(|e| map_err("leaf-mysql", "read the database name", e))?;
    let Some(db) = db else {
        return Err(SeqError::config(format!(
            "leaf-mysql: the URL names no database: the database of table {table} is needed (leaf-mysql://user@host:port/DB)"
        )));
    };
    let columns: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT CAST(COLUMN_NAME AS CHAR), CAST(DATA_TYPE AS CHAR), CAST(COLUMN_TYPE AS CHAR), CAST(COLUMN_KEY AS CHAR) \
         FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .map_err(|e| map_err("leaf-mysql", &format!("read the columns of {table}"), e))?;
    if columns.is_empty() {
        return Err(SeqError::config(format!(
            "leaf-mysql: table {table} does not exist in database {db}: floe serves on Leaf's table and never creates it (create it with Leaf's scripts/leaf_alloc.sql, one row per biz_tag, or name another with ?table=)"
        )));
    }
    let mut wrong = Vec::new();
    for need in &NEEDED {
        let found = columns
            .iter()
            .find(|(name, ..)| name.eq_ignore_ascii_case(need.name));
        match found {
            None => wrong.push(format!("no column {}", need.name)),
            Some((_, data_type, column_type, key)) => {
                let data_type = data_type.to_ascii_lowercase();
                if !need.types.contains(&data_type.as_str())
                    || column_type.to_ascii_lowercase().contains("unsigned")
                {
                    wrong.push(format!("column {} is {column_type}", need.name));
                } else if need.name == "biz_tag" && key != "PRI" && key != "UNI" {
                    wrong.push("column biz_tag is not its primary key".to_string());
                }
            }
        }
    }
    if wrong.is_empty() {
        return Ok(());
    }
    let expected: Vec<_> = NEEDED.iter().map(|n| n.shown).collect();
    Err(SeqError::config(format!(
        "leaf-mysql: table {table} of database {db} is not Leaf's leaf_alloc: {}; expected {}",
        wrong.join(", "),
        expected.join(", ")
    )))
}

#[async_trait]
impl Store for LeafAllocStore {
    fn kind(&self) -> &'static str {
        "leaf-mysql"
    }

    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        let done = sqlx::query(q(&self.update))
            .bind(i64::from(n))
            .bind(key.as_str())
            .bind(key.as_str().as_bytes())
            .bind(i64::MAX - i64::from(n))
            .execute(&self.pool)
            .await
            .map_err(self.err("reserve on", key))?;
        if done.rows_affected() == 1 {
            // The max_id the update wrote: the segment is [max_id - n, max_id), its last ID
            // max_id - 1 (max_id >= 1 + n).
            return i64::try_from(done.last_insert_id())
                .ok()
                .filter(|m| *m > i64::from(n))
                .map(|m| m - 1)
                .ok_or_else(|| {
                    SeqError::new(
                        ErrorKind::Corrupt,
                        format!(
                            "leaf-mysql: the server answered max_id {} to a reservation of {n} of tag {:?}",
                            done.last_insert_id(),
                            key.as_str()
                        ),
                    )
                });
        }
        // Nothing changed: why, read after (no row of the tag byte for byte, a max_id below
        // 1, or too high to add `n`).
        let Some(max_id) = self.max_id(key).await? else {
            return Err(self.unknown(key));
        };
        {
            Err(if max_id < 1 {
                SeqError::new(
                    ErrorKind::Corrupt,
                    format!(
                        "leaf-mysql: tag {:?} has max_id {max_id} in {}: floe's IDs start at 1 (raise its max_id)",
                        key.as_str(),
                        self.table
                    ),
                )
            } else {
                SeqError::exhausted("leaf-mysql", key.as_str())
            })
        }
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        // One statement, as a reservation: no row lock across a round trip.
        let done = sqlx::query(q(&self.raise))
            .bind(floor.saturating_add(1))
            .bind(key.as_str())
            .bind(key.as_str().as_bytes())
            .execute(&self.pool)
            .await
            .map_err(self.err("raise", key))?;
        // Rows matched (sqlx asks for found rows): none, no row is the tag's.
        if done.rows_affected() == 0 {
            return Err(self.unknown(key));
        }
        Ok(())
    }

    async fn durability(&self) -> crate::Durability {
        super::sql::mysql_durability(&self.pool).await
    }

    async fn ping(&self) -> Result<(), SeqError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| map_err("leaf-mysql", "ping", e))
    }

    async fn give_back(&self, key: &Key, first: i64, last: i64) -> Result<bool, SeqError> {
        // The row's max_id is one past the key's value: `first` (at least 1) after it.
        let (Some(_), Some(max_id)) = (
            crate::store::given_back_value(first, last),
            last.checked_add(1),
        ) else {
            return Ok(false);
        };
        let done = sqlx::query(q(&self.give_back))
            .bind(first)
            .bind(key.as_str())
            .bind(key.as_str().as_bytes())
            .bind(max_id)
            .execute(&self.pool)
            .await;
        match done {
            // Rows matched (sqlx asks for found rows): the tag's row, at `last + 1`.
            Ok(done) => Ok(done.rows_affected() == 1),
            Err(e) => match self.err(&format!("give back {first}..={last} of"), key)(e) {
                // No row can be the tag's: nothing to give back to.
                e if e.kind == ErrorKind::UnknownKey => Ok(false),
                e => Err(e),
            },
        }
    }

    async fn value(&self, key: &Key) -> Result<Option<i64>, SeqError> {
        self.max_id(key)
            .await?
            .map(|max_id| self.value_of(key.as_str(), max_id))
            .transpose()
    }

    async fn keys(&self, after: Option<&Key>, limit: usize) -> Result<Vec<(Key, i64)>, SeqError> {
        self.page(after, limit).await
    }

    async fn is_registered(&self, key: &Key) -> Result<bool, SeqError> {
        Ok(self.max_id(key).await?.is_some())
    }

    async fn register(&self, key: &Key) -> Result<bool, SeqError> {
        self.insert(key).await
    }

    async fn unregister(&self, key: &Key) -> Result<bool, SeqError> {
        Err(SeqError::new(
            ErrorKind::Unsupported,
            format!(
                "leaf-mysql: cannot unregister tag {:?}: its registration is its row of {t}, which holds its max_id and which Leaf's servers serve too. Delete it with SQL (DELETE FROM {t} WHERE biz_tag = ...) once no Leaf or floe server serves the tag: a tag added again starts at its new row's max_id, so give that row a max_id above every ID the tag issued",
                key.as_str(),
                t = self.table
            ),
        ))
    }

    async fn registered(&self, after: Option<&Key>, limit: usize) -> Result<Vec<Key>, SeqError> {
        Ok(self
            .page(after, limit)
            .await?
            .into_iter()
            .map(|(k, _)| k)
            .collect())
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
