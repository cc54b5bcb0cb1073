//! `etcd://host:port[,host:port...][/root]` (feature `etcd`): one etcd key per sequence key,
//! `{root}/{key}` (root default `/floe/sequences`), holding the last value as decimal text.
//!
//! **Reserve** is a transaction: *if the key's mod revision is still the one this process saw,
//! put the new value, else read the key*. The common case is one round trip; a process that
//! lost the race learns the current value from the same answer and tries again. A missing key
//! has mod revision 0, so creation is the same transaction. etcd's transactions are
//! linearizable, and durable once acknowledged (raft log fsync).

use std::time::Duration;

use async_trait::async_trait;
use floe_core::sequence::Key;
use floe_etcd::{
    Client, Compare, CompareOp, ConnectOptions, Error as EtcdError, Txn, TxnGet, TxnOp,
};

use super::cas::{contended, parse, target, SeenCache, MAX_ATTEMPTS};
use crate::{servers_and_root, ErrorKind, SeqError, Store};

/// An etcd cluster (the client reconnects by itself).
pub struct EtcdStore {
    client: Client,
    root: String,
    endpoints: String,
    seen: SeenCache<i64>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.endpoints)
            .field("root", &self.root)
            .finish()
    }
}

fn map_err(what: &str, key: &Key, e: EtcdError) -> SeqError {
    let kind = if e.is_config() {
        ErrorKind::Config
    } else {
        ErrorKind::Unavailable
    };
    SeqError::new(kind, format!("etcd: {what} key {:?}: {e}", key.as_str()))
}

impl EtcdStore {
    /// Connects to the cluster of `url`.
    ///
    /// # Errors
    /// `Config` for a bad URL; `Unavailable` when no endpoint answers.
    pub async fn connect(url: &str) -> Result<EtcdStore, SeqError> {
        let (endpoints, root) = servers_and_root("etcd", url)?;
        let options = ConnectOptions::both(Duration::from_secs(2));
        let client = Client::connect(endpoints.split(','), options).map_err(|e| {
            SeqError::unavailable(format!("etcd: cannot connect to {endpoints}: {e}"))
        })?;
        client
            .get(root)
            .await
            .map_err(|e| SeqError::unavailable(format!("etcd: cannot reach {endpoints}: {e}")))?;
        Ok(EtcdStore {
            client,
            root: root.to_string(),
            endpoints: endpoints.to_string(),
            seen: SeenCache::default(),
        })
    }

    fn path(&self, key: &Key) -> String {
        format!("{}/{}", self.root, key.as_str())
    }

    /// Reserves `n` (`floor` None) or raises to `floor`; the key's value afterwards.
    async fn swap(&self, key: &Key, n: u32, floor: Option<i64>) -> Result<i64, SeqError> {
        let path = self.path(key);
        let (mut value, mut revision) = self.seen.get(key).unwrap_or((0, 0));
        for _ in 0..MAX_ATTEMPTS {
            let Some(new) = target("etcd", key, value, n, floor)? else {
                return Ok(value);
            };
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    path.as_str(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then([TxnOp::put(path.as_str(), new.to_string(), 0)])
                .or_else([TxnOp::get(path.as_str())]);
            let resp = self.client.txn(txn).await.map_err(|e| {
                self.seen.forget(key);
                map_err("update", key, e)
            })?;
            if resp.succeeded {
                let rev = resp.header.as_ref().map_or(0, |h| h.revision);
                self.seen.put(key, (new, rev));
                return Ok(new);
            }
            (value, revision) = (0, 0);
            for get in resp.gets() {
                if let Some(kv) = get.kvs.first() {
                    (value, revision) = (parse("etcd", key, &kv.value)?, kv.mod_revision);
                }
            }
        }
        self.seen.forget(key);
        Err(contended("etcd", key))
    }
}

#[async_trait]
impl Store for EtcdStore {
    fn kind(&self) -> &'static str {
        "etcd"
    }

    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        self.swap(key, n, None).await
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        self.swap(key, 0, Some(floor)).await.map(drop)
    }

    async fn ping(&self) -> Result<(), SeqError> {
        // A read of one key under the root: answered by any member with a quorum.
        self.client
            .get(format!("{}/", self.root))
            .await
            .map(drop)
            .map_err(|e| SeqError::unavailable(format!("etcd: {}: {e}", self.endpoints)))
    }
}

impl EtcdStore {
    /// The cluster's endpoints, for messages.
    pub fn endpoints(&self) -> &str {
        &self.endpoints
    }
}
