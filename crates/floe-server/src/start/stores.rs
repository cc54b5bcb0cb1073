//! The stores a server serves: opened as the plan names them, their WEAK tails given back, their
//! `bigger_than` floors applied.

use std::sync::Arc;

use floe_sequencer::guard::CHECK_EVERY;
use floe_sequencer::stores::snowflake::SnowflakeStore;
use floe_sequencer::{Ledger, SavedTails, SeqError, Sequencer, Store, StoreHandle, TailDir};

use super::mirror::Mirror;
use super::StartError;
use crate::config::{Note, Plan, StoreUrl};
use crate::ids::Generators;

/// The unused WEAK tails a graceful stop kept, read and removed before anything is served
/// (only by the process holding the state directory's tails lock).
pub(super) async fn tails(
    plan: &Plan,
    notes: &mut Vec<Note>,
) -> Result<(Option<TailDir>, SavedTails), StartError> {
    if !plan.config.sequencer.keep_tails {
        return Ok((None, SavedTails::new()));
    }
    let dir = plan.state_dir.clone();
    let (lock, saved) = tokio::task::spawn_blocking(move || -> Result<_, SeqError> {
        match TailDir::lock(&dir)? {
            Some(lock) => {
                let saved = lock.take()?;
                Ok((Some(lock), saved))
            }
            None => Ok((None, SavedTails::new())),
        }
    })
    .await
    .map_err(|e| format!("sequencer: tails: {e}"))?
    .map_err(|e| format!("sequencer: tails: {e}"))?;
    if lock.is_none() {
        notes.push(Note::Info(format!(
            "sequencer: another process holds {}'s tails lock: WEAK tails are neither used nor kept",
            plan.state_dir.display()
        )));
    }
    Ok((lock, saved))
}

/// Every store of `plan`, opened. A node of a fleet (worker IDs from ZooKeeper or etcd) with a
/// store of its own is warned: its sequences are not the fleet's.
pub(super) async fn open(
    plan: &Plan,
    generators: &Generators,
    saved: &mut SavedTails,
    notes: &mut Vec<Note>,
    described: &mut Vec<String>,
) -> Result<Sequencer, StartError> {
    let state_dir = plan.state_dir.as_path();
    let fleet = plan
        .config
        .registry
        .url
        .as_deref()
        .is_some_and(floe_registry::leases);
    // What this node remembers of its stores (crate floe-sequencer's guard): read before any
    // store is served, written once they are checked and whenever an epoch moves.
    let dir = plan.state_dir.clone();
    let mut ledger = if plan.stores.is_empty() {
        None
    } else {
        tokio::task::spawn_blocking(move || Ledger::open(&dir))
            .await
            .map_err(|e| format!("sequencer: ledger: {e}"))?
            .map_err(|e| StartError::store("sequencer: ledger", &e))?
    };
    match &ledger {
        None if plan.stores.is_empty() => {}
        None => notes.push(Note::Warning(format!(
            "sequencer: another process holds {}'s ledger: this one remembers nothing of its stores across restarts (a store that went back while it was stopped is not noticed)",
            plan.state_dir.display()
        ))),
        Some(l) => {
            if let Some(why) = &l.damaged {
                notes.push(Note::Warning(format!(
                    "sequencer: the ledger could not be read ({why}): written anew; stores that went back while this node was stopped are not noticed at this start"
                )));
            }
        }
    }
    let mirror = open_mirror(plan, notes).await;
    let mut mirrored = Vec::new();
    let mut sequencer = Sequencer::new();
    for (name, url) in &plan.stores {
        let key = format!("stores.{}", crate::echo(name, crate::MAX_ECHO));
        let (store, url): (Arc<dyn Store>, &str) = match url {
            StoreUrl::Snowflake => {
                // Checked: a snowflake store keeps "snowflake" in ids.kinds.
                let g = generators
                    .snowflake(None)
                    .map_err(|e| format!("{key}: {}", e.message))?;
                let store =
                    SnowflakeStore::new(Arc::clone(g)).map_err(|e| format!("{key}: {e}"))?;
                (Arc::new(store), "snowflake")
            }
            StoreUrl::Url(url) => (
                floe_sequencer::open(url, state_dir)
                    .await
                    .map_err(|e| StartError::store(&key, &e))?,
                url.as_str(),
            ),
        };
        let handle = StoreHandle::new(name.clone(), store, plan.serve)
            .key_limits(plan.key_limits)
            .map_err(|e| StartError::config(format!("sequencer.max_keys: {e}")))?
            .registered_only(plan.config.sequencer.registered_only.contains(name));
        let mut handle = handle;
        let identity = floe_sequencer::store_identity(url, state_dir);
        let fleet_saw = match &mirror {
            Some(m) if handle.guard().is_some() => match m.read(&identity).await {
                Ok(e) => e,
                Err(e) => {
                    notes.push(Note::Warning(format!(
                        "store {name}: the registry's record of its epoch could not be read ({e}): only this node's ledger is compared with the store at this start"
                    )));
                    None
                }
            },
            _ => None,
        };
        let check = handle
            .check_start(url, state_dir, ledger.as_mut(), fleet_saw, saved)
            .await
            .map_err(|e| StartError::store(&key, &e))?;
        if let (Some(m), Some(guard), Some(epoch)) = (&mirror, handle.guard(), check.epoch) {
            if check.went_back.is_none() {
                if let Err(e) = m.keep(&identity, epoch).await {
                    tracing::warn!(
                        "store {name}: its epoch could not be kept in the registry now: {e}"
                    );
                }
            }
            mirrored.push((identity.clone(), Arc::downgrade(guard), epoch));
        }
        if let Some(why) = check.went_back {
            notes.push(Note::Warning(why));
        }
        if let Some(why) = check.unguarded {
            notes.push(Note::Info(why));
        }
        if check.tails_stale > 0 {
            notes.push(Note::Warning(format!(
                "store {name}: {} WEAK IDs kept by a graceful stop were dropped (gaps): a floor was raised or a key unregistered on another node since ({} moved)",
                check.tails_stale,
                floe_sequencer::CHANGES_KEY
            )));
        }
        if check.tails_dropped > 0 {
            notes.push(Note::Warning(format!(
                "store {name}: {} WEAK IDs kept by a graceful stop were claimed by another copy of this state directory (a clone, or a restored backup): not served (gaps)",
                check.tails_dropped
            )));
        }
        let handle = handle.with_tails(url, state_dir, saved);
        if handle.tails_pending() > 0 {
            notes.push(Note::Info(format!(
                "store {name}: {} WEAK IDs kept by the last graceful stop are served first",
                handle.tails_pending()
            )));
        }
        if let Some(f) = plan.floors.get(name) {
            handle
                .init(f)
                .await
                .map_err(|e| StartError::store(&format!("bigger_than: store {name}"), &e))?;
        }
        described.push(format!("store {name}: {}", handle.store().kind()));
        if fleet && !handle.store().capabilities().shared {
            notes.push(Note::Warning(format!(
                "store {name} ({}) is this node's own, while its worker IDs come from a shared registry: other nodes count the same keys separately (the same IDs); use a shared store (postgres, mysql, redis, etcd, zk) for sequences across nodes",
                handle.store().kind()
            )));
        }
        sequencer.add(handle);
    }
    if let Some(ledger) = ledger {
        sequencer
            .keep_ledger(ledger)
            .await
            .map_err(|e| StartError::store("sequencer: ledger", &e))?;
    }
    sequencer.watch(CHECK_EVERY);
    if let Some(m) = mirror {
        m.watch(mirrored);
    }
    Ok(sequencer)
}

/// The registry the stores' epochs are mirrored in ([`super::mirror`]), when the node's
/// worker IDs come from ZooKeeper or etcd and a store is guarded.
async fn open_mirror(plan: &Plan, notes: &mut Vec<Note>) -> Option<Mirror> {
    let url = plan.config.registry.url.as_deref()?;
    let guarded = plan
        .stores
        .iter()
        .any(|(_, u)| matches!(u, StoreUrl::Url(u) if !u.starts_with("memory")));
    if !guarded {
        return None;
    }
    let config = &plan.config;
    let node = format!("{}:{}", config.identity_host(), config.identity_port());
    match Mirror::open(url, &config.registry.service, node).await {
        Ok(m) => m,
        Err(e) => {
            notes.push(Note::Warning(format!(
                "registry: the stores' epochs cannot be kept in it now ({e}): a store wiped while this node was stopped is noticed only through this node's ledger"
            )));
            None
        }
    }
}
