//! The [`Registry`] trait every backend implements, and the [`Registration`] it hands out.

use std::fmt;

use async_trait::async_trait;

use crate::{IdSpace, Identity, RegistryError, WorkerRecord};

/// What [`Registry::register`](crate::Registry::register) returns.
#[derive(Debug)]
pub struct Registration {
    /// The record: the ID and the last time recorded *before* this registration (the
    /// previous run's, or the previous holder's when the ID was taken over).
    pub record: WorkerRecord,
    /// Whether the ID was already this identity's (a restart) rather than newly allocated.
    pub existing: bool,
    /// Raised by the registry when it learns in the background that the ID is no longer
    /// provably this identity's (etcd: the lease was lost); lowered when it holds it again.
    /// Registries that can give the ID away (ZooKeeper, etcd) also give it a deadline, moved
    /// on by every confirmation of the claim ([`crate::terms`]).
    pub fence: std::sync::Arc<floe_core::fence::Fence>,
    /// How long to wait before the first ID: the previous holder's window and margin, when
    /// this registration took over an ID whose holder did not close it cleanly and the
    /// registry's own expiry does not cover that window ([`crate::terms`]). Zero otherwise.
    pub takeover_wait: std::time::Duration,
    /// Who held the ID before this registration took it over, if it did.
    pub previous_holder: Option<Identity>,
    /// Whether this registration took the ID from a holder that did not close it cleanly: its
    /// last IDs may carry times up to about now, so the new holder issues none before the
    /// moment it is ready to (after [`takeover_wait`](Self::takeover_wait)).
    pub previous_open: bool,
    /// The previous holder's reach, as its record said (0: unknown), when
    /// [`previous_open`](Self::previous_open).
    pub previous_reach_ms: u64,
    /// The registration number the record carried before this registration (0: none, or a
    /// new ID): a restart whose state directory holds that number (its lease token) was its
    /// holder ([`crate::continuation`]).
    pub previous_token: u64,
    /// Held for as long as the registration lives: for the file registry, the OS lock that
    /// keeps another process on this host off the ID; for ZooKeeper, the session that owns
    /// the ephemeral holder node.
    pub(crate) _hold: Option<Hold>,
}

impl Registration {
    /// A registration with a fence of its own (never raised unless the registry raises it).
    pub(crate) fn new(record: WorkerRecord, existing: bool, hold: Option<Hold>) -> Self {
        Registration {
            record,
            existing,
            fence: Default::default(),
            takeover_wait: std::time::Duration::ZERO,
            previous_holder: None,
            previous_open: false,
            previous_reach_ms: 0,
            previous_token: 0,
            _hold: hold,
        }
    }
}

/// A lease continued from the state directory ([`Registry::adopt`]).
#[derive(Debug, Clone)]
pub struct Continued {
    /// The identity.
    pub identity: Identity,
    /// The worker ID.
    pub id: u32,
    /// The registration number its record should still carry ([`WorkerRecord::holder`]).
    pub holder: u64,
    /// The last time the previous process recorded.
    pub recorded_ms: u64,
}

impl Continued {
    /// The record as the continued registration left it (as far as this process knows).
    pub(crate) fn record(&self) -> WorkerRecord {
        WorkerRecord {
            holder: self.holder,
            rule: crate::LEASE_RULE,
            ..WorkerRecord::new(self.id, self.identity.clone(), self.recorded_ms)
        }
    }
}

/// Whatever keeps a registration's claim alive; dropped with the registration.
pub(crate) struct Hold(#[allow(dead_code)] Box<dyn std::any::Any + Send + Sync>);

impl Hold {
    pub(crate) fn new(inner: impl std::any::Any + Send + Sync) -> Self {
        Hold(Box::new(inner))
    }
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Hold")
    }
}

/// A registry of worker IDs. One small primitive per operation; the cache, the clock guards
/// and heartbeat scheduling are written once, above every backend ([`lease`](crate::lease)).
#[async_trait]
pub trait Registry: Send + Sync + fmt::Debug {
    /// The registry's name in logs and URLs (`file`, `static`, `zookeeper`, `etcd`).
    fn name(&self) -> &'static str;

    /// Which registry this is, as a URL without options (`zk://host:port/root`,
    /// `file:///var/lib/floe`, `static:7`): the local cache keeps an ID under the registry
    /// that granted it, and never offers it to another.
    fn location(&self) -> String;

    /// Whether an [`Unavailable`](crate::ErrorKind::Unavailable) answer may give way to
    /// another on a later call (a connection lost for a moment), so that a start asks again
    /// for a few seconds ([`crate::lease::REGISTER_RETRY`]). `false` for a registry that was
    /// never reached ([`Unreachable`](crate::Unreachable)): it answers the same forever.
    fn may_answer_later(&self) -> bool {
        true
    }

    /// How long a holder that died without closing (kill -9) may still hold its ID in the
    /// registry: etcd's lease TTL, ZooKeeper's session timeout, nothing for registries whose
    /// holds end with the process (file, static). A restart of the same identity waits at
    /// least this long (plus a margin) for the previous holder before it gives up.
    fn holder_linger(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// Gives `identity` an ID in `space`: its own ID again if it has one, else a free one.
    /// The registration's record carries the last time recorded before this call.
    ///
    /// # Errors
    /// [`ErrorKind::SpaceFull`](crate::ErrorKind::SpaceFull) when every ID is allocated, [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) when the
    /// identity's ID is held by another live process, [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable) when the
    /// registry cannot be reached.
    async fn register(
        &self,
        identity: &Identity,
        space: IdSpace,
    ) -> Result<Registration, RegistryError>;

    /// Records that the holder of `id` was alive at `last_time_ms` (never moving it back).
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable), or [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) if the ID is no longer this
    /// identity's.
    async fn heartbeat(
        &self,
        identity: &Identity,
        id: u32,
        last_time_ms: u64,
    ) -> Result<(), RegistryError>;

    /// Gives up `identity`'s ID. Its last time is forgotten with it, so only release an ID
    /// whose holder is gone for good.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable).
    async fn release(&self, identity: &Identity) -> Result<bool, RegistryError>;

    /// Every allocated ID of `service`, in ID order.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable).
    async fn list(&self, service: &str) -> Result<Vec<WorkerRecord>, RegistryError>;

    /// Ends this process's hold on `identity`'s ID `id` at a clean shutdown, once its
    /// generators have stopped for good: the record is marked closed (the next holder need not
    /// wait out this one's window) and the claim ends, so that a restart need not wait for it
    /// to lapse. The ID stays allocated to the identity, with its last time. (The file
    /// registry's hold is an OS lock that ends with the registration.)
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable).
    async fn close(&self, identity: &Identity, id: u32) -> Result<(), RegistryError> {
        let _ = (identity, id);
        Ok(())
    }

    /// The terms of this registry's leases ([`crate::terms`]): `None` for registries whose
    /// claims only end with the process (file) or that have none (static).
    fn lease_terms(&self) -> Option<crate::terms::LeaseTerms> {
        None
    }

    /// floe's mirror of a sequencer store's epoch (floe-sequencer's guard): the highest epoch
    /// any node of `service` recorded under `name` (an opaque, path-safe name of the store),
    /// so that a node with no memory of the store (a new one, or one whose state directory
    /// was lost) notices a store that went back. `None`: nothing recorded, or this registry
    /// keeps no mirror (file, static, Leaf's layout).
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable); [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) when the value is not a number.
    async fn store_epoch(&self, service: &str, name: &str) -> Result<Option<i64>, RegistryError> {
        let _ = (service, name);
        Ok(None)
    }

    /// Records `epoch` as [`store_epoch`](Self::store_epoch)'s `name`, never lowering it.
    /// `false`: this registry keeps no mirror.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable).
    async fn keep_store_epoch(
        &self,
        service: &str,
        name: &str,
        epoch: i64,
    ) -> Result<bool, RegistryError> {
        let _ = (service, name, epoch);
        Ok(false)
    }

    /// Continues the lease of this identity's previous process on the same state directory
    /// ([`crate::lease`]): `continued.id`, held by registration `continued.holder`, whose
    /// window ends where `fence`'s deadline already says. The claim starts lapsed: the
    /// registry holds it again in the background (a new session or lease once the previous
    /// process's is gone), if the record is still that registration's, and loses it
    /// otherwise. No request is made here: it works while the registry is unreachable.
    /// `None`: this registry does not lease (file, static), or cannot continue one.
    fn adopt(
        &self,
        continued: &Continued,
        fence: std::sync::Arc<floe_core::fence::Fence>,
    ) -> Option<Registration> {
        let _ = (continued, fence);
        None
    }

    /// Takes over, for `identity`, the ID of another identity of the same service whose holder
    /// was last alive at or before `idle_before_ms` and is not alive now (no live process
    /// holds it). The ID longest idle goes first. The registration's record keeps the
    /// previous holder's last time, so the new holder starts after it. Records never
    /// heartbeaten (last time 0) are not taken. `None`: nothing to take.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable); [`ErrorKind::Conflict`](crate::ErrorKind::Conflict) if `identity` is held elsewhere.
    async fn reclaim(
        &self,
        identity: &Identity,
        space: IdSpace,
        idle_before_ms: u64,
    ) -> Result<Option<Registration>, RegistryError> {
        let _ = (identity, space, idle_before_ms);
        Ok(None)
    }
}
