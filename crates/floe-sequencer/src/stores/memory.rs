//! `memory`: counters in this process's memory. For tests and trials: **not durable** (a
//! restart starts every key again at 1) and not shared between processes.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Mutex;

use async_trait::async_trait;
use floe_core::sequence::{reserve_after, Key};

use crate::{Capabilities, SeqError, Store};

/// Counters in a map behind a mutex (no await happens while it is held), and the registered
/// keys.
#[derive(Debug, Default)]
pub struct MemoryStore {
    values: Mutex<HashMap<Key, i64>>,
    registered: Mutex<BTreeSet<Key>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn registered(&self) -> std::sync::MutexGuard<'_, BTreeSet<Key>> {
        self.registered.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn values(&self) -> std::sync::MutexGuard<'_, HashMap<Key, i64>> {
        // A panic while the lock was held cannot leave a half-written i64 behind.
        self.values.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            segments: true,
            strong: true,
            durable: false,
            shared: false,
        }
    }

    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        let mut values = self.values();
        let value = values.entry(key.clone()).or_insert(0);
        let next =
            reserve_after(*value, n).ok_or_else(|| SeqError::exhausted("memory", key.as_str()))?;
        *value = next;
        Ok(next)
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        let mut values = self.values();
        let value = values.entry(key.clone()).or_insert(0);
        *value = (*value).max(floor);
        Ok(())
    }

    async fn value(&self, key: &Key) -> Result<Option<i64>, SeqError> {
        Ok(self.values().get(key).copied())
    }

    async fn keys(&self, after: Option<&Key>, limit: usize) -> Result<Vec<(Key, i64)>, SeqError> {
        // A hash map (lighter per key than a tree on the request path): a page is a scan.
        let values = self.values();
        let mut page: Vec<(Key, i64)> = values
            .iter()
            .filter(|(k, _)| after.is_none_or(|a| *k > a))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        page.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        page.truncate(limit);
        Ok(page)
    }

    async fn is_registered(&self, key: &Key) -> Result<bool, SeqError> {
        Ok(self.registered().contains(key))
    }

    async fn register(&self, key: &Key) -> Result<bool, SeqError> {
        Ok(self.registered().insert(key.clone()))
    }

    async fn unregister(&self, key: &Key) -> Result<bool, SeqError> {
        Ok(self.registered().remove(key))
    }

    async fn registered(&self, after: Option<&Key>, limit: usize) -> Result<Vec<Key>, SeqError> {
        let registered = self.registered();
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        Ok(registered
            .range::<Key, _>((from, Bound::Unbounded))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn give_back(&self, key: &Key, first: i64, last: i64) -> Result<bool, SeqError> {
        let Some(before) = crate::store::given_back_value(first, last) else {
            return Ok(false);
        };
        match self.values().get_mut(key) {
            Some(value) if *value == last => {
                *value = before;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
