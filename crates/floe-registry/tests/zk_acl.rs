//! ZooKeeper digest credentials and creator-only ACLs, against the real server from
//! scripts/test.sh that refuses unauthenticated clients (FLOE_TEST_ZOOKEEPER_SECURE: ZooKeeper
//! 3.8 with `enforce.auth.enabled=true`, `enforce.auth.schemes=digest`).
#![cfg(feature = "zookeeper")]

use std::time::{Duration, Instant};

use floe_core::clock::SystemClock;
use floe_core::snowflake::Layout;
use floe_registry::cache::LocalCache;
use floe_registry::lease::{acquire, LeaseConfig};
use floe_registry::zookeeper::{LeafGuard, ZkRegistry};
use floe_registry::{ErrorKind, IdSpace, Identity, Registry};
use zookeeper_client::{Client, CreateMode, Error as ZkError, Permission};

mod common;

use common::{unique_root, Proxy};
use floe_testkit::env;

const PASSWORD: &str = "fl0e-s3cret";

fn server() -> String {
    env("FLOE_TEST_ZOOKEEPER_SECURE")
}

/// A raw session authenticated as `user:password` (digest).
async fn session_as(user: &str, password: &str) -> Client {
    Client::connector()
        .with_auth("digest", format!("{user}:{password}").as_bytes())
        .connect(&server())
        .await
        .unwrap()
}

/// Asserts that `path` carries exactly one ACL: every permission for floe's digest identity.
async fn assert_creator_only(client: &Client, path: &str) {
    let (acls, _) = client
        .get_acl(path)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(acls.len(), 1, "{path}: {acls:?}");
    let acl = &acls[0];
    assert_eq!(acl.scheme(), "digest", "{path}: {acls:?}");
    // digest:USER:base64(sha1(USER:PASSWORD)): the creator's identity, not the password.
    assert!(acl.id().starts_with("floe:"), "{path}: {acls:?}");
    assert!(!acl.id().contains(PASSWORD), "{path}: {acls:?}");
    assert_eq!(acl.permission(), Permission::ALL, "{path}: {acls:?}");
}

fn config(identity: Identity) -> LeaseConfig {
    LeaseConfig::new(identity, IdSpace::snowflake(&Layout::LEAF))
}

/// floe's layout: the root, its directories, the worker record and the holder node are all
/// creator-only; another digest identity (or floe's user with a wrong password) gets NoAuth on
/// every write, delete and read of them, and cannot add a record of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_record_and_its_holder_are_the_creators_alone() {
    let root = unique_root("floe-acl");
    let registry = floe_registry::open(&format!("zk://floe:{PASSWORD}@{}{root}", server()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let lease = acquire(
        registry.as_ref(),
        &cache,
        &config(Identity::new("orders", "h1", 8080)),
        &SystemClock,
    )
    .await
    .unwrap();
    let worker = format!("{root}/orders/workers/{}", lease.id);
    let holder = format!("{root}/orders/holders/h1:8080");

    let floe = session_as("floe", PASSWORD).await;
    for path in [
        root.clone(),
        format!("{root}/orders"),
        format!("{root}/orders/workers"),
        format!("{root}/orders/holders"),
        worker.clone(),
        holder.clone(),
    ] {
        assert_creator_only(&floe, &path).await;
    }
    // The record is intact and floe's (read back with floe's credentials).
    let (data, _) = floe.get_data(&worker).await.unwrap();
    assert!(
        String::from_utf8_lossy(&data).contains("\"h1\""),
        "{data:?}"
    );

    for (user, password) in [("intruder", "other"), ("floe", "wrong-password")] {
        let other = session_as(user, password).await;
        let who = format!("{user} with another password");
        assert_eq!(
            other.set_data(&worker, b"{}", None).await.unwrap_err(),
            ZkError::NoAuth,
            "{who}: rewrite {worker}"
        );
        assert_eq!(
            other.delete(&worker, None).await.unwrap_err(),
            ZkError::NoAuth,
            "{who}: delete {worker}"
        );
        assert_eq!(
            other.set_data(&holder, b"", None).await.unwrap_err(),
            ZkError::NoAuth,
            "{who}: write {holder}"
        );
        assert_eq!(
            other.delete(&holder, None).await.unwrap_err(),
            ZkError::NoAuth,
            "{who}: delete {holder}"
        );
        assert_eq!(
            other.get_data(&worker).await.unwrap_err(),
            ZkError::NoAuth,
            "{who}: read {worker}"
        );
        let persistent = CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
        assert_eq!(
            other
                .create(&format!("{root}/orders/workers/999"), b"{}", &persistent)
                .await
                .unwrap_err(),
            ZkError::NoAuth,
            "{who}: add a worker record"
        );
        assert_eq!(
            other
                .set_acl(&worker, &zookeeper_client::Acls::anyone_all(), None)
                .await
                .unwrap_err(),
            ZkError::NoAuth,
            "{who}: open {worker}'s ACL"
        );
    }
    // All still there, untouched, and the lease still good.
    assert!(floe.check_stat(&holder).await.unwrap().is_some());
    let (after, _) = floe.get_data(&worker).await.unwrap();
    assert_eq!(after, data);
    lease.heartbeat(registry.as_ref(), &cache, 0).await.unwrap();
}

/// A session with no credentials is refused by an enforcing server: opening the registry fails
/// at once with one line naming the cause and the fix, as a configuration error (no retries).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credentials_against_an_enforcing_server_fail_with_one_clear_line() {
    let root = unique_root("floe-acl-none");
    let started = Instant::now();
    let e = floe_registry::open(&format!("zk://{}{root}", server()))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
    let line = e.to_string();
    eprintln!("{line}");
    assert!(!line.contains('\n'), "{line}");
    assert!(line.contains("AuthFailed"), "{line}");
    assert!(line.contains("zk://USER:PASSWORD@"), "{line}");
    assert!(started.elapsed() < Duration::from_secs(10), "{line}");
}

/// floe's user with a wrong password is authenticated by ZooKeeper all the same (a digest
/// identity is whatever the password hashes to), but refused at the first node the right
/// password created: a configuration error naming the node, never the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_refused_at_the_first_acld_node() {
    let root = unique_root("floe-acl-wrong");
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let right = floe_registry::open(&format!("zk://floe:{PASSWORD}@{}{root}", server()))
        .await
        .unwrap();
    let lease = acquire(
        right.as_ref(),
        &cache,
        &config(Identity::new("orders", "h1", 8080)),
        &SystemClock,
    )
    .await
    .unwrap();
    let wrong = floe_registry::open(&format!("zk://floe:not-it@{}{root}", server()))
        .await
        .unwrap();
    let e = wrong
        .register(
            &Identity::new("orders", "h2", 8080),
            IdSpace::snowflake(&Layout::LEAF),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
    let line = e.to_string();
    eprintln!("{line}");
    assert!(line.contains("NoAuth") && line.contains(&root), "{line}");
    assert!(!line.contains("not-it") && !line.contains('\n'), "{line}");
    drop(lease);
}

/// Leaf's layout: Leaf's node and the directories above it stay open to anyone, as Leaf makes
/// them (creator-only would lock Leaf's servers out: NoAuth, then a stale local worker ID),
/// while floe's side record and holder node, and floe's directory, are creator-only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaf_layout_keeps_leafs_nodes_open_and_floes_own_creator_only() {
    let root = format!("{}/snowflake", unique_root("floe-acl-leaf"));
    let registry = ZkRegistry::connect_leaf_with_credentials(
        &server(),
        &root,
        Duration::from_secs(6),
        LeafGuard::DEFAULT,
        Some(floe_core::endpoint::Credentials {
            user: "floe".into(),
            password: PASSWORD.into(),
        }),
    )
    .await
    .unwrap();
    let registration = registry
        .register(
            &Identity::new("orders", "10.0.0.5", 8080),
            IdSpace::snowflake(&Layout::MEITUAN_LEAF),
        )
        .await
        .unwrap();
    let id = registration.record.id;
    let floe = session_as("floe", PASSWORD).await;
    for path in [
        format!("{root}/orders/floe"),
        format!("{root}/orders/floe/workers/10.0.0.5:8080"),
        format!("{root}/orders/floe/holders/10.0.0.5:8080"),
    ] {
        assert_creator_only(&floe, &path).await;
    }
    // A Leaf server (another digest identity on this enforcing server) reads every node of
    // forever, writes its own, and adds new ones.
    let leaf = session_as("leaf", "leafs-own").await;
    let node = format!("{root}/orders/forever/10.0.0.5:8080-{id:010}");
    for path in [
        root.clone(),
        format!("{root}/orders"),
        format!("{root}/orders/forever"),
        node.clone(),
    ] {
        let (acls, _) = floe.get_acl(&path).await.unwrap();
        assert_eq!(acls.len(), 1, "{path}: {acls:?}");
        assert_eq!(
            (acls[0].scheme(), acls[0].id()),
            ("world", "anyone"),
            "{path}"
        );
    }
    let (data, _) = leaf.get_data(&node).await.unwrap();
    leaf.set_data(&node, &data, None).await.unwrap();
    leaf.create(
        &format!("{root}/orders/forever/10.0.0.9:8080-"),
        b"{}",
        &CreateMode::PersistentSequential.with_acls(zookeeper_client::Acls::anyone_all()),
    )
    .await
    .unwrap();
    // floe's own nodes stay floe's.
    let side = format!("{root}/orders/floe/workers/10.0.0.5:8080");
    assert_eq!(
        leaf.set_data(&side, b"{}", None).await.unwrap_err(),
        ZkError::NoAuth
    );
}

/// The credentials are sent again on every connection: a registry cut off from the server
/// (its connections dropped, then its session expired) reconnects, opens a new session and
/// holds its ID again, authenticated (the enforcing server would refuse it otherwise), and
/// the nodes it creates then are still creator-only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_outlive_reconnects_and_new_sessions() {
    let root = unique_root("floe-acl-cut");
    let proxy = Proxy::start(&server()).await;
    let registry = ZkRegistry::connect_with_credentials(
        &proxy.addr,
        &root,
        Duration::from_secs(2),
        Some(floe_core::endpoint::Credentials {
            user: "floe".into(),
            password: PASSWORD.into(),
        }),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = LocalCache::new(dir.path()).unwrap();
    let lease = acquire(
        &registry,
        &cache,
        &config(Identity::new("orders", "h1", 8080)),
        &SystemClock,
    )
    .await
    .unwrap();
    let holder = format!("{root}/orders/holders/h1:8080");
    let floe = session_as("floe", PASSWORD).await;
    let owner = |stat: Option<zookeeper_client::Stat>| stat.map(|s| s.ephemeral_owner);
    let first = owner(floe.check_stat(&holder).await.unwrap()).unwrap();
    // Cut until the server has expired the session: its holder node goes.
    proxy.cut();
    let deadline = Instant::now() + Duration::from_secs(20);
    while owner(floe.check_stat(&holder).await.unwrap()).is_some() {
        assert!(Instant::now() < deadline, "the session did not expire");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.restore();
    // A new session holds the ID again: its holder node, creator-only.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match lease.heartbeat(&registry, &cache, 0).await {
            Ok(()) => break,
            Err(e) if e.kind == ErrorKind::Unavailable => {
                assert!(Instant::now() < deadline, "never held again: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let second = owner(floe.check_stat(&holder).await.unwrap()).unwrap();
    assert_ne!(first, second);
    assert_creator_only(&floe, &holder).await;
    // And a registration made now, on the new session, too.
    let again = registry
        .register(
            &Identity::new("orders", "h2", 8080),
            IdSpace::snowflake(&Layout::LEAF),
        )
        .await
        .unwrap();
    assert_creator_only(&floe, &format!("{root}/orders/holders/h2:8080")).await;
    assert_creator_only(&floe, &format!("{root}/orders/workers/{}", again.record.id)).await;
}
