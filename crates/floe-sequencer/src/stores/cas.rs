//! What the etcd and ZooKeeper stores share: compare-and-swap on a key's version, starting
//! from the version this process saw last, so that an uncontended increment is one round trip.

use std::collections::HashMap;
use std::sync::Mutex;

use floe_core::sequence::{reserve_after, Key};

use crate::SeqError;

/// A key's value and the version it had (etcd: mod revision, 0 when absent; ZooKeeper: the
/// node's data version, `None` when absent).
pub(crate) type Seen<V> = (i64, V);

/// What this process last saw of each key (a hint: a stale entry only costs a failed compare,
/// a missing one a read). At most [`SEEN_MAX`] keys: a new key that finds it full empties it.
#[derive(Debug, Default)]
pub(crate) struct SeenCache<V>(Mutex<HashMap<Key, Seen<V>>>);

/// The most keys a [`SeenCache`] holds, so that memory does not grow with every key ever used.
pub(crate) const SEEN_MAX: usize = 65_536;

impl<V: Copy> SeenCache<V> {
    pub(super) fn get(&self, key: &Key) -> Option<Seen<V>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .copied()
    }

    pub(super) fn put(&self, key: &Key, seen: Seen<V>) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = map.get_mut(key) {
            *v = seen;
            return;
        }
        if map.len() >= SEEN_MAX {
            // Emptied, not pruned: a hint costs one read to rebuild, and this is O(1) amortized.
            *map = HashMap::new();
        }
        map.insert(key.clone(), seen);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub(super) fn forget(&self, key: &Key) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

/// The value a key takes next: after reserving `n` (`floor` None), or lifted to `floor`;
/// `None` when a raise has nothing to do.
pub(crate) fn target(
    store: &str,
    key: &Key,
    current: i64,
    n: u32,
    floor: Option<i64>,
) -> Result<Option<i64>, SeqError> {
    match floor {
        Some(floor) => Ok((current < floor).then_some(floor)),
        None => reserve_after(current, n)
            .map(Some)
            .ok_or_else(|| SeqError::exhausted(store, key.as_str())),
    }
}

/// How many times a compare may fail in one call (other processes won each time) before the
/// call gives up as `Unavailable`.
pub(crate) const MAX_ATTEMPTS: u32 = 10_000;

pub(crate) fn contended(store: &str, key: &Key) -> SeqError {
    SeqError::unavailable(format!(
        "{store}: key {:?} changed under {MAX_ATTEMPTS} attempts in a row",
        key.as_str()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seen_cache_stays_bounded() {
        let seen = SeenCache::<i64>::default();
        for i in 0..(SEEN_MAX * 2 + 10) {
            seen.put(&Key::new(format!("k{i}")).unwrap(), (1, 1));
            assert!(seen.len() <= SEEN_MAX);
        }
        let k = Key::new("again").unwrap();
        seen.put(&k, (5, 7));
        seen.put(&k, (6, 8));
        assert_eq!(seen.get(&k), Some((6, 8)));
    }
}
