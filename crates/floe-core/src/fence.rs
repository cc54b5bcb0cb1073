//! A fence: the switch that stops a generator when its right to an ID is in doubt.
//!
//! A worker-ID lease that is lost (the registry says the ID is no longer ours, or an etcd
//! lease expired) must stop every generator using that ID at once, and let them go on when
//! the ID is held again. Generators built with a fence check it on every call (one relaxed
//! atomic load) and return a `LeaseLost` error while it is raised.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A shareable stop switch; share it with `Arc<Fence>`.
#[derive(Debug, Default)]
pub struct Fence {
    raised: AtomicBool,
    periods: AtomicU64,
}

impl Fence {
    /// A lowered fence (generators run).
    pub const fn new() -> Self {
        Fence {
            raised: AtomicBool::new(false),
            periods: AtomicU64::new(0),
        }
    }

    /// Stops the generators. Returns whether this call raised it (it was down).
    pub fn raise(&self) -> bool {
        let was_down = !self.raised.swap(true, Ordering::AcqRel);
        if was_down {
            self.periods.fetch_add(1, Ordering::Relaxed);
        }
        was_down
    }

    /// Lets the generators run again.
    pub fn lower(&self) {
        self.raised.store(false, Ordering::Release);
    }

    /// Whether generators are stopped.
    #[inline]
    pub fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }

    /// How many times the fence was raised (fenced periods, for metrics).
    pub fn periods(&self) -> u64 {
        self.periods.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
