//! The start-up clock guard: refuse to issue IDs from a clock that is behind the last time a
//! previous run (or a previous holder of the ID) was alive.

use std::time::Duration;

use crate::{ErrorKind, RegistryError};

/// What the guard decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartCheck {
    /// The clock is at or past the last recorded time: start now.
    Start,
    /// The clock is behind by no more than the allowed wait: start at this Unix ms.
    WaitUntil(u64),
}

/// Compares the clock with the times recorded before this start (by the registry, the local
/// cache and the durable time bound; the latest counts). Each is named for the message; `None`
/// means that source recorded nothing.
///
/// # Errors
/// [`ErrorKind::ClockBehind`], naming the clock's time and every recorded time, when the clock
/// is behind by more than `max_wait`.
pub fn check_start(
    now_ms: u64,
    recorded: &[(&str, Option<u64>)],
    max_wait: Duration,
) -> Result<StartCheck, RegistryError> {
    let last = recorded.iter().filter_map(|(_, t)| *t).max().unwrap_or(0);
    if now_ms >= last {
        return Ok(StartCheck::Start);
    }
    let behind = last - now_ms;
    if u128::from(behind) <= max_wait.as_millis() {
        return Ok(StartCheck::WaitUntil(last));
    }
    let show = |t: Option<u64>| t.map_or_else(|| "none".to_string(), |t| format!("{t} ms"));
    let sources: Vec<String> = recorded
        .iter()
        .map(|(name, t)| format!("by {name} {}", show(*t)))
        .collect();
    Err(RegistryError::new(
        ErrorKind::ClockBehind,
        format!(
            "clock is {behind} ms behind the last recorded time, more than the {} ms floe waits: now {now_ms} ms, last recorded {}; refusing to start (IDs up to that time may already exist). Fix the clock, or wait until it passes {last} ms",
            max_wait.as_millis(),
            sources.join(", "),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_wait_or_refuse() {
        let w = Duration::from_millis(50);
        let two = |r, c| [("the registry", r), ("the local cache", c)];
        assert_eq!(
            check_start(1000, &two(None, None), w).unwrap(),
            StartCheck::Start
        );
        assert_eq!(
            check_start(1000, &two(Some(1000), Some(900)), w).unwrap(),
            StartCheck::Start
        );
        assert_eq!(
            check_start(1000, &two(Some(1020), Some(1040)), w).unwrap(),
            StartCheck::WaitUntil(1040)
        );
        let e = check_start(1000, &two(Some(2000), Some(1500)), w).unwrap_err();
        assert_eq!(e.kind, ErrorKind::ClockBehind);
        assert!(e.message.contains("now 1000 ms"), "{e}");
        assert!(e.message.contains("registry 2000 ms"), "{e}");
        assert!(e.message.contains("cache 1500 ms"), "{e}");
        let e = check_start(1000, &two(None, Some(1500)), Duration::ZERO).unwrap_err();
        assert!(e.message.contains("registry none"), "{e}");
    }
}
