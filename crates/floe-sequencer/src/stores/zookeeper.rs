//! `zk://host:port[,host:port...][/root][?from_layotto=APP]`: one **persistent** node per key,
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
//! floe's IDs on the same node would repeat with it.

use std::fmt::Write as _;
use std::time::Duration;

use async_trait::async_trait;
use floe_core::sequence::Key;
use tokio::sync::Mutex;
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use floe_core::endpoint::take_options;

use super::cas::{contended, parse, target, SeenCache, MAX_ATTEMPTS};
use super::layotto::{key_prefix, take_over};
use crate::{servers_and_root, ErrorKind, SeqError, Store};

/// A ZooKeeper ensemble.
pub struct ZkStore {
    cluster: String,
    root: String,
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
    let kind = match e {
        ZkError::NoAuth | ZkError::AuthFailed | ZkError::BadArguments(_) => ErrorKind::Config,
        _ => ErrorKind::Unavailable,
    };
    SeqError::new(kind, format!("zookeeper: {what} {key:?}: {e}"))
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

impl ZkStore {
    /// Connects to the ensemble of `url` and creates the root if it is missing.
    ///
    /// # Errors
    /// `Config` for a bad URL; `Unavailable` when no server answers.
    pub async fn connect(url: &str) -> Result<ZkStore, SeqError> {
        let (rest, own) = take_options(url, &["from_layotto", "layotto"]);
        let (cluster, root) = servers_and_root("ZooKeeper", &rest)?;
        let mut from_layotto = None;
        for (name, value) in own {
            if name == "layotto" {
                return Err(SeqError::config(
                    "store: zk: layotto= (serving on Layotto's nodes) is not offered: Layotto counts in ephemeral nodes that start again at 1 with each sidecar session; use from_layotto=APP to take over once Layotto's clients have stopped",
                ));
            }
            from_layotto = Some(key_prefix(name, &value)?);
        }
        let store = ZkStore {
            cluster: cluster.to_string(),
            root: root.to_string(),
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
        let client = Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .with_connection_timeout(Duration::from_secs(2))
            .connect(&self.cluster)
            .await
            .map_err(|e| map_err("cannot connect to", &self.cluster, e))?;
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        match client.mkdir(&self.root, &persistent).await {
            Ok(()) | Err(ZkError::NodeExists) => {}
            Err(e) => return Err(map_err("cannot create", &self.root, e)),
        }
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Drops the session after connection trouble, so the next call starts a new one.
    async fn lost(&self, e: &ZkError) {
        if !matches!(
            e,
            ZkError::NoNode | ZkError::NodeExists | ZkError::BadVersion | ZkError::NoAuth
        ) {
            self.client.lock().await.take();
        }
    }

    async fn swap(&self, key: &Key, n: u32, floor: Option<i64>) -> Result<i64, SeqError> {
        let client = self.client().await?;
        let path = format!("{}/{}", self.root, node_name(key));
        let mut seen = self.seen.get(key);
        for _ in 0..MAX_ATTEMPTS {
            let (value, version) = match seen {
                Some(s) => s,
                None => match client.get_data(&path).await {
                    Ok((data, stat)) => (parse("zookeeper", key, &data)?, Some(stat.version)),
                    Err(ZkError::NoNode) => (0, None),
                    Err(e) => {
                        self.lost(&e).await;
                        return Err(map_err("cannot read", &path, e));
                    }
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
                    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
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
                    self.lost(&e).await;
                    return Err(map_err("cannot write", &path, e));
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

    async fn ping(&self) -> Result<(), SeqError> {
        let client = self.client().await?;
        match client.check_stat(&self.root).await {
            Ok(_) => Ok(()),
            Err(e) => {
                self.lost(&e).await;
                Err(map_err("cannot read", &self.root, e))
            }
        }
    }

    async fn close(&self) {
        self.client.lock().await.take();
    }
}
