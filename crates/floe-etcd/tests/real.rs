//! The client against the real etcd server scripts/test.sh starts (FLOE_TEST_ETCD).

use std::time::Duration;

use floe_etcd::{Client, Compare, CompareOp, ConnectOptions, Txn, TxnGet, TxnOp};
use floe_testkit::{env, free_port, unique};

fn client() -> Client {
    Client::connect([env("FLOE_TEST_ETCD")], ConnectOptions::default()).unwrap()
}

#[tokio::test]
async fn keys_are_written_read_listed_and_deleted() {
    let c = client();
    let root = format!("/floe-etcd-test/{}", unique("kv"));
    c.put(format!("{root}/a"), "1", 0).await.unwrap();
    c.put(format!("{root}/b"), "2", 0).await.unwrap();
    c.put(format!("{root}0"), "outside", 0).await.unwrap();
    let a = c.get(format!("{root}/a")).await.unwrap();
    assert_eq!(a.kvs.len(), 1);
    assert_eq!(a.kvs[0].value, b"1");
    assert!(a.kvs[0].mod_revision > 0);
    let all = c.get_prefix(format!("{root}/")).await.unwrap();
    let keys: Vec<_> = all.kvs.iter().map(|kv| kv.key.clone()).collect();
    assert_eq!(
        keys,
        [
            format!("{root}/a").into_bytes(),
            format!("{root}/b").into_bytes()
        ]
    );
    c.delete(format!("{root}/a")).await.unwrap();
    assert!(c.get(format!("{root}/a")).await.unwrap().kvs.is_empty());
}

#[tokio::test]
async fn a_compare_and_swap_applies_once_and_reads_what_beat_it() {
    let c = client();
    let key = format!("/floe-etcd-test/{}", unique("cas"));
    // Create if absent: the first succeeds, the second does not.
    let create = || {
        Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), "1", 0)])
            .or_else([TxnOp::get(key.as_str())])
    };
    let first = c.txn(create()).await.unwrap();
    assert!(first.succeeded);
    let revision = first.header.as_ref().unwrap().revision;
    let second = c.txn(create()).await.unwrap();
    assert!(!second.succeeded);
    let seen = &second.gets()[0].kvs[0];
    assert_eq!(
        (seen.value.as_slice(), seen.mod_revision),
        (&b"1"[..], revision)
    );
    // Swap on the revision seen: once only.
    let swap = || {
        Txn::new()
            .when([Compare::mod_revision(
                key.as_str(),
                CompareOp::Equal,
                revision,
            )])
            .and_then([TxnOp::put(key.as_str(), "2", 0)])
    };
    assert!(c.txn(swap()).await.unwrap().succeeded);
    assert!(!c.txn(swap()).await.unwrap().succeeded);
    assert_eq!(c.get(key.as_str()).await.unwrap().kvs[0].value, b"2");
    // Delete in a transaction.
    let delete = Txn::new()
        .when([Compare::value(key.as_str(), CompareOp::Equal, "2")])
        .and_then([TxnOp::delete(key.as_str())]);
    assert!(c.txn(delete).await.unwrap().succeeded);
    assert!(c.get(key.as_str()).await.unwrap().kvs.is_empty());
}

#[tokio::test]
async fn a_lease_is_kept_alive_then_revoked_with_its_keys() {
    let c = client();
    let key = format!("/floe-etcd-test/{}", unique("lease"));
    let lease = c.lease_grant(5).await.unwrap();
    assert_eq!(lease.ttl, 5);
    c.put(key.as_str(), "held", lease.id).await.unwrap();
    assert_eq!(c.get(key.as_str()).await.unwrap().kvs[0].lease, lease.id);
    let alive = c.lease_keep_alive_once(lease.id).await.unwrap().unwrap();
    assert_eq!((alive.id, alive.ttl), (lease.id, 5));
    let ttl = c.lease_time_to_live(lease.id, true).await.unwrap();
    assert!(ttl.ttl > 0 && ttl.ttl <= 5, "{ttl:?}");
    assert_eq!(ttl.keys, [key.clone().into_bytes()]);
    c.lease_revoke(lease.id).await.unwrap();
    assert!(c.get(key.as_str()).await.unwrap().kvs.is_empty());
    // A gone lease: keep-alive answers TTL 0, time-to-live -1, revoke an error.
    let gone = c.lease_keep_alive_once(lease.id).await.unwrap().unwrap();
    assert!(gone.ttl <= 0, "{gone:?}");
    assert_eq!(c.lease_time_to_live(lease.id, false).await.unwrap().ttl, -1);
    let e = c.lease_revoke(lease.id).await.unwrap_err();
    assert!(!e.is_config(), "{e}");
}

#[tokio::test]
async fn a_lease_not_kept_alive_expires() {
    let c = client();
    let key = format!("/floe-etcd-test/{}", unique("expire"));
    let lease = c.lease_grant(2).await.unwrap();
    c.put(key.as_str(), "held", lease.id).await.unwrap();
    // Real time: etcd expires leases by its own clock (TTL 2 s, checked every 0.5 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(6);
    while !c.get(key.as_str()).await.unwrap().kvs.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{key} outlived its lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A cluster named by several endpoints, one of them dead: calls go to the live one, whichever
/// comes first.
#[tokio::test]
async fn a_dead_endpoint_beside_a_live_one_is_passed_over() {
    let dead = format!("127.0.0.1:{}", free_port());
    let live = env("FLOE_TEST_ETCD");
    for endpoints in [[dead.clone(), live.clone()], [live, dead]] {
        let c = Client::connect(endpoints, ConnectOptions::default()).unwrap();
        let key = format!("/floe-etcd-test/{}", unique("two"));
        for i in 0..20 {
            c.put(key.as_str(), i.to_string(), 0).await.unwrap();
            let got = c.get(key.as_str()).await.unwrap();
            assert_eq!(got.kvs[0].value, i.to_string().into_bytes());
        }
        let lease = c.lease_grant(5).await.unwrap();
        assert!(
            c.lease_keep_alive_once(lease.id)
                .await
                .unwrap()
                .unwrap()
                .ttl
                > 0
        );
        c.lease_revoke(lease.id).await.unwrap();
    }
}

/// Every endpoint dead: an error, within the deadline, and not a configuration error.
#[tokio::test]
async fn every_endpoint_dead_is_an_error_in_time() {
    let dead = || format!("127.0.0.1:{}", free_port());
    let options = ConnectOptions::both(Duration::from_millis(500));
    let c = Client::connect([dead(), dead()], options).unwrap();
    let started = std::time::Instant::now();
    let e = c.get("/x").await.unwrap_err();
    assert!(!e.is_config(), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let e = c.lease_keep_alive_once(1).await.unwrap_err();
    assert!(!e.is_config(), "{e}");
}
