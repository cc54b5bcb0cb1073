//! Moving a Leaf or Layotto fleet to floe: Leaf's own layout, a floor under every Snowflake ID
//! (`--snowflake-above`), and the answers Leaf's clients read.

use crate::common;
use crate::serving::{http, start};

/// Now, in Unix milliseconds (the wall clock as the time Leaf would have issued at).
#[allow(clippy::disallowed_methods)]
fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// An ID as Meituan Leaf writes it: `((ms - 1288834974657) << 22) | (worker << 12) | sequence`.
fn leaf_id(ms: u64, worker: u64, sequence: u64) -> u64 {
    ((ms - 1_288_834_974_657) << 22) | (worker << 12) | sequence
}

/// On floe's default layout (the Go Leaf-Snowflake's 2023 epoch) a Leaf fleet's IDs would go
/// back: with the last Leaf ID as the floor, `floe serve` refuses to start, exit 2, naming
/// both numbers and the layout Leaf needs; nothing is leased or written.
#[test]
fn a_floor_above_the_first_id_refuses_to_start_naming_both_numbers() {
    let floor = leaf_id(now_ms() - 86_400_000, 5, 7).to_string();
    for args in [
        vec!["--snowflake-above", floor.as_str()],
        vec![
            "--layout",
            "twitter",
            "--snowflake-above",
            "18446744073709551615",
        ],
    ] {
        let state = tempfile::tempdir().unwrap();
        let out = common::serve_output(state.path(), &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("snowflake-above") || err.contains("snowflake.above"),
            "{err}"
        );
        assert!(err.contains(args[args.len() - 1]), "{args:?}: {err}");
        assert_eq!(std::fs::read_dir(state.path()).unwrap().count(), 0, "{err}");
    }
    let state = tempfile::tempdir().unwrap();
    let out = common::serve_output(state.path(), &["--snowflake-above", &floor]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("meituan-leaf"), "{err}");
    let first = err
        .split("at least ")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("the first ID is named: {err}"));
    assert!(first <= floor.parse::<u64>().unwrap(), "{err}");
}

/// With Meituan Leaf's own layout, floe goes on above the IDs Leaf issued a moment ago, and
/// Leaf's `/decodeSnowflakeId` reads Leaf's IDs with Leaf's fields.
#[test]
fn meituan_leaf_continues_above_leafs_last_id_and_decodes_its_ids() {
    let leaf_last = leaf_id(now_ms() - 1_000, 1023, 4095);
    let server = start(&[
        "--layout",
        "meituan-leaf",
        "--snowflake-above",
        &leaf_last.to_string(),
    ]);
    for _ in 0..100 {
        let (status, body) = http(&server.http, "GET", "/api/snowflake/get/k").unwrap();
        assert_eq!(status, 200, "{body}");
        let id: u64 = body.trim().parse().unwrap();
        assert!(id > leaf_last, "{id} must be above Leaf's {leaf_last}");
    }
    let ms = now_ms() - 3_600_000;
    let theirs = leaf_id(ms, 5, 7);
    let (status, body) = http(
        &server.http,
        "GET",
        &format!("/decodeSnowflakeId?snowflakeId={theirs}"),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["workerId"], "5", "{body}");
    assert_eq!(v["sequenceId"], "7", "{body}");
    assert!(
        v["timestamp"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{ms}(")),
        "{body}"
    );
}

/// The first sequence of each millisecond, by millisecond, of Snowflake IDs taken one at a
/// time from `server` (Leaf's layout).
fn first_sequences(server: &crate::serving::Serve, n: usize) -> Vec<u64> {
    let mut first = std::collections::BTreeMap::new();
    for _ in 0..n {
        let (status, body) = http(&server.http, "GET", "/api/snowflake/get/k").unwrap();
        assert_eq!(status, 200, "{body}");
        let id: u64 = body.trim().parse().unwrap();
        let (ms, seq) = (id >> 22, id & 4095);
        let e = first.entry(ms).or_insert(seq);
        *e = (*e).min(seq);
    }
    first.into_values().collect()
}

/// At low traffic, each millisecond's first ID starts at a random sequence below 100 (Leaf's
/// rule), so `id % N` spreads them; `--random-start 0` gives Twitter's 0 every time.
#[test]
fn low_traffic_ids_start_each_millisecond_at_a_random_sequence() {
    let server = start(&[]);
    let firsts = first_sequences(&server, 300);
    assert!(
        firsts.len() > 3,
        "the requests spanned milliseconds: {firsts:?}"
    );
    assert!(firsts.iter().all(|&s| s < 100), "{firsts:?}");
    let shards: std::collections::BTreeSet<u64> = firsts.iter().map(|s| s % 4).collect();
    assert!(
        shards.len() > 1,
        "id % 4 of each millisecond's first ID: {firsts:?}"
    );
    let server = start(&["--random-start", "0"]);
    let firsts = first_sequences(&server, 100);
    assert!(firsts.iter().all(|&s| s == 0), "{firsts:?}");
}

/// `(status, head)` of a GET of `path` with `Host: host`.
fn with_host(server: &crate::serving::Serve, host: &str, path: &str) -> (u16, String) {
    let a = floe_testkit::http::request(&server.http, host, "GET", path, &[]).unwrap();
    (a.status, a.head)
}

/// DNS rebinding needs a browser on the server's own machine: on a loopback listener a
/// foreign `Host` is refused (Leaf's ID routes in Leaf's shape), but never on `/healthz`,
/// `/readyz` or `/metrics`; names pass by wildcard (`*.svc.cluster.local`); a listener bound
/// beyond loopback answers any name unless the check is turned on; `--host-check off` turns
/// it off.
#[test]
fn the_host_check_protects_loopback_and_never_probes() {
    let cluster = "floe.default.svc.cluster.local:34903";
    let server = start(&[]);
    assert_eq!(with_host(&server, cluster, "/v1/ids/snowflake").0, 403);
    let (status, head) = with_host(&server, cluster, "/api/segment/get/k");
    assert_eq!(status, 500, "Leaf's shape: {head}");
    assert!(
        head.contains("x-floe-error: forbidden") && head.contains("text/plain"),
        "{head}"
    );
    for probe in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(with_host(&server, cluster, probe).0, 200, "{probe}");
    }
    let server = start(&["--allow-host", "*.svc.cluster.local"]);
    assert_eq!(with_host(&server, cluster, "/v1/ids/snowflake").0, 200);
    assert_eq!(
        with_host(&server, "svc.cluster.local.evil", "/v1/ids/snowflake").0,
        403
    );
    let server = start(&["--host-check", "off"]);
    assert_eq!(
        with_host(&server, "anything.example", "/v1/ids/snowflake").0,
        200
    );
    // Cross-site requests stay refused whatever the host check.
    let a = floe_testkit::http::request(
        &server.http,
        "anything.example",
        "GET",
        "/v1/ids/snowflake",
        &["Origin: https://evil.example"],
    )
    .unwrap();
    assert_eq!(a.status, 403, "{}", a.body);
    let wide = crate::serving::start_on("127.0.0.1:0", "0.0.0.0:0", &[]);
    assert_eq!(with_host(&wide, cluster, "/v1/ids/snowflake").0, 200);
    let wide = crate::serving::start_on("127.0.0.1:0", "0.0.0.0:0", &["--host-check", "on"]);
    assert_eq!(with_host(&wide, cluster, "/v1/ids/snowflake").0, 403);
    assert_eq!(with_host(&wide, cluster, "/healthz").0, 200);
}

/// A host pattern or check that means nothing is a configuration error naming its key.
#[test]
fn a_bad_host_pattern_or_check_is_refused_at_start() {
    for (args, key) in [
        (&["--allow-host", "a b"][..], "listen.allow_hosts"),
        (&["--allow-host", "*x.y"][..], "listen.allow_hosts"),
        (&["--host-check", "sometimes"][..], "host-check"),
    ] {
        let state = tempfile::tempdir().unwrap();
        let out = common::serve_output(state.path(), args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(key), "{args:?}: {err}");
    }
}

/// `floe seq keys ARGS --server http://GRPC`: its standard output, or its exit code and error.
fn keys_at(server: &crate::serving::Serve, args: &[&str]) -> Result<String, (i32, String)> {
    let url = format!("http://{}", server.grpc);
    let out = common::cmd()
        .args(["seq", "keys"])
        .args(args)
        .args(["--server", &url])
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }
}

/// The admin API, as Leaf's `/db` and tag table are to a Leaf operator: a store's keys with
/// their values, a key read without taking an ID, a floor raised while serving, and a store
/// that serves registered keys only (a typo refused: 404 unknown_key), over HTTP and over gRPC
/// (`floe seq keys --server`).
#[test]
fn keys_are_seen_raised_and_registered_over_http_and_grpc() {
    let server = start(&[
        "--store",
        "open=memory",
        "--store",
        "tags=memory",
        "--registered-only",
        "tags",
    ]);
    let h = server.http.as_str();
    for want in 1..=3 {
        let (status, body) = http(h, "GET", "/v1/sequencer/open/orders").unwrap();
        assert_eq!((status, body), (200, format!("{{\"next_id\":\"{want}\"}}")));
    }
    let (status, body) = http(h, "GET", "/v1/admin/stores/open/keys/orders").unwrap();
    assert_eq!(status, 200, "{body}");
    let state: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(state["next_weak"], "4", "{body}");
    assert_eq!(state["registered"], false, "{body}");
    let (_, body) = http(h, "GET", "/v1/sequencer/open/orders").unwrap();
    assert_eq!(body, "{\"next_id\":\"4\"}", "reading took nothing");
    // A floor raised while serving: this server's buffer goes on above it.
    let (status, body) = http(
        h,
        "POST",
        "/v1/admin/stores/open/keys/orders/raise?above=500",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let (_, body) = http(h, "GET", "/v1/sequencer/open/orders").unwrap();
    assert_eq!(body, "{\"next_id\":\"501\"}");
    let (_, body) = http(h, "GET", "/v1/sequencer/open/orders?increment=strong").unwrap();
    let strong: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(strong["next_id"].as_str().unwrap().parse::<i64>().unwrap() > 501);
    let (status, body) = http(h, "GET", "/v1/admin/stores/open/keys").unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"key\":\"orders\""), "{body}");
    // Registered keys only: refused until registered, over HTTP and Leaf's route alike.
    let (status, body) = http(h, "GET", "/v1/sequencer/tags/ordres").unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains("unknown_key") && body.contains("ordres"),
        "{body}"
    );
    assert_eq!(
        keys_at(&server, &["register", "invoices", "--store", "tags"]).unwrap(),
        "changed\n"
    );
    assert_eq!(
        keys_at(&server, &["register", "invoices", "--store", "tags"]).unwrap(),
        "unchanged\n"
    );
    let (status, body) = http(h, "GET", "/v1/sequencer/tags/invoices").unwrap();
    assert_eq!((status, body.as_str()), (200, "{\"next_id\":\"1\"}"));
    assert_eq!(
        keys_at(&server, &["registered", "--store", "tags"]).unwrap(),
        "invoices\n"
    );
    let shown = keys_at(&server, &["show", "invoices", "--store", "tags"]).unwrap();
    assert!(
        shown.starts_with("invoices\t") && shown.contains("\t2\t"),
        "{shown}"
    );
    let (status, _) = http(h, "DELETE", "/v1/admin/stores/tags/keys/invoices").unwrap();
    assert_eq!(status, 200);
    let (status, body) = http(h, "GET", "/v1/sequencer/tags/invoices").unwrap();
    assert_eq!(status, 404, "refused at once: {body}");
    // Registered again, it goes on: never a repeat.
    let (status, _) = http(h, "PUT", "/v1/admin/stores/tags/keys/invoices").unwrap();
    assert_eq!(status, 200);
    let (_, body) = http(h, "GET", "/v1/sequencer/tags/invoices").unwrap();
    assert_eq!(body, "{\"next_id\":\"2\"}");
    // Errors name what is wrong.
    let (status, body) = http(h, "GET", "/v1/admin/stores/nope/keys/k").unwrap();
    assert_eq!(status, 404, "{body}");
    let (status, body) = http(h, "POST", "/v1/admin/stores/open/keys/k/raise?above=%201").unwrap();
    assert_eq!(status, 400, "{body}");
    let (code, err) = keys_at(&server, &["show", "k", "--store", "nope"]).unwrap_err();
    assert_eq!(code, 2, "{err}");
}

/// A listener beyond loopback without tokens does not serve the admin API: 403 and
/// PERMISSION_DENIED, while IDs are served as ever.
#[test]
fn the_admin_api_needs_tokens_beyond_loopback() {
    let server = crate::serving::start_on("0.0.0.0:0", "0.0.0.0:0", &["--store", "s=memory"]);
    let (status, body) = http(&server.http, "GET", "/v1/admin/stores/s/keys/k").unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("token"), "{body}");
    let (status, _) = http(&server.http, "GET", "/v1/sequencer/s/k").unwrap();
    assert_eq!(status, 200);
    let (code, err) = keys_at(&server, &["show", "k", "--store", "s"]).unwrap_err();
    assert!(err.contains("PERMISSION_DENIED"), "{code}: {err}");
}

/// A Meituan Leaf fleet, written as Leaf writes it: its servers' ZooKeeper nodes
/// (`/snowflake/{leaf.name}/forever/{ip}:{port}-{seq}`, heartbeats of `{"ip","port","timestamp"}`
/// every 3 s) and their segment transactions on `leaf_alloc` (`UPDATE ... SET max_id = max_id +
/// step`, then `SELECT`, one transaction), each server issuing Snowflake IDs in Leaf's layout
/// with its worker ID.
mod leaf_fleet {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use zookeeper_client::{Acls, Client, CreateMode};

    pub const STEP: i64 = 100;

    pub fn json(ip: &str, port: u16, timestamp: u64) -> String {
        format!(r#"{{"ip":"{ip}","port":"{port}","timestamp":{timestamp}}}"#)
    }

    /// What the fleet issued: Snowflake IDs and segment IDs, by whom.
    #[derive(Default)]
    pub struct Issued {
        pub snowflake: Mutex<Vec<(String, u64)>>,
        pub segment: Mutex<Vec<(String, i64)>>,
    }

    impl Issued {
        pub fn snowflake_max(&self) -> u64 {
            self.snowflake
                .lock()
                .unwrap()
                .iter()
                .map(|(_, id)| *id)
                .max()
                .unwrap_or(0)
        }

        /// Every ID issued once, by whoever issued it.
        pub fn assert_unique(&self) {
            let mut seen = HashSet::new();
            for (who, id) in self.snowflake.lock().unwrap().iter() {
                assert!(seen.insert(*id), "Snowflake ID {id} issued twice ({who})");
            }
            let mut seen = HashSet::new();
            for (who, id) in self.segment.lock().unwrap().iter() {
                assert!(seen.insert(*id), "segment ID {id} issued twice ({who})");
            }
        }
    }

    /// One Leaf server: its node, and a stop switch.
    pub struct LeafServer {
        pub ip: String,
        pub worker: u64,
        stop: Arc<AtomicBool>,
        task: tokio::task::JoinHandle<()>,
    }

    impl LeafServer {
        /// Starts as Leaf starts on `ip:8080` (a new persistent sequential node), then heartbeats
        /// and issues Snowflake IDs and IDs of `tag` from segments of `table` until stopped.
        pub async fn start(
            zk: &Client,
            forever: &str,
            ip: &str,
            mysql: &str,
            table: &str,
            tag: &str,
            issued: Arc<Issued>,
        ) -> LeafServer {
            let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
            zk.mkdir(forever, &persistent).await.unwrap();
            let sequential = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
            let prefix = format!("{forever}/{ip}:8080-");
            let (_, seq) = zk
                .create(
                    &prefix,
                    json(ip, 8080, super::now_ms()).as_bytes(),
                    &sequential,
                )
                .await
                .unwrap();
            let path = format!("{prefix}{seq}");
            let worker: u64 = path.rsplit('-').next().unwrap().parse().unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(2)
                .connect(mysql)
                .await
                .unwrap();
            let (zk, who, ip_) = (zk.clone(), format!("leaf {ip}"), ip.to_string());
            let (table, tag, stop_) = (table.to_string(), tag.to_string(), Arc::clone(&stop));
            let task = tokio::spawn(async move {
                let mut last_beat = std::time::Instant::now();
                let (mut last_ms, mut seq) = (0u64, 0u64);
                let (mut next, mut end) = (0i64, -1i64);
                while !stop_.load(Ordering::SeqCst) {
                    if last_beat.elapsed() >= Duration::from_secs(3) {
                        let data = json(&ip_, 8080, super::now_ms());
                        zk.set_data(&path, data.as_bytes(), None).await.unwrap();
                        last_beat = std::time::Instant::now();
                    }
                    // Leaf's SnowflakeIDGenImpl: a random start each new millisecond.
                    let ms = super::now_ms();
                    if ms > last_ms {
                        (last_ms, seq) = (ms, (crate::common::nanos() % 100) as u64);
                    } else {
                        seq += 1;
                    }
                    issued
                        .snowflake
                        .lock()
                        .unwrap()
                        .push((who.clone(), super::leaf_id(last_ms, worker, seq)));
                    // Leaf's SegmentIDGenImpl over IDAllocDaoImpl's transaction.
                    if next > end {
                        let mut tx = pool.begin().await.unwrap();
                        sqlx::query(sqlx::AssertSqlSafe(format!(
                            "UPDATE {table} SET max_id = max_id + step WHERE biz_tag = ?"
                        )))
                        .bind(&tag)
                        .execute(&mut *tx)
                        .await
                        .unwrap();
                        let (max_id, step): (i64, i32) = sqlx::query_as(sqlx::AssertSqlSafe(
                            format!("SELECT max_id, step FROM {table} WHERE biz_tag = ?"),
                        ))
                        .bind(&tag)
                        .fetch_one(&mut *tx)
                        .await
                        .unwrap();
                        tx.commit().await.unwrap();
                        (next, end) = (max_id - i64::from(step), max_id - 1);
                    }
                    issued.segment.lock().unwrap().push((who.clone(), next));
                    next += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                pool.close().await;
            });
            LeafServer {
                ip: ip.to_string(),
                worker,
                stop,
                task,
            }
        }

        /// Stops it (its node stays, as Leaf's does).
        pub async fn stop(self) {
            self.stop.store(true, Ordering::SeqCst);
            self.task.await.unwrap();
        }
    }
}

/// The issue's scenario: a Leaf fleet of two servers (ZooKeeper worker IDs, a `leaf_alloc`
/// tag) moved to floe node by node under load: each Leaf server stopped and a floe node started
/// with its ip:port (`leaf+zk://`, Leaf's layout, its last ID as the floor, Leaf's table as the
/// store) while the other goes on. Every Snowflake and segment ID is issued once across Leaf and
/// floe, each floe node has its Leaf server's worker ID, and no floe ID is below an ID Leaf
/// issued before it started.
#[test]
fn a_leaf_fleet_moves_to_floe_node_by_node_under_load() {
    use leaf_fleet::{Issued, LeafServer, STEP};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let zk = floe_testkit::env("FLOE_TEST_ZOOKEEPER");
    let mysql = floe_testkit::env("FLOE_TEST_MARIADB");
    let name = floe_testkit::unique("fleet").replace('-', "_");
    let table = format!("leaf_alloc_{}", &name[name.len() - 12..]).replace('-', "_");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let issued = Arc::new(Issued::default());
    let admin = rt.block_on(zookeeper_client::Client::connect(&zk)).unwrap();
    let forever = format!("/snowflake/{name}/forever");
    crate::common::leaf_table(&mysql, &table, "orders", STEP);
    let start_leaf = |ip: &str| {
        rt.block_on(LeafServer::start(
            &admin,
            &forever,
            ip,
            &mysql,
            &table,
            "orders",
            Arc::clone(&issued),
        ))
    };
    let mut leafs = vec![start_leaf("10.0.0.1"), start_leaf("10.0.0.2")];
    std::thread::sleep(std::time::Duration::from_millis(500));

    // Load on the floe nodes while they run, from a thread of its own.
    let stop_load = Arc::new(AtomicBool::new(false));
    let floes: Arc<std::sync::Mutex<Vec<(String, String)>>> = Arc::default();
    let load = {
        let (stop, floes, issued) = (
            Arc::clone(&stop_load),
            Arc::clone(&floes),
            Arc::clone(&issued),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let nodes = floes.lock().unwrap().clone();
                for (who, addr) in nodes {
                    let (status, body) = http(&addr, "GET", "/api/snowflake/get/orders").unwrap();
                    assert_eq!(status, 200, "{who}: {body}");
                    let id: u64 = body.trim().parse().unwrap();
                    issued.snowflake.lock().unwrap().push((who.clone(), id));
                    let (status, body) = http(&addr, "GET", "/api/segment/get/orders").unwrap();
                    assert_eq!(status, 200, "{who}: {body}");
                    issued
                        .segment
                        .lock()
                        .unwrap()
                        .push((who, body.trim().parse().unwrap()));
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
    };

    // Snowflake IDs only (no sno or LexicalUUID identities of their own in Leaf's tree).
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("floe.toml");
    std::fs::write(&config, "[ids]\nkinds = [\"snowflake\"]\n").unwrap();
    let mut servers = Vec::new();
    for _ in 0..2 {
        let leaf = leafs.remove(0);
        let (ip, worker) = (leaf.ip.clone(), leaf.worker);
        rt.block_on(leaf.stop());
        let floor = issued.snowflake_max();
        // The Leaf server's identity, Leaf's layout, its IDs as the floor, Leaf's table.
        let server = start(&[
            "--registry",
            &format!("leaf+zk://{zk}/snowflake?reach=4"),
            "--service",
            &name,
            "--host",
            &ip,
            "--port",
            "8080",
            "--layout",
            "meituan-leaf",
            "--snowflake-above",
            &floor.to_string(),
            "--config",
            config.to_str().unwrap(),
            "--store",
            &format!("leaf=leaf-{mysql}?table={table}"),
            "--state-dir",
            dir.path().join(&ip).to_str().unwrap(),
        ]);
        let (status, body) = http(&server.http, "GET", "/api/snowflake/get/orders").unwrap();
        assert_eq!(status, 200, "{body}");
        let first: u64 = body.trim().parse().unwrap();
        assert!(
            first > floor,
            "{ip}: floe's first ID {first} is not above Leaf's {floor}"
        );
        assert_eq!((first >> 12) & 1023, worker, "{ip}: Leaf's worker ID");
        issued
            .snowflake
            .lock()
            .unwrap()
            .push((format!("floe {ip}"), first));
        floes
            .lock()
            .unwrap()
            .push((format!("floe {ip}"), server.http.clone()));
        servers.push(server);
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    stop_load.store(true, Ordering::SeqCst);
    load.join().unwrap();
    issued.assert_unique();
    let by_floe = issued
        .segment
        .lock()
        .unwrap()
        .iter()
        .filter(|(who, _)| who.starts_with("floe"))
        .count();
    assert!(by_floe > 100, "floe served {by_floe} segment IDs");
    // Leaf's nodes are still Leaf's: two children, each ip:port with Leaf's three keys.
    let children = rt.block_on(admin.list_children(&forever)).unwrap();
    assert_eq!(children.len(), 2, "{children:?}");
    for c in children {
        let (data, _) = rt
            .block_on(admin.get_data(&format!("{forever}/{c}")))
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&data).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 3, "{v}");
        assert!(v["port"].is_string() && v["timestamp"].is_u64(), "{v}");
    }
}

/// A floe node on Leaf's ZooKeeper nodes paused (SIGSTOP) past its session while another floe
/// process with the same ip:port starts: the second takes the worker ID once the first's session
/// is gone and issues; the first, resumed, issues nothing more (fenced, 500 on Leaf's route) and
/// says its worker ID was claimed. Every ID issued once. Found by hand on the release binary;
/// kept here.
#[test]
fn a_paused_leaf_node_is_fenced_when_another_takes_its_worker_id() {
    let zk = floe_testkit::env("FLOE_TEST_ZOOKEEPER");
    let name = floe_testkit::unique("pause").replace('-', "_");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("floe.toml");
    std::fs::write(&config, "[ids]\nkinds = [\"snowflake\"]\n").unwrap();
    let node = |state: &str| {
        let state = dir.path().join(state);
        start(&[
            "--registry",
            &format!("leaf+zk://{zk}/snowflake?reach=4"),
            "--service",
            &name,
            "--host",
            "10.9.9.9",
            "--port",
            "8080",
            "--layout",
            "meituan-leaf",
            "--config",
            config.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ])
    };
    let snowflake =
        |server: &crate::serving::Serve| http(&server.http, "GET", "/api/snowflake/get/x").unwrap();
    let a = node("a");
    let mut ids = std::collections::HashSet::new();
    for _ in 0..3 {
        let (status, body) = snowflake(&a);
        assert_eq!(status, 200, "{body}");
        assert!(ids.insert(body.trim().parse::<u64>().unwrap()));
    }
    a.signal("STOP");
    // Refused while a's session lives (6 s), then it takes the ID, within the start harness's
    // 30 s.
    let b = node("b");
    for _ in 0..3 {
        let (status, body) = snowflake(&b);
        assert_eq!(status, 200, "{body}");
        assert!(
            ids.insert(body.trim().parse::<u64>().unwrap()),
            "{body} twice"
        );
    }
    a.signal("CONT");
    let (status, body) = snowflake(&a);
    assert_eq!(status, 500, "a resumed must not issue: {body}");
    assert!(body.contains("fenced"), "{body}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !a.stderr().contains("claimed by another process") {
        assert!(std::time::Instant::now() < deadline, "{}", a.stderr());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (status, body) = snowflake(&a);
    assert_eq!(status, 500, "still fenced: {body}");
}
