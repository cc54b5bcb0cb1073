//! Progress on standard error for long `floe gen` / `floe seq` runs: only when standard error
//! is a terminal, only for `-n` of at least [`MIN_COUNT`], and only once a run has taken
//! [`AFTER`]; silent otherwise (a pipe, a log file, a short run). The clock is looked at once
//! every [`CHECK_EVERY`] IDs, so the hot loop pays an add and a mask.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The smallest `-n` that may show progress.
pub(crate) const MIN_COUNT: u64 = 100_000;
/// How long a run goes before its progress shows.
pub(crate) const AFTER: Duration = Duration::from_secs(1);
/// How many IDs between two looks at the clock (a power of two).
const CHECK_EVERY: u64 = 1 << 14;

/// The progress of one run of `total` IDs.
#[derive(Debug)]
pub(crate) struct Progress {
    total: u64,
    done: u64,
    /// The next count at which the clock is looked at (`u64::MAX`: never, it is off).
    next_check: u64,
    started: Instant,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Progress for `total` IDs: off unless standard error is a terminal and `total` is at
    /// least [`MIN_COUNT`].
    pub(crate) fn new(total: u64) -> Progress {
        let on = total >= MIN_COUNT && std::io::stderr().is_terminal();
        Progress {
            total,
            done: 0,
            next_check: if on { CHECK_EVERY } else { u64::MAX },
            started: Instant::now(),
            bar: None,
        }
    }

    /// `n` more IDs written.
    #[inline]
    pub(crate) fn add(&mut self, n: u64) {
        self.done = self.done.saturating_add(n);
        if self.done >= self.next_check {
            self.check();
        }
    }

    #[cold]
    fn check(&mut self) {
        self.next_check = self.done.saturating_add(CHECK_EVERY);
        match &self.bar {
            Some(bar) => bar.set_position(self.done),
            None if self.started.elapsed() >= AFTER => {
                // Its clock starts with the run, not with the bar.
                let bar = ProgressBar::with_draw_target(
                    Some(self.total),
                    ProgressDrawTarget::stderr_with_hz(4),
                )
                .with_elapsed(self.started.elapsed());
                if let Ok(style) = ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {human_pos}/{human_len} IDs ({percent}%), {eta} left",
                ) {
                    bar.set_style(style.progress_chars("=> "));
                }
                bar.set_position(self.done);
                self.bar = Some(bar);
            }
            None => {}
        }
    }

    /// The run ended (done or failed): the bar, if shown, is cleared.
    pub(crate) fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_runs_never_look_at_the_clock() {
        let mut p = Progress::new(MIN_COUNT - 1);
        assert_eq!(p.next_check, u64::MAX);
        p.add(MIN_COUNT - 1);
        assert!(p.bar.is_none());
    }
}
