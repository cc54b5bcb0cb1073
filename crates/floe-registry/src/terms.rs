//! A lease's terms: how long a holder may issue IDs after the registry last confirmed its
//! claim, and how long a process that takes an ID over waits before it issues.
//!
//! A registry that can give an ID to another process (ZooKeeper when a session expires, etcd
//! when a lease ends) does so on its own clock, after its **expiry** `T` has passed since the
//! last request of the holder it saw: the session timeout the ZooKeeper server granted, the
//! etcd lease's TTL. The holder cannot know when that request arrived, only when it *sent* it.
//! So it keeps a local deadline ([`floe_core::fence`]):
//!
//! - **Window `W = 2T/3`.** A holder issues IDs only until `W` after sending the request the
//!   registry last confirmed (an etcd keep-alive answered; a ZooKeeper write on the session
//!   answered). The request reached the server after it was sent, so the server's expiry is
//!   at least `T` after the send: the holder stops at least `T - W = T/3` before. That margin
//!   covers a monotonic clock running slow against the server's (1% would use 0.01 T), the
//!   coarse clock's tick (at most 10 ms), a VM paused with its clock frozen for less than
//!   `T/3`, and an etcd leader that renewed a lease after losing its quorum (about an election
//!   timeout, 1 s). After a ZooKeeper takeover too: there the new holder waits the whole
//!   window and that margin (below), as the lease model showed it must
//!   (`crates/floe-lease-model`, `zookeeper_takeovers_cover_a_frozen_clock`).
//! - **Confirmations every `T/6`**, so that two lost or slow in a row still leave the window
//!   open: a blip on the network does not stop generation.
//! - **A takeover waits** ([`LeaseTerms::takeover_wait`]). A process that takes over an ID
//!   whose last holder did not close it cleanly (reclaimed by `reclaim_after`, or the same
//!   identity restarted while the previous holder's claim lapsed) issues only after that
//!   holder's window, plus a margin, has passed since the holder's last sign of life as the
//!   registry recorded it. On etcd the registry's own expiry is that sign plus `T`, more than
//!   `W` plus the margin: the claim can only be taken once the lease is gone, so no extra
//!   wait is needed. On ZooKeeper the leader learns of a session's requests from followers
//!   with a delay of up to half a tick (and not at all if the follower is cut off just after),
//!   so its expiry can come before the holder's window ends: the new holder waits the whole
//!   window, its margin (`W/2`: `T` in all) and 4% and 50 ms from the moment it found the ID
//!   free, which is after every request
//!   the old holder had confirmed (a write on an expired session fails).
//!
//! The file registry's claim is an OS lock that only ends with the process: no window, no
//! wait. A static ID has no claim at all: keeping it unique is the operator's promise.

use std::time::Duration;

/// The longest window: 2/3 of the longest expiry floe accepts (3600 s, `?ttl=`,
/// `?session_timeout=`).
pub const MAX_WINDOW: Duration = Duration::from_secs(2400);

/// How a registry's lease ends, and the local window and rhythm derived from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    /// `T`: the earliest the registry can give the ID away after the holder's last request it
    /// saw (ZooKeeper's negotiated session timeout, etcd's lease TTL).
    pub expiry: Duration,
    /// `W = 2T/3`: how long after sending a confirmed request the holder may issue.
    pub window: Duration,
    /// `T/6`: how often the holder asks the registry to confirm its claim.
    pub confirm_every: Duration,
}

impl LeaseTerms {
    /// The terms of a registry whose claims expire `expiry` after the last request it saw.
    pub fn for_expiry(expiry: Duration) -> Self {
        LeaseTerms {
            expiry,
            window: expiry * 2 / 3,
            confirm_every: (expiry / 6).max(Duration::from_millis(50)),
        }
    }

    /// The window in whole milliseconds, as worker records keep it.
    pub fn window_ms(&self) -> u64 {
        u64::try_from(self.window.as_millis()).unwrap_or(u64::MAX)
    }

    /// How long a process that took over an ID must wait before issuing, when the registry's
    /// expiry does not already imply it (ZooKeeper): the previous holder's window
    /// (`previous_window_ms`, as its record says), at least `own` (the record may be old or
    /// edited) and at most [`MAX_WINDOW`] (what the longest expiry floe accepts gives), and
    /// its margin (half of it, for a holder paused with its clock standing still, as on etcd),
    /// plus 4% for the two monotonic clocks running at different rates (2% each way), plus
    /// 50 ms for the coarse clock's tick and scheduling.
    pub fn takeover_wait(previous_window_ms: u64, own: Duration) -> Duration {
        let window = Duration::from_millis(previous_window_ms)
            .max(own)
            .min(MAX_WINDOW);
        // The window and its margin (half the window: the expiry, `3W/2`), as on etcd.
        let reach = window + window / 2;
        reach + reach / 25 + Duration::from_millis(50)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_in_numbers() {
        // ZooKeeper's 6 s session: issue for 4 s after a confirmed send, confirm every 1 s.
        let zk = LeaseTerms::for_expiry(Duration::from_secs(6));
        assert_eq!(zk.window, Duration::from_secs(4));
        assert_eq!(zk.confirm_every, Duration::from_secs(1));
        assert_eq!(zk.window_ms(), 4_000);
        // etcd's default TTL of 10 s: 6.67 s, every 1.67 s.
        let etcd = LeaseTerms::for_expiry(Duration::from_secs(10));
        assert_eq!(etcd.window.as_millis(), 6_666);
        assert_eq!(etcd.confirm_every.as_millis(), 1_666);
        // A takeover waits the previous holder's window (its own when unknown) and its margin
        // (the expiry, 3W/2) + 4% + 50 ms.
        assert_eq!(
            LeaseTerms::takeover_wait(4_000, Duration::from_secs(1)),
            Duration::from_millis(6_290)
        );
        assert_eq!(
            LeaseTerms::takeover_wait(0, Duration::from_secs(4)),
            Duration::from_millis(6_290)
        );
        // A record's window below ours (old or edited) counts as ours; absurd ones are capped.
        assert_eq!(
            LeaseTerms::takeover_wait(1, Duration::from_secs(4)),
            Duration::from_millis(6_290)
        );
        assert_eq!(
            LeaseTerms::takeover_wait(u64::MAX, Duration::from_secs(4)),
            Duration::from_millis(3_744_050)
        );
    }
}
