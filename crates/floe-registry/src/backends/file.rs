//! The `file` registry, floe's embedded default: IDs and last times in the state directory,
//! no server.
//!
//! - `registry.json` maps each identity to its ID and last time. Every change happens under
//!   an exclusive OS lock of `registry.lock` and is written atomically, so processes on one
//!   host that register at once get distinct IDs.
//! - While a process holds an ID it keeps an exclusive OS lock on `held-{service}-{id}.lock`;
//!   a second process registering the same identity gets [`ErrorKind::Conflict`] instead of
//!   the same ID. The OS drops the lock when the process dies, even by `kill -9`.
//!
//! It coordinates the processes of one host only: use ZooKeeper or etcd for a fleet.
//!
//! The locks, reads and `fsync`ed writes block: every [`Registry`] call runs them on tokio's
//! blocking pool, never on the async executor.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::blocking::off_executor;
use crate::cache::{io_error, write_atomic};
use crate::plan::{idle_first, plan, Plan};
use crate::{
    ErrorKind, Hold, IdSpace, Identity, Registration, Registry, RegistryError, WorkerRecord,
};

/// The file registry of a state directory.
#[derive(Debug, Clone)]
pub struct FileRegistry {
    dir: PathBuf,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Table {
    /// Per service, the records by ID.
    services: BTreeMap<String, BTreeMap<u32, WorkerRecord>>,
}

impl FileRegistry {
    /// The registry in `dir` (created if missing).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] if the directory cannot be created.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, RegistryError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|e| {
            RegistryError::new(
                crate::ErrorKind::Io,
                format!("state_dir: cannot create {}: {e}", dir.display()),
            )
        })?;
        Ok(FileRegistry { dir })
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn table_path(&self) -> PathBuf {
        self.dir.join("registry.json")
    }

    fn hold_path(&self, service: &str, id: u32) -> PathBuf {
        self.dir.join(format!("held-{service}-{id}.lock"))
    }

    /// Runs `f` on the table under the registry's exclusive lock, writing it back if `f`
    /// changed it.
    fn with_table<T>(
        &self,
        f: impl FnOnce(&mut Table) -> Result<(T, bool), RegistryError>,
    ) -> Result<T, RegistryError> {
        let lock_path = self.dir.join("registry.lock");
        let lock = open_lock(&lock_path)?;
        lock.lock()
            .map_err(|e| io_error("cannot lock", &lock_path, &e))?;
        let path = self.table_path();
        let mut table = match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                RegistryError::new(
                    ErrorKind::Corrupt,
                    format!("registry file {} is not valid: {e}", path.display()),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Table::default(),
            Err(e) => return Err(io_error("cannot read", &path, &e)),
        };
        let (out, changed) = f(&mut table)?;
        if changed {
            let bytes = serde_json::to_vec_pretty(&table).map_err(|e| {
                RegistryError::new(ErrorKind::Corrupt, format!("cannot encode registry: {e}"))
            })?;
            write_atomic(&path, &bytes)?;
        }
        // The lock is released when `lock` is dropped.
        Ok(out)
    }

    fn register_blocking(
        &self,
        identity: &Identity,
        space: IdSpace,
    ) -> Result<Registration, RegistryError> {
        identity.validate()?;
        self.with_table(|table| {
            let records = table.services.entry(identity.service.clone()).or_default();
            let store = self.table_path().display().to_string();
            let (record, existing, changed) = match plan(records.values(), identity, space, &store)?
            {
                // A record written before floe kept the layout gets it now.
                Plan::Own(record) if record.layout.is_none() && space.layout.is_some() => {
                    let record = WorkerRecord {
                        layout: space.layout_text(),
                        ..record
                    };
                    records.insert(record.id, record.clone());
                    (record, true, true)
                }
                Plan::Own(record) => (record, true, false),
                Plan::Free(free) => {
                    let record = WorkerRecord {
                        layout: space.layout_text(),
                        ..WorkerRecord::new(free[0], identity.clone(), 0)
                    };
                    records.insert(record.id, record.clone());
                    (record, false, true)
                }
            };
            let hold = self.hold(&identity.service, record.id, identity)?;
            Ok((
                Registration::new(record, existing, Some(Hold::new(hold))),
                changed,
            ))
        })
    }

    fn heartbeat_blocking(
        &self,
        identity: &Identity,
        id: u32,
        last_time_ms: u64,
    ) -> Result<(), RegistryError> {
        self.with_table(|table| {
            let record = table
                .services
                .get_mut(&identity.service)
                .and_then(|r| r.get_mut(&id))
                .filter(|r| &r.identity == identity)
                .ok_or_else(|| {
                    RegistryError::new(
                        ErrorKind::Conflict,
                        format!("worker ID {id} is no longer {identity}'s"),
                    )
                })?;
            let changed = last_time_ms > record.last_time_ms;
            record.last_time_ms = record.last_time_ms.max(last_time_ms);
            Ok(((), changed))
        })
    }

    fn release_blocking(&self, identity: &Identity) -> Result<bool, RegistryError> {
        self.with_table(|table| {
            let Some(records) = table.services.get_mut(&identity.service) else {
                return Ok((false, false));
            };
            // Never under a live holder: another identity could be given the ID while it
            // issues. The holder's lock, taken and let go at once, says whether one runs.
            if let Some(r) = records.values().find(|r| &r.identity == identity) {
                self.hold(&identity.service, r.id, identity).map_err(|e| {
                    if e.kind == ErrorKind::Conflict {
                        crate::plan::released_while_held(
                            identity,
                            &self
                                .hold_path(&identity.service, r.id)
                                .display()
                                .to_string(),
                        )
                    } else {
                        e
                    }
                })?;
            }
            let before = records.len();
            records.retain(|_, r| &r.identity != identity);
            let removed = records.len() != before;
            Ok((removed, removed))
        })
    }

    fn reclaim_blocking(
        &self,
        identity: &Identity,
        space: IdSpace,
        idle_before_ms: u64,
    ) -> Result<Option<Registration>, RegistryError> {
        identity.validate()?;
        self.with_table(|table| {
            let records = table.services.entry(identity.service.clone()).or_default();
            let idle = idle_first(
                records.values().cloned(),
                |r| r,
                identity,
                space,
                idle_before_ms,
            );
            for previous in idle {
                // A live process still holds it: not idle after all.
                let Ok(hold) = self.hold(&identity.service, previous.id, &previous.identity) else {
                    continue;
                };
                // The OS lock is the claim: no window to wait out (the holder is gone).
                let record = previous.clone().taken_over_by(identity, space, None, 0);
                records.insert(record.id, record.clone());
                let mut registration = Registration::new(record, false, Some(Hold::new(hold)));
                // Its holder is gone (the lock was free), but its last IDs may share this very
                // time unit: the new holder starts after the moment it took the ID.
                registration.previous_open = true;
                registration.previous_holder = Some(previous.identity);
                return Ok((Some(registration), true));
            }
            Ok((None, false))
        })
    }

    fn list_blocking(&self, service: &str) -> Result<Vec<WorkerRecord>, RegistryError> {
        self.with_table(|table| {
            let records = table
                .services
                .get(service)
                .map(|r| r.values().cloned().collect())
                .unwrap_or_default();
            Ok((records, false))
        })
    }

    fn hold(&self, service: &str, id: u32, identity: &Identity) -> Result<File, RegistryError> {
        let path = self.hold_path(service, id);
        let file = open_lock(&path)?;
        match file.try_lock() {
            Ok(()) => Ok(file),
            Err(TryLockError::WouldBlock) => Err(RegistryError::new(
                ErrorKind::Conflict,
                format!(
                    "worker ID {id} of {identity} is held by another live process on this host ({})",
                    path.display()
                ),
            )),
            Err(TryLockError::Error(e)) => Err(io_error("cannot lock", &path, &e)),
        }
    }
}

fn open_lock(path: &Path) -> Result<File, RegistryError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| io_error("cannot open", path, &e))
}

#[async_trait]
impl Registry for FileRegistry {
    fn name(&self) -> &'static str {
        "file"
    }

    fn location(&self) -> String {
        format!("file://{}", self.dir.display())
    }

    async fn register(
        &self,
        identity: &Identity,
        space: IdSpace,
    ) -> Result<Registration, RegistryError> {
        let (this, identity) = (self.clone(), identity.clone());
        off_executor("file registry: register", move || {
            this.register_blocking(&identity, space)
        })
        .await
    }

    async fn heartbeat(
        &self,
        identity: &Identity,
        id: u32,
        last_time_ms: u64,
    ) -> Result<(), RegistryError> {
        let (this, identity) = (self.clone(), identity.clone());
        off_executor("file registry: heartbeat", move || {
            this.heartbeat_blocking(&identity, id, last_time_ms)
        })
        .await
    }

    async fn release(&self, identity: &Identity) -> Result<bool, RegistryError> {
        let (this, identity) = (self.clone(), identity.clone());
        off_executor("file registry: release", move || {
            this.release_blocking(&identity)
        })
        .await
    }

    async fn reclaim(
        &self,
        identity: &Identity,
        space: IdSpace,
        idle_before_ms: u64,
    ) -> Result<Option<Registration>, RegistryError> {
        let (this, identity) = (self.clone(), identity.clone());
        off_executor("file registry: reclaim", move || {
            this.reclaim_blocking(&identity, space, idle_before_ms)
        })
        .await
    }

    async fn list(&self, service: &str) -> Result<Vec<WorkerRecord>, RegistryError> {
        let (this, service) = (self.clone(), service.to_string());
        off_executor("file registry: list", move || this.list_blocking(&service)).await
    }
}
