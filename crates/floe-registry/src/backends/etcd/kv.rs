//! The etcd calls the registry makes, as a trait: etcd itself ([`floe_etcd::Client`]), or a
//! stand-in that the deterministic simulation of the keeper runs against (`sim`).

use async_trait::async_trait;
use floe_etcd::{
    Client, Error, LeaseGrantResponse, LeaseKeepAliveResponse, RangeResponse, Txn, TxnResponse,
};

/// The calls of [`floe_etcd::Client`] the registry and its keeper make.
#[async_trait]
pub(crate) trait Kv: Send + Sync {
    /// The key `key`, if it exists.
    async fn get(&self, key: &str) -> Result<RangeResponse, Error>;
    /// Every key under `prefix`.
    async fn get_prefix(&self, prefix: &str) -> Result<RangeResponse, Error>;
    /// A transaction: whether its conditions held, and its operations' answers.
    async fn txn(&self, txn: Txn) -> Result<TxnResponse, Error>;
    /// A new lease of `ttl_secs` seconds.
    async fn lease_grant(&self, ttl_secs: i64) -> Result<LeaseGrantResponse, Error>;
    /// Ends lease `id` now (its keys go with it).
    async fn lease_revoke(&self, id: i64) -> Result<(), Error>;
    /// One keep-alive of lease `id`: its new TTL (0 or less: gone); `None`, no answer.
    async fn lease_keep_alive_once(&self, id: i64)
        -> Result<Option<LeaseKeepAliveResponse>, Error>;
}

#[async_trait]
impl Kv for Client {
    async fn get(&self, key: &str) -> Result<RangeResponse, Error> {
        Client::get(self, key).await
    }

    async fn get_prefix(&self, prefix: &str) -> Result<RangeResponse, Error> {
        Client::get_prefix(self, prefix).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, Error> {
        Client::txn(self, txn).await
    }

    async fn lease_grant(&self, ttl_secs: i64) -> Result<LeaseGrantResponse, Error> {
        Client::lease_grant(self, ttl_secs).await
    }

    async fn lease_revoke(&self, id: i64) -> Result<(), Error> {
        Client::lease_revoke(self, id).await.map(|_| ())
    }

    async fn lease_keep_alive_once(
        &self,
        id: i64,
    ) -> Result<Option<LeaseKeepAliveResponse>, Error> {
        Client::lease_keep_alive_once(self, id).await
    }
}
