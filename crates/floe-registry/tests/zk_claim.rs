//! ZooKeeper: a holder whose claim lapses is fenced (real server from scripts/test.sh).
#![cfg(feature = "zookeeper")]

use floe_core::clock::SystemClock;
use floe_core::snowflake::{Layout, SnowflakeError};
use floe_registry::cache::LocalCache;
use floe_registry::lease::{acquire, LeaseConfig};
use floe_registry::{ErrorKind, IdSpace, Identity};

mod common;

use common::{generator, unique_root};
use floe_testkit::env;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_claim_fences_the_generator() {
    let server = env("FLOE_TEST_ZOOKEEPER");
    let root = unique_root("floe-claim");
    let registry = floe_registry::open(&format!("zk://{server}{root}"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let config = LeaseConfig::new(
        Identity::new("orders", "h1", 8080),
        IdSpace::snowflake(&Layout::LEAF),
    );
    let lease = acquire(registry.as_ref(), &cache, &config, &SystemClock)
        .await
        .unwrap();
    let gen = generator(&lease);
    gen.next_id().unwrap();
    lease
        .heartbeat(registry.as_ref(), &cache, gen.last_timestamp_ms())
        .await
        .unwrap();
    // The holder node goes (as when the session expires): another process could now claim
    // the identity, so this one must stop.
    let admin = zookeeper_client::Client::connect(&server).await.unwrap();
    admin
        .delete(&format!("{root}/orders/holders/h1:8080"), None)
        .await
        .unwrap();
    let err = lease
        .heartbeat(registry.as_ref(), &cache, gen.last_timestamp_ms())
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Conflict, "{err}");
    assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);
}
