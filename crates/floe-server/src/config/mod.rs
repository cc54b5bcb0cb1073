//! A server's whole configuration: what `floe serve --config floe.toml` reads, what its flags
//! and `FLOE_*` variables override, and what `--print-config` prints.
//!
//! Every field has a default, so an empty file (or no file) is the embedded server: one store
//! `default` in `state_dir`, worker IDs from a file registry in the same directory. Unknown keys
//! and bad values refuse to start, naming the key and the file ([`ServerConfig::from_toml`],
//! [`ServerConfig::validate`]). The commented example is `docs/floe.toml`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use floe_core::snowflake::Layout;
use serde::{Deserialize, Serialize};

use crate::Limits;

mod check;
mod plan;

pub(crate) use check::bad;
pub use check::ConfigError;
pub use plan::{Listeners, Note, Plan, SnowflakePlan, StoreUrl};

/// The most IDs one request may ask for (`count`), unless the configuration says otherwise.
pub const DEFAULT_MAX_BATCH: u32 = 10_000;

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Directory of the embedded store, the file registry, the local cache, the durable time
    /// bounds and the saved WEAK tails.
    pub state_dir: PathBuf,
    /// Where to listen.
    pub listen: ListenConfig,
    /// Which ID kinds are served.
    pub ids: IdsConfig,
    /// Connection and request bounds.
    pub limits: LimitsConfig,
    /// Where Snowflake worker IDs and sno partitions are leased.
    pub registry: RegistryConfig,
    /// The Snowflake generator (and more, by name).
    pub snowflake: SnowflakeSection,
    /// The sno generator.
    pub sno: SnoConfig,
    /// The LexicalUUID generator.
    pub lexical: LexicalConfig,
    /// How sequences are served.
    pub sequencer: SequencerConfig,
    /// Stores by name: `embedded[:PATH]`, `memory`, `redis://...`, `postgres://...`,
    /// `mysql://...`, `etcd://...`, `etcds://...` (TLS), `zk://...`, or `snowflake` (WEAK IDs from the server's
    /// Snowflake generator). Default: `default = "embedded"`.
    pub stores: BTreeMap<String, String>,
    /// Every ID of a key is greater than N: `"[STORE:]KEY" = N` (every store when none is
    /// named).
    pub bigger_than: BTreeMap<String, i64>,
    /// Prometheus metrics.
    pub metrics: MetricsConfig,
    /// TLS on both listeners.
    pub tls: TlsConfig,
    /// Bearer tokens on both listeners.
    pub auth: AuthConfig,
    /// Named ID templates (`[templates.orders] pattern = "ORD-{date:%Y%m%d}-{seq:06}"`), for
    /// `?template=NAME` (HTTP) and `template` (gRPC `floe.v1.Floe/NextSequence`).
    pub templates: BTreeMap<String, TemplateConfig>,
    /// The keys of `{seq:scrambled}` and `?scramble=true`.
    pub scramble: ScrambleConfig,
}

/// One named template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateConfig {
    /// The template (see `floe_core::template`).
    pub pattern: String,
    /// The UTC offset of its `{date}`, `+HH:MM` (default: UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utc_offset: Option<String>,
}

/// Scramble keys: FF1 over AES-256 (see `floe_core::scramble`). The keys are read from a file
/// (or `$FLOE_SCRAMBLE_KEY`), never written in this file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScrambleConfig {
    /// A file of `ID:HEX` keys, the current key first (default: `$FLOE_SCRAMBLE_KEY`, if set).
    pub key_file: Option<PathBuf>,
    /// `int63` or `digits:N` (6 to 18).
    pub domain: String,
}

impl Default for ScrambleConfig {
    fn default() -> Self {
        ScrambleConfig {
            key_file: None,
            domain: "int63".into(),
        }
    }
}

/// The environment variable that may hold the scramble keys.
pub const SCRAMBLE_KEY_ENV: &str = "FLOE_SCRAMBLE_KEY";

impl ServerConfig {
    /// Whether scramble keys are given (a file, or the environment).
    pub fn has_scramble_keys(&self) -> bool {
        self.scramble.key_file.is_some() || std::env::var_os(SCRAMBLE_KEY_ENV).is_some()
    }
}

/// Prometheus metrics (`/metrics` on the HTTP listener).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Record metrics and serve `/metrics` (default: true).
    pub enabled: bool,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig { enabled: true }
    }
}

/// TLS on both listeners: both files or neither.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate chain, PEM (the server's certificate first).
    pub cert: Option<PathBuf>,
    /// The certificate's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
}

impl TlsConfig {
    /// Both files or neither.
    ///
    /// # Errors
    /// Naming the missing key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match (&self.cert, &self.key) {
            (Some(_), None) => Err(bad(
                "tls.key",
                "missing: tls.cert is set, so the key is needed too (--tls-key, FLOE_TLS_KEY)",
            )),
            (None, Some(_)) => Err(bad(
                "tls.cert",
                "missing: tls.key is set, so the certificate is needed too (--tls-cert, FLOE_TLS_CERT)",
            )),
            _ => Ok(()),
        }
    }
}

/// Bearer tokens. Tokens are read from a file only, never written in this file: `--print-config`
/// prints the configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// A file of accepted tokens, one a line (blank lines and `#` comments left out). When set,
    /// every request needs `Authorization: Bearer TOKEN` (gRPC: `authorization` metadata).
    pub token_file: Option<PathBuf>,
    /// Whether health (`/healthz`, `/readyz`, `/metrics`, `/openapi.json`, gRPC health) needs a token too
    /// (default: open).
    pub health_needs_token: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            state_dir: PathBuf::from(".floe"),
            listen: ListenConfig::default(),
            ids: IdsConfig::default(),
            limits: LimitsConfig::default(),
            registry: RegistryConfig::default(),
            snowflake: SnowflakeSection::default(),
            sno: SnoConfig::default(),
            lexical: LexicalConfig::default(),
            sequencer: SequencerConfig::default(),
            stores: BTreeMap::new(),
            bigger_than: BTreeMap::new(),
            metrics: MetricsConfig::default(),
            tls: TlsConfig::default(),
            auth: AuthConfig::default(),
            templates: BTreeMap::new(),
            scramble: ScrambleConfig::default(),
        }
    }
}

/// Listeners.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenConfig {
    /// gRPC address (Layotto's Runtime, floe.v1, health, reflection), or `off`.
    pub grpc: String,
    /// HTTP address, or `off`.
    pub http: String,
    /// Host names HTTP answers to besides IP addresses and `localhost`, where the `Host` is
    /// checked: exact names, `*.SUFFIX` or `*` (any).
    pub allow_hosts: Vec<String>,
    /// Where the `Host` of HTTP requests is checked against DNS rebinding: `auto` (on a
    /// loopback listener only: the attack needs a browser on the same machine), `on` or `off`.
    pub host_check: HostCheck,
}

/// Where the HTTP listener checks a request's `Host` ([`crate::http::guard`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostCheck {
    /// On a listener bound to a loopback address only.
    #[default]
    Auto,
    /// On every listener.
    On,
    /// Nowhere.
    Off,
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            grpc: "127.0.0.1:34904".into(),
            http: "127.0.0.1:34903".into(),
            allow_hosts: Vec::new(),
            host_check: HostCheck::Auto,
        }
    }
}

/// Which ID kinds a server issues.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IdsConfig {
    /// Of `snowflake`, `sno`, `lexical`, `uuid7`, `ulid` (default: all). A kind left out is
    /// not served (503 / `FAILED_PRECONDITION`) and leases nothing: `kinds = []` is a
    /// sequencer only, which takes no worker ID and keeps no time bound.
    pub kinds: Vec<String>,
}

impl Default for IdsConfig {
    fn default() -> Self {
        IdsConfig {
            kinds: crate::ids::IdKind::ALL
                .iter()
                .map(|k| k.name().to_string())
                .collect(),
        }
    }
}

impl IdsConfig {
    /// Whether `kind` is served.
    pub fn serves(&self, kind: crate::ids::IdKind) -> bool {
        self.kinds.iter().any(|k| k == kind.name())
    }
}

/// [`Limits`] in the file's units, and the largest batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Connections open at once per listener.
    pub max_connections: u64,
    /// Requests under way at once on one HTTP/2 connection.
    pub max_streams: u32,
    /// Seconds to the first request (HTTP/1: each request's headers).
    pub header_timeout_secs: u64,
    /// Seconds a connection may stay open with no request under way.
    pub idle_timeout_secs: u64,
    /// Seconds a request may take (longer than `sequencer.timeout_ms`).
    pub request_timeout_secs: u64,
    /// Seconds shutdown waits for open connections.
    pub shutdown_timeout_secs: u64,
    /// Seconds the server goes on serving, not ready, after SIGTERM before it stops accepting
    /// (for load balancers that need time to take it out; 0 by default).
    pub shutdown_delay_secs: u64,
    /// The most IDs one request may ask for (`count`); more is refused (400 /
    /// `INVALID_ARGUMENT`). A stream asks for any number, in batches of at most this.
    pub max_batch: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let l = Limits::default();
        LimitsConfig {
            max_connections: l.max_connections as u64,
            max_streams: l.max_streams,
            header_timeout_secs: l.header_timeout.as_secs(),
            idle_timeout_secs: l.idle_timeout.as_secs(),
            request_timeout_secs: l.request_timeout.as_secs(),
            shutdown_timeout_secs: l.shutdown_timeout.as_secs(),
            shutdown_delay_secs: l.shutdown_delay.as_secs(),
            max_batch: DEFAULT_MAX_BATCH,
        }
    }
}

/// The worker-ID registry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RegistryConfig {
    /// `file:///dir`, `zk://host:port[/root]`, `etcd://host:port[/prefix]`,
    /// `etcds://[user[:password]@]host:port[/prefix]?cacert=..&cert=..&key=..&password_file=..`
    /// (TLS, client certificate, etcd user), `static:ID`, or `static:ordinal[+OFFSET]` (the
    /// worker ID is the StatefulSet ordinal of `host`, the trailing `-N` of a pod name such as
    /// `floe-3`, plus OFFSET). Default: a file registry in `state_dir`.
    pub url: Option<String>,
    /// Service name of this server's identity (service + host + port).
    pub service: String,
    /// Host of the identity (default: this machine's host name).
    pub host: Option<String>,
    /// Port of the identity (default: the port of the gRPC address, else the HTTP address,
    /// as configured: an address on port 0 gives 0). Keep it stable across restarts: a restart
    /// with another identity leases another worker ID.
    pub port: Option<u16>,
    /// When neither registry nor cache answers, use worker ID = port % IDs (Leaf's
    /// fallback; two hosts on one port may then share an ID).
    pub port_fallback: bool,
    /// When a registry that leases (ZooKeeper, etcd) is unreachable at start-up, start from
    /// the local cache anyway, as Leaf does (off by default: refused, exit 69). The IDs are
    /// then issued with no lease: a replacement started during the same partition may hold
    /// the same worker ID.
    pub start_from_cache: bool,
    /// Take over a worker ID whose holder has not been alive for this many seconds, when all
    /// are taken (off by default).
    pub reclaim_after_secs: Option<u64>,
    /// At start-up, wait at most this long for a clock behind the last recorded time.
    pub max_clock_wait_ms: u64,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            url: None,
            service: "floe".into(),
            host: None,
            port: None,
            port_fallback: false,
            start_from_cache: false,
            reclaim_after_secs: None,
            max_clock_wait_ms: 5000,
        }
    }
}

/// A Snowflake layout: a preset or bit widths, an epoch and a time unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LayoutConfig {
    /// `leaf` (41/10/12, the Go Leaf-Snowflake's 2023 epoch), `meituan-leaf` (Meituan Leaf's:
    /// 41/10/12 on Twitter's epoch), `twitter`, `flake-idgen`, `js-safe` (38/7/8 of 10 ms,
    /// below 2^53), or `TS/WORKER/SEQ`, `TS/DC/WORKER/SEQ`.
    pub layout: String,
    /// Unix milliseconds (default: the layout's own).
    pub epoch_ms: Option<u64>,
    /// Milliseconds per time unit (default 1).
    pub time_unit_ms: Option<u64>,
    /// A floor: every ID this generator issues is above it (the last ID the system it
    /// replaces issued). The server refuses to start, naming both numbers, when an ID issued
    /// now would not be; it never issues in the floor's time unit or before it.
    pub above: Option<u64>,
    /// The first sequence of each new time unit is random below this (Meituan Leaf's rule:
    /// 100), so that IDs at low traffic are not all multiples of 4096 and `id % N` sharding
    /// spreads them; at most a quarter of the sequence space; 0 or 1: every unit starts at 0.
    /// Under full load (a unit's sequence used up) the next unit starts at 0: the cap stands.
    pub random_start: u64,
}

impl Default for LayoutConfig {
    fn default() -> Self {
        LayoutConfig {
            layout: "leaf".into(),
            epoch_ms: None,
            time_unit_ms: None,
            above: None,
            random_start: 100,
        }
    }
}

impl LayoutConfig {
    /// The layout it names.
    ///
    /// # Errors
    /// The layout's own words (an unknown preset, widths that do not add up).
    pub fn layout(&self) -> Result<Layout, String> {
        let mut layout = Layout::preset(&self.layout).map_err(|e| e.to_string())?;
        if let Some(epoch) = self.epoch_ms {
            layout = layout.with_epoch_ms(epoch);
        }
        if let Some(unit) = self.time_unit_ms {
            layout = layout.with_time_unit_ms(unit);
        }
        layout.validate().map_err(|e| e.to_string())?;
        Ok(layout)
    }
}

/// The Snowflake generators: the default one (`[snowflake]`) and more by name
/// (`[snowflake.named.NAME]`, picked with `?layout=NAME`), each with a worker ID of its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SnowflakeSection {
    /// The default generator's layout.
    #[serde(flatten)]
    pub default: LayoutConfig,
    /// More generators, by name.
    pub named: BTreeMap<String, LayoutConfig>,
}

/// The sno generator (its partition is leased from the registry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SnoConfig {
    /// The metabyte of IDs whose request names none.
    pub meta: u8,
    /// The lower sequence bound.
    pub sequence_min: u16,
    /// The upper sequence bound.
    pub sequence_max: u16,
}

impl Default for SnoConfig {
    fn default() -> Self {
        SnoConfig {
            meta: 0,
            sequence_min: 0,
            sequence_max: u16::MAX,
        }
    }
}

/// The LexicalUUID generator.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LexicalConfig {
    /// The worker ID. Default: a number leased from the registry under `{service}-lexical`
    /// (as sno's partition is), so no two live servers of a registry share one, and a server
    /// whose lease is lost stops issuing (fenced). A configured one is the operator's to keep
    /// unique (as `static:` is), with a durable time bound of its own.
    pub worker_id: Option<i64>,
}

/// How sequences are served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SequencerConfig {
    /// The longest one store call may take, in milliseconds.
    pub timeout_ms: u64,
    /// WEAK: the smallest (and first) segment.
    pub step_min: u32,
    /// WEAK: the largest segment.
    pub step_max: u32,
    /// WEAK: how long a segment should last, in seconds.
    pub step_target_secs: u64,
    /// Keys held in memory at most.
    pub max_keys: usize,
    /// A key unused this many seconds is dropped from memory (its unused WEAK IDs parked: it
    /// goes on where it stopped when it comes back).
    pub key_idle_secs: u64,
    /// The store Leaf's `/api/segment/get/{key}` serves (default: the only store, or
    /// `default`).
    pub leaf_store: Option<String>,
    /// Keep the unused tail of WEAK segments on a graceful stop and serve it first after the
    /// restart.
    pub keep_tails: bool,
    /// The stores that serve registered keys only (as Leaf serves only the tags of its
    /// table): a key not registered (`floe seq keys register`, the admin API) is refused.
    pub registered_only: Vec<String>,
}

impl Default for SequencerConfig {
    fn default() -> Self {
        SequencerConfig {
            timeout_ms: 2000,
            step_min: 1000,
            step_max: 1_000_000,
            step_target_secs: 60,
            max_keys: 100_000,
            key_idle_secs: 60,
            leaf_store: None,
            keep_tails: true,
            registered_only: Vec::new(),
        }
    }
}

/// A store name: 1 to 64 of `A-Z a-z 0-9 - _ .`.
pub fn valid_store_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

impl ServerConfig {
    /// Reads a TOML file: unknown keys and values of the wrong type are errors naming the file,
    /// the line and the key. The result is not yet [validated](Self::validate).
    ///
    /// # Errors
    /// `{file}: ...` in one line.
    pub fn from_file(path: &Path) -> Result<ServerConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        ServerConfig::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses TOML text (see [`from_file`](Self::from_file)).
    ///
    /// # Errors
    /// toml's message (line, column and key), on one line.
    pub fn from_toml(text: &str) -> Result<ServerConfig, String> {
        toml::from_str(text).map_err(|e: toml::de::Error| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let message = e.message().replace('\n', " ");
            match line {
                Some(l) => format!("line {l}: {message}"),
                None => message,
            }
        })
    }

    /// The configuration as TOML (`--print-config` prints [`to_toml_redacted`](Self::to_toml_redacted)).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot print: {e}\n"))
    }

    /// [`to_toml`](Self::to_toml) with the passwords of store and registry URLs shown as
    /// `****` (`floe serve --print-config`: printed configurations end up in tickets and logs).
    pub fn to_toml_redacted(&self) -> String {
        let mut shown = self.clone();
        for url in shown.stores.values_mut() {
            *url = floe_core::endpoint::redacted(url);
        }
        if let Some(url) = shown.registry.url.as_mut() {
            *url = floe_core::endpoint::redacted(url);
        }
        shown.to_toml()
    }

    /// The stores to open, by name: the configured ones, or `default = "embedded"`.
    pub fn store_specs(&self) -> BTreeMap<String, String> {
        if self.stores.is_empty() {
            BTreeMap::from([("default".to_string(), "embedded".to_string())])
        } else {
            self.stores.clone()
        }
    }

    /// The store Leaf's segment route serves: the configured one, else the only store, else
    /// `default` if there is one.
    pub fn leaf_store(&self) -> Option<String> {
        if let Some(s) = &self.sequencer.leaf_store {
            return Some(s.clone());
        }
        let specs = self.store_specs();
        if specs.len() == 1 {
            return specs.keys().next().cloned();
        }
        specs.contains_key("default").then(|| "default".to_string())
    }

    /// The host of this node's worker identity: `registry.host`, else the machine's name.
    pub fn identity_host(&self) -> String {
        self.registry
            .host
            .clone()
            .unwrap_or_else(|| gethostname::gethostname().to_string_lossy().into_owned())
    }

    /// The port of this node's worker identity: `registry.port`, else the one in the gRPC
    /// address, else in the HTTP address (not the port bound: an address on port 0 gives 0,
    /// the same at every restart).
    pub fn identity_port(&self) -> u16 {
        if let Some(p) = self.registry.port {
            return p;
        }
        [&self.listen.grpc, &self.listen.http]
            .into_iter()
            .filter(|a| a.as_str() != "off")
            .find_map(|a| a.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok()))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_core::snowflake::Layout;
    use floe_sequencer::Key;

    #[test]
    fn an_empty_file_is_the_default() {
        let c = ServerConfig::from_toml("").unwrap();
        assert_eq!(c, ServerConfig::default());
        c.validate().unwrap();
        assert_eq!(c.leaf_store().as_deref(), Some("default"));
    }

    #[test]
    fn printed_configuration_reads_back_the_same() {
        let mut c = ServerConfig::default();
        c.stores.insert("orders".into(), "postgres://x/y".into());
        c.snowflake.named.insert(
            "tw".into(),
            LayoutConfig {
                layout: "twitter".into(),
                ..LayoutConfig::default()
            },
        );
        c.bigger_than.insert("orders:o".into(), 100);
        let text = c.to_toml();
        let mut secret = c.clone();
        secret
            .stores
            .insert("pg".into(), "postgres://floe:s3cret@db:5432/floe".into());
        let shown = secret.to_toml_redacted();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("postgres://floe:****@db:5432/floe"),
            "{shown}"
        );
        assert_eq!(ServerConfig::from_toml(&text).unwrap(), c, "{text}");
    }

    #[test]
    fn unknown_keys_are_named_with_their_line() {
        let e = ServerConfig::from_toml("[listen]\ngrpc = \"off\"\nhtpp = \"x\"\n").unwrap_err();
        assert!(e.starts_with("line 3:"), "{e}");
        assert!(e.contains("htpp"), "{e}");
        let e = ServerConfig::from_toml("[limts]\n").unwrap_err();
        assert!(e.contains("limts"), "{e}");
        let e = ServerConfig::from_toml("[limits]\nmax_batch = -1\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
    }

    /// A long value is quoted in part, as every other error quotes a request or a setting.
    #[test]
    fn long_values_are_quoted_in_part() {
        let long = "a".repeat(100_000);
        let mut c = ServerConfig::default();
        c.listen.grpc = long.clone();
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("listen.grpc: ") && e.len() < 300,
            "{} bytes",
            e.len()
        );
        let mut c = ServerConfig::default();
        c.sequencer.leaf_store = Some(long);
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("sequencer.leaf_store: ") && e.len() < 300,
            "{} bytes",
            e.len()
        );
    }

    #[test]
    fn bad_values_are_named() {
        let check = |text: &str, key: &str| {
            let e = ServerConfig::from_toml(text)
                .unwrap()
                .validate()
                .unwrap_err();
            assert_eq!(e.key, key, "{e}");
        };
        check("[limits]\nmax_batch = 0\n", "limits.max_batch");
        check("[limits]\nmax_connections = 0\n", "limits.max_connections");
        check("[sequencer]\nstep_min = 0\n", "sequencer.step_min");
        check("[sequencer]\ntimeout_ms = 0\n", "sequencer.timeout_ms");
        check(
            "[sequencer]\nkey_idle_secs = 0\n",
            "sequencer.key_idle_secs",
        );
        check("[sequencer]\nmax_keys = 0\n", "sequencer.max_keys");
        check("[snowflake]\nlayout = \"nope\"\n", "snowflake.layout");
        check(
            "[snowflake.named.x]\nlayout = \"1/2\"\n",
            "snowflake.named.x.layout",
        );
        check("[stores]\n\"a b\" = \"memory\"\n", "stores.a b");
        check("[stores]\na = \"snowflake\"\nb = \"snowflake\"\n", "stores");
        check("[sequencer]\nleaf_store = \"x\"\n", "sequencer.leaf_store");
        check("[listen]\ngrpc = \"off\"\nhttp = \"off\"\n", "listen");
        check(
            "[sno]\nsequence_min = 9\nsequence_max = 8\n",
            "sno.sequence_min",
        );
        check("[bigger_than]\n\"\" = 5\n", "bigger_than.");
        check(
            "[limits]\nrequest_timeout_secs = 1\n",
            "limits.request_timeout_secs",
        );
        check("[tls]\ncert = \"c.pem\"\n", "tls.key");
        check("[tls]\nkey = \"k.pem\"\n", "tls.cert");
        check(
            "[auth]\nhealth_needs_token = true\n",
            "auth.health_needs_token",
        );
        check("[ids]\nkinds = [\"guid\"]\n", "ids.kinds");
        check("[ids]\nkinds = [\"sno\", \"sno\"]\n", "ids.kinds");
        check(
            "[ids]\nkinds = []\n[stores]\nx = \"snowflake\"\n",
            "ids.kinds",
        );
    }

    /// `above`: refused, naming the key and both numbers, when an ID issued now would not be
    /// above it or it is no ID of the layout; otherwise the floor's time unit is the
    /// generator's not-before.
    #[test]
    fn a_snowflake_floor_is_checked_against_now_and_the_layout() {
        let now = 1_795_604_294_672u64;
        let leaf = ((now - 1_288_834_974_657) << 22) | (5 << 12) | 7;
        let plan = |text: &str| ServerConfig::from_toml(text).unwrap().check(now);
        let e = plan(&format!("[snowflake]\nabove = {leaf}\n")).unwrap_err();
        assert_eq!(e.key, "snowflake.above", "{e}");
        assert!(e.to_string().contains(&leaf.to_string()), "{e}");
        let first = Layout::LEAF.smallest_id_at(now);
        assert!(e.to_string().contains(&first.to_string()), "{e}");
        let e =
            plan("[snowflake]\nlayout = \"js-safe\"\nabove = 1152921504606846976\n").unwrap_err();
        assert!(e.to_string().contains("no ID of this layout"), "{e}");
        let e = plan(&format!(
            "[snowflake.named.m]\nlayout = \"leaf\"\nabove = {leaf}\n"
        ))
        .unwrap_err();
        assert_eq!(e.key, "snowflake.named.m.above", "{e}");
        // Leaf's own layout a second later: above the floor, from the floor's millisecond on.
        let p = ServerConfig::from_toml(&format!(
            "[snowflake]\nlayout = \"meituan-leaf\"\nabove = {leaf}\n"
        ))
        .unwrap()
        .check(now + 1_000)
        .unwrap();
        assert_eq!(p.snowflakes[0].not_before_ms, Some(now));
        // The floor's own millisecond is no longer enough: its sequence 0 is not above it.
        let e = ServerConfig::from_toml(&format!(
            "[snowflake]\nlayout = \"meituan-leaf\"\nabove = {leaf}\n"
        ))
        .unwrap()
        .check(now)
        .unwrap_err();
        assert_eq!(e.key, "snowflake.above", "{e}");
    }

    #[test]
    fn bigger_than_applies_to_the_named_store_or_every_store() {
        let c = ServerConfig::from_toml(
            "[stores]\na = \"memory\"\nb = \"memory\"\n[bigger_than]\n\"a:k\" = 5\nall = 7\n\"c:x\" = 1\n",
        )
        .unwrap();
        let f = c.floors().unwrap();
        assert_eq!(f["a"].len(), 3);
        assert_eq!(f["b"].len(), 2, "{f:?}");
        // `c` is no store, so `c:x` is a key of every store.
        assert_eq!(f["b"][&Key::new("c:x").unwrap()], 1);
    }
}
