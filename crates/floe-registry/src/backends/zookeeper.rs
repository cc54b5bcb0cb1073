//! The `zookeeper` registry (ZooKeeper 3.5+): `zk://host:port[,host:port...]/root`.
//!
//! Nodes, all under the root (default `/floe`):
//! - `{root}/{service}/workers/{id}`: **persistent**, one per allocated ID, holding the
//!   [`WorkerRecord`] as JSON (identity, last time). Unlike Leaf's ephemeral-free scheme and
//!   Layotto's ephemeral counters, nothing here is lost with a session.
//! - `{root}/{service}/holders/{host}:{port}`: **ephemeral**, created by the live holder of an
//!   identity, so that a second process with the same identity gets [`ErrorKind::Conflict`]
//!   instead of the same ID. It goes when the holder's session closes (at once on a clean exit,
//!   after the session timeout on a crash).
//!
//! **Race-free allocation:** a new ID is taken by `create` of its worker node, which fails
//! with `NodeExists` if another process took it first; the loser tries the next free ID.
//! Heartbeats `setData` the worker node with the version just read, so a record that changed
//! hands (released and re-registered) is never overwritten.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use super::records::{self, decode, encode, VersionedRecords};
use crate::{
    ErrorKind, Hold, IdSpace, Identity, Registration, Registry, RegistryError, WorkerRecord,
};

/// A registry on a ZooKeeper ensemble.
pub struct ZkRegistry {
    client: Client,
    root: String,
    cluster: String,
}

impl fmt::Debug for ZkRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkRegistry")
            .field("cluster", &self.cluster)
            .field("root", &self.root)
            .finish()
    }
}

/// Maps the client's errors to registry errors: connection trouble is temporary.
fn map_err(what: &str, e: ZkError) -> RegistryError {
    let kind = match e {
        ZkError::NoHosts
        | ZkError::Timeout
        | ZkError::ConnectionLoss
        | ZkError::SessionExpired
        | ZkError::ClientClosed => ErrorKind::Unavailable,
        ZkError::NoAuth | ZkError::AuthFailed | ZkError::BadArguments(_) => ErrorKind::Config,
        _ => ErrorKind::Unavailable,
    };
    RegistryError::new(kind, format!("zookeeper: {what}: {e}"))
}

impl ZkRegistry {
    /// Connects to `cluster` (`host:port[,host:port...]`) and uses `root` (e.g. `/floe`).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a bad root; [`ErrorKind::Unavailable`] when no server answers
    /// within the connection timeout.
    pub async fn connect(cluster: &str, root: &str) -> Result<Self, RegistryError> {
        crate::open::check_servers("ZooKeeper", cluster, root)?;
        let client = Client::connector()
            .with_session_timeout(Duration::from_secs(6))
            .with_connection_timeout(Duration::from_secs(3))
            .connect(cluster)
            .await
            .map_err(|e| map_err(&format!("cannot connect to {cluster}"), e))?;
        Ok(ZkRegistry {
            client,
            root: root.to_string(),
            cluster: cluster.to_string(),
        })
    }

    fn workers(&self, service: &str) -> String {
        format!("{}/{service}/workers", self.root)
    }

    fn holder(&self, identity: &Identity) -> String {
        format!(
            "{}/{}/holders/{}:{}",
            self.root, identity.service, identity.host, identity.port
        )
    }

    fn worker(&self, service: &str, id: u32) -> String {
        format!("{}/{id}", self.workers(service))
    }
}

#[async_trait]
impl VersionedRecords for ZkRegistry {
    type Version = i32;

    fn store(&self) -> &'static str {
        "ZooKeeper"
    }

    async fn read(
        &self,
        service: &str,
        id: u32,
    ) -> Result<Option<(WorkerRecord, i32)>, RegistryError> {
        let path = self.worker(service, id);
        match self.client.get_data(&path).await {
            Ok((data, stat)) => Ok(Some((decode("zookeeper", &path, &data)?, stat.version))),
            Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(map_err(&format!("read {path}"), e)),
        }
    }

    async fn read_all(&self, service: &str) -> Result<Vec<(WorkerRecord, i32)>, RegistryError> {
        let dir = self.workers(service);
        let children = match self.client.list_children(&dir).await {
            Ok(c) => c,
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(map_err(&format!("list {dir}"), e)),
        };
        let mut records = Vec::with_capacity(children.len());
        for child in children {
            let path = format!("{dir}/{child}");
            match self.client.get_data(&path).await {
                Ok((data, stat)) => {
                    records.push((decode("zookeeper", &path, &data)?, stat.version));
                }
                Err(ZkError::NoNode) => continue, // released meanwhile
                Err(e) => return Err(map_err(&format!("read {path}"), e)),
            }
        }
        Ok(records)
    }

    async fn create(&self, record: &WorkerRecord) -> Result<bool, RegistryError> {
        let path = self.worker(&record.identity.service, record.id);
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        match self
            .client
            .create(&path, &encode(record)?, &persistent)
            .await
        {
            Ok(_) => Ok(true),
            Err(ZkError::NodeExists) => Ok(false), // another process took it first
            Err(e) => Err(map_err(&format!("create {path}"), e)),
        }
    }

    async fn replace(&self, record: &WorkerRecord, version: i32) -> Result<bool, RegistryError> {
        let path = self.worker(&record.identity.service, record.id);
        match self
            .client
            .set_data(&path, &encode(record)?, Some(version))
            .await
        {
            Ok(_) => Ok(true),
            Err(ZkError::BadVersion | ZkError::NoNode) => Ok(false),
            Err(e) => Err(map_err(&format!("write {path}"), e)),
        }
    }

    async fn take_over(
        &self,
        record: &WorkerRecord,
        version: i32,
        previous: &Identity,
    ) -> Result<bool, RegistryError> {
        // Its holder's session is alive: not idle after all.
        let holder = self.holder(previous);
        match self.client.check_stat(&holder).await {
            Ok(None) => {}
            Ok(Some(_)) => return Ok(false),
            Err(e) => return Err(map_err(&format!("read {holder}"), e)),
        }
        self.replace(record, version).await
    }

    async fn delete(&self, service: &str, id: u32, version: i32) -> Result<bool, RegistryError> {
        let path = self.worker(service, id);
        match self.client.delete(&path, Some(version)).await {
            Ok(()) => Ok(true),
            Err(ZkError::NoNode | ZkError::BadVersion) => Ok(false),
            Err(e) => Err(map_err(&format!("delete {path}"), e)),
        }
    }
}

#[async_trait]
impl Registry for ZkRegistry {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn location(&self) -> String {
        format!("zk://{}{}", self.cluster, self.root)
    }

    async fn register(
        &self,
        identity: &Identity,
        space: IdSpace,
    ) -> Result<Registration, RegistryError> {
        identity.validate()?;
        let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        for dir in [
            self.workers(&identity.service),
            format!("{}/{}/holders", self.root, identity.service),
        ] {
            self.client
                .mkdir(&dir, &persistent)
                .await
                .map_err(|e| map_err(&format!("create {dir}"), e))?;
        }
        let holder = self.holder(identity);
        let created = match self.client.create(&holder, b"", &ephemeral).await {
            Ok(_) => true,
            Err(ZkError::NodeExists) => {
                // Ours from an earlier registration of this session, or another process's.
                let own = self.client.session_id().0;
                match self.client.check_stat(&holder).await {
                    Ok(Some(stat)) if stat.ephemeral_owner == own => false,
                    Ok(None) => return Err(RegistryError::new(
                        ErrorKind::Conflict,
                        format!("{identity}: {holder} was just released by its previous holder; try again"),
                    )),
                    Ok(Some(_)) => return Err(RegistryError::new(
                        ErrorKind::Conflict,
                        format!("{identity} is held by another live process ({holder} exists; it goes when that process's session ends)"),
                    )),
                    Err(e) => return Err(map_err(&format!("read {holder}"), e)),
                }
            }
            Err(e) => return Err(map_err(&format!("create {holder}"), e)),
        };
        let result = records::allocate(self, identity, space).await;
        if result.is_err() && created {
            // Do not keep the identity claimed by a registration that failed.
            let _ = self.client.delete(&holder, None).await;
        }
        let (record, existing) = result?;
        Ok(Registration::new(
            record,
            existing,
            Some(Hold::new(self.client.clone())),
        ))
    }

    async fn heartbeat(
        &self,
        identity: &Identity,
        id: u32,
        last_time_ms: u64,
    ) -> Result<(), RegistryError> {
        // Our claim must still stand: the holder node, owned by this session. When the
        // session expired, or the node went, another process may hold the identity now.
        let holder = self.holder(identity);
        match self.client.check_stat(&holder).await {
            Ok(Some(stat)) if stat.ephemeral_owner == self.client.session_id().0 => {}
            Ok(_) | Err(ZkError::SessionExpired | ZkError::ClientClosed) => {
                return Err(RegistryError::new(
                    ErrorKind::Conflict,
                    format!("the claim on {identity} lapsed ({holder} is not this session's): stop issuing IDs"),
                ))
            }
            Err(e) => return Err(map_err(&format!("read {holder}"), e)),
        }
        records::heartbeat(self, identity, id, last_time_ms).await
    }

    async fn release(&self, identity: &Identity) -> Result<bool, RegistryError> {
        records::release(self, identity).await
    }

    async fn close(&self, identity: &Identity) -> Result<(), RegistryError> {
        let holder = self.holder(identity);
        match self.client.delete(&holder, None).await {
            Ok(()) | Err(ZkError::NoNode) => Ok(()),
            Err(e) => Err(map_err(&format!("delete {holder}"), e)),
        }
    }

    async fn reclaim(
        &self,
        identity: &Identity,
        space: IdSpace,
        idle_before_ms: u64,
    ) -> Result<Option<Registration>, RegistryError> {
        identity.validate()?;
        let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        let holder = self.holder(identity);
        match self.client.create(&holder, b"", &ephemeral).await {
            Ok(_) => {}
            Err(ZkError::NodeExists) => {
                return Err(RegistryError::new(
                    ErrorKind::Conflict,
                    format!("{identity} is held by another live process ({holder} exists)"),
                ))
            }
            Err(e) => return Err(map_err(&format!("create {holder}"), e)),
        }
        let taken = records::take_over_idle(self, identity, space, idle_before_ms).await;
        if !matches!(taken, Ok(Some(_))) {
            // Nothing taken: do not keep the identity claimed.
            let _ = self.client.delete(&holder, None).await;
        }
        Ok(taken?
            .map(|record| Registration::new(record, false, Some(Hold::new(self.client.clone())))))
    }

    async fn list(&self, service: &str) -> Result<Vec<WorkerRecord>, RegistryError> {
        Ok(records::list(self, service)
            .await?
            .into_iter()
            .map(|(r, _)| r)
            .collect())
    }
}
