//! Wall time and elapsed time, the one place where time enters floe's generators.
//!
//! Every generator takes a [`Clock`] and never reads the system time itself, so every rule
//! about time (sequence reset per unit, rollback waits, tick-tock, overflow stalls, a lease
//! that ends while the process is paused) can be tested deterministically with a
//! [`ManualClock`].
//!
//! **Two readings.** [`now_nanos`](Clock::now_nanos) is the wall clock: IDs carry it, and it
//! can be stepped (NTP, an operator, a VM restored from a snapshot).
//! [`monotonic_nanos`](Clock::monotonic_nanos) only counts time passing: a worker lease's
//! local deadline ([`crate::fence`]) is kept on it, so that a step of the wall clock can
//! neither lengthen nor shorten a lease.
//!
//! **Waiting.** A generator that must wait (sequence exhausted, small clock rollback) asks the
//! clock to [`wait_until`](Clock::wait_until) a wall time. The [`SystemClock`] sleeps and then
//! spins; the [`ManualClock`] moves itself forward to the deadline at once and counts the wait,
//! so that a test can assert both that a wait happened and how long it was.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds in one millisecond.
pub const NANOS_PER_MILLI: u64 = 1_000_000;

/// A source of wall time, in nanoseconds since the Unix epoch (1970-01-01T00:00:00Z).
///
/// **Thread safety:** clocks are shared by every thread that generates IDs, so they are
/// `Send + Sync`.
pub trait Clock: Send + Sync {
    /// The current wall time, in nanoseconds since the Unix epoch. Times before 1970 read as 0.
    fn now_nanos(&self) -> u64;

    /// Elapsed time in nanoseconds from an arbitrary origin, on a clock that is never stepped:
    /// it moves forward at the rate of real time, whatever happens to the wall clock. Lease
    /// deadlines are kept on it ([`crate::fence::Fence`]). It may be coarse (within a few
    /// milliseconds): the callers' margins cover that.
    fn monotonic_nanos(&self) -> u64;

    /// The current wall time as a `SystemTime` (for crates that take one, such as `ulid`).
    /// The same instant as [`now_nanos`](Clock::now_nanos).
    fn now_system_time(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.now_nanos())
    }

    /// Blocks until [`now_nanos`](Clock::now_nanos) is at least `deadline_nanos`.
    ///
    /// It may return early (callers check the time again), never much later than the deadline.
    /// The default sleeps while the deadline is more than 2 ms away and then spins, so that a
    /// generator waiting for the next millisecond wakes within microseconds of it.
    fn wait_until(&self, deadline_nanos: u64) {
        loop {
            let now = self.now_nanos();
            if now >= deadline_nanos {
                return;
            }
            let left = deadline_nanos - now;
            if left > 2 * NANOS_PER_MILLI {
                std::thread::sleep(Duration::from_nanos(left - NANOS_PER_MILLI));
            } else if left > 50_000 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// The operating system's clocks: the wall clock (`CLOCK_REALTIME` on Linux, read through
/// the vDSO) and, for [`monotonic_nanos`](Clock::monotonic_nanos), `CLOCK_MONOTONIC_COARSE`
/// (the vDSO's last tick: about 5 ns a read against 23 ns for the fine clocks, and at most
/// one tick, 1 to 10 ms, behind them).
///
/// The wall clock can move backwards (NTP steps, an operator's `date -s`, a VM restored from a
/// snapshot): floe's generators are built for that. The monotonic clock stands still while
/// the machine is suspended; a lease checks the wall clock as well, which the kernel moves
/// past the time asleep on resume ([`crate::fence`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SystemClock;

#[allow(clippy::disallowed_methods)] // the one place the wall clock is read
impl Clock for SystemClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as u64,
            Err(_) => 0,
        }
    }

    #[inline]
    fn monotonic_nanos(&self) -> u64 {
        monotonic_coarse()
    }

    #[inline]
    fn now_system_time(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// `CLOCK_MONOTONIC_COARSE` in nanoseconds.
#[cfg(target_os = "linux")]
#[inline]
fn monotonic_coarse() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

/// Elsewhere: the standard library's monotonic clock, from the first reading.
#[cfg(not(target_os = "linux"))]
fn monotonic_coarse() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// A clock that only moves when told to: set, advanced or rewound by the test that owns it.
///
/// Clones share the same time, so a test keeps one handle and gives another to a generator.
///
/// **Wall and elapsed time.** [`advance`](Self::advance) is time passing: both readings move.
/// [`rewind`](Self::rewind) and the `set_*` methods are steps of the wall clock: the monotonic
/// reading does not move. So a pause is `advance`, an NTP step back is `rewind`, a pause with
/// the wall clock set back during it is both, and a suspended machine (whose monotonic clock
/// stands still) is a `set_nanos` forward. The monotonic reading starts at 0.
///
/// [`wait_until`](Clock::wait_until) does not block: it moves the clock forward to the
/// deadline (as if the caller had slept until then: both readings move) and records the wait
/// in [`waits`](ManualClock::waits) and [`waited`](ManualClock::waited).
///
/// # Examples
///
/// ```
/// use floe_core::clock::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::from_millis(1_700_000_000_000);
/// clock.advance(Duration::from_millis(5));
/// clock.rewind(Duration::from_millis(2));
/// assert_eq!(clock.now_nanos(), 1_700_000_000_003 * 1_000_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Debug, Default)]
struct ManualInner {
    now: AtomicU64,
    monotonic: AtomicU64,
    waits: AtomicU64,
    waited: AtomicU64,
}

impl ManualClock {
    /// A clock standing at `nanos` since the Unix epoch.
    pub fn from_nanos(nanos: u64) -> Self {
        let clock = Self::default();
        clock.set_nanos(nanos);
        clock
    }

    /// A clock standing at `millis` since the Unix epoch.
    pub fn from_millis(millis: u64) -> Self {
        Self::from_nanos(millis * NANOS_PER_MILLI)
    }

    /// Steps the wall time, forwards or backwards, to `nanos` since the Unix epoch; the
    /// monotonic reading does not move.
    pub fn set_nanos(&self, nanos: u64) {
        self.inner.now.store(nanos, Ordering::SeqCst);
    }

    /// Steps the wall time, forwards or backwards, to `millis` since the Unix epoch; the
    /// monotonic reading does not move.
    pub fn set_millis(&self, millis: u64) {
        self.set_nanos(millis * NANOS_PER_MILLI);
    }

    /// Time passes: both the wall time and the monotonic reading move forwards by `by`.
    pub fn advance(&self, by: Duration) {
        let by = by.as_nanos() as u64;
        self.inner.monotonic.fetch_add(by, Ordering::SeqCst);
        self.inner.now.fetch_add(by, Ordering::SeqCst);
    }

    /// Steps the wall time backwards by `by` (saturating at the Unix epoch); the monotonic
    /// reading does not move.
    pub fn rewind(&self, by: Duration) {
        let by = by.as_nanos() as u64;
        // fetch_update never fails with a closure that always returns Some.
        let _ = self
            .inner
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_sub(by))
            });
    }

    /// The current time in whole milliseconds since the Unix epoch.
    pub fn now_millis(&self) -> u64 {
        self.now_nanos() / NANOS_PER_MILLI
    }

    /// How many times a caller waited on this clock (each call to `wait_until` that had to
    /// move the clock forward).
    pub fn waits(&self) -> u64 {
        self.inner.waits.load(Ordering::SeqCst)
    }

    /// The total time callers waited on this clock.
    pub fn waited(&self) -> Duration {
        Duration::from_nanos(self.inner.waited.load(Ordering::SeqCst))
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.inner.now.load(Ordering::SeqCst)
    }

    #[inline]
    fn monotonic_nanos(&self) -> u64 {
        self.inner.monotonic.load(Ordering::SeqCst)
    }

    fn wait_until(&self, deadline_nanos: u64) {
        let before = self.inner.now.fetch_max(deadline_nanos, Ordering::SeqCst);
        if before < deadline_nanos {
            let waited = deadline_nanos - before;
            self.inner.monotonic.fetch_add(waited, Ordering::SeqCst);
            self.inner.waits.fetch_add(1, Ordering::SeqCst);
            self.inner.waited.fetch_add(waited, Ordering::SeqCst);
        }
    }
}

/// The system's clock with its wall reading moved by an offset that can be changed while it
/// runs (libfaketime's `FAKETIME_TIMESTAMP_FILE` with `DONT_FAKE_MONOTONIC`, in-process): the
/// wall clock stepped back or forward under a running server. The monotonic reading stays the
/// system's, so that worker leases, whose registries measure their windows on it, keep their
/// meaning.
///
/// ```
/// use floe_core::clock::{Clock, OffsetClock, SystemClock};
///
/// let clock = OffsetClock::default();
/// clock.set_offset_ms(-30_000);
/// assert!(clock.now_nanos() < SystemClock.now_nanos());
/// ```
#[derive(Debug, Clone, Default)]
pub struct OffsetClock {
    offset_ms: Arc<std::sync::atomic::AtomicI64>,
}

impl OffsetClock {
    /// Moves the wall reading to the system's plus `offset_ms` (negative: behind).
    pub fn set_offset_ms(&self, offset_ms: i64) {
        self.offset_ms.store(offset_ms, Ordering::SeqCst);
    }
}

impl Clock for OffsetClock {
    fn now_nanos(&self) -> u64 {
        let offset = i128::from(self.offset_ms.load(Ordering::SeqCst)) * 1_000_000;
        let now = i128::from(SystemClock.now_nanos()) + offset;
        now.clamp(0, i128::from(u64::MAX)) as u64
    }

    fn monotonic_nanos(&self) -> u64 {
        SystemClock.monotonic_nanos()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
    #[inline]
    fn monotonic_nanos(&self) -> u64 {
        (**self).monotonic_nanos()
    }
    #[inline]
    fn now_system_time(&self) -> SystemTime {
        (**self).now_system_time()
    }
    fn wait_until(&self, deadline_nanos: u64) {
        (**self).wait_until(deadline_nanos)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
    #[inline]
    fn monotonic_nanos(&self) -> u64 {
        (**self).monotonic_nanos()
    }
    #[inline]
    fn now_system_time(&self) -> SystemTime {
        (**self).now_system_time()
    }
    fn wait_until(&self, deadline_nanos: u64) {
        (**self).wait_until(deadline_nanos)
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
    #[inline]
    fn monotonic_nanos(&self) -> u64 {
        (**self).monotonic_nanos()
    }
    #[inline]
    fn now_system_time(&self) -> SystemTime {
        (**self).now_system_time()
    }
    fn wait_until(&self, deadline_nanos: u64) {
        (**self).wait_until(deadline_nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::from_millis(10);
        assert_eq!(c.now_millis(), 10);
        c.advance(Duration::from_millis(3));
        assert_eq!(c.now_millis(), 13);
        c.rewind(Duration::from_millis(20));
        assert_eq!(c.now_nanos(), 0);
        c.set_millis(7);
        assert_eq!(c.now_millis(), 7);
    }

    #[test]
    fn manual_wait_moves_forward_and_counts() {
        let c = ManualClock::from_millis(10);
        c.wait_until(12 * NANOS_PER_MILLI);
        assert_eq!(c.now_millis(), 12);
        assert_eq!(c.waits(), 1);
        assert_eq!(c.waited(), Duration::from_millis(2));
        // A deadline in the past is no wait.
        c.wait_until(NANOS_PER_MILLI);
        assert_eq!(c.waits(), 1);
        assert_eq!(c.now_millis(), 12);
    }

    #[test]
    fn monotonic_time_moves_with_time_passing_never_with_steps() {
        let c = ManualClock::from_millis(1_000);
        assert_eq!(c.monotonic_nanos(), 0);
        c.advance(Duration::from_millis(5));
        assert_eq!(c.monotonic_nanos(), 5 * NANOS_PER_MILLI);
        c.rewind(Duration::from_millis(100));
        c.set_millis(9_000);
        assert_eq!(c.monotonic_nanos(), 5 * NANOS_PER_MILLI);
        // A wait is time passing.
        c.wait_until(9_002 * NANOS_PER_MILLI);
        assert_eq!(c.monotonic_nanos(), 7 * NANOS_PER_MILLI);
    }

    #[test]
    fn system_monotonic_clock_moves_forward_with_real_time() {
        let c = SystemClock;
        let a = c.monotonic_nanos();
        std::thread::sleep(Duration::from_millis(30));
        let b = c.monotonic_nanos();
        // Coarse: within a tick (at most 10 ms) of the 30 ms slept.
        assert!(b >= a + 20 * NANOS_PER_MILLI, "{a} {b}");
    }

    #[test]
    fn clones_share_time() {
        let a = ManualClock::from_millis(1);
        let b = a.clone();
        a.advance(Duration::from_millis(1));
        assert_eq!(b.now_millis(), 2);
    }

    #[test]
    fn system_clock_is_after_2020_and_waits() {
        let c = SystemClock;
        let now = c.now_nanos();
        assert!(now > 1_577_836_800 * 1_000_000_000);
        // A deadline 1 ms ahead: wait_until returns at or after it.
        let deadline = c.now_nanos() + NANOS_PER_MILLI;
        c.wait_until(deadline);
        assert!(c.now_nanos() >= deadline);
    }
}
