//! The non-blocking answer of a generator: an ID now, or the wall time to wait for.

use std::time::Duration;

/// What a generator's `poll_*` method returns when it did not fail.
///
/// Blocking methods (`next_id`, `new_id`) loop over the poll method and
/// [`Clock::wait_until`](crate::clock::Clock::wait_until) the deadline; a server can instead
/// sleep on its own runtime's timer, so no generator ever sleeps while holding a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll<T> {
    /// An ID, issued.
    Ready(T),
    /// No ID can be issued before the wall clock reaches `until_nanos` (Unix nanoseconds).
    Pending {
        /// The wall time to wait for, in nanoseconds since the Unix epoch.
        until_nanos: u64,
        /// Why.
        reason: WaitReason,
    },
}

/// Why a generator asked its caller to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitReason {
    /// Every sequence number of the current time unit was issued.
    SequenceExhausted,
    /// The clock is behind the last issued time by a step small enough to wait out.
    ClockBehind {
        /// How far behind, rounded to the generator's time unit.
        by: Duration,
    },
    /// (sno) A second clock regression into a time both tick-tock timelines have used.
    UnsafePast {
        /// How far the clock is from the first safe time unit.
        by: Duration,
    },
}

impl<T> Poll<T> {
    /// The ID, if one was issued.
    pub fn ready(self) -> Option<T> {
        match self {
            Poll::Ready(v) => Some(v),
            Poll::Pending { .. } => None,
        }
    }
}
