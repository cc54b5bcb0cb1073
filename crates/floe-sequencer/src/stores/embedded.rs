//! `embedded` (the default): one redb file, `sequences.redb` in floe's state directory.
//!
//! **Durability:** every reservation is a redb write transaction committed with
//! `Durability::Immediate` (fsync) before its value is returned, so a segment is on disk before
//! any ID from it is handed out and `kill -9` never causes a reissue.
//!
//! **Memory:** redb's cache of the file's pages is held at [`CACHE_BYTES`] (16 MiB).
//!
//! **One process:** the store holds an exclusive lock of `sequences.redb.lock` (beside the
//! file) as long as it lives, and redb locks the file too, so a second floe process on the same
//! state directory fails at start-up, naming the file. Use a server store to share sequences
//! between processes.
//!
//! **I/O errors** (a full disk): redb refuses every call after one ("Previous I/O error
//! occurred"), so the call that meets one marks the database, and the next call closes it and
//! opens it again (our lock is kept meanwhile) before it runs. Calls fail with `Unavailable`
//! until writes succeed again, then work with no restart. A reservation whose commit failed is
//! never handed out, and the value read after the reopen is the last one committed durably.
//! An open after an I/O error checks the whole file (redb's repair: about 0.1 s for 2 million
//! keys), so it happens at most every [`REOPEN_EVERY`]; calls in between fail at once.
//!
//! **Layout:** table `sequences` (key -> the last value reserved) and, apart from it, table
//! `registered` (key -> nothing), made at open if missing (a file of an older floe gains the
//! second, empty). Both are ordered by the key's bytes, so [`Store::keys`] and
//! [`Store::registered`] read one range of their table. Unregistering removes the key from
//! `registered` only: its value stays, and the key registered again goes on above it.
//!
//! **Give back:** in one write transaction, the key's value is compared with the end of the
//! caller's last reservation and set just below the range given back (durably, as a
//! reservation), so nothing can be reserved in between.

use std::fs::{File, OpenOptions, TryLockError};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use floe_core::sequence::{reserve_after, Key};
use redb::{
    Database, ReadOnlyTable, ReadableDatabase, ReadableTable, Table, TableDefinition, TableHandle,
    WriteTransaction,
};
use tokio::time::Instant;

use crate::store::stored_key;
use crate::{Capabilities, ErrorKind, SeqError, Store};

const TABLE: TableDefinition<&str, i64> = TableDefinition::new("sequences");
/// The registered keys, apart from the values.
const REGISTERED: TableDefinition<&str, ()> = TableDefinition::new("registered");

/// The most memory redb keeps as a cache of the file's pages. Its default (1 GiB) lets the
/// cache, hence the process, grow with the file, that is with every key ever used; a page not
/// cached is read again from the OS's page cache, a few microseconds against the fsync of each
/// commit.
pub const CACHE_BYTES: usize = 16 << 20;

/// The database is opened again after an I/O error at most this often.
pub const REOPEN_EVERY: Duration = Duration::from_millis(100);

/// A redb database: key -> last reserved value, and the registered keys.
#[derive(Debug)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    /// The exclusive lock of `{path}.lock`, held as long as the store is: it keeps other floe
    /// processes away while the database is closed to be opened again.
    _lock: File,
    /// `None` after a failed reopen: the next call tries again. Calls hold the read side for
    /// their transaction; a reopen takes the write side, so it waits for them to end.
    db: RwLock<Option<Database>>,
    /// Set by a call that met an I/O error (redb then refuses every later call with "Previous
    /// I/O error occurred"): the database is closed and opened again before the next call.
    broken: AtomicBool,
    reopens: Mutex<Reopens>,
}

/// The reopens after I/O errors so far.
#[derive(Debug, Default)]
struct Reopens {
    count: u64,
    /// When the last one was tried (tokio's clock).
    last: Option<Instant>,
    /// The error that closed the database, or that the last open failed with.
    error: Option<String>,
}

fn storage(path: &Path, what: &str, e: impl std::fmt::Display) -> SeqError {
    SeqError::unavailable(format!("embedded: {what} {}: {e}", path.display()))
}

impl EmbeddedStore {
    /// Opens (or creates) the database file at `path`, creating its directory, and holds the
    /// exclusive lock of `{path}.lock` until the store is dropped.
    ///
    /// # Errors
    /// `Io` when the directory or file cannot be made or opened (or is not a redb database);
    /// `Unavailable` when another process holds the file (the same start may succeed later).
    pub fn open(path: impl Into<PathBuf>) -> Result<EmbeddedStore, SeqError> {
        let path = path.into();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                SeqError::new(
                    ErrorKind::Io,
                    format!("embedded: cannot create {}: {e}", dir.display()),
                )
            })?;
        }
        let lock = lock(&path)?;
        let db = match create(&path) {
            Ok(db) => Ok(db),
            // A first open that failed part way (a full disk) can leave a file of zeros: it
            // never held a header, so no value. With the lock held, it is made again.
            Err(_) if never_written(&path) => {
                let _ = std::fs::remove_file(&path);
                create(&path)
            }
            Err(e) => Err(e),
        }
        .map_err(|e| {
            SeqError::new(
                ErrorKind::Io,
                format!("embedded: cannot open {}: {e}", path.display()),
            )
        })?;
        let store = EmbeddedStore {
            inner: Arc::new(Inner {
                path,
                _lock: lock,
                db: RwLock::new(Some(db)),
                broken: AtomicBool::new(false),
                reopens: Mutex::new(Reopens::default()),
            }),
        };
        // Create the tables now, so that reads never find them missing.
        store.inner.transaction(Instant::now(), |inner, txn| {
            inner.open(txn, TABLE)?;
            inner.open(txn, REGISTERED)?;
            Ok(())
        })?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How many times the database was opened again after an I/O error.
    pub fn reopens(&self) -> u64 {
        self.inner.reopens().count
    }

    /// The key's value (0 if never used), from a read transaction.
    pub fn value(&self, key: &Key) -> Result<i64, SeqError> {
        self.inner
            .read(Instant::now(), TABLE, |inner, table| get(inner, table, key))
            .map(|value| value.unwrap_or(0))
    }

    /// Runs `f` on `table` in one write transaction, committed durably (an fsync: off the
    /// async worker threads).
    async fn write<V: redb::Value + Send + 'static, T: Send + 'static>(
        &self,
        table: TableDefinition<'static, &'static str, V>,
        f: impl FnOnce(&Inner, &mut Table<'_, &'static str, V>) -> Result<T, SeqError> + Send + 'static,
    ) -> Result<T, SeqError> {
        let inner = Arc::clone(&self.inner);
        let now = Instant::now();
        run_blocking(move || inner.write(now, table, f)).await
    }

    /// Runs `f` on `table` in one read transaction (off the async worker threads: it may
    /// read the file).
    async fn read<V: redb::Value + Send + 'static, T: Send + 'static>(
        &self,
        table: TableDefinition<'static, &'static str, V>,
        f: impl FnOnce(&Inner, &ReadOnlyTable<&'static str, V>) -> Result<T, SeqError> + Send + 'static,
    ) -> Result<T, SeqError> {
        let inner = Arc::clone(&self.inner);
        let now = Instant::now();
        run_blocking(move || inner.read(now, table, f)).await
    }
}

/// Whether the file at `path` holds nothing but zero bytes (or nothing at all).
fn never_written(path: &Path) -> bool {
    use std::io::Read;
    let Ok(mut file) = File::open(path) else {
        return false;
    };
    let mut buf = [0u8; 64 * 1024];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) if buf[..n].iter().all(|b| *b == 0) => {}
            _ => return false,
        }
    }
}

/// Opens (or creates) the database, with a cache of [`CACHE_BYTES`].
fn create(path: &Path) -> Result<Database, redb::DatabaseError> {
    redb::Builder::new()
        .set_cache_size(CACHE_BYTES)
        .create(path)
}

/// Takes the exclusive lock of `{path}.lock` (made if missing), or says who holds it.
fn lock(path: &Path) -> Result<File, SeqError> {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let lock_path = PathBuf::from(name);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| {
            SeqError::new(
                ErrorKind::Io,
                format!("embedded: cannot open {}: {e}", lock_path.display()),
            )
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(SeqError::unavailable(format!(
            "embedded: cannot open {}: {} is held by another floe process on the same state directory",
            path.display(),
            lock_path.display()
        ))),
        Err(TryLockError::Error(e)) => Err(SeqError::new(ErrorKind::Io, format!(
            "embedded: cannot lock {}: {e}",
            lock_path.display()
        ))),
    }
}

impl Inner {
    /// An error of redb while trying to `what`, as `Unavailable`. An I/O error (a full disk,
    /// say) marks the database for a reopen: redb latches it and fails every later call.
    fn fail(&self, what: &str, e: impl Into<redb::Error>) -> SeqError {
        let e: redb::Error = e.into();
        let error = storage(&self.path, what, &e);
        if matches!(
            e,
            redb::Error::Io(_)
                | redb::Error::PreviousIo
                | redb::Error::DatabaseClosed
                | redb::Error::TransactionPoisoned
        ) {
            self.broken.store(true, Ordering::SeqCst);
            self.reopens().error = Some(error.message.clone());
        }
        error
    }

    fn reopens(&self) -> std::sync::MutexGuard<'_, Reopens> {
        self.reopens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the database, first closing and opening it again if a call before met an
    /// I/O error (or an open failed). `f` reports redb's errors through [`fail`](Self::fail)
    /// while it holds the read side, so a failure is always marked before its database can be
    /// replaced.
    ///
    /// `now` is read on the async side, where tokio's clock is the caller's (paused in tests).
    fn with_db<T>(
        &self,
        now: Instant,
        f: impl FnOnce(&Inner, &Database) -> Result<T, SeqError>,
    ) -> Result<T, SeqError> {
        {
            let db = self.db.read().unwrap_or_else(|p| p.into_inner());
            if let Some(db) = db.as_ref().filter(|_| !self.broken.load(Ordering::SeqCst)) {
                return f(self, db);
            }
        }
        self.reopen(now)?;
        let db = self.db.read().unwrap_or_else(|p| p.into_inner());
        match db.as_ref() {
            Some(db) => f(self, db),
            None => Err(storage(&self.path, "cannot open", "closed after an error")),
        }
    }

    /// Closes the database (releasing redb's file and its lock, not ours) and opens it again:
    /// what redb asks for after an I/O error. Everything in memory is read again from the file,
    /// so a reservation whose commit failed is never seen, and the value read back is the last
    /// one committed durably. At most every [`REOPEN_EVERY`]: sooner, the call fails at once
    /// with the error that closed the database.
    fn reopen(&self, now: Instant) -> Result<(), SeqError> {
        let mut slot = self.db.write().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() && !self.broken.load(Ordering::SeqCst) {
            return Ok(()); // another call opened it again meanwhile
        }
        let mut reopens = self.reopens();
        if let Some(last) = reopens.last {
            if now < last + REOPEN_EVERY {
                return Err(SeqError::unavailable(format!(
                    "{} (the database is opened again at most every {REOPEN_EVERY:?})",
                    reopens
                        .error
                        .as_deref()
                        .unwrap_or("embedded: closed after an error")
                )));
            }
        }
        reopens.last = Some(now);
        reopens.count += 1;
        if let Some(db) = slot.take() {
            // The error it may report is the one that brought us here; no transaction is
            // alive (we hold the write side), so the file is let go now.
            let _ = db.close();
        }
        self.broken.store(false, Ordering::SeqCst);
        let db = create(&self.path).map_err(|e| {
            let error = storage(&self.path, "cannot open again", e);
            reopens.error = Some(error.message.clone());
            error
        })?;
        *slot = Some(db);
        Ok(())
    }

    /// Runs `f` in one write transaction, committed durably before returning.
    fn transaction<T>(
        &self,
        now: Instant,
        f: impl FnOnce(&Inner, &WriteTransaction) -> Result<T, SeqError>,
    ) -> Result<T, SeqError> {
        self.with_db(now, |inner, db| {
            let txn = db
                .begin_write()
                .map_err(|e| inner.fail("cannot write", e))?;
            let out = f(inner, &txn)?;
            txn.commit()
                .map_err(|e| inner.fail("cannot commit to", e))?;
            Ok(out)
        })
    }

    /// Opens `table` (creating it if missing) in the write transaction `txn`.
    fn open<'txn, V: redb::Value + 'static>(
        &self,
        txn: &'txn WriteTransaction,
        table: TableDefinition<'static, &'static str, V>,
    ) -> Result<Table<'txn, &'static str, V>, SeqError> {
        txn.open_table(table)
            .map_err(|e| self.fail(&format!("cannot open table {} of", table.name()), e))
    }

    /// Runs `f` on `table` in one write transaction, committed durably before returning.
    fn write<V: redb::Value + 'static, T>(
        &self,
        now: Instant,
        table: TableDefinition<'static, &'static str, V>,
        f: impl FnOnce(&Inner, &mut Table<'_, &'static str, V>) -> Result<T, SeqError>,
    ) -> Result<T, SeqError> {
        self.transaction(now, |inner, txn| f(inner, &mut inner.open(txn, table)?))
    }

    /// Runs `f` on `table` in one read transaction.
    fn read<V: redb::Value + 'static, T>(
        &self,
        now: Instant,
        table: TableDefinition<'static, &'static str, V>,
        f: impl FnOnce(&Inner, &ReadOnlyTable<&'static str, V>) -> Result<T, SeqError>,
    ) -> Result<T, SeqError> {
        self.with_db(now, |inner, db| {
            let txn = db.begin_read().map_err(|e| inner.fail("cannot read", e))?;
            let table = txn
                .open_table(table)
                .map_err(|e| inner.fail(&format!("cannot open table {} of", table.name()), e))?;
            f(inner, &table)
        })
    }

    /// The page of `table` after `after`: at most `limit` keys, each with what `f` makes of
    /// its entry.
    fn page<V: redb::Value + 'static, T>(
        &self,
        table: &ReadOnlyTable<&'static str, V>,
        after: Option<&Key>,
        limit: usize,
        f: impl Fn(Key, V::SelfType<'_>) -> T,
    ) -> Result<Vec<T>, SeqError> {
        let from = after.map_or(Bound::Unbounded, |k| Bound::Excluded(k.as_str()));
        let range = table
            .range::<&str>((from, Bound::Unbounded))
            .map_err(|e| self.fail("cannot read", e))?;
        let mut page = Vec::new();
        for entry in range.take(limit) {
            let (k, v) = entry.map_err(|e| self.fail("cannot read", e))?;
            // Checked again: floe stores only valid keys, so a bad one is `Corrupt`.
            let key = stored_key("embedded", self.path.display(), k.value().as_bytes())?;
            page.push(f(key, v.value()));
        }
        Ok(page)
    }
}

/// The key's value in `table`, `None` if it has none.
fn get(
    inner: &Inner,
    table: &impl ReadableTable<&'static str, i64>,
    key: &Key,
) -> Result<Option<i64>, SeqError> {
    Ok(table
        .get(key.as_str())
        .map_err(|e| inner.fail("cannot read", e))?
        .map(|v| v.value()))
}

/// The key's value in `table`, 0 if it has none (a key never used).
fn current(
    inner: &Inner,
    table: &impl ReadableTable<&'static str, i64>,
    key: &Key,
) -> Result<i64, SeqError> {
    Ok(get(inner, table, key)?.unwrap_or(0))
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
        let key = key.clone();
        self.write(TABLE, move |inner, table| {
            let value = current(inner, table, &key)?;
            let next = reserve_after(value, n)
                .ok_or_else(|| SeqError::exhausted("embedded", key.as_str()))?;
            table
                .insert(key.as_str(), next)
                .map_err(|e| inner.fail("cannot write", e))?;
            Ok(next)
        })
        .await
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        let key = key.clone();
        self.write(TABLE, move |inner, table| {
            if current(inner, table, &key)? < floor {
                table
                    .insert(key.as_str(), floor)
                    .map_err(|e| inner.fail("cannot write", e))?;
            }
            Ok(())
        })
        .await
    }

    async fn give_back(&self, key: &Key, first: i64, last: i64) -> Result<bool, SeqError> {
        let Some(before) = crate::store::given_back_value(first, last) else {
            return Ok(false);
        };
        let key = key.clone();
        self.write(TABLE, move |inner, table| {
            // Compared and set in one write transaction: nothing reserved in between.
            if get(inner, table, &key)? != Some(last) {
                return Ok(false);
            }
            table
                .insert(key.as_str(), before)
                .map_err(|e| inner.fail("cannot write", e))?;
            Ok(true)
        })
        .await
    }

    async fn value(&self, key: &Key) -> Result<Option<i64>, SeqError> {
        let key = key.clone();
        self.read(TABLE, move |inner, table| get(inner, table, &key))
            .await
    }

    async fn keys(&self, after: Option<&Key>, limit: usize) -> Result<Vec<(Key, i64)>, SeqError> {
        let after = after.cloned();
        self.read(TABLE, move |inner, table| {
            inner.page(table, after.as_ref(), limit, |k, v| (k, v))
        })
        .await
    }

    async fn is_registered(&self, key: &Key) -> Result<bool, SeqError> {
        let key = key.clone();
        self.read(REGISTERED, move |inner, table| {
            let found = table
                .get(key.as_str())
                .map_err(|e| inner.fail("cannot read", e))?;
            Ok(found.is_some())
        })
        .await
    }

    async fn register(&self, key: &Key) -> Result<bool, SeqError> {
        let key = key.clone();
        self.write(REGISTERED, move |inner, table| {
            let before = table
                .insert(key.as_str(), ())
                .map_err(|e| inner.fail("cannot write", e))?;
            Ok(before.is_none())
        })
        .await
    }

    async fn unregister(&self, key: &Key) -> Result<bool, SeqError> {
        let key = key.clone();
        self.write(REGISTERED, move |inner, table| {
            let before = table
                .remove(key.as_str())
                .map_err(|e| inner.fail("cannot write", e))?;
            Ok(before.is_some())
        })
        .await
    }

    async fn registered(&self, after: Option<&Key>, limit: usize) -> Result<Vec<Key>, SeqError> {
        let after = after.cloned();
        self.read(REGISTERED, move |inner, table| {
            inner.page(table, after.as_ref(), limit, |k, ()| k)
        })
        .await
    }
}

async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SeqError> + Send + 'static,
) -> Result<T, SeqError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SeqError::unavailable(format!("embedded: a call stopped: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of a floe from before registrations (one table) opens, its values kept, and
    /// gains the table of registered keys, empty.
    #[tokio::test]
    async fn a_file_without_registrations_gains_their_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sequences.redb");
        {
            let db = create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(TABLE).unwrap().insert("old", 41).unwrap();
            txn.commit().unwrap();
        }
        let store = EmbeddedStore::open(&path).unwrap();
        let old = Key::new("old").unwrap();
        assert_eq!(Store::value(&store, &old).await.unwrap(), Some(41));
        assert!(store.registered(None, 10).await.unwrap().is_empty());
        assert!(store.register(&old).await.unwrap());
        assert_eq!(store.keys(None, 10).await.unwrap(), [(old.clone(), 41)]);
        assert_eq!(store.registered(None, 10).await.unwrap(), [old]);
    }
}
