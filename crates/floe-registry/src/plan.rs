//! Planning and allocation helpers every backend shares: which ID a registration comes to,
//! and which IDs may be taken over.

use crate::identity::LEASE_RULE;
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
        if record.rule > LEASE_RULE {
            return Err(newer_rule(record, store));
        }
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

/// The error for a registration of an identity whose record a newer floe wrote.
fn newer_rule(record: &WorkerRecord, store: &str) -> RegistryError {
    RegistryError::config(format!(
        "{} holds worker ID {} in {store} under lease rule {}, which a newer floe wrote; this floe follows rule {LEASE_RULE} and would wait too short a time for that holder: upgrade this node (a fleet mid-upgrade), or release the record once its holder is gone for good (`floe worker release`)",
        record.identity, record.id, record.rule
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
/// the space, heartbeaten at least once, idle since `idle_before_ms`, someone else's, and
/// held under this floe's lease rule or an earlier one ([`LEASE_RULE`]).
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
                && r.rule <= LEASE_RULE
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

#[cfg(test)]
mod tests {
    use super::*;

    fn who(port: u16) -> Identity {
        Identity::new("orders", "h", port)
    }

    fn held(id: u32, port: u16, rule: u32) -> WorkerRecord {
        WorkerRecord {
            rule,
            last_time_ms: 1_000,
            ..WorkerRecord::new(id, who(port), 0)
        }
    }

    /// A record a newer floe wrote (a longer reach than this floe's takeover waits for) is
    /// neither taken back by its identity nor reclaimed by another; this floe's own rule and
    /// records from before rules were numbered are.
    #[test]
    fn a_record_of_a_newer_lease_rule_is_not_taken_over() {
        let space = IdSpace::new(4);
        for rule in [0, LEASE_RULE] {
            let records = [held(1, 1, rule)];
            assert!(matches!(
                plan(&records, &who(1), space, "zk"),
                Ok(Plan::Own(r)) if r.id == 1
            ));
            assert_eq!(idle_first(&records, |r| r, &who(2), space, 2_000).len(), 1);
        }
        let records = [held(1, 1, LEASE_RULE + 1), held(2, 3, LEASE_RULE)];
        let e = plan(&records, &who(1), space, "zk").err().unwrap();
        assert_eq!(e.kind, ErrorKind::Config);
        assert!(
            e.message
                .contains(&format!("lease rule {}", LEASE_RULE + 1))
                && e.message.contains("upgrade this node"),
            "{e}"
        );
        let idle = idle_first(&records, |r| r, &who(2), space, 2_000);
        assert_eq!(idle.iter().map(|r| r.id).collect::<Vec<_>>(), [2]);
        // Another identity still gets a free ID beside it: that takes nothing over.
        assert!(matches!(
            plan(&records, &who(2), space, "zk"),
            Ok(Plan::Free(free)) if free == [0, 3]
        ));
    }

    /// Records this floe writes say its rule; one without it (written before rules were
    /// numbered) reads as 0, and 0 is not written.
    #[test]
    fn the_rule_is_kept_in_the_record() {
        let json = serde_json::to_string(&held(1, 1, 0)).unwrap();
        assert!(!json.contains("rule"), "{json}");
        let back: WorkerRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back.rule, 0);
        let json = serde_json::to_string(&held(1, 1, 7)).unwrap();
        assert!(json.contains("\"rule\":7"), "{json}");
    }
}
