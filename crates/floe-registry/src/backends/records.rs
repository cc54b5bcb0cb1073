//! What the server registries (ZooKeeper, etcd) share: one worker record per allocated ID, each
//! with a version, changed only by compare-and-set.
//!
//! Each server implements [`VersionedRecords`]'s primitives (read with version, list,
//! create-if-absent, compare-and-set, take-over, delete-if-version) and maps its client's errors
//! in one function; allocation, heartbeats, release and listing are written once here, above
//! them. How a live holder claims its identity (a ZooKeeper ephemeral node, an etcd lease)
//! stays each server's own.

use async_trait::async_trait;

use crate::plan::{idle_first, plan, space_full, Plan};
use crate::{ErrorKind, IdSpace, Identity, RegistryError, WorkerRecord};

/// The worker records of a server registry, one per allocated ID (`{root}/{service}/workers/{id}`
/// on both servers), each with a version that changes with every write.
#[async_trait]
pub(crate) trait VersionedRecords: Send + Sync {
    /// A record's version (ZooKeeper: the node's data version; etcd: its mod revision).
    type Version: Copy + Send + Sync;

    /// The store's name in messages (`ZooKeeper`, `etcd`).
    fn store(&self) -> &'static str;

    /// The record of `id` in `service` and its version; `None` when there is none.
    async fn read(
        &self,
        service: &str,
        id: u32,
    ) -> Result<Option<(WorkerRecord, Self::Version)>, RegistryError>;

    /// Every record of `service` with its version, in any order.
    async fn read_all(
        &self,
        service: &str,
    ) -> Result<Vec<(WorkerRecord, Self::Version)>, RegistryError>;

    /// Creates the record of `record.id` unless one exists; whether it did.
    async fn create(&self, record: &WorkerRecord) -> Result<bool, RegistryError>;

    /// Replaces the record of `record.id` if its version is still `version`; whether it did
    /// (`false`: it changed or went meanwhile).
    async fn replace(
        &self,
        record: &WorkerRecord,
        version: Self::Version,
    ) -> Result<bool, RegistryError>;

    /// As [`replace`](Self::replace), and only if no live process holds `previous` (its claim
    /// is gone): the take-over of an idle ID. Whether it did.
    async fn take_over(
        &self,
        record: &WorkerRecord,
        version: Self::Version,
        previous: &Identity,
    ) -> Result<bool, RegistryError>;

    /// Deletes the record of `id` in `service` if its version is still `version`; whether it
    /// did.
    async fn delete(
        &self,
        service: &str,
        id: u32,
        version: Self::Version,
    ) -> Result<bool, RegistryError>;
}

/// A record as stored: JSON.
pub(crate) fn encode(record: &WorkerRecord) -> Result<Vec<u8>, RegistryError> {
    serde_json::to_vec(record)
        .map_err(|e| RegistryError::new(ErrorKind::Corrupt, format!("cannot encode record: {e}")))
}

/// A stored record; `what` names where it was read, for the message.
pub(crate) fn decode(store: &str, what: &str, data: &[u8]) -> Result<WorkerRecord, RegistryError> {
    serde_json::from_slice(data).map_err(|e| {
        RegistryError::new(
            ErrorKind::Corrupt,
            format!("{store}: {what} is not a worker record: {e}"),
        )
    })
}

/// Every record of `service` with its version, in ID order.
pub(crate) async fn list<S: VersionedRecords + ?Sized>(
    store: &S,
    service: &str,
) -> Result<Vec<(WorkerRecord, S::Version)>, RegistryError> {
    let mut records = store.read_all(service).await?;
    records.sort_by_key(|(r, _)| r.id);
    Ok(records)
}

/// The identity's own ID (`true`: it had one), or a newly created record for it: the free IDs
/// lowest first, each taken by create-if-absent, so that two registrations at once never get
/// the same ID (the loser tries the next).
pub(crate) async fn allocate<S: VersionedRecords + ?Sized>(
    store: &S,
    identity: &Identity,
    space: IdSpace,
) -> Result<(WorkerRecord, bool), RegistryError> {
    let records = list(store, &identity.service).await?;
    let free = match plan(
        records.iter().map(|(r, _)| r),
        identity,
        space,
        store.store(),
    )? {
        Plan::Own(record) => return Ok((record, true)),
        Plan::Free(free) => free,
    };
    for id in free {
        let record = WorkerRecord {
            id,
            identity: identity.clone(),
            last_time_ms: 0,
        };
        if store.create(&record).await? {
            return Ok((record, false));
        }
    }
    Err(space_full(identity, space, store.store()))
}

/// The error for an ID that is no longer `identity`'s.
pub(crate) fn lost(identity: &Identity, id: u32) -> RegistryError {
    RegistryError::new(
        ErrorKind::Conflict,
        format!("worker ID {id} is no longer {identity}'s"),
    )
}

/// Records that `identity`'s holder of `id` was alive at `last_time_ms`, never moving the
/// record's last time back, by compare-and-set on the version just read.
///
/// # Errors
/// [`ErrorKind::Conflict`] when the record is gone or someone else's.
pub(crate) async fn heartbeat<S: VersionedRecords + ?Sized>(
    store: &S,
    identity: &Identity,
    id: u32,
    last_time_ms: u64,
) -> Result<(), RegistryError> {
    let Some((mut record, version)) = store.read(&identity.service, id).await? else {
        return Err(lost(identity, id));
    };
    if &record.identity != identity {
        return Err(lost(identity, id));
    }
    if last_time_ms <= record.last_time_ms {
        return Ok(());
    }
    record.last_time_ms = last_time_ms;
    // Not applied: it changed meanwhile (a concurrent beat); the next beat writes again.
    store.replace(&record, version).await?;
    Ok(())
}

/// Deletes `identity`'s record, if it has one, unless it changed since it was read.
pub(crate) async fn release<S: VersionedRecords + ?Sized>(
    store: &S,
    identity: &Identity,
) -> Result<bool, RegistryError> {
    for (record, version) in list(store, &identity.service).await? {
        if &record.identity == identity {
            return store.delete(&identity.service, record.id, version).await;
        }
    }
    Ok(false)
}

/// Takes over for `identity` the ID longest idle since `idle_before_ms` whose holder is gone
/// (see [`Registry::reclaim`](crate::Registry::reclaim)), keeping its last time. `None`:
/// nothing to take.
pub(crate) async fn take_over_idle<S: VersionedRecords + ?Sized>(
    store: &S,
    identity: &Identity,
    space: IdSpace,
    idle_before_ms: u64,
) -> Result<Option<WorkerRecord>, RegistryError> {
    let records = list(store, &identity.service).await?;
    for (previous, version) in idle_first(records, |(r, _)| r, identity, space, idle_before_ms) {
        let previous_holder = previous.identity.clone();
        let record = previous.taken_over_by(identity);
        // Compare-and-set on the version read: two reclaimers cannot both win.
        if store.take_over(&record, version, &previous_holder).await? {
            return Ok(Some(record));
        }
    }
    Ok(None)
}
