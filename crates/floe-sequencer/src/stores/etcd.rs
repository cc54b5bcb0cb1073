//! `etcd://host:port[,host:port...][/root]` (feature `etcd`), or over TLS with a client
//! certificate and an etcd user,
//! `etcds://[user[:password]@]host:port[,...][/root]?cacert=PATH&cert=PATH&key=PATH&password_file=PATH`
//! (the same options as the etcd registry's: [`floe_etcd::Security`]; the user's role needs
//! readwrite on the keys with the root as prefix, which covers `{root}.registered/` too): one
//! etcd key per sequence key,
//! `{root}/{key}` (root default `/floe/sequences`), holding the last value as decimal text.
//!
//! **Reserve** is a transaction: *if the key's mod revision is still the one this process saw,
//! put the new value, else read the key*. The common case is one round trip; a process that
//! lost the race learns the current value from the same answer and tries again. A missing key
//! has mod revision 0, so creation is the same transaction. etcd's transactions are
//! linearizable, and durable once acknowledged (raft log fsync).
//!
//! **Give back** is one transaction too: *if the key's value is the end of the caller's last
//! reservation (as decimal text, the only way floe writes it), put the value just below the
//! range given back*. A reservation by any process in between changed the value, so the
//! compare fails and nothing changes.
//!
//! **Admin calls.** `value` reads the key; `keys` reads a page of the range `{root}/`, in
//! byte order, from just after the last key of the page before. **Registered keys** are kept
//! apart under the sibling prefix `{root}.registered/` (an empty value at
//! `{root}.registered/{key}`), outside the range `{root}/` of the values (the byte after the
//! root is `.`, not `/`): registering is a put conditional on the key's absence
//! (create revision 0), unregistering a delete, which leaves the value.
//!
//! **Layotto's keys.** Layotto's etcd component keeps no value: a key's ID is its etcd
//! *version* (the number of puts since it was created) after an empty put, at
//! `{keyPrefixPath}{stored key}` (`/layotto/` by default; the stored key as in
//! [`super::layotto`]). floe offers two ways on from there:
//!
//! - **In place, beside Layotto: `etcd://host:port?layotto=APP[&layotto_prefix=/layotto/]`.**
//!   floe serves on Layotto's keys as Layotto does: an ID is the version after an empty put
//!   (Layotto's one transaction of put and get), one put per ID, no segments (WEAK serves
//!   each ID from the store, as Layotto's WEAK does on etcd). A STRONG increment for `n`
//!   waiting requests (or a batch of `n`) takes `n` consecutive versions: `n` puts, each
//!   conditional on the key's mod revision being the one the last put left, so the run has no
//!   other put in it; a run cut by a put of another process is dropped (gaps, never a repeat)
//!   and taken again. Every version is given once, whoever puts, so **floe and Layotto can
//!   serve the same keys at the same time**. Costs one etcd write per ID; no root in the URL
//!   (the keys are Layotto's). `bigger_than` is refused at start-up when a key's version is
//!   below it, as Layotto refuses it: a version only grows by puts. `value` is the key's
//!   version (the last ID given, by Layotto or floe), and `keys` lists the app's keys as
//!   clients name them with their versions (not another app's, nor a rest holding `||`).
//!   **`give_back` always answers `false`** (the IDs are gaps): a version cannot be lowered,
//!   only a delete starts it again, at 1, which would reissue every ID. Registered keys are
//!   kept beside Layotto's prefix path as floe's are beside a root:
//!   `{layotto_prefix without its last /}.registered/{stored key}`, e.g.
//!   `/layotto.registered/sequencer|||APP||order`, which Layotto never reads.
//! - **Taking over, Layotto stopped: `etcd://host:port[/root]?from_layotto=APP[&layotto_prefix=/layotto/]`.**
//!   floe serves its own keys (above), and at start-up lifts each of them to at least the
//!   version of Layotto's key (the last ID Layotto gave), so it continues above it, with
//!   segments. Every start does it again (it never lowers a key). **Not safe while a Layotto
//!   sidecar still serves these keys**: Layotto goes on counting its own key's version,
//!   which knows nothing of floe's, and reaches IDs floe has given.

use std::time::Duration;

use async_trait::async_trait;
use floe_core::endpoint::take_options;
use floe_core::sequence::Key;
use floe_etcd::{
    Client, Compare, CompareOp, ConnectOptions, Error as EtcdError, Security, Txn, TxnGet, TxnOp,
    TxnResponse,
};

use super::cas::{contended, target, SeenCache, MAX_ATTEMPTS};
use super::layotto::{client_key, key_prefix, take_over};
use super::parse;
use crate::store::stored_key;
use crate::{servers_and_root, Capabilities, ErrorKind, SeqError, Store};

/// An etcd cluster (the client reconnects by itself).
pub struct EtcdStore {
    client: Client,
    root: String,
    endpoints: String,
    /// floe's keys: (value, mod revision) last seen. Layotto's: (version, mod revision).
    seen: SeenCache<i64>,
    /// `?layotto=`: Layotto's keys are served in place.
    layotto: bool,
    /// The full path before a client's key among the values: `{root}/`, or with `?layotto=`
    /// `{layotto_prefix}{app's prefix}`.
    values: String,
    /// The full path before a client's key among the registered keys.
    registered: String,
}

/// Layotto's `keyPrefixPath` as Layotto reads it: `/layotto/` by default, a custom value made
/// to start and end with `/`.
fn layotto_path(value: Option<String>) -> String {
    let value = value.unwrap_or_default();
    let trimmed = value.trim_matches('/');
    if trimmed.is_empty() {
        "/layotto/".to_string()
    } else {
        format!("/{trimmed}/")
    }
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
    /// Connects to the cluster of `url`; with `?from_layotto=`, lifts floe's keys above
    /// Layotto's.
    ///
    /// # Errors
    /// `Config` for a bad URL; `Unavailable` when no endpoint answers.
    pub async fn connect(url: &str) -> Result<EtcdStore, SeqError> {
        let (url, security) =
            Security::from_url(url).map_err(|e| SeqError::config(format!("store: etcd: {e}")))?;
        let (rest, own) = take_options(&url, &["layotto", "from_layotto", "layotto_prefix"]);
        let (endpoints, root) = servers_and_root("etcd", &rest)?;
        let (mut layotto, mut from_layotto, mut prefix_path) = (None, None, None);
        for (name, value) in own {
            match name {
                "layotto" => layotto = Some(key_prefix(name, &value)?),
                "from_layotto" => from_layotto = Some(key_prefix(name, &value)?),
                _ => prefix_path = Some(value),
            }
        }
        if layotto.is_some() && from_layotto.is_some() {
            return Err(SeqError::config(
                "store: etcd: layotto= (serve on Layotto's keys) and from_layotto= (take over from them) exclude each other: give one",
            ));
        }
        if prefix_path.is_some() && layotto.is_none() && from_layotto.is_none() {
            return Err(SeqError::config(
                "store: etcd: layotto_prefix goes with layotto=APP or from_layotto=APP",
            ));
        }
        let has_root = rest.split_once("://").is_some_and(|(_, r)| r.contains('/'));
        if layotto.is_some() && has_root {
            return Err(SeqError::config(format!(
                "store: etcd: layotto= serves on Layotto's keys under layotto_prefix (default /layotto/): the URL's root {root:?} would not be used; remove it"
            )));
        }
        let prefix_path = layotto_path(prefix_path);
        let options = ConnectOptions::both(Duration::from_secs(2));
        let scheme = security.scheme();
        // A refusal (TLS, user, files) is the configuration's; anything else an outage.
        let at = |e: EtcdError| {
            if e.is_config() {
                SeqError::config(format!("store: etcd: {scheme}://{endpoints}: {e}"))
            } else {
                SeqError::unavailable(format!("etcd: cannot reach {endpoints}: {e}"))
            }
        };
        let client = Client::connect_secure(endpoints.split(','), options, security)
            .await
            .map_err(at)?;
        client.get(root).await.map_err(at)?;
        let (values, registered) = match &layotto {
            Some(app) => (
                format!("{prefix_path}{app}"),
                format!("{}.registered/{app}", prefix_path.trim_end_matches('/')),
            ),
            None => (format!("{root}/"), format!("{root}.registered/")),
        };
        let store = EtcdStore {
            client,
            root: root.to_string(),
            endpoints: endpoints.to_string(),
            seen: SeenCache::default(),
            layotto: layotto.is_some(),
            values,
            registered,
        };
        if let Some(prefix) = from_layotto {
            let all = format!("{prefix_path}{prefix}");
            let found = store.client.get_prefix(all.as_str()).await.map_err(|e| {
                SeqError::unavailable(format!("etcd: cannot read Layotto's keys {all}*: {e}"))
            })?;
            let found = found
                .kvs
                .into_iter()
                .map(|kv| (kv.key[prefix_path.len()..].to_vec(), kv.version));
            take_over(&store, &prefix, found).await?;
        }
        Ok(store)
    }

    fn path(&self, key: &Key) -> String {
        [self.values.as_str(), key.as_str()].concat()
    }

    /// The path of a key's registration.
    fn registration(&self, key: &Key) -> String {
        format!("{}{}", self.registered, key.as_str())
    }

    /// The client's key of a path under `prefix`: on Layotto's keys, `None` for one that is
    /// not the app's as floe serves them; under floe's root, every one is a key floe wrote
    /// (`Corrupt` otherwise).
    fn client_key(&self, prefix: &str, path: &[u8]) -> Result<Option<Key>, SeqError> {
        if self.layotto {
            // Both prefixes end with the app's: its stored keys' rest is the client's key.
            return Ok(client_key(path, prefix));
        }
        let rest = &path[prefix.len().min(path.len())..];
        stored_key("etcd", format_args!("range {prefix}"), rest).map(Some)
    }

    /// A page of the keys under `prefix`, in byte order, after `after`: at most `limit`, each
    /// with what `f` makes of its pair. Paths that are no client's key (on Layotto's keys) are
    /// passed over, reading on until the page is full or the range ends.
    async fn page<T>(
        &self,
        prefix: &str,
        after: Option<&Key>,
        limit: usize,
        keys_only: bool,
        f: impl Fn(Key, &floe_etcd::KeyValue) -> Result<T, SeqError>,
    ) -> Result<Vec<T>, SeqError> {
        let mut from = after.map(|k| format!("{prefix}{}", k.as_str()).into_bytes());
        let mut page = Vec::new();
        while page.len() < limit {
            let want = limit - page.len();
            let found = self
                .client
                .get_page(
                    prefix,
                    from.as_deref(),
                    i64::try_from(want).unwrap_or(i64::MAX),
                    keys_only,
                )
                .await
                .map_err(|e| {
                    SeqError::unavailable(format!("etcd: cannot list the keys {prefix}*: {e}"))
                })?;
            let end = found.kvs.len() < want;
            for kv in &found.kvs {
                if let Some(key) = self.client_key(prefix, &kv.key)? {
                    page.push(f(key, kv)?);
                }
            }
            match found.kvs.last() {
                Some(last) if !end => from = Some(last.key.clone()),
                _ => break,
            }
        }
        Ok(page)
    }

    /// Layotto's key after one transaction of `txn`: (version, mod revision), (0, 0) if none.
    fn layotto_seen(resp: &TxnResponse) -> (i64, i64) {
        resp.gets()
            .iter()
            .find_map(|get| get.kvs.first())
            .map_or((0, 0), |kv| (kv.version, kv.mod_revision))
    }

    /// `n` IDs of Layotto's key in place: `n` consecutive versions (see the module docs); the
    /// last one.
    async fn layotto_reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        let path = self.path(key);
        let put_get = || [TxnOp::put(path.as_str(), "", 0), TxnOp::get(path.as_str())];
        if n == 1 {
            // Layotto's own transaction: any put's version is this ID alone.
            let resp = self
                .client
                .txn(Txn::new().and_then(put_get()))
                .await
                .map_err(|e| map_err("update", key, e))?;
            let (version, revision) = Self::layotto_seen(&resp);
            self.seen.put(key, (version, revision));
            return Ok(version);
        }
        let mut revision = self.seen.get(key).map_or(0, |(_, r)| r);
        let mut run = 0;
        let mut lost = 0;
        while lost < MAX_ATTEMPTS {
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    path.as_str(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then(put_get())
                .or_else([TxnOp::get(path.as_str())]);
            let resp = self.client.txn(txn).await.map_err(|e| {
                self.seen.forget(key);
                map_err("update", key, e)
            })?;
            let version;
            (version, revision) = Self::layotto_seen(&resp);
            if !resp.succeeded {
                // Another put came between: the run so far is gaps; start again from here.
                run = 0;
                lost += 1;
                continue;
            }
            run += 1;
            if run == n {
                self.seen.put(key, (version, revision));
                return Ok(version);
            }
        }
        self.seen.forget(key);
        Err(contended("etcd", key))
    }

    /// Layotto's `biggerThan` on its key in place: refused when the version is below.
    async fn layotto_raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        let path = self.path(key);
        let found = self
            .client
            .get(path.as_str())
            .await
            .map_err(|e| map_err("read", key, e))?;
        let version = found.kvs.first().map_or(0, |kv| kv.version);
        if version >= floor {
            return Ok(());
        }
        Err(SeqError::config(format!(
            "store: etcd (layotto): key {:?} ({path}) is at version {version}, below its bigger_than {floor}: Layotto's IDs are the key's version, which only puts raise (one per ID), so floe refuses it as Layotto does",
            key.as_str()
        )))
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

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // Layotto's keys count one put per ID: no ranges in one write.
            segments: !self.layotto,
            strong: true,
            durable: true,
            shared: true,
        }
    }

    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        if self.layotto {
            return self.layotto_reserve(key, n).await;
        }
        self.swap(key, n, None).await
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        if self.layotto {
            return self.layotto_raise(key, floor).await;
        }
        self.swap(key, 0, Some(floor)).await.map(drop)
    }

    async fn give_back(&self, key: &Key, first: i64, last: i64) -> Result<bool, SeqError> {
        let Some(before) = crate::store::given_back_value(first, last) else {
            return Ok(false);
        };
        if self.layotto {
            return Ok(false); // a version is never lowered (see the module docs)
        }
        let path = self.path(key);
        let txn = Txn::new()
            .when([Compare::value(
                path.as_str(),
                CompareOp::Equal,
                last.to_string(),
            )])
            .and_then([TxnOp::put(path.as_str(), before.to_string(), 0)]);
        let resp = self.client.txn(txn).await.map_err(|e| {
            self.seen.forget(key);
            map_err(&format!("give back {first}..={last} of"), key, e)
        })?;
        if resp.succeeded {
            let rev = resp.header.as_ref().map_or(0, |h| h.revision);
            self.seen.put(key, (before, rev));
        } else if self.seen.get(key).is_some_and(|(v, _)| v == last) {
            self.seen.forget(key); // stale: the value moved on
        }
        Ok(resp.succeeded)
    }

    async fn value(&self, key: &Key) -> Result<Option<i64>, SeqError> {
        let found = self
            .client
            .get(self.path(key))
            .await
            .map_err(|e| map_err("read", key, e))?;
        let Some(kv) = found.kvs.first() else {
            return Ok(None);
        };
        if self.layotto {
            return Ok(Some(kv.version));
        }
        parse("etcd", key, &kv.value).map(Some)
    }

    async fn keys(&self, after: Option<&Key>, limit: usize) -> Result<Vec<(Key, i64)>, SeqError> {
        let layotto = self.layotto;
        self.page(&self.values, after, limit, false, |key, kv| {
            let value = if layotto {
                kv.version
            } else {
                parse("etcd", &key, &kv.value)?
            };
            Ok((key, value))
        })
        .await
    }

    async fn is_registered(&self, key: &Key) -> Result<bool, SeqError> {
        let found = self
            .client
            .get(self.registration(key))
            .await
            .map_err(|e| map_err("read the registration of", key, e))?;
        Ok(!found.kvs.is_empty())
    }

    async fn register(&self, key: &Key) -> Result<bool, SeqError> {
        let path = self.registration(key);
        let txn = Txn::new()
            .when([Compare::create_revision(path.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(path.as_str(), "", 0)]);
        let resp = self
            .client
            .txn(txn)
            .await
            .map_err(|e| map_err("register", key, e))?;
        Ok(resp.succeeded)
    }

    async fn unregister(&self, key: &Key) -> Result<bool, SeqError> {
        let resp = self
            .client
            .delete(self.registration(key))
            .await
            .map_err(|e| map_err("unregister", key, e))?;
        Ok(resp.deleted > 0)
    }

    async fn registered(&self, after: Option<&Key>, limit: usize) -> Result<Vec<Key>, SeqError> {
        self.page(&self.registered, after, limit, true, |key, _| Ok(key))
            .await
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
