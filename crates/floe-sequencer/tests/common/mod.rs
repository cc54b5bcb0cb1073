//! Helpers shared by the sequencer tests: the stores under test, each on the real server
//! scripts/test.sh starts, and unique keys.
#![allow(dead_code)] // each test binary uses a part of them

use std::sync::Arc;

use floe_sequencer::{Key, Store};

/// A key no other test (or earlier run on the same server) uses.
pub fn key(name: &str) -> Key {
    Key::new(floe_testkit::unique(name)).unwrap()
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
