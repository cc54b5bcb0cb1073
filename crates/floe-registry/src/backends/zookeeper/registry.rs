//! `impl Registry for ZkRegistry`: registering, heartbeats, releasing, closing and reclaiming
//! worker IDs, and the registrations' claims.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

use floe_core::clock::SystemClock;
use floe_core::fence::{Fence, Sent};

use super::access::warn_if_open;
use super::leaf;
use super::records::{self, Allocation, Claim};
use super::{create_holder, map_err, HolderNode, Nodes, Session, Shared, ZkRegistry};
use crate::terms::LeaseTerms;
use crate::{
    ErrorKind, Hold, IdSpace, Identity, Registration, Registry, RegistryError, WorkerRecord,
};

/// The registration's claim: the session (kept open while the registration lives) and the
/// claim the keeper holds again after an expiry.
struct ZkHold {
    _shared: Arc<Shared>,
    _claim: Arc<Claim>,
}

impl ZkRegistry {
    /// floe's mirror of a store's epoch, with its node's version (none in Leaf's layout).
    async fn read_store_epoch(
        &self,
        service: &str,
        name: &str,
    ) -> Result<Option<(i64, i32)>, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            return Ok(None);
        }
        let path = records::store_epoch_place(&self.shared.root, service, name);
        match self.client().get_data(&path).await {
            Ok((data, stat)) => Ok(Some((
                records::decode_epoch("zookeeper", &path, &data)?,
                stat.version,
            ))),
            Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(map_err(&format!("read {path}"), e)),
        }
    }

    /// Refuses floe's layout on a service directory that holds Meituan Leaf's nodes
    /// (`{root}/{service}/forever`): floe's worker IDs there know nothing of the IDs Leaf's
    /// servers hold, and on Leaf's layout the two would issue the same IDs.
    async fn refuse_leafs_directory(
        &self,
        client: &Client,
        service: &str,
    ) -> Result<(), RegistryError> {
        let forever = format!("{}/{service}/forever", self.shared.root);
        let found = client
            .check_stat(&forever)
            .await
            .map_err(|e| map_err(&format!("read {forever}"), e))?;
        if found.is_none() {
            return Ok(());
        }
        let root = if self.shared.root.is_empty() {
            "/"
        } else {
            self.shared.root.as_str()
        };
        Err(RegistryError::config(format!(
            "registry: {forever} holds Meituan Leaf's worker nodes: zk:// keeps floe's own records beside them and would take worker IDs Leaf's servers hold. To share Leaf's IDs use --registry leaf+zk://{}{root} (service {service:?} is leaf.name, with --layout meituan-leaf); otherwise choose another root or service",
            self.shared.cluster
        )))
    }

    /// Builds the registration of `allocation`, claimed under session `epoch` by a write sent
    /// at `sent`. `taken_over`: the holder node was created by this registration, so a
    /// previous holder that did not close cleanly may still be inside its window.
    /// Makes the service's directories (floe's with the cluster's ACLs, Leaf's open to
    /// anyone as Leaf makes them: credentials must never lock Leaf's servers out of their own
    /// nodes), refusing floe's layout on Leaf's directory.
    async fn prepare(&self, client: &Client, identity: &Identity) -> Result<(), RegistryError> {
        let (open, dirs) = match self.shared.nodes {
            Nodes::Floe => (
                Vec::new(),
                [
                    self.workers(&identity.service),
                    format!("{}/{}/holders", self.shared.root, identity.service),
                ]
                .to_vec(),
            ),
            Nodes::Leaf(_) => {
                leaf::check_identity(identity)?;
                let (leafs, floes) = leaf::dirs(&self.shared.root, &identity.service);
                (leafs.to_vec(), floes.to_vec())
            }
        };
        if self.shared.nodes == Nodes::Floe {
            self.refuse_leafs_directory(client, &identity.service)
                .await?;
        }
        let persistent = self.shared.cluster.persistent();
        let anyone = CreateMode::Persistent.with_acls(Acls::anyone_all());
        for (dir, options) in open
            .iter()
            .map(|d| (d, &anyone))
            .chain(dirs.iter().map(|d| (d, &persistent)))
        {
            client
                .mkdir(dir, options)
                .await
                .map_err(|e| map_err(&format!("create {dir}"), e))?;
        }
        if self.shared.cluster.credentials.is_some() {
            warn_if_open(client, &self.shared.root, &dirs).await;
        }
        Ok(())
    }

    fn registration(
        &self,
        allocation: Allocation,
        epoch: u64,
        sent: Sent,
        taken_over: bool,
    ) -> Registration {
        let Allocation {
            record,
            existing,
            previous,
        } = allocation;
        let terms = self.shared.terms();
        let previous_open = taken_over && previous.as_ref().is_some_and(|p| !p.closed);
        // In Leaf's layout a record with no registration number is a Leaf server's: it has no
        // window to wait out (it issues until it is stopped); the guard watched its node
        // instead (leaf::check_own). Its IDs are still kept behind: previous_open.
        let leaf_server = matches!(self.shared.nodes, Nodes::Leaf(_))
            && previous.as_ref().is_some_and(|p| p.holder == 0);
        let takeover_wait = match &previous {
            Some(p) if previous_open && !leaf_server => {
                LeaseTerms::takeover_wait(p.reach(), terms.reach)
            }
            _ => Duration::ZERO,
        };
        let fence = Arc::new(Fence::new());
        let claim = Arc::new(Claim::new(
            &record,
            fence.clone(),
            epoch,
            terms.window,
            sent,
        ));
        self.shared.add_claim(&claim);
        Registration {
            record,
            existing,
            fence,
            takeover_wait,
            previous_reach_ms: previous.as_ref().map_or(0, WorkerRecord::reach),
            previous_token: previous.as_ref().map_or(0, |p| p.holder),
            previous_holder: previous.map(|p| p.identity),
            previous_open,
            _hold: Some(Hold::new(ZkHold {
                _shared: self.shared.clone(),
                _claim: claim,
            })),
        }
    }
}

/// The error for an identity whose holder node another session has.
fn held_elsewhere(identity: &Identity, holder: &str) -> RegistryError {
    RegistryError::new(
        ErrorKind::Conflict,
        format!("{identity} is held by another live process ({holder} exists; it goes when that process's session ends)"),
    )
}

#[async_trait]
impl Registry for ZkRegistry {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    async fn store_epoch(&self, service: &str, name: &str) -> Result<Option<i64>, RegistryError> {
        Ok(self.read_store_epoch(service, name).await?.map(|(e, _)| e))
    }

    async fn keep_store_epoch(
        &self,
        service: &str,
        name: &str,
        epoch: i64,
    ) -> Result<bool, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            return Ok(false);
        }
        let path = records::store_epoch_place(&self.shared.root, service, name);
        let data = epoch.to_string();
        for _ in 0..records::KEEP_ATTEMPTS {
            // Only ever raised: a set on the version read, or a create where there was none.
            let written = match self.read_store_epoch(service, name).await? {
                Some((e, _)) if e >= epoch => return Ok(true),
                Some((_, version)) => {
                    match self
                        .client()
                        .set_data(&path, data.as_bytes(), Some(version))
                        .await
                    {
                        Ok(_) => true,
                        Err(ZkError::BadVersion | ZkError::NoNode) => false,
                        Err(e) => return Err(map_err(&format!("write {path}"), e)),
                    }
                }
                None => {
                    let dir = format!("{}/{service}/stores", self.shared.root);
                    let persistent = self.shared.cluster.persistent();
                    self.client()
                        .mkdir(&dir, &persistent)
                        .await
                        .map_err(|e| map_err(&format!("create {dir}"), e))?;
                    match self
                        .client()
                        .create(&path, data.as_bytes(), &persistent)
                        .await
                    {
                        Ok(_) => true,
                        Err(ZkError::NodeExists) => false,
                        Err(e) => return Err(map_err(&format!("create {path}"), e)),
                    }
                }
            };
            if written {
                return Ok(true);
            }
        }
        Err(RegistryError::new(
            ErrorKind::Unavailable,
            format!(
                "zookeeper: {path} changed under {} attempts in a row",
                records::KEEP_ATTEMPTS
            ),
        ))
    }

    fn location(&self) -> String {
        let scheme = match (self.shared.nodes, self.shared.cluster.tls.is_some()) {
            (Nodes::Floe, false) => "zk",
            (Nodes::Floe, true) => "zks",
            (Nodes::Leaf(_), false) => "leaf+zk",
            (Nodes::Leaf(_), true) => "leaf+zks",
        };
        format!("{scheme}://{}{}", self.shared.cluster, self.shared.root)
    }

    fn holder_linger(&self) -> Duration {
        // The timeout the server granted (it may give more than was asked), which a dead
        // holder's ephemeral node outlives by up to one tick.
        self.client().session_timeout().max(self.shared.asked)
    }

    fn lease_terms(&self) -> Option<LeaseTerms> {
        Some(self.shared.terms())
    }

    async fn register(
        &self,
        identity: &Identity,
        space: IdSpace,
    ) -> Result<Registration, RegistryError> {
        identity.validate()?;
        let Session { client, epoch, .. } = self.shared.session();
        self.prepare(&client, identity).await?;
        let holder = self.holder(identity);
        // The create is a write: its answer confirms the session, from this moment on.
        let sent = Sent::now(&SystemClock);
        let number = records::new_holder();
        let created = match create_holder(&client, &self.shared.cluster, &holder, number).await? {
            HolderNode::Created => true,
            // Already this session's: held by a live registration of this process (nothing to
            // wait out), or created by a request of ours whose answer was lost (a connection
            // lost mid-request, and the start asked again): then it is as good as created,
            // and whoever held the ID before may still be inside its window.
            HolderNode::Ours => !self
                .shared
                .claims
                .live()
                .iter()
                .any(|c| &c.identity == identity),
            HolderNode::Taken(..) => return Err(held_elsewhere(identity, &holder)),
            HolderNode::JustReleased => {
                return Err(RegistryError::new(
                    ErrorKind::Conflict,
                    format!(
                        "{identity}: {holder} was just released by its previous holder; try again"
                    ),
                ))
            }
        };
        let terms = self.shared.terms();
        let mut result = records::allocate(self, identity, space, terms, number).await;
        let mut sent = sent;
        if result.is_ok() && matches!(self.shared.nodes, Nodes::Leaf(_)) {
            // Taking a Leaf server's node may have watched it for seconds (leaf::check_own),
            // longer than the window the holder node's creation opened: confirm the session
            // again by a write, from now.
            sent = Sent::now(&SystemClock);
            if let Err(e) = client
                .set_data(&holder, number.to_string().as_bytes(), None)
                .await
            {
                result = Err(map_err(&format!("write {holder}"), e));
            }
        }
        if result.is_err() && created {
            // Do not keep the identity claimed by a registration that failed.
            let _ = client.delete(&holder, None).await;
        }
        Ok(self.registration(result?, epoch, sent, created))
    }

    async fn heartbeat(
        &self,
        identity: &Identity,
        id: u32,
        last_time_ms: u64,
    ) -> Result<(), RegistryError> {
        let session = self.shared.session();
        let claim = self.shared.claims.find(identity, id);
        if let Some(claim) = &claim {
            if let Some(lost) = claim.lost() {
                return Err(lost);
            }
            if !session.open || claim.is_lapsed() || claim.epoch() != session.epoch {
                return Err(RegistryError::new(
                    ErrorKind::Unavailable,
                    format!("zookeeper: the session of {identity} expired; holding worker ID {id} again under a new one (IDs go on until the window of the last confirmation ends)"),
                ));
            }
            claim.record(last_time_ms);
        }
        // Our claim must still stand: the holder node, owned by this session. When the
        // session expired, or the node went, another process may hold the identity now.
        let holder = self.holder(identity);
        let result = match session.client.check_stat(&holder).await {
            Ok(Some(stat)) if stat.ephemeral_owner == session.client.session_id().0 => {
                records::heartbeat(
                    self,
                    identity,
                    id,
                    last_time_ms,
                    claim.as_ref().map(|c| c.holder),
                )
                .await
            }
            // The keeper holds the ID again under a new session.
            Err(e @ (ZkError::SessionExpired | ZkError::ClientClosed)) if claim.is_some() => {
                Err(map_err(&format!("read {holder}"), e))
            }
            Ok(_) | Err(ZkError::SessionExpired | ZkError::ClientClosed) => Err(RegistryError::new(
                ErrorKind::Conflict,
                format!("the claim on {identity} lapsed ({holder} is not this session's): stop issuing IDs"),
            )),
            Err(e) => Err(map_err(&format!("read {holder}"), e)),
        };
        records::settle(claim.as_deref(), result)
    }

    async fn release(&self, identity: &Identity) -> Result<bool, RegistryError> {
        // Never under a live holder: another identity could be given the ID while it issues.
        let holder = self.holder(identity);
        match self.client().check_stat(&holder).await {
            Ok(Some(_)) => return Err(crate::plan::released_while_held(identity, &holder)),
            Ok(None) => {}
            Err(e) => return Err(map_err(&format!("read {holder}"), e)),
        }
        records::release(self, identity).await
    }

    async fn close(&self, identity: &Identity, id: u32) -> Result<(), RegistryError> {
        // Only this registry's own claim: another registration of the identity (a replacement
        // that took it over) is not ours to mark closed or to end.
        let Some(claim) = self.shared.claims.find(identity, id) else {
            return Ok(());
        };
        records::mark_closed(self, identity, id, claim.holder).await?;
        // The holder node, if it is this session's (else it is a newer registration's).
        let client = self.client();
        let holder = self.holder(identity);
        match client.check_stat(&holder).await {
            Ok(Some(stat)) if stat.ephemeral_owner == client.session_id().0 => {
                match client.delete(&holder, Some(stat.version)).await {
                    Ok(()) | Err(ZkError::NoNode | ZkError::BadVersion) => Ok(()),
                    Err(e) => Err(map_err(&format!("delete {holder}"), e)),
                }
            }
            Ok(_) => Ok(()),
            Err(e) => Err(map_err(&format!("read {holder}"), e)),
        }
    }

    async fn reclaim(
        &self,
        identity: &Identity,
        space: IdSpace,
        idle_before_ms: u64,
    ) -> Result<Option<Registration>, RegistryError> {
        identity.validate()?;
        if let Nodes::Leaf(_) = self.shared.nodes {
            return Err(RegistryError::config(format!(
                "{identity}: in Leaf's layout a worker ID belongs to the ip:port its node is named by, and cannot be taken over by another (reclaim_after); start on the ip:port of a node no longer in use instead (`floe worker list`)"
            )));
        }
        let Session { client, epoch, .. } = self.shared.session();
        let ephemeral = self.shared.cluster.ephemeral();
        let holder = self.holder(identity);
        let sent = Sent::now(&SystemClock);
        let number = records::new_holder();
        match client
            .create(&holder, number.to_string().as_bytes(), &ephemeral)
            .await
        {
            Ok(_) => {}
            Err(ZkError::NodeExists) => {
                return Err(RegistryError::new(
                    ErrorKind::Conflict,
                    format!("{identity} is held by another live process ({holder} exists)"),
                ))
            }
            Err(e) => return Err(map_err(&format!("create {holder}"), e)),
        }
        let terms = self.shared.terms();
        let taken =
            records::take_over_idle(self, identity, space, idle_before_ms, terms, number).await;
        if !matches!(taken, Ok(Some(_))) {
            // Nothing taken: do not keep the identity claimed.
            let _ = client.delete(&holder, None).await;
        }
        Ok(taken?.map(|allocation| self.registration(allocation, epoch, sent, true)))
    }

    fn adopt(&self, continued: &crate::Continued, fence: Arc<Fence>) -> Option<Registration> {
        // Under no session yet: the keeper holds it again (within a second, or once the node
        // of the session it continues is gone).
        let claim = Arc::new(Claim::adopted(
            continued,
            fence.clone(),
            self.shared.terms().window,
            u64::MAX,
        ));
        self.shared.claims.add(&claim);
        Some(Registration {
            fence,
            _hold: Some(Hold::new(ZkHold {
                _shared: self.shared.clone(),
                _claim: claim,
            })),
            ..Registration::new(continued.record(), true, None)
        })
    }

    async fn list(&self, service: &str) -> Result<Vec<WorkerRecord>, RegistryError> {
        Ok(records::list(self, service)
            .await?
            .into_iter()
            .map(|(r, _)| r)
            .collect())
    }
}
