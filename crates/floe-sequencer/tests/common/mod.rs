//! Helpers shared by the sequencer tests: the stores under test, each on the real server
//! scripts/test.sh starts, and unique keys.
#![allow(dead_code)] // each test binary uses a part of them

use std::process::Child;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_sequencer::{Key, Store};

/// A variable scripts/test.sh sets (a server's URL, pid or start script).
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the suite with scripts/test.sh, which starts the servers")
    })
}

/// A key no other test (or earlier run on the same server) uses.
pub fn key(name: &str) -> Key {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    Key::new(format!("{name}-{}-{nanos}-{n}", std::process::id())).unwrap()
}

/// The store under test, a second client of the same store (another "process": its own
/// connections and caches; the same instance for stores one process owns), and what must live
/// as long as they do.
pub struct Fixture {
    pub store: Arc<dyn Store>,
    pub second: Arc<dyn Store>,
    pub _dir: tempfile::TempDir,
}

/// Opens the store of `url` twice (once for a store one process owns).
pub async fn fixture(url: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = floe_sequencer::open(url, dir.path())
        .await
        .unwrap_or_else(|e| panic!("open {url}: {e}"));
    let second = if store.capabilities().shared {
        floe_sequencer::open(url, dir.path()).await.unwrap()
    } else {
        Arc::clone(&store)
    };
    Fixture {
        store,
        second,
        _dir: dir,
    }
}

/// A server a test started again itself, stopped when the test ends however it ends.
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
    let _ = std::process::Command::new("pkill")
        .args(["-9", "-P", pid])
        .status();
    let status = std::process::Command::new("kill")
        .args(["-9", pid])
        .status()
        .unwrap();
    assert!(status.success(), "kill -9 {pid}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    {
        assert!(Instant::now() < deadline, "{pid} still alive");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts a server again with the start script scripts/test.sh wrote for it.
pub fn restart(start_script: &str) -> Server {
    Server(
        std::process::Command::new("bash")
            .arg(start_script)
            .spawn()
            .unwrap(),
    )
}
