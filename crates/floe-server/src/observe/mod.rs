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
//! (`GET`, `POST`, `HEAD`, `OTHER`), the HTTP status (`status`) and, on the gRPC listener
//! only, the gRPC status (`grpc_code`). Keys and request text never become labels.
//!
//! **Prometheus conventions**: no label value holds a space (a generator is `kind` plus
//! `generator`: `kind="snowflake",generator="default"`; sno and LexicalUUID have one
//! generator, `default`); every histogram's name ends in its unit (`_seconds`, `_ids`); a
//! label holds one vocabulary (`status`: HTTP codes, `grpc_code`: gRPC's names); a request is
//! timed from its head to the end of its answer's body, so a stream is timed whole (a gRPC
//! call whose body is dropped before its trailers, a client that cancelled, is `CANCELLED`);
//! the standard `process_*` metrics come from `metrics-process`, read at each scrape.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `floe_ids_issued_total` | counter | `kind` |
//! | `floe_sequence_ids_issued_total` | counter | `store`, `mode` |
//! | `floe_request_duration_seconds` | histogram | `listener`, `route`, `method`, `status`, `grpc_code` (gRPC) |
//! | `floe_store_call_duration_seconds` | histogram | `store`, `call` |
//! | `floe_store_call_errors_total` | counter | `store`, `call`, `kind` |
//! | `floe_weak_segment_fetches_total`, `floe_weak_given_back_ids_total` | counter | `store` |
//! | `floe_store_increment_size_ids` | histogram (STRONG batches) | `store` |
//! | `floe_weak_buffered_ids`, `floe_weak_step`, `floe_keys_in_memory` | gauge | `store` |
//! | `floe_store_ready` | gauge | `store` |
//! | `floe_layout_horizon_seconds`, `floe_layout_end_timestamp_seconds` | gauge | `kind`, `generator` |
//! | `floe_clock_rollback_waits_total`, `floe_clock_rollback_refusals_total`, `floe_sequence_exhausted_waits_total` | counter | `kind`, `generator` (Snowflake) |
//! | `floe_sno_tick_tock_switches_total`, `floe_sno_overflow_stalls_total` | counter | |
//! | `floe_clock_startup_refusals_total` | counter | |
//! | `floe_fence_raised`, `floe_lease_held`, `floe_worker_id` | gauge | `kind`, `generator` |
//! | `floe_lease_window_seconds`, `floe_lease_remaining_seconds` (ZooKeeper, etcd) | gauge | `kind`, `generator` |
//! | `floe_fenced_periods_total`, `floe_lease_heartbeat_failures_total` | counter | `kind`, `generator` |
//! | `floe_tls_certificate_expiry_seconds` (TLS on) | gauge | `certificate` |
//! | `floe_tls_handshake_failures_total` (TLS on) | counter | `listener`, `reason` |
//! | `floe_build_info` | gauge | `version`, `commit` |
//! | `floe_start_time_seconds` | gauge | |
//! | `process_cpu_seconds_total` | counter (whole seconds) | |
//! | `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_virtual_memory_max_bytes` | gauge | |
//! | `process_open_fds`, `process_max_fds`, `process_threads`, `process_start_time_seconds` | gauge | |
//!
//! What they are for, and the alerts and dashboard built on them: docs/operate.md,
//! deploy/prometheus/floe-alerts.yml, deploy/grafana/floe.json.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use floe_core::clock::Clock;
use floe_core::fence::Fence;
use floe_core::kind::IdKind;
use floe_core::snowflake::Layout;
use floe_registry::lease::{Lease, LeaseStats};
use metrics::gauge;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::ServerClock;

pub(crate) mod log;
mod rates;
mod requests;
mod scrape;
pub mod status;

pub use rates::{totals, Issued, Rates};
pub use requests::{grpc_code_name, route_label, Listener, Observed, ObservedFuture, Timed};
pub use scrape::{collect, recorder, render, spawn_upkeep};

/// The commit `floe_build_info` names, set once by the binary ([`set_build_commit`]).
static BUILD_COMMIT: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Names the commit this server was built from in `floe_build_info` (the `floe` binary passes
/// what `floe --version` says; a commit set twice keeps the first). Call it before the server
/// starts; without it the label is `unknown`.
pub fn set_build_commit(commit: &'static str) {
    let _ = BUILD_COMMIT.set(commit);
}

/// The commit built from, or `unknown`.
fn build_commit() -> &'static str {
    BUILD_COMMIT
        .get()
        .copied()
        .filter(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("unknown")
}

/// The metrics' labels of a generator as leases and the status page name it: its ID kind and
/// its name, so that no label value holds a space (`snowflake default` is `kind="snowflake"`,
/// `generator="default"`; sno and LexicalUUID have one generator each, `default`).
pub fn generator_labels(generator: &str) -> (&str, &str) {
    generator
        .split_once(' ')
        .unwrap_or((generator, crate::ids::DEFAULT_GENERATOR))
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
    /// The clock the fence is read with (the generator's).
    pub clock: ServerClock,
}

impl LeaseView {
    /// The view of `lease`, held for `generator`.
    pub fn of(generator: &str, lease: &Arc<Lease>, clock: ServerClock) -> LeaseView {
        LeaseView {
            generator: generator.to_string(),
            id: lease.id,
            identity: lease.identity.to_string(),
            source: format!("{:?}", lease.source).to_lowercase(),
            fence: Arc::clone(&lease.fence),
            window: lease.terms.map(|t| t.window),
            stats: Arc::clone(&lease.stats),
            clock,
        }
    }

    /// Whether the generator may not issue now: its fence raised, or its window passed
    /// without a confirmation from the registry.
    pub fn fenced(&self) -> bool {
        !self.fence.admits_now(&self.clock)
    }

    /// Whether the registry said the ID is someone else's: fenced for good, until a restart
    /// leases another.
    pub fn lost(&self) -> bool {
        self.stats.lost.load(Ordering::Acquire)
    }

    /// What `/readyz` and `/healthz` say of a lease [`lost`](Self::lost).
    fn lost_reason(&self) -> String {
        format!(
            "{}: worker lease {} lost: the registry gave the ID to another process (fenced for good: a restart leases another)",
            self.generator, self.id
        )
    }

    /// The kind of IDs the generator issues (its name's first word: `snowflake default`).
    pub fn kind(&self) -> Option<IdKind> {
        let first = self.generator.split_whitespace().next()?;
        IdKind::parse(first).ok()
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
    pub fn new(metrics: bool, clock: ServerClock) -> Telemetry {
        let started_ms = clock.now_nanos() / 1_000_000;
        let handle = if metrics { recorder() } else { None };
        if handle.is_some() {
            gauge!(
                "floe_build_info",
                "version" => env!("CARGO_PKG_VERSION"),
                "commit" => build_commit()
            )
            .set(1.0);
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

    /// Why the server is not ready (empty: it is): the server stopping, a lease lost or
    /// unconfirmed (fenced), or a store not answering. With `kind`, only what stops IDs of that
    /// kind: the stopping and its leases (the generators' own refusals are
    /// [`App::not_ready`](crate::app::App::not_ready)'s).
    pub fn not_ready(&self, kind: Option<IdKind>) -> Vec<String> {
        let mut why = Vec::new();
        if self.stopping.load(Ordering::Relaxed) {
            why.push("the server is stopping".to_string());
        }
        for l in &self.leases {
            if kind.is_some_and(|k| l.kind() != Some(k)) {
                continue;
            }
            if l.lost() {
                why.push(l.lost_reason());
            } else if l.fenced() {
                why.push(format!(
                    "{}: worker lease {} not confirmed by the registry within its window (fenced until it confirms it)",
                    l.generator, l.id
                ));
            }
        }
        if kind.is_none() {
            for (name, probe) in &self.stores_ready {
                if !probe.answering() {
                    why.push(format!("store {name}: not answering"));
                }
            }
        }
        why
    }

    /// Why the process should be restarted (empty: it need not be): a worker lease lost for
    /// good, which only a restart replaces with another.
    pub fn unhealthy(&self) -> Vec<String> {
        self.leases
            .iter()
            .filter(|l| l.lost())
            .map(LeaseView::lost_reason)
            .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

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
