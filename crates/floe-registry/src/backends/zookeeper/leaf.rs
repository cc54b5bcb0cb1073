//! Leaf's layout of the `zookeeper` registry: `leaf+zk://host:port[,host:port...][/root]`, so
//! that a fleet of Meituan Leaf's Snowflake servers can move to floe node by node.
//!
//! **The URL and the identity.** A Leaf server keeps its worker ID in ZooKeeper at
//! `/snowflake/{leaf.name}/forever/{ip}:{port}-{sequence}`. floe reads and writes the same
//! nodes when its registry is `leaf+zk://` and its identity is the Leaf server's:
//!
//! | Leaf (`leaf.properties`) | floe (`floe serve`) |
//! |---|---|
//! | `leaf.zk.list=10.0.0.1:2181` | `--registry leaf+zk://10.0.0.1:2181` (root `/snowflake`) |
//! | `leaf.zk.list=10.0.0.1:2181/chroot` | `--registry leaf+zk://10.0.0.1:2181/chroot/snowflake` |
//! | `leaf.name=orders` | `--service orders` |
//! | `leaf.snowflake.port=8080` | `--port 8080` |
//! | the first non-loopback IPv4 address of the host | `--host 10.0.0.5` |
//!
//! The root is Leaf's fixed `/snowflake` (under the connect string's chroot, if any); its last
//! part must be `snowflake`, so that a `leaf.name` written into the URL is refused instead of
//! becoming another directory. The host must be an IPv4 address, as Leaf's is, and the port
//! not 0: a name with a `-` in the address part would break every Leaf server of the name
//! (Leaf splits each child's name at `-`). Other identities of the same server (`{service}-sno`,
//! `{service}-lexical`, a second Snowflake layout) get directories of their own names, which
//! no Leaf server reads.
//!
//! **Nodes.** Under `{root}/{service}`:
//! - `forever/{ip}:{port}-{10 digits}`: Leaf's nodes, **persistent sequential**; the worker
//!   ID is the sequence number. Data: exactly `{"ip":"10.0.0.5","port":"8080","timestamp":N}`
//!   (the port a JSON string, these three keys in this order, as Leaf's Jackson writes them),
//!   `timestamp` the holder's last time in Unix ms. floe creates and writes only such nodes.
//! - `floe/holders/{ip}:{port}`: **ephemeral**, the live floe holder of the identity (as in
//!   floe's layout): a second floe process with the same ip:port gets
//!   [`ErrorKind::Conflict`](crate::ErrorKind::Conflict). Leaf never reads `floe/`.
//! - `floe/workers/{ip}:{port}`: **persistent**, what floe keeps beside Leaf's three keys (its
//!   holder's registration number, window, whether it closed cleanly, its last time), written
//!   in the **same transaction** as every write floe makes to the ip:port's Leaf node. Both
//!   nodes then carry the same `mzxid`; a Leaf node whose `mzxid` differs from its side node's
//!   (or that has none) was last written by someone else: a Leaf server.
//!
//! **A floe node with a Leaf node's ip:port takes that node's worker ID** (and its
//! timestamp as the record's last time, so the lease's `not_before_ms` is at or after it,
//! and after the moment the node was taken). Leaf keeps no liveness node, so before it takes a
//! node a Leaf server wrote last, floe checks that no Leaf server still heartbeats it (Leaf
//! writes its timestamp every [`LEAF_HEARTBEAT`], 3 s): the takeover is refused with
//! `Conflict`, naming the node and saying to stop the Leaf server first, when
//! - its `timestamp` is less than [`LeafGuard::quiet`] (**10 s**: three heartbeats and 1 s)
//!   behind floe's clock, or ahead of it; or
//! - the node is written while floe watches it for [`LeafGuard::watch`] (**7 s**: two
//!   heartbeats and 1 s) after that (a ZooKeeper watch, and the node's version compared at the
//!   end), which holds whatever the clocks say;
//! - and the write that takes it is a compare-and-set on the version watched.
//!
//! A start-up refused this way is tried again for the lease's `conflict_wait` (10 s), so a
//! floe started right after its Leaf server was stopped takes the node about 10 s after the
//! Leaf server's last heartbeat, plus the 7 s watch. A Leaf server that is running but cut off
//! from ZooKeeper writes nothing and cannot be told from a stopped one: stopping it is the
//! operator's part. A Leaf server has no window for floe to wait out after the watch: the
//! registration has no takeover wait, and its lease starts after the moment it took the
//! node (and after the node's timestamp plus a heartbeat and a window). Once floe wrote the
//! node, floe's own rules hold (the holder node, the window, the takeover wait of
//! [`crate::terms`]); a Leaf server that writes the node again while floe holds it makes
//! floe's next heartbeat fail with `Conflict` and fences floe's generators for good.
//!
//! **A new floe node never takes a worker ID a Leaf node holds**: it creates its own
//! persistent sequential `forever/{ip}:{port}-` with Leaf's data (and its side node, in one
//! transaction), and its worker ID is the sequence number ZooKeeper gave, unique by
//! construction (a deleted node's number is never given again). A number outside the
//! layout's worker IDs (Leaf: 0 to 1023) is refused with
//! [`ErrorKind::SpaceFull`](crate::ErrorKind::SpaceFull) and the node deleted again.
//! `reclaim_after` cannot take another ip:port's ID in this layout (a node's name is its
//! ip:port).
//!
//! **What a Leaf server sees.** Every child of `forever` is Leaf-shaped; floe's heartbeats
//! write `timestamp` = the last time the lease recorded (the later of the generators' last
//! issued time and the clock), which Leaf's start-up check (`timestamp <= now`) respects: a
//! Leaf server started on a floe node's ip:port after floe stopped reuses its worker ID and
//! issues only after that time (if its clock is behind, Leaf refuses to start, or falls back
//! to its local `workerID.properties`: a Leaf behaviour floe cannot change). Leaf servers
//! started after floe nodes take new sequence numbers, never floe's.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError, MultiWriteError, Stat};

use floe_core::clock::{Clock, SystemClock, NANOS_PER_MILLI};

use super::records::ATTEMPTS;
use super::{address_node, map_err, NodeVersion};
use crate::{ErrorKind, IdSpace, Identity, RegistryError, WorkerRecord};

/// How often a Leaf server writes its node's timestamp (`scheduleWithFixedDelay`, 3 s).
pub const LEAF_HEARTBEAT: Duration = Duration::from_secs(3);

/// Leaf's fixed directory (`/snowflake/{leaf.name}`): the root of a `leaf+zk://` URL that names
/// none.
pub const LEAF_ROOT: &str = "/snowflake";

/// When floe takes a node a Leaf server wrote last (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafGuard {
    /// Taken only when its `timestamp` is at least this far behind floe's clock (10 s: three
    /// of Leaf's heartbeats and 1 s).
    pub quiet: Duration,
    /// And only after the node then stayed unwritten for this long, watched (7 s: two of
    /// Leaf's heartbeats and 1 s).
    pub watch: Duration,
}

impl LeafGuard {
    /// The guard's defaults: 10 s quiet, 7 s watched.
    pub const DEFAULT: LeafGuard = LeafGuard {
        quiet: Duration::from_secs(10),
        watch: Duration::from_secs(7),
    };
}

impl Default for LeafGuard {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Checks a root for Leaf's layout: its last part is Leaf's `snowflake`.
///
/// # Errors
/// [`ErrorKind::Config`] naming the field `registry`.
pub(crate) fn check_root(root: &str) -> Result<(), RegistryError> {
    if root.ends_with(LEAF_ROOT) {
        return Ok(());
    }
    let hint = match root.rsplit_once('/') {
        Some((parent, name)) if parent.ends_with(LEAF_ROOT) => format!(
            ": give leaf.name {} as the service (--service, registry.service), not in the URL",
            floe_core::endpoint::quoted(name)
        ),
        _ => String::new(),
    };
    Err(RegistryError::config(format!(
        "registry: the root of a leaf+zk:// URL is Leaf's {LEAF_ROOT} directory (under a chroot: /chroot{LEAF_ROOT}), found {}{hint}",
        floe_core::endpoint::quoted(root)
    )))
}

/// Checks that `identity` names a node as Leaf does: an IPv4 address and a port.
///
/// # Errors
/// [`ErrorKind::Config`] naming the field.
pub(super) fn check_identity(identity: &Identity) -> Result<(), RegistryError> {
    if identity.host.parse::<std::net::Ipv4Addr>().is_err() {
        return Err(RegistryError::config(format!(
            "host: Leaf's nodes are named by the IPv4 address of the Leaf server (its first non-loopback IPv4): give it with --host (registry.host), found {}",
            floe_core::endpoint::quoted(&identity.host)
        )));
    }
    if identity.port == 0 {
        return Err(RegistryError::config(
            "port: Leaf's nodes are named by leaf.snowflake.port: give it with --port (registry.port), found 0",
        ));
    }
    Ok(())
}

/// `{root}/{service}/forever`: Leaf's nodes.
pub(super) fn forever(root: &str, service: &str) -> String {
    format!("{root}/{service}/forever")
}

/// `{root}/{service}/floe/holders`: floe's ephemeral holder nodes.
fn holders(root: &str, service: &str) -> String {
    format!("{root}/{service}/floe/holders")
}

/// `{root}/{service}/floe/workers`: floe's side records.
fn sides(root: &str, service: &str) -> String {
    format!("{root}/{service}/floe/workers")
}

/// The directories a registration needs: Leaf's (`forever`, and the nodes above it), which
/// must stay open to Leaf's servers, and floe's own.
pub(super) fn dirs(root: &str, service: &str) -> ([String; 1], [String; 2]) {
    (
        [forever(root, service)],
        [holders(root, service), sides(root, service)],
    )
}

/// The holder node of `identity`.
pub(super) fn holder(root: &str, identity: &Identity) -> String {
    address_node(&holders(root, &identity.service), identity)
}

/// The side record of `identity`.
fn side(root: &str, identity: &Identity) -> String {
    address_node(&sides(root, &identity.service), identity)
}

/// What a Leaf node's name starts with: `{forever}/{ip}:{port}-`.
fn prefix(root: &str, identity: &Identity) -> String {
    address_node(&forever(root, &identity.service), identity) + "-"
}

/// The Leaf node of `identity` with worker ID `id`: ZooKeeper's ten digits.
pub(super) fn node(root: &str, identity: &Identity, id: u32) -> String {
    format!("{}{id:010}", prefix(root, identity))
}

/// Leaf's node data, field for field (Leaf's `Endpoint`, written by Jackson).
#[derive(Serialize)]
struct Endpoint<'a> {
    ip: &'a str,
    port: String,
    timestamp: u64,
}

/// Leaf's node data for `identity` last alive at `timestamp`.
fn endpoint(identity: &Identity, timestamp: u64) -> Result<Vec<u8>, RegistryError> {
    serde_json::to_vec(&Endpoint {
        ip: &identity.host,
        port: identity.port.to_string(),
        timestamp,
    })
    .map_err(|e| {
        RegistryError::new(
            ErrorKind::Corrupt,
            format!("cannot encode a Leaf node: {e}"),
        )
    })
}

/// What floe reads of a Leaf node's data.
#[derive(Deserialize)]
struct Recorded {
    timestamp: u64,
}

/// The `timestamp` of the Leaf node `path`.
fn timestamp(path: &str, data: &[u8]) -> Result<u64, RegistryError> {
    serde_json::from_slice::<Recorded>(data)
        .map(|r| r.timestamp)
        .map_err(|e| {
            RegistryError::new(
                ErrorKind::Corrupt,
                format!(
                    "zookeeper: {path} is not a Leaf node's data (expected {{\"ip\":...,\"port\":...,\"timestamp\":MS}}): {e}"
                ),
            )
        })
}

/// floe's side record of an ip:port: what a Leaf node has no place for.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Side {
    /// The last time floe recorded (kept should a Leaf server write the node after floe).
    last_time_ms: u64,
    /// [`WorkerRecord::holder`].
    holder: u64,
    /// [`WorkerRecord::window_ms`].
    window_ms: u64,
    /// [`WorkerRecord::closed`].
    closed: bool,
    /// [`WorkerRecord::layout`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    layout: Option<String>,
    /// [`WorkerRecord::rule`].
    #[serde(default, skip_serializing_if = "is_zero")]
    rule: u32,
    /// [`WorkerRecord::reach_ms`].
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    reach_ms: u64,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Side {
    fn of(record: &WorkerRecord) -> Result<Vec<u8>, RegistryError> {
        serde_json::to_vec(&Side {
            last_time_ms: record.last_time_ms,
            holder: record.holder,
            window_ms: record.window_ms,
            closed: record.closed,
            layout: record.layout.clone(),
            rule: record.rule,
            reach_ms: record.reach_ms,
        })
        .map_err(|e| RegistryError::new(ErrorKind::Corrupt, format!("cannot encode a record: {e}")))
    }

    fn decode(path: &str, data: &[u8]) -> Result<Side, RegistryError> {
        serde_json::from_slice(data).map_err(|e| {
            RegistryError::new(
                ErrorKind::Corrupt,
                format!("zookeeper: {path} is not floe's record of a Leaf node: {e}"),
            )
        })
    }
}

/// The identity and worker ID a child of `forever` names: `{ip}:{port}-{digits}`.
///
/// # Errors
/// [`ErrorKind::Corrupt`] naming the node: Leaf's own start-up fails on such a child too.
fn parse_child(
    forever: &str,
    service: &str,
    child: &str,
) -> Result<(Identity, u32), RegistryError> {
    let parsed = child.split_once('-').and_then(|(address, sequence)| {
        let (host, port) = address.rsplit_once(':')?;
        let digits = !sequence.is_empty()
            && sequence.len() <= 10
            && sequence.bytes().all(|b| b.is_ascii_digit());
        let port = port
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| port.parse::<u16>().ok())
            .flatten()?;
        let id = digits.then(|| sequence.parse::<u32>().ok()).flatten()?;
        (!host.is_empty()).then(|| (Identity::new(service, host, port), id))
    });
    parsed.ok_or_else(|| {
        RegistryError::new(
            ErrorKind::Corrupt,
            format!(
                "zookeeper: {forever}/{child} is not a Leaf worker node (expected {{ip}}:{{port}}-{{sequence}}); Leaf's own start-up fails on it too: remove it"
            ),
        )
    })
}

/// What the read of `path` answered: its data and stat, `None` when it does not exist.
fn found(
    path: &str,
    read: Result<(Vec<u8>, Stat), ZkError>,
) -> Result<Option<(Vec<u8>, Stat)>, RegistryError> {
    match read {
        Ok(found) => Ok(Some(found)),
        Err(ZkError::NoNode) => Ok(None),
        Err(e) => Err(map_err(&format!("read {path}"), e)),
    }
}

/// The record of Leaf node `path` (worker ID `id` of `identity`), with the ip:port's side
/// record if floe has one (`side_path`).
fn record_of(
    identity: &Identity,
    id: u32,
    (path, data, stat): (&str, &[u8], &Stat),
    side: Option<(&str, &[u8], &Stat)>,
) -> Result<(WorkerRecord, NodeVersion), RegistryError> {
    let timestamp = timestamp(path, data)?;
    let side = side
        .map(|(side_path, data, side_stat)| Side::decode(side_path, data).map(|s| (s, side_stat)))
        .transpose()?;
    // Written by floe last: in the same transaction as its side record.
    let ours = side.as_ref().filter(|(_, s)| s.mzxid == stat.mzxid);
    let record = match ours {
        Some((side, _)) => WorkerRecord {
            id,
            identity: identity.clone(),
            last_time_ms: timestamp.max(side.last_time_ms),
            window_ms: side.window_ms,
            closed: side.closed,
            holder: side.holder,
            layout: side.layout.clone(),
            rule: side.rule,
            reach_ms: side.reach_ms,
        },
        // A Leaf server's: no holder, no window, not closed, Meituan Leaf's layout; its
        // timestamp, or the last time floe recorded before it if that is later.
        None => WorkerRecord {
            layout: IdSpace::snowflake(&floe_core::snowflake::Layout::MEITUAN_LEAF).layout_text(),
            ..WorkerRecord::new(
                id,
                identity.clone(),
                timestamp.max(side.as_ref().map_or(0, |(s, _)| s.last_time_ms)),
            )
        },
    };
    let version = NodeVersion {
        node: stat.version,
        side: side.as_ref().map(|(_, s)| s.version),
        foreign: ours.is_none(),
    };
    Ok((record, version))
}

/// [`VersionedRecords::read`](super::VersionedRecords::read): the Leaf node of `identity`
/// with worker ID `id`. Its side record is asked for in the same breath (each request goes out
/// when it is made): a heartbeat's read is one round trip, not two.
pub(super) async fn read(
    client: &Client,
    root: &str,
    identity: &Identity,
    id: u32,
) -> Result<Option<(WorkerRecord, NodeVersion)>, RegistryError> {
    let (path, side_path) = (node(root, identity, id), side(root, identity));
    let (node_read, side_read) = (client.get_data(&path), client.get_data(&side_path));
    let Some((data, stat)) = found(&path, node_read.await)? else {
        return Ok(None);
    };
    let side = found(&side_path, side_read.await)?;
    let side = side
        .as_ref()
        .map(|(d, s)| (side_path.as_str(), d.as_slice(), s));
    record_of(identity, id, (&path, &data, &stat), side).map(Some)
}

/// [`VersionedRecords::read_all`](super::VersionedRecords::read_all): every Leaf node of
/// `service`, and each ip:port's side record once (the reads pipelined on the session's
/// connection: each request goes out when it is made, the answers come in order).
pub(super) async fn read_all(
    client: &Client,
    root: &str,
    service: &str,
) -> Result<Vec<(WorkerRecord, NodeVersion)>, RegistryError> {
    let dir = forever(root, service);
    let children = match client.list_children(&dir).await {
        Ok(c) => c,
        Err(ZkError::NoNode) => return Ok(Vec::new()),
        Err(e) => return Err(map_err(&format!("list {dir}"), e)),
    };
    let mut nodes = Vec::with_capacity(children.len());
    for child in &children {
        let (identity, id) = parse_child(&dir, service, child)?;
        nodes.push((
            format!("{dir}/{child}"),
            side(root, &identity),
            identity,
            id,
        ));
    }
    let node_reads: Vec<_> = nodes
        .iter()
        .map(|(path, ..)| client.get_data(path))
        .collect();
    let mut side_reads = std::collections::HashMap::new();
    for (_, side_path, ..) in &nodes {
        side_reads
            .entry(side_path.as_str())
            .or_insert_with(|| client.get_data(side_path));
    }
    let mut sides = std::collections::HashMap::new();
    for (side_path, read) in side_reads {
        if let Some(side) = found(side_path, read.await)? {
            sides.insert(side_path, side);
        }
    }
    let mut records = Vec::with_capacity(nodes.len());
    for ((path, side_path, identity, id), read) in nodes.iter().zip(node_reads) {
        let Some((data, stat)) = found(path, read.await)? else {
            continue; // deleted meanwhile
        };
        let side = sides
            .get(side_path.as_str())
            .map(|(d, s)| (side_path.as_str(), d.as_slice(), s));
        records.push(record_of(identity, *id, (path, &data, &stat), side)?);
    }
    Ok(records)
}

/// [`VersionedRecords::create_new`](super::VersionedRecords::create_new): a new Leaf node
/// `{ip}:{port}-` (persistent sequential) and its side record, in one transaction; the worker
/// ID is the sequence number ZooKeeper gave.
///
/// # Errors
/// [`ErrorKind::SpaceFull`] when that number is outside `space` (the nodes are deleted
/// again).
///
/// The Leaf node is open to anyone, as Leaf's own are (Leaf's servers read every node of
/// `forever` and write their own: a creator-only node would lock them out); the side record
/// gets `acls` (creator-only when the registry has credentials).
pub(super) async fn create_new(
    client: &Client,
    root: &str,
    template: &WorkerRecord,
    space: IdSpace,
    acls: Acls<'static>,
) -> Result<Option<WorkerRecord>, RegistryError> {
    let identity = &template.identity;
    let prefix = prefix(root, identity);
    let side_path = side(root, identity);
    let data = endpoint(identity, template.last_time_ms)?;
    let side_data = Side::of(template)?;
    let sequential = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
    let persistent = CreateMode::Persistent.with_acls(acls);
    let what = |e: ZkError| map_err(&format!("create {prefix}..."), e);
    for _ in 0..ATTEMPTS {
        // A side record left by an earlier node of the ip:port (deleted since) is rewritten.
        let existing = client
            .check_stat(&side_path)
            .await
            .map_err(|e| map_err(&format!("read {side_path}"), e))?;
        let mut txn = client.new_multi_writer();
        txn.add_create(&prefix, &data, &sequential)
            .and_then(|()| match existing {
                Some(stat) => txn.add_set_data(&side_path, &side_data, Some(stat.version)),
                None => txn.add_create(&side_path, &side_data, &persistent),
            })
            .map_err(what)?;
        let created = match txn.commit().await {
            Ok(results) => results,
            // The side record changed meanwhile: look again.
            Err(MultiWriteError::OperationFailed {
                source: ZkError::NodeExists | ZkError::BadVersion | ZkError::NoNode,
                ..
            }) => continue,
            Err(e) => return Err(what(e.into())),
        };
        let path = match created.into_iter().next() {
            Some(zookeeper_client::MultiWriteResult::Create { path, .. }) => path,
            other => {
                return Err(RegistryError::new(
                    ErrorKind::Corrupt,
                    format!("zookeeper: create {prefix}...: unexpected answer {other:?}"),
                ))
            }
        };
        let id = path
            .strip_prefix(&prefix)
            .and_then(|n| n.parse::<u32>().ok())
            .ok_or_else(|| {
                RegistryError::new(
                    ErrorKind::Corrupt,
                    format!("zookeeper: created {path}, not a sequence number after {prefix}"),
                )
            })?;
        if id >= space.size {
            return Err(outside_the_layout(client, &path, &side_path, identity, id, space).await);
        }
        return Ok(Some(WorkerRecord {
            id,
            ..template.clone()
        }));
    }
    Err(RegistryError::new(
        ErrorKind::Unavailable,
        format!("zookeeper: {side_path} changed under {ATTEMPTS} attempts in a row"),
    ))
}

/// The error of a new Leaf node whose sequence number `id` is outside `space`, after deleting
/// it and its side record again: not left for Leaf to find (a Leaf server with this ip:port
/// would take it and fail: Leaf allows 0 to 1023). The sequence number is never given again.
async fn outside_the_layout(
    client: &Client,
    path: &str,
    side_path: &str,
    identity: &Identity,
    id: u32,
    space: IdSpace,
) -> RegistryError {
    let mut txn = client.new_multi_writer();
    let undone = match txn
        .add_delete(path, None)
        .and_then(|()| txn.add_delete(side_path, None))
    {
        Ok(()) => txn.commit().await.map(drop).map_err(ZkError::from),
        Err(e) => Err(e),
    };
    let undone = match undone {
        Ok(()) => "deleted again".to_string(),
        Err(e) => format!("could not be deleted again ({e}): delete it by hand"),
    };
    RegistryError::new(
        ErrorKind::SpaceFull,
        format!(
            "no worker ID for {identity}: ZooKeeper gave the new Leaf node {path} the sequence number {id}, outside the layout's worker IDs 0 to {} (Leaf's are 0 to 1023); the node was {undone}. Every number below it was given to a node once: reuse the ip:port of a node that is no longer in use (it keeps its ID), or start a new leaf.name",
            space.size.saturating_sub(1)
        ),
    )
}

/// Adds to `txn` the writes of `record` over `version`: its Leaf node and its side record
/// (created with `acls` if it has none).
fn add_writes(
    txn: &mut zookeeper_client::MultiWriter<'_>,
    root: &str,
    record: &WorkerRecord,
    version: NodeVersion,
    acls: Acls<'static>,
    node_data: &[u8],
    side_data: &[u8],
) -> Result<(), ZkError> {
    let side_path = side(root, &record.identity);
    txn.add_set_data(
        &node(root, &record.identity, record.id),
        node_data,
        Some(version.node),
    )?;
    match version.side {
        Some(v) => txn.add_set_data(&side_path, side_data, Some(v)),
        None => txn.add_create(
            &side_path,
            side_data,
            &CreateMode::Persistent.with_acls(acls),
        ),
    }
}

/// [`VersionedRecords::replace`](super::VersionedRecords::replace): the Leaf node (Leaf's
/// three keys, the record's last time as `timestamp`) and its side record (created with `acls`
/// if it has none), in one transaction.
pub(super) async fn replace(
    client: &Client,
    root: &str,
    record: &WorkerRecord,
    version: NodeVersion,
    acls: Acls<'static>,
) -> Result<bool, RegistryError> {
    let path = node(root, &record.identity, record.id);
    let (node_data, side_data) = (
        endpoint(&record.identity, record.last_time_ms)?,
        Side::of(record)?,
    );
    let mut txn = client.new_multi_writer();
    add_writes(
        &mut txn, root, record, version, acls, &node_data, &side_data,
    )
    .map_err(|e| map_err(&format!("write {path}"), e))?;
    match txn.commit().await {
        Ok(_) => Ok(true),
        Err(MultiWriteError::OperationFailed {
            source: ZkError::BadVersion | ZkError::NoNode | ZkError::NodeExists,
            ..
        }) => Ok(false),
        Err(e) => Err(map_err(&format!("write {path}"), e.into())),
    }
}

/// [`VersionedRecords::delete`](super::VersionedRecords::delete): the Leaf node and the side
/// record, in one transaction.
pub(super) async fn delete(
    client: &Client,
    root: &str,
    record: &WorkerRecord,
    version: NodeVersion,
) -> Result<bool, RegistryError> {
    let path = node(root, &record.identity, record.id);
    let mut txn = client.new_multi_writer();
    txn.add_delete(&path, Some(version.node))
        .and_then(|()| match version.side {
            Some(v) => txn.add_delete(&side(root, &record.identity), Some(v)),
            None => Ok(()),
        })
        .map_err(|e| map_err(&format!("delete {path}"), e))?;
    match txn.commit().await {
        Ok(_) => Ok(true),
        Err(MultiWriteError::OperationFailed {
            source: ZkError::BadVersion | ZkError::NoNode,
            ..
        }) => Ok(false),
        Err(e) => Err(map_err(&format!("delete {path}"), e.into())),
    }
}

/// The error of a takeover refused because a Leaf server may still be running.
fn still_running(path: &str, own: &WorkerRecord, why: &str, guard: LeafGuard) -> RegistryError {
    let address = format!("{}:{}", own.identity.host, own.identity.port);
    RegistryError::new(
        ErrorKind::Conflict,
        format!(
            "zookeeper: Leaf node {path} (worker ID {} of {address}) {why}: the Leaf server of {address} may still be running with that worker ID. Stop it first: floe takes a Leaf node once its timestamp is {} s behind floe's clock and the node then stays unwritten for {} s",
            own.id,
            guard.quiet.as_secs_f64(),
            guard.watch.as_secs_f64()
        ),
    )
}

/// [`VersionedRecords::check_own`](super::VersionedRecords::check_own): before a node a Leaf
/// server wrote last is taken, its timestamp must be quiet and the node unwritten while
/// watched ([`LeafGuard`]). A node floe wrote last passes as it is.
///
/// # Errors
/// [`ErrorKind::Conflict`] naming the node, when a Leaf server may still be running.
pub(super) async fn check_own(
    client: &Client,
    root: &str,
    guard: LeafGuard,
    own: &WorkerRecord,
    version: NodeVersion,
) -> Result<NodeVersion, RegistryError> {
    if !version.foreign {
        return Ok(version);
    }
    let path = node(root, &own.identity, own.id);
    let now_ms = SystemClock.now_nanos() / NANOS_PER_MILLI;
    let quiet_ms = u64::try_from(guard.quiet.as_millis()).unwrap_or(u64::MAX);
    if own.last_time_ms.saturating_add(quiet_ms) > now_ms {
        let why = match now_ms.checked_sub(own.last_time_ms) {
            Some(age) => format!(
                "has the timestamp {}, {age} ms behind floe's clock",
                own.last_time_ms
            ),
            None => format!(
                "has the timestamp {}, {} ms ahead of floe's clock",
                own.last_time_ms,
                own.last_time_ms.saturating_sub(now_ms)
            ),
        };
        return Err(still_running(&path, own, &why, guard));
    }
    let watched = async {
        loop {
            let (stat, watcher) = client
                .check_and_watch_stat(&path)
                .await
                .map_err(|e| map_err(&format!("watch {path}"), e))?;
            match stat {
                // Gone: the write that follows fails, and the registration looks again.
                None => return Ok(()),
                Some(stat) if stat.version != version.node => {
                    return Err(still_running(
                        &path,
                        own,
                        "was written again while floe watched it",
                        guard,
                    ))
                }
                Some(_) => {}
            }
            // A change (or a session event): look again.
            let _ = watcher.changed().await;
        }
    };
    // Unwritten for the whole watch (tokio's timeout takes any length: no deadline to
    // overflow). A write after it fails the compare-and-set on `version` that takes the node.
    match tokio::time::timeout(guard.watch, watched).await {
        Ok(Err(e)) => Err(e),
        Ok(Ok(())) | Err(_) => Ok(version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who() -> Identity {
        Identity::new("orders", "10.0.0.5", 8080)
    }

    #[test]
    fn a_node_is_named_and_written_as_leaf_writes_it() {
        assert_eq!(
            node("/snowflake", &who(), 3),
            "/snowflake/orders/forever/10.0.0.5:8080-0000000003"
        );
        assert_eq!(
            holder("/snowflake", &who()),
            "/snowflake/orders/floe/holders/10.0.0.5:8080"
        );
        assert_eq!(
            endpoint(&who(), 1_712_345_678_901).unwrap(),
            br#"{"ip":"10.0.0.5","port":"8080","timestamp":1712345678901}"#
        );
        let data = br#"{"ip":"10.0.0.5","port":"8080","timestamp":1712345678901}"#;
        assert_eq!(timestamp("n", data).unwrap(), 1_712_345_678_901);
    }

    #[test]
    fn children_are_read_as_leaf_reads_them_and_others_named() {
        let f = "/snowflake/orders/forever";
        assert_eq!(
            parse_child(f, "orders", "10.0.0.5:8080-0000000003").unwrap(),
            (who(), 3)
        );
        assert_eq!(
            parse_child(f, "orders", "10.0.0.5:8080-0000001023")
                .unwrap()
                .1,
            1023
        );
        for bad in [
            "10.0.0.5:8080",
            "10.0.0.5:8080-",
            "10.0.0.5-0000000003",
            "10.0.0.5:80x-0000000003",
            "10.0.0.5:70000-0000000003",
            ":8080-0000000003",
            "10.0.0.5:8080-00000000x3",
            "10.0.0.5:8080-99999999999",
            "my-host:8080-0000000003",
        ] {
            let e = parse_child(f, "orders", bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Corrupt, "{bad}");
            assert!(e.message.contains(&format!("{f}/{bad}")), "{e}");
        }
        let e = timestamp("/x", br#"{"ip":"1.2.3.4","port":"1"}"#).unwrap_err();
        assert!(e.message.contains("/x is not a Leaf node's data"), "{e}");
    }

    #[test]
    fn identities_and_roots_are_leafs_or_refused_naming_the_field() {
        check_identity(&who()).unwrap();
        let e = check_identity(&Identity::new("orders", "my-host", 8080)).unwrap_err();
        assert!(e.message.starts_with("host: "), "{e}");
        let e = check_identity(&Identity::new("orders", "10.0.0.5", 0)).unwrap_err();
        assert!(e.message.starts_with("port: "), "{e}");
        check_root("/snowflake").unwrap();
        check_root("/chroot/snowflake").unwrap();
        let e = check_root("/snowflake/orders").unwrap_err();
        assert!(
            e.message
                .contains("give leaf.name \"orders\" as the service"),
            "{e}"
        );
        let e = check_root("/floe").unwrap_err();
        assert!(e.message.contains("Leaf's /snowflake directory"), "{e}");
    }
}
