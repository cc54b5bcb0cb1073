//! A deterministic simulation of the etcd registry's keeper, run for thousands of seeds.
//!
//! What runs is floe's own code: [`EtcdRegistry`] (registration, takeover, the keeper's
//! keep-alives, lapses and holds again, heartbeats, close, adoption of a continued lease),
//! the shared records logic and the [`Fence`]. What is simulated is everything under it, on
//! tokio's paused clock in one thread, every choice drawn from one seed:
//!
//! - etcd itself ([`Etcd`]): keys with revisions, transactions with compares, leases that
//!   expire their TTL after their last keep-alive (and take their keys with them);
//! - the network ([`Link`]): delays each way, requests applied whose answers are lost, the
//!   registry out of reach for everyone (an outage) or for one node (a partition);
//! - three nodes with two worker IDs between them, each with a clock of its own (an offset
//!   and a rate within 1% of true time); each one crashes, closes, restarts continuing its
//!   lease from its "state directory" (same boot), restarts after a reboot, or restarts on a
//!   fresh state directory; the one without an ID takes over an idle one.
//!
//! Every node checks its fence every 50 ms and "issues" when the fence admits. The property,
//! checked after every seed: **no two processes issue with one worker ID at the same time**,
//! and a process never issues again with an ID after another has issued with it. A failing
//! seed prints itself and its trace; `FLOE_SIM_SEED=N` replays just that seed, and
//! `FLOE_SIM_SEEDS=N` sets how many run (3,000 by default).
//!
//! Two planted bugs must each be found within the seeds: a holder whose reach is longer than
//! the takeover wait (its record understates it, and the taker's own reach is as short), and
//! a restart that continues its lease with a whole window instead of what was left of it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use floe_core::clock::Clock;
use floe_core::fence::{Fence, Sent};
use floe_etcd::pb::etcdserverpb::{
    compare, request_op, response_op, Compare, RequestOp, ResponseOp,
};
use floe_etcd::{
    DeleteRangeResponse, Error, KeyValue, LeaseGrantResponse, LeaseKeepAliveResponse, PutResponse,
    RangeResponse, Txn, TxnResponse,
};
use floe_testkit::Rng;
use tokio::time::Instant;

use super::{EtcdRegistry, Kv};
use crate::{ErrorKind, IdSpace, Identity, Registration, Registry};

/// The etcd lease TTL and the reach of the simulated fleet: short, so that a seed's minute
/// sees many leases end, many takeovers and many outages longer than the reach.
const TTL_SECS: i64 = 2;
const REACH: Duration = Duration::from_secs(4);
/// How long one seed runs, in simulated time.
const RUN: Duration = Duration::from_secs(60);
/// How often a node checks its fence ("issues").
const ISSUE_EVERY: Duration = Duration::from_millis(50);
/// The client's bound on a call (floe-etcd's connect + request timeouts, shortened).
const CALL_LIMIT: Duration = Duration::from_secs(2);
const NODES: usize = 3;
const IDS: u32 = 2;

/// A bug planted on purpose, which the simulation must find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plant {
    None,
    /// A reach longer than the takeover wait: node 0 issues for the whole reach while etcd
    /// keeps its record with a quarter of it, and the other nodes' own reach is that quarter
    /// (a fleet of mixed reaches whose records understate them).
    ShortReachInRecord,
    /// A restart continues its lease with a whole window, not what was left of it.
    ContinueWholeWindow,
}

/// A node's clocks: true time (tokio's paused clock) at a rate of its own, and a wall clock
/// offset from everyone else's.
#[derive(Debug)]
struct SimClock {
    origin: Instant,
    /// Parts per million fast (+) or slow (-).
    ppm: i64,
    wall_origin: u64,
}

impl Clock for SimClock {
    fn now_nanos(&self) -> u64 {
        self.wall_origin + self.monotonic_nanos()
    }

    fn monotonic_nanos(&self) -> u64 {
        let true_nanos = i128::try_from(self.origin.elapsed().as_nanos()).unwrap_or(i128::MAX);
        let scaled = true_nanos + true_nanos * i128::from(self.ppm) / 1_000_000;
        u64::try_from(scaled).unwrap_or(0)
    }
}

impl SimClock {
    /// A wait of `d` on this clock, in true time.
    fn true_duration(&self, d: Duration) -> Duration {
        let nanos = i128::try_from(d.as_nanos()).unwrap_or(i128::MAX);
        let scaled = nanos * 1_000_000 / (1_000_000 + i128::from(self.ppm));
        Duration::from_nanos(u64::try_from(scaled).unwrap_or(u64::MAX))
    }
}

/// A lease in the simulated etcd.
#[derive(Debug)]
struct SimLease {
    ttl: i64,
    expires: Instant,
}

/// The simulated etcd: one member, linearizable, leases on true time.
#[derive(Debug, Default)]
struct EtcdState {
    revision: i64,
    kvs: BTreeMap<Vec<u8>, KeyValue>,
    leases: BTreeMap<i64, SimLease>,
    next_lease: i64,
}

#[derive(Debug)]
struct Etcd {
    state: Mutex<EtcdState>,
    plant: Plant,
}

fn status(what: &str) -> Error {
    Error::Status(tonic::Status::not_found(what.to_string()))
}

impl EtcdState {
    /// Ends the leases whose TTL ran out, deleting their keys.
    fn expire(&mut self, now: Instant) {
        let ended: Vec<i64> = self
            .leases
            .iter()
            .filter(|(_, l)| l.expires <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in ended {
            self.revoke(id);
        }
    }

    fn revoke(&mut self, id: i64) -> bool {
        if self.leases.remove(&id).is_none() {
            return false;
        }
        let keys: Vec<Vec<u8>> = self
            .kvs
            .iter()
            .filter(|(_, kv)| kv.lease == id)
            .map(|(k, _)| k.clone())
            .collect();
        if !keys.is_empty() {
            self.revision += 1;
            for k in keys {
                self.kvs.remove(&k);
            }
        }
        true
    }

    fn range(&self, key: &[u8], prefix: bool) -> RangeResponse {
        let kvs: Vec<KeyValue> = self
            .kvs
            .iter()
            .filter(|(k, _)| {
                if prefix {
                    k.starts_with(key)
                } else {
                    k.as_slice() == key
                }
            })
            .map(|(_, kv)| kv.clone())
            .collect();
        RangeResponse {
            count: i64::try_from(kvs.len()).unwrap_or(i64::MAX),
            kvs,
            ..Default::default()
        }
    }

    fn holds(&self, c: &Compare) -> bool {
        use compare::{CompareResult, CompareTarget, TargetUnion};
        let kv = self.kvs.get(&c.key);
        let ordering = match (CompareTarget::try_from(c.target), &c.target_union) {
            (Ok(CompareTarget::Create), Some(TargetUnion::CreateRevision(r))) => {
                kv.map_or(0, |kv| kv.create_revision).cmp(r)
            }
            (Ok(CompareTarget::Mod), Some(TargetUnion::ModRevision(r))) => {
                kv.map_or(0, |kv| kv.mod_revision).cmp(r)
            }
            (Ok(CompareTarget::Version), Some(TargetUnion::Version(v))) => {
                kv.map_or(0, |kv| kv.version).cmp(v)
            }
            (Ok(CompareTarget::Value), Some(TargetUnion::Value(v))) => match kv {
                Some(kv) => kv.value.cmp(v),
                None => return false,
            },
            (Ok(CompareTarget::Lease), Some(TargetUnion::Lease(l))) => {
                kv.map_or(0, |kv| kv.lease).cmp(l)
            }
            other => panic!("the simulated etcd does not know the compare {other:?}"),
        };
        match CompareResult::try_from(c.result) {
            Ok(CompareResult::Equal) => ordering.is_eq(),
            Ok(CompareResult::Greater) => ordering.is_gt(),
            Ok(CompareResult::Less) => ordering.is_lt(),
            Ok(CompareResult::NotEqual) => ordering.is_ne(),
            Err(_) => panic!("a compare result out of range: {}", c.result),
        }
    }

    fn txn(&mut self, txn: &Txn, plant: Plant) -> Result<TxnResponse, Error> {
        let request = txn.request();
        let succeeded = request.compare.iter().all(|c| self.holds(c));
        let ops: &[RequestOp] = if succeeded {
            &request.success
        } else {
            &request.failure
        };
        // A put under a lease that is gone fails the whole transaction, as etcd's does.
        for op in ops {
            if let Some(request_op::Request::RequestPut(put)) = &op.request {
                if put.lease != 0 && !self.leases.contains_key(&put.lease) {
                    return Err(status("etcdserver: requested lease not found"));
                }
            }
        }
        let writes = ops.iter().any(|op| {
            !matches!(
                op.request,
                Some(request_op::Request::RequestRange(_)) | None
            )
        });
        if writes {
            self.revision += 1;
        }
        let revision = self.revision;
        let mut responses = Vec::new();
        for op in ops {
            let response = match &op.request {
                Some(request_op::Request::RequestRange(range)) => {
                    response_op::Response::ResponseRange(self.range(&range.key, false))
                }
                Some(request_op::Request::RequestPut(put)) => {
                    let value = planted(plant, &put.key, &put.value);
                    let before = self.kvs.get(&put.key);
                    let kv = KeyValue {
                        key: put.key.clone(),
                        create_revision: before.map_or(revision, |kv| kv.create_revision),
                        mod_revision: revision,
                        version: before.map_or(1, |kv| kv.version + 1),
                        value,
                        lease: put.lease,
                    };
                    self.kvs.insert(put.key.clone(), kv);
                    response_op::Response::ResponsePut(PutResponse::default())
                }
                Some(request_op::Request::RequestDeleteRange(delete)) => {
                    let deleted = i64::from(self.kvs.remove(&delete.key).is_some());
                    response_op::Response::ResponseDeleteRange(DeleteRangeResponse {
                        deleted,
                        ..Default::default()
                    })
                }
                other => panic!("the simulated etcd does not run {other:?}"),
            };
            responses.push(ResponseOp {
                response: Some(response),
            });
        }
        Ok(TxnResponse {
            succeeded,
            responses,
            ..Default::default()
        })
    }
}

/// What etcd keeps of a put: the value, or under [`Plant::ShortReachInRecord`] a worker record
/// whose reach is cut to a quarter.
fn planted(plant: Plant, key: &[u8], value: &[u8]) -> Vec<u8> {
    if plant != Plant::ShortReachInRecord || !key.windows(9).any(|w| w == b"/workers/") {
        return value.to_vec();
    }
    let mut record: serde_json::Value = serde_json::from_slice(value).expect("a worker record");
    let reach = record["reach_ms"].as_u64().unwrap_or(0);
    record["reach_ms"] = serde_json::json!(reach / 4);
    serde_json::to_vec(&record).expect("json")
}

/// The network between the nodes and etcd, and its faults.
#[derive(Debug)]
struct Net {
    rng: Mutex<Rng>,
    /// Until when etcd is out of everyone's reach.
    down_until: Mutex<Option<Instant>>,
    /// Until when each node is cut off from etcd.
    cut_until: Mutex<[Option<Instant>; NODES]>,
}

impl Net {
    fn reachable(&self, node: usize) -> bool {
        let now = Instant::now();
        let down = self.down_until.lock().unwrap().is_some_and(|t| now < t);
        let cut = self.cut_until.lock().unwrap()[node].is_some_and(|t| now < t);
        !down && !cut
    }

    fn delay(&self) -> Duration {
        self.rng.lock().unwrap().millis(1, 40)
    }

    /// Whether an answer is lost on its way back (its request was applied).
    fn loses_answer(&self) -> bool {
        self.rng.lock().unwrap().chance(3)
    }
}

/// One node's connection to etcd.
#[derive(Debug)]
struct Link {
    etcd: Arc<Etcd>,
    net: Arc<Net>,
    node: usize,
}

impl Link {
    /// A call: out over the network, applied at etcd, and back; a timeout when etcd is out of
    /// reach either way or the answer is lost.
    async fn call<T>(
        &self,
        f: impl FnOnce(&mut EtcdState) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let started = Instant::now();
        let timeout = || async move {
            tokio::time::sleep_until(started + CALL_LIMIT).await;
            Err(Error::Timeout(CALL_LIMIT))
        };
        tokio::time::sleep(self.net.delay()).await;
        if !self.net.reachable(self.node) {
            return timeout().await;
        }
        let answer = {
            let mut state = self.etcd.state.lock().unwrap();
            state.expire(Instant::now());
            f(&mut state)
        };
        tokio::time::sleep(self.net.delay()).await;
        if !self.net.reachable(self.node) || self.net.loses_answer() {
            return timeout().await;
        }
        answer
    }
}

#[async_trait]
impl Kv for Link {
    async fn get(&self, key: &str) -> Result<RangeResponse, Error> {
        self.call(|s| Ok(s.range(key.as_bytes(), false))).await
    }

    async fn get_prefix(&self, prefix: &str) -> Result<RangeResponse, Error> {
        self.call(|s| Ok(s.range(prefix.as_bytes(), true))).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, Error> {
        let plant = self.etcd.plant;
        self.call(move |s| s.txn(&txn, plant)).await
    }

    async fn lease_grant(&self, ttl_secs: i64) -> Result<LeaseGrantResponse, Error> {
        self.call(|s| {
            s.next_lease += 1;
            let id = s.next_lease;
            let ttl = Duration::from_secs(u64::try_from(ttl_secs).unwrap_or(0));
            s.leases.insert(
                id,
                SimLease {
                    ttl: ttl_secs,
                    expires: Instant::now() + ttl,
                },
            );
            Ok(LeaseGrantResponse {
                id,
                ttl: ttl_secs,
                ..Default::default()
            })
        })
        .await
    }

    async fn lease_revoke(&self, id: i64) -> Result<(), Error> {
        self.call(|s| {
            if s.revoke(id) {
                Ok(())
            } else {
                Err(status("etcdserver: requested lease not found"))
            }
        })
        .await
    }

    async fn lease_keep_alive_once(
        &self,
        id: i64,
    ) -> Result<Option<LeaseKeepAliveResponse>, Error> {
        self.call(|s| {
            let ttl = match s.leases.get_mut(&id) {
                Some(lease) => {
                    lease.expires =
                        Instant::now() + Duration::from_secs(u64::try_from(lease.ttl).unwrap_or(0));
                    lease.ttl
                }
                None => 0,
            };
            Ok(Some(LeaseKeepAliveResponse {
                id,
                ttl,
                ..Default::default()
            }))
        })
        .await
    }
}

/// What a node's state directory remembers of its lease: the continuation mark.
#[derive(Debug, Clone, Copy)]
struct Mark {
    id: u32,
    holder: u64,
    recorded_ms: u64,
    /// The window's end on the node's monotonic clock (which survives a process restart
    /// within a boot, as `CLOCK_BOOTTIME` does).
    until_mono: u64,
}

/// Who issued with each worker ID, and when: per ID, runs of samples of one process.
#[derive(Debug, Default)]
struct Oracle {
    runs: HashMap<u32, Vec<Run>>,
    trace: Vec<String>,
    takeovers: u64,
    continued: u64,
    samples: u64,
}

#[derive(Debug, Clone, Copy)]
struct Run {
    process: u64,
    first: Duration,
    last: Duration,
}

impl Oracle {
    fn issued(&mut self, id: u32, process: u64, at: Duration) {
        self.samples += 1;
        let runs = self.runs.entry(id).or_default();
        match runs.last_mut() {
            Some(run) if run.process == process => run.last = at,
            _ => runs.push(Run {
                process,
                first: at,
                last: at,
            }),
        }
    }

    fn note(&mut self, at: Duration, what: String) {
        self.trace
            .push(format!("{:>9.3} s  {what}", at.as_secs_f64()));
    }

    /// The first breach of the property, if any.
    fn breach(&self) -> Option<String> {
        for (id, runs) in &self.runs {
            let mut seen: Vec<u64> = Vec::new();
            for (i, a) in runs.iter().enumerate() {
                if i > 0 && seen.contains(&a.process) {
                    return Some(format!(
                        "process {} issued with worker ID {id} again at {:?}, after another process had",
                        a.process, a.first
                    ));
                }
                seen.push(a.process);
                for b in &runs[i + 1..] {
                    if b.process != a.process && b.first <= a.last {
                        return Some(format!(
                            "worker ID {id}: process {} issued from {:?} to {:?} and process {} from {:?} to {:?}",
                            a.process, a.first, a.last, b.process, b.first, b.last
                        ));
                    }
                }
            }
        }
        None
    }
}

/// How a node's process ends, and how the next one starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Restart {
    /// Same boot, same state directory: the lease is continued if its window is open.
    Continue,
    /// The machine rebooted: the state directory is there, the window is not.
    Reboot,
    /// A fresh state directory (a replacement node with the same identity).
    Fresh,
}

/// Everything one seed shares.
struct World {
    start: Instant,
    etcd: Arc<Etcd>,
    net: Arc<Net>,
    oracle: Mutex<Oracle>,
    next_process: Mutex<u64>,
    plant: Plant,
}

impl World {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn note(&self, what: String) {
        self.oracle.lock().unwrap().note(self.now(), what);
    }
}

/// One node: processes one after another until the run ends.
async fn node(world: Arc<World>, index: usize, mut rng: Rng) {
    let clock = Arc::new(SimClock {
        origin: Instant::now(),
        ppm: i64::try_from(rng.range(0, 20_000)).unwrap_or(0) - 10_000,
        wall_origin: 1_790_000_000_000_000_000 + rng.range(0, 100_000_000),
    });
    let identity = Identity::new("sim", format!("node-{index}"), 8080);
    let mut mark: Option<Mark> = None;
    let end = world.start + RUN;
    tokio::time::sleep(rng.millis(0, 2_000)).await;
    while Instant::now() < end {
        let process = {
            let mut next = world.next_process.lock().unwrap();
            *next += 1;
            *next
        };
        let lifetime = rng.millis(2_000, 25_000);
        let dies = Instant::now() + lifetime;
        let link = Link {
            etcd: world.etcd.clone(),
            net: world.net.clone(),
            node: index,
        };
        let reach = if world.plant == Plant::ShortReachInRecord && index > 0 {
            REACH / 4
        } else {
            REACH
        };
        let registry =
            EtcdRegistry::over(Arc::new(link), "/sim", TTL_SECS, clock.clone()).with_reach(reach);
        world.note(format!("node {index} starts process {process}"));
        // Biased: an unbiased select draws its branch order from tokio's own randomness,
        // which the seed does not set.
        let registration = tokio::select! {
            biased;
            reg = start(&world, &registry, &identity, &clock, mark, index) => reg,
            () = tokio::time::sleep_until(dies.min(end)) => None,
        };
        if let Some(reg) = registration {
            let kept = issue(
                &world,
                &registry,
                &identity,
                &clock,
                &reg,
                process,
                dies.min(end),
            )
            .await;
            mark = kept.or(mark);
            if rng.chance(20) {
                // A clean stop: the record says closed, the lease is revoked.
                let _ = tokio::time::timeout(
                    Duration::from_secs(3),
                    registry.close(&identity, reg.record.id),
                )
                .await;
                world.note(format!("node {index} process {process} stops cleanly"));
                mark = None;
            } else {
                world.note(format!("node {index} process {process} crashes"));
            }
        }
        drop(registry);
        let restart = match rng.range(0, 3) {
            0 | 1 => Restart::Continue,
            2 => Restart::Reboot,
            _ => Restart::Fresh,
        };
        match restart {
            Restart::Continue => {}
            Restart::Reboot => mark = mark.map(|m| Mark { until_mono: 0, ..m }),
            Restart::Fresh => mark = None,
        }
        world.note(format!("node {index} restarts: {restart:?}"));
        // A process is never started again in the very instant its predecessor stopped (and
        // floe's own floors keep its first IDs after its predecessor's last time anyway).
        tokio::time::sleep(rng.millis(50, 6_000)).await;
    }
}

/// A process's start: continue the marked lease, or register (taking over an idle ID when
/// none is free) and wait out whatever the registration says.
async fn start(
    world: &World,
    registry: &EtcdRegistry,
    identity: &Identity,
    clock: &SimClock,
    mark: Option<Mark>,
    index: usize,
) -> Option<Registration> {
    if let Some(mark) = mark {
        let now = clock.monotonic_nanos();
        if mark.until_mono > now {
            let left = Duration::from_nanos(mark.until_mono - now);
            let window = if world.plant == Plant::ContinueWholeWindow {
                registry.terms().window
            } else {
                left
            };
            let fence = Arc::new(Fence::new());
            fence.confirm(Sent::now(clock), window);
            let continued = crate::Continued {
                identity: identity.clone(),
                id: mark.id,
                holder: mark.holder,
                recorded_ms: mark.recorded_ms,
            };
            world.oracle.lock().unwrap().continued += 1;
            world.note(format!(
                "node {index} continues worker ID {} ({left:?} left)",
                mark.id
            ));
            return registry.adopt(&continued, fence);
        }
    }
    let space = IdSpace::new(IDS);
    loop {
        let answer = match registry.register(identity, space).await {
            Err(e) if e.kind == ErrorKind::SpaceFull => {
                let idle_before = (clock.now_nanos() / 1_000_000).saturating_sub(2_000);
                match registry.reclaim(identity, space, idle_before).await {
                    Ok(Some(reg)) => Ok(reg),
                    Ok(None) => Err(e),
                    Err(e) => Err(e),
                }
            }
            other => other,
        };
        match answer {
            Ok(reg) => {
                world.note(format!(
                    "node {index} registered worker ID {} (previous holder {:?}, open {}), waits {:?}",
                    reg.record.id, reg.previous_holder, reg.previous_open, reg.takeover_wait
                ));
                if reg.previous_holder.as_ref().is_some_and(|p| p != identity) {
                    world.oracle.lock().unwrap().takeovers += 1;
                }
                tokio::time::sleep(clock.true_duration(reg.takeover_wait)).await;
                return Some(reg);
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// A process issuing until `until`: checks the fence every [`ISSUE_EVERY`], heartbeats every
/// second and keeps the continuation mark as the state directory would. The last mark.
async fn issue(
    world: &World,
    registry: &EtcdRegistry,
    identity: &Identity,
    clock: &SimClock,
    reg: &Registration,
    process: u64,
    until: Instant,
) -> Option<Mark> {
    let id = reg.record.id;
    let mut mark = None;
    let mut next_heartbeat = Instant::now();
    let mut ticks = tokio::time::interval(ISSUE_EVERY);
    while Instant::now() < until {
        ticks.tick().await;
        if reg.fence.admits_now(clock) {
            world
                .oracle
                .lock()
                .unwrap()
                .issued(id, process, world.now());
        }
        if Instant::now() >= next_heartbeat {
            next_heartbeat = Instant::now() + Duration::from_secs(1);
            let now_ms = clock.now_nanos() / 1_000_000;
            // Bounded as the lease's own heartbeat is; its answer only logs.
            let _ = tokio::time::timeout(
                Duration::from_millis(900),
                registry.heartbeat(identity, id, now_ms),
            )
            .await;
            mark = reg
                .fence
                .remaining(clock)
                .filter(|d| !d.is_zero())
                .map(|left| Mark {
                    id,
                    holder: reg.record.holder,
                    recorded_ms: now_ms,
                    until_mono: clock.monotonic_nanos()
                        + u64::try_from(left.as_nanos()).unwrap_or(0),
                });
        }
    }
    mark
}

/// Runs one seed; the oracle at its end.
fn run_seed(seed: u64, plant: Plant) -> Oracle {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let mut rng = Rng(seed);
        let world = Arc::new(World {
            start: Instant::now(),
            etcd: Arc::new(Etcd {
                state: Mutex::new(EtcdState::default()),
                plant,
            }),
            net: Arc::new(Net {
                rng: Mutex::new(Rng(rng.next_u64())),
                down_until: Mutex::new(None),
                cut_until: Mutex::new([None; NODES]),
            }),
            oracle: Mutex::new(Oracle::default()),
            next_process: Mutex::new(0),
            plant,
        });
        let mut tasks = Vec::new();
        for index in 0..NODES {
            tasks.push(tokio::spawn(node(
                world.clone(),
                index,
                Rng(rng.next_u64()),
            )));
        }
        tasks.push(tokio::spawn(faults(world.clone(), Rng(rng.next_u64()))));
        for task in tasks {
            task.await.expect("a simulated node");
        }
        let oracle = std::mem::take(&mut *world.oracle.lock().unwrap());
        oracle
    })
}

/// The registry's outages and the nodes' partitions, from time to time: some shorter than
/// the TTL, some longer than the reach.
async fn faults(world: Arc<World>, mut rng: Rng) {
    let end = world.start + RUN;
    loop {
        tokio::time::sleep(rng.millis(1_000, 12_000)).await;
        if Instant::now() >= end {
            return;
        }
        let length = rng.millis(200, 9_000);
        let until = Instant::now() + length;
        if rng.chance(40) {
            *world.net.down_until.lock().unwrap() = Some(until);
            world.note(format!("etcd out of reach for {length:?}"));
        } else {
            let node = usize::try_from(rng.range(0, NODES as u64 - 1)).unwrap_or(0);
            world.net.cut_until.lock().unwrap()[node] = Some(until);
            world.note(format!("node {node} cut off for {length:?}"));
        }
    }
}

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("FLOE_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let count = std::env::var("FLOE_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3_000u64);
    (1..=count).collect()
}

#[test]
fn no_two_processes_issue_with_one_worker_id_at_once_in_any_seed() {
    let (mut samples, mut takeovers, mut continued) = (0, 0, 0);
    let seeds = seeds();
    for &seed in &seeds {
        let oracle = run_seed(seed, Plant::None);
        if let Some(breach) = oracle.breach() {
            panic!(
                "seed {seed} (replay: FLOE_SIM_SEED={seed}): {breach}\n{}",
                oracle.trace.join("\n")
            );
        }
        samples += oracle.samples;
        takeovers += oracle.takeovers;
        continued += oracle.continued;
    }
    eprintln!(
        "{} seeds: {samples} issue samples, {takeovers} takeovers, {continued} continued leases, no breach",
        seeds.len()
    );
    // The seeds exercise what the property is about.
    assert!(takeovers > 0 && continued > 0 && samples > 0);
}

#[test]
fn a_seed_replays_the_same_run() {
    let a = run_seed(7, Plant::None);
    let b = run_seed(7, Plant::None);
    assert_eq!(a.samples, b.samples);
    assert_eq!(a.trace, b.trace);
    assert!(a.trace.len() > 10, "{:?}", a.trace);
}

/// The seeds of a planted bug's hunt: the first that finds it ends the hunt.
fn hunt(plant: Plant) -> Option<u64> {
    (1..=5_000u64).find(|&seed| run_seed(seed, plant).breach().is_some())
}

#[test]
fn a_record_that_understates_its_reach_is_found() {
    let found = hunt(Plant::ShortReachInRecord);
    eprintln!("planted short reach: found by seed {found:?}");
    assert!(found.is_some());
}

#[test]
fn a_restart_that_continues_with_a_whole_window_is_found() {
    let found = hunt(Plant::ContinueWholeWindow);
    eprintln!("planted whole window on restart: found by seed {found:?}");
    assert!(found.is_some());
}
