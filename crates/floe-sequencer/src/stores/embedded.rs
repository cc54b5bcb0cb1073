//! `embedded` (the default): one redb file, `sequences.redb` in floe's state directory.
//!
//! **Durability:** every reservation is a redb write transaction committed with
//! `Durability::Immediate` (fsync) before its value is returned, so a segment is on disk before
//! any ID from it is handed out and `kill -9` never causes a reissue.
//!
//! **One process:** redb locks the file, so a second floe process on the same state directory
//! fails at start-up, naming the file. Use a server store to share sequences between processes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use floe_core::sequence::{reserve_after, Key};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::{Capabilities, SeqError, Store};

const TABLE: TableDefinition<&str, i64> = TableDefinition::new("sequences");

/// A redb database of one table, key -> last reserved value.
#[derive(Debug)]
pub struct EmbeddedStore {
    db: Arc<Database>,
    path: PathBuf,
}

fn storage(path: &Path, what: &str, e: impl std::fmt::Display) -> SeqError {
    SeqError::unavailable(format!("embedded: {what} {}: {e}", path.display()))
}

impl EmbeddedStore {
    /// Opens (or creates) the database file at `path`, creating its directory.
    ///
    /// # Errors
    /// `Config` when the directory cannot be made or the file is held by another process or
    /// is not a redb database.
    pub fn open(path: impl Into<PathBuf>) -> Result<EmbeddedStore, SeqError> {
        let path = path.into();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                SeqError::config(format!("embedded: cannot create {}: {e}", dir.display()))
            })?;
        }
        let db = Database::create(&path).map_err(|e| {
            SeqError::config(format!(
                "embedded: cannot open {} (another floe process on the same state directory?): {e}",
                path.display()
            ))
        })?;
        let store = EmbeddedStore {
            db: Arc::new(db),
            path,
        };
        // Create the table now, so that reads never find it missing.
        store.write(|_| Ok(()))?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the table in one write transaction, committed durably before returning.
    fn write<T>(
        &self,
        f: impl FnOnce(&mut redb::Table<'_, &'static str, i64>) -> Result<T, SeqError>,
    ) -> Result<T, SeqError> {
        let txn = self
            .db
            .begin_write()
            .map_err(|e| storage(&self.path, "cannot write", e))?;
        let out = {
            let mut table = txn
                .open_table(TABLE)
                .map_err(|e| storage(&self.path, "cannot open the table of", e))?;
            f(&mut table)?
        };
        txn.commit()
            .map_err(|e| storage(&self.path, "cannot commit to", e))?;
        Ok(out)
    }

    /// The key's value (0 if never used), from a read transaction.
    pub fn value(&self, key: &Key) -> Result<i64, SeqError> {
        let txn = self
            .db
            .begin_read()
            .map_err(|e| storage(&self.path, "cannot read", e))?;
        let table = txn
            .open_table(TABLE)
            .map_err(|e| storage(&self.path, "cannot open the table of", e))?;
        let value = table
            .get(key.as_str())
            .map_err(|e| storage(&self.path, "cannot read", e))?;
        Ok(value.map(|v| v.value()).unwrap_or(0))
    }
}

fn current(
    table: &redb::Table<'_, &'static str, i64>,
    key: &Key,
    path: &Path,
) -> Result<i64, SeqError> {
    Ok(table
        .get(key.as_str())
        .map_err(|e| storage(path, "cannot read", e))?
        .map(|v| v.value())
        .unwrap_or(0))
}

#[async_trait]
impl Store for EmbeddedStore {
    fn kind(&self) -> &'static str {
        "embedded"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            segments: true,
            strong: true,
            durable: true,
            shared: false,
        }
    }

    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        let db = self.clone_handle();
        let key = key.clone();
        // The commit fsyncs: off the async worker threads.
        run_blocking(move || {
            db.write(|table| {
                let value = current(table, &key, &db.path)?;
                let next = reserve_after(value, n)
                    .ok_or_else(|| SeqError::exhausted("embedded", key.as_str()))?;
                table
                    .insert(key.as_str(), next)
                    .map_err(|e| storage(&db.path, "cannot write", e))?;
                Ok(next)
            })
        })
        .await
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        let db = self.clone_handle();
        let key = key.clone();
        run_blocking(move || {
            db.write(|table| {
                if current(table, &key, &db.path)? < floor {
                    table
                        .insert(key.as_str(), floor)
                        .map_err(|e| storage(&db.path, "cannot write", e))?;
                }
                Ok(())
            })
        })
        .await
    }
}

impl EmbeddedStore {
    fn clone_handle(&self) -> EmbeddedStore {
        EmbeddedStore {
            db: self.db.clone(),
            path: self.path.clone(),
        }
    }
}

async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SeqError> + Send + 'static,
) -> Result<T, SeqError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SeqError::unavailable(format!("embedded: a write stopped: {e}")))?
}
