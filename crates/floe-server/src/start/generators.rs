//! The generators a server holds, each on what it leased: one [`lease_all`] for every worker
//! lease at once, then one [`lease_and_build`] per generator (Snowflake's, sno's, LexicalUUID's).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use floe_core::clock::Clock;
use floe_core::lexical::LexicalGenerator;
use floe_core::sno::{Partition, SnoGenerator, SnoSnapshot};
use floe_core::snowflake::SnowflakeConfig;
use floe_registry::horizon::{HorizonConfig, HorizonFile};
use floe_registry::lease::Lease;
use floe_registry::{IdSpace, Identity, RegistryError};

use super::lease::WorkerLease;
use super::{alive_at, horizon_text, Held, LastTime, StartError, Taken};
use crate::config::{Note, Plan, SnowflakePlan};
use crate::ids::{Generators, IdKind, Snowflake, DEFAULT_GENERATOR};
use crate::ServerClock;

/// The LexicalUUID worker IDs a registry leases (as many as sno partitions).
const LEXICAL_WORKERS: IdSpace = IdSpace::new(1 << 16);

/// A worker lease a generator needs: the generator (`snowflake default`, `sno`, `lexical`),
/// the slot of its durable time bound, its identity and its space.
struct Wanted {
    generator: String,
    slot: String,
    identity: Identity,
    space: IdSpace,
}

impl Wanted {
    /// What the generator's lease is, in a start-up error.
    fn what(&self) -> String {
        match self.generator.as_str() {
            "sno" => "sno: partition".to_string(),
            g => format!("{g}: worker ID"),
        }
    }
}

/// The worker leases `plan`'s generators need (identity: the registry's service, this host
/// and the configured port).
fn wanted(plan: &Plan) -> Vec<Wanted> {
    let registry = &plan.config.registry;
    let service = &registry.service;
    let host = plan.config.identity_host();
    let port = plan.config.identity_port();
    let identity = |svc: String| Identity::new(svc, host.clone(), port);
    let mut wanted = Vec::new();
    if plan.serves(IdKind::Snowflake) {
        for SnowflakePlan { name, layout, .. } in &plan.snowflakes {
            let (svc, slot) = if name == DEFAULT_GENERATOR {
                (service.clone(), "snowflake".to_string())
            } else {
                (
                    format!("{service}-snowflake-{name}"),
                    format!("snowflake-{name}"),
                )
            };
            wanted.push(Wanted {
                generator: format!("snowflake {name}"),
                slot,
                identity: identity(svc),
                space: IdSpace::snowflake(layout),
            });
        }
    }
    if plan.serves(IdKind::Sno) {
        wanted.push(Wanted {
            generator: "sno".into(),
            slot: "sno".into(),
            identity: identity(format!("{service}-sno")),
            space: IdSpace::SNO_PARTITIONS,
        });
    }
    if plan.serves(IdKind::Lexical) && plan.config.lexical.worker_id.is_none() {
        wanted.push(Wanted {
            generator: "lexical".into(),
            slot: "lexical".into(),
            identity: identity(format!("{service}-lexical")),
            space: LEXICAL_WORKERS,
        });
    }
    wanted
}

/// Every worker lease `plan` needs, at once: a takeover waits out its previous holder's window
/// (floe_registry::terms), and the waits then overlap instead of adding up. Each lease granted
/// waits in `taken` for its generator, so that a start failing at any later step releases it;
/// when one is refused, those granted are still there to be released.
async fn lease_all(plan: &Plan, taken: &mut Taken) -> Result<(), StartError> {
    let registry = &plan.config.registry;
    let state_dir = plan.state_dir.as_path();
    let clock = &taken.clock;
    let asked = wanted(plan).into_iter().map(|w| async move {
        let got = WorkerLease::try_acquire(
            registry,
            state_dir,
            w.identity.clone(),
            w.space,
            &w.slot,
            clock,
        )
        .await;
        (w, got)
    });
    let mut failed: Option<StartError> = None;
    for (w, got) in futures_util::future::join_all(asked).await {
        match got {
            Ok(lease) => taken.pending.push((w.generator, lease)),
            Err(e) if failed.is_none() => failed = Some(StartError::registry(&w.what(), &e)),
            Err(_) => {}
        }
    }
    failed.map_or(Ok(()), Err)
}

/// Takes `generator`'s lease from those waiting in `taken`.
fn take(taken: &mut Taken, generator: &str) -> Result<WorkerLease, StartError> {
    let at = taken.pending.iter().position(|(g, _)| g == generator);
    at.map(|i| taken.pending.swap_remove(i).1).ok_or_else(|| {
        let e = RegistryError::new(
            floe_registry::ErrorKind::Corrupt,
            format!("internal: no lease was asked for {generator}"),
        );
        StartError::registry(generator, &e)
    })
}

/// One generator on its lease: the lease's notes said as the generator's, the generator built
/// by `build` (with the line that describes it), the lease's heartbeats started with the
/// generator's last time (`last`), and the lease kept in `taken` for the stop. A generator
/// that cannot be built puts its lease back among those waiting, to be released.
fn lease_and_build<G>(
    taken: &mut Taken,
    notes: &mut Vec<Note>,
    described: &mut Vec<String>,
    generator: &str,
    mut lease: WorkerLease,
    build: impl FnOnce(&Lease) -> Result<(G, String), String>,
    last: impl FnOnce(&G) -> LastTime,
) -> Result<G, StartError> {
    notes.extend(
        lease
            .lease
            .notes
            .iter()
            .map(|n| Note::Info(format!("{generator}: {n}"))),
    );
    let (g, line) = match build(&lease.lease) {
        Ok(built) => built,
        Err(e) => {
            taken.pending.push((generator.to_string(), lease));
            return Err(StartError::from(format!("{generator}: {e}")));
        }
    };
    described.push(format!("{generator}: {line}"));
    let last = last(&g);
    taken.views.push(crate::observe::LeaseView::of(
        generator,
        &lease.lease,
        Arc::clone(&taken.clock),
    ));
    let beat = Arc::clone(&last);
    let clock = Arc::clone(&taken.clock);
    lease.start_heartbeats(move || alive_at(&clock, beat()));
    taken.leases.push(Held { held: lease, last });
    Ok(g)
}

/// The last time of an `Arc`'d generator, read by `time`.
fn last_of<G: Send + Sync + 'static>(g: &Arc<G>, time: fn(&G) -> u64) -> LastTime {
    let g = Arc::clone(g);
    Arc::new(move || time(&g))
}

/// A Snowflake generator on its lease.
fn snowflake(
    lease: &Lease,
    planned: &SnowflakePlan,
    clock: &ServerClock,
) -> Result<(Snowflake, String), String> {
    let layout = planned.layout;
    let horizon = lease
        .horizon()
        .ok_or("internal: a lease without a time bound")?;
    let g = SnowflakeConfig::new(layout)
        .node_id(u64::from(lease.id))
        .map_err(|e| e.to_string())?
        // The lease's last time, and a configured floor's time unit (`above`).
        .not_before_ms(lease.not_before_ms.max(planned.not_before_ms.unwrap_or(0)))
        .fence(lease.fence.clone())
        .horizon(horizon)
        .random_start(planned.random_start)
        .build(Arc::clone(clock))
        .map_err(|e| e.to_string())?;
    let line = format!(
        "worker {} ({}/{}/{}/{} bits, {} IDs/s at most, {})",
        lease.id,
        layout.timestamp_bits(),
        layout.datacenter_bits(),
        layout.worker_bits(),
        layout.sequence_bits(),
        layout.cap_per_second(),
        horizon_text(clock.now_nanos() / 1_000_000, layout.last_time_ms())
    );
    Ok((Arc::new(g), line))
}

/// A sno generator on a leased partition, starting after the lease's `not_before_ms`.
fn sno(
    lease: &Lease,
    config: &crate::config::SnoConfig,
    clock: &ServerClock,
) -> Result<(Arc<SnoGenerator<ServerClock>>, String), String> {
    let partition = u16::try_from(lease.id)
        .map(Partition::from_u16)
        .map_err(|_| {
            format!(
                "partition: a sno partition is 0 to 65535, the registry gave {}",
                lease.id
            )
        })?;
    let snapshot = SnoSnapshot::starting_after(
        partition,
        lease.not_before_ms,
        config.sequence_min,
        config.sequence_max,
    );
    // Overflow stalls are counted (at most once per 4 ms unit: the handler's own bound).
    let stalls = metrics::counter!("floe_sno_overflow_stalls_total");
    let mut g = SnoGenerator::from_snapshot(&snapshot, Arc::clone(clock))
        .map_err(|e| e.to_string())?
        .with_fence(lease.fence.clone())
        .with_overflow_handler(move |_| stalls.increment(1));
    if let Some(h) = lease.horizon() {
        g = g.with_horizon(h);
    }
    let line = format!(
        "partition {} ({})",
        lease.id,
        horizon_text(
            clock.now_nanos() / 1_000_000,
            Some(crate::observe::sno_end_ms())
        )
    );
    Ok((Arc::new(g), line))
}

/// The generators `plan` serves, each on its lease (or LexicalUUID on a configured worker ID
/// and a durable time bound of its own); what they hold goes into `taken`.
pub(super) async fn build(
    plan: &Plan,
    taken: &mut Taken,
    notes: &mut Vec<Note>,
    described: &mut Vec<String>,
) -> Result<Arc<Generators>, StartError> {
    let clock = Arc::clone(&taken.clock);
    lease_all(plan, taken).await?;
    let mut generators = Generators::new(Arc::clone(&clock));
    if plan.serves(IdKind::Snowflake) {
        let mut snowflakes: Vec<(String, Snowflake)> = Vec::new();
        for planned in &plan.snowflakes {
            let generator = format!("snowflake {}", planned.name);
            let lease = take(taken, &generator)?;
            let g = lease_and_build(
                taken,
                notes,
                described,
                &generator,
                lease,
                |l| snowflake(l, planned, &clock),
                |g| last_of(g, |g| g.last_timestamp_ms()),
            )?;
            snowflakes.push((planned.name.clone(), g));
        }
        generators = generators.with_snowflake(snowflakes);
    }
    if plan.serves(IdKind::Sno) {
        let lease = take(taken, "sno")?;
        let config = &plan.config.sno;
        let g = lease_and_build(
            taken,
            notes,
            described,
            "sno",
            lease,
            |l| sno(l, config, &clock),
            |g| last_of(g, SnoGenerator::last_time_ms),
        )?;
        generators = generators.with_sno(g, config.meta);
    }
    // LexicalUUID: read through the generators once they are built.
    let built: Arc<OnceLock<Arc<Generators>>> = Arc::default();
    if plan.serves(IdKind::Lexical) {
        let lexical = match plan.config.lexical.worker_id {
            Some(worker) => {
                lexical_configured(plan, worker, taken, notes, described, &built).await?
            }
            None => {
                let lease = take(taken, "lexical")?;
                let from = Arc::clone(&built);
                let (g, horizon, fence) = lease_and_build(
                    taken,
                    notes,
                    described,
                    "lexical",
                    lease,
                    |l| {
                        let horizon = l
                            .horizon()
                            .ok_or("internal: a lease without a time bound")?;
                        let g = LexicalGenerator::new(Arc::clone(&clock), i64::from(l.id))
                            .not_before_ms(l.not_before_ms)
                            .horizon(Arc::clone(&horizon))
                            .fence(Arc::clone(&l.fence));
                        Ok((
                            (g, horizon, Arc::clone(&l.fence)),
                            format!("worker {}", l.id),
                        ))
                    },
                    // The generator moves into `Generators`: the lease reads it there.
                    move |_| Arc::new(move || last_lexical(&from)),
                )?;
                (g, horizon, Some(fence))
            }
        };
        let (g, horizon, fence) = lexical;
        generators = generators.with_lexical(g, Some(horizon), fence);
    }
    if plan.serves(IdKind::Uuid7) {
        let last = |g: &Generators| g.uuid7().map(|g| g.last_time_ms());
        let (not_before, horizon) = bound_above(plan, "uuid7", taken, notes, &built, last).await?;
        generators = generators.with_uuid7(not_before, Some(horizon));
    }
    if plan.serves(IdKind::Ulid) {
        let last = |g: &Generators| g.ulid().map(|g| g.last_time_ms());
        let (not_before, horizon) = bound_above(plan, "ulid", taken, notes, &built, last).await?;
        generators = generators.with_ulid(not_before, Some(horizon));
    }
    let generators = Arc::new(generators);
    let _ = built.set(Arc::clone(&generators));
    Ok(generators)
}

/// The last time LexicalUUID issued, once the generators are built (0 before).
fn last_lexical(built: &OnceLock<Arc<Generators>>) -> u64 {
    built
        .get()
        .and_then(|g| g.lexical().map(LexicalGenerator::last_time_ms))
        .unwrap_or(0)
}

/// A LexicalUUID generator, its time bound and its fence (none on a configured worker ID).
type Lexical = (
    LexicalGenerator<ServerClock>,
    Arc<floe_core::horizon::Horizon>,
    Option<Arc<floe_core::fence::Fence>>,
);

/// The durable time bound of UUIDv7's or ULID's slot (`kind`) in the state directory, which
/// they carry on above rather than wait for (floe_registry::horizon::start_above): the
/// previous run's bound and the running one. `last` reads the generator's last time from the
/// generators once `built`, at stop.
async fn bound_above(
    plan: &Plan,
    kind: &'static str,
    taken: &mut Taken,
    notes: &mut Vec<Note>,
    built: &Arc<OnceLock<Arc<Generators>>>,
    last: fn(&Generators) -> Option<u64>,
) -> Result<(u64, Arc<floe_core::horizon::Horizon>), StartError> {
    let from = Arc::clone(built);
    let last: LastTime = Arc::new(move || from.get().and_then(|g| last(g)).unwrap_or(0));
    let dir = plan.state_dir.clone();
    let clock = Arc::clone(&taken.clock);
    let started = tokio::task::spawn_blocking(move || {
        let file = HorizonFile::open(&dir, kind)?;
        floe_registry::horizon::start_above(file, HorizonConfig::default(), clock)
    })
    .await
    .map_err(|e| format!("{kind}: time bound: {e}"))?
    .map_err(|e| StartError::registry(&format!("{kind}: time bound"), &e))?;
    notes.extend(
        started
            .notes
            .iter()
            .map(|n| Note::Info(format!("{kind}: {n}"))),
    );
    let horizon = started.horizon.horizon();
    taken.bounds.push(Held {
        held: started.horizon,
        last,
    });
    Ok((started.not_before_ms, horizon))
}

/// LexicalUUID on a configured worker ID (the operator's to keep unique, as `static:` is), with
/// a durable time bound of its own in the state directory.
async fn lexical_configured(
    plan: &Plan,
    worker: i64,
    taken: &mut Taken,
    notes: &mut Vec<Note>,
    described: &mut Vec<String>,
    built: &Arc<OnceLock<Arc<Generators>>>,
) -> Result<Lexical, StartError> {
    let slot = format!("lexical-{:016x}", worker as u64);
    let dir = plan.state_dir.clone();
    let start_clock = Arc::clone(&taken.clock);
    let horizon_config = HorizonConfig {
        max_start_wait: Duration::from_millis(plan.config.registry.max_clock_wait_ms),
        ..HorizonConfig::default()
    };
    let started = tokio::task::spawn_blocking(move || {
        let file = HorizonFile::open(&dir, &slot)?;
        floe_registry::horizon::start(file, &[], horizon_config, start_clock)
    })
    .await
    .map_err(|e| format!("lexical: time bound: {e}"))?
    .map_err(|e| StartError::registry("lexical: time bound", &e))?;
    notes.extend(
        started
            .notes
            .iter()
            .map(|n| Note::Info(format!("lexical: {n}"))),
    );
    let horizon = started.horizon.horizon();
    let from = Arc::clone(built);
    taken.bounds.push(Held {
        held: started.horizon,
        last: Arc::new(move || last_lexical(&from)),
    });
    let g = LexicalGenerator::new(Arc::clone(&taken.clock), worker)
        .not_before_ms(started.not_before_ms)
        .horizon(Arc::clone(&horizon));
    described.push(format!("lexical: worker {worker}"));
    Ok((g, horizon, None))
}
