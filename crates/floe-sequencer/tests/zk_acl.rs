//! The ZooKeeper store with digest credentials, against the real server from scripts/test.sh
//! that refuses unauthenticated clients (FLOE_TEST_ZOOKEEPER_SECURE: ZooKeeper 3.8 with
//! `enforce.auth.enabled=true`, `enforce.auth.schemes=digest`): it hands out sequences, every
//! node it creates is creator-only, and another identity can neither change nor delete them.
#![cfg(feature = "zookeeper")]

mod common;

use std::sync::Arc;

use floe_sequencer::{ErrorKind, SeqError, Store};
use zookeeper_client::{Client, Error as ZkError, Permission};

const PASSWORD: &str = "st0re-s3cret";

fn server() -> String {
    floe_testkit::env("FLOE_TEST_ZOOKEEPER_SECURE")
}

async fn open(url: &str) -> Result<Arc<dyn Store>, SeqError> {
    let dir = tempfile::tempdir().unwrap();
    floe_sequencer::open(url, dir.path()).await
}

async fn session_as(user: &str, password: &str) -> Client {
    Client::connector()
        .with_auth("digest", format!("{user}:{password}").as_bytes())
        .connect(&server())
        .await
        .unwrap()
}

async fn assert_creator_only(client: &Client, path: &str) {
    let (acls, _) = client
        .get_acl(path)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(acls.len(), 1, "{path}: {acls:?}");
    assert_eq!(acls[0].scheme(), "digest", "{path}: {acls:?}");
    assert!(acls[0].id().starts_with("floe:"), "{path}: {acls:?}");
    assert_eq!(acls[0].permission(), Permission::ALL, "{path}: {acls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_credentials_hands_out_sequences_on_creator_only_nodes() {
    let parent = format!("/{}", floe_testkit::unique("floe-store-acl"));
    let root = format!("{parent}/sequences");
    let store = open(&format!("zk://floe:{PASSWORD}@{}{root}", server()))
        .await
        .unwrap();
    // A second client of the same nodes, its password in a file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let second = open(&format!(
        "zk://floe@{}{root}?password_file={}",
        server(),
        file.display()
    ))
    .await
    .unwrap();
    let key = common::key("acl");
    assert_eq!(store.reserve(&key, 10).await.unwrap(), 10);
    assert_eq!(second.reserve(&key, 10).await.unwrap(), 20);
    assert_eq!(store.reserve(&key, 1).await.unwrap(), 21);
    assert!(store.register(&key).await.unwrap());

    let node = format!(
        "{root}/{}",
        floe_sequencer::stores::zookeeper::node_name(&key)
    );
    let registered = format!(
        "{root}.registered/{}",
        floe_sequencer::stores::zookeeper::node_name(&key)
    );
    let floe = session_as("floe", PASSWORD).await;
    for path in [
        parent.clone(),
        root.clone(),
        node.clone(),
        format!("{root}.registered"),
        registered.clone(),
    ] {
        assert_creator_only(&floe, &path).await;
    }
    for (user, password) in [("intruder", "other"), ("floe", "wrong")] {
        let other = session_as(user, password).await;
        assert_eq!(
            other.set_data(&node, b"1", None).await.unwrap_err(),
            ZkError::NoAuth,
            "{user}: lower the sequence"
        );
        assert_eq!(
            other.delete(&node, None).await.unwrap_err(),
            ZkError::NoAuth,
            "{user}: delete the sequence"
        );
        assert_eq!(
            other.delete(&registered, None).await.unwrap_err(),
            ZkError::NoAuth,
            "{user}: unregister"
        );
    }
    assert_eq!(store.value(&key).await.unwrap(), Some(21));
    // The wrong password through floe: one configuration error, never the password.
    let Err(e) = open(&format!("zk://floe:wrong-one@{}{root}", server())).await else {
        panic!("a wrong password opened the store")
    };
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
    let line = e.to_string();
    assert!(
        line.contains("NoAuth") && !line.contains("wrong-one"),
        "{line}"
    );
    store.close().await;
    second.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_credentials_is_refused_by_an_enforcing_server() {
    let root = format!("/{}", floe_testkit::unique("floe-store-none"));
    let Err(e) = open(&format!("zk://{}{root}", server())).await else {
        panic!("an unauthenticated store opened")
    };
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
    let line = e.to_string();
    assert!(
        line.contains("AuthFailed") && !line.contains('\n'),
        "{line}"
    );
}
