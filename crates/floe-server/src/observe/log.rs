//! Warnings in the log, rate-limited per topic.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a warning is about: each topic is limited on its own, so that a store that fails
/// every request does not hide a clock refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Topic {
    /// A store's error.
    Store = 0,
    /// A clock refused or a time bound not moving.
    Clock = 1,
    /// An error kind the server does not map.
    Internal = 2,
    /// A request refused for its token.
    Auth = 3,
}

/// A warning in the log, at most one a second per [`Topic`] (a store that is down fails every
/// request: the log says so once a second, with how many lines it left out).
pub(crate) fn warn(topic: Topic, line: std::fmt::Arguments<'_>) {
    static LAST: [Mutex<Option<(Instant, u64)>>; 4] = [
        Mutex::new(None),
        Mutex::new(None),
        Mutex::new(None),
        Mutex::new(None),
    ];
    let mut last = LAST[topic as usize]
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let now = Instant::now();
    match &mut *last {
        Some((at, left_out)) if now.duration_since(*at) < Duration::from_secs(1) => {
            *left_out = left_out.saturating_add(1);
        }
        _ => {
            let left_out = last.map_or(0, |(_, n)| n);
            if left_out > 0 {
                tracing::warn!(
                    left_out,
                    "{line} ({left_out} line(s) left out since the last)"
                );
            } else {
                tracing::warn!("{line}");
            }
            *last = Some((now, 0));
        }
    }
}
