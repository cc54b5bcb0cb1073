//! What the SQL stores share (PostgreSQL, MySQL, Leaf's `leaf_alloc`): URL options, the MySQL
//! connection, the mapping of sqlx's errors, and the table of registered keys beside a table
//! of values.

use std::sync::Arc;
use std::time::Duration;

use floe_core::sequence::Key;
use sqlx::AssertSqlSafe;

use floe_core::endpoint::take_options;

use crate::{check_table, ErrorKind, SeqError};

/// floe's own options of a SQL URL (`?table=floe_sequences&pool=16`), taken out of it.
#[derive(Debug)]
pub(crate) struct SqlOptions {
    pub url: String,
    pub table: String,
    pub pool: u32,
    pub address: String,
}

/// Reads floe's options (the table `table` unless the URL names one); `address` is the URL
/// without credentials or query, for messages.
pub(crate) fn options(url: &str, table: &str) -> Result<SqlOptions, SeqError> {
    let (rest, own) = take_options(url, &["table", "pool"]);
    let mut opts = SqlOptions {
        address: address(&rest),
        url: rest,
        table: table.into(),
        pool: 16,
    };
    for (name, value) in own {
        match name {
            "table" => {
                check_table(&value)?;
                opts.table = value;
            }
            _ => {
                opts.pool = value
                    .parse()
                    .ok()
                    .filter(|p| (1..=1024).contains(p))
                    .ok_or_else(|| {
                        SeqError::config(format!(
                            "store: pool must be 1 to 1024 connections, found {value:?}"
                        ))
                    })?;
            }
        }
    }
    Ok(opts)
}

fn address(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.rsplit_once('@').map(|(_, r)| r).unwrap_or(rest);
    let rest = rest.split('?').next().unwrap_or(rest);
    format!("{scheme}://{rest}")
}

/// Connects a pool to the MySQL or MariaDB server of `url`, whatever its scheme says
/// (`mysql://`, `mariadb://`, `leaf-mysql://`, ...): sqlx reads the rest, TLS parameters
/// included (`ssl-mode`, `ssl-ca`). `store` names the store in messages; `table` is the
/// default of `?table=`.
#[cfg(feature = "mysql")]
pub(crate) async fn connect_mysql(
    store: &str,
    url: &str,
    table: &str,
) -> Result<(sqlx::mysql::MySqlPool, SqlOptions), SeqError> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("mysql", url));
    let mut opts = options(&format!("mysql://{rest}"), table)?;
    opts.address = opts.address.replacen("mysql", scheme, 1);
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(opts.pool)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect(&opts.url)
        .await
        .map_err(|e| map_err(store, &format!("cannot connect to {}", opts.address), e))?;
    Ok((pool, opts))
}

/// How long a caller waits for a pooled connection (or a new one) before `Unavailable`.
pub(crate) const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// Maps sqlx's errors: connection and server trouble is temporary; refused credentials and
/// unknown databases are configuration errors.
pub(crate) fn map_err(store: &str, what: &str, e: sqlx::Error) -> SeqError {
    let kind = match &e {
        sqlx::Error::Configuration(_) => ErrorKind::Config,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            let code = code.as_ref();
            if code.starts_with("28")          // PostgreSQL: invalid authorization
                || code.starts_with("3D")      // PostgreSQL: invalid catalog name
                || code.starts_with("42")      // PostgreSQL: syntax, privileges, undefined
                || matches!(code, "1044" | "1045" | "1049" | "1054" | "1142" | "1146")
            // MySQL: access denied, unknown database, column or table
            {
                ErrorKind::Config
            } else {
                ErrorKind::Unavailable
            }
        }
        _ => ErrorKind::Unavailable,
    };
    SeqError::new(kind, format!("{store}: {what}: {e}"))
}

/// A statement built once from a checked table name ([`crate::check_table`]): safe to run.
pub(crate) fn sql(text: String) -> Arc<str> {
    text.into()
}

/// Hands a statement built by [`sql`] to sqlx.
pub(crate) fn q(text: &Arc<str>) -> AssertSqlSafe<Arc<str>> {
    AssertSqlSafe(Arc::clone(text))
}

/// A row store's reservation, the same on every SQL server: the guarded increment; if no row
/// matched, the key's row inserted at 0 (racing processes agree, the insert ignores a
/// duplicate) and the increment again; still no row means the key is exhausted.
pub(crate) async fn reserve_row<U>(
    store: &str,
    key: &Key,
    update: impl Fn() -> U,
    insert: impl std::future::Future<Output = Result<(), SeqError>>,
) -> Result<i64, SeqError>
where
    U: std::future::Future<Output = Result<Option<i64>, SeqError>>,
{
    if let Some(v) = update().await? {
        return Ok(v);
    }
    insert.await?;
    update()
        .await?
        .ok_or_else(|| SeqError::exhausted(store, key.as_str()))
}

/// The table of registered keys beside the table of values `table` (checked by
/// [`crate::check_table`]): `{table}_registered`, whose one column, `registered_key`, no table
/// of values has (so were a table of values named so, a registration call would fail on the
/// column, reading and writing nothing of it). `Unsupported` when the name would pass the
/// server's limit of `max` bytes (PostgreSQL 63, MySQL 64): the store's values work on.
pub(crate) fn registered_table(store: &str, table: &str, max: usize) -> Result<String, SeqError> {
    let name = format!("{table}_registered");
    if name.len() <= max {
        return Ok(name);
    }
    Err(SeqError::new(
        ErrorKind::Unsupported,
        format!(
            "{store}: cannot keep registered keys beside table {table}: their table, {name}, would pass the server's {max} bytes for a name (a table of values of at most {} bytes has one)",
            max.saturating_sub("_registered".len())
        ),
    ))
}

/// A server's SQL, where floe's statements differ.
#[derive(Clone, Copy, Debug)]
// A build with one of the two features names one server only.
#[cfg_attr(not(all(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) enum Server {
    Postgres,
    Mysql,
}

/// The table of registered keys beside a table of values, and its statements (the same on
/// every server but for placeholders, the column's type and the insert that skips a
/// duplicate).
#[derive(Debug)]
pub(crate) struct Registered {
    pub table: String,
    /// `CREATE TABLE IF NOT EXISTS`.
    pub create: Arc<str>,
    pub is: Arc<str>,
    pub insert: Arc<str>,
    pub delete: Arc<str>,
    pub page: Arc<str>,
}

impl Registered {
    /// The table of registered keys of `store` beside its table of values `values` (see
    /// [`registered_table`]).
    pub(crate) fn beside(
        store: &str,
        values: &str,
        server: Server,
    ) -> Result<Registered, SeqError> {
        let (max, p1, p2) = match server {
            Server::Postgres => (63, "$1", "$2"),
            Server::Mysql => (64, "?", "?"),
        };
        let r = registered_table(store, values, max)?;
        let (create, insert) = match server {
            Server::Postgres => (
                format!("CREATE TABLE IF NOT EXISTS {r} (registered_key TEXT COLLATE \"C\" PRIMARY KEY)"),
                format!("INSERT INTO {r} (registered_key) VALUES ($1) ON CONFLICT (registered_key) DO NOTHING"),
            ),
            Server::Mysql => (
                format!("CREATE TABLE IF NOT EXISTS {r} (registered_key VARBINARY(255) NOT NULL PRIMARY KEY) ENGINE=InnoDB"),
                // The key fits the column (at most 255 bytes): IGNORE skips the duplicate only.
                format!("INSERT IGNORE INTO {r} (registered_key) VALUES (?)"),
            ),
        };
        Ok(Registered {
            create: sql(create),
            is: sql(format!("SELECT 1 FROM {r} WHERE registered_key = {p1}")),
            insert: sql(insert),
            delete: sql(format!("DELETE FROM {r} WHERE registered_key = {p1}")),
            page: sql(format!(
                "SELECT registered_key FROM {r} WHERE registered_key > {p1} ORDER BY registered_key LIMIT {p2}"
            )),
            table: r,
        })
    }
}

/// The SQL `LIMIT` of a page of `limit` keys.
pub(crate) fn page_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// What a PostgreSQL server says of its durability: `fsync` and `synchronous_commit` (`off`
/// acknowledges commits before they are on disk).
#[cfg(feature = "postgres")]
pub(crate) async fn postgres_durability(pool: &sqlx::PgPool) -> crate::Durability {
    use crate::Durability;
    let read: Result<(String, String), sqlx::Error> =
        sqlx::query_as("SELECT current_setting('fsync'), current_setting('synchronous_commit')")
            .fetch_one(pool)
            .await;
    match read {
        Err(e) => Durability::Unknown(format!("reading fsync and synchronous_commit: {e}")),
        Ok((fsync, _)) if fsync == "off" => Durability::Volatile("fsync is off".into()),
        Ok((_, commit)) if commit == "off" => {
            Durability::Volatile("synchronous_commit is off".into())
        }
        Ok(_) => Durability::Durable,
    }
}

/// What a MySQL or MariaDB server says of its durability: InnoDB flushing its log at each
/// commit (`innodb_flush_log_at_trx_commit = 1`; 0 and 2 lose up to a second of commits).
#[cfg(feature = "mysql")]
pub(crate) async fn mysql_durability(pool: &sqlx::MySqlPool) -> crate::Durability {
    use crate::Durability;
    let read: Result<(String,), sqlx::Error> =
        sqlx::query_as("SELECT CAST(@@innodb_flush_log_at_trx_commit AS CHAR)")
            .fetch_one(pool)
            .await;
    match read {
        Err(e) => Durability::Unknown(format!("reading innodb_flush_log_at_trx_commit: {e}")),
        Ok((v,)) if v.trim() == "1" => Durability::Durable,
        Ok((v,)) => Durability::Volatile(format!(
            "innodb_flush_log_at_trx_commit is {} (not 1)",
            v.trim()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_sit_beside_their_table_when_the_name_fits() {
        assert_eq!(
            registered_table("postgres", "floe_sequences", 63).unwrap(),
            "floe_sequences_registered"
        );
        assert!(registered_table("postgres", &"t".repeat(52), 63).is_ok());
        let e = registered_table("postgres", &"t".repeat(53), 63).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unsupported);
        assert!(e.message.contains("at most 52 bytes"), "{e}");
        assert!(registered_table("mysql", &"t".repeat(53), 64).is_ok());
    }
}
