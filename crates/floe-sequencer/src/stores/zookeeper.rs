//! `zk://[user:password@]host:port[,host:port...][/root][?from_layotto=APP][&password_file=PATH]`:
//! one **persistent** node per key,
//! `{root}/{encoded key}` (root default `/floe/sequences`), holding the last value as decimal
//! text. (Layotto's ZooKeeper component keeps its counter in an ephemeral node and so loses it
//! with the session; a persistent node outlives every session.)
//!
//! - **Names:** keys are percent-encoded into one node name: bytes other than `A-Z a-z 0-9 - _`
//!   become `%XX` (so `/`, `.` and `..` cannot address other nodes).
//! - **Reserve:** `setData` with the node version this process saw last (one round trip when
//!   uncontended); `BadVersion` re-reads and tries again. A missing node is `create`d with the
//!   first value; `NodeExists` re-reads. Writes go through ZooKeeper's quorum and are durable
//!   once acknowledged.
//! - **Recovery:** a session that expires or closes (the server was down too long) is replaced
//!   by a new one on the next call, so the store recovers by itself.
//! - **Give back:** the key's node is read (or taken from what this process saw last), and if
//!   its value is the end of the caller's last reservation, `setData` with the version read
//!   sets it just below the range given back. A reservation by any process in between
//!   changed the version, so the write fails (`BadVersion`), the node is read again, and the
//!   answer is `false`.
//! - **Admin calls:** `value` reads the node. `keys` lists the root's children (ZooKeeper has
//!   no paged listing: every call reads all the names, and a root of more names than
//!   `jute.maxbuffer` (1 MB by default) holds cannot be listed), decodes them, and reads the
//!   data of the page's nodes, the requests pipelined. **Registered keys** are kept apart, as
//!   empty persistent nodes `{root}.registered/{encoded key}`, a sibling of the root (so no
//!   node under the root, and none of its values); the parent is created with the first
//!   registration. Unregistering deletes the key's node there only: its value is kept.
//! - **TLS:** `zks://...?cacert=PATH[&cert=PATH&key=PATH]` (cargo feature `zookeeper-tls`):
//!   every server over TLS, its certificate checked against the CA of `cacert` (PEM), floe's
//!   own certificate and key given for a server that asks for one.
//! - **Credentials:** with `user:password@` (or `user@` and `password_file=PATH`, the password
//!   the file's content) every session authenticates with ZooKeeper's `digest` scheme and every
//!   node the store creates (the root and its parents, the keys' nodes, the registered keys')
//!   is **creator-only** (`auth` ids, all permissions): another identity can neither read nor
//!   change a key. Without, the nodes are open to anyone (`world:anyone`) and a warning says so.
//!
//! **Taking over from Layotto: `zk://host:port[/root]?from_layotto=APP`.** Layotto's ZooKeeper
//! component counts in `/{stored key}` (the stored key as in [`super::layotto`], e.g.
//! `/sequencer|||APP||order`), an **ephemeral** node created by its sidecar's session: an ID is
//! the node's data version after an empty `setData`. At start-up floe lifts each of its own
//! keys to at least the version of the app's nodes that exist then (the last ID Layotto gave
//! in that node's life), and continues above it in its persistent nodes; every start does it
//! again (it never lowers a key). What floe cannot continue: the node dies with the Layotto
//! session that made it, and with it the count. IDs Layotto gave in an earlier session are
//! nowhere in ZooKeeper (Layotto gives them again itself after each restart), and once the
//! sidecar has stopped nothing is left. So take over while the sidecar is still up but its
//! clients have stopped calling it, and give `bigger_than` from the application's own records
//! when Layotto ever restarted. There is no way to serve beside Layotto on these nodes
//! (`?layotto=` is refused): any restart of a sidecar starts its counter again at 1, and
//! floe's IDs on the same node would repeat with it. The admin calls and give-backs work on
//! floe's own nodes, as without the option.

use std::fmt::Write as _;
use std::time::Duration;

use async_trait::async_trait;
use floe_core::sequence::Key;
use tokio::sync::Mutex;
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use floe_core::endpoint::{take_credentials, take_options, with_password_file, Credentials};

use super::cas::{contended, target, SeenCache, MAX_ATTEMPTS};
use super::layotto::{key_prefix, take_over};
use super::parse;
use crate::{servers_and_root, ErrorKind, SeqError, Store};

/// What follows the root in the path of the parent of the registered keys.
const REGISTERED: &str = ".registered";

/// A ZooKeeper ensemble.
pub struct ZkStore {
    cluster: String,
    root: String,
    /// The digest credentials every session authenticates with (none: open ACLs).
    credentials: Option<Credentials>,
    /// TLS to the servers (`zks://`): the CA's PEM, and floe's certificate and key.
    #[cfg(feature = "zookeeper-tls")]
    tls: Option<(String, Option<(String, String)>)>,
    /// The session; `None` after one was lost, until the next call connects again.
    client: Mutex<Option<Client>>,
    seen: SeenCache<Option<i32>>,
}

impl std::fmt::Debug for ZkStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkStore")
            .field("cluster", &self.cluster)
            .field("root", &self.root)
            .finish()
    }
}

fn map_err(what: &str, key: &str, e: ZkError) -> SeqError {
    match e {
        ZkError::AuthFailed => {
            return SeqError::config(format!(
                "store: zookeeper: {what} {key:?}: the server refused the session's authentication (AuthFailed): it requires credentials: give them in the store URL, zk://USER:PASSWORD@host:port/root or zk://USER@host:port/root?password_file=PATH"
            ))
        }
        ZkError::NoAuth => {
            return SeqError::config(format!(
                "store: zookeeper: {what} {key:?}: not authorized (NoAuth): the node's ACL does not admit this session's credentials: check the user and password of the store URL, or who created the node"
            ))
        }
        _ => {}
    }
    let kind = match e {
        ZkError::NoAuth | ZkError::AuthFailed | ZkError::BadArguments(_) => ErrorKind::Config,
        _ => ErrorKind::Unavailable,
    };
    SeqError::new(kind, format!("zookeeper: {what} {key:?}: {e}"))
}

/// The TLS options of `zks://`'s `cacert=`, `cert=` and `key=` files (PEM): the options, and
/// the files' text (read once, at start).
#[cfg(feature = "zookeeper-tls")]
#[allow(clippy::type_complexity)]
fn tls_options_of(
    files: &[Option<String>; 3],
) -> Result<
    (
        zookeeper_client::TlsOptions,
        (String, Option<(String, String)>),
    ),
    SeqError,
> {
    let read = |option: &str, path: &str| {
        std::fs::read_to_string(path).map_err(|e| {
            SeqError::config(format!(
                "store: {option} {}: cannot read it: {e}",
                floe_core::endpoint::quoted(path)
            ))
        })
    };
    let [ca, cert, key] = files;
    let ca = match ca {
        Some(path) => read("cacert", path)?,
        None => {
            return Err(SeqError::config(
                "store: ZooKeeper over TLS needs cacert=PATH, the CA that signed the servers' certificates (PEM)",
            ))
        }
    };
    let identity =
        match (cert, key) {
            (Some(cert), Some(key)) => Some((read("cert", cert)?, read("key", key)?)),
            (None, None) => None,
            _ => return Err(SeqError::config(
                "store: cert= and key= go together (floe's certificate and its private key, PEM)",
            )),
        };
    let options =
        tls_options(&ca, identity.as_ref()).map_err(|e| SeqError::config(format!("store: {e}")))?;
    Ok((options, (ca, identity)))
}

/// zookeeper-client's TLS options of a CA and an identity (PEM text).
#[cfg(feature = "zookeeper-tls")]
fn tls_options(
    ca: &str,
    identity: Option<&(String, String)>,
) -> Result<zookeeper_client::TlsOptions, String> {
    let options = zookeeper_client::TlsOptions::new()
        .with_pem_ca(ca)
        .map_err(|e| format!("cacert: no CA certificate in it ({e})"))?;
    match identity {
        Some((cert, key)) => options
            .with_pem_identity(cert, key)
            .map_err(|e| format!("cert=, key=: no certificate and private key in them ({e})")),
        None => Ok(options),
    }
}

/// A key as one node name.
pub fn node_name(key: &Key) -> String {
    let mut name = String::with_capacity(key.as_str().len());
    for b in key.as_str().bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            name.push(b as char);
        } else {
            let _ = write!(name, "%{b:02X}");
        }
    }
    name
}

/// The key of a node name [`node_name`] made; `None` for any other name.
pub fn key_of_node(name: &str) -> Option<Key> {
    let mut bytes = Vec::with_capacity(name.len());
    let mut rest = name.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = tail.get(..2)?;
            let hex = std::str::from_utf8(hex).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    let key = Key::new(String::from_utf8(bytes).ok()?).ok()?;
    // Only the one name node_name makes of it (upper-case hex, nothing escaped needlessly).
    (node_name(&key) == name).then_some(key)
}

impl ZkStore {
    /// Connects to the ensemble of `url` and creates the root if it is missing.
    ///
    /// # Errors
    /// `Config` for a bad URL; `Unavailable` when no server answers.
    pub async fn connect(url: &str) -> Result<ZkStore, SeqError> {
        let (rest, own) = take_options(
            url,
            &[
                "from_layotto",
                "layotto",
                "password_file",
                "cacert",
                "cert",
                "key",
            ],
        );
        let mut from_layotto = None;
        let mut password_file = None;
        let mut tls_files: [Option<String>; 3] = Default::default();
        for (name, value) in own {
            let tls_option = ["cacert", "cert", "key"].iter().position(|n| *n == name);
            match name {
                _ if tls_option.is_some() => {
                    let i = tls_option.unwrap_or_default();
                    if tls_files[i].replace(value).is_some() {
                        return Err(SeqError::config(format!(
                            "store: the option {name} is given twice"
                        )));
                    }
                }
                "layotto" => return Err(SeqError::config(
                    "store: zk: layotto= (serving on Layotto's nodes) is not offered: Layotto counts in ephemeral nodes that start again at 1 with each sidecar session; use from_layotto=APP to take over once Layotto's clients have stopped",
                )),
                "password_file" if password_file.is_some() => {
                    return Err(SeqError::config(
                        "store: the option password_file is given twice",
                    ))
                }
                "password_file" => password_file = Some(value),
                _ => from_layotto = Some(key_prefix(name, &value)?),
            }
        }
        // On the blocking pool: it may read the password file.
        let (rest, credentials) = tokio::task::spawn_blocking(move || {
            take_credentials(&rest).and_then(|(rest, c)| {
                with_password_file(c, password_file.as_deref()).map(|c| (rest, c))
            })
        })
        .await
        .map_err(|e| SeqError::config(format!("store: reading its URL: {e}")))?
        .map_err(|e| SeqError::config(format!("store: {e}")))?;
        let secure = rest.starts_with("zks:");
        if !secure {
            if let Some(i) = tls_files.iter().position(Option::is_some) {
                return Err(SeqError::config(format!(
                    "store: {}= is for ZooKeeper over TLS: write zks:// to use it",
                    ["cacert", "cert", "key"][i]
                )));
            }
        }
        #[cfg(feature = "zookeeper-tls")]
        let tls = if secure {
            // On the blocking pool: it reads the certificate files.
            let files = tls_files.clone();
            let read = tokio::task::spawn_blocking(move || tls_options_of(&files))
                .await
                .map_err(|e| SeqError::config(format!("store: reading its TLS files: {e}")))??;
            Some(read.1)
        } else {
            None
        };
        let (cluster, root) = servers_and_root("ZooKeeper", &rest)?;
        if credentials.is_none() {
            tracing::warn!(
                "zookeeper store: no credentials in the store URL: the nodes floe creates under {root} on {cluster} are open to anyone (world:anyone), so anyone who reaches ZooKeeper can change the sequences and make floe give the same IDs again; give credentials (zk://USER:PASSWORD@host:port{root}, or zk://USER@host:port{root}?password_file=PATH) to create them creator-only"
            );
        }
        let store = ZkStore {
            cluster: cluster.to_string(),
            root: root.to_string(),
            credentials,
            #[cfg(feature = "zookeeper-tls")]
            tls,
            client: Mutex::new(None),
            seen: SeenCache::default(),
        };
        let client = store.client().await?;
        if let Some(prefix) = from_layotto {
            let children = client
                .list_children("/")
                .await
                .map_err(|e| map_err("cannot list", "/", e))?;
            let mut found = Vec::new();
            for name in children.into_iter().filter(|n| n.starts_with(&prefix)) {
                let path = format!("/{name}");
                match client.check_stat(&path).await {
                    Ok(Some(stat)) => found.push((name.into_bytes(), i64::from(stat.version))),
                    Ok(None) => {} // its session ended meanwhile: nothing left to continue
                    Err(e) => return Err(map_err("cannot read", &path, e)),
                }
            }
            take_over(&store, &prefix, found).await?;
        }
        Ok(store)
    }

    /// The live session, connecting (and creating the root) when there is none.
    async fn client(&self) -> Result<Client, SeqError> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let mut connector = Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .with_connection_timeout(Duration::from_secs(2));
        if let Some(c) = &self.credentials {
            // Sent again by the client on every connection of the session.
            connector =
                connector.with_auth("digest", format!("{}:{}", c.user, c.password).as_bytes());
        }
        #[cfg(feature = "zookeeper-tls")]
        let connected = match &self.tls {
            Some((ca, identity)) => {
                // zookeeper-client builds its rustls configuration with the process's
                // provider: floe's is ring, whichever other is compiled in.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let options = tls_options(ca, identity.as_ref())
                    .map_err(|e| SeqError::config(format!("store: {e}")))?;
                connector
                    .with_tls(options)
                    .secure_connect(&self.cluster)
                    .await
            }
            None => connector.connect(&self.cluster).await,
        };
        #[cfg(not(feature = "zookeeper-tls"))]
        let connected = connector.connect(&self.cluster).await;
        let client = connected.map_err(|e| map_err("cannot connect to", &self.cluster, e))?;
        let persistent = self.persistent();
        match client.mkdir(&self.root, &persistent).await {
            Ok(()) | Err(ZkError::NodeExists) => {}
            Err(e) => return Err(map_err("cannot create", &self.root, e)),
        }
        *slot = Some(client.clone());
        Ok(client)
    }

    /// The error of a call that failed to `what` at `path`; after connection trouble, the
    /// session is dropped first, so the next call starts a new one.
    async fn failed(&self, what: &str, path: &str, e: ZkError) -> SeqError {
        if !matches!(
            e,
            ZkError::NoNode | ZkError::NodeExists | ZkError::BadVersion | ZkError::NoAuth
        ) {
            self.client.lock().await.take();
        }
        map_err(what, path, e)
    }

    /// Persistent nodes, creator-only when the store has credentials, else open to anyone.
    fn persistent(&self) -> zookeeper_client::CreateOptions<'static> {
        CreateMode::Persistent.with_acls(if self.credentials.is_some() {
            Acls::creator_all()
        } else {
            Acls::anyone_all()
        })
    }

    /// The parent of the registered keys.
    fn registered_root(&self) -> String {
        format!("{}{REGISTERED}", self.root)
    }

    /// The node of a key's value.
    fn node(&self, key: &Key) -> String {
        format!("{}/{}", self.root, node_name(key))
    }

    /// The node of a key's registration.
    fn registration(&self, key: &Key) -> String {
        format!("{}{REGISTERED}/{}", self.root, node_name(key))
    }

    /// The keys of the children of `parent` (none if it is missing), in byte order, after
    /// `after`. Every child is a key floe wrote: `Corrupt` otherwise.
    async fn children(
        &self,
        client: &Client,
        parent: &str,
        after: Option<&Key>,
    ) -> Result<Vec<Key>, SeqError> {
        let names = match client.list_children(parent).await {
            Ok(names) => names,
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(self.failed("cannot list", parent, e).await),
        };
        let mut keys = names
            .iter()
            .map(|name| {
                key_of_node(name).ok_or_else(|| {
                    SeqError::new(
                        ErrorKind::Corrupt,
                        format!("zookeeper: {parent}/{name} is no node floe can have written"),
                    )
                })
            })
            .filter(|k| !matches!((k, after), (Ok(k), Some(a)) if k <= a))
            .collect::<Result<Vec<Key>, SeqError>>()?;
        keys.sort_unstable();
        Ok(keys)
    }

    async fn swap(&self, key: &Key, n: u32, floor: Option<i64>) -> Result<i64, SeqError> {
        let client = self.client().await?;
        let path = self.node(key);
        let mut seen = self.seen.get(key);
        for _ in 0..MAX_ATTEMPTS {
            let (value, version) = match seen {
                Some(s) => s,
                None => match client.get_data(&path).await {
                    Ok((data, stat)) => (parse("zookeeper", key, &data)?, Some(stat.version)),
                    Err(ZkError::NoNode) => (0, None),
                    Err(e) => return Err(self.failed("cannot read", &path, e).await),
                },
            };
            let Some(new) = target("zookeeper", key, value, n, floor)? else {
                return Ok(value);
            };
            let data = new.to_string();
            let result = match version {
                Some(version) => client
                    .set_data(&path, data.as_bytes(), Some(version))
                    .await
                    .map(|stat| stat.version),
                None => {
                    let persistent = self.persistent();
                    client
                        .create(&path, data.as_bytes(), &persistent)
                        .await
                        .map(|(stat, _)| stat.version)
                }
            };
            match result {
                Ok(version) => {
                    self.seen.put(key, (new, Some(version)));
                    return Ok(new);
                }
                Err(ZkError::BadVersion | ZkError::NodeExists | ZkError::NoNode) => seen = None,
                Err(e) => {
                    self.seen.forget(key);
                    return Err(self.failed("cannot write", &path, e).await);
                }
            }
        }
        self.seen.forget(key);
        Err(contended("zookeeper", key))
    }
}

#[async_trait]
impl Store for ZkStore {
    fn kind(&self) -> &'static str {
        "zookeeper"
    }

    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        self.swap(key, n, None).await
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        self.swap(key, 0, Some(floor)).await.map(drop)
    }

    async fn give_back(&self, key: &Key, first: i64, last: i64) -> Result<bool, SeqError> {
        let Some(before) = crate::store::given_back_value(first, last) else {
            return Ok(false);
        };
        let client = self.client().await?;
        let path = self.node(key);
        // What this process saw last, when it is `last` (its own reservation): one round trip.
        let mut seen = self
            .seen
            .get(key)
            .and_then(|(v, version)| Some((v, version?)))
            .filter(|(v, _)| *v == last);
        for _ in 0..MAX_ATTEMPTS {
            let (value, version) = match seen {
                Some(s) => s,
                None => match client.get_data(&path).await {
                    Ok((data, stat)) => (parse("zookeeper", key, &data)?, stat.version),
                    Err(ZkError::NoNode) => return Ok(false),
                    Err(e) => return Err(self.failed("cannot read", &path, e).await),
                },
            };
            if value != last {
                self.seen.put(key, (value, Some(version)));
                return Ok(false);
            }
            let data = before.to_string();
            match client.set_data(&path, data.as_bytes(), Some(version)).await {
                Ok(stat) => {
                    self.seen.put(key, (before, Some(stat.version)));
                    return Ok(true);
                }
                // Written since: read again (a reservation makes the answer false).
                Err(ZkError::BadVersion) => seen = None,
                Err(ZkError::NoNode) => {
                    self.seen.forget(key);
                    return Ok(false);
                }
                Err(e) => {
                    self.seen.forget(key);
                    return Err(self.failed("cannot write", &path, e).await);
                }
            }
        }
        self.seen.forget(key);
        Err(contended("zookeeper", key))
    }

    async fn value(&self, key: &Key) -> Result<Option<i64>, SeqError> {
        let client = self.client().await?;
        let path = self.node(key);
        match client.get_data(&path).await {
            Ok((data, _)) => parse("zookeeper", key, &data).map(Some),
            Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(self.failed("cannot read", &path, e).await),
        }
    }

    async fn keys(&self, after: Option<&Key>, limit: usize) -> Result<Vec<(Key, i64)>, SeqError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let client = self.client().await?;
        let mut keys = self.children(&client, &self.root, after).await?.into_iter();
        let mut page = Vec::new();
        // A node deleted since the listing is passed over: read on down the list.
        while page.len() < limit {
            let batch: Vec<Key> = keys.by_ref().take(limit - page.len()).collect();
            if batch.is_empty() {
                break;
            }
            let paths: Vec<String> = batch.iter().map(|k| self.node(k)).collect();
            // Each request is sent as it is made: the reads are pipelined.
            let reads: Vec<_> = paths.iter().map(|p| client.get_data(p)).collect();
            for ((key, path), read) in batch.into_iter().zip(&paths).zip(reads) {
                match read.await {
                    Ok((data, _)) => {
                        let value = parse("zookeeper", &key, &data)?;
                        page.push((key, value));
                    }
                    Err(ZkError::NoNode) => {}
                    Err(e) => return Err(self.failed("cannot read", path, e).await),
                }
            }
        }
        Ok(page)
    }

    async fn is_registered(&self, key: &Key) -> Result<bool, SeqError> {
        let client = self.client().await?;
        let path = self.registration(key);
        match client.check_stat(&path).await {
            Ok(stat) => Ok(stat.is_some()),
            Err(e) => Err(self.failed("cannot read", &path, e).await),
        }
    }

    async fn register(&self, key: &Key) -> Result<bool, SeqError> {
        let client = self.client().await?;
        let path = self.registration(key);
        let persistent = self.persistent();
        for attempt in 0..2 {
            match client.create(&path, b"", &persistent).await {
                Ok(_) => return Ok(true),
                Err(ZkError::NodeExists) => return Ok(false),
                // The first registration: its parent is made, then the node.
                Err(ZkError::NoNode) if attempt == 0 => {
                    let parent = self.registered_root();
                    match client.mkdir(&parent, &persistent).await {
                        Ok(()) | Err(ZkError::NodeExists) => {}
                        Err(e) => return Err(self.failed("cannot create", &parent, e).await),
                    }
                }
                Err(e) => return Err(self.failed("cannot create", &path, e).await),
            }
        }
        Err(SeqError::unavailable(format!(
            "zookeeper: cannot create {path}: its parent was deleted as it was made"
        )))
    }

    async fn unregister(&self, key: &Key) -> Result<bool, SeqError> {
        let client = self.client().await?;
        let path = self.registration(key);
        match client.delete(&path, None).await {
            Ok(()) => Ok(true),
            Err(ZkError::NoNode) => Ok(false),
            Err(e) => Err(self.failed("cannot delete", &path, e).await),
        }
    }

    async fn registered(&self, after: Option<&Key>, limit: usize) -> Result<Vec<Key>, SeqError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let client = self.client().await?;
        let mut keys = self
            .children(&client, &self.registered_root(), after)
            .await?;
        keys.truncate(limit);
        Ok(keys)
    }

    async fn ping(&self) -> Result<(), SeqError> {
        let client = self.client().await?;
        match client.check_stat(&self.root).await {
            Ok(_) => Ok(()),
            Err(e) => Err(self.failed("cannot read", &self.root, e).await),
        }
    }

    async fn close(&self) {
        self.client.lock().await.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_decode_to_their_keys_only() {
        for k in ["a", "a/b", "..", "a b ключ ✓ %2F", "A-z_0"] {
            let key = Key::new(k).unwrap();
            assert_eq!(key_of_node(&node_name(&key)), Some(key), "{k:?}");
        }
        for name in ["%2f", "a.b", "%", "%4", "%ZZ", "%00", "%FF", "", "%41"] {
            assert_eq!(key_of_node(name), None, "{name:?}");
        }
    }
}
