//! The embedded store on a disk that fills up and then has room again (a 600 KB tmpfs this test
//! mounts, so it needs root; without it the test says why and does nothing).
//!
//! While the disk is full, calls fail with a temporary `Unavailable` (redb latches the I/O
//! error; the store closes and reopens the database on the next call, at most every
//! `REOPEN_EVERY` of tokio's clock, paused here). Once the filler file is removed, the next
//! calls succeed with no restart. Every ID the key handed out through the
//! whole test, STRONG, WEAK and segments, is distinct, STRONG IDs strictly increase, and the
//! value in the file afterwards covers all of them: a reservation whose commit failed was never
//! handed out.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use floe_sequencer::stores::embedded::{EmbeddedStore, REOPEN_EVERY};
use floe_sequencer::{ErrorKind, Key, Mode, SeqError, ServeOptions, StepPolicy, StoreHandle};

/// A tmpfs of `size` mounted on a temporary directory, unmounted when dropped.
struct Tmpfs {
    dir: Option<tempfile::TempDir>,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs { dir: Some(dir) })
    }

    fn path(&self) -> &Path {
        self.dir.as_ref().expect("mounted").path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let dir = self.dir.take().expect("mounted");
        let ok = Command::new("umount")
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Busy (a test that failed half-way may still hold a file): detach it anyway.
            let _ = Command::new("umount").arg("-l").arg(dir.path()).status();
        }
    }
}

/// Writes `path` until the disk is full; the bytes written.
fn fill(path: &Path) -> u64 {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = [0xAAu8; 4096];
    let mut written = 0;
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
                break;
            }
        }
    }
    let _ = file.sync_all();
    written
}

/// Everything one key handed out, checked as it comes.
#[derive(Default)]
struct Issued {
    all: HashSet<i64>,
    strong: Vec<i64>,
    failures: Vec<SeqError>,
}

impl Issued {
    fn take(&mut self, id: i64) {
        assert!(id > 0);
        assert!(self.all.insert(id), "{id} issued twice");
    }

    /// One STRONG ID, one WEAK ID and a segment of 5, or the temporary errors of each.
    async fn round(&mut self, h: &StoreHandle, key: &str) {
        match h.next_id(key, Mode::Strong).await {
            Ok(id) => {
                self.take(id);
                if let Some(&last) = self.strong.last() {
                    assert!(id > last, "STRONG {id} after {last}");
                }
                self.strong.push(id);
            }
            Err(e) => self.failed(e),
        }
        match h.next_id(key, Mode::Weak).await {
            Ok(id) => self.take(id),
            Err(e) => self.failed(e),
        }
        match h.segment(key, 5).await {
            Ok(s) => (s.start..=s.end).for_each(|id| self.take(id)),
            Err(e) => self.failed(e),
        }
    }

    fn failed(&mut self, e: SeqError) {
        assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
        assert!(e.is_temporary());
        self.failures.push(e);
    }
}

/// Opening the file a live store holds fails, naming the lock: `Unavailable` (the same open
/// succeeds once the holder stops; `floe serve` exits 69, which a service manager retries).
fn second_open_is_refused(path: &Path) {
    let err = EmbeddedStore::open(path).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err}");
    assert!(
        err.message.contains("held by another floe process"),
        "{err}"
    );
}

#[test]
fn a_second_store_on_the_same_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sequences.redb");
    let store = EmbeddedStore::open(&path).unwrap();
    second_open_is_refused(&path);
    drop(store);
    EmbeddedStore::open(&path).unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_full_disk_fails_calls_until_there_is_room_then_nothing_is_issued_twice() {
    let tmpfs = match Tmpfs::mount("600k") {
        Ok(t) => t,
        Err(why) => {
            eprintln!(
                "SKIPPED a_full_disk_...: cannot mount a 600 KB tmpfs ({why}); this test needs root"
            );
            return;
        }
    };
    let path: PathBuf = tmpfs.path().join("sequences.redb");
    let store = Arc::new(EmbeddedStore::open(&path).unwrap());
    let h = StoreHandle::new(
        "s",
        Arc::clone(&store) as Arc<dyn floe_sequencer::Store>,
        ServeOptions {
            step: StepPolicy {
                min: 10,
                max: 10,
                ..StepPolicy::default()
            },
            timeout: Duration::from_secs(10),
        },
    );
    let mut issued = Issued::default();
    for _ in 0..20 {
        issued.round(&h, "main").await;
    }
    assert!(issued.failures.is_empty(), "{:?}", issued.failures);

    // Fill the disk, then grow the file with new keys (200 bytes each) until a call fails.
    let filler = tmpfs.path().join("filler");
    let filled = fill(&filler);
    let mut grown = 0;
    while issued.failures.is_empty() && grown < 20_000 {
        let long = format!("{grown:0>200}");
        if let Err(e) = h.next_id(&long, Mode::Strong).await {
            issued.failed(e);
        }
        issued.round(&h, "main").await;
        grown += 1;
    }
    assert!(
        !issued.failures.is_empty(),
        "no call failed with the disk full ({filled} bytes of filler, {grown} keys added)"
    );
    // Still full: more keys, 40 ms apart. Calls fail again and again (a failure closes the
    // database, a call opens it again, at most every REOPEN_EVERY; a commit that fits in the
    // file's free pages succeeds), always with a temporary error.
    let first = issued.failures.len();
    let reopened = store.reopens();
    let step = Duration::from_millis(40);
    for i in 0..200 {
        tokio::time::advance(step).await;
        let long = format!("{:0>200}", grown + i);
        if let Err(e) = h.next_id(&long, Mode::Strong).await {
            issued.failed(e);
        }
        issued.round(&h, "main").await;
    }
    let while_full = issued.failures.len();
    let reopens = store.reopens() - reopened;
    let most = (step * 200).as_millis() / REOPEN_EVERY.as_millis() + 1;
    assert!(
        reopens > 1 && u128::from(reopens) <= most,
        "{reopens} reopens in 200 steps of {step:?} (at most {most})"
    );
    assert!(
        issued.failures[first..]
            .iter()
            .any(|e| e.message.contains("opened again at most every")),
        "no call failed at once between reopens"
    );
    // The database was closed and opened again many times: the state directory stayed ours.
    second_open_is_refused(&path);
    assert!(
        while_full > first + 1,
        "the disk stayed full, yet no call failed after the first failures"
    );
    println!(
        "{while_full} calls failed while the disk was full ({filled} bytes of filler, {grown} \
         keys added, {reopens} reopens); first: {}; last: {}",
        issued.failures[0],
        issued.failures[while_full - 1]
    );

    // Room again: once the database may be opened again, the next calls succeed, with no
    // restart, and the file grows again.
    std::fs::remove_file(&filler).unwrap();
    tokio::time::advance(REOPEN_EVERY).await;
    for i in 0..30 {
        issued.round(&h, "main").await;
        if let Err(e) = h.next_id(&format!("{i:x>200}"), Mode::Strong).await {
            issued.failed(e);
        }
    }
    assert_eq!(
        issued.failures.len(),
        while_full,
        "calls failed after the disk had room: {:?}",
        &issued.failures[while_full..]
    );
    // The file holds a value above everything handed out.
    let durable = store.value(&Key::new("main").unwrap()).unwrap();
    let most = *issued.all.iter().max().unwrap();
    assert!(
        durable >= most,
        "the file says {durable}, {most} was handed out"
    );
    println!(
        "{} IDs of one key, {} of them STRONG, none twice",
        issued.all.len(),
        issued.strong.len()
    );
    drop(h);
    drop(store);
    drop(tmpfs);
}

/// A first open on a full disk fails, and leaves a file of zeros behind; once there is room,
/// the next open makes the database and serves (found by a hostile probe: the file of zeros
/// was refused as "not a redb database" for good).
#[tokio::test]
async fn a_first_open_on_a_full_disk_fails_then_succeeds_once_there_is_room() {
    let tmpfs = match Tmpfs::mount("64k") {
        Ok(t) => t,
        Err(why) => {
            eprintln!(
                "SKIPPED a_first_open_...: cannot mount a tmpfs ({why}); this test needs root"
            );
            return;
        }
    };
    let filler = tmpfs.path().join("filler");
    fill(&filler);
    let path: PathBuf = tmpfs.path().join("sequences.redb");
    let e = EmbeddedStore::open(&path).unwrap_err();
    assert!(e.message.contains("cannot open"), "{e}");
    assert_eq!(e.kind, ErrorKind::Io, "a local disk problem: {e}");
    std::fs::remove_file(&filler).unwrap();
    let store = EmbeddedStore::open(&path).unwrap();
    let key: floe_sequencer::Key = "k".parse().unwrap();
    assert_eq!(
        floe_sequencer::Store::next_id(&store, &key).await.unwrap(),
        1
    );
}
