//! The store contract (Layotto's component API) and the one primitive each backend writes.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use floe_core::sequence::{Key, Segment};

use crate::SeqError;

/// What a store can do, as data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// It can reserve ranges ([`Store::segment`]), so WEAK is served from cached segments.
    pub segments: bool,
    /// Its IDs strictly increase across every process sharing it, so STRONG can be served.
    pub strong: bool,
    /// A reservation survives the store's restart (given the durable settings its docs name).
    pub durable: bool,
    /// Several floe processes can use it at once.
    pub shared: bool,
}

/// A place that keeps, per key, the last value it handed out.
///
/// Backends write two primitives, [`reserve`](Store::reserve) (atomically add `n` to a key)
/// and [`raise`](Store::raise) (atomically lift a key to at least a floor); Layotto's
/// `Init`, `GetNextId` and `GetSegment` are written once above them. Every implementation runs
/// the same conformance suite (`tests/conformance.rs`).
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// The backend's name (`embedded`, `redis`, ...), for messages.
    fn kind(&self) -> &'static str;

    /// What it can do.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            segments: true,
            strong: true,
            durable: true,
            shared: true,
        }
    }

    /// Atomically adds `n` (at least 1) to the key's value (0 for a key never used) and returns
    /// the new value `v`: the caller owns `v - n + 1 ..= v`, which no other call ever gets.
    ///
    /// # Errors
    /// `Exhausted` when `v` would pass `i64::MAX` (and nothing changes); `Unavailable` when the
    /// store cannot be reached (the reservation may or may not have happened: a gap at worst,
    /// never a duplicate).
    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError>;

    /// Atomically lifts the key's value to at least `floor`, so every later ID is greater.
    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError>;

    /// Gives back the unused end of the caller's last reservation of a key: if the key's value
    /// is still `last` (nothing reserved since), sets it to `first - 1`, so that the next
    /// reservation starts at `first`; whether it did. The caller owns `first ..= last` (it
    /// reserved them and served none) and serves none of them afterwards, whatever the answer.
    /// An empty range, or one reaching below 1, is never taken back. A store that cannot
    /// compare and set answers `false` (the IDs are a gap), which is the default.
    ///
    /// # Errors
    /// `Unavailable` when the store cannot be reached (the IDs are then a gap, or given back).
    async fn give_back(&self, key: &Key, first: i64, last: i64) -> Result<bool, SeqError> {
        let _ = (key, first, last);
        Ok(false)
    }

    /// Seed 002's `Init`: every ID later issued for a key of `bigger_than` is greater than its
    /// value. Keys are the keys users name (no prefix is added before this applies).
    async fn init(&self, bigger_than: &BTreeMap<Key, i64>) -> Result<(), SeqError> {
        for (key, floor) in bigger_than {
            self.raise(key, *floor).await?;
        }
        Ok(())
    }

    /// Seed 002's `GetNextId`: the key's next ID, one atomic increment.
    async fn next_id(&self, key: &Key) -> Result<i64, SeqError> {
        self.reserve(key, 1).await
    }

    /// Seed 002's `GetSegment`: `size` IDs the caller may hand out, or `None` when the store
    /// cannot reserve ranges ([`Capabilities::segments`]).
    async fn segment(&self, key: &Key, size: u32) -> Result<Option<Segment>, SeqError> {
        if !self.capabilities().segments {
            return Ok(None);
        }
        let size = size.max(1);
        Ok(Some(Segment::ending_at(
            self.reserve(key, size).await?,
            size,
        )))
    }

    /// The key's value, without changing it: the last ID reserved (the next reservation starts
    /// above it); `None` for a key the store holds no value of.
    ///
    /// # Errors
    /// `Unsupported` from a store that cannot say (the default); `Unavailable` as ever.
    async fn value(&self, key: &Key) -> Result<Option<i64>, SeqError> {
        let _ = key;
        Err(cannot(self.kind(), "read a key's value"))
    }

    /// A page of the keys the store holds a value of, in byte order: at most `limit`, those
    /// after `after` (the last key of the page before), each with its value.
    ///
    /// # Errors
    /// As [`value`](Store::value).
    async fn keys(&self, after: Option<&Key>, limit: usize) -> Result<Vec<(Key, i64)>, SeqError> {
        let _ = (after, limit);
        Err(cannot(self.kind(), "list its keys"))
    }

    /// Whether `key` is registered: a store serving registered keys only (a
    /// [`StoreHandle`](crate::StoreHandle) in that mode, Leaf's `leaf_alloc` table) refuses
    /// the others with `UnknownKey`. Registrations are kept apart from the values.
    ///
    /// # Errors
    /// As [`value`](Store::value).
    async fn is_registered(&self, key: &Key) -> Result<bool, SeqError> {
        let _ = key;
        Err(cannot(self.kind(), "keep registered keys"))
    }

    /// Registers `key`; whether it was not registered already. Its value is not changed: a key
    /// registered again goes on above every ID it issued before.
    ///
    /// # Errors
    /// As [`value`](Store::value).
    async fn register(&self, key: &Key) -> Result<bool, SeqError> {
        let _ = key;
        Err(cannot(self.kind(), "keep registered keys"))
    }

    /// Unregisters `key`; whether it was registered. Its value is kept (see
    /// [`register`](Store::register)).
    ///
    /// # Errors
    /// As [`value`](Store::value).
    async fn unregister(&self, key: &Key) -> Result<bool, SeqError> {
        let _ = key;
        Err(cannot(self.kind(), "keep registered keys"))
    }

    /// A page of the registered keys, in byte order: at most `limit`, those after `after`.
    ///
    /// # Errors
    /// As [`value`](Store::value).
    async fn registered(&self, after: Option<&Key>, limit: usize) -> Result<Vec<Key>, SeqError> {
        let _ = (after, limit);
        Err(cannot(self.kind(), "keep registered keys"))
    }

    /// Whether the server keeps what it acknowledged, as its settings say (read once, at
    /// open). By default [`Durability::Durable`]: stores durable by construction (the
    /// embedded store's fsync, etcd's and ZooKeeper's logs) and those that cannot be
    /// configured otherwise.
    async fn durability(&self) -> Durability {
        Durability::Durable
    }

    /// Checks that the store answers, changing nothing (a server's readiness probe). Stores in
    /// this process (embedded, memory) always do.
    ///
    /// # Errors
    /// `Unavailable` when the store cannot be reached.
    async fn ping(&self) -> Result<(), SeqError> {
        Ok(())
    }

    /// Lets go of connections and files. The store is not used afterwards.
    async fn close(&self) {}
}

/// The value a give back of `first ..= last` sets the key to if it still holds `last`:
/// `first - 1`, so that the next reservation starts at `first`. `None` when there is nothing
/// to give back: an empty range, or one reaching below 1 (floe's IDs start at 1, and a key
/// must never be set to a value that lets 0 or less be issued); the store answers `false`.
pub(crate) fn given_back_value(first: i64, last: i64) -> Option<i64> {
    (1 <= first && first <= last).then(|| first - 1)
}

/// A key read back from a store, at `place` (for the message): `Corrupt` when it is none floe
/// can have written (not UTF-8, or not a valid key).
pub(crate) fn stored_key(
    store: &str,
    place: impl fmt::Display,
    stored: &[u8],
) -> Result<Key, SeqError> {
    std::str::from_utf8(stored)
        .map_err(|e| e.to_string())
        .and_then(|k| Key::new(k).map_err(|e| e.to_string()))
        .map_err(|e| {
            SeqError::new(
                crate::ErrorKind::Corrupt,
                format!(
                    "{store}: {place} holds a key floe cannot have written ({:?}): {e}",
                    String::from_utf8_lossy(&stored[..stored.len().min(300)])
                ),
            )
        })
}

/// What a store of `kind` cannot do.
pub(crate) fn cannot(kind: &str, what: &str) -> SeqError {
    SeqError::new(
        crate::ErrorKind::Unsupported,
        format!("store {kind} cannot {what}"),
    )
}

/// Runs a call of `store` for `key`, failing it as `Unavailable` after `timeout`: the one bound
/// every store call goes through (WEAK fetches, STRONG increments, the rest).
pub(crate) async fn within<T>(
    store: &dyn Store,
    timeout: Duration,
    what: &str,
    key: &Key,
    call: impl Future<Output = Result<T, SeqError>>,
) -> Result<T, SeqError> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| {
            Err(SeqError::unavailable(format!(
                "{}: no answer within {timeout:?} trying to {what} key {:?}",
                store.kind(),
                key.as_str()
            )))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_floe_cannot_have_written_is_corrupt() {
        assert_eq!(
            stored_key("mysql", "table t", b"a/b").unwrap().as_str(),
            "a/b"
        );
        for bad in [&b""[..], b"\xff", b"a\0b", &[b'x'; 256]] {
            let e = stored_key("mysql", "table t", bad).unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::Corrupt, "{e}");
        }
    }
}

/// What a store's server says of its durability ([`Store::durability`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Durability {
    /// It keeps every write it acknowledged through a crash.
    Durable,
    /// It may lose acknowledged writes: why (the setting and its value).
    Volatile(String),
    /// It would not say: why.
    Unknown(String),
}
