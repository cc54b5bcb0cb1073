//! Pauses and partitions: real `floe serve` nodes on real registries and stores,
//! one of them stopped (SIGSTOP) or cut off (a TCP proxy that refuses, or a blackhole), and a
//! replacement that takes its worker ID; the registries themselves as 3-member clusters whose
//! leader is killed or partitioned. Every call is recorded (start, end, values) in a
//! [`History`] and checked: no value twice in a stream, STRONG in real-time order, and every
//! Snowflake, sno and LexicalUUID owner field used by the node it was granted to, never by an
//! old holder after the new one issued with it.
//!
//! Each scenario returns a [`Row`] for the fault table (scripts/faults.sh runs each row 20
//! times or more with the release binary; scripts/test.sh once).
#![allow(dead_code)] // the short and the long matrix use different parts

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use floe_testkit::env;
use floe_testkit::history::{Grants, History, Outcome, Report, Rules};
use floe_testkit::proxy::{Cut, Proxy};

use floe_testkit::free_port;
use floe_testkit::http::get;
use floe_testkit::process::Floe;

use crate::common::faults::Row;

// ---------------------------------------------------------------------------------------
// Nodes

/// A `floe serve` process on `127.0.0.1:PORT` (HTTP only), its standard error kept.
pub struct Node {
    pub name: String,
    pub port: u16,
    floe: Floe,
}

/// A directory for a node's state: on tmpfs when there is one, where fsyncs are fastest (the
/// time bound's fsync once hid a repeat by luck on slower disks).
pub fn state_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

impl Node {
    /// Starts `floe serve --grpc off --http 127.0.0.1:PORT ARGS` and returns at once.
    pub fn spawn(name: &str, port: u16, args: &[String]) -> Node {
        let mut command = crate::common::cmd();
        command
            .arg("serve")
            .args(["--grpc", "off", "--http", &format!("127.0.0.1:{port}")])
            .args(args)
            .env("RUST_LOG", "info");
        Node {
            name: name.to_string(),
            port,
            floe: Floe::spawn(command),
        }
    }

    /// Waits until the node listens (`Ok`), or it exits (`Err` with its status), at most
    /// `limit` (`Err` too).
    pub fn wait_listening(&mut self, limit: Duration) -> Result<(), String> {
        self.floe
            .wait_listening(&format!("127.0.0.1:{}", self.port), limit)
    }

    pub fn pid(&self) -> u32 {
        self.floe.pid()
    }

    /// Sends `signal` (`STOP`, `CONT`, `TERM`, `KILL`).
    pub fn signal(&self, signal: &str) {
        self.floe.signal(signal);
    }

    /// SIGTERM (after SIGCONT), and waits at most 20 s for the exit (then SIGKILL).
    pub fn stop(mut self) -> Option<ExitStatus> {
        self.stop_keep()
    }

    /// As [`stop`](Self::stop), keeping the node (its log) for the caller.
    pub fn stop_keep(&mut self) -> Option<ExitStatus> {
        self.signal("CONT");
        self.signal("TERM");
        self.floe.wait_timeout(Duration::from_secs(20))
    }

    /// The lines the node wrote to standard error so far.
    pub fn log(&self) -> Vec<String> {
        self.floe.log()
    }

    /// What the node was granted, from its start-up lines: `(stream, field)` pairs.
    pub fn granted(&self) -> Vec<(&'static str, u64)> {
        let log = self.log();
        let field = |prefix: &str| {
            log.iter().find_map(|l| {
                let rest = &l[l.find(prefix)? + prefix.len()..];
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
        };
        [
            ("snowflake", field("snowflake default: worker ")),
            ("sno", field("sno: partition ")),
            ("lexical", field("lexical: worker ")),
        ]
        .into_iter()
        .filter_map(|(s, f)| f.map(|f| (s, f)))
        .collect()
    }
}

/// A replacement node started over and over (as a supervisor restarts a pod that exits) until
/// one run listens, or `stop`.
pub struct Supervised {
    pub node: Arc<Mutex<Option<Node>>>,
    /// Exits before the run that listened, with the last line each wrote.
    pub attempts: Arc<Mutex<Vec<String>>>,
    /// When the run that listens began to.
    pub listening_at: Arc<Mutex<Option<Duration>>>,
    thread: JoinHandle<()>,
}

impl Supervised {
    pub fn start(
        name: &str,
        port: u16,
        args: Vec<String>,
        history: &History,
        stop: Arc<AtomicBool>,
    ) -> Supervised {
        let node = Arc::new(Mutex::new(None));
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let listening_at = Arc::new(Mutex::new(None));
        let thread = {
            let (node, attempts, at, history, name) = (
                Arc::clone(&node),
                Arc::clone(&attempts),
                Arc::clone(&listening_at),
                history.clone(),
                name.to_string(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let mut n = Node::spawn(&name, port, &args);
                    match n.wait_listening(Duration::from_secs(60)) {
                        Ok(()) => {
                            *at.lock().unwrap() = Some(history.now());
                            *node.lock().unwrap() = Some(n);
                            return;
                        }
                        Err(why) => {
                            let last = n.log().last().cloned().unwrap_or_default();
                            attempts.lock().unwrap().push(format!("{why}: {last}"));
                            drop(n);
                            std::thread::sleep(Duration::from_millis(200));
                        }
                    }
                }
            })
        };
        Supervised {
            node,
            attempts,
            listening_at,
            thread,
        }
    }

    /// Waits for the supervisor to give up or succeed (it stops when `stop` is set).
    pub fn join(self) -> (Option<Node>, Vec<String>, Option<Duration>) {
        let _ = self.thread.join();
        let node = self.node.lock().unwrap().take();
        let attempts = self.attempts.lock().unwrap().clone();
        let at = *self.listening_at.lock().unwrap();
        (node, attempts, at)
    }
}

// ---------------------------------------------------------------------------------------
// Streams and clients

/// What a client asks for, and how the answer's values are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Snowflake,
    Sno,
    Lexical,
    Strong,
    Weak,
}

impl Stream {
    pub fn name(self, key: &str) -> String {
        match self {
            Stream::Snowflake => "snowflake".into(),
            Stream::Sno => "sno".into(),
            Stream::Lexical => "lexical".into(),
            Stream::Strong => format!("strong:{key}"),
            Stream::Weak => format!("weak:{key}"),
        }
    }

    fn path(self, store: &str, key: &str) -> String {
        match self {
            Stream::Snowflake => "/v1/ids/snowflake?count=100".into(),
            Stream::Sno => "/v1/ids/sno?count=100".into(),
            Stream::Lexical => "/v1/ids/lexical?count=100".into(),
            // Small STRONG batches: many calls, so that real-time order is tested often.
            Stream::Strong => format!("/v1/sequencer/{store}/{key}?increment=strong&count=2"),
            Stream::Weak => format!("/v1/sequencer/{store}/{key}?count=50"),
        }
    }

    fn value(self, text: &str) -> Option<u128> {
        match self {
            Stream::Snowflake | Stream::Strong | Stream::Weak => text.parse().ok(),
            Stream::Sno => {
                let id: floe_core::sno::SnoId = text.parse().ok()?;
                Some(
                    id.to_bytes()
                        .iter()
                        .fold(0u128, |n, b| n << 8 | u128::from(*b)),
                )
            }
            Stream::Lexical => u128::from_str_radix(&text.replace('-', ""), 16).ok(),
        }
    }
}

/// A Leaf-layout Snowflake ID's worker field (10 bits above 12 sequence bits).
pub fn leaf_worker(v: u128) -> u64 {
    (v >> 12) as u64 & 0x3ff
}

/// The one-worker layout (41/0/0/22) has no worker field: every ID is worker 0's.
pub fn no_worker(_: u128) -> u64 {
    0
}

/// A sno ID's partition (bytes 6 and 7 of 10).
pub fn sno_partition(v: u128) -> u64 {
    (v >> 16) as u64 & 0xffff
}

/// A LexicalUUID's worker (its low 64 bits).
pub fn lexical_worker(v: u128) -> u64 {
    v as u64
}

/// A Snowflake ID's time units (both layouts here put 22 bits below them).
pub fn snowflake_time(v: u128) -> u64 {
    (v >> 22) as u64
}

/// A sno ID's time (4 ms units, the 39 bits above the tick-tock bit).
pub fn sno_time(v: u128) -> u64 {
    (v >> 41) as u64
}

/// A LexicalUUID's timestamp (microseconds, its high 64 bits).
pub fn lexical_time(v: u128) -> u64 {
    (v >> 64) as u64
}

/// The rules of each stream: owners and times for the generators (Snowflake in
/// `layout_owner`'s layout), real-time order for STRONG.
pub fn rules(layout_owner: fn(u128) -> u64, key: &str) -> HashMap<String, Rules> {
    let owner = |f, t| Rules {
        real_time_order: false,
        owner: Some(f),
        time: Some(t),
    };
    HashMap::from([
        ("snowflake".to_string(), owner(layout_owner, snowflake_time)),
        ("sno".to_string(), owner(sno_partition, sno_time)),
        ("lexical".to_string(), owner(lexical_worker, lexical_time)),
        (
            Stream::Strong.name(key),
            Rules {
                real_time_order: true,
                ..Rules::default()
            },
        ),
    ])
}

/// Calls answered with something no client should see: an unreadable body, a status other than
/// 200 and 503. (Refused or broken connections are not counted: nodes stop, and start.)
pub fn unexpected(report_calls: &[floe_testkit::history::Call]) -> Vec<String> {
    report_calls
        .iter()
        .filter_map(|c| match &c.outcome {
            Outcome::Failed(why) if why != "connect" && why != "connection" => {
                Some(format!("{} {}: {why}", c.node, c.stream))
            }
            _ => None,
        })
        .take(3)
        .collect()
}

/// The owner fields each node was granted, as the checker takes them.
fn grants<'a>(nodes: impl IntoIterator<Item = (&'a str, Vec<(&'static str, u64)>)>) -> Grants {
    let mut grants: Grants = HashMap::new();
    for (node, fields) in nodes {
        for (stream, f) in fields {
            grants
                .entry((stream.to_string(), node.to_string()))
                .or_default()
                .insert(f);
        }
    }
    grants
}

fn values(stream: Stream, body: &str) -> Option<Vec<u128>> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let texts: Vec<&str> = match (v.get("ids"), v.get("next_id")) {
        (Some(ids), _) => ids
            .as_array()?
            .iter()
            .map(|i| i.as_str())
            .collect::<Option<_>>()?,
        (None, Some(id)) => vec![id.as_str()?],
        _ => return None,
    };
    texts.iter().map(|t| stream.value(t)).collect()
}

/// A client thread: asks `node` for `stream` again and again until `stop`, recording every
/// call. An answer is waited for as long as it takes (a stopped node answers after SIGCONT:
/// those IDs count too).
pub fn client(
    history: &History,
    node: &str,
    port: u16,
    stream: Stream,
    store: &str,
    key: &str,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    client_every(
        history,
        node,
        port,
        stream,
        (store, key),
        stop,
        Duration::ZERO,
    )
}

/// As [`client`] (`(store, key)` together), a call begun every `pace` at most (zero: back to
/// back).
pub fn client_every(
    history: &History,
    node: &str,
    port: u16,
    stream: Stream,
    (store, key): (&str, &str),
    stop: Arc<AtomicBool>,
    pace: Duration,
) -> JoinHandle<()> {
    let (history, node, name, path) = (
        history.clone(),
        node.to_string(),
        stream.name(key),
        stream.path(store, key),
    );
    std::thread::spawn(move || {
        'connect: while !stop.load(Ordering::SeqCst) {
            let start = history.now();
            let Ok(conn) = TcpStream::connect(("127.0.0.1", port)) else {
                history.push(floe_testkit::history::Call {
                    node: node.clone(),
                    stream: name.clone(),
                    start,
                    end: history.now(),
                    outcome: Outcome::Failed("connect".into()),
                });
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(120)));
            let _ = conn.set_nodelay(true);
            let mut writer = conn.try_clone().unwrap();
            let mut reader = BufReader::new(conn);
            while !stop.load(Ordering::SeqCst) {
                let began = Instant::now();
                let mut broken = false;
                let outcome = history.record(&node, &name, || {
                    match get(&mut writer, &mut reader, &path) {
                        Some((200, body)) => match values(stream, &body) {
                            Some(v) => Outcome::Values(v),
                            None => Outcome::Failed(format!("unreadable: {body}")),
                        },
                        Some((503, _)) => Outcome::Unavailable,
                        Some((status, body)) => Outcome::Failed(format!("{status} {body}")),
                        None => {
                            broken = true;
                            Outcome::Failed("connection".into())
                        }
                    }
                });
                if broken {
                    continue 'connect;
                }
                if !matches!(outcome, Outcome::Values(_)) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                std::thread::sleep(pace.saturating_sub(began.elapsed()));
            }
        }
    })
}

/// The default Snowflake generator's `floe_lease_window_seconds` and
/// `floe_lease_remaining_seconds`, from a node's `/metrics`.
pub fn lease_metrics(port: u16) -> Option<(f64, f64)> {
    let conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut writer = conn.try_clone().ok()?;
    let mut reader = BufReader::new(conn);
    let (status, body) = get(&mut writer, &mut reader, "/metrics")?;
    if status != 200 {
        return None;
    }
    let value = |name: &str| {
        body.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(r#"{kind="snowflake",generator="default"} "#)?
                .trim()
                .parse::<f64>()
                .ok()
        })
    };
    Some((
        value("floe_lease_window_seconds")?,
        value("floe_lease_remaining_seconds")?,
    ))
}

/// A thread asking a node's `/readyz` every 50 ms until `stop`: (when, status) of each answer.
pub fn readiness(
    history: &History,
    port: u16,
    stop: &Arc<AtomicBool>,
) -> JoinHandle<Vec<(Duration, u16)>> {
    let (history, stop) = (history.clone(), Arc::clone(stop));
    std::thread::spawn(move || {
        let mut samples = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            if let Ok(conn) = TcpStream::connect(("127.0.0.1", port)) {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(120)));
                let mut writer = conn.try_clone().unwrap();
                let mut reader = BufReader::new(conn);
                while !stop.load(Ordering::SeqCst) {
                    let Some((status, _)) = get(&mut writer, &mut reader, "/readyz") else {
                        break;
                    };
                    samples.push((history.now(), status));
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        samples
    })
}

/// Client threads for every stream of `streams` on a node.
pub fn clients(
    history: &History,
    node: &str,
    port: u16,
    streams: &[Stream],
    store: &str,
    key: &str,
    stop: &Arc<AtomicBool>,
) -> Vec<JoinHandle<()>> {
    clients_every(
        history,
        node,
        port,
        streams,
        (store, key),
        stop,
        Duration::ZERO,
    )
}

/// As [`clients`], each stream's calls begun every `pace` at most (zero: back to back).
pub fn clients_every(
    history: &History,
    node: &str,
    port: u16,
    streams: &[Stream],
    target: (&str, &str),
    stop: &Arc<AtomicBool>,
    pace: Duration,
) -> Vec<JoinHandle<()>> {
    streams
        .iter()
        .map(|&s| client_every(history, node, port, s, target, Arc::clone(stop), pace))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Registries

/// A registry for the takeover scenarios, with its expiry.
#[derive(Debug, Clone, Copy)]
pub enum Reg {
    /// ZooKeeper (FLOE_TEST_ZOOKEEPER), sessions of this many seconds.
    Zk(u64),
    /// etcd (FLOE_TEST_ETCD), leases of this TTL in seconds.
    Etcd(u64),
}

impl Reg {
    fn server(self) -> String {
        match self {
            Reg::Zk(_) => env("FLOE_TEST_ZOOKEEPER"),
            Reg::Etcd(_) => env("FLOE_TEST_ETCD"),
        }
    }

    /// The registry's URL for servers `servers` (comma-separated), under `root`, with the
    /// reach ([`Reg::reach`]).
    pub fn url(self, servers: &str, root: &str) -> String {
        let h = self.reach().as_secs();
        match self {
            Reg::Zk(t) => format!("zk://{servers}{root}?session_timeout={t}&reach={h}"),
            Reg::Etcd(t) => format!("etcd://{servers}{root}?ttl={t}&reach={h}"),
        }
    }

    /// `H`: the reach these rows run with, 2/3 of the expiry in whole seconds (the window the
    /// rows were first measured with, before the reach was chosen apart from the expiry): the
    /// takeovers happen within seconds, as the rows must show.
    pub fn reach(self) -> Duration {
        Duration::from_secs((self.expiry().as_secs() * 2 / 3).max(1))
    }

    /// `T`: the expiry.
    pub fn expiry(self) -> Duration {
        match self {
            Reg::Zk(t) | Reg::Etcd(t) => Duration::from_secs(t),
        }
    }

    /// `W = H - H/10`: the holder's window.
    pub fn window(self) -> Duration {
        self.reach() - self.reach() / 10
    }

    /// When the ZooKeeper client itself gives up on its session (1.4 T).
    pub fn client_gives_up(self) -> Duration {
        self.expiry() * 7 / 5
    }

    pub fn name(self) -> String {
        match self {
            Reg::Zk(t) => format!("ZooKeeper (session {t} s)"),
            Reg::Etcd(t) => format!("etcd (TTL {t} s)"),
        }
    }
}

/// What happens to node A.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// SIGSTOP, then SIGCONT.
    Pause,
    /// Its path to the registry cut by a proxy, then healed.
    Cut(Cut),
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Pause => "SIGSTOP",
            Fault::Cut(Cut::Refuse) => "cut from the registry (connections refused)",
            Fault::Cut(Cut::Blackhole) => "cut from the registry (blackhole)",
        }
    }
}

/// Who takes A's worker ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replacement {
    /// A's identity on a fresh state directory (a rescheduled StatefulSet pod).
    SameIdentity,
    /// Another identity on a one-worker layout, by `--reclaim-after 1`.
    Reclaim,
}

// ---------------------------------------------------------------------------------------
// Takeover scenarios

/// A row: `runs` runs of A stopped or cut off for each of `holds` in turn, while B tries to
/// take A's worker ID.
#[derive(Debug, Clone)]
pub struct Takeover {
    pub reg: Reg,
    pub fault: Fault,
    pub replacement: Replacement,
    /// How long the fault lasts, one per run in turn.
    pub holds: Vec<(String, Duration)>,
}

/// What the runs of one hold saw, for the row's outcome.
#[derive(Debug, Clone, Default)]
struct HoldTally {
    runs: usize,
    took_over: usize,
    /// Runs where A, back first, held its ID again and served on (B found it held).
    held_again: usize,
    /// Seconds after the fault began: A's last Snowflake ID, B's first.
    a_last: Vec<f64>,
    b_first: Vec<f64>,
    /// Seconds A answered 503 (longest run).
    a_unavailable: Vec<f64>,
}

/// What one run saw.
#[derive(Debug, Default)]
struct RunNotes {
    report: Report,
    /// Whether B served.
    took_over: bool,
    /// Whether A served after the fault healed while B did not (A held its ID again first).
    held_again: bool,
    /// A's last successful call's end, after the fault began.
    a_last: Option<Duration>,
    /// B's first successful call's start, after the fault began.
    b_first: Option<Duration>,
    /// How long A answered 503 (longest run).
    a_unavailable: Duration,
    /// When A's `/readyz` first said 503 after the fault began (cut faults: A still answers).
    a_not_ready: Option<Duration>,
    problems: Vec<String>,
}

impl Takeover {
    /// The standard holds: for a pause, just under the window, at it, well over the expiry;
    /// for a cut, under the window, and over the expiry healed before and after the
    /// ZooKeeper client's own deadline (1.4 T).
    pub fn standard(reg: Reg, fault: Fault, replacement: Replacement) -> Takeover {
        let (w, t) = (reg.window(), reg.expiry());
        let under = w.saturating_sub(Duration::from_millis(300));
        let holds = match fault {
            Fault::Pause => vec![
                ("just under the window".to_string(), under),
                ("at the window".to_string(), w),
                ("well over the expiry (2.5 T)".to_string(), t * 5 / 2),
            ],
            Fault::Cut(_) => vec![
                ("under the window".to_string(), under),
                (
                    "past the expiry, healed before the client's deadline (T + 1 s)".to_string(),
                    t + Duration::from_secs(1),
                ),
                (
                    "past the expiry, healed after the client's deadline (1.4 T + 1.5 s)"
                        .to_string(),
                    reg.client_gives_up() + Duration::from_millis(1500),
                ),
            ],
        };
        Takeover {
            reg,
            fault,
            replacement,
            holds,
        }
    }

    pub fn scenario(&self) -> String {
        let who = match self.replacement {
            Replacement::SameIdentity => "B = A's identity on a fresh state directory",
            Replacement::Reclaim => {
                "B takes A's only worker ID by reclaim (41/0/0/22 layout, --reclaim-after 1)"
            }
        };
        let holds: Vec<String> = self
            .holds
            .iter()
            .map(|(n, d)| format!("{n}: {:.1} s", d.as_secs_f64()))
            .collect();
        format!(
            "{}: A {} under load; {who}; holds {}",
            self.reg.name(),
            self.fault.name(),
            holds.join(", ")
        )
    }

    /// Runs the row `runs` times (holds in turn).
    pub fn row(&self, runs: usize) -> Row {
        let mut row = Row {
            scenario: self.scenario(),
            ..Row::default()
        };
        let mut by_hold: Vec<HoldTally> = vec![HoldTally::default(); self.holds.len()];
        let mut not_ready = Vec::new();
        let mut problems = Vec::new();
        // The long matrix runs a few runs side by side (each its own root, proxy and nodes),
        // each stream asked every 10 ms there; the suite one at a time, back to back.
        let (wave, pace) = if crate::common::faults::full() {
            (
                crate::common::faults::parallel(3),
                Duration::from_millis(10),
            )
        } else {
            (1, Duration::ZERO)
        };
        let mut done = Vec::new();
        for first in (0..runs).step_by(wave) {
            let last = (first + wave).min(runs);
            done.extend(std::thread::scope(|s| {
                let handles: Vec<_> = (first..last)
                    .map(|run| {
                        let h = run % self.holds.len();
                        s.spawn(move || (h, self.run(self.holds[h].1, pace)))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect::<Vec<_>>()
            }));
        }
        for (h, notes) in done {
            row.issued += notes.report.values;
            row.repeats += notes.report.repeats.len();
            row.order_violations +=
                notes.report.order_violations.len() + notes.report.ownership_violations.len();
            let slot = &mut by_hold[h];
            slot.runs += 1;
            if notes.took_over {
                slot.took_over += 1;
            }
            if notes.held_again {
                slot.held_again += 1;
            }
            if let Some(a) = notes.a_last {
                slot.a_last.push(a.as_secs_f64());
            }
            if let Some(b) = notes.b_first {
                slot.b_first.push(b.as_secs_f64());
            }
            slot.a_unavailable.push(notes.a_unavailable.as_secs_f64());
            if let (Some(t), Fault::Cut(_)) = (notes.a_not_ready, self.fault) {
                not_ready.push(t.as_secs_f64());
            }
            problems.extend(notes.problems);
        }
        let mut outcome = String::new();
        for ((name, _), t) in self.holds.iter().zip(&by_hold) {
            if t.runs == 0 {
                continue;
            }
            let _ = write!(
                outcome,
                "{name} ({} runs): B took over in {}{}; A's last Snowflake ID {} after the fault began, B's first {}; A answered 503 for {} (longest run). ",
                t.runs,
                t.took_over,
                if t.held_again > 0 {
                    format!(", A held its ID again before B could in {}", t.held_again)
                } else {
                    String::new()
                },
                span(&t.a_last),
                span(&t.b_first),
                span(&t.a_unavailable)
            );
        }
        if !not_ready.is_empty() {
            let _ = write!(
                outcome,
                "A's /readyz answered 503 from {} after the cut. ",
                span(&not_ready)
            );
        }
        if !problems.is_empty() {
            let _ = write!(outcome, "FAILED: {}", problems.join("; "));
        }
        row.outcome = outcome.trim().to_string();
        row
    }

    fn run(&self, hold: Duration, pace: Duration) -> RunNotes {
        let reg = self.reg;
        let root = format!("/{}", floe_testkit::unique("pause"));
        let server = reg.server();
        let proxy = Proxy::start(&server);
        let a_registry = match self.fault {
            Fault::Pause => reg.url(&server, &root),
            Fault::Cut(_) => reg.url(&proxy.addr(), &root),
        };
        let b_registry = reg.url(&server, &root);
        let (a_dir, b_dir) = (state_dir(), state_dir());
        let layout = match self.replacement {
            Replacement::SameIdentity => "leaf",
            Replacement::Reclaim => "41/0/0/22",
        };
        let args = |registry: &str, dir: &tempfile::TempDir, port: &str| -> Vec<String> {
            let mut a: Vec<String> = [
                "--registry",
                registry,
                "--state-dir",
                dir.path().to_str().unwrap(),
                "--service",
                "pause",
                "--host",
                "h",
                "--port",
                port,
                "--layout",
                layout,
                "--store",
                "default=memory",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            if self.replacement == Replacement::Reclaim {
                a.extend(["--reclaim-after".to_string(), "1".to_string()]);
            }
            a
        };
        let history = History::new();
        let stop = Arc::new(AtomicBool::new(false));
        let streams = [Stream::Snowflake, Stream::Sno, Stream::Lexical];
        let mut a = Node::spawn("A", free_port(), &args(&a_registry, &a_dir, "7"));
        if let Err(e) = a.wait_listening(Duration::from_secs(30)) {
            panic!("A did not start: {e}: {:?}", a.log());
        }
        let target = ("default", "k");
        let mut threads = clients_every(&history, "A", a.port, &streams, target, &stop, pace);
        let readiness = readiness(&history, a.port, &stop);
        std::thread::sleep(Duration::from_millis(800));
        // The lease as /metrics shows it: its window, and time left in it.
        let metrics = lease_metrics(a.port);

        // The fault, and B trying to take over from that moment on (restarted when it exits).
        let began = history.now();
        match self.fault {
            Fault::Pause => a.signal("STOP"),
            Fault::Cut(how) => proxy.cut(how),
        }
        let b_port = free_port();
        let b_port_identity = match self.replacement {
            Replacement::SameIdentity => "7",
            Replacement::Reclaim => "8",
        };
        let b_stop = Arc::new(AtomicBool::new(false));
        let b = Supervised::start(
            "B",
            b_port,
            args(&b_registry, &b_dir, b_port_identity),
            &history,
            Arc::clone(&b_stop),
        );
        // B's clients start as soon as it listens.
        let b_clients = {
            let (history, stop, node) = (history.clone(), Arc::clone(&stop), Arc::clone(&b.node));
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if node.lock().unwrap().is_some() {
                        return clients_every(&history, "B", b_port, &streams, target, &stop, pace);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Vec::new()
            })
        };
        std::thread::sleep(hold);
        let healed = history.now();
        match self.fault {
            Fault::Pause => a.signal("CONT"),
            Fault::Cut(_) => proxy.heal(),
        }
        // Both go on: long enough for B to take over when it can (the expiry, B's takeover
        // wait of W and its start) and for A to show what it does after the fault.
        let settle = (reg.expiry() + reg.window() * 2 + Duration::from_secs(3))
            .saturating_sub(hold)
            .max(Duration::from_millis(2500));
        std::thread::sleep(settle);
        b_stop.store(true, Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
        let (b_node, b_attempts, _) = b.join();
        if std::env::var("FLOE_PAUSES_DEBUG").is_ok() {
            eprintln!("B's attempts: {b_attempts:#?}");
        }
        threads.extend(b_clients.join().unwrap());
        for t in threads {
            let _ = t.join();
        }
        let samples = readiness.join().unwrap();
        let a_log = a.log();
        let a_granted = a.granted();
        let b_granted = b_node.as_ref().map(Node::granted).unwrap_or_default();
        let a_status = a.stop_keep();
        let b_status = b_node.map(Node::stop);

        let granted = grants([("A", a_granted), ("B", b_granted)]);
        let owner = match self.replacement {
            Replacement::SameIdentity => leaf_worker as fn(u128) -> u64,
            Replacement::Reclaim => no_worker,
        };
        let report = history.check(&rules(owner, "k"), &granted);
        let calls = history.calls();
        // Timed on the Snowflake stream: its worker ID is the one B takes in every case (by
        // reclaim, A keeps its own sno partition and LexicalUUID worker).
        let ok = |c: &&floe_testkit::history::Call, node: &str| {
            c.node == node && c.stream == "snowflake" && matches!(c.outcome, Outcome::Values(_))
        };
        let a_last = calls
            .iter()
            .filter(|c| ok(c, "A"))
            .map(|c| c.end)
            .max()
            .filter(|&e| e > began)
            .map(|e| e - began);
        let b_first = calls
            .iter()
            .filter(|c| ok(c, "B"))
            .map(|c| c.start)
            .min()
            .map(|s| s.saturating_sub(began));
        let mut problems: Vec<String> = report.problems(3);
        problems.extend(unexpected(&calls));
        match metrics {
            Some((window, left))
                if (window - reg.window().as_secs_f64()).abs() < 0.01
                    && left > 0.0
                    && left <= window => {}
            other => problems.push(format!(
                "A's /metrics: floe_lease_window_seconds and floe_lease_remaining_seconds of the Snowflake lease were {other:?}, its window is {:?}",
                reg.window()
            )),
        }
        // Past the expiry B must have taken the ID over (else the run proved nothing), unless
        // A, back before B could claim the idle ID, held it again and served on (a race either
        // may win); within the window nobody can.
        let since_healed = healed.saturating_sub(began);
        let held_again =
            hold > reg.expiry() && b_first.is_none() && a_last.is_some_and(|a| a > since_healed);
        if hold > reg.expiry() && b_first.is_none() && !held_again {
            problems.push(format!(
                "B never served though A was out past the expiry ({:.1} s), nor did A after the heal; B's attempts: {}",
                hold.as_secs_f64(),
                if b_attempts.is_empty() {
                    "none failed".to_string()
                } else {
                    b_attempts.join(" | ")
                }
            ));
        }
        if hold < reg.window() && b_first.is_some() {
            problems.push(format!(
                "B served though A was out only {:.1} s, within its window",
                hold.as_secs_f64()
            ));
        }
        if a_status.is_none_or(|s| !s.success()) {
            if std::env::var("FLOE_PAUSES_DEBUG").is_ok() {
                eprintln!("A's log:\n{}", a.log().join("\n"));
            }
            problems.push(format!(
                "A did not exit cleanly after SIGTERM ({a_status:?}): {}",
                a_log.last().cloned().unwrap_or_default()
            ));
        }
        if let Some(s) = b_status {
            if s.is_none_or(|s| !s.success()) {
                problems.push(format!("B did not exit cleanly after SIGTERM ({s:?})"));
            }
        }
        // A cut-off node says it is not ready once its window has passed (it was ready until
        // the client gave up, 1.4 T, before).
        let a_not_ready = samples
            .iter()
            .find(|(t, status)| *t > began && *status == 503)
            .map(|(t, _)| *t - began);
        if matches!(self.fault, Fault::Cut(_)) {
            let late = began + reg.window() + Duration::from_millis(500);
            if let Some((t, _)) = samples
                .iter()
                .find(|(t, status)| *t > late && *t < healed && *status == 200)
            {
                problems.push(format!(
                    "A's /readyz said ready {:.1} s after the cut (window {:.1} s)",
                    (*t - began).as_secs_f64(),
                    reg.window().as_secs_f64()
                ));
            }
        }
        RunNotes {
            a_not_ready,
            took_over: b_first.is_some(),
            held_again,
            a_last,
            b_first,
            a_unavailable: report.longest_outage.get("A").copied().unwrap_or_default(),
            problems,
            report,
        }
    }
}

/// `min-max s` of some seconds, or `-`.
fn span(xs: &[f64]) -> String {
    if xs.is_empty() {
        return "-".into();
    }
    let (lo, hi) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    if (hi - lo).abs() < 0.05 {
        format!("{lo:.1} s")
    } else {
        format!("{lo:.1}-{hi:.1} s")
    }
}

// ---------------------------------------------------------------------------------------
// Sequences on PostgreSQL, three nodes, one paused or cut off from the store

/// What happens to one of three nodes sharing a PostgreSQL store.
#[derive(Debug, Clone, Copy)]
pub enum StoreFault {
    /// SIGSTOP, then SIGCONT.
    Pause,
    /// Its path to PostgreSQL cut by a proxy, then healed.
    Cut(Cut),
}

/// Which shared store the nodes serve on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shared {
    /// floe's own table on PostgreSQL (FLOE_TEST_POSTGRES).
    Postgres,
    /// Meituan Leaf's `leaf_alloc` table on MariaDB (FLOE_TEST_MARIADB), `leaf-mysql://`: a
    /// node paused or cut off between two statements of a reservation must hold no row lock
    /// that stalls the others (issue 31, case 7).
    LeafMysql,
}

impl Shared {
    fn name(self) -> &'static str {
        match self {
            Shared::Postgres => "PostgreSQL",
            Shared::LeafMysql => "leaf-mysql (Leaf's table on MariaDB)",
        }
    }

    /// The store URL through `proxy` (host:port), and the store's address without it.
    fn url(self, proxy: &str, table: &str) -> String {
        let env_url = match self {
            Shared::Postgres => env("FLOE_TEST_POSTGRES"),
            Shared::LeafMysql => env("FLOE_TEST_MARIADB"),
        };
        let (prefix, rest) = env_url.split_once('@').expect("SCHEME://user@host:port/db");
        let (_, db) = rest.split_once('/').expect("SCHEME://user@host:port/db");
        match self {
            Shared::Postgres => format!("{prefix}@{proxy}/{db}"),
            Shared::LeafMysql => {
                let user = prefix.trim_start_matches("mysql://");
                format!("leaf-mysql://{user}@{proxy}/{db}?table={table}")
            }
        }
    }

    /// The server's host:port.
    fn server(self) -> String {
        let env_url = match self {
            Shared::Postgres => env("FLOE_TEST_POSTGRES"),
            Shared::LeafMysql => env("FLOE_TEST_MARIADB"),
        };
        let rest = env_url
            .split_once('@')
            .expect("SCHEME://user@host:port/db")
            .1;
        rest.split_once('/').map_or(rest, |(s, _)| s).to_string()
    }

    /// Makes what the store needs before floe serves `key` on it (Leaf's table with the key's
    /// row, as Leaf's README makes it); the table's name.
    fn prepare(self, key: &str) -> String {
        let table = format!("leaf_alloc_{}", key.replace('-', "_"));
        if self == Shared::LeafMysql {
            crate::common::leaf_table(&env("FLOE_TEST_MARIADB"), &table, key, 1000);
        }
        table
    }
}

/// A row: three `floe serve` nodes on one shared store, each through a proxy of its own;
/// STRONG and WEAK calls on every node; node 2 paused or cut off from the store for each of
/// `holds` in turn. No value twice, STRONG in real-time order, the other nodes serving
/// throughout.
#[derive(Debug, Clone)]
pub struct SharedStore {
    pub store: Shared,
    pub fault: StoreFault,
    pub holds: Vec<Duration>,
}

impl SharedStore {
    pub fn scenario(&self) -> String {
        let fault = match self.fault {
            StoreFault::Pause => "paused (SIGSTOP)".to_string(),
            StoreFault::Cut(Cut::Refuse) => "cut from the store (connections refused)".into(),
            StoreFault::Cut(Cut::Blackhole) => "cut from the store (blackhole)".into(),
        };
        let holds: Vec<String> = self
            .holds
            .iter()
            .map(|d| format!("{:.1} s", d.as_secs_f64()))
            .collect();
        format!(
            "STRONG and WEAK on {}, 3 `floe serve` nodes, one {fault} for {} under load",
            self.store.name(),
            holds.join(" / ")
        )
    }

    pub fn row(&self, runs: usize) -> Row {
        let mut row = Row {
            scenario: self.scenario(),
            ..Row::default()
        };
        let (mut unavailable, mut strong, mut problems) = (Vec::new(), 0usize, Vec::new());
        for run in 0..runs {
            let hold = self.holds[run % self.holds.len()];
            let (report, strong_calls, odd) = self.run(hold);
            problems.extend(odd);
            row.issued += report.values;
            row.repeats += report.repeats.len();
            row.order_violations += report.order_violations.len();
            strong += strong_calls;
            unavailable.push(
                report
                    .longest_outage
                    .get("N2")
                    .copied()
                    .unwrap_or_default()
                    .as_secs_f64(),
            );
            problems.extend(report.problems(3));
            for (node, n) in &report.failed {
                if node != "N2" && *n > 0 {
                    problems.push(format!("{node}: {n} calls failed otherwise than 503"));
                }
            }
            // The faulty node must not stall the others (a row lock held across its pause:
            // Leaf's two-statement reservation did).
            for node in ["N1", "N3"] {
                let out = report.longest_outage.get(node).copied().unwrap_or_default();
                if out > Duration::from_secs(2) {
                    problems.push(format!(
                        "{node} answered 503 for {:.1} s while N2 was {}",
                        out.as_secs_f64(),
                        if matches!(self.fault, StoreFault::Pause) {
                            "paused"
                        } else {
                            "cut off"
                        }
                    ));
                }
            }
        }
        row.outcome = format!(
            "{runs} runs, {strong} STRONG calls checked for real-time order; the faulty node answered 503 (or nothing, while stopped) for {}; the others served throughout",
            span(&unavailable)
        );
        if !problems.is_empty() {
            let _ = write!(row.outcome, ". FAILED: {}", problems.join("; "));
        }
        row
    }

    fn run(&self, hold: Duration) -> (Report, usize, Vec<String>) {
        let server = self.store.server();
        let key = floe_testkit::unique("k");
        let table = self.store.prepare(&key);
        let history = History::new();
        let stop = Arc::new(AtomicBool::new(false));
        let mut nodes = Vec::new();
        let mut proxies = Vec::new();
        let mut dirs = Vec::new();
        let mut threads = Vec::new();
        for i in 1..=3 {
            let proxy = Proxy::start(&server);
            let dir = state_dir();
            let args: Vec<String> = [
                "--store",
                &format!("pg={}", self.store.url(&proxy.addr(), &table)),
                "--state-dir",
                dir.path().to_str().unwrap(),
                "--timeout-ms",
                "1000",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let name = format!("N{i}");
            let mut node = Node::spawn(&name, free_port(), &args);
            if let Err(e) = node.wait_listening(Duration::from_secs(30)) {
                panic!("{name} did not start: {e}: {:?}", node.log());
            }
            threads.extend(clients(
                &history,
                &name,
                node.port,
                &[Stream::Strong, Stream::Weak],
                "pg",
                &key,
                &stop,
            ));
            nodes.push(node);
            proxies.push(proxy);
            dirs.push(dir);
        }
        std::thread::sleep(Duration::from_secs(1));
        match self.fault {
            StoreFault::Pause => nodes[1].signal("STOP"),
            StoreFault::Cut(how) => proxies[1].cut(how),
        }
        std::thread::sleep(hold);
        match self.fault {
            StoreFault::Pause => nodes[1].signal("CONT"),
            StoreFault::Cut(_) => proxies[1].heal(),
        }
        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, Ordering::SeqCst);
        for t in threads {
            let _ = t.join();
        }
        for n in nodes {
            n.stop();
        }
        let report = history.check(&rules(leaf_worker, &key), &HashMap::new());
        let strong = Stream::Strong.name(&key);
        let calls = history.calls();
        let strong_calls = calls
            .iter()
            .filter(|c| c.stream == strong && matches!(c.outcome, Outcome::Values(_)))
            .count();
        (report, strong_calls, unexpected(&calls))
    }
}

// ---------------------------------------------------------------------------------------
// A second `floe serve` on the state directory of a stopped one

/// `floe serve` A stopped (SIGSTOP) under load; B started on A's state directory with A's
/// identity (file registry): B must be refused (A's locks), and A goes on after SIGCONT.
pub fn second_serve_on_a_stopped_ones_state(runs: usize) -> Row {
    let mut row = Row {
        scenario: "a second `floe serve` on the state directory (and identity) of a stopped one (SIGSTOP), file registry".into(),
        ..Row::default()
    };
    let (mut refused, mut exits, mut problems) = (0, Vec::new(), Vec::new());
    for _ in 0..runs {
        let dir = state_dir();
        let args: Vec<String> = ["--state-dir", dir.path().to_str().unwrap(), "--port", "7"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let history = History::new();
        let stop = Arc::new(AtomicBool::new(false));
        let mut a = Node::spawn("A", free_port(), &args);
        a.wait_listening(Duration::from_secs(30)).unwrap();
        let streams = [
            Stream::Snowflake,
            Stream::Sno,
            Stream::Lexical,
            Stream::Strong,
        ];
        let mut threads = clients(&history, "A", a.port, &streams, "default", "k", &stop);
        std::thread::sleep(Duration::from_millis(500));
        a.signal("STOP");
        let mut b = Node::spawn("B", free_port(), &args);
        match b.wait_listening(Duration::from_secs(40)) {
            Ok(()) => {
                problems.push("B started beside a stopped A on its state directory".into());
                threads.extend(clients(
                    &history, "B", b.port, &streams, "default", "k", &stop,
                ));
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(why) => {
                refused += 1;
                // The same refusal each run, told apart only by the state directory and the
                // log's time stamp: one entry per kind of refusal.
                let last = b.log().last().cloned().unwrap_or_default();
                let last = last
                    .replace(dir.path().to_str().unwrap(), "D")
                    .replace(&format!("(pid {})", a.pid()), "(pid A)");
                let last = match last.split_once("Z ") {
                    Some((stamp, rest)) if stamp.starts_with("20") => rest.trim().to_string(),
                    _ => last,
                };
                exits.push(format!("{why}: {last}"));
            }
        }
        a.signal("CONT");
        let resumed = history.now();
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::SeqCst);
        for t in threads {
            let _ = t.join();
        }
        let report = history.check(&rules(leaf_worker, "k"), &grants([("A", a.granted())]));
        problems.extend(unexpected(&history.calls()));
        row.issued += report.values;
        row.repeats += report.repeats.len();
        row.order_violations += report.order_violations.len() + report.ownership_violations.len();
        problems.extend(report.problems(3));
        // A request under way through the stop may time out by the clock (its store call's
        // timeout ran while the process was stopped); one sent after SIGCONT must be served.
        let after = resumed + Duration::from_millis(500);
        let late: Vec<_> = history
            .calls()
            .into_iter()
            .filter(|c| c.node == "A" && c.start > after && c.outcome == Outcome::Unavailable)
            .collect();
        if !late.is_empty() {
            problems.push(format!(
                "A answered {} requests sent after SIGCONT with 503",
                late.len()
            ));
        }
        a.stop();
        drop(b);
    }
    exits.sort();
    let mut kinds: Vec<String> = Vec::new();
    for chunk in exits.chunk_by(|a, b| a == b) {
        kinds.push(format!("{} × {}", chunk.len(), chunk[0]));
    }
    row.outcome = format!(
        "{runs} runs: B refused in {refused} ({}); A served on after SIGCONT",
        kinds.join(" / ")
    );
    if !problems.is_empty() {
        let _ = write!(row.outcome, ". FAILED: {}", problems.join("; "));
    }
    row
}

// ---------------------------------------------------------------------------------------
// The registries as clusters: the leader killed or partitioned under load

/// A 3-member registry cluster started by scripts/test.sh (services.sh's
/// `start_zookeeper_ensemble` / `start_etcd_cluster`), each member in a network namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cluster {
    ZooKeeper,
    Etcd,
}

/// What happens to the cluster's leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderFault {
    /// SIGKILL, restarted after the hold.
    Kill,
    /// Its link down (its packets vanish, to members and clients alike), up after the hold.
    Partition,
}

/// The members' current pids (a killed member is started again with another).
static PIDS: Mutex<Option<HashMap<String, u32>>> = Mutex::new(None);

impl Cluster {
    fn var(self) -> &'static str {
        match self {
            Cluster::ZooKeeper => "FLOE_TEST_ZK_ENSEMBLE",
            Cluster::Etcd => "FLOE_TEST_ETCD_CLUSTER",
        }
    }

    fn member(self, i: usize) -> String {
        env(&format!("{}_{i}", self.var()))
    }

    fn pid(self, i: usize) -> u32 {
        let key = format!("{}_{i}", self.var());
        let mut pids = PIDS.lock().unwrap();
        *pids
            .get_or_insert_with(HashMap::new)
            .entry(key.clone())
            .or_insert_with(|| env(&format!("{key}_PID")).parse().unwrap())
    }

    fn restart(self, i: usize) {
        let key = format!("{}_{i}", self.var());
        let child = Command::new("bash")
            .arg(env(&format!("{key}_START")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The start script execs the server (in its namespace): its pid is the child's. It
        // outlives this test; scripts/test.sh stops it.
        PIDS.lock()
            .unwrap()
            .get_or_insert_with(HashMap::new)
            .insert(key, child.id());
        std::mem::forget(child);
    }

    fn link(self, i: usize) -> String {
        env(&format!("{}_{i}_LINK", self.var()))
    }

    /// The registry URL for floe, under `root`.
    fn url(self, root: &str) -> String {
        match self {
            Cluster::ZooKeeper => format!("zk://{}{root}", env(self.var())),
            Cluster::Etcd => format!("etcd://{}{root}?ttl=3&reach=2", env(self.var())),
        }
    }

    /// Which member leads, if one answers that it does.
    fn leader(self) -> Option<usize> {
        (1..=3).find(|&i| match self {
            Cluster::ZooKeeper => zk_mode(&self.member(i)).as_deref() == Some("leader"),
            Cluster::Etcd => etcd_status(&self.member(i))
                .is_some_and(|(me, leader)| leader.as_deref() == Some(me.as_str())),
        })
    }

    /// Whether all three members answer and agree on one leader.
    fn healthy(self) -> bool {
        match self {
            Cluster::ZooKeeper => {
                let modes: Vec<Option<String>> =
                    (1..=3).map(|i| zk_mode(&self.member(i))).collect();
                modes
                    .iter()
                    .all(|m| matches!(m.as_deref(), Some("leader" | "follower")))
                    && modes
                        .iter()
                        .filter(|m| m.as_deref() == Some("leader"))
                        .count()
                        == 1
            }
            Cluster::Etcd => {
                let status: Vec<_> = (1..=3).map(|i| etcd_status(&self.member(i))).collect();
                let leaders: HashSet<Option<String>> = status
                    .iter()
                    .map(|s| s.as_ref().and_then(|(_, l)| l.clone()))
                    .collect();
                status.iter().all(Option::is_some)
                    && leaders.len() == 1
                    && leaders.iter().next().is_some_and(Option::is_some)
            }
        }
    }

    /// Kills two members with SIGKILL, the leader first if one leads: the survivor alone has no
    /// quorum. The members killed.
    fn lose_quorum(self) -> Vec<usize> {
        let first = self.leader().unwrap_or(1);
        let killed = vec![first, first % 3 + 1];
        for &i in &killed {
            floe_testkit::kill9(&self.pid(i).to_string());
        }
        killed
    }

    fn wait_healthy(self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.healthy() {
            assert!(
                Instant::now() < deadline,
                "{self:?}: the cluster did not come back within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn connect(addr: &str) -> Option<TcpStream> {
    let addr: std::net::SocketAddr = addr.parse().ok()?;
    let s = TcpStream::connect_timeout(&addr, Duration::from_millis(800)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    Some(s)
}

/// A ZooKeeper member's `Mode:` (leader, follower, standalone), from its `srvr` answer.
fn zk_mode(addr: &str) -> Option<String> {
    let mut s = connect(addr)?;
    s.write_all(b"srvr").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_string())
}

/// An etcd member's own ID and the leader it knows (absent when it knows none), from
/// `POST /v3/maintenance/status`.
fn etcd_status(addr: &str) -> Option<(String, Option<String>)> {
    let mut s = connect(addr)?;
    let request = format!(
        "POST /v3/maintenance/status HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}"
    );
    s.write_all(request.as_bytes()).ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let body = &text[text.find("\r\n\r\n")? + 4..];
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let me = v.get("header")?.get("member_id")?.as_str()?.to_string();
    let leader = v.get("leader").and_then(|l| l.as_str()).map(str::to_string);
    Some((me, leader))
}

/// A row: two `floe serve` nodes (their own identities) on the cluster under load, its leader
/// killed or partitioned for `hold`, `runs` times.
pub fn cluster_leader_row(
    cluster: Cluster,
    fault: LeaderFault,
    hold: Duration,
    runs: usize,
) -> Row {
    let what = match fault {
        LeaderFault::Kill => "killed (SIGKILL), restarted",
        LeaderFault::Partition => "partitioned (link down: packets vanish), healed",
    };
    let name = match cluster {
        Cluster::ZooKeeper => "3-node ZooKeeper ensemble (session 6 s)",
        Cluster::Etcd => "3-member etcd cluster (TTL 3 s)",
    };
    let mut row = Row {
        scenario: format!(
            "{name}: its leader {what} after {:.1} s, under load from 2 `floe serve` nodes",
            hold.as_secs_f64()
        ),
        ..Row::default()
    };
    let (mut unavailable, mut problems, mut changed) = (Vec::new(), Vec::new(), 0);
    for _ in 0..runs {
        cluster.wait_healthy(Duration::from_secs(60));
        let leader = cluster.leader().expect("a healthy cluster has a leader");
        let root = format!("/{}", floe_testkit::unique("cluster"));
        let history = History::new();
        let stop = Arc::new(AtomicBool::new(false));
        let streams = [Stream::Snowflake, Stream::Sno, Stream::Lexical];
        let (mut nodes, mut dirs, mut threads) = (Vec::new(), Vec::new(), Vec::new());
        for (name, port) in [("A", "7"), ("B", "8")] {
            let dir = state_dir();
            let args: Vec<String> = [
                "--registry",
                &cluster.url(&root),
                "--state-dir",
                dir.path().to_str().unwrap(),
                "--service",
                "cluster",
                "--host",
                "h",
                "--port",
                port,
                "--store",
                "default=memory",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let mut node = Node::spawn(name, free_port(), &args);
            if let Err(e) = node.wait_listening(Duration::from_secs(30)) {
                panic!("{name} did not start: {e}: {:?}", node.log());
            }
            threads.extend(clients(
                &history, name, node.port, &streams, "default", "k", &stop,
            ));
            nodes.push(node);
            dirs.push(dir);
        }
        std::thread::sleep(Duration::from_secs(1));
        match fault {
            LeaderFault::Kill => {
                let _ = Command::new("kill")
                    .args(["-9", &cluster.pid(leader).to_string()])
                    .status();
            }
            LeaderFault::Partition => {
                let _ = Command::new("ip")
                    .args(["link", "set", &cluster.link(leader), "down"])
                    .status();
            }
        }
        std::thread::sleep(hold);
        match fault {
            LeaderFault::Kill => cluster.restart(leader),
            LeaderFault::Partition => {
                let _ = Command::new("ip")
                    .args(["link", "set", &cluster.link(leader), "up"])
                    .status();
            }
        }
        // Load goes on while the cluster settles.
        std::thread::sleep(Duration::from_secs(4));
        stop.store(true, Ordering::SeqCst);
        for t in threads {
            let _ = t.join();
        }
        let granted = grants(nodes.iter().map(|n| (n.name.as_str(), n.granted())));
        let report = history.check(&rules(leaf_worker, "k"), &granted);
        problems.extend(unexpected(&history.calls()));
        row.issued += report.values;
        row.repeats += report.repeats.len();
        row.order_violations += report.order_violations.len() + report.ownership_violations.len();
        problems.extend(report.problems(3));
        for n in ["A", "B"] {
            unavailable.push(
                report
                    .longest_outage
                    .get(n)
                    .copied()
                    .unwrap_or_default()
                    .as_secs_f64(),
            );
        }
        for n in nodes {
            n.stop();
        }
        cluster.wait_healthy(Duration::from_secs(60));
        if cluster.leader() != Some(leader) {
            changed += 1;
        }
    }
    row.outcome = format!(
        "{runs} runs (leadership moved in {changed}); each floe node answered 503 for {} (longest run), then served again",
        span(&unavailable)
    );
    if !problems.is_empty() {
        let _ = write!(row.outcome, ". FAILED: {}", problems.join("; "));
    }
    row
}

// ---------------------------------------------------------------------------------------
// A registry out of reach under load, at the default reach

/// A registry that floe cannot reach for a while. A standalone server is reached through a
/// proxy that refuses every connection (to floe, the registry is down; its server goes on,
/// and expires their sessions and leases meanwhile). A 3-member cluster loses its quorum: two
/// of its members (the leader among them) killed with SIGKILL, the third left running alone
/// (it answers nothing a lease needs), both started again on their data afterwards.
#[derive(Clone, Copy, Debug)]
pub enum Outage {
    /// ZooKeeper (FLOE_TEST_ZOOKEEPER), the default 6 s session.
    ZooKeeper,
    /// etcd (FLOE_TEST_ETCD), a 3 s TTL (so that short outages outlast the leases).
    Etcd,
    /// The ZooKeeper ensemble (FLOE_TEST_ZK_ENSEMBLE) without its quorum.
    ZooKeeperQuorum,
    /// The etcd cluster (FLOE_TEST_ETCD_CLUSTER) without its quorum, a 3 s TTL.
    EtcdQuorum,
}

impl Outage {
    fn cluster(self) -> Option<Cluster> {
        match self {
            Outage::ZooKeeper | Outage::Etcd => None,
            Outage::ZooKeeperQuorum => Some(Cluster::ZooKeeper),
            Outage::EtcdQuorum => Some(Cluster::Etcd),
        }
    }

    /// The servers floe is given: a standalone server's (reached through a proxy), or the
    /// cluster's members.
    fn server(self) -> String {
        match self {
            Outage::ZooKeeper => env("FLOE_TEST_ZOOKEEPER"),
            Outage::Etcd => env("FLOE_TEST_ETCD"),
            Outage::ZooKeeperQuorum => env(Cluster::ZooKeeper.var()),
            Outage::EtcdQuorum => env(Cluster::Etcd.var()),
        }
    }

    /// The URL through `addr`, with the default reach (900 s).
    fn url(self, addr: &str, root: &str) -> String {
        match self {
            Outage::ZooKeeper | Outage::ZooKeeperQuorum => format!("zk://{addr}{root}"),
            Outage::Etcd | Outage::EtcdQuorum => format!("etcd://{addr}{root}?ttl=3"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Outage::ZooKeeper => "ZooKeeper (session 6 s) out of reach",
            Outage::Etcd => "etcd (TTL 3 s) out of reach",
            Outage::ZooKeeperQuorum => {
                "3-member ZooKeeper ensemble (session 6 s) without its quorum (2 members killed)"
            }
            Outage::EtcdQuorum => {
                "3-member etcd cluster (TTL 3 s) without its quorum (2 members killed)"
            }
        }
    }
}

/// An outage under way: the runs' proxies cut, or the cluster's killed members.
enum Down {
    Cut,
    Quorum(Cluster, Vec<usize>),
}

impl Down {
    /// Takes `outage`'s registry out of reach: a standalone server's `proxies` (one a run)
    /// refuse every connection, or the cluster loses its quorum (once for every run).
    fn begin(outage: Outage, proxies: &[&Proxy]) -> Down {
        match outage.cluster() {
            Some(cluster) => Down::Quorum(cluster, cluster.lose_quorum()),
            None => {
                assert!(
                    !proxies.is_empty(),
                    "a standalone registry is reached through a proxy"
                );
                for proxy in proxies {
                    proxy.cut(Cut::Refuse);
                }
                Down::Cut
            }
        }
    }

    /// Brings it back: the proxies heal at once; the members start again on their data, and
    /// this waits until the cluster has a leader again.
    fn end(&self, proxies: &[&Proxy]) {
        match self {
            Down::Cut => {
                for proxy in proxies {
                    proxy.heal();
                }
            }
            Down::Quorum(cluster, killed) => {
                for &i in killed {
                    cluster.restart(i);
                }
                cluster.wait_healthy(Duration::from_secs(60));
            }
        }
    }
}

/// The longest run of 503 answers of `node` (connections refused while it restarts are
/// neither 503 nor an answer: they neither begin nor end a run).
fn longest_503(calls: &[floe_testkit::history::Call], node: &str) -> Duration {
    let mut calls: Vec<_> = calls.iter().filter(|c| c.node == node).collect();
    calls.sort_by_key(|c| c.start);
    let (mut longest, mut since) = (Duration::ZERO, None::<(Duration, Duration)>);
    for c in calls {
        match c.outcome {
            Outcome::Unavailable => {
                let (s, _) = since.get_or_insert((c.start, c.end));
                since = Some((*s, c.end));
            }
            Outcome::Values(_) => {
                if let Some((s, e)) = since.take() {
                    longest = longest.max(e.saturating_sub(s));
                }
            }
            _ => {}
        }
    }
    if let Some((s, e)) = since {
        longest = longest.max(e.saturating_sub(s));
    }
    longest
}

/// One run of an outage row: nodes A and B (distinct identities, a registry root of their
/// own and, for a standalone server, a proxy of their own) under load.
struct OutageRun {
    proxy: Option<Proxy>,
    url: String,
    dirs: [tempfile::TempDir; 2],
    a: Node,
    b: Option<Node>,
    b_port: u16,
    history: History,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    granted: Vec<(&'static str, Vec<(&'static str, u64)>)>,
    /// When B was started again, on the history's clock.
    launched: Option<Duration>,
    problems: Vec<String>,
}

/// What one run measured: each node's longest run of 503, and how soon the restarted B served
/// a Snowflake ID (`None`: it did not).
struct OutageResult {
    issued: usize,
    repeats: usize,
    order_violations: usize,
    a_503: f64,
    b_503: f64,
    b_first: Option<f64>,
    problems: Vec<String>,
}

impl OutageRun {
    /// `floe serve`'s arguments for node `i` (0: A, 1: B).
    fn args(url: &str, dir: &tempfile::TempDir, i: usize) -> Vec<String> {
        [
            "--registry",
            url,
            "--state-dir",
            dir.path().to_str().unwrap(),
            "--service",
            "outage",
            "--host",
            "h",
            "--port",
            ["7", "8"][i],
            "--store",
            "default=memory",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// Starts A and B and their clients (each stream asked every `pace`; zero: back to back).
    fn start(outage: Outage, pace: Duration) -> OutageRun {
        let proxy = outage
            .cluster()
            .is_none()
            .then(|| Proxy::start(&outage.server()));
        let root = format!("/{}", floe_testkit::unique("outage"));
        let url = match &proxy {
            Some(proxy) => outage.url(&proxy.addr(), &root),
            None => outage.url(&outage.server(), &root),
        };
        let dirs = [state_dir(), state_dir()];
        let mut a = Node::spawn("A", free_port(), &Self::args(&url, &dirs[0], 0));
        let b_port = free_port();
        let mut b = Node::spawn("B", b_port, &Self::args(&url, &dirs[1], 1));
        for n in [&mut a, &mut b] {
            if let Err(e) = n.wait_listening(Duration::from_secs(30)) {
                panic!("{} did not start: {e}: {:?}", n.name, n.log());
            }
        }
        let (history, stop) = (History::new(), Arc::new(AtomicBool::new(false)));
        let streams = [Stream::Snowflake, Stream::Sno, Stream::Lexical];
        let mut threads = Vec::new();
        for (name, port) in [("A", a.port), ("B", b_port)] {
            for &s in &streams {
                threads.push(client_every(
                    &history,
                    name,
                    port,
                    s,
                    ("default", "k"),
                    Arc::clone(&stop),
                    pace,
                ));
            }
        }
        OutageRun {
            proxy,
            url,
            dirs,
            a,
            b: Some(b),
            b_port,
            history,
            stop,
            threads,
            granted: Vec::new(),
            launched: None,
            problems: Vec::new(),
        }
    }

    /// Stops B with SIGTERM and starts it again with the same command line.
    fn restart_b(&mut self) {
        let b = self.b.take().expect("B runs");
        self.granted = vec![("A", self.a.granted()), ("B", b.granted())];
        let log = b.log();
        match b.stop() {
            Some(s) if s.success() => {}
            other => self.problems.push(format!(
                "B did not exit cleanly on SIGTERM during the outage ({other:?}): {}",
                log.last().cloned().unwrap_or_default()
            )),
        }
        self.launched = Some(self.history.now());
        let mut b = Node::spawn("B", self.b_port, &Self::args(&self.url, &self.dirs[1], 1));
        if let Err(e) = b.wait_listening(Duration::from_secs(30)) {
            self.problems.push(format!(
                "B did not start again during the outage: {e}: {}",
                b.log().last().cloned().unwrap_or_default()
            ));
        }
        self.b = Some(b);
    }

    /// Stops the load and both nodes, and checks every call.
    fn finish(mut self) -> OutageResult {
        self.stop.store(true, Ordering::SeqCst);
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
        let b = self.b.take().expect("B runs");
        self.granted.push(("B", b.granted()));
        let calls = self.history.calls();
        let report = self
            .history
            .check(&rules(leaf_worker, "k"), &grants(self.granted.clone()));
        let mut problems = std::mem::take(&mut self.problems);
        problems.extend(unexpected(&calls));
        problems.extend(report.problems(3));
        let (a_503, b_503) = (
            longest_503(&calls, "A").as_secs_f64(),
            longest_503(&calls, "B").as_secs_f64(),
        );
        let launched = self.launched.expect("B was restarted");
        let first = calls
            .iter()
            .filter(|c| {
                c.node == "B"
                    && c.stream == "snowflake"
                    && c.start >= launched
                    && matches!(c.outcome, Outcome::Values(_))
            })
            .map(|c| c.end.saturating_sub(launched).as_secs_f64())
            .reduce(f64::min);
        // The release binary (scripts/faults.sh) serves within 2 s of its launch; a debug
        // build on a busy machine is given 10.
        let limit = if crate::common::faults::full() {
            2.0
        } else {
            10.0
        };
        match first {
            Some(f) if f <= limit => {}
            Some(f) => problems.push(format!(
                "B's first Snowflake ID came {f:.1} s after its launch (limit {limit} s)"
            )),
            None => problems.push("B served no Snowflake ID after its restart".into()),
        }
        for (n, d) in [("A", a_503), ("B", b_503)] {
            if d > 0.0 {
                problems.push(format!("{n} answered 503 for {d:.1} s"));
            }
        }
        for (n, s) in [("A", self.a.stop()), ("B", b.stop())] {
            if s.is_none_or(|s| !s.success()) {
                problems.push(format!("{n} did not exit cleanly after SIGTERM ({s:?})"));
            }
        }
        OutageResult {
            issued: report.values,
            repeats: report.repeats.len(),
            order_violations: report.order_violations.len() + report.ownership_violations.len(),
            a_503,
            b_503,
            b_first: first.filter(|&f| f <= limit),
            problems,
        }
    }
}

/// Two `floe serve` nodes (distinct identities, one registry) under load at the default reach;
/// the registry out of reach for `hold`; halfway through, B stopped with SIGTERM and started
/// again with the same command line (a rolling deploy). Every call is checked; the row gives
/// each node's longest run of 503 and how soon the restarted B served its first ID.
///
/// The runs go in waves of `FLOE_FAULTS_PARALLEL` (default: all at once in the long matrix,
/// each stream asked for 100 IDs every 50 ms there; one, back to back, in the suite). A wave's
/// runs share the outage (one proxy a run, cut together; or one loss of the cluster's
/// quorum), so that 20 runs of 10 minutes take 10 minutes.
pub fn registry_outage_row(outage: Outage, hold: Duration, runs: usize) -> Row {
    let mut row = Row {
        scenario: format!(
            "{} for {:.0} s under load, default reach (900 s); nodes A and B, B restarted (SIGTERM, same command line) halfway",
            outage.name(),
            hold.as_secs_f64()
        ),
        ..Row::default()
    };
    let full = crate::common::faults::full();
    let wave = crate::common::faults::parallel(if full { runs } else { 1 });
    let pace = if full {
        Duration::from_millis(50)
    } else {
        Duration::ZERO
    };
    let (mut a_503, mut b_503, mut b_first) = (Vec::new(), Vec::new(), Vec::new());
    let mut problems = Vec::new();
    let mut left = runs;
    while left > 0 {
        let n = left.min(wave);
        left -= n;
        if let Some(cluster) = outage.cluster() {
            cluster.wait_healthy(Duration::from_secs(60));
        }
        let mut wave: Vec<OutageRun> = (0..n).map(|_| OutageRun::start(outage, pace)).collect();
        std::thread::sleep(Duration::from_secs(1));
        let proxies: Vec<&Proxy> = wave.iter().filter_map(|r| r.proxy.as_ref()).collect();
        let began = Instant::now();
        let down = Down::begin(outage, &proxies);
        std::thread::sleep(hold / 2);
        std::thread::scope(|s| {
            for run in &mut wave {
                s.spawn(|| run.restart_b());
            }
        });
        std::thread::sleep((began + hold).saturating_duration_since(Instant::now()));
        let proxies: Vec<&Proxy> = wave.iter().filter_map(|r| r.proxy.as_ref()).collect();
        down.end(&proxies);
        // Load goes on while the keepers hold every claim again.
        std::thread::sleep(Duration::from_secs(5));
        for run in wave {
            let r = run.finish();
            row.issued += r.issued;
            row.repeats += r.repeats;
            row.order_violations += r.order_violations;
            a_503.push(r.a_503);
            b_503.push(r.b_503);
            b_first.extend(r.b_first);
            problems.extend(r.problems);
        }
    }
    row.outcome = format!(
        "{runs} runs: longest run of 503, A {}, B {}; B's first Snowflake ID {} after its launch",
        span(&a_503),
        span(&b_503),
        span(&b_first)
    );
    if !problems.is_empty() {
        let _ = write!(row.outcome, ". FAILED: {}", problems.join("; "));
    }
    row
}
