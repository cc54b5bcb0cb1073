//! The `zookeeper` registry (ZooKeeper 3.5+): `zk://host:port[,host:port...]/root`.
//!
//! Nodes, all under the root (default `/floe`):
//! - `{root}/{service}/workers/{id}`: **persistent**, one per allocated ID, holding the
//!   [`WorkerRecord`] as JSON (identity, last time). Unlike Leaf's ephemeral-free scheme and
//!   Layotto's ephemeral counters, nothing here is lost with a session.
//! - `{root}/{service}/holders/{host}:{port}`: **ephemeral**, created by the live holder of an
//!   identity, so that a second process with the same identity gets [`ErrorKind::Conflict`]
//!   instead of the same ID. It goes when the holder's session closes (at once on a clean exit,
//!   after the session timeout on a crash).
//!
//! **Race-free allocation:** a new ID is taken by `create` of its worker node, which fails
//! with `NodeExists` if another process took it first; the loser tries the next free ID.
//! Heartbeats `setData` the worker node with the version just read, so a record that changed
//! hands (released and re-registered) is never overwritten.
//!
//! **The local window.** Every `T/6` (1 s for the default 6 s session) a keeper task writes
//! the holder nodes of the session's claims in one transaction (each node names its
//! registration's number). A write only commits while the leader holds the session valid, so
//! each one answered moves the claims' fence deadlines to the moment it was *sent* plus the
//! window `W = H - H/10` of the reach ([`crate::terms`]): a process that was paused, or cut off
//! (connections refused, or a blackhole where nothing closes), stops issuing IDs on its own
//! clock `W` after its last confirmed write, whatever its client has or has not noticed, and a
//! process that takes its ID over waits `H + H/10` from the moment it found the holder node
//! gone. Pings do not count: a follower answers them itself, even when the leader no longer
//! hears from it.
//!
//! **A connection lost is connected again by the keeper.** The client's own reconnects back
//! off exponentially (after a refused cut of 3.7 s its next try came 6.3 s after the cut,
//! past a 6 s session), so once the client has been disconnected for `T/6` the keeper also
//! tries, every 250 ms, to connect the same session on a new client, and puts it in the old
//! one's place: the session, its holder nodes and every claim stand. Sessions are therefore
//! detached (a client left behind must not end the session when it gets through and finds
//! itself dropped); the registry ends its session itself when it goes.
//!
//! **A session that expires** (the server ended it, or the client gave up) takes the holder
//! nodes with it, so another process may claim the identity (and wait out the reach before it
//! issues). Generation goes on until the window of the last confirmation ends (lease rule 2);
//! the keeper opens a new session and holds each ID again: it re-creates the holder node under
//! the new session and checks that the worker record is still the identity's, still this
//! registration's, not closed, and that its last time is not past the last time this process
//! recorded (else another process used the ID meanwhile). A holder node that names this
//! registration under another session (this process's ended session, restored by a restarted
//! server; or the session of the process this one continues, [`crate::continuation`]) is
//! waited out. The record is not rewritten, so its last time never moves back. An ID that
//! turned out to be someone else's, or whose record is gone, is fenced for good, and every
//! heartbeat says why.
//!
//! **A takeover waits.** A process that takes over an ID whose last holder did not close it
//! cleanly (the same identity on a fresh state directory, or `reclaim_after`) waits that
//! holder's reach plus a margin ([`LeaseTerms::takeover_wait`]) before its first ID, counted
//! from the moment it found the ID free: after every write the old holder had confirmed (the
//! leader may expire a session at any time, even before it heard of the follower's writes).
//!
//! **Leaf's layout** (`leaf+zk://`, [`leaf`]): the same sessions, keeper, claims, fences and
//! takeover rules, with the records in Meituan Leaf's nodes
//! (`/snowflake/{leaf.name}/forever/{ip}:{port}-{sequence}`) instead of `workers/{id}`: only
//! where the records live and how they are encoded differs.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zookeeper_client::{Client, Error as ZkError};

use floe_core::endpoint::Credentials;

// Reached from `connect` as `super::check_servers`.
use super::check_servers;
use super::records::{self, Claim, Claims};
use crate::terms::LeaseTerms;
use crate::{ErrorKind, Identity, RegistryError};

mod access;
mod connect;
mod keeper;
pub mod leaf;
mod registry;
mod session;
mod store;

pub use access::{ZkAccess, ZkTls, NO_TLS};
pub use leaf::LeafGuard;
pub use session::SESSION_TIMEOUT;

use session::end_session;
// Named in the docs only (leaf's too).
#[cfg(doc)]
use {super::records::VersionedRecords, crate::WorkerRecord, session::open_session};

/// Where a registry's records live and how they are encoded: the one thing floe's layout and
/// Leaf's do not share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nodes {
    /// floe's own: `{root}/{service}/workers/{id}` holding a [`WorkerRecord`] as JSON, the
    /// holder nodes at `{root}/{service}/holders/{host}:{port}`.
    Floe,
    /// Meituan Leaf's, taken over with this guard ([`leaf`]).
    Leaf(LeafGuard),
}

/// A record's version: the data version of its node, and in Leaf's layout that of floe's side
/// record beside it and whether another program (a Leaf server) wrote the node last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeVersion {
    /// The data version of the record's node (floe's worker node, Leaf's node).
    node: i32,
    /// Leaf's layout: the data version of floe's side record of the ip:port (`None`: it has
    /// none). Always `None` in floe's layout.
    side: Option<i32>,
    /// Leaf's layout: whether the node was last written by another program than floe. Always
    /// false in floe's layout.
    foreign: bool,
}

impl NodeVersion {
    /// The version of a node of floe's layout.
    fn floe(version: i32) -> Self {
        NodeVersion {
            node: version,
            side: None,
            foreign: false,
        }
    }
}

/// A registry on a ZooKeeper ensemble.
pub struct ZkRegistry {
    shared: Arc<Shared>,
}

/// What the registry, its registrations' holds and its keeper share.
struct Shared {
    root: String,
    /// The servers, and the credentials every session authenticates with.
    cluster: Ensemble,
    /// Where the records live and how they are encoded.
    nodes: Nodes,
    /// The session timeout asked of the server (it may grant another).
    asked: Duration,
    session: Mutex<Session>,
    claims: Claims,
    /// The IDs of this registry's last sessions that ended (at most 8).
    ended: Mutex<Vec<i64>>,
    /// The runtime the registry was opened on, where its session is ended when it goes.
    runtime: tokio::runtime::Handle,
    /// The reach of its claims in ms ([`crate::terms`]).
    reach_ms: std::sync::atomic::AtomicU64,
}

/// The current session, and its place in the sequence of sessions.
#[derive(Clone)]
struct Session {
    client: Client,
    /// Counts the sessions: a claim stands under the epoch whose session holds its node.
    epoch: u64,
    /// Whether `client` is the session of `epoch` (false from an expiry until the next session
    /// is open).
    open: bool,
}

/// A ZooKeeper ensemble as floe's sessions reach it: its servers, and the digest credentials
/// every session of the registry authenticates with (none: no authentication).
#[derive(Clone, Debug)]
pub(crate) struct Ensemble {
    servers: String,
    credentials: Option<Credentials>,
    /// TLS to every server (`zks://`), if asked.
    tls: Option<ZkTls>,
}

impl Shared {
    fn session(&self) -> Session {
        self.session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Adds a registration's claim, made under session `claim.epoch()`: should that session
    /// have ended meanwhile, the claim is fenced at once (the keeper holds it again).
    fn add_claim(&self, claim: &Arc<Claim>) {
        let session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        if !session.open || session.epoch != claim.epoch() {
            claim.lapse();
        }
        self.claims.add(claim);
    }

    /// The session ended: fence every claim until it is held again.
    fn expired(&self) {
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        if session.open {
            let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
            // A few are enough: a restored session outlives its client by one timeout.
            if ended.len() == 8 {
                ended.remove(0);
            }
            ended.push(session.client.session_id().0);
        }
        session.epoch += 1;
        session.open = false;
        for claim in self.claims.live() {
            claim.lapse();
        }
    }

    /// Whether session `id` was one of this registry's, ended since.
    fn was_ours(&self, id: i64) -> bool {
        self.ended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&id)
    }

    /// A new session for the current epoch.
    fn install(&self, client: Client) {
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        session.client = client;
        session.open = true;
    }

    /// The session of `epoch`, connected again on `client` (the same session, so every
    /// claim of the epoch stands). False if the session ended meanwhile.
    fn resumed(&self, epoch: u64, client: Client) -> bool {
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        if !session.open || session.epoch != epoch {
            return false;
        }
        session.client = client;
        true
    }

    fn holder(&self, identity: &Identity) -> String {
        match self.nodes {
            Nodes::Floe => address_node(
                &format!("{}/{}/holders", self.root, identity.service),
                identity,
            ),
            Nodes::Leaf(_) => leaf::holder(&self.root, identity),
        }
    }

    /// The terms of the current session: expiry = the session timeout the server granted;
    /// the reach the registry was given.
    fn terms(&self) -> LeaseTerms {
        LeaseTerms::new(
            self.session().client.session_timeout(),
            Duration::from_millis(self.reach_ms.load(std::sync::atomic::Ordering::Acquire)),
        )
    }
}

impl Drop for Shared {
    /// The registry's last user is gone: end its session now, so that its holder nodes go at
    /// once (sessions are detached: see [`open_session`]).
    fn drop(&mut self) {
        let session = self.session.get_mut().unwrap_or_else(|p| p.into_inner());
        if !session.open {
            return;
        }
        let (cluster, info, timeout) = (
            self.cluster.clone(),
            session.client.session().clone(),
            session.client.session_timeout(),
        );
        // On the runtime the registry was opened on: it may be dropped outside of one.
        self.runtime
            .spawn(async move { end_session(&cluster, info, timeout).await });
    }
}

impl fmt::Debug for ZkRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkRegistry")
            .field("cluster", &self.shared.cluster)
            .field("root", &self.shared.root)
            .field("nodes", &self.shared.nodes)
            .finish()
    }
}

/// The node of `identity`'s address in `dir`: `{dir}/{host}:{port}` (floe's holder nodes;
/// in Leaf's layout also the side records and, with a `-`, the start of Leaf's node names).
fn address_node(dir: &str, identity: &Identity) -> String {
    format!("{dir}/{}:{}", identity.host, identity.port)
}

/// Maps the client's errors to registry errors: connection trouble is temporary; a refused
/// authentication or access is a configuration error, with one line saying what to check.
fn map_err(what: &str, e: ZkError) -> RegistryError {
    match e {
        ZkError::AuthFailed => {
            return RegistryError::new(
                ErrorKind::Config,
                format!("zookeeper: {what}: the server refused the session's authentication (AuthFailed): it requires credentials: give them in the registry URL, zk://USER:PASSWORD@host:port/root or zk://USER@host:port/root?password_file=PATH"),
            )
        }
        ZkError::NoAuth => {
            return RegistryError::new(
                ErrorKind::Config,
                format!("zookeeper: {what}: not authorized (NoAuth): the node's ACL does not admit this session's credentials: check the user and password of the registry URL (a wrong password is refused only here, at the first ACL'd node), or who created the node"),
            )
        }
        _ => {}
    }
    let kind = match e {
        ZkError::NoHosts
        | ZkError::Timeout
        | ZkError::ConnectionLoss
        | ZkError::SessionExpired
        | ZkError::ClientClosed => ErrorKind::Unavailable,
        ZkError::NoAuth | ZkError::AuthFailed | ZkError::BadArguments(_) => ErrorKind::Config,
        _ => ErrorKind::Unavailable,
    };
    RegistryError::new(kind, format!("zookeeper: {what}: {e}"))
}

impl ZkRegistry {
    fn client(&self) -> Client {
        self.shared.session().client
    }

    fn workers(&self, service: &str) -> String {
        format!("{}/{service}/workers", self.shared.root)
    }

    fn holder(&self, identity: &Identity) -> String {
        self.shared.holder(identity)
    }

    fn worker(&self, service: &str, id: u32) -> String {
        format!("{}/{id}", self.workers(service))
    }
}

/// What creating a holder node came to.
enum HolderNode {
    /// Created under this session.
    Created,
    /// It was already this session's (an earlier registration of the same identity, or a
    /// create of ours whose answer was lost).
    Ours,
    /// Another session holds it: its ID, and the registration number the node names (none in
    /// nodes written before floe named it).
    Taken(i64, Option<u64>),
    /// Another session held it until just now: try again.
    JustReleased,
}

/// Creates `identity`'s holder node `holder` under `client`'s session, naming registration
/// `number` ([`WorkerRecord::holder`](crate::WorkerRecord::holder)).
async fn create_holder(
    client: &Client,
    cluster: &Ensemble,
    holder: &str,
    number: u64,
) -> Result<HolderNode, RegistryError> {
    match client
        .create(holder, number.to_string().as_bytes(), &cluster.ephemeral())
        .await
    {
        Ok(_) => Ok(HolderNode::Created),
        Err(ZkError::NodeExists) => match client.get_data(holder).await {
            Ok((_, stat)) if stat.ephemeral_owner == client.session_id().0 => Ok(HolderNode::Ours),
            Ok((data, stat)) => Ok(HolderNode::Taken(
                stat.ephemeral_owner,
                std::str::from_utf8(&data).ok().and_then(|t| t.parse().ok()),
            )),
            Err(ZkError::NoNode) => Ok(HolderNode::JustReleased),
            Err(e) => Err(map_err(&format!("read {holder}"), e)),
        },
        Err(e) => Err(map_err(&format!("create {holder}"), e)),
    }
}
