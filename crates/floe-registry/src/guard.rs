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

/// Compares the clock with the last times recorded by the registry and the cache (the later
/// of the two counts).
///
/// # Errors
/// [`ErrorKind::ClockBehind`], naming the clock's time and both recorded times, when the clock
/// is behind by more than `max_wait`.
pub fn check_start(
    now_ms: u64,
    registry_last_ms: Option<u64>,
    cache_last_ms: Option<u64>,
    max_wait: Duration,
) -> Result<StartCheck, RegistryError> {
    let last = registry_last_ms
        .unwrap_or(0)
        .max(cache_last_ms.unwrap_or(0));
    if now_ms >= last {
        return Ok(StartCheck::Start);
    }
    let behind = last - now_ms;
    if u128::from(behind) <= max_wait.as_millis() {
        return Ok(StartCheck::WaitUntil(last));
    }
    let show = |t: Option<u64>| t.map_or_else(|| "none".to_string(), |t| format!("{t} ms"));
    Err(RegistryError::new(
        ErrorKind::ClockBehind,
        format!(
            "clock is {behind} ms behind the last recorded time: now {now_ms} ms, last recorded by the registry {}, by the local cache {}; refusing to start (IDs from that time may already exist). Fix the clock, or wait until it passes {last} ms",
            show(registry_last_ms),
            show(cache_last_ms),
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_wait_or_refuse() {
        let w = Duration::from_millis(50);
        assert_eq!(check_start(1000, None, None, w).unwrap(), StartCheck::Start);
        assert_eq!(
            check_start(1000, Some(1000), Some(900), w).unwrap(),
            StartCheck::Start
        );
        assert_eq!(
            check_start(1000, Some(1020), Some(1040), w).unwrap(),
            StartCheck::WaitUntil(1040)
        );
        let e = check_start(1000, Some(2000), Some(1500), w).unwrap_err();
        assert_eq!(e.kind, ErrorKind::ClockBehind);
        assert!(e.message.contains("now 1000 ms"), "{e}");
        assert!(e.message.contains("registry 2000 ms"), "{e}");
        assert!(e.message.contains("cache 1500 ms"), "{e}");
        let e = check_start(1000, None, Some(1500), Duration::ZERO).unwrap_err();
        assert!(e.message.contains("registry none"), "{e}");
    }
}
