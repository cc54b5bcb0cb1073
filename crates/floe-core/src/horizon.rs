//! The horizon: a durable upper bound on the time of the IDs a generator issues.
//!
//! A generator whose uniqueness rests on time (Snowflake, sno, LexicalUUID) must, after a
//! crash, start after every time its previous run may have used. Recording the last issued
//! time now and then leaves a hole: a run killed between two records used times the next run
//! does not know about, and a clock a little behind then repeats its IDs (Leaf's issue #216).
//!
//! floe closes the hole the other way round. A generator never issues an ID whose time is past
//! its horizon, and the horizon only moves once its new value is durable (written and fsync'd
//! by the owner of the state directory, see `floe_registry::horizon`). A background writer
//! keeps the horizon about a second ahead of the clock, so the hot path costs one atomic load
//! and never waits on a disk. After a crash the durable horizon is the next run's not-before
//! time: whatever the previous run issued lies at or before it.
//!
//! If the clock overtakes the horizon (the disk stalled), generators wait for the writer,
//! up to a bound ([`Horizon::stall_wait`]), then fail with a clear error; they never issue
//! past it.
//!
//! This module has no I/O: it is the shared bound and the wait, nothing else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::clock::NANOS_PER_MILLI;

/// How long a generator waits for a stalled writer by default before it fails.
pub const DEFAULT_STALL_WAIT: Duration = Duration::from_secs(2);

/// A shareable upper bound on issued time; share it with `Arc<Horizon>`.
#[derive(Debug)]
pub struct Horizon {
    /// Clock readings strictly below this (Unix ns) may be issued: `(bound_ms + 1) * 1e6`.
    limit_nanos: AtomicU64,
    lock: Mutex<()>,
    moved: Condvar,
    stall_wait: Duration,
    /// When the writer last finished a step (monotonic ns; 0: never).
    writer_mono: AtomicU64,
}

impl Horizon {
    /// A horizon at `bound_ms` (Unix ms, already durable): IDs of times up to and including
    /// that millisecond may be issued. Generators wait at most `stall_wait` for it to move.
    pub fn new(bound_ms: u64, stall_wait: Duration) -> Self {
        Horizon {
            limit_nanos: AtomicU64::new(limit_of(bound_ms)),
            lock: Mutex::new(()),
            moved: Condvar::new(),
            stall_wait,
            writer_mono: AtomicU64::new(0),
        }
    }

    /// The bound: the last Unix millisecond whose IDs may be issued.
    pub fn bound_ms(&self) -> u64 {
        (self.limit_nanos.load(Ordering::Acquire) / NANOS_PER_MILLI).saturating_sub(1)
    }

    /// How long a generator waits for the horizon to move before it fails.
    pub fn stall_wait(&self) -> Duration {
        self.stall_wait
    }

    /// Whether a clock reading of `now_nanos` may be issued: one atomic load.
    #[inline]
    pub fn allows_nanos(&self, now_nanos: u64) -> bool {
        now_nanos < self.limit_nanos.load(Ordering::Acquire)
    }

    /// `Ok` when a clock reading of `now_nanos` may be issued (one atomic load), else the
    /// stall to report.
    #[inline]
    pub fn check(&self, now_nanos: u64) -> Result<(), HorizonStalled> {
        if self.allows_nanos(now_nanos) {
            Ok(())
        } else {
            Err(self.stalled(now_nanos))
        }
    }

    /// The stall a generator would fail with on a reading of `now_nanos` (`None`: it would
    /// not): the reading is past the bound, and the writer has not finished a step within the
    /// [`stall_wait`](Self::stall_wait) before `mono_nanos` (the monotonic clock now; see
    /// [`writer_alive`](Self::writer_alive)). Readiness probes ask: a bound that trails the
    /// clock for a moment after it steps forward, while the writer keeps writing, is no
    /// refusal (a request waits for the next write).
    pub fn refusal(&self, now_nanos: u64, mono_nanos: u64) -> Option<HorizonStalled> {
        if self.allows_nanos(now_nanos) {
            return None;
        }
        let waited = u64::try_from(self.stall_wait.as_nanos()).unwrap_or(u64::MAX);
        let alive = self.writer_mono.load(Ordering::Acquire);
        let recent = alive != 0 && mono_nanos.saturating_sub(alive) <= waited;
        (!recent).then(|| self.stalled(now_nanos))
    }

    /// The writer finished a step at `mono_nanos` (the monotonic clock): it moved the bound,
    /// or found it far enough ahead. A writer that fails or hangs stops saying so.
    pub fn writer_alive(&self, mono_nanos: u64) {
        self.writer_mono
            .fetch_max(mono_nanos.max(1), Ordering::AcqRel);
    }

    /// As [`check`](Self::check), but waits for the bound to move first, at most
    /// [`stall_wait`](Self::stall_wait).
    pub fn wait(&self, now_nanos: u64) -> Result<(), HorizonStalled> {
        if self.wait_for_nanos(now_nanos) {
            Ok(())
        } else {
            Err(self.stalled(now_nanos))
        }
    }

    #[cold]
    fn stalled(&self, now_nanos: u64) -> HorizonStalled {
        HorizonStalled {
            now_ms: now_nanos / NANOS_PER_MILLI,
            bound_ms: self.bound_ms(),
        }
    }

    /// Moves the bound to `bound_ms`, which the caller has made durable. Never moves it back.
    pub fn advance(&self, bound_ms: u64) {
        let limit = limit_of(bound_ms);
        let before = self.limit_nanos.fetch_max(limit, Ordering::AcqRel);
        if before < limit {
            // Taking the lock orders this wake-up after any waiter's check.
            drop(self.lock.lock().unwrap_or_else(|e| e.into_inner()));
            self.moved.notify_all();
        }
    }

    /// Stops every generator for good (at a clean shutdown, before the owner records the
    /// final bound): from now on no clock reading is allowed.
    pub fn close(&self) {
        self.limit_nanos.store(0, Ordering::Release);
    }

    /// Blocks until a clock reading of `now_nanos` is allowed, for at most
    /// [`stall_wait`](Self::stall_wait). Returns whether it is allowed.
    pub fn wait_for_nanos(&self, now_nanos: u64) -> bool {
        if self.allows_nanos(now_nanos) {
            return true;
        }
        let guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let (_guard, _) = self
            .moved
            .wait_timeout_while(guard, self.stall_wait, |_| !self.allows_nanos(now_nanos))
            .unwrap_or_else(|e| e.into_inner());
        self.allows_nanos(now_nanos)
    }
}

/// What a generator whose timestamps may run ahead of the clock keeps of time across runs
/// (UUIDv7, ULID): a floor (the previous run's bound: no time at or before it is issued, and a
/// clock behind it carries on at it) and the running durable bound, if any.
#[derive(Debug, Clone, Default)]
pub struct Bounds {
    floor_nanos: u64,
    horizon: Option<std::sync::Arc<Horizon>>,
}

impl Bounds {
    /// Issues no time in or before the Unix millisecond `ms`.
    pub fn set_not_before_ms(&mut self, ms: u64) {
        self.floor_nanos = ms.saturating_add(1).saturating_mul(NANOS_PER_MILLI);
    }

    /// Issues no time past `horizon`.
    pub fn set_horizon(&mut self, horizon: std::sync::Arc<Horizon>) {
        self.horizon = Some(horizon);
    }

    /// The time the next ID is made at, of a clock reading `now_nanos`: it, or the floor when
    /// the clock is behind.
    #[inline]
    pub fn time_nanos(&self, now_nanos: u64) -> u64 {
        now_nanos.max(self.floor_nanos)
    }

    /// `Ok` when `nanos` may be issued: within the bound (one atomic load), after waiting for
    /// it at most its stall wait if `wait`.
    ///
    /// # Errors
    /// [`HorizonStalled`] past a bound that did not move.
    #[inline]
    pub fn admit(&self, nanos: u64, wait: bool) -> Result<(), HorizonStalled> {
        match &self.horizon {
            Some(h) if !h.allows_nanos(nanos) => {
                if wait {
                    h.wait(nanos)
                } else {
                    Err(h.stalled(nanos))
                }
            }
            _ => Ok(()),
        }
    }
}

fn limit_of(bound_ms: u64) -> u64 {
    bound_ms.saturating_add(1).saturating_mul(NANOS_PER_MILLI)
}

/// The error of a generator that met its horizon and waited for it in vain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HorizonStalled {
    /// The clock's time, Unix ms.
    pub now_ms: u64,
    /// The horizon, Unix ms.
    pub bound_ms: u64,
}

impl std::fmt::Display for HorizonStalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the clock ({} ms) passed the last durable time bound ({} ms) and the state directory did not record a later one in time (disk stalled or full?): no ID is issued past a bound that is not on disk",
            self.now_ms, self.bound_ms
        )
    }
}

impl std::error::Error for HorizonStalled {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn allows_up_to_and_including_the_bound_millisecond() {
        let h = Horizon::new(1_000, Duration::ZERO);
        assert!(h.allows_nanos(1_000 * NANOS_PER_MILLI + 999_999));
        assert!(!h.allows_nanos(1_001 * NANOS_PER_MILLI));
        assert_eq!(h.bound_ms(), 1_000);
        h.advance(900);
        assert_eq!(h.bound_ms(), 1_000, "never moves back");
        h.advance(2_000);
        assert!(h.allows_nanos(1_001 * NANOS_PER_MILLI));
    }

    #[test]
    fn a_refusal_is_a_bound_passed_while_the_writer_is_silent() {
        const S: u64 = 1_000_000_000;
        let h = Horizon::new(1_000, Duration::from_secs(2));
        let past = 5_000 * NANOS_PER_MILLI;
        assert_eq!(h.refusal(900 * NANOS_PER_MILLI, 10 * S), None, "within");
        assert!(h.refusal(past, 10 * S).is_some(), "no writer ever");
        h.writer_alive(10 * S);
        assert_eq!(h.refusal(past, 11 * S), None, "the writer wrote 1 s ago");
        assert_eq!(
            h.refusal(past, 12 * S),
            None,
            "2 s ago: a request waits that long"
        );
        let e = h.refusal(past, 12 * S + 1).unwrap();
        assert_eq!((e.now_ms, e.bound_ms), (5_000, 1_000));
        h.writer_alive(9 * S);
        assert!(h.refusal(past, 12 * S + 1).is_some(), "never back");
    }

    #[test]
    fn a_waiter_wakes_when_the_bound_moves_and_gives_up_after_the_stall_wait() {
        let h = Arc::new(Horizon::new(1_000, Duration::from_secs(30)));
        let waiter = {
            let h = h.clone();
            std::thread::spawn(move || h.wait_for_nanos(1_500 * NANOS_PER_MILLI))
        };
        h.advance(1_500);
        assert!(waiter.join().unwrap());
        let h = Horizon::new(1_000, Duration::from_millis(1));
        assert!(!h.wait_for_nanos(1_500 * NANOS_PER_MILLI));
    }
}
