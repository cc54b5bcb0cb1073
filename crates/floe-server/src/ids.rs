//! A server's ID generators, one of each kind, issuing single IDs and batches without blocking
//! the async executor: a generator that must wait (a used-up time unit, a clock a little behind,
//! a durable time bound not yet moved) is polled again after an async sleep.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{ErrorKind, ServerError};
use floe_core::clock::Clock;
use floe_core::fence::Fence;
use floe_core::horizon::Horizon;
use floe_core::kind::IdText;
use floe_core::lexical::{LexicalError, LexicalGenerator, LexicalUuid};
use floe_core::sno::{SnoError, SnoGenerator, SnoId};
use floe_core::snowflake::{Layout, SnowflakeError, SnowflakeGenerator};
use floe_core::ulid::{UlidError, UlidGenerator};
use floe_core::uuid7::{Uuid, Uuid7Generator};
use floe_core::Poll;

use crate::{echo, ServerClock, MAX_ECHO};

pub use floe_core::kind::IdKind;

/// The kind a request names (a route's `{kind}`).
///
/// # Errors
/// `InvalidArgument` listing the kinds.
pub fn kind_named(name: &str) -> Result<IdKind, ServerError> {
    IdKind::parse(name).map_err(|_| {
        ServerError::new(
            ErrorKind::InvalidArgument,
            format!(
                "kind: expected {}, found \"{}\"",
                floe_core::kind::UnknownKind::expected(),
                echo(name, MAX_ECHO)
            ),
        )
    })
}

/// IDs issued by one request, in the order issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ids {
    /// Snowflake IDs.
    Snowflake(Vec<u64>),
    /// sno IDs.
    Sno(Vec<SnoId>),
    /// LexicalUUIDs.
    Lexical(Vec<LexicalUuid>),
    /// UUIDv7s.
    Uuid7(Vec<Uuid>),
    /// ULIDs.
    Ulid(Vec<ulid::Ulid>),
}

impl Ids {
    /// How many.
    pub fn len(&self) -> usize {
        match self {
            Ids::Snowflake(v) => v.len(),
            Ids::Sno(v) => v.len(),
            Ids::Lexical(v) => v.len(),
            Ids::Uuid7(v) => v.len(),
            Ids::Ulid(v) => v.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the text of ID `i` (its kind's usual text: decimal for Snowflake) to `out`.
    ///
    /// # Panics
    /// When `i` is out of range.
    pub fn write_text(&self, i: usize, out: &mut String) {
        match self {
            Ids::Snowflake(v) => v[i].write_text(out),
            Ids::Sno(v) => v[i].write_text(out),
            Ids::Lexical(v) => v[i].write_text(out),
            Ids::Uuid7(v) => v[i].write_text(out),
            Ids::Ulid(v) => v[i].write_text(out),
        }
    }

    /// The text of every ID.
    pub fn texts(&self) -> Vec<String> {
        (0..self.len())
            .map(|i| {
                let mut s = String::new();
                self.write_text(i, &mut s);
                s
            })
            .collect()
    }

    /// The big-endian bytes of every ID (8 for Snowflake, 10 for sno, 16 for the others).
    pub fn bytes(&self) -> Vec<Vec<u8>> {
        fn all<T: IdText>(v: &[T]) -> Vec<Vec<u8>> {
            v.iter().map(IdText::to_be_vec).collect()
        }
        match self {
            Ids::Snowflake(v) => all(v),
            Ids::Sno(v) => all(v),
            Ids::Lexical(v) => all(v),
            Ids::Uuid7(v) => all(v),
            Ids::Ulid(v) => all(v),
        }
    }
}

/// What a request may ask of a kind besides the count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdOptions {
    /// Snowflake: the configured generator by name (`layout`), the default one when `None`.
    pub generator: Option<String>,
    /// sno: the metabyte (the configured default when `None`).
    pub meta: Option<u8>,
}

/// A named Snowflake generator.
pub type Snowflake = Arc<SnowflakeGenerator<ServerClock>>;

/// The generators of a server: those of the kinds it serves (`ids.kinds`), all on one clock.
#[derive(Debug)]
pub struct Generators {
    /// The clock every generator reads.
    clock: ServerClock,
    /// IDs issued, per kind (in the order of [`IdKind::ALL`]).
    issued: [AtomicU64; 5],
    /// The default Snowflake generator first, then the named ones (none: not served).
    snowflake: Vec<(String, Snowflake)>,
    sno: Option<(Arc<SnoGenerator<ServerClock>>, u8)>,
    lexical: Option<Lexical>,
    uuid7: Option<Uuid7Generator<ServerClock>>,
    ulid: Option<UlidGenerator<ServerClock>>,
    /// The durable time bounds of UUIDv7 and ULID, for readiness (the other generators keep
    /// theirs).
    bounds: Vec<(IdKind, Arc<Horizon>)>,
}

/// A LexicalUUID generator, its durable time bound and its lease's fence, if it has them.
type Lexical = (
    LexicalGenerator<ServerClock>,
    Option<Arc<Horizon>>,
    Option<Arc<Fence>>,
);

/// The name of the default Snowflake generator.
pub const DEFAULT_GENERATOR: &str = "default";

/// The error of a kind this server does not serve.
pub(crate) fn not_served(kind: IdKind) -> ServerError {
    ServerError::config(format!(
        "{} IDs are not served here (the server's ids.kinds leaves them out)",
        kind.name()
    ))
}

impl Generators {
    /// No generators, reading `clock`: add those of the kinds served with the `with_*`
    /// methods (the server's assembly leases their numbers), each built on the same clock.
    pub fn new(clock: ServerClock) -> Generators {
        Generators {
            clock,
            issued: Default::default(),
            snowflake: Vec::new(),
            sno: None,
            lexical: None,
            uuid7: None,
            ulid: None,
            bounds: Vec::new(),
        }
    }

    /// Serves Snowflake IDs: the default generator first, then the named ones.
    pub fn with_snowflake(mut self, generators: Vec<(String, Snowflake)>) -> Self {
        self.snowflake = generators;
        self
    }

    /// Serves sno IDs, with `meta` for requests that name no metabyte.
    pub fn with_sno(mut self, generator: Arc<SnoGenerator<ServerClock>>, meta: u8) -> Self {
        self.sno = Some((generator, meta));
        self
    }

    /// Serves LexicalUUIDs; `horizon` is the generator's durable time bound, `fence` its
    /// worker lease's fence (raised: no LexicalUUID is issued), if it has them.
    pub fn with_lexical(
        mut self,
        generator: LexicalGenerator<ServerClock>,
        horizon: Option<Arc<Horizon>>,
        fence: Option<Arc<Fence>>,
    ) -> Self {
        self.lexical = Some((generator, horizon, fence));
        self
    }

    /// Serves UUIDv7s above `not_before_ms` and within `horizon`, the durable time bound of
    /// the state directory's `uuid7` slot, if given.
    pub fn with_uuid7(mut self, not_before_ms: u64, horizon: Option<Arc<Horizon>>) -> Self {
        let mut g = Uuid7Generator::new(Arc::clone(&self.clock)).not_before_ms(not_before_ms);
        if let Some(h) = horizon {
            self.bounds.push((IdKind::Uuid7, Arc::clone(&h)));
            g = g.horizon(h);
        }
        self.uuid7 = Some(g);
        self
    }

    /// Serves ULIDs, as [`with_uuid7`](Self::with_uuid7) (the `ulid` slot).
    pub fn with_ulid(mut self, not_before_ms: u64, horizon: Option<Arc<Horizon>>) -> Self {
        let mut g = UlidGenerator::new(Arc::clone(&self.clock)).not_before_ms(not_before_ms);
        if let Some(h) = horizon {
            self.bounds.push((IdKind::Ulid, Arc::clone(&h)));
            g = g.horizon(h);
        }
        self.ulid = Some(g);
        self
    }

    /// The UUIDv7 generator, if served.
    pub fn uuid7(&self) -> Option<&Uuid7Generator<ServerClock>> {
        self.uuid7.as_ref()
    }

    /// The ULID generator, if served.
    pub fn ulid(&self) -> Option<&UlidGenerator<ServerClock>> {
        self.ulid.as_ref()
    }

    /// The Snowflake generator of a name (`None`: the default one).
    ///
    /// # Errors
    /// `InvalidArgument` naming the generators there are; `Config` when Snowflake IDs are not
    /// served.
    pub fn snowflake(&self, name: Option<&str>) -> Result<&Snowflake, ServerError> {
        if self.snowflake.is_empty() {
            return Err(not_served(IdKind::Snowflake));
        }
        let name = name.unwrap_or(DEFAULT_GENERATOR);
        self.snowflake
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, g)| g)
            .ok_or_else(|| {
                let names: Vec<&str> = self.snowflake.iter().map(|(n, _)| n.as_str()).collect();
                ServerError::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "layout: no Snowflake generator is named \"{}\": expected one of {}",
                        echo(name, MAX_ECHO),
                        names.join(", ")
                    ),
                )
            })
    }

    /// The clock every generator reads.
    pub fn clock(&self) -> &ServerClock {
        &self.clock
    }

    /// Every Snowflake generator, the default one first.
    pub fn snowflakes(&self) -> impl Iterator<Item = (&str, &Snowflake)> {
        self.snowflake.iter().map(|(n, g)| (n.as_str(), g))
    }

    /// The LexicalUUID generator's durable time bound (Unix ms), if it has one.
    pub fn lexical_bound_ms(&self) -> Option<u64> {
        self.lexical
            .as_ref()
            .and_then(|(_, h, _)| h.as_ref())
            .map(|h| h.bound_ms())
    }

    /// Why IDs of `kind` would be refused now, one line per generator that would (empty: none
    /// would, or the kind is not served): a clock stepped back further than the generator waits
    /// for, a durable time bound that stopped moving, a clock outside the layout's range.
    /// Readiness asks: nothing is issued. A lease fenced is the lease's own line
    /// ([`crate::observe::Telemetry::not_ready`]), not repeated here.
    pub fn refusals(&self, kind: IdKind) -> Vec<String> {
        let (now, mono) = (self.clock.now_nanos(), self.clock.monotonic_nanos());
        let stalled = |name: &str, h: Option<&Arc<Horizon>>| {
            h.and_then(|h| h.refusal(now, mono))
                .map(|e| format!("{name}: {e}: refusing until it moves"))
        };
        match kind {
            IdKind::Snowflake => self
                .snowflake
                .iter()
                .filter_map(|(name, g)| match g.refusal()? {
                    SnowflakeError::LeaseLost => None,
                    e => Some(format!("snowflake {name}: {e}: refusing")),
                })
                .collect(),
            IdKind::Sno => self
                .sno
                .iter()
                .filter_map(|(g, _)| stalled("sno", g.horizon()))
                .collect(),
            IdKind::Lexical => self
                .lexical
                .iter()
                .filter_map(|(g, _, _)| match g.refusal()? {
                    LexicalError::LeaseLost => None,
                    e => Some(format!("lexical: {e}: refusing")),
                })
                .collect(),
            IdKind::Uuid7 | IdKind::Ulid => self
                .bounds
                .iter()
                .filter(|(k, _)| *k == kind)
                .filter_map(|(k, h)| stalled(k.name(), Some(h)))
                .collect(),
        }
    }

    /// Whether IDs of `kind` are served.
    pub fn serves(&self, kind: IdKind) -> bool {
        match kind {
            IdKind::Snowflake => !self.snowflake.is_empty(),
            IdKind::Sno => self.sno.is_some(),
            IdKind::Lexical => self.lexical.is_some(),
            IdKind::Uuid7 => self.uuid7.is_some(),
            IdKind::Ulid => self.ulid.is_some(),
        }
    }

    /// IDs of `kind` issued so far, for metrics.
    pub fn issued_total(&self, kind: IdKind) -> u64 {
        self.issued[kind as usize].load(Ordering::Relaxed)
    }

    /// The sno generator, if sno IDs are served.
    pub fn sno(&self) -> Option<&Arc<SnoGenerator<ServerClock>>> {
        self.sno.as_ref().map(|(g, _)| g)
    }

    /// The LexicalUUID generator, if LexicalUUIDs are served.
    pub fn lexical(&self) -> Option<&LexicalGenerator<ServerClock>> {
        self.lexical.as_ref().map(|(g, _, _)| g)
    }

    /// `count` IDs of `kind` (at least 1; the caller bounds it), in the order issued. A
    /// generator that must wait is polled again after an async sleep, at most `max_wait`
    /// in all (then `Unavailable`).
    ///
    /// # Errors
    /// `InvalidArgument` for options that do not apply; `Unavailable` for a lease lost, a
    /// clock too far behind or a stalled time bound; `Exhausted` when a layout ran out of time.
    pub async fn issue(
        &self,
        kind: IdKind,
        count: u32,
        options: &IdOptions,
        max_wait: Duration,
    ) -> Result<Ids, ServerError> {
        let n = count as usize;
        if options.generator.is_some() && kind != IdKind::Snowflake {
            return Err(ServerError::new(
                ErrorKind::InvalidArgument,
                format!("layout: applies to snowflake IDs only, not {}", kind.name()),
            ));
        }
        if options.meta.is_some() && kind != IdKind::Sno {
            return Err(ServerError::new(
                ErrorKind::InvalidArgument,
                format!("meta: applies to sno IDs only, not {}", kind.name()),
            ));
        }
        let deadline = tokio::time::Instant::now() + max_wait;
        let ids = match kind {
            IdKind::Snowflake => {
                let g = self.snowflake(options.generator.as_deref())?;
                Ids::Snowflake(
                    polled(
                        &self.clock,
                        n,
                        deadline,
                        || g.poll_next(),
                        |e| matches!(e, SnowflakeError::HorizonStalled(_)),
                        snowflake_error,
                        "snowflake",
                    )
                    .await?,
                )
            }
            IdKind::Sno => {
                let (g, default_meta) = self.sno.as_ref().ok_or_else(|| not_served(kind))?;
                let meta = options.meta.unwrap_or(*default_meta);
                Ids::Sno(
                    polled(
                        &self.clock,
                        n,
                        deadline,
                        || g.poll_new(meta),
                        |e| matches!(e, SnoError::HorizonStalled(_)),
                        sno_error,
                        "sno",
                    )
                    .await?,
                )
            }
            IdKind::Lexical => {
                let (lexical, horizon, fence) =
                    self.lexical.as_ref().ok_or_else(|| not_served(kind))?;
                let clock = &self.clock;
                let fenced = || fence.as_ref().is_some_and(|f| !f.admits_now(clock));
                // The generator waits for its time bound itself (a blocking wait): make sure
                // the bound covers the whole batch before asking, so that it never does here.
                if let Some(h) = horizon {
                    loop {
                        let now_us = clock.now_nanos() / 1_000;
                        let last_us = u64::try_from(lexical.last_timestamp_micros()).unwrap_or(0);
                        let until_us = now_us.max(last_us).saturating_add(u64::from(count));
                        if h.allows_nanos(until_us.saturating_mul(1_000)) {
                            break;
                        }
                        let then = clock.now_nanos().saturating_add(1_000_000);
                        pause(clock, then, deadline, || {
                            ServerError::unavailable(
                                "lexical: the durable time bound is not moving (a slow or full disk): retry later",
                            )
                        })
                        .await?;
                    }
                }
                if fenced() {
                    // Before the bound is waited for: a closed fence answers at once.
                    return Err(lexical_error(LexicalError::LeaseLost));
                }
                let mut out = Vec::with_capacity(n);
                for _ in 0..n {
                    // The generator checks its fence with every clock reading.
                    out.push(lexical.next_id().map_err(lexical_error)?);
                }
                Ids::Lexical(out)
            }
            IdKind::Uuid7 => {
                let g = self.uuid7.as_ref().ok_or_else(|| not_served(kind))?;
                let mut out = Vec::with_capacity(n);
                while out.len() < n {
                    match g.try_generate() {
                        Ok(id) => out.push(id),
                        // The durable time bound: waited for here, off the generator's lock.
                        Err(e) => self.bound_pause(deadline, "uuid7", e).await?,
                    }
                }
                Ids::Uuid7(out)
            }
            IdKind::Ulid => {
                let g = self.ulid.as_ref().ok_or_else(|| not_served(kind))?;
                let mut out = Vec::with_capacity(n);
                while out.len() < n {
                    match g.try_generate() {
                        Ok(id) => out.push(id),
                        Err(UlidError::HorizonStalled(e)) => {
                            self.bound_pause(deadline, "ulid", e).await?;
                        }
                        Err(e @ UlidError::Overflow) => {
                            return Err(ServerError::unavailable(format!(
                                "ulid: {e}: retry in the next millisecond"
                            )))
                        }
                        Err(e) => {
                            crate::warn(
                                crate::Topic::Internal,
                                format_args!("an error this server does not map: ulid: {e}"),
                            );
                            return Err(ServerError::new(
                                ErrorKind::Internal,
                                format!("ulid: {e}"),
                            ));
                        }
                    }
                }
                Ids::Ulid(out)
            }
        };
        self.issued[kind as usize].fetch_add(ids.len() as u64, Ordering::Relaxed);
        Ok(ids)
    }
}

/// `n` IDs from a generator's poll method, waiting (asynchronously) for what it asks to wait
/// for: the next time unit, a clock a little behind, or a durable time bound that has not moved
/// yet (`stalled`), until `deadline`; then `Unavailable`. Any other error ends the batch.
async fn polled<T, E: Clone>(
    clock: &ServerClock,
    n: usize,
    deadline: tokio::time::Instant,
    mut poll: impl FnMut() -> Result<Poll<T>, E>,
    stalled: impl Fn(&E) -> bool,
    error: impl Fn(E) -> ServerError,
    kind: &str,
) -> Result<Vec<T>, ServerError> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match poll() {
            Ok(Poll::Ready(id)) => out.push(id),
            Ok(Poll::Pending { until_nanos, .. }) => {
                pause(clock, until_nanos, deadline, || {
                    crate::warn(crate::Topic::Clock, format_args!(
                        "{kind}: clock refused: behind the last issued time for longer than a request waits"
                    ));
                    ServerError::unavailable(format!(
                        "{kind}: the clock is behind the last issued time for longer than a request waits: retry later"
                    ))
                })
                .await?;
            }
            Err(e) if stalled(&e) => {
                let then = clock.now_nanos().saturating_add(1_000_000);
                pause(clock, then, deadline, || error(e.clone())).await?;
            }
            Err(e) => return Err(error(e)),
        }
    }
    Ok(out)
}

impl Generators {
    /// Waits a millisecond for a durable time bound that did not cover an ID of `kind` (the
    /// writer moves it every 200 ms), or fails with `stalled` past the request's deadline.
    async fn bound_pause(
        &self,
        deadline: tokio::time::Instant,
        kind: &str,
        stalled: floe_core::horizon::HorizonStalled,
    ) -> Result<(), ServerError> {
        let then = self.clock.now_nanos().saturating_add(1_000_000);
        pause(&self.clock, then, deadline, || {
            crate::warn(crate::Topic::Clock, format_args!("{kind}: {stalled}"));
            ServerError::unavailable(format!("{kind}: {stalled}: retry later"))
        })
        .await
    }
}

/// Waits until the clock reads `until_nanos` (at most 5 ms at a time, and at least a
/// scheduler turn), or fails with `timeout()` when that is past `deadline`.
async fn pause(
    clock: &impl Clock,
    until_nanos: u64,
    deadline: tokio::time::Instant,
    timeout: impl FnOnce() -> ServerError,
) -> Result<(), ServerError> {
    let wait = Duration::from_nanos(until_nanos.saturating_sub(clock.now_nanos()));
    let now = tokio::time::Instant::now();
    if now + wait > deadline {
        return Err(timeout());
    }
    if wait < Duration::from_micros(1500) {
        // tokio's timer has millisecond ticks: for the rest of a time unit, yield instead, so
        // that a batch at the generator's cap loses no unit.
        tokio::task::yield_now().await;
    } else {
        tokio::time::sleep(wait.min(Duration::from_millis(5))).await;
    }
    Ok(())
}

/// A Snowflake generator's error, as the server answers it.
pub fn snowflake_error(e: SnowflakeError) -> ServerError {
    match e {
        SnowflakeError::TimestampOverflow { .. } => {
            ServerError::new(ErrorKind::Exhausted, format!("snowflake: {e}"))
        }
        SnowflakeError::ClockBeforeEpoch { .. } => ServerError::config(format!("snowflake: {e}")),
        SnowflakeError::LeaseLost => ServerError::unavailable(
            "snowflake: this server's worker lease is lost or not confirmed by the registry in time (fenced): retry on another server",
        ),
        SnowflakeError::ClockMovedBackwards { .. } => {
            crate::warn(
                crate::Topic::Clock,
                format_args!("snowflake: clock refused: {e}"),
            );
            ServerError::unavailable(format!("snowflake: {e}: retry later"))
        }
        SnowflakeError::HorizonStalled(_) => {
            crate::warn(crate::Topic::Clock, format_args!("snowflake: {e}"));
            ServerError::unavailable(format!("snowflake: {e}: retry later"))
        }
        other => {
            crate::warn(
                crate::Topic::Internal,
                format_args!("an error this server does not map: snowflake: {other}"),
            );
            ServerError::new(ErrorKind::Internal, format!("snowflake: {other}"))
        }
    }
}

/// A sno generator's error, as the server answers it.
pub fn sno_error(e: SnoError) -> ServerError {
    match e {
        SnoError::TimeOutOfRange { .. } => ServerError::config(format!("sno: {e}")),
        SnoError::LeaseLost => ServerError::unavailable(
            "sno: this server's partition lease is lost or not confirmed by the registry in time (fenced): retry on another server",
        ),
        SnoError::HorizonStalled(_) => {
            crate::warn(crate::Topic::Clock, format_args!("sno: {e}"));
            ServerError::unavailable(format!("sno: {e}: retry later"))
        }
        other => {
            crate::warn(
                crate::Topic::Internal,
                format_args!("an error this server does not map: sno: {other}"),
            );
            ServerError::new(ErrorKind::Internal, format!("sno: {other}"))
        }
    }
}

fn lexical_error(e: LexicalError) -> ServerError {
    match e {
        LexicalError::TimestampOverflow => ServerError::new(ErrorKind::Exhausted, e.to_string()),
        LexicalError::HorizonStalled(_) => {
            crate::warn(crate::Topic::Clock, format_args!("lexical: {e}"));
            ServerError::unavailable(format!("lexical: {e}: retry later"))
        }
        LexicalError::LeaseLost => ServerError::unavailable(
            "lexical: this server's worker lease is lost or not confirmed by the registry in time (fenced): retry on another server",
        ),
        LexicalError::ClockBehind { .. } => {
            crate::warn(crate::Topic::Clock, format_args!("lexical: {e}"));
            ServerError::unavailable(format!("lexical: {e}: retry on another server"))
        }
        other => {
            crate::warn(
                crate::Topic::Internal,
                format_args!("an error this server does not map: lexical: {other}"),
            );
            ServerError::new(ErrorKind::Internal, format!("lexical: {other}"))
        }
    }
}

/// The parts of a Snowflake ID in a layout, as Leaf's `/decodeSnowflakeId` shows them.
pub fn decode_snowflake(layout: &Layout, id: u64) -> Result<serde_json::Value, String> {
    if layout.has_stray_bits(id) {
        return Err(format!(
            "{id} has bits set above the layout's {} bits: not an ID of this server's layout",
            layout.total_bits()
        ));
    }
    let parts = layout.try_decode(id).map_err(|e| e.to_string())?;
    let ms = parts.timestamp_ms;
    let when = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(time::macros::format_description!(
                "[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:3]"
            ))
            .ok()
        })
        .unwrap_or_default();
    Ok(serde_json::json!({
        "timestamp": format!("{ms}({when})"),
        "datacenterId": parts.datacenter.to_string(),
        "workerId": parts.worker.to_string(),
        "sequenceId": parts.sequence.to_string(),
    }))
}
