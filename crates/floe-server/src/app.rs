//! What every route and RPC serves ([`App`]): the stores, the generators, the server's bounds,
//! and the requests' common steps (a batch checked, a sequence key checked and worded).

use std::sync::Arc;
use std::time::Duration;

use floe_sequencer::{Mode, Sequencer};

use crate::error::{ErrorKind, ServerError};

use crate::http::guard::HostPolicy;
use crate::ids::{Generators, IdKind, IdOptions, Ids};
use crate::observe::Telemetry;
use crate::present::Presentation;
use crate::{Asked, ServerClock};

/// What every route and RPC serves: the stores, the generators and the server's bounds.
#[derive(Debug)]
pub struct App {
    /// The stores by name.
    pub sequencer: Arc<Sequencer>,
    /// The generators (`None`: a sequencer-only server, as in tests).
    pub ids: Option<Arc<Generators>>,
    /// The most IDs one request may ask for.
    pub max_batch: u32,
    /// The store Leaf's segment route serves.
    pub leaf_store: Option<String>,
    /// Which `Host`s HTTP answers to ([`crate::http::guard`]).
    pub hosts: HostPolicy,
    /// The longest a generator may wait within one request (a time unit used up, a clock a
    /// little behind).
    pub max_wait: Duration,
    /// Metrics, leases, readiness and rates ([`crate::observe`]).
    pub telemetry: Telemetry,
    /// Named templates and scramble keys ([`crate::present`]).
    pub presentation: Arc<Presentation>,
    /// The clock the server reads (the generators', the templates' dates, the status page's).
    pub clock: ServerClock,
    /// The status page's sign-in, when tokens are on ([`crate::security::login`]).
    pub login: Option<crate::security::login::Login>,
    /// The OpenAPI description this server serves at `/openapi.json`, made for its security
    /// settings once at start ([`crate::http::Openapi`]).
    pub openapi: crate::http::Openapi,
}

impl App {
    /// A server of sequences only (no generators), answering to `allowed_hosts` (and the
    /// `Host` checked on loopback listeners only).
    pub fn sequencer_only(sequencer: Arc<Sequencer>, allowed_hosts: Vec<String>) -> App {
        let clock: ServerClock = Arc::new(floe_core::clock::SystemClock);
        let mut telemetry = Telemetry::new(true, Arc::clone(&clock));
        telemetry.stores_ready = store_flags(&sequencer);
        App {
            telemetry,
            sequencer,
            ids: None,
            max_batch: crate::config::DEFAULT_MAX_BATCH,
            leaf_store: None,
            hosts: HostPolicy::allowing(allowed_hosts),
            max_wait: Duration::from_secs(2),
            presentation: Arc::default(),
            clock,
            login: None,
            openapi: crate::http::Openapi::Open,
        }
    }

    /// Why the server, or its IDs of `kind`, is not ready (empty: it is): the server stopping,
    /// a lease fenced, a generator that would refuse (a clock stepped back, a time bound that
    /// stopped moving) and, for the whole server only, a store not answering. A kind the
    /// server does not serve is not ready either.
    pub fn not_ready(&self, kind: Option<IdKind>) -> Vec<String> {
        let mut why = self.telemetry.not_ready(kind);
        for k in IdKind::ALL
            .into_iter()
            .filter(|k| kind.is_none_or(|w| w == *k))
        {
            match &self.ids {
                Some(ids) if ids.serves(k) => why.extend(ids.refusals(k)),
                _ if kind.is_some() => why.push(crate::ids::not_served(k).message),
                _ => {}
            }
        }
        why
    }

    /// `count` checked against the largest batch.
    ///
    /// # Errors
    /// `InvalidArgument` naming `count` and its bounds.
    pub fn count(&self, count: u32) -> Result<u32, ServerError> {
        self.batch_of("count", count)
    }

    /// A number of IDs asked for in `field` (`count`, a stream's `batch`), checked against
    /// the largest batch.
    ///
    /// # Errors
    /// `InvalidArgument` naming `field` and its bounds.
    pub fn batch_of(&self, field: &str, n: u32) -> Result<u32, ServerError> {
        if n == 0 || n > self.max_batch {
            return Err(ServerError::new(
                ErrorKind::InvalidArgument,
                format!("{field}: expected 1 to {}, found {n}", self.max_batch),
            ));
        }
        Ok(n)
    }

    fn generators(&self) -> Result<&Generators, ServerError> {
        self.ids.as_deref().ok_or_else(|| {
            ServerError::config(
                "this server issues sequences only: no ID generators are configured",
            )
        })
    }

    /// Checks a request's options for `kind` without issuing anything.
    ///
    /// # Errors
    /// As [`Generators::issue`] for options.
    pub fn check_id_options(&self, kind: IdKind, options: &IdOptions) -> Result<(), ServerError> {
        let g = self.generators()?;
        if kind == IdKind::Snowflake {
            g.snowflake(options.generator.as_deref())?;
        }
        Ok(())
    }

    /// `count` IDs of `kind` (already checked against the largest batch).
    ///
    /// # Errors
    /// As [`Generators::issue`].
    pub async fn issue(
        &self,
        kind: IdKind,
        count: u32,
        options: &IdOptions,
    ) -> Result<Ids, ServerError> {
        self.generators()?
            .issue(kind, count, options, self.max_wait)
            .await
    }

    /// The next ID of a sequence key, checked as Layotto checks a request ([`crate::check`])
    /// and worded by [`crate::public`]: [`sequence`](Self::sequence) of one, without a `Vec`.
    ///
    /// # Errors
    /// As [`crate::check`] and the store's.
    pub async fn next_id(
        &self,
        store: &str,
        key: &str,
        mode: Result<Mode, String>,
    ) -> Result<i64, ServerError> {
        let (handle, mode) = crate::check(&self.sequencer, store, key, mode)?;
        handle
            .next_id(key, mode)
            .await
            .map_err(|e| crate::public(e, handle, key, Asked::NextId(mode)))
    }

    /// `count` IDs of a sequence key (already checked against the largest batch), checked as
    /// Layotto checks a request ([`crate::check`]) and worded by [`crate::public`].
    ///
    /// # Errors
    /// As [`crate::check`] and the store's.
    pub async fn sequence(
        &self,
        store: &str,
        key: &str,
        mode: Result<Mode, String>,
        count: u32,
    ) -> Result<Vec<i64>, ServerError> {
        let (handle, mode) = crate::check(&self.sequencer, store, key, mode)?;
        let result = if count == 1 {
            handle.next_id(key, mode).await.map(|id| vec![id])
        } else {
            handle
                .next_ids(key, mode, count)
                .await
                .map(|batch| batch.iter().collect())
        };
        result.map_err(|e| crate::public(e, handle, key, Asked::NextId(mode)))
    }

    /// `count` IDs of a sequence key written through a template (or scrambled): the IDs, and
    /// their texts. A dated template numbers them under `KEY@DATE` (this server's clock). The
    /// request's `meta` values are checked before any ID is issued.
    ///
    /// # Errors
    /// As [`App::sequence`], and [`Presentation::render`]'s.
    pub async fn sequence_texts(
        &self,
        store: &str,
        key: &str,
        mode: Result<Mode, String>,
        count: u32,
        asked: crate::present::Shown<'_>,
        meta: &crate::present::Meta,
    ) -> Result<(Vec<i64>, Vec<String>), ServerError> {
        // The key as given (empty, too long, a NUL), before its period is added to it.
        crate::check(&self.sequencer, store, key, mode.clone())?;
        let p = &self.presentation;
        let template = p.template(asked)?;
        let at = template.moment(self.clock.now_nanos() / 1_000_000);
        // A bad meta value fails before an ID is spent on it.
        p.check_meta(template, meta)?;
        let dated = template
            .dated_key(key, at)
            .map_err(|e| ServerError::new(ErrorKind::InvalidArgument, e))?;
        let ids = self.sequence(store, dated.as_str(), mode, count).await?;
        // A store may hold a key below zero (`bigger_than` is any int64): a template writes
        // numbers from 0 up, never -1 as 1.
        let values = ids
            .iter()
            .map(|&id| {
                u64::try_from(id).map(|v| (v, at)).map_err(|_| {
                    ServerError::new(
                        ErrorKind::Exhausted,
                        format!(
                            "template {}: ID {id} is below 0, and a template writes numbers from 0 up",
                            crate::echo(template.pattern(), crate::MAX_ECHO)
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let texts = p.render_all(template, values, meta).await?;
        Ok((ids, texts))
    }
}

/// A readiness probe per store (answering until probes say otherwise).
pub(crate) fn store_flags(sequencer: &Sequencer) -> Vec<(String, crate::observe::StoreProbe)> {
    sequencer
        .stores()
        .map(|h| (h.name().to_string(), crate::observe::StoreProbe::default()))
        .collect()
}
