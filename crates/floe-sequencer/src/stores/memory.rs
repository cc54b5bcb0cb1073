//! `memory`: counters in this process's memory. For tests and trials: **not durable** (a
//! restart starts every key again at 1) and not shared between processes.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use floe_core::sequence::{reserve_after, Key};

use crate::{Capabilities, SeqError, Store};

/// Counters in a map behind a mutex (no await happens while it is held).
#[derive(Debug, Default)]
pub struct MemoryStore {
    values: Mutex<HashMap<Key, i64>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
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

    async fn give_back(&self, key: &Key, first: i64, last: i64) -> Result<bool, SeqError> {
        let mut values = self.values();
        match (values.get_mut(key), first.checked_sub(1)) {
            (Some(value), Some(before)) if *value == last && before < last => {
                *value = before;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
