//! Shared helpers of floe's benchmarks (the benches are in `benches/`).
//!
//! Saturation is measured over a fixed batch of IDs split across threads: the time a batch
//! takes, against the layout's cap, is the share of the cap reached. Nothing here lets a
//! generator borrow future time: every generator benched waits for its clock.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

/// Generates `total` IDs split over `threads` threads with `next`, and returns the wall time.
pub fn batch<T>(threads: usize, total: u64, next: &(impl Fn() -> T + Sync)) -> Duration {
    let per = total / threads as u64;
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..per {
                    std::hint::black_box(next());
                }
            });
        }
    });
    start.elapsed()
}
