//! A lease continued by a restart on the same state directory, boot and machine.
//!
//! A holder records, with every heartbeat it writes to the local cache, a **mark**: the
//! registration number its record carries ([`WorkerRecord::holder`](crate::WorkerRecord::holder),
//! the lease token), the kernel's boot ID, the state directory's device and inode, and the
//! moment on `CLOCK_BOOTTIME` at which the window of its last confirmation ends.
//!
//! A process started on that directory continues the lease at once, with no takeover wait and
//! without asking the registry, when every one of these holds:
//! - it holds the identity's lock in the directory ([`crate::cache::LocalCache::lock`]), so the
//!   process that wrote the mark on this machine is gone;
//! - the boot ID is this boot's and the directory the same inode on the same device, so the
//!   mark was written on this machine since it booted, in this very directory (a copy made
//!   with `cp` or restored from a backup is another inode);
//! - `CLOCK_BOOTTIME` (which counts a suspend, and goes on across process restarts) has not
//!   reached the mark's end.
//!
//! It then issues until that end, as its predecessor would have, and holds the claim again in
//! the background: the registry's record must still carry the same registration number, or
//! the ID is lost (someone registered it meanwhile, which takes a takeover wait longer than the
//! window). A machine rebooted, another machine, or no mark: the start asks the registry; a
//! mark written in this very directory whose number the record still carries
//! ([`LeaseMark::written_in`], [`Registration::previous_token`](crate::Registration::previous_token))
//! then takes the ID back with no takeover wait.
//!
//! **Limit.** A copy of the whole machine or volume made while the holder ran (a VM snapshot
//! cloned, a block-level volume clone on the same boot) carries the same boot ID, inode and
//! mark, and would continue the same lease beside the original. floe cannot tell such a copy
//! from the original; docs/reliability.md says so.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a holder records of its lease in the local cache ([`crate::cache::CacheEntry::lease`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseMark {
    /// The registration number its record carries.
    pub holder: u64,
    /// The kernel's boot ID when it was written.
    pub boot_id: String,
    /// The state directory's `device:inode`.
    pub dir: String,
    /// `CLOCK_BOOTTIME` nanoseconds at which the window of the last confirmation ends.
    pub until_boot_ns: u64,
}

/// This boot's ID (`/proc/sys/kernel/random/boot_id`), if the kernel gives one.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `CLOCK_BOOTTIME` now, in nanoseconds.
pub fn boot_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
}

/// `device:inode` of directory `dir`.
pub fn dir_id(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).ok()?;
    Some(format!("{}:{}", m.dev(), m.ino()))
}

impl LeaseMark {
    /// The mark of a lease held by registration `holder` whose window ends `remaining` from
    /// now, in state directory `dir`; `None` where the kernel gives no boot ID.
    pub fn now(holder: u64, remaining: Duration, dir: &Path) -> Option<LeaseMark> {
        Some(LeaseMark {
            holder,
            boot_id: boot_id()?,
            dir: dir_id(dir)?,
            until_boot_ns: boot_nanos()
                .saturating_add(u64::try_from(remaining.as_nanos()).unwrap_or(u64::MAX)),
        })
    }

    /// Whether the mark was written in `dir` itself (the same inode on the same device; a
    /// copy or a restored backup is another), whatever the boot: after a reboot, the process
    /// that wrote it is gone, and a registry that still carries its number
    /// ([`Registration::previous_token`](crate::Registration::previous_token)) gave the ID
    /// to nobody since.
    pub fn written_in(&self, dir: &Path) -> bool {
        dir_id(dir).as_deref() == Some(self.dir.as_str())
    }

    /// How long a process started now on `dir` may go on issuing under this mark, or why it
    /// may not continue it (for the start's notes).
    pub fn remaining(&self, dir: &Path) -> Result<Duration, &'static str> {
        if boot_id().as_deref() != Some(self.boot_id.as_str()) {
            return Err("written before this machine's last boot, or on another machine");
        }
        if dir_id(dir).as_deref() != Some(self.dir.as_str()) {
            return Err("written in another directory (a copy, or a restored backup)");
        }
        match self.until_boot_ns.checked_sub(boot_nanos()) {
            Some(left) if left > 0 => Ok(Duration::from_nanos(left)),
            _ => Err("its window has ended"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_continues_only_here_and_in_time() {
        let dir = tempfile::tempdir().unwrap();
        let Some(mark) = LeaseMark::now(7, Duration::from_secs(60), dir.path()) else {
            return; // no boot ID on this kernel
        };
        let left = mark.remaining(dir.path()).unwrap();
        assert!(left <= Duration::from_secs(60) && left > Duration::from_secs(59));
        // Another directory (a copy).
        let copy = tempfile::tempdir().unwrap();
        assert!(mark
            .remaining(copy.path())
            .unwrap_err()
            .contains("another directory"));
        // Another boot.
        let other_boot = LeaseMark {
            boot_id: "00000000-0000-0000-0000-000000000000".into(),
            ..mark.clone()
        };
        assert!(other_boot
            .remaining(dir.path())
            .unwrap_err()
            .contains("boot"));
        // Its window over.
        let over = LeaseMark {
            until_boot_ns: boot_nanos().saturating_sub(1),
            ..mark
        };
        assert!(over.remaining(dir.path()).unwrap_err().contains("ended"));
    }
}
