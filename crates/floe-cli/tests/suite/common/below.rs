//! What lies under floe, going backwards (issue 31): a store restarted empty, its file
//! truncated, a state directory copied. Each scenario returns a fault-table [`Row`]: floe must
//! refuse (HTTP 500 `data_loss`) rather than issue a value twice, and serve again once the
//! operator's raise says it is repaired.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_testkit::free_port;
use floe_testkit::http::http;

use super::faults::{client, dec, floe, serve, wait_listening, Row, Tally};
use super::nanos;

/// A Redis of this scenario's own, with no persistence at all (no AOF, no snapshots): what a
/// cache-configured Redis is, and what the probe restarted.
struct Volatile {
    port: u16,
    dir: tempfile::TempDir,
    child: Child,
}

impl Volatile {
    fn start() -> Volatile {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Volatile::spawn(port, dir.path());
        Volatile { port, dir, child }
    }

    fn spawn(port: u16, dir: &Path) -> Child {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--appendonly", "no", "--save", ""])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test.sh installs it)");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    /// Its URL, acknowledging that it keeps nothing (floe refuses it otherwise).
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}?volatile=ok", self.port)
    }

    /// Its URL as a user who did not know would write it.
    fn plain_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, then started again on the same port: empty.
    fn restart_empty(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.dir.path().join("dump.rdb"));
        self.child = Volatile::spawn(self.port, self.dir.path());
    }

    /// A backup now: `SAVE`, and a copy of the snapshot it wrote.
    fn backup(&self) -> Vec<u8> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "SAVE"])
            .output()
            .unwrap();
        assert!(out.status.success(), "redis-cli SAVE");
        std::fs::read(self.dir.path().join("dump.rdb")).unwrap()
    }

    /// SIGKILL, then started again from `backup` (Redis loads `dump.rdb` at start).
    fn restore(&mut self, backup: &[u8]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::fs::write(self.dir.path().join("dump.rdb"), backup).unwrap();
        self.child = Volatile::spawn(self.port, self.dir.path());
    }
}

impl Drop for Volatile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `floe seq keys raise KEY --above N --store URL` on the store itself (the recovery the
/// refusal names).
fn raise(url: &str, key: &str, above: u128) {
    let out = floe(
        &[
            "seq".into(),
            "keys".into(),
            "raise".into(),
            key.into(),
            "--above".into(),
            above.to_string(),
            "--store".into(),
            url.into(),
        ],
        None,
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "raise {key}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ID of a `{"next_id":"N"}` answer.
fn id_in(body: &str) -> Option<u128> {
    body.split('"').nth(3).and_then(dec)
}

/// The answer to one request: status and body.
fn ask(port: u16, path: &str) -> (u16, String) {
    http(&format!("127.0.0.1:{port}"), "GET", path).unwrap_or((0, String::new()))
}

/// One `floe serve` on `redis` (its own state directory), a STRONG and a WEAK client on one
/// new key until `stop`.
struct Loaded {
    _dir: tempfile::TempDir,
    server: floe_testkit::process::Floe,
    port: u16,
    key: String,
    stop: Arc<AtomicBool>,
    strong: std::thread::JoinHandle<super::faults::ClientLog>,
    weak: std::thread::JoinHandle<super::faults::ClientLog>,
}

fn under_load(url: &str, prefix: &str) -> Loaded {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let port = free_port();
    let store = format!("s={url}");
    let args = [
        "--store",
        &store,
        "--state-dir",
        &state,
        "--timeout-ms",
        "500",
    ];
    let server = serve(&args, port, None);
    wait_listening(&server, port);
    let key = format!("{prefix}-{}", nanos());
    let stop = Arc::new(AtomicBool::new(false));
    let path = |mode: &str| format!("/v1/sequencer/s/{key}?increment={mode}");
    Loaded {
        strong: client(port, path("strong"), stop.clone()),
        weak: client(port, path("weak"), stop.clone()),
        _dir: dir,
        server,
        port,
        key,
        stop,
    }
}

/// Redis without persistence killed and started again (empty) under one `floe serve` with
/// WEAK and STRONG clients on one key; then the raises the refusal names (the key above every
/// ID issued, then `floe.repair`), made on the store by another process.
pub fn redis_restarted_empty() -> Row {
    let mut redis = Volatile::start();
    let url = redis.url();
    wiped_under_load(
        &url,
        "Redis without persistence killed and restarted empty under one `floe serve` (WEAK + STRONG), then the key and `floe.repair` raised as the refusal says",
        || redis.restart_empty(),
    )
}

/// A store's data deleted with the store's own tool (`DELETE FROM` the table, `etcdctl del
/// --prefix`, `zkCli.sh deleteall`) under one `floe serve` with WEAK and STRONG clients on one
/// key; then the raises the refusal names. `url` is the store's, on a table or root of this
/// row's own; `wipe` deletes everything floe wrote there.
pub fn store_wiped(name: &str, url: &str, tool: &str, wipe: impl FnOnce()) -> Row {
    wiped_under_load(
        url,
        &format!("{name}: floe's data deleted with {tool} under one `floe serve` (WEAK + STRONG), then the key and `floe.repair` raised as the refusal says"),
        wipe,
    )
}

/// The row of a store that lost everything (`wipe`) under load: refused (500 `data_loss`) on
/// the key served and on a key never served, until the raises the refusal names; then served
/// again above every ID issued.
fn wiped_under_load(url: &str, scenario: &str, wipe: impl FnOnce()) -> Row {
    let Loaded {
        _dir,
        server,
        port,
        key,
        stop,
        strong,
        weak,
    } = under_load(url, "below");
    std::thread::sleep(Duration::from_millis(700));
    wipe();
    // Refused from here on (bounded wait for the first refusal, then a while of them).
    let restarted = Instant::now();
    let mut refusal = String::new();
    while restarted.elapsed() < Duration::from_secs(10) {
        let (status, body) = ask(port, &format!("/v1/sequencer/s/{key}?increment=strong"));
        if status == 500 && body.contains("data_loss") {
            refusal = body;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let refused_for = restarted.elapsed();
    // What a new key gets while the store is refused: refused too (the epoch).
    let (new_key_status, _) = ask(port, &format!("/v1/sequencer/s/{key}-new?increment=strong"));
    // The recovery: the key above every ID issued, then the epoch above what the node saw.
    stop.store(true, Ordering::Relaxed);
    let (strong, weak) = (strong.join().unwrap(), weak.join().unwrap());
    let issued_top = strong
        .ids
        .iter()
        .chain(&weak.ids)
        .max()
        .copied()
        .unwrap_or(0);
    raise(url, &key, issued_top);
    let repaired = refusal
        .split("floe.repair --above ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse::<u128>().ok());
    if let Some(r) = repaired {
        raise(url, "floe.repair", r);
    }
    // Served again (bounded), above every ID issued.
    let raised = Instant::now();
    let mut after = Vec::new();
    // STRONG answers after the raise: above every ID issued (WEAK may still serve the rest of
    // a segment reserved before the loss: never issued, so no repeat, but below the top).
    let mut below = 0;
    while raised.elapsed() < Duration::from_secs(10) && after.len() < 50 {
        for mode in ["strong", "weak"] {
            let (status, body) = ask(port, &format!("/v1/sequencer/s/{key}?increment={mode}"));
            if status == 200 {
                if let Some(id) = id_in(&body) {
                    after.push(id);
                    below += usize::from(mode == "strong" && id <= issued_top);
                }
            }
        }
        if after.is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let served_again = raised.elapsed();
    server.term();
    let _ = server.wait_timeout(Duration::from_secs(60));
    let mut tally = Tally::default();
    tally.row.scenario = scenario.to_string();
    tally.client(&strong.ids);
    tally.client(&weak.ids);
    tally.unordered(&after);
    tally.row.outcome = format!(
        "{} STRONG / {} WEAK requests refused (500 data_loss: \"{}…\"); a key never served: {}; refused {:.1} s until raised; served again {} ms after the raises{}",
        strong.errors,
        weak.errors,
        refusal
            .split("\"message\":\"")
            .nth(1)
            .unwrap_or("")
            .chars()
            .take(60)
            .collect::<String>(),
        new_key_status,
        refused_for.as_secs_f64(),
        served_again.as_millis(),
        if repaired.is_none() || after.is_empty() || below > 0 || new_key_status != 500 {
            " FAILED"
        } else {
            ""
        }
    );
    tally.row
}

/// Redis restored from an older backup (a snapshot taken while `floe serve` served, IDs issued
/// after it, then the snapshot loaded back) under one `floe serve`, WEAK + STRONG on one key.
/// The epoch was not bumped between the backup and the restore (a bump every 30 s): only the
/// high marks of the keys this node served see it, which is what docs/reliability.md states.
pub fn redis_restored_from_backup() -> Row {
    let mut redis = Volatile::start();
    let Loaded {
        _dir,
        server,
        port,
        key,
        stop,
        strong,
        weak,
    } = under_load(&redis.url(), "restored");
    std::thread::sleep(Duration::from_millis(300));
    let backup = redis.backup();
    std::thread::sleep(Duration::from_millis(500));
    redis.restore(&backup);
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let (strong, weak) = (strong.join().unwrap(), weak.join().unwrap());
    let (status, body) = ask(port, &format!("/v1/sequencer/s/{key}?increment=strong"));
    server.term();
    let _ = server.wait_timeout(Duration::from_secs(60));
    let mut tally = Tally::default();
    tally.row.scenario = "Redis restored from a snapshot taken 0.5 s earlier under one `floe serve` (WEAK + STRONG on one key)".into();
    tally.client(&strong.ids);
    tally.client(&weak.ids);
    let refused = status == 500 && body.contains("data_loss");
    tally.row.outcome = format!(
        "{} STRONG / {} WEAK requests refused; the key still refused at the end: {}{}",
        strong.errors,
        weak.errors,
        refused,
        if refused { "" } else { " FAILED" }
    );
    tally.row
}

/// Redis restored, while `floe serve` was stopped (SIGTERM), from a snapshot taken while it
/// served; then `floe serve` started again on the same state directory (STRONG on one key).
/// The epoch the stop added and wrote to the ledger is above the snapshot's.
pub fn redis_restored_while_stopped() -> Row {
    let mut redis = Volatile::start();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let store = format!("s={}", redis.url());
    let args = [
        "--store",
        &store,
        "--state-dir",
        &state,
        "--timeout-ms",
        "500",
    ];
    let key = format!("stopped-{}", nanos());
    let path = format!("/v1/sequencer/s/{key}?increment=strong");
    let mut tally = Tally::default();
    let port = free_port();
    let server = serve(&args, port, None);
    wait_listening(&server, port);
    let stop = Arc::new(AtomicBool::new(false));
    let first = client(port, path.clone(), stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    let backup = redis.backup();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let first = first.join().unwrap();
    server.term();
    let _ = server.wait_timeout(Duration::from_secs(60));
    tally.run(&first.ids);
    redis.restore(&backup);
    let port = free_port();
    let server = serve(&args, port, None);
    wait_listening(&server, port);
    let mut second = Vec::new();
    let mut refused = 0;
    for _ in 0..200 {
        let (status, body) = ask(port, &path);
        match id_in(&body) {
            Some(id) if status == 200 => second.push(id),
            _ if body.contains("data_loss") => refused += 1,
            _ => {}
        }
    }
    server.term();
    let _ = server.wait_timeout(Duration::from_secs(60));
    tally.run(&second);
    tally.row.scenario = "Redis restored, while `floe serve` was stopped, from a snapshot taken while it served; `floe serve` started again (STRONG)".into();
    tally.row.outcome = format!(
        "{refused} of 200 requests refused (500 data_loss) after the start{}",
        if refused == 200 { "" } else { " FAILED" }
    );
    tally.row
}

/// `sequences.redb` (the embedded store) emptied while floe was stopped: truncated to 0
/// bytes, or overwritten with zeros; floe started again on the state directory.
pub fn embedded_file_damaged(zeros: bool) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let args = ["--store", "main=embedded", "--state-dir", &state];
    let path = "/v1/sequencer/main/orders?increment=strong";
    let mut tally = Tally::default();
    let port = free_port();
    let server = serve(&args, port, None);
    wait_listening(&server, port);
    let stop = Arc::new(AtomicBool::new(false));
    let first = client(port, path.into(), stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let first = first.join().unwrap();
    server.term();
    let _ = server.wait_timeout(Duration::from_secs(60));
    tally.run(&first.ids);
    let file = dir.path().join("sequences.redb");
    let len = std::fs::metadata(&file).unwrap().len();
    if zeros {
        std::fs::write(&file, vec![0u8; usize::try_from(len).unwrap()]).unwrap();
    } else {
        std::fs::File::create(&file).unwrap();
    }
    let port = free_port();
    let server = serve(&args, port, None);
    let started = server
        .wait_listening(&format!("127.0.0.1:{port}"), Duration::from_secs(20))
        .is_ok();
    let mut refused = 0;
    let mut statuses = std::collections::BTreeSet::new();
    let mut second = Vec::new();
    if started {
        for _ in 0..200 {
            let (status, body) = ask(port, path);
            statuses.insert(status);
            if status == 200 {
                if let Some(id) = id_in(&body) {
                    second.push(id);
                }
            } else if body.contains("data_loss") {
                refused += 1;
            }
        }
    }
    server.term();
    let status = server.wait_timeout(Duration::from_secs(60));
    tally.run(&second);
    tally.row.scenario = format!(
        "`sequences.redb` {} while floe was stopped, then `floe serve` again (STRONG)",
        if zeros {
            "overwritten with zeros"
        } else {
            "truncated to 0 bytes"
        }
    );
    tally.row.outcome = if started {
        format!(
            "started; {refused} of 200 requests refused (500 data_loss), answers {statuses:?}{}",
            if refused == 200 { "" } else { " FAILED" }
        )
    } else {
        format!(
            "refused to start ({status:?}): {}",
            server
                .stderr()
                .lines()
                .last()
                .unwrap_or("")
                .chars()
                .take(120)
                .collect::<String>()
        )
    };
    tally.row
}

/// A node's state directory copied after a graceful stop (its saved WEAK tails in it), both
/// copies started on one shared store, WEAK clients on the same key on each.
pub fn state_dir_copied(url: &str) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    let store = format!("s={url}");
    let key = format!("copied-{}", nanos());
    let path = format!("/v1/sequencer/s/{key}?increment=weak");
    let mut tally = Tally::default();
    // A serves a few WEAK IDs (a segment fetched, most of it unused), then stops gracefully.
    let port = free_port();
    let a_state = a.display().to_string();
    let server = serve(&["--store", &store, "--state-dir", &a_state], port, None);
    wait_listening(&server, port);
    let mut first = Vec::new();
    for _ in 0..5 {
        let (status, body) = ask(port, &path);
        assert_eq!(status, 200, "{body}");
        first.push(id_in(&body).unwrap());
    }
    server.term();
    assert!(server.wait_timeout(Duration::from_secs(60)).is_some());
    tally.unordered(&first);
    // The copy: `cp -a`.
    let cp = Command::new("cp")
        .arg("-a")
        .arg(&a)
        .arg(&b)
        .status()
        .unwrap();
    assert!(cp.success());
    let b_state = b.display().to_string();
    let (pa, pb) = (free_port(), free_port());
    let sa = serve(&["--store", &store, "--state-dir", &a_state], pa, None);
    let sb = serve(&["--store", &store, "--state-dir", &b_state], pb, None);
    wait_listening(&sa, pa);
    wait_listening(&sb, pb);
    let mut ids = Vec::new();
    for _ in 0..200 {
        for port in [pa, pb] {
            let (status, body) = ask(port, &path);
            if status == 200 {
                ids.push(id_in(&body).unwrap());
            }
        }
    }
    sa.term();
    sb.term();
    let _ = sa.wait_timeout(Duration::from_secs(60));
    let _ = sb.wait_timeout(Duration::from_secs(60));
    let notes = format!("{}{}", sa.stderr(), sb.stderr());
    tally.unordered(&ids);
    tally.row.scenario =
        "a state directory copied (`cp -a`) after a graceful stop, both copies serving WEAK on one shared store".into();
    let dropped = notes.contains("claimed by another copy");
    tally.row.outcome = format!(
        "one copy served the saved tails; the other dropped them ({}){}",
        if dropped {
            "said at its start"
        } else {
            "not said"
        },
        if dropped { "" } else { " FAILED" }
    );
    tally.row
}

/// A store whose server says it does not keep what it acknowledged, given to `floe serve`
/// without `?volatile=ok`: a Redis without persistence, and a PostgreSQL database with
/// `synchronous_commit = off`. The start stops (exit 2) naming the setting and the option,
/// before any ID; with the option it starts.
pub fn volatile_stores_refused_at_start() -> Row {
    let redis = Volatile::start();
    let pg = floe_testkit::env("FLOE_TEST_POSTGRES");
    let db = format!("volatile_{}", nanos());
    let admin = Command::new("psql")
        .arg(&pg)
        .args(["-v", "ON_ERROR_STOP=1", "-q", "-c"])
        .arg(format!("CREATE DATABASE {db}"))
        .arg("-c")
        .arg(format!("ALTER DATABASE {db} SET synchronous_commit = off"))
        .output()
        .expect("psql (scripts/test.sh installs it)");
    assert!(admin.status.success(), "psql: {admin:?}");
    let (base, _) = pg.rsplit_once('/').expect("postgres://user@host:port/db");
    let pg_volatile = format!("{base}/{db}");
    let mut refused = Vec::new();
    let mut failed = Vec::new();
    for (url, setting) in [
        (redis.plain_url(), "appendonly is \"no\""),
        (pg_volatile.clone(), "synchronous_commit is off"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = super::serve_output(dir.path(), &["--store", &format!("s={url}")]);
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(2) && err.contains(setting) && err.contains("?volatile=ok") {
            refused.push(setting);
        } else {
            failed.push(format!("{url}: {:?}: {err}", out.status.code()));
        }
        // Acknowledged, it starts and serves.
        let port = free_port();
        let state = dir.path().join("ok").display().to_string();
        let store = format!(
            "s={url}{}volatile=ok",
            if url.contains('?') { '&' } else { '?' }
        );
        let server = serve(&["--store", &store, "--state-dir", &state], port, None);
        wait_listening(&server, port);
        let (status, _) = ask(port, "/v1/sequencer/s/k?increment=strong");
        if status != 200 {
            failed.push(format!("{url} with volatile=ok answered {status}"));
        }
        server.term();
        let _ = server.wait_timeout(Duration::from_secs(60));
    }
    let mut tally = Tally::default();
    tally.row.scenario =
        "`floe serve` on a Redis without persistence, and on a PostgreSQL database with `synchronous_commit = off`, without `?volatile=ok`".into();
    tally.row.outcome = format!(
        "refused at start (exit 2), naming {}; started with ?volatile=ok{}",
        refused.join(" and "),
        if failed.is_empty() {
            String::new()
        } else {
            format!(" FAILED: {}", failed.join("; "))
        }
    );
    tally.row
}

/// `url` with one more option.
fn with_option(url: &str, option: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

/// A tool's run that must succeed.
fn tool(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// PostgreSQL (`pg`, FLOE_TEST_POSTGRES): a table of this row's own emptied with `psql`.
pub fn postgres_wiped(pg: &str) -> Row {
    let table = format!("wiped_{}", nanos());
    store_wiped(
        "PostgreSQL",
        &with_option(pg, &format!("table={table}")),
        "`psql -c 'DELETE FROM …'`",
        || {
            tool(
                Command::new("psql")
                    .arg(pg)
                    .args(["-v", "ON_ERROR_STOP=1", "-q", "-c"])
                    .arg(format!("DELETE FROM {table}")),
            )
        },
    )
}

/// MariaDB (`mysql`, FLOE_TEST_MARIADB): a table of this row's own emptied with `mariadb`.
pub fn mariadb_wiped(mysql: &str) -> Row {
    let table = format!("wiped_{}", nanos());
    // mysql://user@host:port/db
    let rest = mysql
        .strip_prefix("mysql://")
        .expect("mysql://user@host:port/db");
    let (user, rest) = rest.split_once('@').expect("a user");
    let (hostport, db) = rest.split_once('/').expect("a database");
    let (host, port) = hostport.split_once(':').expect("a port");
    let (user, host, port, db) = (
        user.to_string(),
        host.to_string(),
        port.to_string(),
        db.to_string(),
    );
    store_wiped(
        "MariaDB",
        &with_option(mysql, &format!("table={table}")),
        "`mariadb -e 'DELETE FROM …'`",
        || {
            tool(
                Command::new("mariadb")
                    .args(["-h", &host, "-P", &port, "-u", &user, &db, "-e"])
                    .arg(format!("DELETE FROM {table}")),
            )
        },
    )
}

/// etcd (`addr`, FLOE_TEST_ETCD): a root of this row's own deleted with `etcdctl del --prefix`.
pub fn etcd_wiped(addr: &str) -> Row {
    let root = format!("/wiped-{}", nanos());
    store_wiped(
        "etcd",
        &format!("etcd://{addr}{root}"),
        "`etcdctl del --prefix`",
        || {
            tool(
                Command::new("etcdctl")
                    .args(["--endpoints", addr, "del", "--prefix", &root])
                    .stdout(Stdio::null()),
            )
        },
    )
}

/// ZooKeeper (`addr`, FLOE_TEST_ZOOKEEPER): a root of this row's own deleted with `zkCli.sh
/// deleteall` (the root and the registered keys' sibling).
pub fn zookeeper_wiped(addr: &str) -> Row {
    let root = format!("/wiped-{}", nanos());
    store_wiped(
        "ZooKeeper",
        &format!("zk://{addr}{root}"),
        "`zkCli.sh deleteall`",
        || {
            let zk_cli = |path: &str| {
                let mut cmd = Command::new("/usr/share/zookeeper/bin/zkCli.sh");
                cmd.args(["-server", addr, "deleteall", path])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                cmd
            };
            tool(&mut zk_cli(&root));
            // No key was registered: the sibling may not exist (zkCli.sh then exits 1).
            let _ = zk_cli(&format!("{root}.registered")).status();
        },
    )
}

/// A node's state directory lost (a disk replaced, a pod rescheduled on a fresh volume) while
/// its shared store was wiped: `floe serve` on PostgreSQL (a table of this row's own) serves
/// STRONG, stops; the table is emptied and the state directory replaced by an empty one; the
/// node starts again with the same identity. With worker IDs from `registry` (etcd or
/// ZooKeeper) the registry's record of the store's epoch is above the store's: refused. With
/// none, nothing remembers the store: the repeats this costs are measured (docs/reliability.md
/// names it undetectable).
pub fn state_dir_lost_on_a_wiped_store(pg: &str, registry: Option<(&str, String)>) -> Row {
    let table = format!("lost_{}", nanos());
    let store = format!("s={}", with_option(pg, &format!("table={table}")));
    let service = format!("lost-{}", nanos());
    let path = "/v1/sequencer/s/orders?increment=strong";
    let mut tally = Tally::default();
    let run = |tally: &mut Tally| -> (usize, usize, String) {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().display().to_string();
        let mut args = vec![
            "--store",
            &store,
            "--state-dir",
            &state,
            "--port",
            "3",
            "--timeout-ms",
            "1000",
        ];
        if let Some((_, url)) = &registry {
            args.extend(["--registry", url, "--service", &service]);
        }
        let port = free_port();
        let server = serve(&args, port, None);
        wait_listening(&server, port);
        let (mut ids, mut refused, mut other) = (Vec::new(), 0, String::new());
        for _ in 0..300 {
            let (status, body) = ask(port, path);
            match id_in(&body) {
                Some(id) if status == 200 => ids.push(id),
                _ if status == 500 && body.contains("data_loss") => refused += 1,
                _ => other = format!("{status} {body}"),
            }
        }
        server.term();
        let _ = server.wait_timeout(Duration::from_secs(60));
        tally.run(&ids);
        (ids.len(), refused, other)
    };
    let (first, _, _) = run(&mut tally);
    tool(
        Command::new("psql")
            .arg(pg)
            .args(["-v", "ON_ERROR_STOP=1", "-q", "-c"])
            .arg(format!("DELETE FROM {table}")),
    );
    let (served, refused, other) = run(&mut tally);
    match &registry {
        Some((name, _)) => {
            tally.row.scenario = format!("a node's state directory lost while its store (PostgreSQL) was wiped, the node started again; worker IDs from {name}");
            tally.row.outcome = format!(
                "{first} IDs before; after: {refused} of 300 requests refused (500 data_loss: the registry's record of the store's epoch is above the store's){}",
                if refused == 300 { String::new() } else { format!(" FAILED ({served} served; {other})") }
            );
        }
        None => {
            tally.row.scenario = "a node's state directory lost while its store (PostgreSQL) was wiped, the node started again; no registry (undetectable: nothing remembers the store)".into();
            tally.row.outcome = format!(
                "{first} IDs before; after: {served} served, {refused} refused: undetectable, as docs/reliability.md says"
            );
        }
    }
    tally.row
}

/// The registry wiped under a running fleet (etcd at `etcd`, `etcdctl del --prefix` on the
/// fleet's root): node A serves Snowflake IDs under load with worker ID 0; then, at once,
/// another node starts and is given ID 0 by the empty registry. `restart`: that node is B,
/// which held ID 1 before and stopped cleanly before the wipe (its cache says so): it waits
/// until A's heartbeat has found A's record gone, and there is no repeat. Otherwise it is a
/// new node with no cache: nothing tells it the registry forgot anything, and A issues with ID
/// 0 until its next heartbeat (up to 3 s): the repeats this costs are measured
/// (docs/reliability.md names it undetectable).
pub fn registry_wiped_under_a_fleet(etcd: &str, restart: bool) -> Row {
    let root = format!("/regwiped-{}", nanos());
    // A short reach: the wiped node waits the reach (or a heartbeat, 5 s) before its first ID.
    let registry = format!("etcd://{etcd}{root}?reach=2");
    let node = |identity: &'static str, dir: &Path| {
        let state = dir.display().to_string();
        let port = free_port();
        let args = [
            "--store",
            "ids=snowflake",
            "--state-dir",
            &state,
            "--registry",
            &registry,
            "--service",
            "wiped",
            "--port",
            identity,
        ];
        let server = serve(&args, port, None);
        wait_listening(&server, port);
        (server, port)
    };
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, a_port) = node("1", a_dir.path());
    let path = "/v1/sequencer/ids/orders".to_string();
    if restart {
        let (b, _) = node("2", b_dir.path());
        b.term();
        let _ = b.wait_timeout(Duration::from_secs(60));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let a_clients: Vec<_> = (0..2)
        .map(|_| client(a_port, path.clone(), stop.clone()))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    tool(
        Command::new("etcdctl")
            .args(["--endpoints", etcd, "del", "--prefix", &root])
            .stdout(Stdio::null()),
    );
    let wiped = Instant::now();
    let (b, b_port) = node("2", b_dir.path());
    let b_ready = wiped.elapsed();
    let b_clients: Vec<_> = (0..2)
        .map(|_| client(b_port, path.clone(), stop.clone()))
        .collect();
    std::thread::sleep(Duration::from_millis(4000));
    stop.store(true, Ordering::Relaxed);
    let mut tally = Tally::default();
    let mut refused = 0;
    for c in a_clients.into_iter().chain(b_clients) {
        let log = c.join().unwrap();
        refused += log.errors;
        tally.client(&log.ids);
    }
    let said = b.stderr();
    for s in [a, b] {
        s.term();
        let _ = s.wait_timeout(Duration::from_secs(60));
    }
    let waited = said.contains("had no record of");
    tally.row.scenario = format!(
        "the registry (etcd) wiped under a node serving Snowflake IDs; at once {}, given the same worker ID",
        if restart {
            "a node that held another ID and stopped cleanly before the wipe starts again"
        } else {
            "a new node starts (undetectable: nothing says the registry forgot anything)"
        }
    );
    tally.row.outcome = format!(
        "the other node listening {:.1} s after the wipe{}; {refused} requests refused on either node (503 while a lease was lost){}",
        b_ready.as_secs_f64(),
        if waited { ", after waiting for the forgotten node to stop (said at its start)" } else { "" },
        if restart && (!waited || tally.row.repeats > 0) { " FAILED" } else { "" }
    );
    tally.row
}
