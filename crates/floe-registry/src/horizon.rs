//! The durable time bound (horizon) of a generator, kept in the state directory.
//!
//! A generator never issues an ID whose time is past its horizon ([`floe_core::horizon`]),
//! and the horizon only moves once its new value is on disk. This module is the disk side:
//!
//! - [`HorizonFile`]: `horizon-{slot}.json` in the state directory, one per generator slot
//!   (`snowflake-{node}`, `sno-{partition}`, `lexical-{worker}`), written atomically
//!   (temporary file, fsync, rename, fsync of the directory). While a process uses a slot it
//!   holds an exclusive OS lock on `horizon-{slot}.lock`: a second process on the same state
//!   directory with the same worker ID is refused instead of repeating the first one's IDs.
//! - [`start`]: the start-up decision. The previous run's bound is this run's not-before time
//!   (with the registry's and the cache's last times, the latest counts). A clock behind it
//!   waits, up to [`HorizonConfig::max_start_wait`] (5 s by default), or refuses, naming every
//!   time. Then the first bound (`now + lead`) is written before any ID is issued, and a
//!   thread of its own moves it ahead every [`HorizonConfig::refresh`] (200 ms), keeping it
//!   [`HorizonConfig::lead`] (1 s) ahead of the clock. The thread does the fsyncs, so the
//!   generators' hot path reads one atomic and never waits on a disk in normal running.
//! - [`DurableHorizon::close`]: at a clean shutdown the bound is brought back to the time of
//!   closing, so that a clean restart does not wait.
//!
//! **What a crash costs:** a restart after `kill -9` (or a power cut) starts after the last
//! bound on disk, at most `lead` ahead of the moment of the crash: a restart within a second
//! waits up to a second; a clock stepped back by up to `max_start_wait - lead` waits; more
//! refuses.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::ErrorKind as IoKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use floe_core::clock::{Clock, NANOS_PER_MILLI};
use floe_core::fence::Fence;
use floe_core::horizon::Horizon;
use serde::{Deserialize, Serialize};

use crate::cache::{io_error, write_atomic};
use crate::guard::{check_start, StartCheck};
use crate::{ErrorKind, RegistryError};

/// How the horizon is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HorizonConfig {
    /// How far ahead of the clock the bound is kept (1 s).
    pub lead: Duration,
    /// How often the bound is moved ahead (200 ms).
    pub refresh: Duration,
    /// How long a generator that meets the bound waits for the next write before it fails
    /// (2 s).
    pub stall_wait: Duration,
    /// The largest clock lag waited out at start-up (5 s); a larger one refuses.
    pub max_start_wait: Duration,
}

impl Default for HorizonConfig {
    fn default() -> Self {
        HorizonConfig {
            lead: Duration::from_secs(1),
            refresh: Duration::from_millis(200),
            stall_wait: floe_core::horizon::DEFAULT_STALL_WAIT,
            max_start_wait: Duration::from_secs(5),
        }
    }
}

/// What the file holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    slot: String,
    bound_ms: u64,
}

/// The bound of one generator slot in a state directory, locked for this process.
#[derive(Debug)]
pub struct HorizonFile {
    slot: String,
    path: PathBuf,
    _lock: File,
}

impl HorizonFile {
    /// Opens (and locks for this process) the slot's file in `dir`, created if missing.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a bad slot name or a directory that cannot be created;
    /// [`ErrorKind::Conflict`] when another live process holds the slot;
    /// [`ErrorKind::Unavailable`] when the lock file cannot be opened.
    pub fn open(dir: &Path, slot: &str) -> Result<Self, RegistryError> {
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if slot.is_empty() || slot.len() > 100 || !slot.chars().all(ok) {
            return Err(RegistryError::config(format!(
                "horizon slot: expected up to 100 letters, digits, '-', '_' or '.', found {slot:?}"
            )));
        }
        fs::create_dir_all(dir).map_err(|e| {
            RegistryError::new(
                crate::ErrorKind::Io,
                format!("state_dir: cannot create {}: {e}", dir.display()),
            )
        })?;
        let lock_path = dir.join(format!("horizon-{slot}.lock"));
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| io_error("cannot open", &lock_path, &e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(RegistryError::new(
                    ErrorKind::Conflict,
                    format!(
                        "another process on state directory {} is issuing IDs as {slot} (it holds {}): two generators with one worker ID would repeat each other's IDs",
                        dir.display(),
                        lock_path.display()
                    ),
                ))
            }
            Err(TryLockError::Error(e)) => return Err(io_error("cannot lock", &lock_path, &e)),
        }
        Ok(HorizonFile {
            slot: slot.to_string(),
            path: dir.join(format!("horizon-{slot}.json")),
            _lock: lock,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The slot's name.
    pub fn slot(&self) -> &str {
        &self.slot
    }

    /// The bound on disk, if any.
    ///
    /// # Errors
    /// [`ErrorKind::Corrupt`] when the file cannot be parsed or names another slot (the
    /// generator must not start: it cannot know which times were used);
    /// [`ErrorKind::Unavailable`] when it cannot be read.
    pub fn load(&self) -> Result<Option<u64>, RegistryError> {
        let bytes = match fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == IoKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error("cannot read", &self.path, &e)),
        };
        let record: Record = serde_json::from_slice(&bytes).map_err(|e| {
            RegistryError::new(
                ErrorKind::Corrupt,
                format!(
                    "time bound file {} is not valid ({e}): refusing to start, since the times its generator used are unknown. Remove it only when the clock is known to be past every ID issued with this worker ID",
                    self.path.display()
                ),
            )
        })?;
        if record.slot != self.slot {
            return Err(RegistryError::new(
                ErrorKind::Corrupt,
                format!(
                    "time bound file {} belongs to slot {:?}, not {:?}",
                    self.path.display(),
                    record.slot,
                    self.slot
                ),
            ));
        }
        Ok(Some(record.bound_ms))
    }

    /// Writes `bound_ms`, durably, before returning.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] when it cannot be written (the bound then does not move).
    pub fn store(&self, bound_ms: u64) -> Result<(), RegistryError> {
        let record = Record {
            slot: self.slot.clone(),
            bound_ms,
        };
        let bytes = serde_json::to_vec(&record).map_err(|e| {
            RegistryError::new(ErrorKind::Corrupt, format!("cannot encode time bound: {e}"))
        })?;
        write_atomic(&self.path, &bytes)
    }
}

/// Counters of the writer, for metrics and the status page.
#[derive(Debug, Default)]
pub struct HorizonStats {
    /// Bounds written.
    pub writes: AtomicU64,
    /// Writes that failed (the bound did not move).
    pub failures: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl HorizonStats {
    /// The last write error, if the last write failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

struct Shared {
    horizon: Arc<Horizon>,
    file: HorizonFile,
    /// The lease whose generators this bound serves ([`DurableHorizon::follow`]): while its
    /// fence is closed the bound does not move ahead.
    fence: std::sync::OnceLock<Arc<Fence>>,
    clock: Box<dyn Clock>,
    config: HorizonConfig,
    stats: HorizonStats,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.clock.now_nanos() / NANOS_PER_MILLI
    }

    /// One step of the writer: moves the bound to `now + lead` once it is on disk, unless the
    /// lease it follows is closed (a process that wakes from a pause past its window must not
    /// find a fresh bound waiting for it: only a confirmed lease moves it on).
    fn step(&self) {
        if let Some(fence) = self.fence.get() {
            if !fence.admits_now(&self.clock) {
                return;
            }
        }
        let target = self
            .now_ms()
            .saturating_add(self.config.lead.as_millis() as u64);
        if target <= self.horizon.bound_ms() {
            self.horizon.writer_alive(self.clock.monotonic_nanos());
            return;
        }
        match self.file.store(target) {
            Ok(()) => {
                self.horizon.advance(target);
                self.horizon.writer_alive(self.clock.monotonic_nanos());
                self.stats.writes.fetch_add(1, Ordering::Relaxed);
                *self
                    .stats
                    .last_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = None;
            }
            Err(e) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                *self
                    .stats
                    .last_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(e.message);
            }
        }
    }

    fn run(&self) {
        let mut stopped = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let (guard, _) = self
                .wake
                .wait_timeout_while(stopped, self.config.refresh, |s| !*s)
                .unwrap_or_else(|e| e.into_inner());
            stopped = guard;
            if *stopped {
                return;
            }
            drop(stopped);
            self.step();
            stopped = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A horizon kept durable by a writer thread; dropping it stops the thread (and leaves the
/// last bound on disk, as a crash would).
pub struct DurableHorizon {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for DurableHorizon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableHorizon")
            .field("path", &self.shared.file.path)
            .field("bound_ms", &self.shared.horizon.bound_ms())
            .finish_non_exhaustive()
    }
}

/// What [`start`] gives.
#[derive(Debug)]
pub struct Started {
    /// The horizon, running.
    pub horizon: DurableHorizon,
    /// Issue no ID at or before this Unix ms: the latest recorded time (bound, registry,
    /// cache), 0 if none.
    pub not_before_ms: u64,
    /// What happened (a wait), for the log.
    pub notes: Vec<String>,
}

/// Starts a slot's horizon: reads the previous bound, checks the clock against it and the
/// `recorded` times (e.g. `("the registry", Some(ms))`), waits (bounded) or refuses, writes the
/// first bound and starts the writer thread (none when `config.refresh` is zero: then call
/// [`DurableHorizon::advance_now`]).
///
/// # Errors
/// [`ErrorKind::ClockBehind`] naming every time; the file's errors ([`HorizonFile::load`],
/// [`HorizonFile::store`]).
pub fn start(
    file: HorizonFile,
    recorded: &[(&str, Option<u64>)],
    config: HorizonConfig,
    clock: impl Clock + 'static,
) -> Result<Started, RegistryError> {
    let previous = file.load()?;
    let bound_name = format!("the time bound {}", file.path.display());
    let mut all: Vec<(&str, Option<u64>)> = vec![(bound_name.as_str(), previous)];
    all.extend_from_slice(recorded);
    let not_before_ms = all.iter().filter_map(|(_, t)| *t).max().unwrap_or(0);
    let mut notes = Vec::new();
    let now_ms = clock.now_nanos() / NANOS_PER_MILLI;
    match check_start(now_ms, &all, config.max_start_wait)? {
        StartCheck::Start => {}
        StartCheck::WaitUntil(ms) => {
            notes.push(format!(
                "clock {} ms behind the last recorded time {ms} ms: waited for it",
                ms - now_ms
            ));
            clock.wait_until(ms.saturating_add(1).saturating_mul(NANOS_PER_MILLI));
        }
    }
    begin(file, not_before_ms, notes, config, clock)
}

/// Starts a slot's horizon for a generator that carries on above the previous run's bound
/// rather than waiting for a clock behind it (UUIDv7 and ULID: their timestamps may run ahead
/// of the clock, RFC 9562): never waits, never refuses. `not_before_ms` is the previous bound.
///
/// # Errors
/// The file's ([`HorizonFile::load`], [`HorizonFile::store`]).
pub fn start_above(
    file: HorizonFile,
    config: HorizonConfig,
    clock: impl Clock + 'static,
) -> Result<Started, RegistryError> {
    let previous = file.load()?.unwrap_or(0);
    let mut notes = Vec::new();
    let now_ms = clock.now_nanos() / NANOS_PER_MILLI;
    if now_ms <= previous {
        notes.push(format!(
            "clock {} ms behind the last recorded time {previous} ms ({}): IDs carry on above it",
            previous - now_ms,
            file.path.display()
        ));
    }
    begin(file, previous, notes, config, clock)
}

/// Writes the first bound (`lead` past the later of now and `not_before_ms`) and starts the
/// writer.
fn begin(
    file: HorizonFile,
    not_before_ms: u64,
    notes: Vec<String>,
    config: HorizonConfig,
    clock: impl Clock + 'static,
) -> Result<Started, RegistryError> {
    let now_ms = clock.now_nanos() / NANOS_PER_MILLI;
    let first = now_ms
        .max(not_before_ms)
        .saturating_add(config.lead.as_millis() as u64);
    file.store(first)?;
    let shared = Arc::new(Shared {
        horizon: Arc::new(Horizon::new(first, config.stall_wait)),
        file,
        fence: std::sync::OnceLock::new(),
        clock: Box::new(clock),
        config,
        stats: HorizonStats::default(),
        stop: Mutex::new(false),
        wake: Condvar::new(),
    });
    let thread = if config.refresh.is_zero() {
        None
    } else {
        let s = shared.clone();
        Some(
            std::thread::Builder::new()
                .name("floe-horizon".into())
                .spawn(move || s.run())
                .map_err(|e| {
                    RegistryError::new(
                        ErrorKind::Unavailable,
                        format!("cannot start the time bound writer thread: {e}"),
                    )
                })?,
        )
    };
    Ok(Started {
        horizon: DurableHorizon { shared, thread },
        not_before_ms,
        notes,
    })
}

impl DurableHorizon {
    /// The bound the generators check.
    pub fn horizon(&self) -> Arc<Horizon> {
        self.shared.horizon.clone()
    }

    /// The writer's counters.
    pub fn stats(&self) -> &HorizonStats {
        &self.shared.stats
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.shared.file.path()
    }

    /// Keeps the bound from moving ahead while `fence` (the worker lease of the generators it
    /// serves) is closed. Set once; later calls are ignored.
    pub fn follow(&self, fence: Arc<Fence>) {
        let _ = self.shared.fence.set(fence);
    }

    /// Moves the bound ahead now (what the writer thread does every `refresh`).
    pub fn advance_now(&self) {
        self.shared.step();
    }

    fn stop_thread(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// At a clean shutdown, once no generator of this horizon is issuing IDs: stops the
    /// generators for good, then brings the bound on disk back to the later of the clock's
    /// time and `last_issued_ms` (the generator's last issued time: a LexicalUUID generator's
    /// timestamps can run ahead of the clock), never ahead of the old bound, so that a clean
    /// restart need not wait.
    ///
    /// # Errors
    /// [`ErrorKind::Unavailable`] when the file cannot be written (the old, later bound stays:
    /// the restart waits for it, nothing repeats).
    pub fn close(mut self, last_issued_ms: u64) -> Result<(), RegistryError> {
        self.stop_thread();
        let horizon = &self.shared.horizon;
        let bound = horizon.bound_ms();
        horizon.close();
        // Any call that passed the check before `close` read the clock before this reading.
        let final_ms = self.shared.now_ms().max(last_issued_ms).min(bound);
        self.shared.file.store(final_ms)
    }
}

impl Drop for DurableHorizon {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_core::clock::ManualClock;

    const T0: u64 = 1_700_000_000_000;

    /// Starts slot `x` in `dir` on `clock`, the bound moved by hand.
    fn start_x(
        dir: &tempfile::TempDir,
        recorded: &[(&str, Option<u64>)],
        clock: &ManualClock,
    ) -> Result<Started, RegistryError> {
        start(
            HorizonFile::open(dir.path(), "x").unwrap(),
            recorded,
            manual(),
            clock.clone(),
        )
    }

    fn manual() -> HorizonConfig {
        HorizonConfig {
            refresh: Duration::ZERO,
            stall_wait: Duration::from_millis(1),
            ..HorizonConfig::default()
        }
    }

    #[test]
    fn first_bound_is_durable_before_any_id_and_moves_only_once_written() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::from_millis(T0);
        let file = HorizonFile::open(dir.path(), "snowflake-5").unwrap();
        let s = start(file, &[], manual(), clock.clone()).unwrap();
        assert_eq!(s.not_before_ms, 0);
        let h = s.horizon.horizon();
        assert_eq!(h.bound_ms(), T0 + 1000);
        let on_disk = || {
            let text = fs::read_to_string(dir.path().join("horizon-snowflake-5.json")).unwrap();
            serde_json::from_str::<Record>(&text).unwrap().bound_ms
        };
        assert_eq!(on_disk(), T0 + 1000);
        clock.advance(Duration::from_millis(500));
        s.horizon.advance_now();
        assert_eq!((h.bound_ms(), on_disk()), (T0 + 1500, T0 + 1500));
        assert_eq!(s.horizon.stats().writes.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn the_bound_stands_still_while_the_lease_it_follows_is_closed() {
        use floe_core::fence::Sent;
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::from_millis(T0);
        let s = start_x(&dir, &[], &clock).unwrap();
        let fence = Arc::new(Fence::new());
        fence.confirm(Sent::now(&clock), Duration::from_secs(4));
        s.horizon.follow(fence.clone());
        clock.advance(Duration::from_secs(2));
        s.horizon.advance_now();
        assert_eq!(s.horizon.horizon().bound_ms(), T0 + 3_000);
        // Paused past the window: the writer, like the generators, waits for a confirmation.
        clock.advance(Duration::from_secs(10));
        s.horizon.advance_now();
        assert_eq!(s.horizon.horizon().bound_ms(), T0 + 3_000);
        assert_eq!(s.horizon.shared.file.load().unwrap(), Some(T0 + 3_000));
        fence.confirm(Sent::now(&clock), Duration::from_secs(4));
        s.horizon.advance_now();
        assert_eq!(s.horizon.horizon().bound_ms(), T0 + 13_000);
    }

    #[test]
    fn a_second_process_on_the_slot_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _held = HorizonFile::open(dir.path(), "sno-0007").unwrap();
        let e = HorizonFile::open(dir.path(), "sno-0007").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Conflict);
        assert!(e.message.contains("sno-0007"), "{e}");
        assert_eq!(
            HorizonFile::open(dir.path(), "../x").unwrap_err().kind,
            ErrorKind::Config
        );
    }

    #[test]
    fn restart_waits_for_a_small_lag_and_refuses_a_large_one() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::from_millis(T0);
        let s = start_x(&dir, &[], &clock).unwrap();
        drop(s); // a crash: the bound T0 + 1000 stays on disk
        clock.set_millis(T0 - 400);
        let s = start_x(&dir, &[("the registry", Some(T0 - 100))], &clock).unwrap();
        assert_eq!(s.not_before_ms, T0 + 1000);
        assert_eq!(clock.now_millis(), T0 + 1001, "waited 1.4 s");
        assert!(s.notes[0].contains("waited"), "{:?}", s.notes);
        drop(s);
        clock.set_millis(T0 - 3_600_000);
        let e = start_x(&dir, &[("the registry", Some(T0 - 100))], &clock).unwrap_err();
        assert_eq!(e.kind, ErrorKind::ClockBehind);
        assert!(e.message.contains("horizon-x.json"), "{e}");
        assert!(e.message.contains("registry"), "{e}");
    }

    #[test]
    fn clean_close_brings_the_bound_back_so_a_clean_restart_does_not_wait() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::from_millis(T0);
        let s = start_x(&dir, &[], &clock).unwrap();
        let h = s.horizon.horizon();
        clock.advance(Duration::from_millis(10));
        s.horizon.close(0).unwrap();
        assert!(!h.allows_nanos(0), "closed: generators stop");
        let s = start_x(&dir, &[], &clock).unwrap();
        assert_eq!(s.not_before_ms, T0 + 10);
        assert_eq!(clock.waits(), 0);
        // A generator that ran ahead of the clock (LexicalUUID past 1 M IDs/s) closes at its
        // last issued time, not the clock's; never past the bound.
        s.horizon.close(T0 + 500).unwrap();
        let s = start_x(&dir, &[], &clock).unwrap();
        assert_eq!(s.not_before_ms, T0 + 500);
        clock.set_millis(T0 + 501);
        s.horizon.close(T0 + 999_999).unwrap();
        let s = start_x(&dir, &[], &clock).unwrap();
        assert_eq!(s.not_before_ms, T0 + 501 + 1000, "the bound, not past it");
    }

    #[test]
    fn a_corrupt_bound_refuses_to_start() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("horizon-x.json"), b"{torn").unwrap();
        let e = start(
            HorizonFile::open(dir.path(), "x").unwrap(),
            &[],
            manual(),
            ManualClock::from_millis(T0),
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt);
    }

    #[test]
    fn the_writer_thread_keeps_the_bound_ahead_of_the_clock() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::from_millis(T0);
        let config = HorizonConfig {
            refresh: Duration::from_millis(1),
            ..manual()
        };
        let s = start(
            HorizonFile::open(dir.path(), "x").unwrap(),
            &[],
            config,
            clock.clone(),
        )
        .unwrap();
        let h = s.horizon.horizon();
        clock.advance(Duration::from_secs(60));
        // The writer runs on its own thread: wait for it (bounded), not for the clock.
        let waited = (0..5_000).find(|_| {
            std::thread::sleep(Duration::from_millis(1));
            h.bound_ms() >= T0 + 61_000
        });
        assert!(waited.is_some(), "bound {}", h.bound_ms());
    }
}
