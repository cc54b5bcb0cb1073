//! The fault scenarios, run against real `floe` processes (and real servers): each returns a
//! [`Row`] of what it measured. tests/crash.rs and tests/faults.rs run them short in the test
//! suite; scripts/faults.sh runs the whole matrix long (FLOE_FAULTS=full) with the release
//! binary and prints the table (docs/reliability.md).

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floe_testkit::free_port;
use floe_testkit::http::get;
use floe_testkit::process::{Floe, START_WITHIN};

use super::{cmd, nanos};

/// One line of the fault table.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// What was done.
    pub scenario: String,
    /// IDs the clients received.
    pub issued: usize,
    /// IDs received more than once.
    pub repeats: usize,
    /// IDs not above an ID the same client (or an earlier run) received before.
    pub order_violations: usize,
    /// What happened: waits, refusals, recoveries.
    pub outcome: String,
}

impl Row {
    /// The row as a Markdown table line.
    pub fn markdown(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} |",
            self.scenario, self.issued, self.repeats, self.order_violations, self.outcome
        )
    }

    /// Panics unless the row shows no repeat and no order violation (when `ordered`).
    pub fn assert_clean(&self, ordered: bool) {
        assert!(self.issued > 0, "{}: no IDs", self.markdown());
        assert_eq!(self.repeats, 0, "{}", self.markdown());
        if ordered {
            assert_eq!(self.order_violations, 0, "{}", self.markdown());
        }
    }
}

/// The table's header.
pub const HEADER: &str =
    "| scenario | IDs issued | repeats | order violations | outcome |\n|---|---|---|---|---|";

/// Whether the long matrix was asked for (scripts/faults.sh).
pub fn full() -> bool {
    std::env::var("FLOE_FAULTS").is_ok_and(|v| v == "full")
}

/// How many runs a pause or partition row makes: one in the suite; in the long matrix
/// `FLOE_FAULTS_RUNS` when set (a shorter long run: `scripts/faults.sh` takes about two hours
/// at the default), else `long`.
pub fn runs(long: usize) -> usize {
    if !full() {
        return 1;
    }
    match std::env::var("FLOE_FAULTS_RUNS") {
        Ok(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => panic!("FLOE_FAULTS_RUNS={v:?}: expected a number of runs above 0"),
        },
        Err(_) => long,
    }
}

/// How many runs of a row go at once where a row can run them side by side:
/// `FLOE_FAULTS_PARALLEL` when set, else `default`.
pub fn parallel(default: usize) -> usize {
    match std::env::var("FLOE_FAULTS_PARALLEL") {
        Ok(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => panic!("FLOE_FAULTS_PARALLEL={v:?}: expected a number of runs above 0"),
        },
        Err(_) => default.max(1),
    }
}

/// Counts IDs as they come: repeats across everything seen, order violations against the
/// largest ID of earlier runs and the previous ID of the same run.
#[derive(Debug, Default)]
pub struct Tally {
    seen: HashSet<u128>,
    max_before: Option<u128>,
    /// The row so far.
    pub row: Row,
}

impl Tally {
    /// Adds the IDs of one run (in the order one client received them): each must be above
    /// every ID of earlier runs and of this run before it.
    pub fn run(&mut self, ids: &[u128]) {
        if let Some(top) = self.add(ids, self.max_before) {
            self.max_before = Some(self.max_before.map_or(top, |m| m.max(top)));
        }
    }

    /// Adds the IDs one client received while others ran too: repeats across everything,
    /// order within this client's IDs only.
    pub fn client(&mut self, ids: &[u128]) {
        self.add(ids, None);
    }

    /// Counts `ids`, each against `floor` and the ones before it; returns the largest.
    fn add(&mut self, ids: &[u128], floor: Option<u128>) -> Option<u128> {
        let mut prev = floor;
        for &id in ids {
            self.row.issued += 1;
            if !self.seen.insert(id) {
                self.row.repeats += 1;
            }
            if prev.is_some_and(|p| id <= p) {
                self.row.order_violations += 1;
            }
            prev = Some(prev.map_or(id, |p| p.max(id)));
        }
        prev
    }

    /// Adds IDs that need not be ordered (several clients at once): repeats only.
    pub fn unordered(&mut self, ids: &[u128]) {
        for &id in ids {
            self.row.issued += 1;
            if !self.seen.insert(id) {
                self.row.repeats += 1;
            }
        }
        if let Some(m) = ids.iter().max() {
            self.max_before = Some(self.max_before.map_or(*m, |b| b.max(*m)));
        }
    }
}

/// libfaketime's library (Debian's `faketime` package; FLOE_TEST_FAKETIME may name it).
pub fn faketime_lib() -> String {
    if let Ok(path) = std::env::var("FLOE_TEST_FAKETIME") {
        return path;
    }
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
    ]
    .iter()
    .find(|p| std::path::Path::new(p).exists())
    .map(|p| p.to_string())
    .expect("libfaketime not found: install Debian's faketime package (scripts/test.sh does) or set FLOE_TEST_FAKETIME")
}

/// `floe args...`, its clock `offset` behind (libfaketime, e.g. "-1.4s"; None: the real clock).
pub fn floe(args: &[String], offset: Option<&str>) -> Command {
    let mut c = cmd();
    c.args(args);
    if let Some(offset) = offset {
        // Only the wall clock steps back, as NTP or an operator would step it: libfaketime
        // would move CLOCK_MONOTONIC too, and timed waits would then never end.
        c.env("LD_PRELOAD", faketime_lib())
            .env("FAKETIME", offset)
            .env("DONT_FAKE_MONOTONIC", "1");
    }
    c
}

/// A small random number (no RNG crate needed): the clock's low bits, mixed.
pub fn random_below(n: u64) -> u64 {
    let t = nanos() as u64;
    (t ^ (t >> 17)).wrapping_mul(0x9e37_79b9_7f4a_7c15) % n.max(1)
}

/// The IDs a child prints, parsed by `parse` on a thread of its own as they come (so that
/// nothing is left to do after a kill: a restart can start at once). Only whole lines count:
/// the last one may be cut short by a kill, and a cut number is another number ("7268" of
/// "72683fb9"), which could even equal a cut line of another run.
pub fn read_ids(
    child: &mut Child,
    parse: fn(&str) -> Option<u128>,
) -> (Arc<Mutex<Vec<u128>>>, std::thread::JoinHandle<()>) {
    let ids = Arc::new(Mutex::new(Vec::new()));
    let stdout = child.stdout.take().unwrap();
    let sink = ids.clone();
    let reader = std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(_) if line.last() == Some(&b'\n') => {
                    let text = String::from_utf8_lossy(&line[..line.len() - 1]);
                    sink.lock().unwrap().extend(parse(&text));
                }
                _ => return,
            }
        }
    });
    (ids, reader)
}

/// A child's standard error, once it has ended.
pub fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    err
}

/// Runs `floe args` until it has printed IDs for a random while (`min_ms` plus up to
/// `spread_ms`), then kills it with SIGKILL. Returns the IDs it printed (parsed by `parse`;
/// a last line cut short by the kill is dropped) and its standard error.
pub fn run_and_kill(
    args: &[String],
    offset: Option<&str>,
    min_ms: u64,
    spread_ms: u64,
    parse: fn(&str) -> Option<u128>,
) -> (Vec<u128>, String) {
    let mut child = floe(args, offset).spawn().unwrap();
    let (ids, reader) = read_ids(&mut child, parse);
    // Wait until it issues (a restart first waits out the clock), bounded.
    let started = Instant::now();
    while ids.lock().unwrap().is_empty() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "floe {args:?} exited early ({status}): {}",
                stderr_of(&mut child)
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no ID in 30 s: floe {args:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(min_ms + random_below(spread_ms)));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reader.join().unwrap();
    let err = stderr_of(&mut child);
    let ids = std::mem::take(&mut *ids.lock().unwrap());
    (ids, err)
}

/// Hex text (as `floe gen -o hex` prints) to a number.
pub fn hex(line: &str) -> Option<u128> {
    (!line.is_empty())
        .then(|| u128::from_str_radix(line, 16).ok())
        .flatten()
}

/// Decimal text (as `floe seq` prints) to a number.
pub fn dec(line: &str) -> Option<u128> {
    line.parse::<i64>()
        .ok()
        .and_then(|v| u128::try_from(v).ok())
}

/// The clock steps of the restarts after a crash.
pub const BEHIND: [&str; 3] = ["-0.5s", "-1.4s", "-2.9s"];

/// The time bound (Unix ms) in a state directory's `horizon-*.json` files (0 if none).
pub fn bound_on_disk(state: &std::path::Path, slot_prefix: &str) -> u64 {
    let Ok(dir) = std::fs::read_dir(state) else {
        return 0;
    };
    dir.filter_map(|e| {
        let path = e.ok()?.path();
        let name = path.file_name()?.to_string_lossy().into_owned();
        (name.starts_with(slot_prefix) && name.ends_with(".json")).then_some(path)
    })
    .filter_map(|p| {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).ok()?).ok()?;
        v["bound_ms"].as_u64()
    })
    .max()
    .unwrap_or(0)
}

/// The Unix ms time of an ID of `kind` as `floe gen -o hex` (or the sequencer) prints it.
pub fn time_ms(kind: &str, id: u128) -> u64 {
    match kind {
        "snowflake" => {
            floe_core::snowflake::Layout::LEAF
                .decode(id as u64)
                .timestamp_ms
        }
        "sno" => {
            let bytes: [u8; 10] = id.to_be_bytes()[6..].try_into().unwrap();
            floe_core::sno::SnoId::from_bytes(bytes).timestamp_unix_ns() / 1_000_000
        }
        "lexical" => ((id >> 64) as u64) / 1000,
        other => panic!("no time for {other}"),
    }
}

/// `floe gen KIND extra...` killed with SIGKILL at random moments: a first run on the real
/// clock, then restarts 0.5, 1.4 and 2.9 s behind (each must say it waited), then one an hour
/// behind (must refuse, naming the clock's time and the bound), then a clean run. `rounds`
/// repeats the restarts. `{dir}` in `extra` is a fresh temporary directory.
pub fn gen_clock_steps(kind: &str, extra: &[&str], rounds: usize) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = ["gen", kind, "-n", "1000000000", "-o", "hex", "--state-dir"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.push(dir.path().join("state").display().to_string());
    args.extend(
        extra
            .iter()
            .map(|s| s.replace("{dir}", &dir.path().display().to_string())),
    );
    let mut tally = Tally::default();
    tally.row.scenario = format!(
        "kill -9 `floe gen {kind} {}`, restart 0.5/1.4/2.9 s behind, then 1 h behind",
        extra.join(" ").replace("{dir}", "D")
    );
    let state = dir.path().join("state");
    let mut runs = Vec::new();
    let mut waited = 0;
    for _ in 0..rounds {
        // A run on the real clock, then each restart further behind than the one before (a
        // restart behind a run that was itself behind would have nothing to wait for).
        let (ids, _) = run_and_kill(&args, None, 100, 500, hex);
        runs.push(ids);
        for offset in BEHIND {
            let bound = bound_on_disk(&state, "horizon-");
            let (ids, err) = run_and_kill(&args, Some(offset), 100, 500, hex);
            if err.contains("behind the last recorded time") && err.contains("waited") {
                waited += 1;
            }
            // Waited or not (a slow restart's clock may have passed the bound by itself),
            // nothing at or before the bound the crash left is issued again.
            let first = time_ms(kind, ids[0]);
            assert!(
                first > bound,
                "{kind} {offset}: first ID at {first} ms, not after the bound {bound} ms: {err}"
            );
            runs.push(ids);
        }
    }
    let out = floe(&args, Some("-3600s")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // EX_TEMPFAIL: refused for now, a later start (once the clock passed the bound) succeeds.
    assert_eq!(out.status.code(), Some(75), "{kind} -1h: {err}");
    assert!(out.stdout.is_empty(), "{kind} -1h issued IDs");
    assert!(
        err.contains("refusing to start") && err.contains("time bound") && err.contains("now "),
        "{kind} -1h: {err}"
    );
    let mut clean = args.clone();
    clean[3] = "10000".into();
    let out = super::ok(floe(&clean, None).output().unwrap());
    runs.push(out.lines().filter_map(hex).collect());
    // The clock is behind on purpose: order across runs is not promised, uniqueness is.
    for ids in &runs {
        tally.unordered(ids);
    }
    tally.row.order_violations = 0;
    tally.row.outcome = format!(
        "{} SIGKILLs; {waited} of {} restarts behind waited for the bound (the others' clocks had passed it); each issued only after it; 1 h behind refused (exit 75)",
        rounds * (1 + BEHIND.len()),
        rounds * BEHIND.len()
    );
    tally.row
}

/// `floe gen KIND` (UUIDv7 or ULID) on one state directory, killed with SIGKILL at random
/// moments: a run on the real clock, then restarts 0.5, 1.4 and 2.9 s behind and one an hour
/// behind, then a clean run, `rounds` times. Each run must carry on above every earlier run's
/// IDs (the durable time bound), and must not wait for the clock.
pub fn gen_ordered_across_restarts(kind: &str, rounds: usize) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state").display().to_string();
    let args: Vec<String> = [
        "gen",
        kind,
        "-n",
        "1000000000",
        "-o",
        "hex",
        "--state-dir",
        &state,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut tally = Tally::default();
    tally.row.scenario = format!(
        "kill -9 `floe gen {kind}` on one state directory, restart 0.5/1.4/2.9 s and 1 h behind"
    );
    let mut slowest = Duration::ZERO;
    let mut runs = 0;
    for _ in 0..rounds {
        for offset in [
            None,
            Some("-0.5s"),
            Some("-1.4s"),
            Some("-2.9s"),
            Some("-3600s"),
        ] {
            let started = Instant::now();
            let (ids, err) = run_and_kill(&args, offset, 100, 300, hex);
            // To its first ID: no wait for the clock (a start is well under a second).
            slowest = slowest.max(started.elapsed());
            assert!(!ids.is_empty(), "{kind} {offset:?}: no ID: {err}");
            // Ordered after every earlier run's IDs (Tally::run), even an hour behind.
            tally.run(&ids);
            runs += 1;
        }
    }
    let mut clean = args.clone();
    clean[3] = "10000".into();
    let out = super::ok(floe(&clean, Some("-60s")).output().unwrap());
    tally.run(&out.lines().filter_map(hex).collect::<Vec<_>>());
    tally.row.outcome = format!(
        "{runs} SIGKILLs, restarts up to 1 h behind and a clean run 60 s behind: every run's IDs above all earlier runs', none waited (slowest run with its kill: {} ms)",
        slowest.as_millis()
    );
    tally.row
}

/// What one HTTP client of `floe serve` saw.
#[derive(Debug, Default)]
pub struct ClientLog {
    /// IDs, in the order received.
    pub ids: Vec<u128>,
    /// Requests answered with an error status (e.g. 503 while a store is down).
    pub errors: usize,
    /// When the first error came, and the first success after an error.
    pub first_error: Option<Instant>,
    /// The first success after the first error.
    pub recovered: Option<Instant>,
    /// When the request of each of `ids` was sent.
    pub sent: Vec<Instant>,
}

/// Takes IDs from `path` on `port` until `stop`, reconnecting when the connection drops.
pub fn client(
    port: u16,
    path: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<ClientLog> {
    client_with(port, path, stop, Arc::new(Mutex::new(None)))
}

/// As [`client`], noting the time of each success in `last_ok`.
pub fn client_with(
    port: u16,
    path: String,
    stop: Arc<AtomicBool>,
    last_ok: Arc<Mutex<Option<Instant>>>,
) -> std::thread::JoinHandle<ClientLog> {
    std::thread::spawn(move || {
        let mut log = ClientLog::default();
        'connect: while !stop.load(Ordering::Relaxed) {
            let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let mut writer = stream.try_clone().unwrap();
            let mut reader = BufReader::new(stream);
            while !stop.load(Ordering::Relaxed) {
                // "{n}" in the path: a new key each request.
                let path = path.replace("{n}", &log.ids.len().to_string());
                let sent = Instant::now();
                match get(&mut writer, &mut reader, &path) {
                    Some((200, body)) => {
                        if let Some(id) = body.split('"').nth(3).and_then(dec) {
                            log.ids.push(id);
                            log.sent.push(sent);
                            *last_ok.lock().unwrap() = Some(Instant::now());
                            if log.first_error.is_some() && log.recovered.is_none() {
                                log.recovered = Some(Instant::now());
                            }
                        }
                    }
                    Some(_) => {
                        log.errors += 1;
                        log.first_error.get_or_insert_with(Instant::now);
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    None => continue 'connect,
                }
            }
        }
        log
    })
}

/// `floe serve --http 127.0.0.1:PORT --grpc off` with `args`, its clock `offset` behind.
pub fn serve(args: &[&str], port: u16, offset: Option<&str>) -> Floe {
    let mut all: Vec<String> = vec![
        "serve".into(),
        "--grpc".into(),
        "off".into(),
        "--http".into(),
        format!("127.0.0.1:{port}"),
    ];
    all.extend(args.iter().map(|s| s.to_string()));
    Floe::spawn(floe(&all, offset))
}

/// Waits until `server` listens on `port` (bounded), or panics with its stderr.
pub fn wait_listening(server: &Floe, port: u16) {
    if let Err(e) = server.wait_listening(&format!("127.0.0.1:{port}"), Duration::from_secs(30)) {
        panic!("floe serve {e}: {}", server.stderr());
    }
}

/// `floe serve --store ids=snowflake` under load from two clients, killed with SIGKILL at a
/// random moment, restarted 0.5, 1.4 and 2.9 s behind (`rounds` times), then 1 h behind.
pub fn serve_snowflake_clock_steps(rounds: usize) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    // Each restart listens on another port: the identity's port is pinned, so that the
    // restart leases the same worker ID and meets its time bound.
    let args = [
        "--store",
        "ids=snowflake",
        "--state-dir",
        &state,
        "--port",
        "1",
    ];
    let mut tally = Tally::default();
    tally.row.scenario =
        "kill -9 `floe serve --store ids=snowflake` under load, restart 0.5/1.4/2.9 s behind, then 1 h behind"
            .into();
    let state_dir = dir.path().to_path_buf();
    let mut one = |offset: Option<&str>| -> String {
        // The Snowflake generator's own bound (the server keeps sno's and LexicalUUID's too).
        let bound = bound_on_disk(&state_dir, "horizon-snowflake-");
        let port = free_port();
        let server = serve(&args, port, offset);
        wait_listening(&server, port);
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..2)
            .map(|_| client(port, "/v1/sequencer/ids/orders".into(), stop.clone()))
            .collect();
        std::thread::sleep(Duration::from_millis(300 + random_below(700)));
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        for c in clients {
            let ids = c.join().unwrap().ids;
            if offset.is_some() {
                let first = ids.iter().map(|id| time_ms("snowflake", *id)).min();
                let first = first.unwrap_or(u64::MAX);
                assert!(
                    first > bound,
                    "{offset:?}: an ID at {first} ms, not after the bound {bound} ms"
                );
            }
            tally.unordered(&ids);
        }
        server.stderr()
    };
    let mut waited = 0;
    for _ in 0..rounds {
        // As gen_clock_steps: the real clock, then each restart further behind.
        one(None);
        for offset in BEHIND {
            if one(Some(offset)).contains("waited") {
                waited += 1;
            }
        }
    }
    let (status, err, _) = serve(&args, free_port(), Some("-3600s")).wait(START_WITHIN);
    // Refused for now, as `floe gen` is (EX_TEMPFAIL): floe-server's start error keeps the
    // registry's kind.
    assert_eq!(status.code(), Some(75), "-1h: {err}");
    assert!(
        err.contains("refusing to start") && err.contains("time bound"),
        "{err}"
    );
    tally.row.order_violations = 0;
    tally.row.outcome = format!(
        "{} SIGKILLs under load; {waited} of {} restarts behind waited for the bound (the others' clocks had passed it); each served only after it; 1 h behind refused (exit 1)",
        rounds * (1 + BEHIND.len()),
        rounds * BEHIND.len()
    );
    tally.row
}

/// `floe seq KEY` on `store` killed with SIGKILL at random moments `kills` times, then a clean
/// run: every ID new, and above every ID printed before (WEAK and STRONG alike, since each run
/// is one process and a restart takes fresh store values).
pub fn seq_kill_loop(store: &str, increment: &str, kills: usize) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let key = format!("faults-{increment}-{}", nanos());
    let args = |n: u64| -> Vec<String> {
        [
            "seq",
            &key,
            "-n",
            &n.to_string(),
            "--increment",
            increment,
            "--store",
            store,
            "--state-dir",
            &dir.path().display().to_string(),
            "--step-min",
            "100",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let mut tally = Tally::default();
    let name = store.split("://").next().unwrap_or(store);
    tally.row.scenario = format!("kill -9 `floe seq` on {name}, {increment}, {kills} times");
    for _ in 0..kills {
        let (ids, _) = run_and_kill(&args(100_000_000), None, 50, 400, dec);
        tally.run(&ids);
    }
    let out = super::ok(cmd().args(args(1000)).output().unwrap());
    let ids: Vec<u128> = out.lines().filter_map(dec).collect();
    tally.run(&ids);
    tally.row.outcome = format!("{kills} SIGKILLs, each restart issued above every earlier ID");
    tally.row
}

/// A server floe uses, killed with SIGKILL and started again while `floe serve` is under load
/// from a WEAK and a STRONG client. `var` names the server (scripts/test.sh exports it with
/// `_PID` and `_START`); `url` is the store URL.
pub fn store_server_killed(name: &str, var: &str, url: &str, down_ms: u64) -> Row {
    let start = floe_testkit::env(&format!("{var}_START"));
    // The server scripts/test.sh started, or (when an earlier run of this scenario left it
    // stopped) one started again on the same data and port.
    let mut pid = floe_testkit::env(&format!("{var}_PID"));
    let mut ours: Option<floe_testkit::Server> = None;
    if !alive(&pid) {
        let server = floe_testkit::restart(&start);
        pid = server.0.id().to_string();
        wait_port(url);
        ours = Some(server);
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let store = format!("s={url}");
    // A server just started again may still be recovering: retry the start, bounded.
    let started = Instant::now();
    let (server, port) = loop {
        let port = free_port();
        let args = [
            "--store",
            &store,
            "--state-dir",
            &state,
            "--timeout-ms",
            "500",
        ];
        let server = serve(&args, port, None);
        if server
            .wait_listening(&format!("127.0.0.1:{port}"), START_WITHIN)
            .is_ok()
        {
            break (server, port);
        }
        let err = server.stderr();
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "floe serve on {url}: {err}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let key = format!("faults-server-{}", nanos());
    let stop = Arc::new(AtomicBool::new(false));
    let weak = client(
        port,
        format!("/v1/sequencer/s/{key}?increment=weak"),
        stop.clone(),
    );
    let strong_ok = Arc::new(Mutex::new(None));
    let strong = client_with(
        port,
        format!("/v1/sequencer/s/{key}?increment=strong"),
        stop.clone(),
        strong_ok.clone(),
    );
    std::thread::sleep(Duration::from_millis(500));
    floe_testkit::kill9(&pid);
    if let Some(server) = ours.as_mut() {
        // Reap it: PostgreSQL will not start while its old pid is a zombie of ours.
        let _ = server.0.wait();
    }
    std::thread::sleep(Duration::from_millis(down_ms));
    let store_server = floe_testkit::restart(&start);
    let restarted = Instant::now();
    // Serve on until STRONG is answered again after the restart (bounded: 30 s), and a
    // moment more: the clients recover by themselves.
    while strong_ok.lock().unwrap().is_none_or(|t| t < restarted)
        && restarted.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let (weak, strong) = (weak.join().unwrap(), strong.join().unwrap());
    server.term();
    let _ = server.wait_timeout(Duration::from_secs(60));
    // The restarted server is this scenario's: stopped with it.
    drop(store_server);
    drop(ours);
    let mut tally = Tally::default();
    tally.row.scenario = format!(
        "{name} killed with SIGKILL for {down_ms} ms under `floe serve` load (WEAK + STRONG)"
    );
    // Each client's IDs increase (STRONG always; WEAK within one process follows the order
    // of the requests); no ID goes to both.
    tally.client(&strong.ids);
    tally.client(&weak.ids);
    let recovered = strong
        .recovered
        .map(|r| r.saturating_duration_since(restarted).as_millis());
    tally.row.outcome = match (strong.first_error, recovered) {
        (None, _) => "no request failed".to_string(),
        (Some(_), Some(ms)) => format!(
            "{} STRONG / {} WEAK requests answered 503 while down; served again {ms} ms after the restart",
            strong.errors, weak.errors
        ),
        (Some(_), None) => format!("did not recover ({} errors)", strong.errors),
    };
    if strong.ids.is_empty() || recovered.is_none() && strong.first_error.is_some() {
        tally.row.outcome.push_str(" FAILED");
    }
    tally.row
}

/// Whether process `pid` is running (not gone, not a zombie).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// Waits (bounded) until the server of `url` (scheme://[user@]host:port[/...]) accepts
/// connections.
fn wait_port(url: &str) {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let hostport = rest.split('/').next().unwrap_or(rest);
    let hostport = hostport.rsplit('@').next().unwrap_or(hostport);
    let started = Instant::now();
    while TcpStream::connect(hostport).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{url} not up in 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Accepting is not always serving yet (PostgreSQL starting up): a moment more.
    std::thread::sleep(Duration::from_millis(500));
}

/// `floe serve` on the embedded store, SIGTERM while a client holds a half-sent request and
/// another an idle socket, under STRONG load; then a restart on the same state directory.
pub fn sigterm_with_idle_connections() -> Row {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().display().to_string();
    let args = [
        "--store",
        "main=embedded",
        "--state-dir",
        &state,
        "--shutdown-timeout-secs",
        "2",
        "--header-timeout-secs",
        "600",
        "--idle-timeout-secs",
        "600",
    ];
    let mut tally = Tally::default();
    tally.row.scenario =
        "SIGTERM to `floe serve` under load while a half-sent request and an idle socket stay open, then a restart"
            .into();
    let path = "/v1/sequencer/main/orders?increment=strong".to_string();
    // Run 1: held connections, load, SIGTERM.
    let port = free_port();
    let server = serve(&args, port, None);
    wait_listening(&server, port);
    let mut half = TcpStream::connect(("127.0.0.1", port)).unwrap();
    half.write_all(
        b"GET /v1/sequencer/main/orders?increment=strong HTTP/1.1\r\nHost: localhost\r\n",
    )
    .unwrap();
    let _idle = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let load = client(port, path.clone(), stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    server.term();
    let termed = Instant::now();
    let status = server
        .wait_timeout(Duration::from_secs(30))
        .unwrap_or_else(|| {
            server.kill9();
            server.try_wait().unwrap()
        });
    let took = termed.elapsed();
    stop.store(true, Ordering::Relaxed);
    tally.run(&load.join().unwrap().ids);
    // Run 2: the same state directory at once.
    let port = free_port();
    let restarted = Instant::now();
    let server = serve(&args, port, None);
    wait_listening(&server, port);
    let up = restarted.elapsed();
    let stop = Arc::new(AtomicBool::new(false));
    let load = client(port, path, stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    tally.run(&load.join().unwrap().ids);
    server.term();
    let _ = server.wait_timeout(Duration::from_secs(60));
    tally.row.outcome = format!(
        "exited ({status}) {} ms after SIGTERM (deadline 2 s); restart on the same state directory listening in {} ms",
        took.as_millis(),
        up.as_millis()
    );
    if !status.success() || took > Duration::from_secs(4) {
        tally.row.outcome.push_str(" FAILED");
    }
    tally.row
}

/// `floe serve` on the embedded store in a 600 KB tmpfs: the disk is filled under load
/// (WEAK and STRONG), then freed; the store must serve again by itself.
pub fn disk_full_embedded() -> Row {
    let mut tally = Tally::default();
    tally.row.scenario =
        "disk full under `floe serve` load (embedded store on a 600 KB tmpfs), then space freed"
            .into();
    let dir = tempfile::tempdir().unwrap();
    let mount = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=600k", "tmpfs"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        mount.status.success(),
        "mount a tmpfs (the suite runs as root): {}",
        String::from_utf8_lossy(&mount.stderr)
    );
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(dir.path().to_path_buf());
    let state = dir.path().join("state").display().to_string();
    let port = free_port();
    let server = serve(
        &["--store", "main=embedded", "--state-dir", &state],
        port,
        None,
    );
    wait_listening(&server, port);
    let stop = Arc::new(AtomicBool::new(false));
    let strong_ok = Arc::new(Mutex::new(None));
    let strong = client_with(
        port,
        "/v1/sequencer/main/orders?increment=strong".into(),
        stop.clone(),
        strong_ok.clone(),
    );
    let weak = client(
        port,
        "/v1/sequencer/main/orders?increment=weak".into(),
        stop.clone(),
    );
    // New keys all the time: the database must grow while the disk is full.
    let keys = client(
        port,
        "/v1/sequencer/main/key-{n}?increment=strong".into(),
        stop.clone(),
    );
    std::thread::sleep(Duration::from_millis(300));
    // Fill the disk.
    let filler = dir.path().join("filler");
    {
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 4096];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }
    // Full until requests fail (bounded), and a moment more.
    let full = Instant::now();
    while strong_ok
        .lock()
        .unwrap()
        .is_some_and(|t| t.elapsed() < Duration::from_millis(200))
        && full.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1000));
    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    while strong_ok.lock().unwrap().is_none_or(|t| t < freed)
        && freed.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let (strong, weak, keys) = (
        strong.join().unwrap(),
        weak.join().unwrap(),
        keys.join().unwrap(),
    );
    server.term();
    let _ = server.wait_timeout(Duration::from_secs(60));
    tally.client(&strong.ids);
    tally.client(&weak.ids);
    // Each of these is the first ID of its own key: counted, not compared.
    tally.row.issued += keys.ids.len();
    let errors = strong.errors + weak.errors + keys.errors;
    let recovered = strong_ok
        .lock()
        .unwrap()
        .filter(|t| *t >= freed)
        .map(|t| t.duration_since(freed).as_millis());
    tally.row.outcome = match recovered {
        Some(ms) if errors > 0 => format!(
            "{errors} requests answered 503 while full; served again {ms} ms after space returned"
        ),
        Some(_) => "the disk never filled for floe FAILED".into(),
        None => format!("did not recover ({errors} errors) FAILED"),
    };
    tally.row
}
