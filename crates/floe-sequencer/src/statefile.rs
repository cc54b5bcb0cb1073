//! The two things the sequencer's files in a state directory (the saved WEAK tails, the
//! ledger) do alike: a lock file held for the process's life, and an atomic write.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::Write as _;
use std::path::Path;

/// Takes an exclusive `flock` on `{dir}/{name}` (created if missing): `Ok(None)` when another
/// process (or another lock of this one) holds it. The lock lasts as long as the file.
///
/// # Errors
/// What failed (`"open"` or `"lock"`) and the I/O error.
pub fn lock(dir: &Path, name: &str) -> Result<Option<File>, (&'static str, std::io::Error)> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(name))
        .map_err(|e| ("open", e))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(("lock", e)),
    }
}

/// Writes `text` to `{dir}/{name}` atomically: `{dir}/{tmp}` written and fsync'd, renamed over
/// it, then the directory fsync'd. On an error the temporary file is removed.
pub(crate) fn write_atomically(
    dir: &Path,
    tmp: &str,
    name: &str,
    text: &str,
) -> std::io::Result<()> {
    let tmp = dir.join(tmp);
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join(name))?;
        File::open(dir)?.sync_all()
    };
    write().inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}
