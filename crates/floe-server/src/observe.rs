//! What an operator sees: Prometheus metrics (`/metrics`), readiness, and the figures the status
//! page shows.
//!
//! Metrics go through the `metrics` facade to `metrics-exporter-prometheus`'s recorder,
//! installed once per process ([`recorder`]). Hot paths hold their handles (registered once:
//! an ID issued is an atomic add); what a scrape can read from the generators, leases and
//! stores is read at scrape time ([`collect`]), so it costs the hot path nothing.
//!
//! **Label cardinality is bounded by the configuration, never by requests**: labels are ID
//! kinds, configured generator and store names, calls of the store contract, error kinds, and
//! for requests the listener, a route template from a fixed list (`/v1/ids/:kind`) (HTTP paths that match no
//! route are `unmatched`, gRPC methods this server does not serve `unknown`), the method
//! (`GET`, `POST`, `HEAD`, `OTHER`) and the status. Keys and request text never become labels.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `floe_ids_issued_total` | counter | `kind` |
//! | `floe_sequence_ids_issued_total` | counter | `store`, `mode` |
//! | `floe_request_duration_seconds` | histogram | `listener`, `route`, `method`, `status` |
//! | `floe_store_call_duration_seconds` | histogram | `store`, `call` |
//! | `floe_store_call_errors_total` | counter | `store`, `call`, `kind` |
//! | `floe_weak_segment_fetches_total` | counter | `store` |
//! | `floe_store_increment_size` | histogram (STRONG batches) | `store` |
//! | `floe_weak_buffered_ids`, `floe_weak_step`, `floe_keys_in_memory` | gauge | `store` |
//! | `floe_layout_horizon_seconds`, `floe_layout_end_timestamp_seconds` | gauge | `generator` |
//! | `floe_clock_rollback_waits_total`, `floe_clock_rollback_refusals_total`, `floe_sequence_exhausted_waits_total` | counter | `generator` |
//! | `floe_sno_tick_tock_switches_total`, `floe_sno_overflow_stalls_total` | counter | |
//! | `floe_clock_startup_refusals_total` | counter | |
//! | `floe_fence_raised`, `floe_lease_held`, `floe_worker_id` | gauge | `generator` |
//! | `floe_lease_window_seconds`, `floe_lease_remaining_seconds` (ZooKeeper, etcd) | gauge | `generator` |
//! | `floe_fenced_periods_total`, `floe_lease_heartbeat_failures_total` | counter | `generator` |
//! | `floe_store_ready` | gauge | `store` |
//! | `floe_build_info` | gauge | `version` |
//! | `floe_start_time_seconds` | gauge | |

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use floe_core::clock::{Clock, SystemClock};
use floe_core::fence::Fence;
use floe_core::snowflake::Layout;
use floe_registry::lease::{Lease, LeaseStats};
use hyper::{Request, Response};
use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::App;

/// Latency buckets (seconds): 50 µs to 10 s.
const SECONDS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// Increment sizes: 1 to 1,000,000.
const SIZES: &[f64] = &[
    1.0,
    2.0,
    5.0,
    10.0,
    20.0,
    50.0,
    100.0,
    200.0,
    500.0,
    1_000.0,
    10_000.0,
    100_000.0,
    1_000_000.0,
];

/// The process's Prometheus recorder, installed on first use (`None` when another recorder
/// was installed before: then `/metrics` says so).
pub fn recorder() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
                .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_size".into()), SIZES))
                .ok()?;
            let handle = builder.install_recorder().ok()?;
            describe();
            Some(handle)
        })
        .clone()
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!("floe_ids_issued_total", "IDs issued, per kind.");
    describe_counter!(
        "floe_sequence_ids_issued_total",
        "Sequence IDs issued, per store and mode (weak, strong)."
    );
    describe_histogram!(
        "floe_request_duration_seconds",
        Unit::Seconds,
        "Time from a request's head to its answer's head, per listener, route template, method and status (gRPC: the status of the answer's head; a stream's later status is not counted)."
    );
    describe_histogram!(
        "floe_store_call_duration_seconds",
        Unit::Seconds,
        "Store calls, per store and call."
    );
    describe_counter!(
        "floe_store_call_errors_total",
        "Store calls that failed, per store, call and error kind (Cancelled: cut by the store timeout)."
    );
    describe_counter!(
        "floe_weak_segment_fetches_total",
        "WEAK segments fetched from the store."
    );
    describe_histogram!(
        "floe_store_increment_size",
        "IDs reserved by one increment (STRONG: a group-committed batch)."
    );
    describe_gauge!(
        "floe_weak_buffered_ids",
        "IDs buffered in memory for WEAK keys, per store."
    );
    describe_gauge!(
        "floe_weak_step",
        "The largest current WEAK segment size among a store's keys."
    );
    describe_gauge!("floe_keys_in_memory", "Keys a store holds in memory.");
    describe_gauge!(
        "floe_layout_horizon_seconds",
        Unit::Seconds,
        "Seconds left before a generator's timestamp field runs out (negative: it has)."
    );
    describe_gauge!(
        "floe_layout_end_timestamp_seconds",
        Unit::Seconds,
        "Unix time at which a generator's timestamp field runs out."
    );
    describe_counter!(
        "floe_clock_rollback_waits_total",
        "Waits for the clock to come back after a small step back."
    );
    describe_counter!(
        "floe_clock_rollback_refusals_total",
        "IDs refused because the clock stepped back too far."
    );
    describe_counter!(
        "floe_sequence_exhausted_waits_total",
        "Waits for the next time unit after a unit's sequence was used up."
    );
    describe_counter!(
        "floe_sno_tick_tock_switches_total",
        "sno sequence switches (tick-tock) on clock regressions."
    );
    describe_counter!(
        "floe_sno_overflow_stalls_total",
        "4 ms time units in which sno calls stalled on a used-up sequence pool (waiting for the next unit)."
    );
    describe_counter!(
        "floe_clock_startup_refusals_total",
        "Start-ups refused in this process because the clock was behind the last recorded time."
    );
    describe_gauge!(
        "floe_fence_raised",
        "1 while a generator's lease is lost or unconfirmed past its window (fenced: it issues nothing)."
    );
    describe_gauge!("floe_lease_held", "1 while a generator holds its lease.");
    describe_gauge!(
        "floe_lease_window_seconds",
        Unit::Seconds,
        "How long a generator may issue after the registry confirmed its lease (2/3 of the session timeout or TTL): ZooKeeper and etcd leases only."
    );
    describe_gauge!(
        "floe_lease_remaining_seconds",
        Unit::Seconds,
        "Time left before a generator stops unless the registry confirms its lease again (0: fenced). Near 0 while serving means confirmations are late: ZooKeeper and etcd leases only."
    );
    describe_gauge!(
        "floe_worker_id",
        "The worker ID (or partition) a generator holds."
    );
    describe_counter!(
        "floe_fenced_periods_total",
        "Times a generator's fence was raised."
    );
    describe_counter!(
        "floe_lease_heartbeat_failures_total",
        "Heartbeats the registry did not take."
    );
    describe_gauge!(
        "floe_store_ready",
        "1 while a store answers its readiness probe (3 probes a second apart fail: 0)."
    );
    describe_gauge!("floe_build_info", "1, labelled with the version.");
    describe_gauge!(
        "floe_start_time_seconds",
        Unit::Seconds,
        "Unix time the server started."
    );
}

/// How many probes in a row must fail before a store counts as not answering: a probe that
/// waited for a busy pool's connection alone does not take a node out of service.
pub const PROBE_FAILURES: u32 = 3;

/// A store's readiness: answering until [`PROBE_FAILURES`] probes in a row failed, then again
/// at the first that succeeds.
#[derive(Debug, Default)]
pub struct StoreProbe {
    down: AtomicBool,
    failures: std::sync::atomic::AtomicU32,
}

impl StoreProbe {
    /// Records a probe; returns whether the store counts as answering.
    pub fn record(&self, answered: bool) -> bool {
        if answered {
            self.failures.store(0, Ordering::Relaxed);
            self.down.store(false, Ordering::Relaxed);
        } else {
            let n = self
                .failures
                .fetch_add(1, Ordering::Relaxed)
                .saturating_add(1);
            if n >= PROBE_FAILURES {
                self.down.store(true, Ordering::Relaxed);
            }
        }
        self.answering()
    }

    /// Whether the store counts as answering.
    pub fn answering(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }
}

/// A generator's worker lease, as the metrics and the status page show it.
#[derive(Debug, Clone)]
pub struct LeaseView {
    /// The generator (`snowflake default`, `snowflake NAME`, `sno`, `lexical`).
    pub generator: String,
    /// The ID leased.
    pub id: u32,
    /// The identity it is leased to.
    pub identity: String,
    /// Where it came from (`registry`, `cache`, ...).
    pub source: String,
    /// Closed while the lease is lost or unconfirmed past its window.
    pub fence: Arc<Fence>,
    /// The lease's local window, when its registry can give the ID away (ZooKeeper, etcd).
    pub window: Option<std::time::Duration>,
    /// The lease's counters (not the lease: the server alone holds it, to close it at its
    /// stop).
    pub stats: Arc<LeaseStats>,
}

impl LeaseView {
    /// The view of `lease`, held for `generator`.
    pub fn of(generator: &str, lease: &Arc<Lease>) -> LeaseView {
        LeaseView {
            generator: generator.to_string(),
            id: lease.id,
            identity: lease.identity.to_string(),
            source: format!("{:?}", lease.source).to_lowercase(),
            fence: Arc::clone(&lease.fence),
            window: lease.terms.map(|t| t.window),
            stats: Arc::clone(&lease.stats),
        }
    }

    /// Whether the generator may not issue now: its fence raised, or its window passed
    /// without a confirmation from the registry.
    pub fn fenced(&self) -> bool {
        !self.fence.admits_now(&SystemClock)
    }
}

/// What the server tells about itself beyond its routes.
#[derive(Debug)]
pub struct Telemetry {
    /// The Prometheus recorder's handle (`None`: metrics are off).
    pub handle: Option<PrometheusHandle>,
    /// The generators' leases.
    pub leases: Vec<LeaseView>,
    /// The registry's location, for the status page.
    pub registry: String,
    /// The listeners (`grpc 127.0.0.1:50051`), for the status page.
    pub listeners: Vec<String>,
    /// Unix ms the server started at.
    pub started_ms: u64,
    /// Whether each store answers its probes, by store name.
    pub stores_ready: Vec<(String, StoreProbe)>,
    /// Set when the server begins to stop: no longer ready.
    pub stopping: AtomicBool,
    /// Held while gRPC health is written (see `set_health` in the crate root).
    pub health_updates: tokio::sync::Mutex<()>,
    /// Issue rates.
    pub rates: Rates,
}

impl Telemetry {
    /// With metrics when `metrics` is set (installing the process's recorder).
    pub fn new(metrics: bool) -> Telemetry {
        let started_ms = SystemClock.now_nanos() / 1_000_000;
        let handle = if metrics { recorder() } else { None };
        if handle.is_some() {
            gauge!("floe_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
            gauge!("floe_start_time_seconds").set(started_ms as f64 / 1000.0);
        }
        Telemetry {
            handle,
            leases: Vec::new(),
            registry: String::new(),
            listeners: Vec::new(),
            started_ms,
            stores_ready: Vec::new(),
            stopping: AtomicBool::new(false),
            health_updates: tokio::sync::Mutex::new(()),
            rates: Rates::default(),
        }
    }

    /// Why the server is not ready (empty: it is): a lease lost (fenced), a store not
    /// answering, or the server stopping.
    pub fn not_ready(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.stopping.load(Ordering::Relaxed) {
            why.push("the server is stopping".to_string());
        }
        for l in &self.leases {
            if l.fenced() {
                why.push(format!(
                    "{}: worker lease {} lost or not confirmed by the registry within its window (fenced)",
                    l.generator, l.id
                ));
            }
        }
        for (name, probe) in &self.stores_ready {
            if !probe.answering() {
                why.push(format!("store {name}: not answering"));
            }
        }
        why
    }

    /// Whether store `name` answered its last probe (unknown stores: yes).
    pub fn store_ready(&self, name: &str) -> bool {
        self.stores_ready
            .iter()
            .find(|(n, _)| n == name)
            .is_none_or(|(_, r)| r.answering())
    }
}

/// Seconds from now until a layout's timestamp field runs out, and the Unix time it does.
pub fn layout_horizon(layout: &Layout, now_ms: u64) -> (f64, f64) {
    let end_ms = layout.last_time_ms().unwrap_or(u64::MAX);
    let left = end_ms as f64 / 1000.0 - now_ms as f64 / 1000.0;
    (left, end_ms as f64 / 1000.0)
}

/// sno's timestamp field ends at 2079-09-07T15:47:35.551Z.
pub fn sno_end_ms() -> u64 {
    floe_core::sno::EPOCH_MS
        .saturating_add(floe_core::sno::MAX_TIMESTAMP.saturating_mul(floe_core::sno::TIME_UNIT_MS))
}

/// Sets what a scrape reads from the generators, leases and stores.
pub fn collect(app: &App) {
    let now_ms = SystemClock.now_nanos() / 1_000_000;
    for (labels, total) in totals(app) {
        match labels {
            Issued::Kind(kind) => counter!("floe_ids_issued_total", "kind" => kind).absolute(total),
            Issued::Store(store, mode) => counter!(
                "floe_sequence_ids_issued_total",
                "store" => store,
                "mode" => mode
            )
            .absolute(total),
        }
    }
    if let Some(g) = app.ids.as_deref() {
        for (name, s) in g.snowflakes() {
            let generator = format!("snowflake {name}");
            let (left, end) = layout_horizon(&s.layout(), now_ms);
            gauge!("floe_layout_horizon_seconds", "generator" => generator.clone()).set(left);
            gauge!("floe_layout_end_timestamp_seconds", "generator" => generator.clone()).set(end);
            let stats = s.stats();
            counter!("floe_clock_rollback_waits_total", "generator" => generator.clone())
                .absolute(stats.backward_waits);
            counter!("floe_clock_rollback_refusals_total", "generator" => generator.clone())
                .absolute(stats.backward_refusals);
            counter!("floe_sequence_exhausted_waits_total", "generator" => generator)
                .absolute(stats.exhausted_waits);
        }
        if let Some(sno) = g.sno() {
            let end = sno_end_ms();
            gauge!("floe_layout_horizon_seconds", "generator" => "sno")
                .set(end as f64 / 1000.0 - now_ms as f64 / 1000.0);
            gauge!("floe_layout_end_timestamp_seconds", "generator" => "sno")
                .set(end as f64 / 1000.0);
            counter!("floe_sno_tick_tock_switches_total").absolute(u64::from(sno.drifts()));
        }
    }
    counter!("floe_clock_startup_refusals_total").absolute(floe_registry::lease::clock_refusals());
    for l in &app.telemetry.leases {
        let raised = l.fenced();
        let g = l.generator.clone();
        gauge!("floe_fence_raised", "generator" => g.clone()).set(f64::from(u8::from(raised)));
        gauge!("floe_lease_held", "generator" => g.clone()).set(f64::from(u8::from(!raised)));
        if let (Some(window), Some(left)) = (l.window, l.fence.remaining(&SystemClock)) {
            gauge!("floe_lease_window_seconds", "generator" => g.clone()).set(window.as_secs_f64());
            gauge!("floe_lease_remaining_seconds", "generator" => g.clone())
                .set(left.as_secs_f64());
        }
        gauge!("floe_worker_id", "generator" => g.clone()).set(f64::from(l.id));
        counter!("floe_fenced_periods_total", "generator" => g.clone()).absolute(l.fence.periods());
        counter!("floe_lease_heartbeat_failures_total", "generator" => g)
            .absolute(l.stats.heartbeat_failures.load(Ordering::Relaxed));
    }
    for h in app.sequencer.stores() {
        let name = h.name().to_string();
        let totals = h.weak_totals();
        gauge!("floe_weak_buffered_ids", "store" => name.clone()).set(totals.buffered as f64);
        gauge!("floe_weak_step", "store" => name.clone()).set(f64::from(totals.max_step));
        gauge!("floe_keys_in_memory", "store" => name.clone()).set(h.keys_in_memory() as f64);
        let ready = app.telemetry.store_ready(&name);
        gauge!("floe_store_ready", "store" => name).set(f64::from(u8::from(ready)));
    }
}

/// What a count of issued IDs is of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Issued {
    /// IDs of a kind.
    Kind(&'static str),
    /// Sequence IDs of a store, WEAK or STRONG.
    Store(String, &'static str),
}

impl std::fmt::Display for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Issued::Kind(kind) => f.write_str(kind),
            Issued::Store(store, mode) => write!(f, "{store} {mode}"),
        }
    }
}

/// IDs issued so far: per kind served, and per store and mode.
pub fn totals(app: &App) -> Vec<(Issued, u64)> {
    let mut out = Vec::new();
    if let Some(g) = app.ids.as_deref() {
        for kind in crate::ids::IdKind::ALL {
            if g.serves(kind) {
                out.push((Issued::Kind(kind.name()), g.issued_total(kind)));
            }
        }
    }
    for h in app.sequencer.stores() {
        for (mode, name) in [
            (floe_sequencer::Mode::Weak, "weak"),
            (floe_sequencer::Mode::Strong, "strong"),
        ] {
            out.push((
                Issued::Store(h.name().to_string(), name),
                h.issued_total(mode),
            ));
        }
    }
    out
}

/// Totals at one moment.
type Sampled = (Instant, Vec<(Issued, u64)>);

/// Totals sampled once a second, for the status page's rates.
#[derive(Debug, Default)]
pub struct Rates {
    samples: std::sync::Mutex<std::collections::VecDeque<Sampled>>,
}

/// How far back a rate looks.
const RATE_WINDOW: Duration = Duration::from_secs(10);

impl Rates {
    /// Records the totals now.
    pub fn sample(&self, totals: Vec<(Issued, u64)>) {
        let now = Instant::now();
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        samples.push_back((now, totals));
        while samples
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RATE_WINDOW + Duration::from_secs(1))
        {
            samples.pop_front();
        }
    }

    /// IDs per second over the last ten seconds (as far back as there are samples).
    pub fn per_second(&self) -> Vec<(Issued, f64)> {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let (Some((t0, first)), Some((t1, last))) = (samples.front(), samples.back()) else {
            return Vec::new();
        };
        let secs = t1.duration_since(*t0).as_secs_f64();
        last.iter()
            .map(|(what, total)| {
                let before = first
                    .iter()
                    .find(|(w, _)| w == what)
                    .map_or(*total, |(_, n)| *n);
                let rate = if secs > 0.0 {
                    total.saturating_sub(before) as f64 / secs
                } else {
                    0.0
                };
                (what.clone(), rate)
            })
            .collect()
    }
}

/// The Prometheus text of every metric, read at this moment.
pub fn render(app: &App) -> Option<String> {
    let handle = app.telemetry.handle.as_ref()?;
    collect(app);
    Some(handle.render())
}

/// Runs the recorder's upkeep (histogram samples folded into their buckets) every 5 s while
/// the server runs, so that memory stays bounded when nobody scrapes.
pub fn spawn_upkeep(handle: PrometheusHandle) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            handle.run_upkeep();
        }
    })
}

/// Which listener a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    /// The gRPC port.
    Grpc,
    /// The HTTP port.
    Http,
}

/// The gRPC methods served, as route labels (the last: a method not served).
const GRPC_ROUTES: [&str; 10] = [
    "/spec.proto.runtime.v1.Runtime/GetNextId",
    "/floe.v1.Floe/NextIds",
    "/floe.v1.Floe/StreamIds",
    "/floe.v1.Floe/NextSequence",
    "/floe.v1.Floe/StreamSequence",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    "unknown",
];

/// HTTP route templates (the last: a path that matches none).
const HTTP_ROUTES: [&str; 14] = [
    "/",
    "/healthz",
    "/readyz",
    "/metrics",
    "/cache",
    "/decodeSnowflakeId",
    "/v1/status",
    "/v1/stores",
    "/v1/ids/:kind",
    "/v1/sequencer/:store/:key",
    "/v1/sequencer/:store/:key/segment",
    "/api/segment/get/:key",
    "/api/snowflake/get/:key",
    "unmatched",
];

/// The index in [`HTTP_ROUTES`] of an HTTP path's template (no allocation).
fn http_route_index(path: &str) -> usize {
    let mut parts = [""; 5];
    let mut n = 0;
    for part in path.trim_start_matches('/').split('/') {
        if n == parts.len() {
            return HTTP_ROUTES.len() - 1;
        }
        parts[n] = part;
        n += 1;
    }
    let route = match &parts[..n] {
        [""] => "/",
        ["healthz"] => "/healthz",
        ["readyz"] => "/readyz",
        ["metrics"] => "/metrics",
        ["cache"] => "/cache",
        ["decodeSnowflakeId"] => "/decodeSnowflakeId",
        ["v1", "status"] => "/v1/status",
        ["v1", "stores"] => "/v1/stores",
        ["v1", "ids", _] => "/v1/ids/:kind",
        ["v1", "sequencer", _, _] => "/v1/sequencer/:store/:key",
        ["v1", "sequencer", _, _, "segment"] => "/v1/sequencer/:store/:key/segment",
        ["api", "segment", "get", _] => "/api/segment/get/:key",
        ["api", "snowflake", "get", _] => "/api/snowflake/get/:key",
        _ => "unmatched",
    };
    HTTP_ROUTES
        .iter()
        .position(|r| *r == route)
        .unwrap_or(HTTP_ROUTES.len() - 1)
}

/// The route template of an HTTP path (from the fixed list of routes; `unmatched` otherwise).
pub fn http_route(path: &str) -> &'static str {
    HTTP_ROUTES[http_route_index(path)]
}

/// The index in [`GRPC_ROUTES`] of a gRPC path (the last: `unknown`).
fn grpc_route_index(path: &str) -> usize {
    let served = &GRPC_ROUTES[..GRPC_ROUTES.len() - 1];
    served
        .iter()
        .position(|m| *m == path)
        .unwrap_or(served.len())
}

/// The route label of a path on either listener (an HTTP route template, a gRPC method this
/// server serves, or `unmatched`): never the request's own text.
pub fn route_label(path: &str) -> &'static str {
    match GRPC_ROUTES[grpc_route_index(path)] {
        "unknown" => http_route(path),
        method => method,
    }
}

/// The methods, as labels.
const METHODS: [&str; 4] = ["GET", "POST", "HEAD", "OTHER"];

fn method_index(method: &hyper::Method) -> usize {
    match *method {
        hyper::Method::GET => 0,
        hyper::Method::POST => 1,
        hyper::Method::HEAD => 2,
        _ => 3,
    }
}

/// Status labels: "100" to "999".
static HTTP_STATUS: LazyLock<Vec<String>> =
    LazyLock::new(|| (0..1000).map(|c: u16| c.to_string()).collect());

/// gRPC's name of a status code (`UNAVAILABLE`), as labels and messages write it.
pub fn grpc_code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

fn status_label<B>(listener: Listener, response: &Response<B>) -> &'static str {
    match listener {
        Listener::Http => HTTP_STATUS
            .get(usize::from(response.status().as_u16()))
            .map_or("other", String::as_str),
        Listener::Grpc => match response.headers().get("grpc-status") {
            Some(v) => grpc_code_name(tonic::Code::from_bytes(v.as_bytes())),
            None if response.status().is_success() => "OK",
            None => HTTP_STATUS
                .get(usize::from(response.status().as_u16()))
                .map_or("other", String::as_str),
        },
    }
}

/// A service whose requests are measured (`floe_request_duration_seconds`) and logged at debug
/// level.
#[derive(Clone, Debug)]
pub struct Observed<S> {
    inner: S,
    listener: Listener,
    /// Record `floe_request_duration_seconds` (metrics on).
    metrics: bool,
}

impl<S> Observed<S> {
    /// `inner`, measured as requests of `listener` when `metrics` is set.
    pub fn new(inner: S, listener: Listener, metrics: bool) -> Observed<S> {
        Observed {
            inner,
            listener,
            metrics,
        }
    }
}

/// The histograms of successful answers per route and method (`route * 4 + method`),
/// registered on first use in the process's recorder: a request records into one without a
/// registry lookup (every other status goes through the registry).
static HTTP_OK: [OnceLock<metrics::Histogram>; HTTP_ROUTES.len() * METHODS.len()] =
    [const { OnceLock::new() }; HTTP_ROUTES.len() * METHODS.len()];
static GRPC_OK: [OnceLock<metrics::Histogram>; GRPC_ROUTES.len() * METHODS.len()] =
    [const { OnceLock::new() }; GRPC_ROUTES.len() * METHODS.len()];

impl Listener {
    fn routes(self) -> &'static [&'static str] {
        match self {
            Listener::Grpc => &GRPC_ROUTES,
            Listener::Http => &HTTP_ROUTES,
        }
    }

    fn route_index(self, path: &str) -> usize {
        match self {
            Listener::Grpc => grpc_route_index(path),
            Listener::Http => http_route_index(path),
        }
    }

    fn ok_histograms(self) -> &'static [OnceLock<metrics::Histogram>] {
        match self {
            Listener::Grpc => &GRPC_OK,
            Listener::Http => &HTTP_OK,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Listener::Grpc => "grpc",
            Listener::Http => "http",
        }
    }
}

impl<S, B, ReqB> tower::Service<Request<ReqB>> for Observed<S>
where
    S: tower::Service<Request<ReqB>, Response = Response<B>, Error = Infallible>,
{
    type Response = Response<B>;
    type Error = Infallible;
    type Future = ObservedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        let slot = self.listener.route_index(request.uri().path()) * METHODS.len()
            + method_index(request.method());
        // Neither metrics nor debug lines: no clock read either.
        let timed = self.metrics || tracing::enabled!(tracing::Level::DEBUG);
        ObservedFuture {
            inner: self.inner.call(request),
            started: timed.then(Instant::now),
            metrics: self.metrics,
            slot,
            listener: self.listener,
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of an [`Observed`] request.
    pub struct ObservedFuture<F> {
        #[pin]
        inner: F,
        started: Option<Instant>,
        metrics: bool,
        // The route (`slot / 4`, in the listener's table) and method (`slot % 4`).
        slot: usize,
        listener: Listener,
    }
}

impl<F, B> Future for ObservedFuture<F>
where
    F: Future<Output = Result<Response<B>, Infallible>>,
{
    type Output = Result<Response<B>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = std::task::ready!(this.inner.poll(cx));
        let Some(started) = *this.started else {
            return Poll::Ready(result);
        };
        let status = match &result {
            Ok(response) => status_label(*this.listener, response),
            Err(never) => match *never {},
        };
        let seconds = started.elapsed().as_secs_f64();
        let listener = this.listener.label();
        let route = this.listener.routes()[*this.slot / METHODS.len()];
        let method = METHODS[*this.slot % METHODS.len()];
        if *this.metrics {
            let register = || {
                histogram!(
                    "floe_request_duration_seconds",
                    "listener" => listener,
                    "route" => route,
                    "method" => method,
                    "status" => status
                )
            };
            match this.listener.ok_histograms().get(*this.slot) {
                Some(cached) if status == "200" || status == "OK" => {
                    cached.get_or_init(register).record(seconds);
                }
                _ => register().record(seconds),
            }
        }
        tracing::debug!(
            listener,
            route,
            method,
            status,
            micros = (seconds * 1e6) as u64,
            "request"
        );
        Poll::Ready(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_routes_are_templates_from_a_fixed_list() {
        assert_eq!(http_route("/"), "/");
        assert_eq!(http_route("/v1/ids/snowflake"), "/v1/ids/:kind");
        assert_eq!(
            http_route("/v1/sequencer/default/orders"),
            "/v1/sequencer/:store/:key"
        );
        assert_eq!(
            http_route("/api/segment/get/anything"),
            "/api/segment/get/:key"
        );
        assert_eq!(
            http_route("/api/snowflake/get/k"),
            "/api/snowflake/get/:key"
        );
        // Keys never become labels: whatever is asked, the label set stays fixed.
        assert_eq!(http_route("/v1/sequencer/a/b/c"), "unmatched");
        assert_eq!(http_route("/no/such/route"), "unmatched");
        let grpc = |path| GRPC_ROUTES[grpc_route_index(path)];
        assert_eq!(grpc("/floe.v1.Floe/NextIds"), "/floe.v1.Floe/NextIds");
        assert_eq!(grpc("/evil.Service/Anything"), "unknown");
        assert_eq!(route_label("/evil.Service/Anything"), "unmatched");
    }

    #[test]
    fn a_layout_horizon_is_counted_from_its_epoch_and_field_width() {
        // uid-generator's default: 28 bits of seconds from 2016-05-20 ran out on 2024-09-...:
        // here a 41-bit ms field from 2023-01-01 (Leaf's), about 69.7 years.
        let layout = Layout::preset("leaf").unwrap();
        let epoch_ms = layout.epoch_ms();
        let (left, end) = layout_horizon(&layout, epoch_ms);
        let years = left / (365.25 * 86_400.0);
        assert!((69.0..70.0).contains(&years), "{years}");
        assert!((end - (epoch_ms as f64 / 1000.0 + left)).abs() < 1.0);
        // A layout already past its end is negative.
        let (left, _) = layout_horizon(&layout, layout.last_time_ms().unwrap() + 5_000);
        assert!(left < 0.0);
    }
}
