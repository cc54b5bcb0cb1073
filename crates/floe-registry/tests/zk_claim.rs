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
    let registry = floe_registry::open(&format!("zk://{server}{root}?reach=4"))
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

/// Meituan Leaf's nodes taken over (`leaf+zk://`): nodes created exactly as Leaf's
/// `SnowflakeZookeeperHolder` creates them (persistent sequential
/// `/snowflake/{leaf.name}/forever/{ip}:{port}-`, its Jackson JSON), on the real server.
mod leaf {
    use std::time::{Duration, Instant};

    use floe_core::clock::{Clock, SystemClock, NANOS_PER_MILLI};
    use floe_core::snowflake::{Layout, SnowflakeError};
    use floe_registry::cache::LocalCache;
    use floe_registry::lease::{acquire, Lease, LeaseConfig};
    use floe_registry::zookeeper::{LeafGuard, ZkRegistry, SESSION_TIMEOUT};
    use floe_registry::{ErrorKind, IdSpace, Identity, Registry};
    use zookeeper_client::{Acls, Client, CreateMode};

    use super::common::{generator, unique_root};
    use floe_testkit::env;

    /// Leaf's worker IDs (its 10 bits).
    const SPACE: IdSpace = IdSpace::new(1024);

    fn now_ms() -> u64 {
        SystemClock.now_nanos() / NANOS_PER_MILLI
    }

    /// Leaf's node data, byte for byte as Leaf's Jackson writes its `Endpoint`.
    fn leaf_json(ip: &str, port: u16, timestamp: u64) -> String {
        format!(r#"{{"ip":"{ip}","port":"{port}","timestamp":{timestamp}}}"#)
    }

    /// A ZooKeeper with a Leaf fleet's directory (`{chroot}/snowflake`, as under a chroot),
    /// and the local cache of the floe nodes the test starts.
    struct Fleet {
        server: String,
        root: String,
        admin: Client,
        cache: LocalCache,
        _dir: tempfile::TempDir,
    }

    impl Fleet {
        async fn new() -> Fleet {
            let server = env("FLOE_TEST_ZOOKEEPER");
            let admin = Client::connect(&server).await.unwrap();
            let dir = tempfile::tempdir().unwrap();
            Fleet {
                root: format!("{}/snowflake", unique_root("floe-leaf")),
                server,
                admin,
                cache: LocalCache::new(dir.path()).unwrap(),
                _dir: dir,
            }
        }

        fn forever(&self) -> String {
            format!("{}/orders/forever", self.root)
        }

        /// What a Leaf server started on `ip:port` does when its ip:port has no node:
        /// `create().creatingParentsIfNeeded().withMode(PERSISTENT_SEQUENTIAL)`; the path
        /// created and the worker ID it parses from it.
        async fn leaf_starts(&self, ip: &str, port: u16, timestamp: u64) -> (String, u32) {
            let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
            self.admin
                .mkdir(&self.forever(), &persistent)
                .await
                .unwrap();
            let sequential = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
            let prefix = format!("{}/{ip}:{port}-", self.forever());
            let (_, sequence) = self
                .admin
                .create(
                    &prefix,
                    leaf_json(ip, port, timestamp).as_bytes(),
                    &sequential,
                )
                .await
                .unwrap();
            let path = format!("{prefix}{sequence}");
            // Leaf: key.split("-")[1], Integer.parseInt.
            let id = path.rsplit('-').next().unwrap().parse().unwrap();
            (path, id)
        }

        /// One heartbeat of a Leaf server: `setData` of a fresh `{"ip","port","timestamp"}`.
        async fn leaf_beats(&self, path: &str, ip: &str, port: u16, timestamp: u64) {
            self.admin
                .set_data(path, leaf_json(ip, port, timestamp).as_bytes(), None)
                .await
                .unwrap();
        }

        /// A Leaf server still running on `path`: a heartbeat every `every`, its clock
        /// `behind_ms` behind this one's.
        fn leaf_runs(
            &self,
            path: &str,
            ip: &str,
            port: u16,
            every: Duration,
            behind_ms: u64,
        ) -> tokio::task::JoinHandle<()> {
            let (admin, path, ip) = (self.admin.clone(), path.to_string(), ip.to_string());
            tokio::spawn(async move {
                loop {
                    let data = leaf_json(&ip, port, now_ms() - behind_ms);
                    let _ = admin.set_data(&path, data.as_bytes(), None).await;
                    tokio::time::sleep(every).await;
                }
            })
        }

        /// floe on the fleet's directory, by URL (the default guard: 10 s quiet, 7 s watched).
        async fn floe(&self) -> Box<dyn Registry> {
            floe_registry::open(&format!("leaf+zk://{}{}?reach=4", self.server, self.root))
                .await
                .unwrap()
        }

        /// floe with the default guard but for its watch, `watch`.
        async fn floe_watching(&self, watch: Duration) -> ZkRegistry {
            let guard = LeafGuard {
                watch,
                ..LeafGuard::DEFAULT
            };
            ZkRegistry::connect_leaf(&self.server, &self.root, SESSION_TIMEOUT, guard)
                .await
                .unwrap()
                .with_reach(Duration::from_secs(4))
        }

        /// The lease a floe node on `ip:port` acquires from `registry` (Leaf's 1024 IDs), with
        /// the fleet's local cache.
        async fn lease(&self, registry: &dyn Registry, ip: &str, port: u16) -> Lease {
            let config = LeaseConfig::new(at(ip, port), SPACE);
            acquire(registry, &self.cache, &config, &SystemClock)
                .await
                .unwrap()
        }

        async fn data(&self, path: &str) -> String {
            let (data, _) = self.admin.get_data(path).await.unwrap();
            String::from_utf8(data).unwrap()
        }
    }

    fn at(ip: &str, port: u16) -> Identity {
        Identity::new("orders", ip, port)
    }

    /// (a) A floe node with a Leaf node's ip:port gets its worker ID, and issues only after
    /// the node's timestamp (here by the URL's default guard: 7 s watched).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_leaf_nodes_ip_and_port_takes_its_worker_id_after_its_timestamp() {
        let fleet = Fleet::new().await;
        let old = now_ms() - 60_000;
        fleet.leaf_starts("10.0.0.5", 8080, old).await;
        let (path, id) = fleet.leaf_starts("10.0.0.6", 8080, old + 1_234).await;
        fleet.leaf_starts("10.0.0.7", 8080, old).await;
        assert_eq!(id, 1);

        let registry = fleet.floe().await;
        let started = Instant::now();
        let lease = fleet.lease(registry.as_ref(), "10.0.0.6", 8080).await;
        // The guard watched the node for 7 s; no takeover wait on top (a Leaf server has no
        // window).
        let took = started.elapsed();
        assert!(took >= Duration::from_secs(7), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
        assert_eq!(lease.id, id);
        assert!(
            lease.not_before_ms >= old + 1_234,
            "{}",
            lease.not_before_ms
        );
        let gen = generator(&lease);
        let first = Layout::LEAF.decode(gen.next_id().unwrap());
        assert_eq!(first.worker, u64::from(id));
        // The registry's record: the node's worker ID and its timestamp as the last time.
        let listed = registry.list("orders").await.unwrap();
        let mine = listed.iter().find(|r| r.id == id).unwrap();
        assert_eq!(mine.identity, at("10.0.0.6", 8080));
        assert_eq!(mine.last_time_ms, old + 1_234);
        // Still Leaf's node, with Leaf's data.
        assert_eq!(
            fleet.data(&path).await,
            leaf_json("10.0.0.6", 8080, old + 1_234)
        );
        assert_eq!(
            listed.iter().map(|r| r.id).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
    }

    /// (b) A new floe node creates a node of its own, with ZooKeeper's next sequence number:
    /// never one a Leaf node holds, nor one a deleted node had; a number outside the layout's
    /// IDs is refused, and its node deleted again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_ip_and_port_gets_a_number_no_leaf_node_ever_had() {
        let fleet = Fleet::new().await;
        let old = now_ms() - 60_000;
        fleet.leaf_starts("10.0.0.5", 8080, old).await;
        fleet.leaf_starts("10.0.0.6", 8080, old).await;
        let (gone, _) = fleet.leaf_starts("10.0.0.7", 8080, old).await;
        fleet.admin.delete(&gone, None).await.unwrap();

        let registry = fleet.floe().await;
        let reg = registry
            .register(&at("10.0.0.9", 8080), SPACE)
            .await
            .unwrap();
        assert_eq!((reg.record.id, reg.existing), (3, false));
        let path = format!("{}/10.0.0.9:8080-0000000003", fleet.forever());
        assert_eq!(fleet.data(&path).await, leaf_json("10.0.0.9", 8080, 0));
        // A Leaf server started after it takes the next number.
        let (_, leaf_id) = fleet.leaf_starts("10.0.0.10", 8080, now_ms()).await;
        assert_eq!(leaf_id, 4);

        // A layout of 6 IDs: the next number (5) fits, the one after (6) does not.
        let small = IdSpace::new(6);
        let fits = registry
            .register(&at("10.0.0.11", 8080), small)
            .await
            .unwrap();
        assert_eq!(fits.record.id, 5);
        // ID 2 is free (its node deleted), but ZooKeeper never gives its number again.
        let e = registry
            .register(&at("10.0.0.12", 8080), small)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::SpaceFull, "{e}");
        assert!(e.message.contains("10.0.0.12:8080-0000000006"), "{e}");
        assert!(e.message.contains("sequence number 6"), "{e}");
        assert!(e.message.contains("deleted again"), "{e}");
        let children = fleet.admin.list_children(&fleet.forever()).await.unwrap();
        assert!(
            !children.iter().any(|c| c.starts_with("10.0.0.12:")),
            "{children:?}"
        );
        drop((reg, fits));
    }

    /// (c) floe's heartbeats write Leaf's data: exactly Leaf's three keys, the port a string,
    /// the timestamp moving on; every child of `forever` is named as Leaf names them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn heartbeats_write_nodes_a_leaf_server_reads_as_its_own() {
        let fleet = Fleet::new().await;
        let (path, id) = fleet.leaf_starts("10.0.0.5", 8080, now_ms() - 60_000).await;
        let registry = fleet.floe_watching(Duration::from_millis(500)).await;
        let taken = fleet.lease(&registry, "10.0.0.5", 8080).await;
        let fresh = fleet.lease(&registry, "10.0.0.8", 9090).await;
        assert_eq!((taken.id, fresh.id), (id, 1));
        let fresh_path = format!("{}/10.0.0.8:9090-0000000001", fleet.forever());
        for (lease, path, ip, port) in [
            (&taken, &path, "10.0.0.5", 8080),
            (&fresh, &fresh_path, "10.0.0.8", 9090),
        ] {
            let mut seen = Vec::new();
            for _ in 0..2 {
                let t = now_ms();
                lease.heartbeat(&registry, &fleet.cache, t).await.unwrap();
                let data = fleet.data(path).await;
                // Byte for byte what Leaf writes, so Leaf's Jackson reads it back.
                assert_eq!(data, leaf_json(ip, port, t));
                let v: serde_json::Value = serde_json::from_str(&data).unwrap();
                let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
                assert_eq!(keys, ["ip", "port", "timestamp"]);
                assert!(v["port"].is_string());
                seen.push(v["timestamp"].as_u64().unwrap());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(seen[1] > seen[0], "{seen:?}");
            // Leaf's start-up check passes: the timestamp is not ahead of the clock.
            assert!(seen[1] <= now_ms());
        }
        // Leaf splits every child's name at '-' and parses the number: all parse.
        for child in fleet.admin.list_children(&fleet.forever()).await.unwrap() {
            let parts: Vec<&str> = child.split('-').collect();
            assert_eq!(parts.len(), 2, "{child}");
            assert!(parts[0].contains(':'), "{child}");
            assert_eq!(parts[1].len(), 10, "{child}");
            parts[1].parse::<i32>().unwrap();
        }
        // A clean stop, then a restart: floe wrote the node last, so no watch and no wait.
        let t = now_ms();
        taken.close(&registry, &fleet.cache, t).await.unwrap();
        drop(registry);
        let registry = fleet.floe().await;
        let started = Instant::now();
        let again = registry
            .register(&at("10.0.0.5", 8080), SPACE)
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!((again.record.id, again.record.last_time_ms), (id, t));
        assert!(again.existing && again.takeover_wait.is_zero());
        assert_eq!(fleet.data(&path).await, leaf_json("10.0.0.5", 8080, t));
    }

    /// (d) A Leaf node still heartbeaten is not taken: its timestamp is recent, or (a Leaf
    /// server whose clock is behind) the node is written while floe watches it. Once the Leaf
    /// server stops, the node is taken.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_leaf_node_still_written_is_refused_until_its_server_stops() {
        let fleet = Fleet::new().await;
        let (path, id) = fleet.leaf_starts("10.0.0.5", 8080, now_ms()).await;
        let registry = fleet.floe().await;

        // A Leaf server beating every 3 s with the same clock: its timestamp is recent.
        let leaf = fleet.leaf_runs(&path, "10.0.0.5", 8080, Duration::from_secs(3), 0);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        let e = registry
            .register(&at("10.0.0.5", 8080), SPACE)
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1), "at once");
        assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
        for part in [
            path.as_str(),
            "worker ID 0 of 10.0.0.5:8080",
            "behind floe's clock",
            "Stop it first",
        ] {
            assert!(e.message.contains(part), "{part}: {e}");
        }
        leaf.abort();

        // A Leaf server whose clock is a minute behind, beating every second: its timestamp
        // looks old, but the watch sees the node written.
        let leaf = fleet.leaf_runs(&path, "10.0.0.5", 8080, Duration::from_secs(1), 60_000);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        let e = registry
            .register(&at("10.0.0.5", 8080), SPACE)
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
        assert!(
            e.message.contains("written again while floe watched it"),
            "{e}"
        );
        assert!(e.message.contains(&path), "{e}");
        // A refused registration keeps nothing: no holder node, Leaf's data as it was.
        let holder = format!("{}/orders/floe/holders/10.0.0.5:8080", fleet.root);
        assert!(fleet.admin.check_stat(&holder).await.unwrap().is_none());

        // Stopped: the node is taken (after the watch), with its worker ID.
        leaf.abort();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let quick = fleet.floe_watching(Duration::from_secs(2)).await;
        let reg = quick.register(&at("10.0.0.5", 8080), SPACE).await.unwrap();
        assert_eq!((reg.record.id, reg.existing), (id, true));
        assert!(reg.previous_open && reg.takeover_wait.is_zero());
    }

    /// (f) floe's own layout (`zk://`) on Leaf's directory, as a Leaf user might point it: refused
    /// (a configuration error naming `leaf+zk://`) before anything is written, while a live
    /// Leaf server holds worker 0 there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn floes_own_layout_refuses_leafs_directory() {
        let fleet = Fleet::new().await;
        let (path, id) = fleet.leaf_starts("10.0.0.5", 8080, now_ms() - 60_000).await;
        let leaf = fleet.leaf_runs(&path, "10.0.0.5", 8080, Duration::from_secs(1), 60_000);
        let zk = floe_registry::open(&format!("zk://{}{}", fleet.server, fleet.root))
            .await
            .unwrap();
        let e = zk
            .register(
                &at("10.0.0.6", 8080),
                IdSpace::snowflake(&floe_core::snowflake::Layout::MEITUAN_LEAF),
            )
            .await
            .unwrap_err();
        leaf.abort();
        assert_eq!(e.kind, ErrorKind::Config, "{e}");
        assert!(
            e.message.contains("Meituan Leaf's worker nodes")
                && e.message
                    .contains(&format!("leaf+zk://{}{}", fleet.server, fleet.root)),
            "{e}"
        );
        let workers = format!("{}/orders/workers", fleet.root);
        assert!(fleet.admin.check_stat(&workers).await.unwrap().is_none());
        assert_eq!(id, 0);
    }

    /// A watch of any length is kept without overflow (a guard is public configuration): the
    /// node written while watched is refused as with the default guard.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_endless_watch_still_refuses_a_node_written_meanwhile() {
        let fleet = Fleet::new().await;
        let (path, _) = fleet.leaf_starts("10.0.0.5", 8080, now_ms() - 60_000).await;
        let leaf = fleet.leaf_runs(&path, "10.0.0.5", 8080, Duration::from_secs(1), 60_000);
        let endless = fleet.floe_watching(Duration::MAX).await;
        let e = endless
            .register(&at("10.0.0.5", 8080), SPACE)
            .await
            .unwrap_err();
        leaf.abort();
        assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
        assert!(
            e.message.contains("written again while floe watched it"),
            "{e}"
        );
    }

    /// (e) Two floe processes with one ip:port: the second is refused while the first holds
    /// it; and a Leaf server that writes the node floe holds stops floe at its next heartbeat.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_holder_per_ip_and_port_and_a_leaf_writing_again_fences_floe() {
        let fleet = Fleet::new().await;
        let (path, id) = fleet.leaf_starts("10.0.0.5", 8080, now_ms() - 60_000).await;
        let watch = Duration::from_millis(300);
        let first = fleet.floe_watching(watch).await;
        let lease = fleet.lease(&first, "10.0.0.5", 8080).await;
        assert_eq!(lease.id, id);
        let gen = generator(&lease);
        gen.next_id().unwrap();
        lease
            .heartbeat(&first, &fleet.cache, gen.last_timestamp_ms())
            .await
            .unwrap();

        let second = fleet.floe_watching(watch).await;
        let e = second
            .register(&at("10.0.0.5", 8080), SPACE)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
        assert!(
            e.message
                .contains("/orders/floe/holders/10.0.0.5:8080 exists"),
            "{e}"
        );

        // A Leaf server started on the same ip:port anyway (it has no holder node to check).
        fleet.leaf_beats(&path, "10.0.0.5", 8080, now_ms()).await;
        let e = lease
            .heartbeat(&first, &fleet.cache, gen.last_timestamp_ms())
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Conflict, "{e}");
        assert!(e.message.contains(&path), "names the node: {e}");
        assert_eq!(gen.next_id().unwrap_err(), SnowflakeError::LeaseLost);
    }

    /// A worker ID stays with its ip:port: reclaim refuses; a released node's number is never
    /// given again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ids_stay_with_their_ip_and_port_and_are_never_given_again() {
        let fleet = Fleet::new().await;
        let registry = fleet.floe().await;
        let first = registry
            .register(&at("10.0.0.5", 8080), SPACE)
            .await
            .unwrap();
        registry.close(&at("10.0.0.5", 8080), 0).await.unwrap();
        drop(first);
        let e = registry
            .reclaim(&at("10.0.0.6", 8080), SPACE, u64::MAX)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{e}");
        assert!(registry.release(&at("10.0.0.5", 8080)).await.unwrap());
        assert!(registry.list("orders").await.unwrap().is_empty());
        let again = registry
            .register(&at("10.0.0.5", 8080), SPACE)
            .await
            .unwrap();
        assert_eq!((again.record.id, again.existing), (1, false));
        // Identities Leaf cannot name are refused before anything is written.
        let e = registry
            .register(&Identity::new("orders", "floe-1.example", 8080), SPACE)
            .await
            .unwrap_err();
        assert!(e.message.starts_with("host: "), "{e}");
    }
}
