//! What the server registries (ZooKeeper, etcd) share: one worker record per allocated ID, each
//! with a version, changed only by compare-and-set.
//!
//! Each server implements [`VersionedRecords`]'s primitives (read with version, list,
//! create-if-absent, compare-and-set, take-over, delete-if-version) and maps its client's errors
//! in one function; allocation, heartbeats, release and listing are written once here, above
//! them. How a live holder claims its identity (a ZooKeeper ephemeral node, an etcd lease)
//! stays each server's own. Two primitives have defaults that a layout whose records other
//! programs also write overrides (ZooKeeper in Leaf's layout): how a new ID is chosen
//! ([`VersionedRecords::create_new`]) and what is checked before an identity takes its own
//! record again ([`VersionedRecords::check_own`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use floe_core::fence::{Fence, Sent};

use crate::plan::{idle_first, plan, space_full, Plan};
use crate::terms::LeaseTerms;
use crate::{ErrorKind, IdSpace, Identity, RegistryError, WorkerRecord, LEASE_RULE};

/// The worker records of a server registry, one per allocated ID (`{root}/{service}/workers/{id}`
/// on both servers in floe's layout; Leaf's `{root}/{service}/forever/{ip}:{port}-{id}` on
/// ZooKeeper in Leaf's), each with a version that changes with every write.
#[async_trait]
pub(crate) trait VersionedRecords: Send + Sync {
    /// A record's version (ZooKeeper: the node's data version; etcd: its mod revision).
    type Version: Copy + Send + Sync;

    /// The store's name in messages (`ZooKeeper`, `etcd`).
    fn store(&self) -> &'static str;

    /// Where the record of `identity`'s worker ID `id` is kept (a node's path, a key), so
    /// that an error about it names it.
    fn place(&self, identity: &Identity, id: u32) -> String;

    /// The record of `id` in `identity`'s service and its version; `None` when there is none.
    /// Where a record's place is named by its holder (Leaf's layout), only `identity`'s own
    /// record of `id` is found: another identity's is `None`, as good as gone to this one.
    async fn read(
        &self,
        identity: &Identity,
        id: u32,
    ) -> Result<Option<(WorkerRecord, Self::Version)>, RegistryError>;

    /// Every record of `service` with its version, in any order.
    async fn read_all(
        &self,
        service: &str,
    ) -> Result<Vec<(WorkerRecord, Self::Version)>, RegistryError>;

    /// Creates the record of `record.id` unless one exists; whether it did.
    async fn create(&self, record: &WorkerRecord) -> Result<bool, RegistryError>;

    /// Creates a record like `template` for its identity under a new ID of `space`: by
    /// default the first of the `free` IDs (lowest first) that [`create`](Self::create) wins,
    /// so that two registrations at once never get the same ID. The record created; `None`
    /// when every one of them was taken meanwhile. A store that names new IDs itself (Leaf's
    /// layout: ZooKeeper's sequence numbers) ignores `free`.
    async fn create_new(
        &self,
        template: &WorkerRecord,
        space: IdSpace,
        free: &[u32],
    ) -> Result<Option<WorkerRecord>, RegistryError> {
        let _ = space;
        create_first_free(self, template, free).await
    }

    /// Called before a registration takes its identity's own record `own` (read at `version`)
    /// again: a store whose records another program may still be writing (Leaf's processes,
    /// in Leaf's layout) refuses here, or waits to be sure it is not. The version to write
    /// at; by default `version`.
    ///
    /// # Errors
    /// [`ErrorKind::Conflict`] naming the record and what still writes it.
    async fn check_own(
        &self,
        own: &WorkerRecord,
        version: Self::Version,
    ) -> Result<Self::Version, RegistryError> {
        let _ = own;
        Ok(version)
    }
    /// Replaces the record of `record.id` if its version is still `version`; whether it did
    /// (`false`: it changed or went meanwhile).
    async fn replace(
        &self,
        record: &WorkerRecord,
        version: Self::Version,
    ) -> Result<bool, RegistryError>;

    /// As [`replace`](Self::replace), and only if no live process holds `previous` (its claim
    /// is gone), checked in the same atomic step as the write (else the previous holder could
    /// come back between them): the take-over of an idle ID. Whether it did.
    async fn take_over(
        &self,
        record: &WorkerRecord,
        version: Self::Version,
        previous: &Identity,
    ) -> Result<bool, RegistryError>;

    /// Deletes `record` (its ID, in its identity's service) if its version is still
    /// `version`; whether it did.
    async fn delete(
        &self,
        record: &WorkerRecord,
        version: Self::Version,
    ) -> Result<bool, RegistryError>;
}

/// [`VersionedRecords::create_new`]'s default: `template` under the first of the `free` IDs
/// that create-if-absent wins.
pub(crate) async fn create_first_free<S: VersionedRecords + ?Sized>(
    store: &S,
    template: &WorkerRecord,
    free: &[u32],
) -> Result<Option<WorkerRecord>, RegistryError> {
    for &id in free {
        let record = WorkerRecord {
            id,
            ..template.clone()
        };
        if store.create(&record).await? {
            return Ok(Some(record));
        }
    }
    Ok(None)
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

/// The place of floe's mirror of a store's epoch `name` ([`crate::Registry::store_epoch`]),
/// under a root: a sibling of the service's workers and holders.
pub(crate) fn store_epoch_place(root: &str, service: &str, name: &str) -> String {
    format!("{root}/{service}/stores/{name}")
}

/// A mirrored store epoch as the registry keeps it (decimal text).
pub(crate) fn decode_epoch(store: &str, what: &str, data: &[u8]) -> Result<i64, RegistryError> {
    std::str::from_utf8(data)
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
        .ok_or_else(|| {
            RegistryError::new(
                ErrorKind::Corrupt,
                format!(
                    "{store}: {what} is not a store epoch (decimal text): {:?}",
                    String::from_utf8_lossy(data)
                ),
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

/// What [`allocate`] and [`take_over_idle`] come to: the record as it stands now (held, open,
/// with this holder's window) and, when the ID had a holder before, its record as it was
/// (whether it closed cleanly, and its window: what a takeover waits out).
#[derive(Debug)]
pub(crate) struct Allocation {
    pub(crate) record: WorkerRecord,
    /// Whether the ID was already the identity's (a restart).
    pub(crate) existing: bool,
    pub(crate) previous: Option<WorkerRecord>,
}

/// A new registration's number for [`WorkerRecord::holder`]: random, never 0.
#[allow(clippy::disallowed_methods)] // the wall clock as entropy, not as time
pub(crate) fn new_holder() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // std's RandomState is seeded from the OS's randomness (and moves on with each one made).
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish().max(1)
}

/// The identity's own ID (`existing`: it had one), or a newly created record for it
/// ([`VersionedRecords::create_new`]: the free IDs lowest first, each taken by
/// create-if-absent, so that two registrations at once never get the same ID; or the store's
/// own choice). Before its own record is taken again the store may refuse
/// ([`VersionedRecords::check_own`]). Its own record is marked held by registration
/// `holder`, open, with this holder's window (`window_ms`), by compare-and-set before it is
/// handed out: should this holder crash or be cut off, the next one knows to wait out its
/// window, and an earlier registration of the same identity still running (cut off, paused)
/// finds the ID registered again at its next write.
pub(crate) async fn allocate<S: VersionedRecords + ?Sized>(
    store: &S,
    identity: &Identity,
    space: IdSpace,
    terms: LeaseTerms,
    holder: u64,
) -> Result<Allocation, RegistryError> {
    for _ in 0..ATTEMPTS {
        let records = list(store, &identity.service).await?;
        let free = match plan(
            records.iter().map(|(r, _)| r),
            identity,
            space,
            store.store(),
        )? {
            Plan::Own(own) => {
                let Some((_, version)) = records.iter().find(|(r, _)| r == &own) else {
                    continue;
                };
                let version = store.check_own(&own, *version).await?;
                let record = WorkerRecord {
                    window_ms: terms.window_ms(),
                    reach_ms: terms.reach_ms(),
                    closed: false,
                    holder,
                    layout: space.layout_text().or(own.layout.clone()),
                    rule: LEASE_RULE,
                    ..own.clone()
                };
                if !store.replace(&record, version).await? {
                    continue; // changed meanwhile (a heartbeat, a release): read again
                }
                return Ok(Allocation {
                    record,
                    existing: true,
                    previous: Some(own),
                });
            }
            Plan::Free(free) => free,
        };
        let template = WorkerRecord {
            window_ms: terms.window_ms(),
            reach_ms: terms.reach_ms(),
            holder,
            layout: space.layout_text(),
            rule: LEASE_RULE,
            ..WorkerRecord::new(0, identity.clone(), 0)
        };
        return match store.create_new(&template, space, &free).await? {
            Some(record) => Ok(Allocation {
                record,
                existing: false,
                previous: None,
            }),
            None => Err(space_full(identity, space, store.store())),
        };
    }
    Err(RegistryError::new(
        ErrorKind::Unavailable,
        format!(
            "{}: the record of {identity} changed under {ATTEMPTS} attempts in a row",
            store.store()
        ),
    ))
}

/// Marks `identity`'s record of `id` closed (its holder, registration `holder`, stopped
/// issuing for good), so that the next holder need not wait out its window. Nothing when the
/// record is gone, someone else's, or registered again since (another registration of the
/// same identity: it may be issuing).
pub(crate) async fn mark_closed<S: VersionedRecords + ?Sized>(
    store: &S,
    identity: &Identity,
    id: u32,
    holder: u64,
) -> Result<(), RegistryError> {
    for _ in 0..ATTEMPTS {
        let Some((record, version)) = store.read(identity, id).await? else {
            return Ok(());
        };
        if &record.identity != identity || record.holder != holder || record.closed {
            return Ok(());
        }
        let closed = WorkerRecord {
            closed: true,
            ..record
        };
        if store.replace(&closed, version).await? {
            return Ok(());
        }
    }
    Err(contended(store, identity, id))
}

/// The error for an ID that is no longer `identity`'s, naming its record.
fn lost<S: VersionedRecords + ?Sized>(store: &S, identity: &Identity, id: u32) -> RegistryError {
    RegistryError::new(
        ErrorKind::Conflict,
        format!(
            "worker ID {id} ({}) is no longer {identity}'s",
            store.place(identity, id)
        ),
    )
}

/// How many times a compare-and-set may lose to another writer in one call before the call
/// answers `Unavailable` (the next heartbeat, or the operator, tries again).
pub(crate) const ATTEMPTS: usize = 5;

/// The attempts of a store epoch's keep ([`crate::Registry::keep_store_epoch`]): every
/// compare it loses is another node's raise, so the value only climbs towards it; many nodes
/// writing at once (a fleet started together) must not give up.
pub(crate) const KEEP_ATTEMPTS: usize = 64;

/// Records that `identity`'s holder of `id` was alive at `last_time_ms`, never moving the
/// record's last time back, by compare-and-set on the version just read. A lost compare reads
/// again: the record may have changed hands meanwhile.
///
/// # Errors
/// [`ErrorKind::Conflict`] when the record is gone or someone else's.
pub(crate) async fn heartbeat<S: VersionedRecords + ?Sized>(
    store: &S,
    identity: &Identity,
    id: u32,
    last_time_ms: u64,
    holder: Option<u64>,
) -> Result<(), RegistryError> {
    for _ in 0..ATTEMPTS {
        let Some((mut record, version)) = store.read(identity, id).await? else {
            return Err(lost(store, identity, id));
        };
        if &record.identity != identity {
            return Err(lost(store, identity, id));
        }
        if let Some(holder) = holder {
            if record.holder != holder {
                return Err(RegistryError::new(
                    ErrorKind::Conflict,
                    format!(
                        "worker ID {id} of {identity} ({}) was registered again by another process (a replacement with this identity, or a Leaf server writing its node?): stop issuing IDs",
                        store.place(identity, id)
                    ),
                ));
            }
        }
        if last_time_ms <= record.last_time_ms {
            return Ok(());
        }
        record.last_time_ms = last_time_ms;
        if store.replace(&record, version).await? {
            return Ok(());
        }
    }
    Err(contended(store, identity, id))
}

fn contended<S: VersionedRecords + ?Sized>(
    store: &S,
    identity: &Identity,
    id: u32,
) -> RegistryError {
    RegistryError::new(
        ErrorKind::Unavailable,
        format!(
            "{}: the record of worker ID {id} ({identity}) changed under {ATTEMPTS} attempts in a row",
            store.store()
        ),
    )
}

/// Deletes `identity`'s record, if it has one, unless it changed since it was read (then reads
/// again: a heartbeat may have moved its last time).
pub(crate) async fn release<S: VersionedRecords + ?Sized>(
    store: &S,
    identity: &Identity,
) -> Result<bool, RegistryError> {
    for _ in 0..ATTEMPTS {
        let Some((record, version)) = list(store, &identity.service)
            .await?
            .into_iter()
            .find(|(r, _)| &r.identity == identity)
        else {
            return Ok(false);
        };
        if store.delete(&record, version).await? {
            return Ok(true);
        }
    }
    Err(RegistryError::new(
        ErrorKind::Unavailable,
        format!(
            "{}: the record of {identity} changed under {ATTEMPTS} attempts in a row",
            store.store()
        ),
    ))
}

/// Takes over for `identity` the ID longest idle since `idle_before_ms` whose holder is gone
/// (see [`Registry::reclaim`](crate::Registry::reclaim)), keeping its last time; the record
/// is marked open with this holder's window. `None`: nothing to take.
pub(crate) async fn take_over_idle<S: VersionedRecords + ?Sized>(
    store: &S,
    identity: &Identity,
    space: IdSpace,
    idle_before_ms: u64,
    terms: LeaseTerms,
    holder: u64,
) -> Result<Option<Allocation>, RegistryError> {
    let records = list(store, &identity.service).await?;
    for (previous, version) in idle_first(records, |(r, _)| r, identity, space, idle_before_ms) {
        let previous_holder = previous.identity.clone();
        let record = previous
            .clone()
            .taken_over_by(identity, space, Some(terms), holder);
        // Compare-and-set on the version read: two reclaimers cannot both win.
        if store.take_over(&record, version, &previous_holder).await? {
            return Ok(Some(Allocation {
                record,
                existing: false,
                previous: Some(previous),
            }));
        }
    }
    Ok(None)
}

/// A live registration of a server registry, as the registry's keeper sees it: the ID, its
/// fence, and what this process recorded, so that the ID can be held again after the claim
/// lapsed (a ZooKeeper session expired) only if nobody else used it meanwhile.
#[derive(Debug)]
pub(crate) struct Claim {
    pub(crate) identity: Identity,
    pub(crate) id: u32,
    pub(crate) fence: Arc<Fence>,
    /// How long after sending a request the registry confirmed the holder may issue
    /// ([`crate::terms`]), in nanoseconds: a new ZooKeeper session may be granted another
    /// timeout.
    window_nanos: AtomicU64,
    /// The latest last time this process wrote to the record, or found in it at registration.
    recorded_ms: AtomicU64,
    /// The session (ZooKeeper) under which the claim stands.
    epoch: AtomicU64,
    /// The registration's number in the record ([`WorkerRecord::holder`]).
    pub(crate) holder: u64,
    /// Whether the claim lapsed (a session expired, a lease was lost or may be) and is not
    /// held again yet: the fence is raised meanwhile.
    lapsed: AtomicBool,
    /// Why the ID cannot be held again, once known: the fence then stays raised for good.
    lost: Mutex<Option<RegistryError>>,
}

impl Claim {
    /// A claim on `record`'s ID under session `epoch`, confirmed by the registry in answer to
    /// a request sent at `sent`: its fence opens until `sent + window`.
    pub(crate) fn new(
        record: &WorkerRecord,
        fence: Arc<Fence>,
        epoch: u64,
        window: Duration,
        sent: Sent,
    ) -> Self {
        fence.confirm(sent, window);
        Claim::unconfirmed(record, fence, epoch, window)
    }

    /// A claim on `record`'s ID under session `epoch`, its fence as it stands.
    fn unconfirmed(record: &WorkerRecord, fence: Arc<Fence>, epoch: u64, window: Duration) -> Self {
        Claim {
            identity: record.identity.clone(),
            id: record.id,
            fence,
            holder: record.holder,
            window_nanos: AtomicU64::new(nanos(window)),
            recorded_ms: AtomicU64::new(record.last_time_ms),
            epoch: AtomicU64::new(epoch),
            lapsed: AtomicBool::new(false),
            lost: Mutex::new(None),
        }
    }

    /// A claim continued from the state directory ([`crate::Registry::adopt`]): lapsed (not
    /// held under any session yet), its fence's deadline already set by the continuation.
    pub(crate) fn adopted(
        continued: &crate::Continued,
        fence: Arc<Fence>,
        window: Duration,
        epoch: u64,
    ) -> Self {
        let record = continued.record();
        Claim {
            lapsed: AtomicBool::new(true),
            ..Claim::unconfirmed(&record, fence, epoch, window)
        }
    }

    /// The latest last time this process recorded for the ID.
    pub(crate) fn recorded_ms(&self) -> u64 {
        self.recorded_ms.load(Ordering::Acquire)
    }

    /// Notes a last time about to be written (before the write: the record's last time is
    /// never past what this process knows it wrote).
    pub(crate) fn record(&self, last_time_ms: u64) {
        self.recorded_ms.fetch_max(last_time_ms, Ordering::AcqRel);
    }

    #[cfg_attr(not(feature = "zookeeper"), allow(dead_code))] // etcd has no sessions
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The registry confirmed the claim in answer to a request sent at `sent`: generators may
    /// issue until `sent + window` (unless the claim lapsed or the ID is lost: then the fence
    /// stays raised).
    pub(crate) fn confirmed(&self, sent: Sent) {
        self.fence.confirm(sent, self.window());
    }

    /// The claim's window.
    pub(crate) fn window(&self) -> Duration {
        Duration::from_nanos(self.window_nanos.load(Ordering::Acquire))
    }

    /// Sets the claim's window (the terms of a new session), before it is held again under it.
    #[cfg_attr(not(feature = "zookeeper"), allow(dead_code))] // etcd's TTL never changes
    pub(crate) fn set_window(&self, window: Duration) {
        self.window_nanos.store(nanos(window), Ordering::Release);
    }

    /// The claim lapsed (a session expired, a lease ended): it is not confirmed until it is
    /// held again. Generation goes on until the window of its last confirmation ends (lease
    /// rule 2, [`crate::terms`]): whoever takes the ID over waits the reach and margin from
    /// the moment it found the claim gone, after every confirmed request.
    pub(crate) fn lapse(&self) {
        self.lapsed.store(true, Ordering::Release);
    }

    pub(crate) fn is_lapsed(&self) -> bool {
        self.lapsed.load(Ordering::Acquire)
    }

    /// The claim stands again under session `epoch`, as the registry confirmed in answer to a
    /// request sent at `sent`: generation may go on until `sent + window` (a lost ID's fence
    /// stays raised: only a loss raises it, for good).
    pub(crate) fn held_under(&self, epoch: u64, sent: Sent) {
        self.epoch.store(epoch, Ordering::Release);
        self.fence.confirm(sent, self.window());
        self.lapsed.store(false, Ordering::Release);
    }

    /// Why the ID is lost for good, if it is.
    pub(crate) fn lost(&self) -> Option<RegistryError> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The ID is lost for good: the fence stays raised and every heartbeat says why.
    pub(crate) fn lose(&self, why: RegistryError) {
        let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        *lost = Some(why);
        self.fence.raise();
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A registry's live claims (each held by its registration; gone with it).
#[derive(Debug, Default)]
pub(crate) struct Claims(Mutex<Vec<Weak<Claim>>>);

impl Claims {
    pub(crate) fn add(&self, claim: &Arc<Claim>) {
        let mut claims = self.0.lock().unwrap_or_else(|p| p.into_inner());
        claims.retain(|c| c.strong_count() > 0);
        claims.push(Arc::downgrade(claim));
    }

    /// Every claim whose registration is alive.
    pub(crate) fn live(&self) -> Vec<Arc<Claim>> {
        let claims = self.0.lock().unwrap_or_else(|p| p.into_inner());
        claims.iter().filter_map(Weak::upgrade).collect()
    }

    /// The live claim of `identity` on `id`, if this registry holds one.
    pub(crate) fn find(&self, identity: &Identity, id: u32) -> Option<Arc<Claim>> {
        self.live()
            .into_iter()
            .find(|c| c.id == id && &c.identity == identity)
    }
}

/// Whether `claim`'s ID may be held again after its claim lapsed: its record still
/// `claim.identity`'s, and its last time not past what this process recorded (else another
/// process held the ID meanwhile and may have issued IDs this one could repeat). The record is
/// not written: its last time never moves back.
///
/// # Errors
/// [`ErrorKind::Conflict`] naming what happened: the ID is lost for good;
/// [`ErrorKind::Unavailable`] when the record is missing or cannot be read (try again).
pub(crate) async fn may_hold_again<S: VersionedRecords + ?Sized>(
    store: &S,
    claim: &Claim,
) -> Result<(), RegistryError> {
    let (identity, id) = (&claim.identity, claim.id);
    let lost = |what: String| {
        RegistryError::new(
            ErrorKind::Conflict,
            format!(
                "{}: worker ID {id} ({}) is no longer {identity}'s: {what} while its claim had lapsed; it stays fenced (no IDs): restart floe to register again",
                store.store(),
                store.place(identity, id)
            ),
        )
    };
    match store.read(identity, id).await? {
        // Released, or the registry forgot it (wiped, restored from an older backup): the
        // registry may give the ID to another at once, so it is lost, the fence raised now
        // rather than at the end of the window.
        None => Err(lost("its record is gone (released by hand, or the registry was wiped or restored)".to_string())),
        Some((record, _)) if &record.identity != identity => Err(lost(format!(
            "it was taken over by {}",
            record.identity
        ))),
        Some((record, _)) if record.holder != claim.holder => Err(lost(
            "it was registered again by another process with this identity".to_string(),
        )),
        // Closed cleanly by this very registration (a clean stop whose process was then
        // continued from a mark it left): holding it again would leave it marked closed while
        // it issues. A restart registers it again, with no wait.
        Some((record, _)) if record.closed => Err(lost(
            "its record says it was closed cleanly".to_string(),
        )),
        Some((record, _)) if record.last_time_ms > claim.recorded_ms() => Err(lost(format!(
            "its last time moved to {} ms, past the {} ms this process recorded (another process used it)",
            record.last_time_ms,
            claim.recorded_ms()
        ))),
        Some(_) => Ok(()),
    }
}

/// A heartbeat's answer for a claimed ID: a conflict (the record gone or someone else's, the
/// claim not this process's) loses the claim for good, so that no keeper lowers its fence.
pub(crate) fn settle(
    claim: Option<&Claim>,
    result: Result<(), RegistryError>,
) -> Result<(), RegistryError> {
    if let (Some(claim), Err(e)) = (claim, &result) {
        if e.kind == ErrorKind::Conflict {
            claim.lose(e.clone());
        }
    }
    result
}

#[cfg(test)]
mod tests {
    //! The logic above the primitives, on an in-memory store whose compare-and-set can be made
    //! to lose to another writer (which the real servers do only under a race).

    use super::*;
    use std::collections::BTreeMap;

    type Change = Box<dyn FnOnce(&mut BTreeMap<u32, (WorkerRecord, i64)>) + Send>;

    /// One service's records, each with a version bumped on every write; `before_write` runs
    /// just before the next compare-and-set or delete, as another process's write would.
    #[derive(Default)]
    struct Memory {
        records: Mutex<BTreeMap<u32, (WorkerRecord, i64)>>,
        before_write: Mutex<Vec<Change>>,
    }

    impl Memory {
        fn interfere(&self) {
            let changes: Vec<Change> = self.before_write.lock().unwrap().drain(..).collect();
            let mut records = self.records.lock().unwrap();
            for change in changes {
                change(&mut records);
            }
        }
        fn put(&self, record: WorkerRecord) {
            let mut records = self.records.lock().unwrap();
            let version = records.get(&record.id).map_or(1, |(_, v)| v + 1);
            records.insert(record.id, (record, version));
        }
    }

    #[async_trait]
    impl VersionedRecords for Memory {
        type Version = i64;
        fn store(&self) -> &'static str {
            "memory"
        }
        fn place(&self, _: &Identity, id: u32) -> String {
            format!("record {id}")
        }
        async fn read(
            &self,
            _: &Identity,
            id: u32,
        ) -> Result<Option<(WorkerRecord, i64)>, RegistryError> {
            Ok(self.records.lock().unwrap().get(&id).cloned())
        }
        async fn read_all(&self, _: &str) -> Result<Vec<(WorkerRecord, i64)>, RegistryError> {
            Ok(self.records.lock().unwrap().values().cloned().collect())
        }
        async fn create(&self, record: &WorkerRecord) -> Result<bool, RegistryError> {
            self.interfere();
            let mut records = self.records.lock().unwrap();
            if records.contains_key(&record.id) {
                return Ok(false);
            }
            records.insert(record.id, (record.clone(), 1));
            Ok(true)
        }
        async fn replace(
            &self,
            record: &WorkerRecord,
            version: i64,
        ) -> Result<bool, RegistryError> {
            self.interfere();
            let mut records = self.records.lock().unwrap();
            match records.get(&record.id) {
                Some((_, v)) if *v == version => {
                    records.insert(record.id, (record.clone(), version + 1));
                    Ok(true)
                }
                _ => Ok(false),
            }
        }
        async fn take_over(
            &self,
            record: &WorkerRecord,
            version: i64,
            _: &Identity,
        ) -> Result<bool, RegistryError> {
            self.replace(record, version).await
        }
        async fn delete(&self, record: &WorkerRecord, version: i64) -> Result<bool, RegistryError> {
            self.interfere();
            let mut records = self.records.lock().unwrap();
            match records.get(&record.id) {
                Some((_, v)) if *v == version => {
                    records.remove(&record.id);
                    Ok(true)
                }
                _ => Ok(false),
            }
        }
    }

    fn who(port: u16) -> Identity {
        Identity::new("orders", "h", port)
    }

    fn record(id: u32, port: u16, last_time_ms: u64) -> WorkerRecord {
        WorkerRecord::new(id, who(port), last_time_ms)
    }

    #[tokio::test]
    async fn a_heartbeat_that_loses_its_compare_reads_again() {
        let store = Memory::default();
        store.put(record(3, 1, 1_000));
        // Taken over between the read and the write: the heartbeat says so (it used to
        // answer Ok, leaving the holder issuing until its next beat).
        store.before_write.lock().unwrap().push(Box::new(|r| {
            r.insert(3, (record(3, 2, 1_000), 9));
        }));
        let e = heartbeat(&store, &who(1), 3, 2_000, None)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
        assert_eq!(
            store.read(&who(1), 3).await.unwrap().unwrap().0,
            record(3, 2, 1_000)
        );

        // A concurrent beat of our own wrote first: ours is written after it, never back.
        store.put(record(4, 1, 1_000));
        store.before_write.lock().unwrap().push(Box::new(|r| {
            r.insert(4, (record(4, 1, 1_500), 20));
        }));
        heartbeat(&store, &who(1), 4, 2_000, None).await.unwrap();
        assert_eq!(
            store
                .read(&who(1), 4)
                .await
                .unwrap()
                .unwrap()
                .0
                .last_time_ms,
            2_000
        );
        store.before_write.lock().unwrap().push(Box::new(|r| {
            r.insert(4, (record(4, 1, 3_000), 30));
        }));
        heartbeat(&store, &who(1), 4, 2_500, None).await.unwrap();
        assert_eq!(
            store
                .read(&who(1), 4)
                .await
                .unwrap()
                .unwrap()
                .0
                .last_time_ms,
            3_000
        );
    }

    /// Terms of a 6 s expiry and a 3 s reach.
    fn terms() -> LeaseTerms {
        LeaseTerms::new(Duration::from_secs(6), Duration::from_secs(3))
    }

    #[tokio::test]
    async fn a_registration_again_is_seen_by_the_earlier_one_and_only_its_holder_closes() {
        let store = Memory::default();
        let space = IdSpace::new(4);
        let first = allocate(&store, &who(1), space, terms(), 21).await.unwrap();
        heartbeat(&store, &who(1), first.record.id, 1_000, Some(21))
            .await
            .unwrap();
        // A replacement with the same identity registers the ID again (the first one cut off):
        // it sees the previous registration open, with its window.
        let second = allocate(&store, &who(1), space, terms(), 22).await.unwrap();
        let previous = second.previous.unwrap();
        assert_eq!(
            (previous.holder, previous.closed, previous.reach_ms),
            (21, false, 3_000)
        );
        // The first one's next write learns it, and cannot mark the record closed.
        let e = heartbeat(&store, &who(1), first.record.id, 2_000, Some(21))
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
        mark_closed(&store, &who(1), first.record.id, 21)
            .await
            .unwrap();
        let (now, _) = store.read(&who(1), first.record.id).await.unwrap().unwrap();
        assert!(!now.closed);
        assert_eq!(now.holder, 22);
        // Its own holder closes it.
        mark_closed(&store, &who(1), first.record.id, 22)
            .await
            .unwrap();
        let (now, _) = store.read(&who(1), first.record.id).await.unwrap().unwrap();
        assert!(now.closed);
        assert_eq!(now.last_time_ms, 1_000);
    }

    #[tokio::test]
    async fn a_release_that_loses_its_compare_reads_again() {
        let store = Memory::default();
        store.put(record(0, 1, 1_000));
        // A heartbeat moved the record between the read and the delete: still released (it
        // used to answer false and leave the record).
        store.before_write.lock().unwrap().push(Box::new(|r| {
            r.insert(0, (record(0, 1, 2_000), 7));
        }));
        assert!(release(&store, &who(1)).await.unwrap());
        assert!(store.read(&who(1), 0).await.unwrap().is_none());
        // Taken over between the read and the delete: not ours to release any more.
        store.put(record(1, 1, 1_000));
        store.before_write.lock().unwrap().push(Box::new(|r| {
            r.insert(1, (record(1, 2, 1_000), 7));
        }));
        assert!(!release(&store, &who(1)).await.unwrap());
        assert_eq!(
            store.read(&who(1), 1).await.unwrap().unwrap().0.identity,
            who(2)
        );
    }

    #[tokio::test]
    async fn an_identity_with_two_records_is_refused_naming_both() {
        // Leaf's nodes can name one ip:port twice; Leaf then takes either. floe takes neither.
        let store = Memory::default();
        store.put(record(3, 1, 1_000));
        store.put(record(7, 1, 2_000));
        let e = allocate(&store, &who(1), IdSpace::new(16), terms(), 11)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
        assert!(
            e.message.contains("two worker IDs in memory, 3 and 7"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn allocation_skips_an_id_taken_meanwhile_and_fails_clearly_when_full() {
        let store = Memory::default();
        let space = IdSpace::new(4);
        store.put(record(0, 9, 0));
        // Another process creates ID 1 between our read and our create: we get 2.
        store.before_write.lock().unwrap().push(Box::new(|r| {
            r.insert(1, (record(1, 8, 0), 1));
        }));
        let a = allocate(&store, &who(1), space, terms(), 11).await.unwrap();
        assert_eq!((a.record.id, a.existing), (2, false));
        assert!(a.previous.is_none());
        let a = allocate(&store, &who(1), space, terms(), 12).await.unwrap();
        assert_eq!((a.record.id, a.existing), (2, true));
        allocate(&store, &who(2), space, terms(), 13).await.unwrap();
        let e = allocate(&store, &who(3), space, terms(), 14)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::SpaceFull);
        assert!(e.message.contains("all 4 IDs"), "{e}");
    }
}
