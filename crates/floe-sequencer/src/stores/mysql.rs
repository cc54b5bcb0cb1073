//! `mysql://user[:password]@host:port/db[?table=floe_sequences&pool=16]`: one row per key, on
//! MySQL or MariaDB (which has no `UPDATE ... RETURNING`).
//!
//! - **Table** (created if missing, InnoDB): `floe_sequences (k VARBINARY(255) PRIMARY KEY,
//!   value BIGINT)`. Binary, so keys compare byte for byte, not by a case-insensitive collation.
//! - **Reserve:** `UPDATE ... SET value = LAST_INSERT_ID(value + n) WHERE k = ? AND value <=
//!   i64::MAX - n`. The server sends the new value back in the statement's OK packet (the
//!   connection's last insert ID), so an increment is one statement and one round trip, with no
//!   `SELECT LAST_INSERT_ID()` after it. A missing row is inserted at 0 (`INSERT IGNORE`) and
//!   the update runs again; one that still matches nothing means the key is exhausted.
//! - **Durable** with InnoDB's defaults (`innodb_flush_log_at_trx_commit = 1`).
//! - **TLS** as the URL asks, with sqlx's own parameters (rustls, ring):
//!   `?ssl-mode=REQUIRED` (encrypted, the certificate not checked), `VERIFY_CA` (checked against
//!   the CA), `VERIFY_IDENTITY` (and the host name); `&ssl-ca=/path/ca.pem` names a private CA
//!   (default: the system's roots). The default, `PREFERRED`, uses TLS when the server offers it.
//! - **Give back:** `UPDATE ... SET value = first - 1 WHERE k = ? AND value = last`: the
//!   comparison and the write are one statement under the row's lock, so a reservation by any
//!   process either came before it (the value is no longer `last`: nothing changes) or after.
//! - **Registered keys** are kept apart from the values, in `{table}_registered
//!   (registered_key VARBINARY(255) PRIMARY KEY)` (InnoDB), created beside the table of values
//!   if missing (not when its name would pass MySQL's 64 characters: registration calls then
//!   fail with `Unsupported`, the values work on). Unregistering deletes the key's row there
//!   only: its value is kept. Both tables are binary, so pages of keys (`keys`, `registered`)
//!   are one range of their primary key, in byte order.
//!
//! **Taking over from Layotto: `?from_layotto=APP[&layotto_table=layotto_sequencer]`.**
//! Layotto's MySQL component keeps `layotto_sequencer (sequencer_key VARCHAR(255),
//! sequencer_value INT)`, one row per stored key (as in [`super::layotto`]). As shipped it
//! cannot run (it never opens its database, names its table with a `?` placeholder, and
//! writes `+=`), so a table of it holds what a fixed copy, or an operator, wrote. At start-up
//! floe lifts each of its own keys to at least the `sequencer_value` of the app's row, and
//! continues above it: that value is at least every ID such a component gave (its
//! `GetNextId` returns the value it read before adding one). Every start does it again (it
//! never lowers a key); Layotto's table is only read. Not safe beside a Layotto that still
//! writes that table: it counts in its own rows, not in floe's. The admin calls and give-backs
//! work on floe's own table, as without the option.

use async_trait::async_trait;
use floe_core::sequence::Key;
use sqlx::mysql::MySqlPool;

use std::sync::Arc;

use floe_core::endpoint::take_options;

use super::layotto::{key_prefix, take_over};
use super::sql::{connect_mysql, map_err, page_limit, q, reserve_row, sql, Registered, Server};
use crate::store::stored_key;
use crate::{check_table, SeqError, Store};

/// A MySQL or MariaDB database through a connection pool.
#[derive(Debug)]
pub struct MysqlStore {
    pool: MySqlPool,
    address: String,
    table: String,
    update: Arc<str>,
    insert: Arc<str>,
    raise: Arc<str>,
    value: Arc<str>,
    give_back: Arc<str>,
    keys: Arc<str>,
    /// The table of registered keys and its statements, or why there is none.
    registered: Result<Registered, SeqError>,
}

impl MysqlStore {
    /// Connects and creates the table if it is missing.
    ///
    /// # Errors
    /// `Config` for a bad URL, refused credentials or an unknown database; `Unavailable` when
    /// the server does not answer.
    pub async fn connect(url: &str) -> Result<MysqlStore, SeqError> {
        let (url, own) = take_options(url, &["from_layotto", "layotto_table"]);
        let (mut from_layotto, mut layotto_table) = (None, None);
        for (name, value) in own {
            match name {
                "from_layotto" => from_layotto = Some(key_prefix(name, &value)?),
                _ => {
                    check_table(&value)?;
                    layotto_table = Some(value);
                }
            }
        }
        if layotto_table.is_some() && from_layotto.is_none() {
            return Err(SeqError::config(
                "store: mysql: layotto_table goes with from_layotto=APP",
            ));
        }
        let (pool, opts) = connect_mysql("mysql", &url, "floe_sequences").await?;
        let t = &opts.table;
        let create = sql(format!(
            "CREATE TABLE IF NOT EXISTS {t} (k VARBINARY(255) NOT NULL PRIMARY KEY, value BIGINT NOT NULL) ENGINE=InnoDB"
        ));
        sqlx::query(q(&create))
            .execute(&pool)
            .await
            .map_err(|e| map_err("mysql", &format!("cannot create table {}", opts.table), e))?;
        let registered = Registered::beside("mysql", t, Server::Mysql);
        if let Ok(r) = &registered {
            sqlx::query(q(&r.create))
                .execute(&pool)
                .await
                .map_err(|e| map_err("mysql", &format!("cannot create table {}", r.table), e))?;
        }
        let store = MysqlStore {
            update: sql(format!(
                "UPDATE {t} SET value = LAST_INSERT_ID(value + ?) WHERE k = ? AND value <= ?"
            )),
            insert: sql(format!("INSERT IGNORE INTO {t} (k, value) VALUES (?, 0)")),
            raise: sql(format!(
                "INSERT INTO {t} (k, value) VALUES (?, GREATEST(?, 0)) ON DUPLICATE KEY UPDATE value = GREATEST(value, VALUES(value))"
            )),
            value: sql(format!("SELECT value FROM {t} WHERE k = ?")),
            give_back: sql(format!(
                "UPDATE {t} SET value = ? WHERE k = ? AND value = ?"
            )),
            // '' is below every key (keys are not empty).
            keys: sql(format!(
                "SELECT k, value FROM {t} WHERE k > ? ORDER BY k LIMIT ?"
            )),
            registered,
            pool,
            address: opts.address,
            table: opts.table,
        };
        if let Some(prefix) = from_layotto {
            let table = layotto_table.unwrap_or_else(|| "layotto_sequencer".into());
            store.take_over(&prefix, &table).await?;
        }
        Ok(store)
    }

    /// `?from_layotto=`: lifts floe's keys to Layotto's values (see the module docs).
    async fn take_over(&self, prefix: &str, table: &str) -> Result<(), SeqError> {
        let read = sql(format!(
            "SELECT sequencer_key, sequencer_value FROM {table} WHERE sequencer_key IS NOT NULL AND sequencer_value IS NOT NULL"
        ));
        let rows: Vec<(Vec<u8>, i64)> = sqlx::query_as(q(&read))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map_err("mysql", &format!("read Layotto's table {table}"), e))?;
        take_over(self, prefix, rows).await.map(drop)
    }

    /// Where it connects (no credentials), for messages.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The table of registered keys, or why there is none.
    fn registrations(&self) -> Result<&Registered, SeqError> {
        self.registered.as_ref().map_err(Clone::clone)
    }

    /// Runs `text` (a registration statement) on `key`: how many rows it touched.
    async fn registration(
        &self,
        what: &str,
        text: impl Fn(&Registered) -> &Arc<str>,
        key: &Key,
    ) -> Result<u64, SeqError> {
        let r = self.registrations()?;
        sqlx::query(q(text(r)))
            .bind(key.as_str().as_bytes())
            .execute(&self.pool)
            .await
            .map(|done| done.rows_affected())
            .map_err(|e| {
                map_err(
                    "mysql",
                    &format!("{what} key {:?} in {}", key.as_str(), r.table),
                    e,
                )
            })
    }

    async fn update(&self, key: &Key, n: u32) -> Result<Option<i64>, SeqError> {
        let done = sqlx::query(q(&self.update))
            .bind(i64::from(n))
            .bind(key.as_str().as_bytes())
            .bind(i64::MAX - i64::from(n))
            .execute(&self.pool)
            .await
            .map_err(|e| {
                map_err(
                    "mysql",
                    &format!("reserve {n} of key {:?}", key.as_str()),
                    e,
                )
            })?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
        Ok(Some(done.last_insert_id() as i64))
    }
}

#[async_trait]
impl Store for MysqlStore {
    fn kind(&self) -> &'static str {
        "mysql"
    }

    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        let insert = async {
            sqlx::query(q(&self.insert))
                .bind(key.as_str().as_bytes())
                .execute(&self.pool)
                .await
                .map(drop)
                .map_err(|e| map_err("mysql", &format!("create key {:?}", key.as_str()), e))
        };
        reserve_row("mysql", key, || self.update(key, n), insert).await
    }

    async fn durability(&self) -> crate::Durability {
        super::sql::mysql_durability(&self.pool).await
    }

    async fn ping(&self) -> Result<(), SeqError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| map_err("mysql", "ping", e))
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        sqlx::query(q(&self.raise))
            .bind(key.as_str().as_bytes())
            .bind(floor)
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| map_err("mysql", &format!("raise key {:?}", key.as_str()), e))
    }

    async fn give_back(&self, key: &Key, first: i64, last: i64) -> Result<bool, SeqError> {
        let Some(before) = crate::store::given_back_value(first, last) else {
            return Ok(false);
        };
        let done = sqlx::query(q(&self.give_back))
            .bind(before)
            .bind(key.as_str().as_bytes())
            .bind(last)
            .execute(&self.pool)
            .await
            .map_err(|e| {
                map_err(
                    "mysql",
                    &format!("give back {first}..={last} of key {:?}", key.as_str()),
                    e,
                )
            })?;
        // Rows matched (sqlx asks for found rows): the one row, whose value was `last`.
        Ok(done.rows_affected() == 1)
    }

    async fn value(&self, key: &Key) -> Result<Option<i64>, SeqError> {
        sqlx::query_scalar(q(&self.value))
            .bind(key.as_str().as_bytes())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map_err("mysql", &format!("read key {:?}", key.as_str()), e))
    }

    async fn keys(&self, after: Option<&Key>, limit: usize) -> Result<Vec<(Key, i64)>, SeqError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let rows: Vec<(Vec<u8>, i64)> = sqlx::query_as(q(&self.keys))
            .bind(after.map_or(&b""[..], |k| k.as_str().as_bytes()))
            .bind(page_limit(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map_err("mysql", &format!("list the keys of {}", self.table), e))?;
        rows.into_iter()
            .map(|(k, v)| {
                Ok((
                    stored_key("mysql", format_args!("table {}", self.table), &k)?,
                    v,
                ))
            })
            .collect()
    }

    async fn is_registered(&self, key: &Key) -> Result<bool, SeqError> {
        let r = self.registrations()?;
        let found = sqlx::query(q(&r.is))
            .bind(key.as_str().as_bytes())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| {
                map_err(
                    "mysql",
                    &format!("read key {:?} in {}", key.as_str(), r.table),
                    e,
                )
            })?;
        Ok(found.is_some())
    }

    async fn register(&self, key: &Key) -> Result<bool, SeqError> {
        Ok(self.registration("register", |r| &r.insert, key).await? == 1)
    }

    async fn unregister(&self, key: &Key) -> Result<bool, SeqError> {
        Ok(self.registration("unregister", |r| &r.delete, key).await? == 1)
    }

    async fn registered(&self, after: Option<&Key>, limit: usize) -> Result<Vec<Key>, SeqError> {
        let r = self.registrations()?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let rows: Vec<Vec<u8>> = sqlx::query_scalar(q(&r.page))
            .bind(after.map_or(&b""[..], |k| k.as_str().as_bytes()))
            .bind(page_limit(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map_err("mysql", &format!("list the keys of {}", r.table), e))?;
        rows.into_iter()
            .map(|k| stored_key("mysql", format_args!("table {}", r.table), &k))
            .collect()
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
