//! The worker records in ZooKeeper: `impl VersionedRecords for ZkRegistry`, in floe's layout
//! (`workers/{id}`) or Leaf's ([`leaf`]).

use async_trait::async_trait;
use zookeeper_client::{Error as ZkError, MultiWriteError};

use super::leaf;
use super::records::{self, decode, encode, VersionedRecords};
use super::{map_err, NodeVersion, Nodes, ZkRegistry};
use crate::{ErrorKind, IdSpace, Identity, RegistryError, WorkerRecord};

#[async_trait]
impl VersionedRecords for ZkRegistry {
    type Version = NodeVersion;

    fn store(&self) -> &'static str {
        "ZooKeeper"
    }

    fn place(&self, identity: &Identity, id: u32) -> String {
        match self.shared.nodes {
            Nodes::Floe => self.worker(&identity.service, id),
            Nodes::Leaf(_) => leaf::node(&self.shared.root, identity, id),
        }
    }

    async fn read(
        &self,
        identity: &Identity,
        id: u32,
    ) -> Result<Option<(WorkerRecord, NodeVersion)>, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            return leaf::read(&self.client(), &self.shared.root, identity, id).await;
        }
        let path = self.worker(&identity.service, id);
        match self.client().get_data(&path).await {
            Ok((data, stat)) => Ok(Some((
                decode("zookeeper", &path, &data)?,
                NodeVersion::floe(stat.version),
            ))),
            Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(map_err(&format!("read {path}"), e)),
        }
    }

    async fn read_all(
        &self,
        service: &str,
    ) -> Result<Vec<(WorkerRecord, NodeVersion)>, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            return leaf::read_all(&self.client(), &self.shared.root, service).await;
        }
        let dir = self.workers(service);
        let children = match self.client().list_children(&dir).await {
            Ok(c) => c,
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(map_err(&format!("list {dir}"), e)),
        };
        let mut records = Vec::with_capacity(children.len());
        for child in children {
            let path = format!("{dir}/{child}");
            match self.client().get_data(&path).await {
                Ok((data, stat)) => {
                    records.push((
                        decode("zookeeper", &path, &data)?,
                        NodeVersion::floe(stat.version),
                    ));
                }
                Err(ZkError::NoNode) => continue, // released meanwhile
                Err(e) => return Err(map_err(&format!("read {path}"), e)),
            }
        }
        Ok(records)
    }

    async fn create(&self, record: &WorkerRecord) -> Result<bool, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            // Leaf's nodes are numbered by ZooKeeper: only create_new makes one.
            return Err(RegistryError::new(
                ErrorKind::Corrupt,
                format!(
                    "internal: worker ID {} of {} cannot be chosen in Leaf's layout",
                    record.id, record.identity
                ),
            ));
        }
        let path = self.worker(&record.identity.service, record.id);
        let persistent = self.shared.cluster.persistent();
        match self
            .client()
            .create(&path, &encode(record)?, &persistent)
            .await
        {
            Ok(_) => Ok(true),
            Err(ZkError::NodeExists) => Ok(false), // another process took it first
            Err(e) => Err(map_err(&format!("create {path}"), e)),
        }
    }

    async fn create_new(
        &self,
        template: &WorkerRecord,
        space: IdSpace,
        free: &[u32],
    ) -> Result<Option<WorkerRecord>, RegistryError> {
        match self.shared.nodes {
            Nodes::Leaf(_) => {
                leaf::create_new(
                    &self.client(),
                    &self.shared.root,
                    template,
                    space,
                    self.shared.cluster.acls(),
                )
                .await
            }
            Nodes::Floe => records::create_first_free(self, template, free).await,
        }
    }

    async fn check_own(
        &self,
        own: &WorkerRecord,
        version: NodeVersion,
    ) -> Result<NodeVersion, RegistryError> {
        match self.shared.nodes {
            Nodes::Leaf(guard) => {
                leaf::check_own(&self.client(), &self.shared.root, guard, own, version).await
            }
            Nodes::Floe => Ok(version),
        }
    }

    async fn replace(
        &self,
        record: &WorkerRecord,
        version: NodeVersion,
    ) -> Result<bool, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            return leaf::replace(
                &self.client(),
                &self.shared.root,
                record,
                version,
                self.shared.cluster.acls(),
            )
            .await;
        }
        let path = self.worker(&record.identity.service, record.id);
        match self
            .client()
            .set_data(&path, &encode(record)?, Some(version.node))
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
        version: NodeVersion,
        previous: &Identity,
    ) -> Result<bool, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            // A Leaf node's name is its ip:port: it cannot change hands (reclaim refuses).
            return Err(RegistryError::new(
                ErrorKind::Corrupt,
                format!(
                    "internal: worker ID {} of {previous} cannot be taken over by {} in Leaf's layout",
                    record.id, record.identity
                ),
            ));
        }
        // One transaction, so that the previous holder cannot come back between a check and
        // the write: create its holder node (fails if its session is alive: not idle after
        // all), write the record if unchanged since read, delete the holder node again.
        let client = self.client();
        let path = self.worker(&record.identity.service, record.id);
        let previous_holder = self.holder(previous);
        let ephemeral = self.shared.cluster.ephemeral();
        let data = encode(record)?;
        let mut txn = client.new_multi_writer();
        txn.add_create(&previous_holder, b"", &ephemeral)
            .and_then(|()| txn.add_set_data(&path, &data, Some(version.node)))
            .and_then(|()| txn.add_delete(&previous_holder, None))
            .map_err(|e| map_err(&format!("take over {path}"), e))?;
        match txn.commit().await {
            Ok(_) => Ok(true),
            Err(MultiWriteError::OperationFailed {
                source: ZkError::NodeExists | ZkError::BadVersion | ZkError::NoNode,
                ..
            }) => Ok(false),
            Err(e) => Err(map_err(&format!("take over {path}"), e.into())),
        }
    }

    async fn delete(
        &self,
        record: &WorkerRecord,
        version: NodeVersion,
    ) -> Result<bool, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            return leaf::delete(&self.client(), &self.shared.root, record, version).await;
        }
        let path = self.worker(&record.identity.service, record.id);
        match self.client().delete(&path, Some(version.node)).await {
            Ok(()) => Ok(true),
            Err(ZkError::NoNode | ZkError::BadVersion) => Ok(false),
            Err(e) => Err(map_err(&format!("delete {path}"), e)),
        }
    }
}
