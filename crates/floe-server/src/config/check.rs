//! The one check of a configuration ([`ServerConfig::check`]): every value read once, turned
//! into a typed [`Plan`], or refused with a [`ConfigError`] naming the key it was read from.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use floe_core::snowflake::Layout;
use floe_sequencer::{Key, KeyLimits, ServeOptions, StepPolicy};

use super::{valid_store_name, LayoutConfig, ServerConfig, SCRAMBLE_KEY_ENV};
use super::{Listeners, Plan, SnowflakePlan, StoreUrl};
use crate::ids::IdKind;
use crate::Limits;

/// A configuration error: the key it is about and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key, as written in the file (`limits.max_batch`).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// The key of a name given in the file (a store's, a template's): the name escaped and cut as
/// an error message repeats it, so that an error stays one line.
fn named(prefix: &str, name: &str) -> String {
    format!("{prefix}.{}", crate::echo(name, crate::MAX_ECHO))
}

pub(crate) fn bad(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.into(),
        message: message.into(),
    }
}

impl ServerConfig {
    /// The named templates, parsed and checked.
    ///
    /// # Errors
    /// The first bad template, named `templates.NAME`.
    pub fn templates(
        &self,
    ) -> Result<BTreeMap<String, floe_core::template::Template>, ConfigError> {
        let mut out = BTreeMap::new();
        for (name, t) in &self.templates {
            let key = named("templates", name);
            if !valid_store_name(name) {
                return Err(bad(&key, "a template name is 1 to 64 of A-Z a-z 0-9 - _ ."));
            }
            let mut template = floe_core::template::Template::parse(&t.pattern)
                .map_err(|e| bad(&format!("{key}.pattern"), e.to_string()))?;
            if let Some(offset) = &t.utc_offset {
                template = template.with_utc_offset(
                    floe_core::template::parse_utc_offset(offset)
                        .map_err(|e| bad(&format!("{key}.utc_offset"), e))?,
                );
            }
            if template.scrambles() && !self.has_scramble_keys() {
                return Err(bad(
                    &format!("{key}.pattern"),
                    format!("{{seq:scrambled}} needs keys: set scramble.key_file (--scramble-key-file) or ${SCRAMBLE_KEY_ENV}"),
                ));
            }
            out.insert(name.clone(), template);
        }
        Ok(out)
    }

    /// The connection limits.
    ///
    /// # Errors
    /// The field that is out of range.
    pub fn limits(&self) -> Result<Limits, ConfigError> {
        let l = &self.limits;
        let limits = Limits {
            max_connections: usize::try_from(l.max_connections)
                .map_err(|_| bad("limits.max_connections", "too large"))?,
            max_streams: l.max_streams,
            header_timeout: Duration::from_secs(l.header_timeout_secs),
            idle_timeout: Duration::from_secs(l.idle_timeout_secs),
            request_timeout: Duration::from_secs(l.request_timeout_secs),
            shutdown_timeout: Duration::from_secs(l.shutdown_timeout_secs),
            shutdown_delay: Duration::from_secs(l.shutdown_delay_secs),
        };
        limits.validate().map_err(|e| {
            let key = match e.field {
                "max_connections" => "limits.max_connections",
                "max_streams" => "limits.max_streams",
                "header_timeout" => "limits.header_timeout_secs",
                "idle_timeout" => "limits.idle_timeout_secs",
                "request_timeout" => "limits.request_timeout_secs",
                "shutdown_timeout" => "limits.shutdown_timeout_secs",
                "shutdown_delay" => "limits.shutdown_delay_secs",
                _ => "limits",
            };
            bad(key, e.message)
        })?;
        let store_timeout = Duration::from_millis(self.sequencer.timeout_ms);
        if limits.request_timeout <= store_timeout {
            return Err(bad(
                "limits.request_timeout_secs",
                format!(
                    "must be longer than sequencer.timeout_ms (one store call), found {} s and {} ms",
                    l.request_timeout_secs, self.sequencer.timeout_ms
                ),
            ));
        }
        Ok(limits)
    }

    /// How stores serve.
    ///
    /// # Errors
    /// The field that is out of range.
    pub fn serve_options(&self) -> Result<ServeOptions, ConfigError> {
        let s = &self.sequencer;
        let step = StepPolicy {
            min: s.step_min,
            max: s.step_max,
            target: Duration::from_secs(s.step_target_secs),
        };
        step.validate().map_err(|e| {
            let key = match e.field {
                "step.max" => "sequencer.step_max",
                "step.target" => "sequencer.step_target_secs",
                _ => "sequencer.step_min",
            };
            bad(key, e.message)
        })?;
        if s.timeout_ms == 0 {
            return Err(bad(
                "sequencer.timeout_ms",
                "expected a positive number of milliseconds, found 0",
            ));
        }
        Ok(ServeOptions {
            step,
            timeout: Duration::from_millis(s.timeout_ms),
        })
    }

    /// `bigger_than` by store: `(store or every store, key, N)`.
    ///
    /// # Errors
    /// A key that is not a valid key.
    pub fn floors(&self) -> Result<BTreeMap<String, BTreeMap<Key, i64>>, ConfigError> {
        let names: Vec<String> = self.store_specs().into_keys().collect();
        let mut floors: BTreeMap<String, BTreeMap<Key, i64>> = BTreeMap::new();
        for (target, n) in &self.bigger_than {
            let (store, key) = match target.split_once(':') {
                Some((s, k)) if names.iter().any(|n| n == s) => (Some(s), k),
                _ => (None, target.as_str()),
            };
            let key =
                Key::new(key).map_err(|e| bad(&named("bigger_than", target), e.to_string()))?;
            for name in names
                .iter()
                .filter(|n| store.is_none_or(|s| s == n.as_str()))
            {
                floors
                    .entry(name.clone())
                    .or_default()
                    .insert(key.clone(), *n);
            }
        }
        Ok(floors)
    }

    /// Keys held in memory.
    ///
    /// # Errors
    /// The field that is out of range.
    pub fn key_limits(&self) -> Result<KeyLimits, ConfigError> {
        let limits = KeyLimits {
            idle: Duration::from_secs(self.sequencer.key_idle_secs),
            max_keys: self.sequencer.max_keys,
        };
        limits.validate().map_err(|e| {
            let key = match e.field {
                "idle" => "sequencer.key_idle_secs",
                _ => "sequencer.max_keys",
            };
            bad(key, e.message)
        })?;
        Ok(limits)
    }

    /// Checks everything that can be checked without opening anything and without the clock
    /// (what `--print-config` checks): [`check`](Self::check) without its moment.
    ///
    /// # Errors
    /// The first bad key, with what is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.plan(None).map(drop)
    }

    /// The one check of a configuration before a server starts: every value read once and
    /// turned into a [`Plan`]; every Snowflake layout able to issue IDs at `now_ms`, the
    /// registry and store URLs parsed as they will be opened (nothing is opened here, no file
    /// is read but the environment's scramble key's presence).
    ///
    /// # Errors
    /// The first bad key, with what is wrong.
    pub fn check(&self, now_ms: u64) -> Result<Plan, ConfigError> {
        self.plan(Some(now_ms))
    }

    fn plan(&self, now_ms: Option<u64>) -> Result<Plan, ConfigError> {
        if self.listen.grpc == "off" && self.listen.http == "off" {
            return Err(bad(
                "listen",
                "grpc and http are both off, so there is nothing to serve",
            ));
        }
        for (key, addr) in [
            ("listen.grpc", &self.listen.grpc),
            ("listen.http", &self.listen.http),
        ] {
            let port = addr.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
            if addr != "off" && !matches!(port, Some(Ok(_))) {
                return Err(bad(
                    key,
                    format!(
                        "expected HOST:PORT with a port from 0 to 65535, or off; found \"{}\"",
                        crate::echo(addr, crate::MAX_ECHO)
                    ),
                ));
            }
        }
        let limits = self.limits()?;
        self.tls.validate()?;
        if self.auth.health_needs_token && self.auth.token_file.is_none() {
            return Err(bad(
                "auth.health_needs_token",
                "is set, but no auth.token_file is: set a token file (--token-file) or leave it out",
            ));
        }
        if self.limits.max_batch == 0 || self.limits.max_batch > 1_000_000 {
            return Err(bad(
                "limits.max_batch",
                format!("expected 1 to 1000000, found {}", self.limits.max_batch),
            ));
        }
        let serve = self.serve_options()?;
        let key_limits = self.key_limits()?;
        for (name, url) in &self.store_specs() {
            if !valid_store_name(name) {
                return Err(bad(
                    &named("stores", name),
                    "a store name is 1 to 64 of A-Z a-z 0-9 - _ .",
                ));
            }
            if url.is_empty() {
                return Err(bad(
                    &named("stores", name),
                    "expected a store URL, found \"\"",
                ));
            }
        }
        let snowflake_stores = self
            .store_specs()
            .values()
            .filter(|u| u.as_str() == "snowflake")
            .count();
        if snowflake_stores > 1 {
            return Err(bad(
                "stores",
                "at most one snowflake store per server (it serves the server's one default Snowflake generator)",
            ));
        }
        if let Some(leaf) = &self.sequencer.leaf_store {
            if !self.store_specs().contains_key(leaf) {
                return Err(bad(
                    "sequencer.leaf_store",
                    format!(
                        "no store is named \"{}\"",
                        crate::echo(leaf, crate::MAX_ECHO)
                    ),
                ));
            }
        }
        for name in &self.sequencer.registered_only {
            if !self.store_specs().contains_key(name) {
                return Err(bad(
                    "sequencer.registered_only",
                    format!(
                        "no store is named \"{}\"",
                        crate::echo(name, crate::MAX_ECHO)
                    ),
                ));
            }
        }
        let floors = self.floors()?;
        let templates = self.templates()?;
        let scramble_domain = floe_core::scramble::Domain::parse(&self.scramble.domain)
            .map_err(|e| bad("scramble.domain", e.to_string()))?;
        let mut kinds = BTreeSet::new();
        for kind in &self.ids.kinds {
            IdKind::parse(kind).map_err(|_| {
                bad(
                    "ids.kinds",
                    format!(
                        "expected {}, found {:?}",
                        floe_core::kind::UnknownKind::expected(),
                        crate::echo(kind, crate::MAX_ECHO)
                    ),
                )
            })?;
            if !kinds.insert(kind) {
                return Err(bad("ids.kinds", format!("{kind:?} is named twice")));
            }
        }
        if snowflake_stores == 1 && !self.ids.serves(IdKind::Snowflake) {
            return Err(bad(
                "ids.kinds",
                "a snowflake store serves the server's Snowflake generator: keep \"snowflake\" in ids.kinds",
            ));
        }
        let layout = checked_layout(&self.snowflake.default, "snowflake.layout", now_ms)?;
        if snowflake_stores == 1 && !layout.fits_i64() {
            return Err(bad(
                "snowflake.layout",
                format!(
                    "a snowflake store needs at most 63 bits (next_id is an int64), found {}",
                    layout.total_bits()
                ),
            ));
        }
        let planned = |name: &str, config: &LayoutConfig, layout: Layout, prefix: &str| {
            let not_before_ms = config
                .above
                .map(|above| snowflake_floor(&layout, above, &format!("{prefix}above"), now_ms))
                .transpose()?;
            Ok::<_, ConfigError>(SnowflakePlan {
                name: name.to_string(),
                layout,
                not_before_ms,
                random_start: config.random_start,
            })
        };
        let mut snowflakes = vec![planned(
            crate::ids::DEFAULT_GENERATOR,
            &self.snowflake.default,
            layout,
            "snowflake.",
        )?];
        for (name, l) in &self.snowflake.named {
            if !valid_store_name(name) || name == "default" {
                return Err(bad(
                    &named("snowflake.named", name),
                    "a generator name is 1 to 64 of A-Z a-z 0-9 - _ . and not `default`",
                ));
            }
            let prefix = format!("{}.", named("snowflake.named", name));
            let layout = checked_layout(l, &format!("{prefix}layout"), now_ms)?;
            snowflakes.push(planned(name, l, layout, &prefix)?);
        }
        if self.sno.sequence_min > self.sno.sequence_max {
            return Err(bad(
                "sno.sequence_min",
                format!(
                    "must not be above sno.sequence_max, found {} > {}",
                    self.sno.sequence_min, self.sno.sequence_max
                ),
            ));
        }
        // The URLs, parsed as they will be opened (nothing is opened here).
        if let Some(url) = &self.registry.url {
            floe_registry::check_url(url).map_err(|e| {
                // The registry's messages name their field already.
                let message = e.message.strip_prefix("registry: ").unwrap_or(&e.message);
                bad("registry", message)
            })?;
        }
        let mut stores = Vec::new();
        for (name, url) in self.store_specs() {
            let url = if url == "snowflake" {
                StoreUrl::Snowflake
            } else {
                floe_sequencer::check_scheme(&url)
                    .map_err(|e| bad(&named("stores", &name), e.message))?;
                StoreUrl::Url(url)
            };
            stores.push((name, url));
        }
        for (i, pattern) in self.listen.allow_hosts.iter().enumerate() {
            crate::http::guard::check_pattern(pattern)
                .map_err(|e| bad(&format!("listen.allow_hosts[{i}]"), e))?;
        }
        let listen = |addr: &str| (addr != "off").then(|| addr.to_string());
        Ok(Plan {
            config: self.clone(),
            state_dir: self.state_dir.clone(),
            listen: Listeners {
                grpc: listen(&self.listen.grpc),
                http: listen(&self.listen.http),
            },
            kinds: IdKind::ALL
                .into_iter()
                .filter(|k| self.ids.serves(*k))
                .collect(),
            snowflakes,
            max_wait: limits.request_timeout.min(Duration::from_secs(2)),
            limits,
            max_batch: self.limits.max_batch,
            serve,
            key_limits,
            stores,
            floors,
            leaf_store: self.leaf_store(),
            templates,
            scramble_domain,
        })
    }
}

/// The Unix millisecond at or before which a generator of `layout` must issue nothing so that
/// its IDs are above `above` (`key`): the start of the floor's own time unit. Refused when the
/// floor is no ID of the layout, or when the first ID issued at `now_ms` would not be above it
/// (a migration that would go back: the message names both numbers).
fn snowflake_floor(
    layout: &Layout,
    above: u64,
    key: &str,
    now_ms: Option<u64>,
) -> Result<u64, ConfigError> {
    let bits = layout.total_bits();
    if above.checked_shr(bits).is_some_and(|high| high != 0) {
        return Err(bad(
            key,
            format!(
                "{above} is no ID of this layout: its IDs have {bits} bits, so all are below it"
            ),
        ));
    }
    if let Some(now) = now_ms {
        let first = layout.smallest_id_at(now);
        if first <= above {
            return Err(bad(
                key,
                format!(
                    "the first ID this server would issue now is at least {first}, not above the floor {above}: its IDs would go back (the layout's epoch is {}; Meituan Leaf's IDs need layout meituan-leaf)",
                    layout.epoch_ms()
                ),
            ));
        }
    }
    Ok(layout.decode(above).timestamp_ms)
}

/// A layout, and, given a moment, able to issue IDs then (its epoch not in the future, its
/// timestamp field not run out).
fn checked_layout(
    config: &LayoutConfig,
    key: &str,
    now_ms: Option<u64>,
) -> Result<Layout, ConfigError> {
    let layout = config.layout().map_err(|e| bad(key, e))?;
    if let Some(now) = now_ms {
        layout
            .validate_now(now)
            .map_err(|e| bad(key, e.to_string()))?;
    }
    Ok(layout)
}
