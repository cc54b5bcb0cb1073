//! Helpers shared by the registry tests that run against real servers.
#![allow(dead_code)] // each test binary uses a part of them

use std::time::{Duration, Instant};

use floe_core::clock::SystemClock;
use floe_core::snowflake::{Layout, SnowflakeConfig, SnowflakeGenerator};
use floe_registry::lease::Lease;

/// A root path no other test uses: `/{prefix}-{pid}-{nanos}-{n}`.
pub fn unique_root(prefix: &str) -> String {
    format!("/{}", floe_testkit::unique(prefix))
}

/// Waits until `done`, failing the test after `limit`.
pub async fn until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The Leaf generator a lease allows: its worker ID, after its last time, behind its fence.
pub fn generator(lease: &Lease) -> SnowflakeGenerator<SystemClock> {
    SnowflakeConfig::new(Layout::LEAF)
        .worker(u64::from(lease.id))
        .not_before_ms(lease.not_before_ms)
        .fence(lease.fence.clone())
        .build(SystemClock)
        .unwrap()
}
