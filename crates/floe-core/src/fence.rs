//! A fence: the switch that stops a generator when its right to an ID is in doubt.
//!
//! A worker-ID lease that is lost (the registry says the ID is no longer ours, or an etcd
//! lease expired) must stop every generator using that ID at once, and let them go on when
//! the ID is held again. Generators built with a fence check it on every call and return a
//! `LeaseLost` error while it is closed.
//!
//! **Two ways to close.** The fence is *raised* when the lease's keeper learns that the ID is
//! lost or may be ([`raise`](Fence::raise)). And a fence of a lease that a registry can give
//! away (ZooKeeper, etcd) has a *deadline*: the moment the keeper sent the request that the
//! registry last confirmed, plus the lease's local window, which is shorter than the time
//! after which the registry can give the ID to another process
//! ([`confirm`](Fence::confirm)). The deadline needs no one to act: a process that wakes from
//! a pause (SIGSTOP, a stall, a VM migration) or a node cut off from its registry finds it
//! passed before its first ID, whatever its keeper has or has not noticed, and issues nothing
//! until the registry confirms the lease again.
//!
//! **Two clocks.** The deadline is kept on the monotonic clock ([`Clock::monotonic_nanos`]),
//! which a step of the wall clock cannot move, and on the wall clock too: a machine that was
//! suspended finds its monotonic clock stood still while its wall clock moved on, so either
//! reading past its deadline closes the fence. A step of the wall clock forwards closes it
//! early (until the next confirmation), never late.
//!
//! **Cost:** a generator whose fence has no deadline reads two atomics; with a deadline, three
//! and the coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`, about 5 ns).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use crate::clock::Clock;

/// The deadline of a fence that has none.
const NO_DEADLINE: u64 = u64::MAX;

/// `stopped`: raised (a lowering lets generators run again).
const RAISED: u8 = 1;
/// `stopped`: retired (for good: nothing lowers it).
const RETIRED: u8 = 2;

/// A shareable stop switch with an optional local deadline; share it with `Arc<Fence>`.
#[derive(Debug)]
pub struct Fence {
    /// [`RAISED`] and [`RETIRED`]: generators run while it is 0 (one load).
    stopped: AtomicU8,
    periods: AtomicU64,
    /// Monotonic nanoseconds from which no ID is issued ([`NO_DEADLINE`]: none). Written after
    /// `until_wall`, read before it, so that a reader that sees a deadline sees its wall twin.
    until_mono: AtomicU64,
    /// Wall nanoseconds from which no ID is issued (read only when `until_mono` is a deadline).
    until_wall: AtomicU64,
}

impl Default for Fence {
    fn default() -> Self {
        Fence::new()
    }
}

/// The two clock readings taken when a request to the registry was sent, from which a
/// confirmed lease runs its window ([`Fence::confirm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Wall nanoseconds ([`Clock::now_nanos`]).
    pub wall_nanos: u64,
    /// Monotonic nanoseconds ([`Clock::monotonic_nanos`]).
    pub mono_nanos: u64,
}

impl Sent {
    /// The readings of `clock` now, taken just before a request is sent.
    pub fn now(clock: &(impl Clock + ?Sized)) -> Sent {
        // Monotonic first: the later wall reading only makes the wall deadline later by the
        // nanoseconds between them, which the window's margin covers.
        let mono_nanos = clock.monotonic_nanos();
        Sent {
            wall_nanos: clock.now_nanos(),
            mono_nanos,
        }
    }
}

impl Fence {
    /// A lowered fence without a deadline (generators run until it is raised).
    pub const fn new() -> Self {
        Fence {
            stopped: AtomicU8::new(0),
            periods: AtomicU64::new(0),
            until_mono: AtomicU64::new(NO_DEADLINE),
            until_wall: AtomicU64::new(NO_DEADLINE),
        }
    }

    /// Stops the generators. Returns whether this call raised it (it was down).
    pub fn raise(&self) -> bool {
        let was_down = self.stopped.fetch_or(RAISED, Ordering::AcqRel) == 0;
        if was_down {
            self.periods.fetch_add(1, Ordering::Relaxed);
        }
        was_down
    }

    /// Lets the generators run again (until the deadline, if the fence has one), unless it was
    /// retired.
    pub fn lower(&self) {
        self.stopped.fetch_and(!RAISED, Ordering::AcqRel);
    }

    /// Stops the generators for good (a clean shutdown is about to say they stopped): unlike
    /// [`raise`](Self::raise), no [`lower`](Self::lower) undoes it.
    pub fn retire(&self) {
        if self.stopped.fetch_or(RETIRED, Ordering::AcqRel) == 0 {
            self.periods.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether the fence is raised or retired (the deadline aside: see
    /// [`admits`](Self::admits)).
    #[inline]
    pub fn is_raised(&self) -> bool {
        self.stopped.load(Ordering::Acquire) != 0
    }

    /// The registry confirmed the lease in answer to a request sent at `sent`: generators may
    /// issue until `sent + window` on both clocks. The lease's keeper calls it, one request at
    /// a time, in the order sent; the latest confirmation sets the deadline (so a wall clock
    /// stepped back shortens it rather than keeping the earlier, longer one).
    pub fn confirm(&self, sent: Sent, window: Duration) {
        let window = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
        let mono = sent.mono_nanos.saturating_add(window).min(NO_DEADLINE - 1);
        let before = self.until_mono.load(Ordering::Acquire);
        if before != NO_DEADLINE && before <= sent.mono_nanos && !self.is_raised() {
            // The deadline had passed when this request was sent: a fenced period.
            self.periods.fetch_add(1, Ordering::Relaxed);
        }
        self.until_wall
            .store(sent.wall_nanos.saturating_add(window), Ordering::Release);
        self.until_mono.store(mono, Ordering::Release);
    }

    /// Whether generators may issue an ID now: the fence is down and, if it has a deadline,
    /// neither clock has reached it. `wall_now` is the wall reading the generator took for the
    /// ID; `monotonic` reads the monotonic clock, called only when there is a deadline.
    #[inline]
    pub fn admits(&self, wall_now: u64, monotonic: impl FnOnce() -> u64) -> bool {
        if self.stopped.load(Ordering::Acquire) != 0 {
            return false;
        }
        let until = self.until_mono.load(Ordering::Acquire);
        until == NO_DEADLINE
            || (wall_now < self.until_wall.load(Ordering::Acquire) && monotonic() < until)
    }

    /// [`admits`](Self::admits) with both readings taken from `clock` now.
    pub fn admits_now(&self, clock: &impl Clock) -> bool {
        self.admits(clock.now_nanos(), || clock.monotonic_nanos())
    }

    /// How long generators may still issue (zero when closed), by `clock`; `None` when the
    /// fence has no deadline and is down.
    pub fn remaining(&self, clock: &impl Clock) -> Option<Duration> {
        if self.is_raised() {
            return Some(Duration::ZERO);
        }
        let until = self.until_mono.load(Ordering::Acquire);
        if until == NO_DEADLINE {
            return None;
        }
        let wall_left = self
            .until_wall
            .load(Ordering::Acquire)
            .saturating_sub(clock.now_nanos());
        let mono_left = until.saturating_sub(clock.monotonic_nanos());
        Some(Duration::from_nanos(wall_left.min(mono_left)))
    }

    /// Whether the fence has a deadline (its lease can be given away by a registry).
    pub fn has_deadline(&self) -> bool {
        self.until_mono.load(Ordering::Acquire) != NO_DEADLINE
    }

    /// How many times the fence closed: raised, or found past its deadline by the next
    /// confirmation (fenced periods, for metrics).
    pub fn periods(&self) -> u64 {
        self.periods.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, NANOS_PER_MILLI};

    #[test]
    fn raise_lower_and_count() {
        let f = Fence::new();
        assert!(!f.is_raised());
        assert!(f.raise());
        assert!(!f.raise());
        assert!(f.is_raised());
        f.lower();
        assert!(!f.is_raised());
        f.raise();
        assert_eq!(f.periods(), 2);
    }

    #[test]
    fn without_a_deadline_only_raising_closes_it_and_the_clock_is_not_read() {
        let f = Fence::new();
        assert!(f.admits(u64::MAX - 1, || panic!("read the monotonic clock")));
        assert_eq!(f.remaining(&ManualClock::default()), None);
        f.raise();
        assert!(!f.admits(0, || 0));
    }

    #[test]
    fn a_confirmed_window_runs_from_the_send_not_from_the_answer() {
        let clock = ManualClock::from_millis(1_000_000);
        let f = Fence::new();
        let sent = Sent::now(&clock);
        // The answer takes 400 ms to come: the window still runs from the send.
        clock.advance(Duration::from_millis(400));
        f.confirm(sent, Duration::from_millis(1_000));
        assert!(f.admits_now(&clock));
        assert_eq!(f.remaining(&clock), Some(Duration::from_millis(600)));
        clock.advance(Duration::from_millis(599));
        assert!(f.admits_now(&clock));
        clock.advance(Duration::from_millis(1));
        assert!(!f.admits_now(&clock), "closed at send + window");
        assert_eq!(f.remaining(&clock), Some(Duration::ZERO));
        // A later confirmation opens it again, and counts the closed period.
        f.confirm(Sent::now(&clock), Duration::from_millis(1_000));
        assert!(f.admits_now(&clock));
        assert_eq!(f.periods(), 1);
    }

    #[test]
    fn a_pause_closes_it_before_the_first_id_after_waking() {
        let clock = ManualClock::from_millis(1_000_000);
        let f = Fence::new();
        f.confirm(Sent::now(&clock), Duration::from_secs(4));
        // SIGSTOP for 10 s: nothing ran, the keeper noticed nothing.
        clock.advance(Duration::from_secs(10));
        assert!(!f.admits_now(&clock));
    }

    #[test]
    fn a_wall_clock_stepped_back_during_a_pause_does_not_lengthen_it() {
        let clock = ManualClock::from_millis(1_000_000);
        let f = Fence::new();
        f.confirm(Sent::now(&clock), Duration::from_secs(4));
        clock.advance(Duration::from_secs(10));
        clock.rewind(Duration::from_secs(9));
        // The wall clock says 1 s passed; the monotonic clock says 10.
        assert!(!f.admits_now(&clock));
    }

    #[test]
    fn a_suspended_machine_is_caught_by_the_wall_clock() {
        let clock = ManualClock::from_millis(1_000_000);
        let f = Fence::new();
        f.confirm(Sent::now(&clock), Duration::from_secs(4));
        // Suspended for a minute: the monotonic clock stood still, the wall clock moved on.
        clock.set_millis(1_060_000);
        assert_eq!(clock.monotonic_nanos(), 0);
        assert!(!f.admits_now(&clock));
    }

    #[test]
    fn raise_wins_over_a_deadline_and_retire_over_lower() {
        let clock = ManualClock::from_millis(5_000);
        let f = Fence::new();
        f.confirm(Sent::now(&clock), Duration::from_secs(1));
        assert!(f.has_deadline());
        assert!(f.admits_now(&clock));
        f.raise();
        f.confirm(Sent::now(&clock), Duration::from_secs(1));
        assert!(
            !f.admits_now(&clock),
            "raised: a confirmation does not lower it"
        );
        f.lower();
        assert!(f.admits_now(&clock));
        assert_eq!(
            f.remaining(&clock),
            Some(Duration::from_nanos(1_000 * NANOS_PER_MILLI))
        );
        // Retired: a keeper's late lowering (the ID held again) does not undo it.
        f.retire();
        f.lower();
        f.confirm(Sent::now(&clock), Duration::from_secs(1));
        assert!(!f.admits_now(&clock));
        assert!(f.is_raised());
    }
}
