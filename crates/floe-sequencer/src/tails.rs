//! Restart without waste (Leaf issue #15): the unused tails of WEAK segments, kept across a
//! graceful restart.
//!
//! A WEAK key holds the rest of its current segment and maybe a fetched next one. Without this,
//! a restart skips them: gaps of up to two segments per key. With it:
//!
//! 1. **At start** the server locks its state directory for tails ([`TailDir::lock`]: an
//!    exclusive `flock` on `{dir}/sequencer-tails.lock`, held for the process's life), then
//!    [`TailDir::take`] reads the saved tails **and removes the file** (and fsyncs the
//!    directory) before any ID is served: whatever happens after, a crash included, those tails
//!    are never found again.
//! 2. Each store that may use them gets its own with [`StoreHandle::with_tails`] (by its name
//!    *and* its identity, [`store_identity`]: the URL it was opened from without a password, or
//!    the absolute path of an embedded store's file; a tail saved for `postgres://a/db` is
//!    never served from a store of the same name that now points elsewhere). A key's tail is served first, when the key is first asked for, then the key
//!    goes on with fresh segments as usual. A tail at or below the key's `bigger_than`
//!    ([`StoreHandle::init`]) is cut above it, or dropped.
//! 3. **At a graceful stop** [`Sequencer::close_keeping`] empties every key's buffer (so no ID
//!    of it is served afterwards), writes the tails atomically (temporary file, fsync, rename,
//!    fsync of the directory) while the lock is still held, and closes the stores.
//!
//! **What is never reused.** After `kill -9` (or any stop without `close_keeping`) the file is
//! not there: the tails are gaps, as before. So are the tails of a fetch still under way at the
//! stop, of keys parked beyond [`KeyLimits`](crate::KeyLimits)' `max_keys` (given back to the
//! store when it takes them; the tails of keys dropped from memory within it are kept),
//! threads' blocks of [`WeakKey::next_local`](crate::weak::WeakKey::next_local), and of stores
//! that are not durable (`memory`: its counters start again at 0 after a restart) or have no
//! segments (the Snowflake store).
//!
//! **A second process on the same directory** does not get the lock: [`TailDir::lock`] answers
//! `None`, and that process serves without tails (it neither reads nor writes the file), as if
//! the feature were off. The file stays for the process that holds the lock.
//!
//! The file is read only by a process that holds the lock, and it holds only IDs the store
//! reserved for the process that wrote it and that it never served. **A copy of the directory**
//! (a cloned VM, a volume snapshot restored, `cp -a`) would hold them too: so each store's tails
//! are saved with a claim on the node's own key in the store, and the next start serves them
//! only if it is the first to take that claim up ([`crate::guard`]); a copy or an older
//! directory drops them (gaps). A store wiped or restored from a backup is refused by its epoch
//! ([`crate::guard`]). A file of version 1 (before claims: the first start after the upgrade)
//! is served unclaimed.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::ErrorKind as IoKind;
use std::path::{Path, PathBuf};

use floe_core::sequence::{Key, Segment};

use crate::{ErrorKind, SeqError};

#[allow(unused_imports)] // doc links
use crate::{Sequencer, StoreHandle};

const LOCK: &str = "sequencer-tails.lock";
const FILE: &str = "sequencer-tails";
const TMP: &str = "sequencer-tails.tmp";
const HEADER: &str = "floe-sequencer-tails 2";
/// The header before claims ([`crate::guard`]): read (its tails served unclaimed, the first
/// start after the upgrade), never written.
const HEADER_V1: &str = "floe-sequencer-tails 1";

/// A state directory locked for tails by this process (see the module docs).
#[derive(Debug)]
pub struct TailDir {
    dir: PathBuf,
    /// The `flock`, held while this lives.
    _lock: File,
}

/// Tails read at start, by store name and identity, then by key; and how many saved lines could
/// not be read (dropped: gaps).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SavedTails {
    stores: BTreeMap<(String, String), BTreeMap<Key, Vec<Segment>>>,
    /// Per store: the value its node key held when the tails were saved ([`crate::guard`]).
    claims: BTreeMap<(String, String), i64>,
    /// Per store, its `floe.changes` when the tails were saved ([`crate::changes`]): a floor
    /// raised or a key unregistered since, on any node, drops them at the next start.
    changes: BTreeMap<(String, String), i64>,
    skipped: usize,
}

impl SavedTails {
    /// Nothing saved.
    pub fn new() -> SavedTails {
        SavedTails::default()
    }

    /// How many IDs they hold.
    pub fn ids(&self) -> u64 {
        self.stores
            .values()
            .flat_map(|keys| keys.values().flatten())
            .map(|s| ids_in(*s))
            .fold(0, u64::saturating_add)
    }

    /// How many saved lines could not be read (their IDs are gaps).
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// Adds a key's tail for a store.
    pub fn add(&mut self, store: &str, identity: &str, key: Key, tail: Vec<Segment>) {
        let tail: Vec<Segment> = tail.into_iter().filter(|s| s.start <= s.end).collect();
        if tail.is_empty() {
            return;
        }
        self.stores
            .entry((store.to_string(), identity.to_string()))
            .or_default()
            .entry(key)
            .or_default()
            .extend(tail);
    }

    /// The claim the tails of a store were saved with, if any ([`crate::guard`]).
    pub fn claim(&self, name: &str, identity: &str) -> Option<i64> {
        self.claims
            .get(&(name.to_string(), identity.to_string()))
            .copied()
    }

    /// The store's `floe.changes` when its tails were saved, if it was read.
    pub fn changes(&self, name: &str, identity: &str) -> Option<i64> {
        self.changes
            .get(&(name.to_string(), identity.to_string()))
            .copied()
    }

    /// Sets the store's `floe.changes` as its tails are saved.
    pub fn set_changes(&mut self, name: &str, identity: &str, changes: i64) {
        self.changes
            .insert((name.to_string(), identity.to_string()), changes);
    }

    /// Sets the claim of a store's tails.
    pub fn set_claim(&mut self, name: &str, identity: &str, claim: i64) {
        self.claims
            .insert((name.to_string(), identity.to_string()), claim);
    }

    /// Whether tails are kept for a store.
    pub fn holds(&self, name: &str, identity: &str) -> bool {
        self.stores
            .contains_key(&(name.to_string(), identity.to_string()))
    }

    /// Drops the tails of a store (their IDs are gaps); how many IDs they held.
    pub fn drop_store(&mut self, name: &str, identity: &str) -> u64 {
        let k = (name.to_string(), identity.to_string());
        self.claims.remove(&k);
        self.changes.remove(&k);
        self.stores.remove(&k).map_or(0, |keys| {
            keys.values()
                .flatten()
                .map(|s| ids_in(*s))
                .fold(0, u64::saturating_add)
        })
    }

    /// Takes out the tails of store `name` with identity `identity` (already redacted).
    pub(crate) fn take_store(&mut self, name: &str, identity: &str) -> HashMap<Key, Vec<Segment>> {
        self.claims
            .remove(&(name.to_string(), identity.to_string()));
        self.changes
            .remove(&(name.to_string(), identity.to_string()));
        self.stores
            .remove(&(name.to_string(), identity.to_string()))
            .map(|keys| keys.into_iter().collect())
            .unwrap_or_default()
    }

    fn encode(&self) -> String {
        let mut out = format!("{HEADER}\n");
        let mut lines = 0usize;
        for ((store, identity), claim) in &self.claims {
            if self.stores.contains_key(&(store.clone(), identity.clone())) {
                let _ = writeln!(out, "c {} {} {claim}", hex(store), hex(identity));
                lines += 1;
            }
        }
        for ((store, identity), changes) in &self.changes {
            if self.stores.contains_key(&(store.clone(), identity.clone())) {
                let _ = writeln!(out, "g {} {} {changes}", hex(store), hex(identity));
                lines += 1;
            }
        }
        for ((store, identity), keys) in &self.stores {
            for (key, tail) in keys {
                for s in tail {
                    let _ = writeln!(
                        out,
                        "t {} {} {} {} {}",
                        hex(store),
                        hex(identity),
                        hex(key.as_str()),
                        s.start,
                        s.end
                    );
                    lines += 1;
                }
            }
        }
        let _ = writeln!(out, "end {lines}");
        out
    }

    /// Reads a file's text. A file that is not whole (no header, no matching `end` line) is
    /// dropped entirely; a line that cannot be read is dropped alone.
    fn decode(text: &str) -> SavedTails {
        let mut tails = SavedTails::new();
        let lines: Vec<&str> = text.lines().collect();
        let whole = (lines.first() == Some(&HEADER) || lines.first() == Some(&HEADER_V1))
            && lines.last().and_then(|l| l.strip_prefix("end "))
                == Some(&(lines.len() - 2).to_string());
        if !whole {
            tails.skipped = lines.len().max(1);
            return tails;
        }
        for line in &lines[1..lines.len() - 1] {
            if let Some((store, identity, claim)) = parse_claim(line, "c") {
                tails.claims.insert((store, identity), claim);
                continue;
            }
            if let Some((store, identity, changes)) = parse_claim(line, "g") {
                tails.changes.insert((store, identity), changes);
                continue;
            }
            match parse_line(line) {
                Some((store, identity, key, segment)) => {
                    tails.add(&store, &identity, key, vec![segment]);
                }
                None => tails.skipped += 1,
            }
        }
        tails
    }
}

/// How many IDs `s` holds (`start <= end`), exactly for any two `i64`s (saturating at
/// `u64::MAX`, which only `i64::MIN ..= i64::MAX` reaches).
pub(crate) fn ids_in(s: Segment) -> u64 {
    u64::try_from(i128::from(s.end) - i128::from(s.start) + 1).unwrap_or(u64::MAX)
}

/// A line `{tag} STORE IDENTITY N` (a claim `c`, a store's `floe.changes` `g`).
fn parse_claim(line: &str, tag: &str) -> Option<(String, String, i64)> {
    let mut f = line.split(' ');
    if f.next()? != tag {
        return None;
    }
    let store = unhex(f.next()?)?;
    let identity = unhex(f.next()?)?;
    let claim: i64 = f.next()?.parse().ok()?;
    f.next().is_none().then_some((store, identity, claim))
}

fn parse_line(line: &str) -> Option<(String, String, Key, Segment)> {
    let mut f = line.split(' ');
    if f.next()? != "t" {
        return None;
    }
    let store = unhex(f.next()?)?;
    let identity = unhex(f.next()?)?;
    let key = Key::new(unhex(f.next()?)?).ok()?;
    let start: i64 = f.next()?.parse().ok()?;
    let end: i64 = f.next()?.parse().ok()?;
    if f.next().is_some() || start > end {
        return None;
    }
    Some((store, identity, key, Segment { start, end }))
}

pub(crate) fn hex(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for b in s.bytes() {
        let _ = write!(out, "{b:02x}");
    }
    out
}

pub(crate) fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// A store's identity for its tails: its URL without a password (`scheme://user:pass@host`
/// becomes `scheme://user@host`), so none is written to the state directory; for `embedded`,
/// its file's absolute path (`state_dir` is the one the store was opened with, as for
/// [`open`](crate::open)).
pub fn store_identity(url: &str, state_dir: &Path) -> String {
    if let Some(("embedded", rest)) = url.split_once(':').or(Some((url, ""))) {
        let path = crate::embedded_path(rest, state_dir);
        let path = std::path::absolute(&path).unwrap_or(path);
        return format!("embedded:{}", path.display());
    }
    floe_core::endpoint::replace_password(url, None)
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> SeqError {
    SeqError::new(
        ErrorKind::Unavailable,
        format!("tails: cannot {what} {}: {e}", path.display()),
    )
}

fn sync_dir(dir: &Path) -> Result<(), SeqError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("fsync", dir, e))
}

impl TailDir {
    /// Locks `dir` for tails: `Some` when this process now holds `{dir}/sequencer-tails.lock`
    /// (until the `TailDir` is dropped), `None` when another process (or another `TailDir` of
    /// this one) holds it: then serve without tails. Blocking file I/O: call it at start-up or
    /// off the async executor.
    ///
    /// # Errors
    /// `Config` naming the path when the lock file cannot be opened or locked.
    pub fn lock(dir: &Path) -> Result<Option<TailDir>, SeqError> {
        // A server that leases nothing ([ids] kinds = []) may be the first to use a new state
        // directory.
        std::fs::create_dir_all(dir).map_err(|e| {
            SeqError::new(
                ErrorKind::Io,
                format!("state_dir: cannot create {}: {e}", dir.display()),
            )
        })?;
        let path = dir.join(LOCK);
        match crate::statefile::lock(dir, LOCK) {
            Ok(Some(file)) => Ok(Some(TailDir {
                dir: dir.to_path_buf(),
                _lock: file,
            })),
            Ok(None) => Ok(None),
            Err(("open", e)) => Err(SeqError::new(
                ErrorKind::Io,
                format!("tails: cannot open {}: {e}", path.display()),
            )),
            Err((what, e)) => Err(SeqError::config(format!(
                "tails: cannot {what} {}: {e}",
                path.display()
            ))),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads the saved tails and removes the file (then fsyncs the directory), so they are
    /// found once: call it at start, before any ID is served. No file reads as nothing saved.
    /// Blocking file I/O.
    ///
    /// # Errors
    /// `Unavailable` naming the path when the file cannot be read or removed: then serve none
    /// of it (the tails stay on disk for a later start that can remove them).
    pub fn take(&self) -> Result<SavedTails, SeqError> {
        let path = self.dir.join(FILE);
        let _ = fs::remove_file(self.dir.join(TMP)); // a save cut short: never renamed
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == IoKind::NotFound => return Ok(SavedTails::new()),
            Err(e) => return Err(io_error("read", &path, e)),
        };
        fs::remove_file(&path).map_err(|e| io_error("remove", &path, e))?;
        sync_dir(&self.dir)?;
        Ok(match String::from_utf8(bytes) {
            Ok(text) => SavedTails::decode(&text),
            Err(_) => SavedTails {
                skipped: 1,
                ..SavedTails::default()
            },
        })
    }

    /// Writes `tails` atomically (temporary file, fsync, rename, fsync of the directory),
    /// replacing any saved before. Blocking file I/O.
    ///
    /// # Errors
    /// `Unavailable` naming the path on an I/O error (then no tails file is left but an old one
    /// this process did not [`take`](Self::take)).
    pub fn save(&self, tails: &SavedTails) -> Result<(), SeqError> {
        save(&self.dir, tails)
    }
}

/// [`TailDir::save`] in `dir`, which the caller holds locked.
pub(crate) fn save(dir: &Path, tails: &SavedTails) -> Result<(), SeqError> {
    crate::statefile::write_atomically(dir, TMP, FILE, &tails.encode())
        .map_err(|e| io_error("write", &dir.join(FILE), e))
}

/// `tail` cut to the IDs above `floor` (a `bigger_than`): what is at or below it is dropped.
pub(crate) fn above(tail: Vec<Segment>, floor: i64) -> Vec<Segment> {
    tail.into_iter()
        .filter_map(|s| segment_above(s, floor))
        .collect()
}

/// The IDs of `s` above `floor`, if any.
pub(crate) fn segment_above(s: Segment, floor: i64) -> Option<Segment> {
    let min = floor.checked_add(1)?;
    (s.end >= min).then(|| Segment {
        start: s.start.max(min),
        end: s.end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::new(s).unwrap()
    }

    #[test]
    fn claims_and_changes_round_trip_with_their_store() {
        let mut t = SavedTails::new();
        t.add(
            "s",
            "redis://h",
            key("k"),
            vec![Segment { start: 1, end: 9 }],
        );
        t.set_claim("s", "redis://h", 7);
        t.set_changes("s", "redis://h", 42);
        let back = SavedTails::decode(&t.encode());
        assert_eq!(back.claim("s", "redis://h"), Some(7));
        assert_eq!(back.changes("s", "redis://h"), Some(42));
        let mut back = back;
        back.drop_store("s", "redis://h");
        assert_eq!(back.changes("s", "redis://h"), None);
    }

    #[test]
    fn file_round_trips_any_key() {
        let mut t = SavedTails::new();
        let odd = key("a b\tc\nd ✓");
        t.add(
            "s",
            "postgres://u@h/db",
            odd.clone(),
            vec![Segment { start: 5, end: 9 }],
        );
        t.add(
            "s",
            "postgres://u@h/db",
            odd.clone(),
            vec![Segment { start: 20, end: 29 }],
        );
        t.add(
            "x",
            "embedded",
            key("k"),
            vec![Segment {
                start: i64::MAX,
                end: i64::MAX,
            }],
        );
        t.add(
            "x",
            "embedded",
            key("empty"),
            vec![Segment { start: 3, end: 2 }],
        );
        let back = SavedTails::decode(&t.encode());
        assert_eq!(back, t);
        assert_eq!(back.ids(), 16);
        assert_eq!(back.skipped(), 0);
    }

    #[test]
    fn a_file_not_whole_is_dropped() {
        let mut t = SavedTails::new();
        t.add("s", "i", key("k"), vec![Segment { start: 1, end: 9 }]);
        let text = t.encode();
        let cut = &text[..text.len() - 4];
        let back = SavedTails::decode(cut);
        assert_eq!(back.ids(), 0);
        assert!(back.skipped() > 0);
        assert_eq!(SavedTails::decode("").ids(), 0);
        let bad_line = text.replace(" 1 9", " 9 1");
        let back = SavedTails::decode(&bad_line);
        assert_eq!((back.ids(), back.skipped()), (0, 1));
    }

    #[test]
    fn identities_hold_no_password() {
        let dir = Path::new("/var/floe");
        assert_eq!(
            store_identity("postgres://u:secret@h:5432/db", dir),
            "postgres://u@h:5432/db"
        );
        assert_eq!(
            store_identity("mysql://root@h/db", dir),
            "mysql://root@h/db"
        );
        assert_eq!(store_identity("redis://:pw@h/0", dir), "redis://@h/0");
        assert_ne!(
            store_identity("postgres://u@a/db", dir),
            store_identity("postgres://u@b/db", dir)
        );
        assert_eq!(
            store_identity("embedded", dir),
            "embedded:/var/floe/sequences.redb"
        );
        assert_eq!(
            store_identity("embedded:", dir),
            "embedded:/var/floe/sequences.redb"
        );
        assert_eq!(
            store_identity("embedded:/x/y.redb", dir),
            "embedded:/x/y.redb"
        );
        assert_ne!(
            store_identity("embedded", dir),
            store_identity("embedded", Path::new("/var/other"))
        );
    }

    #[test]
    fn floors_cut_tails() {
        let tail = vec![Segment { start: 5, end: 9 }, Segment { start: 20, end: 29 }];
        assert_eq!(above(tail.clone(), 0), tail);
        assert_eq!(
            above(tail.clone(), 7),
            vec![Segment { start: 8, end: 9 }, Segment { start: 20, end: 29 }]
        );
        assert_eq!(above(tail.clone(), 9), vec![Segment { start: 20, end: 29 }]);
        assert_eq!(above(tail.clone(), 29), vec![]);
        assert_eq!(above(tail, i64::MAX), vec![]);
    }

    #[test]
    fn lock_is_exclusive_and_take_removes() {
        let dir = tempfile::tempdir().unwrap();
        let a = TailDir::lock(dir.path()).unwrap().expect("first lock");
        assert!(TailDir::lock(dir.path()).unwrap().is_none(), "held");
        let mut t = SavedTails::new();
        t.add("s", "i", key("k"), vec![Segment { start: 1, end: 9 }]);
        a.save(&t).unwrap();
        assert_eq!(a.take().unwrap(), t);
        assert!(!dir.path().join(FILE).exists(), "removed at take");
        assert_eq!(a.take().unwrap(), SavedTails::new(), "found once");
        drop(a);
        assert!(TailDir::lock(dir.path()).unwrap().is_some(), "let go");
    }
}
