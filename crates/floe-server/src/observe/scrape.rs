//! The Prometheus recorder, the metrics' descriptions, and what a scrape reads at its moment
//! ([`collect`]).

use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::Duration;

use floe_core::clock::Clock;
use metrics::{counter, gauge};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::rates::{totals, Issued};
use super::{generator_labels, layout_horizon, sno_end_ms};
use crate::ids::DEFAULT_GENERATOR;
use crate::App;

/// Latency buckets (seconds): 50 µs to 10 s.
const SECONDS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// Increment sizes (IDs): 1 to 1,000,000.
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

/// The standard `process_*` metrics (CPU seconds, resident and virtual memory, open and
/// maximum file descriptors, threads, start time), read from `/proc` at each scrape.
fn process() -> &'static metrics_process::Collector {
    static PROCESS: OnceLock<metrics_process::Collector> = OnceLock::new();
    PROCESS.get_or_init(metrics_process::Collector::default)
}

/// The process's Prometheus recorder, installed on first use (`None` when another recorder
/// was installed before: then `/metrics` says so).
pub fn recorder() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("floe_store_increment_size_ids".into()),
                        SIZES,
                    )
                })
                .ok()?;
            let handle = builder.install_recorder().ok()?;
            describe();
            process().describe();
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
        "Time from a request's head to the end of its answer's body (a stream: its last message and status), per listener, route template, method, HTTP status and (gRPC) grpc_code (CANCELLED: the client left before the end)."
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
    describe_counter!(
        "floe_weak_given_back_ids_total",
        "Unused WEAK IDs of keys let go from memory that the store took back (their next segment starts there)."
    );
    describe_histogram!(
        "floe_store_increment_size_ids",
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
        "floe_tls_certificate_expiry_seconds",
        Unit::Seconds,
        "When the listeners' TLS certificate stops being valid, in Unix seconds (alert on it minus time())."
    );
    describe_counter!(
        "floe_tls_handshake_failures_total",
        "TLS handshakes that failed, per listener and reason (error; eof: closed before the hello, as TCP probes do; timeout)."
    );
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
        "How long a generator may issue after the registry last confirmed its lease (the window W = H - H/10 of the reach H, ?reach=): ZooKeeper and etcd leases only."
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
    describe_gauge!(
        "floe_worker_ids",
        "Worker IDs in the generator's space (its layout's worker bits), as last surveyed (every minute): ZooKeeper and etcd leases only."
    );
    describe_gauge!(
        "floe_worker_ids_free",
        "Worker IDs of the generator's service that no record holds, as last surveyed: what a new node can take at once."
    );
    describe_gauge!(
        "floe_worker_ids_parked",
        "Worker IDs whose holder went silent without closing them (crashed or cut off): nobody takes them before the reach and margin have passed (see floe worker list)."
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
    describe_gauge!(
        "floe_build_info",
        "1, labelled with the version and the commit built (unknown: not known at build time)."
    );
    describe_gauge!(
        "floe_start_time_seconds",
        Unit::Seconds,
        "Unix time the server started."
    );
}

/// Sets what a scrape reads from the generators, leases and stores.
pub fn collect(app: &App) {
    let now_ms = app.clock.now_nanos() / 1_000_000;
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
            let labels = [
                ("kind", "snowflake".to_string()),
                ("generator", name.to_string()),
            ];
            let (left, end) = layout_horizon(&s.layout(), now_ms);
            gauge!("floe_layout_horizon_seconds", &labels).set(left);
            gauge!("floe_layout_end_timestamp_seconds", &labels).set(end);
            let stats = s.stats();
            counter!("floe_clock_rollback_waits_total", &labels).absolute(stats.backward_waits);
            counter!("floe_clock_rollback_refusals_total", &labels)
                .absolute(stats.backward_refusals);
            counter!("floe_sequence_exhausted_waits_total", &labels)
                .absolute(stats.exhausted_waits);
        }
        if let Some(sno) = g.sno() {
            let end = sno_end_ms();
            let labels = [("kind", "sno"), ("generator", DEFAULT_GENERATOR)];
            gauge!("floe_layout_horizon_seconds", &labels)
                .set(end as f64 / 1000.0 - now_ms as f64 / 1000.0);
            gauge!("floe_layout_end_timestamp_seconds", &labels).set(end as f64 / 1000.0);
            counter!("floe_sno_tick_tock_switches_total").absolute(u64::from(sno.drifts()));
        }
    }
    counter!("floe_clock_startup_refusals_total").absolute(floe_registry::lease::clock_refusals());
    for l in &app.telemetry.leases {
        let raised = l.fenced();
        let (kind, name) = generator_labels(&l.generator);
        let labels = [("kind", kind.to_string()), ("generator", name.to_string())];
        gauge!("floe_fence_raised", &labels).set(f64::from(u8::from(raised)));
        gauge!("floe_lease_held", &labels).set(f64::from(u8::from(!raised)));
        if let (Some(window), Some(left)) = (l.window, l.fence.remaining(&app.clock)) {
            gauge!("floe_lease_window_seconds", &labels).set(window.as_secs_f64());
            gauge!("floe_lease_remaining_seconds", &labels).set(left.as_secs_f64());
        }
        gauge!("floe_worker_id", &labels).set(f64::from(l.id));
        counter!("floe_fenced_periods_total", &labels).absolute(l.fence.periods());
        counter!("floe_lease_heartbeat_failures_total", &labels)
            .absolute(l.stats.heartbeat_failures.load(Ordering::Relaxed));
        let total = l.stats.ids_total.load(Ordering::Relaxed);
        if total > 0 {
            let free = l.stats.ids_free.load(Ordering::Relaxed);
            let parked = l.stats.ids_parked.load(Ordering::Relaxed);
            gauge!("floe_worker_ids", &labels).set(total as f64);
            gauge!("floe_worker_ids_free", &labels).set(free as f64);
            gauge!("floe_worker_ids_parked", &labels).set(parked as f64);
        }
    }
    process().collect();
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
