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
//! **Give back:** a script compares the key's value with the end of the caller's last
//! reservation (as decimal text, which is how `INCRBY` leaves it) and sets it just below the
//! range given back. Redis runs a script alone, so no `INCRBY`, floe's or Layotto's, comes
//! between the compare and the set: the same with `?layotto=`, whose keys count the same way.
//!
//! **Admin calls.** `value` is a `GET`. `keys` walks the whole keyspace with `SCAN MATCH
//! {prefix}*` (the prefix's glob characters escaped), keeps the smallest names after `after`,
//! and reads their values with one `MGET`: each page costs a pass over every key of the
//! database, fine for an admin call, not for the request path. With `?layotto=`, the keys
//! listed are the app's as floe serves them (a stored key whose rest holds `||` is another
//! app's and is left out, as is any rest that is no floe key). **Registered keys** are kept
//! apart, in one sorted set, `{prefix}ÿregistered` (the prefix, then the byte 0xFF, which
//! no key holds, being UTF-8: so it is no key's value, of this prefix or, being no UTF-8,
//! one Layotto can write), all scores 0, so that `ZRANGEBYLEX` pages it in byte order.
//! Unregistering removes the member only: the key's value is kept.
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

use super::parse;
use crate::store::stored_key;
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

/// Sets a key to ARGV[2] if its value is ARGV[1] (decimal text, as `INCRBY` leaves it); 1 if it
/// did. A missing key is no value: 0.
const GIVE_BACK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
";

/// What follows the prefix in the name of the sorted set of registered keys: the byte 0xFF
/// first, which no key (UTF-8) holds.
const REGISTERED: &[u8] = b"\xffregistered";

/// How many names one `SCAN` step asks for.
const SCAN_COUNT: usize = 1000;

/// A Redis server through a multiplexed, self-reconnecting connection.
pub struct RedisStore {
    conn: ConnectionManager,
    prefix: String,
    /// `?layotto=`: the prefix is Layotto's, whose keys of other apps it may hold too.
    layotto: bool,
    raise: Script,
    give_back: Script,
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

/// Maps the client's errors on a key: connection trouble is temporary, overflow is exhaustion.
fn map_err(what: &str, key: &Key, e: RedisError) -> SeqError {
    if e.to_string().contains("would overflow") {
        return SeqError::exhausted("redis", key.as_str());
    }
    error(&format!("{what} key {:?}", key.as_str()), e)
}

/// Maps the client's errors: a value that is no counter (not an integer, another type) is
/// `Corrupt`, bad credentials `Config`, the rest temporary.
fn error(what: &str, e: RedisError) -> SeqError {
    let text = e.to_string();
    let kind = match e.kind() {
        RedisKind::AuthenticationFailed | RedisKind::InvalidClientConfig => ErrorKind::Config,
        _ if text.contains("not an integer") || e.code() == Some("WRONGTYPE") => ErrorKind::Corrupt,
        _ => ErrorKind::Unavailable,
    };
    SeqError::new(kind, format!("redis: {what}: {text}"))
}

/// `text` as a `SCAN MATCH` pattern that matches it alone: glob characters escaped.
fn glob_escaped(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 1);
    for b in text.bytes() {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
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
        let prefix_is_layottos = layotto.is_some();
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
            layotto: prefix_is_layottos,
            prefix,
            raise: Script::new(RAISE),
            give_back: Script::new(GIVE_BACK),
            address,
        })
    }

    fn stored(&self, key: &Key) -> String {
        format!("{}{}", self.prefix, key.as_str())
    }

    /// The name of the sorted set of registered keys.
    fn registered_set(&self) -> Vec<u8> {
        [self.prefix.as_bytes(), REGISTERED].concat()
    }

    /// Runs `command` on the sorted set of registered keys, `key` its member (after
    /// `options`): the answer.
    async fn on_registered<T: redis::FromRedisValue>(
        &self,
        command: &str,
        options: &[&str],
        key: &Key,
    ) -> Result<T, SeqError> {
        let mut conn = self.conn.clone();
        redis::cmd(command)
            .arg(self.registered_set())
            .arg(options)
            .arg(key.as_str())
            .query_async(&mut conn)
            .await
            .map_err(|e| map_err(command, key, e))
    }

    /// The key of a stored name of the prefix, `None` for one that is not a key floe serves.
    fn client_key(&self, stored: &[u8]) -> Option<Key> {
        let rest = stored.strip_prefix(self.prefix.as_bytes())?;
        if self.layotto && rest.windows(2).any(|w| w == b"||") {
            return None; // another app's key (Layotto refuses keys holding "||")
        }
        Key::new(std::str::from_utf8(rest).ok()?).ok()
    }

    /// The smallest `want` keys of the prefix after `after` (a pass of `SCAN` over the
    /// database), in byte order.
    async fn scan_after(&self, after: Option<&Key>, want: usize) -> Result<Vec<Key>, SeqError> {
        let mut conn = self.conn.clone();
        let pattern = [glob_escaped(&self.prefix), b"*".to_vec()].concat();
        let mut smallest = std::collections::BTreeSet::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, names): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(&mut conn)
                .await
                .map_err(|e| error(&format!("SCAN the keys {}*", self.prefix), e))?;
            for key in names.iter().filter_map(|n| self.client_key(n)) {
                if after.is_some_and(|a| key <= *a) {
                    continue;
                }
                smallest.insert(key);
                if smallest.len() > want {
                    smallest.pop_last();
                }
            }
            if next == 0 {
                return Ok(smallest.into_iter().collect());
            }
            cursor = next;
        }
    }
}

#[async_trait]
impl Store for RedisStore {
    fn kind(&self) -> &'static str {
        "redis"
    }

    /// `appendonly yes` with `appendfsync always`: anything less loses acknowledged increments
    /// in a crash (snapshots alone, the last ones; `everysec`, up to a second).
    async fn durability(&self) -> crate::Durability {
        use crate::Durability;
        let conn = self.conn.clone();
        let setting = |name: &'static str| {
            let mut c = conn.clone();
            async move {
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg(name)
                    .query_async::<Vec<String>>(&mut c)
                    .await
                    .map(|v| v.get(1).cloned().unwrap_or_default())
                    .map_err(|e| Durability::Unknown(format!("CONFIG GET {name}: {e}")))
            }
        };
        let read = async { Ok((setting("appendonly").await?, setting("appendfsync").await?)) };
        match read.await {
            Err(unknown) => unknown,
            Ok((aof, _)) if aof != "yes" => Durability::Volatile(format!(
                "appendonly is {aof:?} (needs yes, with appendfsync always)"
            )),
            Ok((_, fsync)) if fsync != "always" => {
                Durability::Volatile(format!("appendfsync is {fsync:?} (needs always)"))
            }
            Ok(_) => Durability::Durable,
        }
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

    async fn give_back(&self, key: &Key, first: i64, last: i64) -> Result<bool, SeqError> {
        let Some(before) = crate::store::given_back_value(first, last) else {
            return Ok(false);
        };
        let mut conn = self.conn.clone();
        let done = self
            .give_back
            .key(self.stored(key))
            .arg(last.to_string())
            .arg(before.to_string())
            .invoke_async::<i64>(&mut conn)
            .await
            .map_err(|e| map_err(&format!("give back {first}..={last} of"), key, e))?;
        Ok(done == 1)
    }

    async fn value(&self, key: &Key) -> Result<Option<i64>, SeqError> {
        let mut conn = self.conn.clone();
        let value: Option<Vec<u8>> = redis::cmd("GET")
            .arg(self.stored(key))
            .query_async(&mut conn)
            .await
            .map_err(|e| map_err("GET", key, e))?;
        value.map(|v| parse("redis", key, &v)).transpose()
    }

    async fn keys(&self, after: Option<&Key>, limit: usize) -> Result<Vec<(Key, i64)>, SeqError> {
        let mut page = Vec::new();
        let mut after = after.cloned();
        // A key deleted between the SCAN and the MGET is passed over: scan on for the rest.
        while page.len() < limit {
            let want = limit - page.len();
            let keys = self.scan_after(after.as_ref(), want).await?;
            let Some(last) = keys.last().cloned() else {
                break;
            };
            let mut conn = self.conn.clone();
            let mut mget = redis::cmd("MGET");
            for k in &keys {
                mget.arg(self.stored(k));
            }
            let values: Vec<Option<Vec<u8>>> = mget
                .query_async(&mut conn)
                .await
                .map_err(|e| error(&format!("MGET the keys {}*", self.prefix), e))?;
            for (k, v) in keys.iter().zip(values) {
                // None: deleted since, or no string (MGET answers nil for other types).
                if let Some(v) = v {
                    page.push((k.clone(), parse("redis", k, &v)?));
                }
            }
            if keys.len() < want {
                break;
            }
            after = Some(last);
        }
        Ok(page)
    }

    async fn is_registered(&self, key: &Key) -> Result<bool, SeqError> {
        let score: Option<String> = self.on_registered("ZSCORE", &[], key).await?;
        Ok(score.is_some())
    }

    async fn register(&self, key: &Key) -> Result<bool, SeqError> {
        let added: i64 = self.on_registered("ZADD", &["NX", "0"], key).await?;
        Ok(added == 1)
    }

    async fn unregister(&self, key: &Key) -> Result<bool, SeqError> {
        let removed: i64 = self.on_registered("ZREM", &[], key).await?;
        Ok(removed == 1)
    }

    async fn registered(&self, after: Option<&Key>, limit: usize) -> Result<Vec<Key>, SeqError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let from = match after {
            Some(k) => [b"(", k.as_str().as_bytes()].concat(),
            None => b"-".to_vec(),
        };
        let mut conn = self.conn.clone();
        let set = self.registered_set();
        let members: Vec<Vec<u8>> = redis::cmd("ZRANGEBYLEX")
            .arg(&set)
            .arg(from)
            .arg("+")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut conn)
            .await
            .map_err(|e| {
                error(
                    &format!("ZRANGEBYLEX {:?}", String::from_utf8_lossy(&set)),
                    e,
                )
            })?;
        let set = String::from_utf8_lossy(&set);
        members
            .iter()
            .map(|m| {
                stored_key(
                    "redis",
                    format_args!("the set of registered keys {set:?}"),
                    m,
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_matched_as_it_is() {
        assert_eq!(glob_escaped("floe:seq:"), b"floe:seq:");
        assert_eq!(glob_escaped(r"a*b?[c]\d"), br"a\*b\?\[c\]\\d");
    }
}
