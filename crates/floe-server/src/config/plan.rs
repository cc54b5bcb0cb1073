//! A configuration checked ([`Plan`]): what [`crate::Server::start`] builds from, each value
//! read once and typed, nothing left to parse.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use floe_core::scramble::Domain;
use floe_core::snowflake::Layout;
use floe_core::template::Template;
use floe_sequencer::{Key, KeyLimits, ServeOptions};

use super::ServerConfig;
use crate::ids::IdKind;
use crate::Limits;

/// A configuration, checked.
#[derive(Debug, Clone)]
pub struct Plan {
    /// What it was checked from: the files it names (TLS, tokens, scramble keys) are read at
    /// start-up, and the registry's settings are passed to it as they are.
    pub config: ServerConfig,
    /// The state directory.
    pub state_dir: PathBuf,
    /// Where to listen.
    pub listen: Listeners,
    /// The ID kinds served, in [`IdKind::ALL`]'s order.
    pub kinds: Vec<IdKind>,
    /// The Snowflake generators, the default one (`default`) first.
    pub snowflakes: Vec<SnowflakePlan>,
    /// Connection bounds.
    pub limits: Limits,
    /// The most IDs one request may ask for.
    pub max_batch: u32,
    /// The longest a generator may wait within one request.
    pub max_wait: Duration,
    /// How stores serve.
    pub serve: ServeOptions,
    /// Keys held in memory.
    pub key_limits: KeyLimits,
    /// The stores, by name, in name order.
    pub stores: Vec<(String, StoreUrl)>,
    /// `bigger_than`, by store.
    pub floors: BTreeMap<String, BTreeMap<Key, i64>>,
    /// The store Leaf's segment route serves.
    pub leaf_store: Option<String>,
    /// Named templates, parsed.
    pub templates: BTreeMap<String, Template>,
    /// The numbers `{seq:scrambled}` and `?scramble=true` scramble.
    pub scramble_domain: Domain,
}

/// One Snowflake generator, checked.
#[derive(Debug, Clone)]
pub struct SnowflakePlan {
    /// Its name (`default`, or a name of `[snowflake.named]`).
    pub name: String,
    /// Its layout, able to issue at the moment of the check.
    pub layout: Layout,
    /// With a floor (`above`): the Unix millisecond at or before which it issues nothing (the
    /// floor's own time unit), so that every ID is above the floor.
    pub not_before_ms: Option<u64>,
    /// A new time unit's first sequence is random below this (`random_start`; 0: always 0).
    pub random_start: u64,
}

impl Plan {
    /// Whether `kind` is served.
    pub fn serves(&self, kind: IdKind) -> bool {
        self.kinds.contains(&kind)
    }
}

/// The listeners' addresses (`None`: off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listeners {
    /// gRPC, `HOST:PORT`.
    pub grpc: Option<String>,
    /// HTTP, `HOST:PORT`.
    pub http: Option<String>,
}

/// A store to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// WEAK IDs from the server's default Snowflake generator.
    Snowflake,
    /// A store URL whose scheme this build opens (`embedded`, `redis://...`).
    Url(String),
}

/// Something start-up says that is not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// For the record (a clock waited for, WEAK tails served first).
    Info(String),
    /// Worth an operator's look (a node's own store in a fleet).
    Warning(String),
}
