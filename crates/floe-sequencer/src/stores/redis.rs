//! `redis://host:port[/db][?prefix=floe:seq:]` (or `?layotto=APP`): one Redis string per key,
//! `INCRBY` to reserve.
//!
//! **Durability depends on the server.** Redis acknowledges an `INCRBY` before it is on disk
//! unless the server runs with `appendonly yes` and `appendfsync always`; with the defaults a
//! server crash loses the last second or so of increments and floe would then reissue IDs.
//! Replicas are asynchronous, so a failover can lose increments too (Layotto's table). Run a
//! single server with AOF `always` for sequences that must never repeat.
//!
//! Keys are stored as `{prefix}{key}` (default prefix `floe:seq:`); `bigger_than` applies to the
//! key as users name it. The client reconnects by itself after the server comes back.
//!
//! **Layotto's keys, in place: `?layotto=APP`** (the prefix `sequencer|||APP||`, see
//! [`super::layotto`]; `?layotto=` for `sequencer|||`). Layotto's Redis component keeps the
//! same thing floe does: one string per key, the last ID given, moved by `INCR` (STRONG, and
//! WEAK without a cache) and `INCRBY 10000` (its WEAK segments). So floe continues every key
//! just above the last ID Layotto issued, and **floe and Layotto sidecars can serve the same
//! keys at the same time**: every reservation, theirs or floe's, is one atomic `INCRBY` on one
//! counter, so no ID is given twice. Layotto's `biggerThan` sets a key missing or lower to the
//! floor; floe's raise does the same (it never lowers a key). Layotto's `biggerThan` names the
//! stored key, floe's `bigger_than` the client's key.
//!
//! **TLS**: `rediss://host:port[/db]` (rustls with ring), the server's certificate checked
//! against the system's roots, or against the CA of `?ca_cert=/path/ca.pem` (a PEM file,
//! read at start-up; floe's own option, not passed to Redis). The name checked is the URL's
//! host. `ca_cert` with `redis://` is refused.

use std::time::Duration;

use async_trait::async_trait;
use floe_core::sequence::Key;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind as RedisKind, RedisError, Script};

use floe_core::endpoint::take_options;

use crate::{ErrorKind, SeqError, Store};

/// Lifts a key to at least ARGV[1] (a positive decimal), comparing decimal strings by length
/// then bytes so that values past 2^53 compare exactly (Lua numbers are doubles).
const RAISE: &str = r"
local cur = redis.call('GET', KEYS[1])
local want = ARGV[1]
if (not cur) or (#cur < #want) or (#cur == #want and cur < want) then
  redis.call('SET', KEYS[1], want)
end
return 1
";

/// A Redis server through a multiplexed, self-reconnecting connection.
pub struct RedisStore {
    conn: ConnectionManager,
    prefix: String,
    raise: Script,
    address: String,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The address without credentials.
        f.debug_struct("RedisStore")
            .field("address", &self.address)
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// Maps the client's errors: connection trouble is temporary, overflow is exhaustion.
fn map_err(what: &str, key: &Key, e: RedisError) -> SeqError {
    let text = e.to_string();
    if text.contains("would overflow") {
        return SeqError::exhausted("redis", key.as_str());
    }
    let kind = match e.kind() {
        RedisKind::AuthenticationFailed | RedisKind::InvalidClientConfig => ErrorKind::Config,
        _ if text.contains("not an integer") => ErrorKind::Corrupt,
        _ => ErrorKind::Unavailable,
    };
    SeqError::new(
        kind,
        format!("redis: {what} key {:?}: {text}", key.as_str()),
    )
}

impl RedisStore {
    /// Connects to the server of `url`.
    ///
    /// # Errors
    /// `Config` for a bad URL; `Unavailable` when the server does not answer.
    pub async fn connect(url: &str) -> Result<RedisStore, SeqError> {
        let (url, own) = take_options(url, &["prefix", "ca_cert", "layotto"]);
        let mut prefix = None;
        let mut layotto = None;
        let mut ca_cert = None;
        for (name, value) in own {
            match name {
                "prefix" => prefix = Some(value),
                "layotto" => layotto = Some(super::layotto::key_prefix("layotto", &value)?),
                _ => ca_cert = Some(value),
            }
        }
        let prefix = match (prefix, layotto) {
            (Some(_), Some(_)) => {
                return Err(SeqError::config(
                    "store: prefix and layotto both set the Redis key prefix: give one (layotto=APP is prefix=sequencer|||APP||)",
                ))
            }
            (Some(p), None) | (None, Some(p)) => p,
            (None, None) => "floe:seq:".to_string(),
        };
        let tls = url.starts_with("rediss://");
        if tls {
            // Redis builds its rustls configuration with the process's provider: ring, the
            // only one floe is built with (a no-op when one is installed already).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let bad_url = |e: RedisError| SeqError::config(format!("store: bad Redis URL: {e}"));
        let client = match ca_cert {
            None => redis::Client::open(url.as_str()).map_err(bad_url)?,
            Some(_) if !tls => {
                return Err(SeqError::config(
                    "store: ca_cert is for TLS: use rediss://host:port with it",
                ))
            }
            Some(path) => {
                let pem = tokio::fs::read(&path).await.map_err(|e| {
                    SeqError::config(format!("store: ca_cert: cannot read {path}: {e}"))
                })?;
                if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                    return Err(SeqError::config(format!(
                        "store: ca_cert: {path}: no PEM certificate in it"
                    )));
                }
                let certs = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                };
                redis::Client::build_with_tls(url.as_str(), certs)
                    .map_err(|e| SeqError::config(format!("store: ca_cert: {path}: {e}")))?
            }
        };
        let address = client.get_connection_info().addr().to_string();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|e| {
                // A plain-text server reads a TLS handshake as the start of a command and waits.
                let hint = if tls && e.is_timeout() {
                    " (rediss:// speaks TLS: is the server's port a TLS port?)"
                } else {
                    ""
                };
                SeqError::unavailable(format!("redis: cannot connect to {address}: {e}{hint}"))
            })?;
        Ok(RedisStore {
            conn,
            prefix,
            raise: Script::new(RAISE),
            address,
        })
    }

    fn stored(&self, key: &Key) -> String {
        format!("{}{}", self.prefix, key.as_str())
    }
}

#[async_trait]
impl Store for RedisStore {
    fn kind(&self) -> &'static str {
        "redis"
    }

    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        let mut conn = self.conn.clone();
        redis::cmd("INCRBY")
            .arg(self.stored(key))
            .arg(n)
            .query_async::<i64>(&mut conn)
            .await
            .map_err(|e| map_err("INCRBY", key, e))
    }

    async fn ping(&self) -> Result<(), SeqError> {
        let mut conn = self.conn.clone();
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map(drop)
            .map_err(|e| SeqError::unavailable(format!("redis: PING: {e}")))
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        if floor <= 0 {
            return Ok(()); // every key is at 0 or above already
        }
        let mut conn = self.conn.clone();
        self.raise
            .key(self.stored(key))
            .arg(floor.to_string())
            .invoke_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(|e| map_err("raise", key, e))
    }
}
