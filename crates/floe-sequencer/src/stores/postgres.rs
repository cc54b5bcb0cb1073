//! `postgres://user[:password]@host:port/db[?table=floe_sequences&pool=16]`: one row per key.
//!
//! - **Table** (created if missing): `floe_sequences (key TEXT PRIMARY KEY, value BIGINT)`,
//!   holding the last value reserved.
//! - **Reserve:** `UPDATE ... SET value = value + n WHERE key = $1 AND value <= i64::MAX - n
//!   RETURNING value`, one statement and one round trip, atomic under any isolation level. A
//!   missing row is inserted at 0 (`ON CONFLICT DO NOTHING`, so racing processes agree) and the
//!   update runs again; an update that still matches nothing means the key is exhausted.
//! - **Durable** with PostgreSQL's defaults (`fsync`, `synchronous_commit = on`): an ID is
//!   returned only after its commit.
//! - **TLS** as the URL asks, with sqlx's own parameters (rustls, ring):
//!   `?sslmode=require` (encrypted, the certificate not checked), `verify-ca` (checked against
//!   the CA), `verify-full` (and the host name); `&sslrootcert=/path/ca.pem` names a private
//!   CA (default: the system's roots). The default, `prefer`, uses TLS when the server offers it.
//! - **Give back:** `UPDATE ... SET value = first - 1 WHERE key = $1 AND value = last`: the
//!   comparison and the write are one statement under the row's lock, so a reservation by any
//!   process either came before it (the value is no longer `last`: nothing changes) or after.
//! - **Registered keys** are kept apart from the values, in `{table}_registered
//!   (registered_key TEXT COLLATE "C" PRIMARY KEY)`, created beside the table of values if
//!   missing (not when its name would pass PostgreSQL's 63 bytes: registration calls then
//!   fail with `Unsupported`, the values work on). Unregistering deletes the key's row there
//!   only: its value is kept. Pages of keys (`keys`, `registered`) are in byte order (`COLLATE
//!   "C"`), whatever the database's collation; the table of values is sorted for it unless
//!   its collation is `C` already (an admin call, not the request path).

use async_trait::async_trait;
use floe_core::sequence::Key;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::Row;

use std::sync::Arc;

use super::sql::{
    map_err, options, page_limit, q, reserve_row, sql, Registered, Server, ACQUIRE_TIMEOUT,
};
use crate::store::stored_key;
use crate::{SeqError, Store};

/// A PostgreSQL database through a connection pool (which replaces broken connections, so the
/// store recovers by itself after a server restart).
#[derive(Debug)]
pub struct PostgresStore {
    pool: PgPool,
    table: String,
    address: String,
    update: Arc<str>,
    insert: Arc<str>,
    raise: Arc<str>,
    value: Arc<str>,
    give_back: Arc<str>,
    keys: Arc<str>,
    /// The table of registered keys and its statements, or why there is none.
    registered: Result<Registered, SeqError>,
}

impl PostgresStore {
    /// Connects and creates the table if it is missing.
    ///
    /// # Errors
    /// `Config` for a bad URL, refused credentials or an unknown database; `Unavailable` when
    /// the server does not answer.
    pub async fn connect(url: &str) -> Result<PostgresStore, SeqError> {
        let opts = options(url, "floe_sequences")?;
        let pool = PgPoolOptions::new()
            .max_connections(opts.pool)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect(&opts.url)
            .await
            .map_err(|e| {
                map_err(
                    "postgres",
                    &format!("cannot connect to {}", opts.address),
                    e,
                )
            })?;
        let t = &opts.table;
        let store = PostgresStore {
            update: sql(format!(
                "UPDATE {t} SET value = value + $2 WHERE key = $1 AND value <= $3 RETURNING value"
            )),
            insert: sql(format!(
                "INSERT INTO {t} (key, value) VALUES ($1, 0) ON CONFLICT (key) DO NOTHING"
            )),
            raise: sql(format!(
                "INSERT INTO {t} (key, value) VALUES ($1, GREATEST($2, 0)) ON CONFLICT (key) DO UPDATE SET value = GREATEST({t}.value, EXCLUDED.value)"
            )),
            value: sql(format!("SELECT value FROM {t} WHERE key = $1")),
            give_back: sql(format!(
                "UPDATE {t} SET value = $3 WHERE key = $1 AND value = $2"
            )),
            // "" is below every key (keys are not empty).
            keys: sql(format!(
                "SELECT key, value FROM {t} WHERE key COLLATE \"C\" > $1 ORDER BY key COLLATE \"C\" LIMIT $2"
            )),
            registered: Registered::beside("postgres", t, Server::Postgres),
            pool,
            table: opts.table,
            address: opts.address,
        };
        store
            .create_table(&sql(format!(
                "CREATE TABLE IF NOT EXISTS {} (key TEXT PRIMARY KEY, value BIGINT NOT NULL)",
                store.table
            )))
            .await?;
        if let Ok(r) = &store.registered {
            store.create_table(&r.create).await?;
        }
        Ok(store)
    }

    /// Runs `CREATE TABLE IF NOT EXISTS` `create` (on a checked table name).
    async fn create_table(&self, create: &Arc<str>) -> Result<(), SeqError> {
        // Two processes creating it at once can collide in the catalog: the loser tries again
        // and finds it there.
        if let Err(first) = sqlx::query(q(create)).execute(&self.pool).await {
            sqlx::query(q(create))
                .execute(&self.pool)
                .await
                .map_err(|_| map_err("postgres", &format!("cannot run {create}"), first))?;
        }
        Ok(())
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
            .bind(key.as_str())
            .execute(&self.pool)
            .await
            .map(|done| done.rows_affected())
            .map_err(|e| {
                map_err(
                    "postgres",
                    &format!("{what} key {:?} in {}", key.as_str(), r.table),
                    e,
                )
            })
    }

    async fn update(&self, key: &Key, n: u32) -> Result<Option<i64>, SeqError> {
        let row = sqlx::query(q(&self.update))
            .bind(key.as_str())
            .bind(i64::from(n))
            .bind(i64::MAX - i64::from(n))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| {
                map_err(
                    "postgres",
                    &format!("reserve {n} of key {:?}", key.as_str()),
                    e,
                )
            })?;
        Ok(row.map(|r| r.get::<i64, _>(0)))
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        let insert = async {
            sqlx::query(q(&self.insert))
                .bind(key.as_str())
                .execute(&self.pool)
                .await
                .map(drop)
                .map_err(|e| map_err("postgres", &format!("create key {:?}", key.as_str()), e))
        };
        reserve_row("postgres", key, || self.update(key, n), insert).await
    }

    async fn durability(&self) -> crate::Durability {
        super::sql::postgres_durability(&self.pool).await
    }

    async fn ping(&self) -> Result<(), SeqError> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| map_err("postgres", "ping", e))
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        sqlx::query(q(&self.raise))
            .bind(key.as_str())
            .bind(floor)
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| map_err("postgres", &format!("raise key {:?}", key.as_str()), e))
    }

    async fn give_back(&self, key: &Key, first: i64, last: i64) -> Result<bool, SeqError> {
        let Some(before) = crate::store::given_back_value(first, last) else {
            return Ok(false);
        };
        let done = sqlx::query(q(&self.give_back))
            .bind(key.as_str())
            .bind(last)
            .bind(before)
            .execute(&self.pool)
            .await
            .map_err(|e| {
                map_err(
                    "postgres",
                    &format!("give back {first}..={last} of key {:?}", key.as_str()),
                    e,
                )
            })?;
        Ok(done.rows_affected() == 1)
    }

    async fn value(&self, key: &Key) -> Result<Option<i64>, SeqError> {
        sqlx::query_scalar(q(&self.value))
            .bind(key.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map_err("postgres", &format!("read key {:?}", key.as_str()), e))
    }

    async fn keys(&self, after: Option<&Key>, limit: usize) -> Result<Vec<(Key, i64)>, SeqError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let rows: Vec<(String, i64)> = sqlx::query_as(q(&self.keys))
            .bind(after.map_or("", Key::as_str))
            .bind(page_limit(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map_err("postgres", &format!("list the keys of {}", self.table), e))?;
        rows.into_iter()
            .map(|(k, v)| {
                let k = stored_key(
                    "postgres",
                    format_args!("table {}", self.table),
                    k.as_bytes(),
                )?;
                Ok((k, v))
            })
            .collect()
    }

    async fn is_registered(&self, key: &Key) -> Result<bool, SeqError> {
        let r = self.registrations()?;
        let found = sqlx::query(q(&r.is))
            .bind(key.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| {
                map_err(
                    "postgres",
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
        let rows: Vec<String> = sqlx::query_scalar(q(&r.page))
            .bind(after.map_or("", Key::as_str))
            .bind(page_limit(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| map_err("postgres", &format!("list the keys of {}", r.table), e))?;
        rows.into_iter()
            .map(|k| stored_key("postgres", format_args!("table {}", r.table), k.as_bytes()))
            .collect()
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}

impl PostgresStore {
    /// Where it connects (no credentials), for messages.
    pub fn address(&self) -> &str {
        &self.address
    }
}
