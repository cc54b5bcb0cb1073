//! STRONG serving: every ID comes from an atomic increment in the store that finished after
//! its request arrived, so a key's IDs strictly increase in real time across every process
//! sharing the store.
//!
//! **Group commit.** Requests for a key that arrive while its increment is in flight wait for
//! the next one, which reserves one value per waiting request (`INCRBY n`, `value + n`, one
//! compare-and-swap) and hands them out in arrival order. This keeps the real-time order: a
//! request that returned before another started was served by an earlier increment (or earlier
//! in the same one), and the requests served together were all waiting at once. One increment
//! is in flight per key and process, so compare-and-swap stores (etcd, ZooKeeper) do not race
//! against themselves, and a store's round trip is shared by everyone waiting for it.
//!
//! A request whose caller gave up before its increment started takes no value.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use floe_core::sequence::Key;
use tokio::sync::oneshot;

use crate::{ErrorKind, SeqError, Store};

/// The most requests one increment serves.
const MAX_BATCH: usize = 4096;

type Reply = oneshot::Sender<Result<i64, SeqError>>;

#[derive(Default)]
struct Queue {
    waiting: Vec<Reply>,
    running: bool,
}

/// The STRONG queue of one key of one store.
pub struct StrongKey {
    key: Key,
    store: Arc<dyn Store>,
    timeout: Duration,
    /// A std mutex: held only to push or take waiters, never across an await.
    queue: Mutex<Queue>,
}

impl std::fmt::Debug for StrongKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StrongKey")
            .field("key", &self.key)
            .field("store", &self.store.kind())
            .finish()
    }
}

impl StrongKey {
    /// An idle queue of `key` on `store`; `timeout` bounds each increment.
    pub fn new(store: Arc<dyn Store>, key: Key, timeout: Duration) -> StrongKey {
        StrongKey {
            key,
            store,
            timeout,
            queue: Mutex::new(Queue::default()),
        }
    }

    /// The key's next ID, strictly after every ID returned before this call started.
    pub async fn next(self: &Arc<Self>) -> Result<i64, SeqError> {
        let (tx, rx) = oneshot::channel();
        let lead = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.waiting.push(tx);
            !std::mem::replace(&mut q.running, true)
        };
        if lead {
            // In a task of its own, so that a caller giving up never strands the others.
            let this = Arc::clone(self);
            tokio::spawn(async move { this.drain().await });
        }
        rx.await.unwrap_or_else(|_| {
            Err(SeqError::unavailable(format!(
                "{}: the increment of key {:?} stopped",
                self.store.kind(),
                self.key.as_str()
            )))
        })
    }

    async fn drain(&self) {
        loop {
            let batch: Vec<Reply> = {
                let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                if q.waiting.is_empty() {
                    q.running = false;
                    return;
                }
                let n = q.waiting.len().min(MAX_BATCH);
                q.waiting.drain(..n).collect()
            };
            let batch: Vec<Reply> = batch.into_iter().filter(|tx| !tx.is_closed()).collect();
            if batch.is_empty() {
                continue;
            }
            match self.reserve(batch.len() as u32).await {
                Ok(last) => {
                    let first = last - batch.len() as i64 + 1;
                    for (i, tx) in batch.into_iter().enumerate() {
                        let _ = tx.send(Ok(first + i as i64));
                    }
                }
                // Near the end of the sequence a batch may not fit while single IDs still do.
                Err(e) if e.kind == ErrorKind::Exhausted && batch.len() > 1 => {
                    for tx in batch {
                        let _ = tx.send(self.reserve(1).await);
                    }
                }
                Err(e) => {
                    for tx in batch {
                        let _ = tx.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    async fn reserve(&self, n: u32) -> Result<i64, SeqError> {
        tokio::time::timeout(self.timeout, self.store.reserve(&self.key, n))
            .await
            .unwrap_or_else(|_| {
                Err(SeqError::unavailable(format!(
                    "{}: no answer within {:?} incrementing key {:?}",
                    self.store.kind(),
                    self.timeout,
                    self.key.as_str()
                )))
            })
    }
}
