//! What floe's tests against real servers share. scripts/test.sh starts the servers and
//! exports `FLOE_TEST_<SERVER>` (its address or URL), `_PID` and `_START` (a script that
//! starts the same server again on the same data) for each.
#![deny(missing_docs)]

use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A variable scripts/test.sh sets (a server's address, pid or start script). A test whose
/// server is missing fails: in CI nothing skips.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the suite with scripts/test.sh, which starts the servers")
    })
}

/// A name no other test (nor an earlier run on the same server) uses:
/// `{prefix}-{pid}-{nanos}-{n}`.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}-{n}", std::process::id())
}

/// A server a test started again itself, stopped when the test ends however it ends.
#[derive(Debug)]
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Kills the process `pid` and its children (PostgreSQL's backends) with SIGKILL, as a crash
/// of the machine would, and waits until it is gone.
pub fn kill9(pid: &str) {
    let _ = Command::new("pkill").args(["-9", "-P", pid]).status();
    let status = Command::new("kill").args(["-9", pid]).status().unwrap();
    assert!(status.success(), "kill -9 {pid}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
    {
        assert!(Instant::now() < deadline, "{pid} still alive");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts a server again with the start script scripts/test.sh wrote for it.
pub fn restart(start_script: &str) -> Server {
    Server(Command::new("bash").arg(start_script).spawn().unwrap())
}
