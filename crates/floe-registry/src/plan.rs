//! Planning and allocation helpers every backend shares: which ID a registration comes to,
//! and which IDs may be taken over.

use crate::{ErrorKind, IdSpace, Identity, RegistryError, WorkerRecord};

/// What registering `identity` comes to, given the records of its service: its own ID again,
/// or one of the free IDs (lowest first; a registry takes the first it can claim atomically).
pub(crate) enum Plan {
    Own(WorkerRecord),
    Free(Vec<u32>),
}

/// Plans a registration. `store` names where the records live, for messages.
///
/// # Errors
/// [`ErrorKind::Config`](crate::ErrorKind::Config) when the identity's own ID is outside `space` (a smaller layout than
/// it was registered with); [`ErrorKind::Corrupt`](crate::ErrorKind::Corrupt) when the
/// identity has two records (Leaf's nodes can: two for one ip:port, of which Leaf takes
/// either); [`ErrorKind::SpaceFull`](crate::ErrorKind::SpaceFull) when no ID is free.
pub(crate) fn plan<'a>(
    records: impl IntoIterator<Item = &'a WorkerRecord>,
    identity: &Identity,
    space: IdSpace,
    store: &str,
) -> Result<Plan, RegistryError> {
    let mut used = std::collections::HashSet::new();
    let mut own: Option<&WorkerRecord> = None;
    let ours = space.layout_text();
    for record in records {
        if let (Some(ours), Some(theirs)) = (&ours, &record.layout) {
            if ours != theirs {
                return Err(other_layout(identity, record, ours, theirs, store));
            }
        }
        if &record.identity == identity {
            if let Some(first) = own {
                return Err(RegistryError::new(
                    ErrorKind::Corrupt,
                    format!(
                        "{identity} has two worker IDs in {store}, {} and {}: which one its previous runs used is unknown; delete the record of the one not in use",
                        first.id.min(record.id),
                        first.id.max(record.id)
                    ),
                ));
            }
            own = Some(record);
        }
        used.insert(record.id);
    }
    if let Some(record) = own {
        if record.id >= space.size {
            return Err(RegistryError::config(format!(
                "{identity} holds worker ID {} in {store}, outside this layout's {} IDs: release it first",
                record.id, space.size
            )));
        }
        return Ok(Plan::Own(record.clone()));
    }
    let free: Vec<u32> = (0..space.size).filter(|id| !used.contains(id)).collect();
    if free.is_empty() {
        return Err(space_full(identity, space, store));
    }
    Ok(Plan::Free(free))
}

/// The error for a registration whose layout (`ours`) differs from the one `record` was
/// written with (`theirs`).
fn other_layout(
    identity: &Identity,
    record: &WorkerRecord,
    ours: &str,
    theirs: &str,
    store: &str,
) -> RegistryError {
    RegistryError::config(format!(
        "layout: service {:?} in {store} issues {theirs} (worker ID {} held by {}), this node {ours}: two layouts on one service issue the same IDs (a worker's bits of one are another worker's bits of the other). Keep the service's layout, or give the new layout its own service (--service) starting above the old IDs (--snowflake-above), and release the old records with `floe worker release` once their nodes are gone for good",
        identity.service, record.id, record.identity
    ))
}

/// The error for a space with no free ID.
pub(crate) fn space_full(identity: &Identity, space: IdSpace, store: &str) -> RegistryError {
    RegistryError::new(
        ErrorKind::SpaceFull,
        format!(
            "no free worker ID for {identity}: all {} IDs of service {:?} are allocated in {store} (see `floe worker list`)",
            space.size, identity.service
        ),
    )
}

/// The records `identity` may take over (see [`Registry::reclaim`](crate::Registry::reclaim)), longest idle first: in
/// the space, heartbeaten at least once, idle since `idle_before_ms`, and someone else's.
/// Whether each holder is still alive is the registry's own check. `record` finds the record in
/// an item (registries keep a version beside it).
pub(crate) fn idle_first<T>(
    items: impl IntoIterator<Item = T>,
    record: impl Fn(&T) -> &WorkerRecord,
    identity: &Identity,
    space: IdSpace,
    idle_before_ms: u64,
) -> Vec<T> {
    let mut idle: Vec<T> = items
        .into_iter()
        .filter(|item| {
            let r = record(item);
            r.id < space.size
                && r.last_time_ms > 0
                && r.last_time_ms <= idle_before_ms
                && &r.identity != identity
        })
        .collect();
    idle.sort_by_key(|item| record(item).last_time_ms);
    idle
}

/// The error of a release refused because a live process holds the identity (`holder`: what
/// says so).
pub(crate) fn released_while_held(identity: &Identity, holder: &str) -> RegistryError {
    RegistryError::new(
        ErrorKind::Conflict,
        format!(
            "{identity} is held by a live process ({holder} exists): a released ID could be given to another identity while it still issues; stop that process first (or wait for its claim to lapse)"
        ),
    )
}
