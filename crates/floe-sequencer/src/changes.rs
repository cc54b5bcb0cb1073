//! Floors and registrations changed on one node reach every other node of a shared store
//! within [`REACH`].
//!
//! A raise (`floe seq keys raise`, `BiggerThan`, `--bigger-than`) moves the store's value past
//! the floor, so every ID reserved from the store afterwards is above it; what other nodes
//! hold already (WEAK buffers, parked tails) was reserved before and may lie at or below it.
//! An unregistration is seen by the store at once, but a node that holds the key in memory
//! would go on serving it. So both are announced through the store itself:
//!
//! - After the store made the change, the node that made it adds one to [`CHANGES_KEY`], a
//!   counter of floe's own in the store, before the call returns.
//! - Every node reads the counter every second (a task per store, started by
//!   `Sequencer::watch`). When it moved, the node drops every WEAK ID it holds of that store
//!   (each key's buffer, a fetch under way, the parked tails: gaps, never repeats) and
//!   checks each key's registration again at its next request. Segments reserved after the
//!   counter was read are above every floor raised before it moved.
//! - A graceful stop saves the counter beside the WEAK tails it keeps; a start that finds it
//!   moved drops them (a floor may have been raised inside them meanwhile).
//! - A node that cannot read the counter for [`STALE_AFTER`] (the store unreachable from it
//!   alone, a partition) drops what it holds all the same, every second until it reads the
//!   counter again: a raise it cannot hear of would otherwise be missed. Within [`REACH`] of
//!   a raise returning, no node serves an ID at or below the floor.
//!
//! The cost: a change of floor or registration makes every node fetch a new segment for
//! each key it serves; a store unreachable for more than [`STALE_AFTER`] ends WEAK's
//! serving from its buffers then (it answers `UNAVAILABLE`, as when the buffers run out).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::{within, ErrorKind, Key, SeqError, StoreHandle};

/// The counter of changes of floors and registrations, a key of floe's own in each store.
pub const CHANGES_KEY: &str = "floe.changes";

/// How long after a raise or an unregistration returns every node of the store honours it
/// (given every node reads the counter [`EVERY`]): a stale node drops its IDs after
/// [`STALE_AFTER`], a read takes at most 1 s, and reads are [`EVERY`] apart.
pub const REACH: Duration = Duration::from_secs(5);

/// How often each node reads [`CHANGES_KEY`].
pub const EVERY: Duration = Duration::from_secs(1);

/// How long a node serves its buffered IDs without a reading of the counter.
pub const STALE_AFTER: Duration = Duration::from_secs(3);

/// The bound of one reading.
const READ_WITHIN: Duration = Duration::from_secs(1);

fn changes_key() -> Key {
    Key::new(CHANGES_KEY).expect("a valid key")
}

/// What a store handle knows of its changes.
#[derive(Debug)]
pub(crate) struct Changes {
    /// The counter as last read; `None` before the first reading.
    seen: Mutex<Option<i64>>,
    /// Bumped each time the registrations must be checked again: a key held in memory was
    /// checked at the generation its entry records ([`crate::keys`]).
    registrations: AtomicU64,
    /// Whether the store keeps the counter (`false` once it refused to: Leaf's table).
    kept: AtomicBool,
    /// The value this node last wrote, so that its own change does not drop its buffers twice.
    wrote: AtomicI64,
}

impl Default for Changes {
    fn default() -> Self {
        Changes {
            seen: Mutex::new(None),
            registrations: AtomicU64::new(1),
            kept: AtomicBool::new(true),
            wrote: AtomicI64::new(i64::MIN),
        }
    }
}

impl Changes {
    /// The current generation of registrations.
    pub(crate) fn registrations(&self) -> u64 {
        self.registrations.load(Ordering::Acquire)
    }

    /// Every key's registration is to be checked again.
    pub(crate) fn recheck_registrations(&self) {
        self.registrations.fetch_add(1, Ordering::AcqRel);
    }
}

impl StoreHandle {
    /// Tells every node of the store that a floor or a registration changed (see the module
    /// docs). A store that cannot keep the counter is told nothing (other nodes then learn
    /// of it only as their buffers run out): said once, in the log.
    ///
    /// # Errors
    /// `Unavailable` and the store's others: the change was made, but other nodes may not
    /// hear of it; the caller says so, and a retry of the (idempotent) change tells them.
    pub(crate) async fn announce_change(&self) -> Result<(), SeqError> {
        if !self.changes.kept.load(Ordering::Acquire) {
            return Ok(());
        }
        let key = changes_key();
        match self
            .bounded("announce a change to", &key, self.store.reserve(&key, 1))
            .await
        {
            Ok(v) => {
                self.changes.wrote.store(v, Ordering::Release);
                Ok(())
            }
            Err(e)
                if matches!(
                    e.kind,
                    ErrorKind::UnknownKey | ErrorKind::Unsupported | ErrorKind::InvalidArgument
                ) =>
            {
                self.changes.kept.store(false, Ordering::Release);
                tracing::warn!(
                    store = %self.name,
                    "store {}: it cannot keep {CHANGES_KEY} ({e}): floors and unregistrations reach other nodes only as their buffers run out",
                    self.name
                );
                Ok(())
            }
            // The store is refused for going back (crate::guard): its keys are raised to
            // repair it, and the repair's own raise (floe.repair, which lifts the refusal
            // first) tells the other nodes.
            Err(e) if e.kind == ErrorKind::DataLoss => Ok(()),
            Err(e) => Err(SeqError::new(
                e.kind,
                format!(
                    "the change was made, but other nodes of store {} could not be told ({e}): make it again",
                    self.name
                ),
            )),
        }
    }

    /// The store's counter now; `None` when it cannot be read (or the store cannot keep it).
    pub(crate) async fn changes_now(&self) -> Option<i64> {
        self.read_counter().await.ok()
    }

    /// The store's counter (0 before the first change), read within [`READ_WITHIN`].
    async fn read_counter(&self) -> Result<i64, SeqError> {
        let key = changes_key();
        within(
            &*self.store,
            READ_WITHIN,
            "read",
            &key,
            self.store.value(&key),
        )
        .await
        .map(|v| v.unwrap_or(0))
    }

    /// Drops every WEAK ID this handle holds and has every key's registration checked again
    /// (a floor or registration changed elsewhere, or none can be heard of).
    pub(crate) fn forget_buffers(&self) {
        self.changes.recheck_registrations();
        for weak in self.keys.weak_keys() {
            weak.invalidate();
        }
        drop(self.keys.drain_parked());
    }

    /// One reading of the counter: the buffers dropped when it moved (unless this node moved
    /// it and nobody else did). Whether it was read.
    async fn read_changes(&self) -> bool {
        let now = match self.read_counter().await {
            Ok(v) => v,
            Err(e) if matches!(e.kind, ErrorKind::Unsupported | ErrorKind::UnknownKey) => {
                self.changes.kept.store(false, Ordering::Release);
                return true;
            }
            Err(_) => return false,
        };
        let before = {
            let mut seen = self.changes.seen.lock().unwrap_or_else(|p| p.into_inner());
            seen.replace(now)
        };
        if let Some(before) = before {
            let own = before.checked_add(1) == Some(now)
                && self.changes.wrote.load(Ordering::Acquire) == now;
            if now != before && !own {
                tracing::info!(store = %self.name, "store {}: a floor or a registration changed on another node ({CHANGES_KEY} {before} -> {now}): buffered IDs dropped", self.name);
                self.forget_buffers();
            }
        }
        true
    }
}

/// Reads the counter of `handle` every [`EVERY`] for as long as the handle lives (see the
/// module docs); nothing for a store that cannot keep it.
pub(crate) fn watch(handle: &Arc<StoreHandle>) -> impl std::future::Future<Output = ()> + Send {
    let weak: Weak<StoreHandle> = Arc::downgrade(handle);
    async move {
        let mut last_read = Instant::now();
        loop {
            tokio::time::sleep(EVERY).await;
            let Some(h) = weak.upgrade() else { return };
            if !h.changes.kept.load(Ordering::Acquire) {
                return;
            }
            let began = Instant::now();
            if h.read_changes().await {
                last_read = began;
            } else if began.duration_since(last_read) >= STALE_AFTER {
                // Not heard for STALE_AFTER: a raise could have been made meanwhile.
                h.forget_buffers();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::memory::MemoryStore;
    use crate::{Mode, ServeOptions, Store};

    #[tokio::test]
    async fn a_raise_elsewhere_drops_this_nodes_buffered_ids() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let a = Arc::new(StoreHandle::new(
            "s",
            store.clone(),
            ServeOptions::default(),
        ));
        let b = Arc::new(StoreHandle::new(
            "s",
            store.clone(),
            ServeOptions::default(),
        ));
        assert!(a.read_changes().await && b.read_changes().await);
        let first = b.next_id("k", Mode::Weak).await.unwrap();
        assert_eq!(first, 1);
        // Raised on a: b's buffer (1..=1000) lies below.
        a.raise_floor(&Key::new("k").unwrap(), 500).await.unwrap();
        assert_eq!(
            b.next_id("k", Mode::Weak).await.unwrap(),
            2,
            "not heard yet"
        );
        assert!(b.read_changes().await);
        assert!(b.next_id("k", Mode::Weak).await.unwrap() > 500);
        // a's own change does not drop a's buffer twice.
        let mine = a.next_id("k", Mode::Weak).await.unwrap();
        assert!(a.read_changes().await);
        assert_eq!(a.next_id("k", Mode::Weak).await.unwrap(), mine + 1);
    }

    #[tokio::test]
    async fn an_unregistration_reaches_a_key_held_here_and_elsewhere() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let handle = || {
            Arc::new(
                StoreHandle::new("s", store.clone(), ServeOptions::default()).registered_only(true),
            )
        };
        let (a, b) = (handle(), handle());
        let k = Key::new("k").unwrap();
        a.register(&k).await.unwrap();
        assert!(a.read_changes().await && b.read_changes().await);
        // Both hold the key, in use (a WeakKey handed out keeps it from being let go).
        let held_a = a.weak_key(&k);
        let held_b = b.weak_key(&k);
        for h in [&a, &b] {
            h.next_id("k", Mode::Weak).await.unwrap();
            h.next_id("k", Mode::Weak).await.unwrap();
        }
        assert!(a.unregister(&k).await.unwrap());
        // Here at once, though the key is held.
        let e = a.next_id("k", Mode::Weak).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownKey, "{e}");
        // Elsewhere once the change is read.
        b.next_id("k", Mode::Weak).await.unwrap();
        assert!(b.read_changes().await);
        let e = b.next_id("k", Mode::Strong).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownKey, "{e}");
        drop((held_a, held_b));
    }
}
