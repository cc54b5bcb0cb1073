//! Three `floe serve` nodes, as deployed (docs/deploy.md): worker IDs from one registry (the
//! real ZooKeeper, and etcd with the `etcd` feature, started by scripts/test.sh), sequences in
//! one PostgreSQL store. Each node has its own state directory and fixed loopback ports, so a
//! restart keeps its identity (service + host + gRPC port).
//!
//! Client threads drive every node over HTTP (floe's routes and Leaf's) and gRPC (floe.v1 and
//! Layotto's `GetNextId`) for a few seconds; one node is killed with SIGKILL mid-run and
//! started again on the same ports and state directory, while the others keep serving. Then:
//! - the three nodes hold distinct Snowflake workers, sno partitions and LexicalUUID workers,
//!   and the restarted node got its own back;
//! - every Snowflake ID carries its node's worker;
//! - no Snowflake, sno, LexicalUUID, WEAK, STRONG or Leaf-route ID was issued twice, by any
//!   node, before or after the restart;
//! - STRONG IDs of one key follow real time across the nodes: a call that returned before
//!   another was sent has smaller IDs;
//! - a node that was not killed answered every call, and the restarted node every call sent
//!   after its start-up line: with IDs, or (a store call slower than `--timeout-ms` on a
//!   loaded machine) the server's retryable "unavailable, retry later", never anything else.
//!
//! The two scenarios (ZooKeeper, etcd) take turns, about 12 s each.
//!
//! Three more tests pin bugs this scenario found: `strong_batches_are_runs_of_consecutive_ids`
//! (floe.proto's promise for STRONG batches), `a_node_on_etcd_comes_back_after_a_kill_whatever_its_ttl`
//! (a restart gave up before the previous etcd lease ended) and
//! `a_restarting_node_does_not_hold_requests_while_it_waits_for_its_lease`.

use crate::serving;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floe_server::proto::runtime_client::RuntimeClient;
use floe_server::proto::sequencer_options::AutoIncrement;
use floe_server::proto::{GetNextIdRequest, SequencerOptions};
use floe_server::proto_floe::floe_client::FloeClient;
use floe_server::proto_floe::{Increment, Kind, NextIdsRequest, NextSequenceRequest};
use serving::Serve;
use tonic::transport::{Channel, Endpoint};

/// Load before the kill, and after the restart.
const RUN_BEFORE_KILL: Duration = Duration::from_millis(2500);
const RUN_AFTER_RESTART: Duration = Duration::from_millis(2500);
/// Client threads per node and protocol.
const HTTP_CLIENTS: usize = 2;
const GRPC_CLIENTS: usize = 2;
/// The node killed with SIGKILL.
const KILLED: usize = 1;

/// One cluster at a time: two at once on a 2-core machine starve their store calls and
/// leases of CPU.
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

fn one_cluster() -> std::sync::MutexGuard<'static, ()> {
    ONE_CLUSTER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a node leased, read from its start-up output.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Workers {
    snowflake: u64,
    /// The default Snowflake layout's worker and sequence bits.
    worker_bits: u32,
    sequence_bits: u32,
    sno: u64,
    lexical: i64,
}

impl Workers {
    /// From the lines `floe: snowflake default: worker N (T/D/W/S bits, ...)`,
    /// `sno: partition N` and `lexical: worker N` (log lines); `None` until all three came.
    fn parse(lines: &[String]) -> Option<Workers> {
        let after = |prefix: &str| {
            lines
                .iter()
                .find_map(|l| l.split_once(prefix).map(|(_, rest)| rest))
                .map(str::to_string)
        };
        let snowflake = after("snowflake default: worker ")?;
        let (worker, rest) = snowflake.split_once(" (")?;
        let bits: Vec<u32> = rest
            .split_once(' ')?
            .0
            .split('/')
            .map(|b| b.parse().ok())
            .collect::<Option<_>>()?;
        Some(Workers {
            snowflake: worker.parse().ok()?,
            worker_bits: bits.get(2).copied()?,
            sequence_bits: bits.get(3).copied()?,
            sno: first_word(&after("sno: partition ")?)?,
            lexical: first_word(&after("lexical: worker ")?)?,
        })
    }
}

/// One `floe serve` node on fixed ports and a state directory of its own; killed when dropped
/// (a failed test leaves no process behind).
struct Node {
    index: usize,
    grpc: String,
    http: String,
    args: Vec<String>,
    serve: Option<Serve>,
    /// Standard error of the runs of this node that ended.
    past: Vec<String>,
}

impl Node {
    fn new(index: usize, state_dir: PathBuf, registry: &str, pg: &str) -> Node {
        Node {
            index,
            grpc: format!("127.0.0.1:{}", floe_testkit::free_port()),
            http: format!("127.0.0.1:{}", floe_testkit::free_port()),
            args: vec![
                "--state-dir".into(),
                state_dir.to_str().unwrap().into(),
                "--registry".into(),
                registry.into(),
                "--store".into(),
                format!("pg={pg}"),
            ],
            serve: None,
            past: Vec::new(),
        }
    }

    /// Starts the node (bounded by [`START_WITHIN`](floe_testkit::process::START_WITHIN)) and reads what it leased.
    fn start(&mut self) -> Workers {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let serve = serving::start_on(&self.grpc, &self.http, &args);
        assert_eq!(
            (serve.grpc.as_str(), serve.http.as_str()),
            (self.grpc.as_str(), self.http.as_str()),
            "node {} serves on other addresses than asked: {}",
            self.index,
            serve.line
        );
        let serve = self.serve.insert(serve);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let this_run = serve.log();
            if let Some(w) = Workers::parse(&this_run) {
                return w;
            }
            assert!(
                Instant::now() < deadline,
                "node {} did not name its workers within 10 s: {this_run:?}",
                self.index,
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, as a crash would; waits until it is gone.
    fn kill9(&mut self) {
        let serve = self.serve.take().expect("node running");
        serve.kill9();
        self.keep(&serve.stderr());
    }

    /// SIGTERM: the node must exit cleanly (leases released, stores closed) within 20 s.
    fn stop(&mut self) {
        let serve = self.serve.take().expect("node running");
        serve.term();
        let (status, err, took) = serve.wait(Duration::from_secs(20));
        self.keep(&err);
        assert!(
            status.success(),
            "node {} exited with {status} after SIGTERM ({took:?}): {:?}",
            self.index,
            self.stderr()
        );
    }

    /// Keeps the standard error of a run that ended.
    fn keep(&mut self, err: &str) {
        let index = self.index;
        self.past
            .extend(err.lines().map(|l| format!("node {index}: {l}")));
    }

    /// Standard error of every run of this node, the running one's so far.
    fn stderr(&self) -> Vec<String> {
        let running = self.serve.iter().flat_map(Serve::log);
        let index = self.index;
        let running = running.map(|l| format!("node {index}: {l}"));
        self.past.iter().cloned().chain(running).collect()
    }
}

/// The ID spaces in which no ID may repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Space {
    /// Snowflake IDs, from `/v1/ids/snowflake`, floe.v1 and Leaf's `/api/snowflake/get`.
    Snowflake,
    Sno,
    Lexical,
    /// WEAK IDs of the run's WEAK key, from floe's routes, floe.v1, Layotto and Leaf's
    /// `/api/segment/get`.
    Weak,
    /// STRONG IDs of the run's STRONG key.
    Strong,
}

/// One call that answered: who served it, what it issued, and when (sent: before the request
/// was written; returned: after the answer was read).
#[derive(Debug, Clone)]
struct Call {
    node: usize,
    via: &'static str,
    space: Space,
    sent: Instant,
    returned: Instant,
    ids: Vec<String>,
}

/// One call that failed.
#[derive(Debug, Clone)]
struct Failure {
    node: usize,
    via: &'static str,
    sent: Instant,
    error: Failed,
}

/// Why a call failed. `retryable`: the server's own answer that a store was unavailable or
/// slow ("retry later": HTTP 503 `unavailable`, Leaf's 500, gRPC `UNAVAILABLE`), which a
/// loaded machine can cause (a store call over `--timeout-ms`) and a client retries; anything
/// else (no answer, another status, a malformed body) is not.
#[derive(Debug, Clone)]
struct Failed {
    retryable: bool,
    text: String,
}

impl From<String> for Failed {
    fn from(text: String) -> Failed {
        Failed {
            retryable: false,
            text,
        }
    }
}

impl From<tonic::Status> for Failed {
    fn from(s: tonic::Status) -> Failed {
        Failed {
            retryable: s.code() == tonic::Code::Unavailable && s.message().contains("retry later"),
            text: s.to_string(),
        }
    }
}

#[derive(Default)]
struct Record {
    calls: Vec<Call>,
    failures: Vec<Failure>,
}

impl Record {
    fn add(
        &mut self,
        node: usize,
        via: &'static str,
        space: Space,
        sent: Instant,
        result: Result<Vec<String>, Failed>,
    ) {
        match result {
            Ok(ids) => self.calls.push(Call {
                node,
                via,
                space,
                sent,
                returned: Instant::now(),
                ids,
            }),
            Err(error) => {
                self.failures.push(Failure {
                    node,
                    via,
                    sent,
                    error,
                });
                // A node down: do not spin.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The run's keys.
#[derive(Clone)]
struct Keys {
    weak: String,
    strong: String,
}

/// `GET`/`POST` over HTTP/1.1: the body of a 200, else the status and body.
fn http(addr: &str, method: &str, path: &str) -> Result<String, Failed> {
    match serving::http(addr, method, path) {
        Ok((200, body)) => Ok(body),
        Ok((code, body)) => {
            let retryable = if path.starts_with("/api/") {
                // Leaf's routes answer every failure 500, with the message as text.
                code == 500 && body.contains("retry later")
            } else {
                code == 503 && body.contains(r#""error":"unavailable""#)
            };
            Err(Failed {
                retryable,
                text: format!("{method} {path}: {code} {body}"),
            })
        }
        Err(e) => Err(format!("{method} {path}: {e}").into()),
    }
}

/// The IDs of `{"id":..}`, `{"next_id":..}` or `{"ids":[..]}`.
fn json_ids(body: &str) -> Result<Vec<String>, Failed> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("{e}: {body:?}"))?;
    if let Some(ids) = v["ids"].as_array() {
        return Ok(ids
            .iter()
            .map(|i| i.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("not strings: {body}"))?);
    }
    Ok(v["id"]
        .as_str()
        .or(v["next_id"].as_str())
        .map(|s| vec![s.to_string()])
        .ok_or_else(|| format!("no ID in {body}"))?)
}

/// A Leaf route's bare decimal.
fn leaf_id(body: &str) -> Result<Vec<String>, Failed> {
    Ok(body
        .trim()
        .parse::<i64>()
        .map(|n| vec![n.to_string()])
        .map_err(|_| format!("not a number: {body:?}"))?)
}

/// Batch sizes that vary with the iteration: 1 to 40, and a single request (no `count`) every
/// other round.
fn count_of(i: usize) -> Option<u32> {
    (i % 16 >= 8).then(|| u32::try_from(1 + i * 7 % 40).unwrap())
}

/// A STRONG batch size: 2 to 5.
fn strong_batch_of(i: usize) -> u32 {
    u32::try_from(2 + i % 4).unwrap()
}

fn with_count(path: &str, count: Option<u32>) -> String {
    match (count, path.contains('?')) {
        (None, _) => path.to_string(),
        (Some(n), true) => format!("{path}&count={n}"),
        (Some(n), false) => format!("{path}?count={n}"),
    }
}

/// One HTTP client of `node` until `stop`: every route in turn.
fn http_client(node: usize, addr: String, keys: Keys, stop: Arc<AtomicBool>) -> Record {
    let mut r = Record::default();
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let n = count_of(i);
        match i % 8 {
            0 => {
                let path = with_count("/v1/ids/snowflake", n);
                let res = http(&addr, "GET", &path).and_then(|b| json_ids(&b));
                r.add(node, "http /v1/ids/snowflake", Space::Snowflake, sent, res);
            }
            1 => {
                let path = with_count("/v1/ids/sno", n);
                let res = http(&addr, "GET", &path).and_then(|b| json_ids(&b));
                r.add(node, "http /v1/ids/sno", Space::Sno, sent, res);
            }
            2 => {
                let path = with_count("/v1/ids/lexical", n);
                let res = http(&addr, "GET", &path).and_then(|b| json_ids(&b));
                r.add(node, "http /v1/ids/lexical", Space::Lexical, sent, res);
            }
            3 => {
                let path = with_count(&format!("/v1/sequencer/pg/{}?increment=weak", keys.weak), n);
                let res = http(&addr, "POST", &path).and_then(|b| json_ids(&b));
                r.add(node, "http /v1/sequencer weak", Space::Weak, sent, res);
            }
            4 => {
                let path = format!("/v1/sequencer/pg/{}?increment=strong", keys.strong);
                let res = http(&addr, "POST", &path).and_then(|b| json_ids(&b));
                r.add(node, "http /v1/sequencer strong", Space::Strong, sent, res);
            }
            5 => {
                let path = format!(
                    "/v1/sequencer/pg/{}?increment=strong&count={}",
                    keys.strong,
                    strong_batch_of(i)
                );
                let res = http(&addr, "POST", &path).and_then(|b| json_ids(&b));
                r.add(
                    node,
                    "http /v1/sequencer strong batch",
                    Space::Strong,
                    sent,
                    res,
                );
            }
            6 => {
                let path = format!("/api/segment/get/{}", keys.weak);
                let res = http(&addr, "GET", &path).and_then(|b| leaf_id(&b));
                r.add(node, "http /api/segment/get", Space::Weak, sent, res);
            }
            _ => {
                let res = http(&addr, "GET", "/api/snowflake/get/three").and_then(|b| leaf_id(&b));
                r.add(node, "http /api/snowflake/get", Space::Snowflake, sent, res);
            }
        }
        i += 1;
    }
    r
}

/// One gRPC client of `node` until `stop` (one HTTP/2 connection, made again when it breaks):
/// floe.v1's NextIds and NextSequence, and Layotto's GetNextId, in turn.
fn grpc_client(node: usize, addr: String, keys: Keys, stop: Arc<AtomicBool>) -> Record {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let channel: Channel = rt.block_on(async {
        Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_timeout(Duration::from_secs(1))
            .timeout(Duration::from_secs(15))
            .connect_lazy()
    });
    let mut floe = FloeClient::new(channel.clone());
    let mut layotto = RuntimeClient::new(channel);
    let mut r = Record::default();
    let mut i = 0usize;
    let texts = |resp: Result<
        tonic::Response<floe_server::proto_floe::NextIdsResponse>,
        tonic::Status,
    >| { resp.map(|r| r.into_inner().text).map_err(Failed::from) };
    let numbers = |resp: Result<
        tonic::Response<floe_server::proto_floe::NextSequenceResponse>,
        tonic::Status,
    >| {
        resp.map(|r| r.into_inner().ids.iter().map(i64::to_string).collect())
            .map_err(Failed::from)
    };
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let n = count_of(i).unwrap_or(1);
        let ids = |kind: Kind| NextIdsRequest {
            kind: kind.into(),
            count: n,
            with_text: true,
            ..Default::default()
        };
        let seq = |key: &str, increment: Increment, count: u32| NextSequenceRequest {
            store: "pg".into(),
            key: key.into(),
            increment: increment.into(),
            count,
            ..Default::default()
        };
        let layotto_req = |key: &str, increment: AutoIncrement| GetNextIdRequest {
            store_name: "pg".into(),
            key: key.into(),
            options: Some(SequencerOptions {
                increment: increment.into(),
            }),
            metadata: HashMap::new(),
        };
        match i % 8 {
            0 => {
                // Numbers, not text: the packed uint64 field.
                let res = rt
                    .block_on(floe.next_ids(NextIdsRequest {
                        with_text: false,
                        ..ids(Kind::Snowflake)
                    }))
                    .map(|r| r.into_inner().numbers.iter().map(u64::to_string).collect())
                    .map_err(Failed::from);
                r.add(node, "grpc NextIds snowflake", Space::Snowflake, sent, res);
            }
            1 => {
                let res = texts(rt.block_on(floe.next_ids(ids(Kind::Sno))));
                r.add(node, "grpc NextIds sno", Space::Sno, sent, res);
            }
            2 => {
                let res = texts(rt.block_on(floe.next_ids(ids(Kind::Lexical))));
                r.add(node, "grpc NextIds lexical", Space::Lexical, sent, res);
            }
            3 => {
                let res =
                    numbers(rt.block_on(floe.next_sequence(seq(&keys.weak, Increment::Weak, n))));
                r.add(node, "grpc NextSequence weak", Space::Weak, sent, res);
            }
            4 => {
                let res = numbers(rt.block_on(floe.next_sequence(seq(
                    &keys.strong,
                    Increment::Strong,
                    1,
                ))));
                r.add(node, "grpc NextSequence strong", Space::Strong, sent, res);
            }
            5 => {
                let req = seq(&keys.strong, Increment::Strong, strong_batch_of(i));
                let res = numbers(rt.block_on(floe.next_sequence(req)));
                r.add(
                    node,
                    "grpc NextSequence strong batch",
                    Space::Strong,
                    sent,
                    res,
                );
            }
            6 => {
                let res = rt
                    .block_on(layotto.get_next_id(layotto_req(&keys.strong, AutoIncrement::Strong)))
                    .map(|r| vec![r.into_inner().next_id.to_string()])
                    .map_err(Failed::from);
                r.add(node, "grpc GetNextId strong", Space::Strong, sent, res);
            }
            _ => {
                let res = rt
                    .block_on(layotto.get_next_id(layotto_req(&keys.weak, AutoIncrement::Weak)))
                    .map(|r| vec![r.into_inner().next_id.to_string()])
                    .map_err(Failed::from);
                r.add(node, "grpc GetNextId weak", Space::Weak, sent, res);
            }
        }
        i += 1;
    }
    r
}

/// Client threads on every node, until `stop`.
fn spawn_clients(
    nodes: &[Node],
    keys: &Keys,
    stop: &Arc<AtomicBool>,
    strong_batches_only: bool,
) -> Vec<std::thread::JoinHandle<Record>> {
    let mut threads = Vec::new();
    for node in nodes {
        for _ in 0..HTTP_CLIENTS {
            let (addr, keys, stop, index) = (
                node.http.clone(),
                keys.clone(),
                Arc::clone(stop),
                node.index,
            );
            threads.push(std::thread::spawn(move || {
                if strong_batches_only {
                    strong_batch_client(index, addr, keys, stop)
                } else {
                    http_client(index, addr, keys, stop)
                }
            }));
        }
        if strong_batches_only {
            continue;
        }
        for _ in 0..GRPC_CLIENTS {
            let (addr, keys, stop, index) = (
                node.grpc.clone(),
                keys.clone(),
                Arc::clone(stop),
                node.index,
            );
            threads.push(std::thread::spawn(move || {
                grpc_client(index, addr, keys, stop)
            }));
        }
    }
    threads
}

fn join(threads: Vec<std::thread::JoinHandle<Record>>) -> Record {
    let mut all = Record::default();
    for t in threads {
        let r = t.join().expect("a client thread panicked");
        all.calls.extend(r.calls);
        all.failures.extend(r.failures);
    }
    all
}

/// Distinct Snowflake workers, sno partitions and LexicalUUID workers among the nodes.
fn assert_distinct_workers(workers: &[Workers], when: &str) {
    for (a, wa) in workers.iter().enumerate() {
        for (b, wb) in workers.iter().enumerate().skip(a + 1) {
            assert_ne!(
                wa.snowflake, wb.snowflake,
                "{when}: nodes {a} and {b} hold the same Snowflake worker {}",
                wa.snowflake
            );
            assert_ne!(
                wa.sno, wb.sno,
                "{when}: nodes {a} and {b} hold the same sno partition {}",
                wa.sno
            );
            assert_ne!(
                wa.lexical, wb.lexical,
                "{when}: nodes {a} and {b} hold the same LexicalUUID worker {}",
                wa.lexical
            );
        }
    }
}

/// No ID repeats within a space, across every node and route; the message lists the first
/// repeats with who issued each.
fn check_no_repeats(calls: &[Call]) -> Result<(), String> {
    let mut seen: HashMap<(Space, &str), (usize, &'static str)> = HashMap::new();
    let mut repeats = Vec::new();
    let mut total = 0usize;
    for c in calls {
        for id in &c.ids {
            total += 1;
            if let Some(&(node, via)) = seen.get(&(c.space, id.as_str())) {
                repeats.push(format!(
                    "{:?} ID {id}: node {node} ({via}) and node {} ({})",
                    c.space, c.node, c.via
                ));
            } else {
                seen.insert((c.space, id.as_str()), (c.node, c.via));
            }
        }
    }
    if repeats.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} of {total} IDs repeated; first: {:#?}",
        repeats.len(),
        &repeats[..repeats.len().min(10)]
    ))
}

/// Every Snowflake ID carries the worker of the node that issued it.
fn assert_snowflake_workers(calls: &[Call], workers: &[Workers]) {
    for c in calls.iter().filter(|c| c.space == Space::Snowflake) {
        let w = &workers[c.node];
        let mask = (1u64 << w.worker_bits) - 1;
        for id in &c.ids {
            let n: u64 = id.parse().unwrap_or_else(|_| {
                panic!("node {} ({}) answered a Snowflake ID {id:?}", c.node, c.via)
            });
            assert_eq!(
                (n >> w.sequence_bits) & mask,
                w.snowflake,
                "Snowflake ID {id} from node {} ({}) does not carry its worker {}",
                c.node,
                c.via,
                w.snowflake
            );
        }
    }
}

/// A STRONG call's IDs as numbers.
fn strong_ids(c: &Call) -> Vec<i64> {
    c.ids
        .iter()
        .map(|id| {
            id.parse().unwrap_or_else(|_| {
                panic!("node {} ({}) answered a STRONG ID {id:?}", c.node, c.via)
            })
        })
        .collect()
}

/// STRONG IDs follow real time: within a call they increase, and a call that returned before
/// another was sent has smaller IDs than all of that other's. One sweep over the calls sorted
/// by sending, with the largest ID of the calls returned before each. The number of calls.
fn check_strong_real_time(calls: &[Call]) -> Result<usize, String> {
    struct Strong<'a> {
        call: &'a Call,
        min: i64,
        max: i64,
    }
    let mut strong = Vec::new();
    for c in calls.iter().filter(|c| c.space == Space::Strong) {
        let ids = strong_ids(c);
        let (Some(&min), Some(&max)) = (ids.first(), ids.last()) else {
            return Err(format!("node {} ({}) answered no ID", c.node, c.via));
        };
        if ids.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!(
                "STRONG batch from node {} ({}) does not increase: {ids:?}",
                c.node, c.via
            ));
        }
        strong.push(Strong { call: c, min, max });
    }
    let mut by_sent: Vec<&Strong> = strong.iter().collect();
    by_sent.sort_by_key(|s| s.call.sent);
    let mut by_returned: Vec<&Strong> = strong.iter().collect();
    by_returned.sort_by_key(|s| s.call.returned);
    let mut next = 0;
    let mut before: Option<&Strong> = None; // the largest ID returned so far
    for b in by_sent {
        while next < by_returned.len() && by_returned[next].call.returned < b.call.sent {
            let a = by_returned[next];
            if before.is_none_or(|m| a.max > m.max) {
                before = Some(a);
            }
            next += 1;
        }
        if let Some(a) = before.filter(|a| a.max >= b.min) {
            return Err(format!(
                "STRONG order broken: node {} ({}) returned {}, then node {} ({}), sent {:?} after that, returned {}",
                a.call.node,
                a.call.via,
                a.max,
                b.call.node,
                b.call.via,
                b.call.sent - a.call.returned,
                b.min
            ));
        }
    }
    Ok(strong.len())
}

/// Calls that failed on a node that was up (every node but the killed one, and the killed
/// one after its restart line) failed only with the server's retryable "unavailable, retry
/// later"; returns how many did.
/// `logs`: the nodes' standard error, where a store's own words go.
fn assert_no_failures_while_up(
    failures: &[Failure],
    killed: Option<(usize, Instant)>,
    logs: &[String],
) -> usize {
    let up: Vec<&Failure> = failures
        .iter()
        .filter(|f| match killed {
            Some((node, restarted_at)) => f.node != node || f.sent >= restarted_at,
            None => true,
        })
        .collect();
    let unexpected: Vec<String> = up
        .iter()
        .filter(|f| !f.error.retryable)
        .map(|f| format!("node {} ({}): {}", f.node, f.via, f.error.text))
        .collect();
    assert!(
        unexpected.is_empty(),
        "{} calls failed on nodes that were serving; first: {:#?}\nthe nodes' standard error: {:#?}",
        unexpected.len(),
        &unexpected[..unexpected.len().min(10)],
        logs
    );
    up.len()
}

/// Every node's standard error.
fn logs(nodes: &[Node]) -> Vec<String> {
    nodes.iter().flat_map(Node::stderr).collect()
}

/// The cluster of a test: three nodes on `registry` and the test PostgreSQL server, and the
/// run's keys (unique, so runs on one server never meet).
fn cluster(registry: &str, dir: &std::path::Path) -> (Vec<Node>, Keys) {
    let pg = floe_testkit::env("FLOE_TEST_POSTGRES");
    // A small pool: the server is shared with the rest of the suite.
    let sep = if pg.contains('?') { '&' } else { '?' };
    let pg = format!("{pg}{sep}pool=4");
    let nodes = (0..3)
        .map(|i| Node::new(i, dir.join(format!("node{i}")), registry, &pg))
        .collect();
    let run = floe_testkit::unique("three");
    let keys = Keys {
        weak: format!("{run}-weak"),
        strong: format!("{run}-strong"),
    };
    (nodes, keys)
}

/// The whole scenario on one registry (see the module docs).
fn three_nodes_kill_one(registry: &str) {
    let _one = one_cluster();
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, keys) = cluster(registry, dir.path());
    let workers: Vec<Workers> = nodes.iter_mut().map(Node::start).collect();
    assert_distinct_workers(&workers, "at start");

    let stop = Arc::new(AtomicBool::new(false));
    let clients = spawn_clients(&nodes, &keys, &stop, false);
    std::thread::sleep(RUN_BEFORE_KILL);

    let killed_at = Instant::now();
    nodes[KILLED].kill9();
    let again = nodes[KILLED].start();
    let restarted_at = Instant::now();
    let down = restarted_at - killed_at;
    assert_eq!(
        again, workers[KILLED],
        "node {KILLED} restarted on its ports and state directory, with other workers"
    );
    std::thread::sleep(RUN_AFTER_RESTART);
    stop.store(true, Ordering::Relaxed);
    let record = join(clients);
    for n in &mut nodes {
        n.stop();
    }

    let retried = assert_no_failures_while_up(
        &record.failures,
        Some((KILLED, restarted_at)),
        &logs(&nodes),
    );
    let served_after_restart = record
        .calls
        .iter()
        .filter(|c| c.node == KILLED && c.sent >= restarted_at)
        .count();
    assert!(
        served_after_restart > 0,
        "node {KILLED} answered no call after its restart"
    );
    for node in 0..3 {
        for space in [
            Space::Snowflake,
            Space::Sno,
            Space::Lexical,
            Space::Weak,
            Space::Strong,
        ] {
            assert!(
                record
                    .calls
                    .iter()
                    .any(|c| c.node == node && c.space == space),
                "node {node} answered no {space:?} call"
            );
        }
    }
    assert_snowflake_workers(&record.calls, &workers);
    check_no_repeats(&record.calls).unwrap_or_else(|e| panic!("{e}"));
    let strong_calls = check_strong_real_time(&record.calls).unwrap_or_else(|e| panic!("{e}"));
    let ids: usize = record.calls.iter().map(|c| c.ids.len()).sum();
    eprintln!(
        "three nodes on {registry}: {} calls ({strong_calls} STRONG), {ids} IDs, {} failed while node {KILLED} was down ({down:?}), {retried} answered \"retry later\" while up; {:?} in all",
        record.calls.len(),
        record.failures.len() - retried,
        started.elapsed()
    );
}

#[test]
fn three_nodes_on_zookeeper_survive_a_kill() {
    let registry = format!(
        "zk://{}/{}",
        floe_testkit::env("FLOE_TEST_ZOOKEEPER"),
        floe_testkit::unique("floe-three")
    );
    three_nodes_kill_one(&registry);
}

/// The same scenario on a ZooKeeper that refuses unauthenticated clients
/// (FLOE_TEST_ZOOKEEPER_SECURE), the nodes' password in a file (`?password_file=`): no repeats,
/// and afterwards every node floe made under the root is creator-only (floe's digest user,
/// all permissions, nobody else).
#[test]
fn three_nodes_on_zookeeper_with_acls_survive_a_kill() {
    const PASSWORD: &str = "thr3e-n0des";
    let server = floe_testkit::env("FLOE_TEST_ZOOKEEPER_SECURE");
    let root = format!("/{}", floe_testkit::unique("floe-three-acl"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("zk-password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let registry = format!("zk://floe@{server}{root}?password_file={}", file.display());
    three_nodes_kill_one(&registry);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let checked = rt.block_on(async {
        let client = zookeeper_client::Client::connector()
            .with_auth("digest", format!("floe:{PASSWORD}").as_bytes())
            .connect(&server)
            .await
            .unwrap();
        let mut todo = vec![root.clone()];
        let mut checked = Vec::new();
        while let Some(path) = todo.pop() {
            let (acls, _) = client.get_acl(&path).await.unwrap();
            assert!(
                acls.len() == 1
                    && acls[0].scheme() == "digest"
                    && acls[0].id().starts_with("floe:")
                    && acls[0].permission() == zookeeper_client::Permission::ALL,
                "{path}: {acls:?}"
            );
            for child in client.list_children(&path).await.unwrap() {
                todo.push(format!("{path}/{child}"));
            }
            checked.push(path);
        }
        checked
    });
    assert!(
        checked.iter().any(|p| p.contains("/workers/")),
        "no worker record under {root}: {checked:?}"
    );
}

/// With a lease TTL of 5 s: a killed node's lease lingers at most about 5.5 s, well within
/// the 10 s a restart waits for it. (The default TTL, 10 s, races that wait: see
/// `a_node_on_etcd_comes_back_after_a_kill_whatever_its_ttl`.)
#[cfg(feature = "etcd")]
#[test]
fn three_nodes_on_etcd_survive_a_kill() {
    let registry = format!(
        "etcd://{}/{}?ttl=5",
        floe_testkit::env("FLOE_TEST_ETCD"),
        floe_testkit::unique("floe-three")
    );
    three_nodes_kill_one(&registry);
}

/// The same over TLS with client certificates and an etcd user (the secure etcd of
/// scripts/test.sh: https only, --client-cert-auth, RBAC, tokens forgotten after 3 s unused).
#[cfg(feature = "etcd")]
#[test]
fn three_nodes_on_etcd_over_mtls_with_auth_survive_a_kill() {
    let d = floe_testkit::env("FLOE_TEST_ETCD_SECURE_DIR");
    let registry = format!(
        "etcds://floe@{}/{}?ttl=5&cacert={d}/ca.pem&cert={d}/client.pem&key={d}/client.key&password_file={d}/password",
        floe_testkit::env("FLOE_TEST_ETCD_SECURE"),
        floe_testkit::unique("floe-three")
    );
    three_nodes_kill_one(&registry);
}

/// A node on etcd killed with SIGKILL must come back on its ports and state directory once
/// its previous lease has expired, whatever the lease's TTL.
///
/// Found: a restart waited for the previous holder at most 10 s (`conflict_wait`), whatever
/// the registry, while an etcd lease lingers up to its TTL after the last keep-alive plus
/// etcd's expiry check (up to 0.5 s): with `?ttl=20` every kill gave up ("is held by another
/// live process"). The wait now covers the registry's `holder_linger` + 2 s.
#[cfg(feature = "etcd")]
#[test]
fn a_node_on_etcd_comes_back_after_a_kill_whatever_its_ttl() {
    let registry = format!(
        "etcd://{}/{}?ttl=20",
        floe_testkit::env("FLOE_TEST_ETCD"),
        floe_testkit::unique("floe-three")
    );
    let _one = one_cluster();
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, _) = cluster(&registry, dir.path());
    let node = &mut nodes[0];
    let before = node.start();
    node.kill9();
    let killed_at = Instant::now();
    let after = node.start();
    eprintln!("came back after {:?}", killed_at.elapsed());
    assert_eq!(after, before, "the restart got other workers");
    node.stop();
}

/// A node that restarts after a kill binds its ports, then waits for its previous ZooKeeper
/// session to expire (about 6 s) before it serves. Meanwhile a client connects at once and its
/// request, even `/healthz`, waits unanswered: a TCP health check sees the node up, and clients
/// hang instead of failing over. It should answer (a 503 while starting) or refuse.
///
/// Found: `Server::start` bound the listeners before it leased. It now binds them last. (Since
/// lease rule 2 a restart on its own state directory continues its lease at once and does not
/// wait; the listeners are still bound last.)
#[test]
fn a_restarting_node_does_not_hold_requests_while_it_waits_for_its_lease() {
    use std::io::{Read, Write};
    let _one = one_cluster();
    let registry = format!(
        "zk://{}/{}",
        floe_testkit::env("FLOE_TEST_ZOOKEEPER"),
        floe_testkit::unique("floe-three")
    );
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, _) = cluster(&registry, dir.path());
    let mut node = nodes.remove(0);
    node.start();
    node.kill9();
    let http = node.http.clone();
    let restart = std::thread::spawn(move || {
        node.start();
        node
    });
    // Once the new process listens (after its lease: the previous session lingers about 6 s):
    // connect, ask for /healthz, wait 1 s for any answer.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut s = loop {
        if let Ok(s) = std::net::TcpStream::connect(&http) {
            break s;
        }
        assert!(Instant::now() < deadline, "the restart never listened");
        std::thread::sleep(Duration::from_millis(10));
    };
    let asked = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    write!(
        s,
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = [0u8; 64];
    let read = s.read(&mut answer);
    let waited = asked.elapsed();
    let mut node = restart.join().unwrap();
    node.stop();
    assert!(
        read.is_ok(),
        "/healthz of a node waiting for its lease was not answered within {waited:?}: {read:?}"
    );
}

/// STRONG batches only, from every node at once.
fn strong_batch_client(node: usize, addr: String, keys: Keys, stop: Arc<AtomicBool>) -> Record {
    let mut r = Record::default();
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let path = format!(
            "/v1/sequencer/pg/{}?increment=strong&count={}",
            keys.strong,
            strong_batch_of(i)
        );
        let res = http(&addr, "POST", &path).and_then(|b| json_ids(&b));
        r.add(
            node,
            "http /v1/sequencer strong batch",
            Space::Strong,
            sent,
            res,
        );
        i += 1;
    }
    r
}

/// floe.proto: "STRONG, one increment by count, so the batch is a run of consecutive IDs".
///
/// Found while the server served a batch by a loop of single increments: batches asked of
/// several nodes at once interleaved (e.g. `[86, 90, 94, 97, 99]`).
#[test]
fn strong_batches_are_runs_of_consecutive_ids() {
    let _one = one_cluster();
    let dir = tempfile::tempdir().unwrap();
    let registry = format!("file://{}", dir.path().join("registry").display());
    let (mut nodes, keys) = cluster(&registry, dir.path());
    for n in &mut nodes {
        n.start();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let clients = spawn_clients(&nodes, &keys, &stop, true);
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let record = join(clients);
    for n in &mut nodes {
        n.stop();
    }
    let _ = assert_no_failures_while_up(&record.failures, None, &logs(&nodes));
    let broken: Vec<String> = record
        .calls
        .iter()
        .filter_map(|c| {
            let ids = strong_ids(c);
            let consecutive = ids.windows(2).all(|w| w[0].checked_add(1) == Some(w[1]));
            (!consecutive).then(|| format!("node {}: {ids:?}", c.node))
        })
        .collect();
    assert!(
        broken.is_empty(),
        "{} of {} STRONG batches are not runs of consecutive IDs; first: {:#?}",
        broken.len(),
        record.calls.len(),
        &broken[..broken.len().min(10)]
    );
}

/// The checks themselves, on made-up calls: they catch what they claim to.
mod checks {
    use super::*;

    fn call(node: usize, space: Space, sent_ms: u64, returned_ms: u64, ids: &[i64]) -> Call {
        static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let base = *BASE.get_or_init(Instant::now);
        Call {
            node,
            via: "test",
            space,
            sent: base + Duration::from_millis(sent_ms),
            returned: base + Duration::from_millis(returned_ms),
            ids: ids.iter().map(i64::to_string).collect(),
        }
    }

    #[test]
    fn strong_real_time_passes_overlapping_calls_and_catches_a_later_smaller_id() {
        // Overlapping calls may come back in any order.
        let fine = [
            call(0, Space::Strong, 0, 10, &[2]),
            call(1, Space::Strong, 1, 5, &[1]),
            call(2, Space::Strong, 11, 12, &[3, 4]),
        ];
        assert_eq!(check_strong_real_time(&fine), Ok(3));
        // Node 0's 7 returned at 10 ms; node 2 asked at 11 ms and got 6.
        let broken = [
            call(0, Space::Strong, 0, 10, &[7]),
            call(1, Space::Strong, 1, 20, &[5]),
            call(2, Space::Strong, 11, 12, &[6]),
        ];
        assert_eq!(
            check_strong_real_time(&broken),
            Err("STRONG order broken: node 0 (test) returned 7, then node 2 (test), sent 1ms after that, returned 6".into())
        );
        let decreasing = [call(0, Space::Strong, 0, 1, &[3, 2])];
        assert_eq!(
            check_strong_real_time(&decreasing),
            Err("STRONG batch from node 0 (test) does not increase: [3, 2]".into())
        );
    }

    #[test]
    fn repeats_are_caught_within_a_space_only() {
        let fine = [
            call(0, Space::Weak, 0, 1, &[1, 2]),
            call(1, Space::Strong, 0, 1, &[1, 2]),
        ];
        assert_eq!(check_no_repeats(&fine), Ok(()));
        let broken = [
            call(0, Space::Weak, 0, 1, &[1, 2]),
            call(2, Space::Weak, 0, 1, &[3, 2]),
        ];
        let text = check_no_repeats(&broken).unwrap_err();
        assert!(
            text.contains("1 of 4 IDs repeated")
                && text.contains("Weak ID 2: node 0 (test) and node 2 (test)"),
            "{text}"
        );
    }
}

/// The number a log line's text starts with.
fn first_word<T: std::str::FromStr>(text: &str) -> Option<T> {
    text.split_whitespace().next()?.parse().ok()
}
