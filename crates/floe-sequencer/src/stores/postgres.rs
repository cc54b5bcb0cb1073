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

use async_trait::async_trait;
use floe_core::sequence::Key;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::Row;

use std::sync::Arc;

use super::sql::{map_err, options, q, reserve_row, sql, ACQUIRE_TIMEOUT};
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
            pool,
            table: opts.table,
            address: opts.address,
        };
        store.create_table().await?;
        Ok(store)
    }

    async fn create_table(&self) -> Result<(), SeqError> {
        let create = sql(format!(
            "CREATE TABLE IF NOT EXISTS {} (key TEXT PRIMARY KEY, value BIGINT NOT NULL)",
            self.table
        ));
        // Two processes creating it at once can collide in the catalog: the loser tries again
        // and finds it there.
        if let Err(first) = sqlx::query(q(&create)).execute(&self.pool).await {
            sqlx::query(q(&create))
                .execute(&self.pool)
                .await
                .map_err(|_| {
                    map_err(
                        "postgres",
                        &format!("cannot create table {}", self.table),
                        first,
                    )
                })?;
        }
        Ok(())
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
