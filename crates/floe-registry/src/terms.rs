//! A lease's terms: how long a holder may issue IDs after the registry last confirmed its
//! claim, and how long a process that takes an ID over waits before it issues.
//!
//! Two durations, chosen apart (lease rule 2, [`crate::LEASE_RULE`]):
//!
//! - **The expiry `T`**, the registry's own: the ZooKeeper session timeout the server granted,
//!   the etcd lease's TTL. It only says how soon a dead holder's *claim* goes (its holder node
//!   or key), so that a restarted or replacement process finds the identity unclaimed. It is
//!   short (6 s, 10 s), and bounds nothing else. Confirmations go every `T/6`.
//! - **The reach `H`**, the operator's (`?reach=SECONDS`, 900 s by default, 1 s to 7 days): how
//!   long a holder that hears nothing from its registry goes on issuing. A holder issues IDs
//!   only until its **window `W = H - m`** after sending the request the registry last
//!   confirmed (an etcd keep-alive answered; a ZooKeeper write on the session answered), on its
//!   monotonic clock ([`floe_core::fence`]), whether its session or lease still stands or not.
//!   The **margin `m = H/10`** (90 s at the default) covers the monotonic clocks of holder and
//!   taker running at different rates (2% each way would use 0.04 H), the coarse clock's tick,
//!   and a VM paused with its clock frozen for less than about `2m`.
//! - **A takeover waits** ([`LeaseTerms::takeover_wait`]). A process that takes over an ID
//!   whose last holder did not close it cleanly (reclaimed, the same identity on another
//!   state directory, a registry that forgot the holder) issues only after `H + m` (the larger
//!   of the previous holder's reach, as its record says, and its own), 2% and 50 ms have passed
//!   on its monotonic clock from the moment it found the claim gone: after every request the
//!   old holder had confirmed (a write on an expired session fails, a keep-alive of an ended
//!   lease is refused). The old holder stopped at most `H - m` after its last confirmed send,
//!   which was before that moment.
//!
//! A registry that comes back within `W` re-confirms every claim at once (held again under a
//! new session or lease if the old one ended meanwhile): an outage shorter than `W` stops no
//! generator. The cost is the takeover wait: an ID whose holder crashed is parked for `H + m`
//! unless its own state directory continues it ([`crate::lease`]).
//!
//! Records written under lease rule 1 (before the reach) name a window of `2T/3`; their reach
//! counts as `3/2` of it, the expiry.
//!
//! The file registry's claim is an OS lock that only ends with the process: no window, no
//! wait. A static ID has no claim at all: keeping it unique is the operator's promise.

use std::time::Duration;

/// The reach by default: a registry down for 10 minutes stops no generator (the window is
/// 13.5 minutes), and a crashed holder's ID is parked for 16.5 minutes.
pub const DEFAULT_REACH: Duration = Duration::from_secs(900);

/// The shortest reach floe accepts.
pub const MIN_REACH: Duration = Duration::from_secs(1);

/// The longest reach floe accepts (7 days), and so the longest a takeover waits (with its
/// margin).
pub const MAX_REACH: Duration = Duration::from_secs(7 * 24 * 3600);

/// How a registry's lease ends, and the local window and rhythm derived from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    /// `T`: the earliest the registry can drop the holder's claim after the holder's last
    /// request it saw (ZooKeeper's negotiated session timeout, etcd's lease TTL).
    pub expiry: Duration,
    /// `H`: how long a holder cut off from its registry may go on issuing, margin included.
    pub reach: Duration,
    /// `W = H - H/10`: how long after sending a confirmed request the holder may issue.
    pub window: Duration,
    /// `min(T/6, W/4)`: how often the holder asks the registry to confirm its claim: six
    /// times within the registry's expiry, and at least four times within the window (a
    /// reach shorter than the expiry would otherwise let the window close between two
    /// confirmations of a healthy registry).
    pub confirm_every: Duration,
}

/// The margin of a reach: a tenth of it.
pub fn margin(reach: Duration) -> Duration {
    reach / 10
}

impl LeaseTerms {
    /// The terms of a registry whose claims expire `expiry` after the last request it saw,
    /// with reach `reach` (kept within [`MIN_REACH`] and [`MAX_REACH`]).
    pub fn new(expiry: Duration, reach: Duration) -> Self {
        let reach = reach.clamp(MIN_REACH, MAX_REACH);
        let window = reach - margin(reach);
        LeaseTerms {
            expiry,
            reach,
            window,
            confirm_every: (expiry / 6).min(window / 4).max(Duration::from_millis(50)),
        }
    }

    /// The window in whole milliseconds.
    pub fn window_ms(&self) -> u64 {
        u64::try_from(self.window.as_millis()).unwrap_or(u64::MAX)
    }

    /// The reach in whole milliseconds, as worker records keep it.
    pub fn reach_ms(&self) -> u64 {
        u64::try_from(self.reach.as_millis()).unwrap_or(u64::MAX)
    }

    /// How long a process that took over an ID must wait before issuing, counted from the
    /// moment it found the previous holder's claim gone: the previous holder's reach
    /// (`previous_reach_ms`, as its record says), at least `own` (the record may be old or
    /// edited) and at most [`MAX_REACH`], and its margin, plus 2% for the two monotonic clocks
    /// running at different rates, plus 50 ms for the coarse clock's tick and scheduling.
    pub fn takeover_wait(previous_reach_ms: u64, own: Duration) -> Duration {
        let reach = Duration::from_millis(previous_reach_ms)
            .max(own)
            .min(MAX_REACH);
        let wait = reach + margin(reach);
        wait + wait / 50 + Duration::from_millis(50)
    }

    /// How long this process waits when it takes over an ID held under these terms (its own
    /// reach and the previous holder's alike).
    pub fn own_takeover_wait(&self) -> Duration {
        Self::takeover_wait(self.reach_ms(), self.reach)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_in_numbers() {
        // ZooKeeper's 6 s session at the default reach: confirm every 1 s, issue for 13.5 min
        // after a confirmed send; a takeover waits 16.5 min + 2% + 50 ms.
        let zk = LeaseTerms::new(Duration::from_secs(6), DEFAULT_REACH);
        assert_eq!(zk.confirm_every, Duration::from_secs(1));
        assert_eq!(zk.window, Duration::from_secs(810));
        assert_eq!(zk.reach_ms(), 900_000);
        assert_eq!(zk.own_takeover_wait(), Duration::from_millis(1_009_850));
        // etcd's default TTL of 10 s: every 1.67 s.
        let etcd = LeaseTerms::new(Duration::from_secs(10), DEFAULT_REACH);
        assert_eq!(etcd.confirm_every.as_millis(), 1_666);
        // A short reach, as the tests use: issue 2.7 s, take over after 3.416 s.
        let short = LeaseTerms::new(Duration::from_secs(6), Duration::from_secs(3));
        assert_eq!(short.window, Duration::from_millis(2_700));
        assert_eq!(short.own_takeover_wait(), Duration::from_millis(3_416));
        assert_eq!(short.confirm_every, Duration::from_millis(675));
        // A reach of 1 s on etcd's default TTL: confirm every 225 ms (not 1.67 s, past the
        // 0.9 s window: a healthy registry would leave the node fenced most of the time).
        let tiny = LeaseTerms::new(Duration::from_secs(10), Duration::from_secs(1));
        assert_eq!(tiny.confirm_every, Duration::from_millis(225));
        // A record's reach below ours (old or edited) counts as ours; absurd ones are capped.
        assert_eq!(
            LeaseTerms::takeover_wait(1, Duration::from_secs(3)),
            Duration::from_millis(3_416)
        );
        assert_eq!(
            LeaseTerms::takeover_wait(u64::MAX, Duration::from_secs(3)),
            Duration::from_millis(678_585_650)
        );
        // Reaches are kept within bounds.
        assert_eq!(
            LeaseTerms::new(Duration::from_secs(6), Duration::ZERO).reach,
            MIN_REACH
        );
    }
}
