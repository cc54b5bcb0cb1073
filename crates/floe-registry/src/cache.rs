//! The local cache (Leaf's "escape pod"): {ID, last time} of an identity in the state
//! directory, so that floe can start when its registry is unreachable.
//!
//! **Per registry:** an entry names the registry (and root) that granted its ID
//! ([`Registry::location`](crate::Registry::location)), and its file name carries a hash of
//! it: an ID granted by one registry is never offered as the cache of another (a file
//! registry's worker 0 is not ZooKeeper's to give).
//!
//! **Atomic writes:** every store writes a temporary file in the same directory, `fsync`s it,
//! renames it over the cache file and `fsync`s the directory, so a crash or `kill -9` leaves
//! either the old or the new content, never a torn file.
//!
//! Its methods block (file reads, `fsync`): async code runs them on tokio's blocking pool, as
//! [`lease`](crate::lease) does for every load and store.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind as IoKind, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{ErrorKind, Identity, RegistryError};

/// What the cache holds for an identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheEntry {
    /// The registry that granted the ID ([`Registry::location`](crate::Registry::location)).
    /// Entries written before floe recorded it have none, and are never used.
    #[serde(default)]
    pub registry: String,
    /// The identity it belongs to.
    pub identity: Identity,
    /// The worker ID.
    pub id: u32,
    /// The last time (Unix ms) the holder was alive.
    pub last_time_ms: u64,
    /// The lease the ID is held under, for a restart on this directory to continue
    /// ([`crate::continuation`]); none from a start without a lease, and in entries written
    /// before floe kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<crate::continuation::LeaseMark>,
}

/// The cache files of a state directory: `cache-{service}-{host}-{port}-{registry hash}.json`.
#[derive(Debug, Clone)]
pub struct LocalCache {
    dir: PathBuf,
}

pub(crate) fn io_error(what: &str, path: &Path, e: &std::io::Error) -> RegistryError {
    RegistryError::new(
        ErrorKind::Unavailable,
        format!("{what} {}: {e}", path.display()),
    )
}

/// Writes `bytes` to `path` atomically: temporary file, fsync, rename, fsync of the directory.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RegistryError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map_or_else(|| "state".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_error("cannot write", path, &e)
    })
}

impl LocalCache {
    /// The cache in `dir` (created if missing).
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
        Ok(LocalCache { dir })
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds `identity`'s entry from `registry` (a registry location).
    pub fn path(&self, identity: &Identity, registry: &str) -> PathBuf {
        let host: String = identity
            .host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        // FNV-1a 64 of the registry location: a short, stable file name per registry.
        let tag = registry.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        self.dir.join(format!(
            "cache-{}-{host}-{}-{tag:016x}.json",
            identity.service, identity.port
        ))
    }

    /// The entry of `identity` granted by `registry`, if there is one.
    ///
    /// # Errors
    /// [`ErrorKind::Corrupt`] if the file cannot be parsed or belongs to another identity or
    /// registry; [`ErrorKind::Unavailable`] if it cannot be read.
    pub fn load(
        &self,
        identity: &Identity,
        registry: &str,
    ) -> Result<Option<CacheEntry>, RegistryError> {
        let path = self.path(identity, registry);
        let text = match fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == IoKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("cannot read", &path, &e)),
        };
        let entry: CacheEntry = serde_json::from_slice(&text).map_err(|e| {
            RegistryError::new(
                ErrorKind::Corrupt,
                format!("cache file {} is not valid: {e}", path.display()),
            )
        })?;
        if entry.registry != registry {
            return Err(RegistryError::new(
                ErrorKind::Corrupt,
                format!(
                    "cache file {} was granted by registry {:?}, not {registry:?}",
                    path.display(),
                    entry.registry
                ),
            ));
        }
        if &entry.identity != identity {
            return Err(RegistryError::new(
                ErrorKind::Corrupt,
                format!(
                    "cache file {} belongs to {}, not {identity}",
                    path.display(),
                    entry.identity
                ),
            ));
        }
        Ok(Some(entry))
    }

    /// Takes the lock of `identity`'s entry from `registry` (an exclusive `flock` on the entry's
    /// file name with `.lock` added), held while the returned file is open: `None` when
    /// another process holds it (a second floe on this state directory with this identity).
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] if the lock file cannot be opened.
    pub fn lock(&self, identity: &Identity, registry: &str) -> Result<Option<File>, RegistryError> {
        let mut path = self.path(identity, registry).into_os_string();
        path.push(".lock");
        let path = PathBuf::from(path);
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_error("cannot open", &path, &e))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(io_error("cannot lock", &path, &e)),
        }
    }

    /// Removes `identity`'s entry from `registry` if it holds worker ID `id`: the ID is someone
    /// else's now, and a start from the cache (the registry unreachable) must not take it.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] if the file cannot be removed.
    pub fn forget(
        &self,
        identity: &Identity,
        registry: &str,
        id: u32,
    ) -> Result<(), RegistryError> {
        let path = self.path(identity, registry);
        match self.load(identity, registry) {
            Ok(Some(entry)) if entry.id == id => match fs::remove_file(&path) {
                Ok(()) => File::open(&self.dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| io_error("cannot sync", &self.dir, &e)),
                Err(e) if e.kind() == IoKind::NotFound => Ok(()),
                Err(e) => Err(io_error("cannot remove", &path, &e)),
            },
            // Another ID, none, or a file that is not ours to judge: left as it is.
            _ => Ok(()),
        }
    }

    /// Stores `entry` atomically. The last time never moves back: a store with an earlier
    /// time than the file's keeps the file's.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] if the file cannot be written.
    pub fn store(&self, entry: &CacheEntry) -> Result<(), RegistryError> {
        let mut entry = entry.clone();
        if let Ok(Some(old)) = self.load(&entry.identity, &entry.registry) {
            if old.id == entry.id {
                entry.last_time_ms = entry.last_time_ms.max(old.last_time_ms);
            }
        }
        let bytes = serde_json::to_vec_pretty(&entry).map_err(|e| {
            RegistryError::new(
                ErrorKind::Corrupt,
                format!("cannot encode cache entry: {e}"),
            )
        })?;
        write_atomic(&self.path(&entry.identity, &entry.registry), &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_load_and_never_move_back() {
        let dir = tempfile::tempdir().unwrap();
        let cache = LocalCache::new(dir.path().join("state")).unwrap();
        let who = Identity::new("orders", "10.0.0.1", 8080);
        let zk = "zk://127.0.0.1:2181/floe";
        assert_eq!(cache.load(&who, zk).unwrap(), None);
        // Nothing to forget is no error.
        cache.forget(&who, zk, 3).unwrap();
        let e = CacheEntry {
            registry: zk.into(),
            identity: who.clone(),
            id: 7,
            last_time_ms: 1000,
            lease: None,
        };
        cache.store(&e).unwrap();
        assert_eq!(cache.load(&who, zk).unwrap(), Some(e.clone()));
        // Another registry (or another root) never sees it.
        assert_eq!(cache.load(&who, "file:///var/lib/floe").unwrap(), None);
        assert_eq!(cache.load(&who, "zk://127.0.0.1:2181/other").unwrap(), None);
        cache
            .store(&CacheEntry {
                last_time_ms: 900,
                ..e.clone()
            })
            .unwrap();
        assert_eq!(cache.load(&who, zk).unwrap().unwrap().last_time_ms, 1000);
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path().join("state"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        // Forgotten only for the ID it holds.
        cache.forget(&who, zk, 8).unwrap();
        assert!(cache.load(&who, zk).unwrap().is_some());
        cache.forget(&who, zk, 7).unwrap();
        assert_eq!(cache.load(&who, zk).unwrap(), None);
    }

    #[test]
    fn corrupt_or_foreign_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let cache = LocalCache::new(dir.path()).unwrap();
        let who = Identity::new("orders", "h", 1);
        let r = "static:1";
        fs::write(cache.path(&who, r), b"{not json").unwrap();
        assert_eq!(cache.load(&who, r).unwrap_err().kind, ErrorKind::Corrupt);
        let other = CacheEntry {
            registry: r.into(),
            identity: Identity::new("orders", "h", 2),
            id: 1,
            last_time_ms: 1,
            lease: None,
        };
        fs::write(cache.path(&who, r), serde_json::to_vec(&other).unwrap()).unwrap();
        let e = cache.load(&who, r).unwrap_err();
        assert!(e.message.contains("belongs to"), "{e}");
        // An entry from before the registry was recorded is never used.
        let old =
            r#"{"identity":{"service":"orders","host":"h","port":1},"id":0,"last_time_ms":5}"#;
        fs::write(cache.path(&who, r), old).unwrap();
        assert_eq!(cache.load(&who, r).unwrap_err().kind, ErrorKind::Corrupt);
    }
}
