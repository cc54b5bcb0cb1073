//! Helpers shared by the registry tests that run against real servers.
#![allow(dead_code)] // each test binary uses a part of them

use std::process::Child;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use floe_core::clock::SystemClock;
use floe_core::snowflake::{Layout, SnowflakeConfig, SnowflakeGenerator};
use floe_registry::lease::Lease;

/// A variable scripts/test.sh sets (a server's address, pid or start script).
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the suite with scripts/test.sh, which starts the servers")
    })
}

/// A root path no other test uses: `/{prefix}-{pid}-{nanos}-{n}`.
pub fn unique_root(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("/{prefix}-{}-{nanos}-{n}", std::process::id())
}

/// A server a test started again itself, stopped when the test ends however it ends.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
