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
//! the holder nodes of the session's claims in one transaction. A write only commits while the
//! leader holds the session valid, so each one answered moves the claims' fence deadlines to
//! the moment it was *sent* plus `2T/3` ([`crate::terms`]): a process that was paused, or cut
//! off (connections refused, or a blackhole where nothing closes), stops issuing IDs on its own
//! clock at least `T/3` before the server can expire its session, whatever its client has or
//! has not noticed. Pings do not count: a follower answers them itself, even when the leader
//! no longer hears from it.
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
//! nodes with it, so another process may claim the identity: the keeper raises the
//! [`Fence`](floe_core::fence::Fence) of every registration of the session at once (no IDs),
//! opens a new session, and holds each ID again: it re-creates the holder node under the new
//! session and checks that the worker record is still the identity's and that its last time is
//! not past the last time this process recorded (else another process used the ID meanwhile).
//! Then it lowers the fence; the generator goes on with the same worker ID, after its own last
//! time. The record is not rewritten, so its last time never moves back. An ID that turned out
//! to be someone else's stays fenced for good, and every heartbeat says why.
//!
//! **A takeover waits.** The leader learns of a session's requests from followers with a delay
//! (half a tick, or never if the follower is cut off just after), so it may expire a session
//! before the holder's window ends. A process that takes over an ID whose last holder did not
//! close it cleanly (the same identity restarted, or `reclaim_after`) therefore waits that
//! holder's window plus a margin ([`LeaseTerms::takeover_wait`]) before its first ID, counted
//! from the moment it found the ID free: after every write the old holder had confirmed.
//!
//! **Leaf's layout** (`leaf+zk://`, [`leaf`]): the same sessions, keeper, claims, fences and
//! takeover rules, with the records in Meituan Leaf's nodes
//! (`/snowflake/{leaf.name}/forever/{ip}:{port}-{sequence}`) instead of `workers/{id}`: only
//! where the records live and how they are encoded differs.

use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError, MultiWriteError, SessionState};

use floe_core::clock::SystemClock;
use floe_core::endpoint::Credentials;
use floe_core::fence::{Fence, Sent};

use super::records::{self, decode, encode, Allocation, Claim, Claims, VersionedRecords};
use crate::terms::LeaseTerms;
use crate::{
    ErrorKind, Hold, IdSpace, Identity, Registration, Registry, RegistryError, WorkerRecord,
};

pub mod leaf;

pub use leaf::LeafGuard;

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

/// How a registry reaches ZooKeeper beyond its servers: the digest credentials its sessions
/// authenticate with (and its nodes' creator-only ACLs), and TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZkAccess {
    /// Digest credentials; `None`: no authentication, open ACLs (and a warning).
    pub credentials: Option<Credentials>,
    /// TLS to every server (`zks://`); `None`: plain TCP.
    pub tls: Option<ZkTls>,
}

impl From<Option<Credentials>> for ZkAccess {
    fn from(credentials: Option<Credentials>) -> Self {
        ZkAccess {
            credentials,
            tls: None,
        }
    }
}

/// TLS to ZooKeeper (`zks://...?cacert=PATH[&cert=PATH&key=PATH]`): the CA that signed the
/// servers' certificates (their names or addresses are checked against them), and floe's own
/// certificate and key for a server that asks for one (ZooKeeper's default,
/// `ssl.clientAuth=need`). PEM text, read at start; its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ZkTls {
    /// The CA certificates, PEM.
    pub ca: String,
    /// floe's certificate chain and private key, PEM.
    pub identity: Option<(String, String)>,
}

impl fmt::Debug for ZkTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkTls")
            .field("identity", &self.identity.as_ref().map(|_| "****"))
            .finish_non_exhaustive()
    }
}

impl ZkTls {
    /// Reads the PEM files of `cacert=`, `cert=` and `key=` (the last two both or neither),
    /// checking them as the client will use them.
    ///
    /// # Errors
    /// A message naming the option and the file.
    pub fn from_files(
        ca: Option<&str>,
        cert: Option<&str>,
        key: Option<&str>,
    ) -> Result<ZkTls, String> {
        let read = |option: &str, path: &str| {
            std::fs::read_to_string(path).map_err(|e| {
                format!(
                    "{option} {}: cannot read it: {e}",
                    floe_core::endpoint::quoted(path)
                )
            })
        };
        let ca = match ca {
            Some(path) => read("cacert", path)?,
            None => {
                return Err(
                    "ZooKeeper over TLS needs cacert=PATH, the CA that signed the servers' certificates (PEM)"
                        .to_string(),
                )
            }
        };
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((read("cert", cert)?, read("key", key)?)),
            (None, None) => None,
            (Some(_), None) => {
                return Err("cert= needs key= (the certificate's private key, PEM)".into())
            }
            (None, Some(_)) => return Err("key= needs cert= (its certificate, PEM)".into()),
        };
        let tls = ZkTls { ca, identity };
        #[cfg(feature = "zookeeper-tls")]
        tls.options()?;
        Ok(tls)
    }

    /// The client's TLS options.
    #[cfg(feature = "zookeeper-tls")]
    fn options(&self) -> Result<zookeeper_client::TlsOptions, String> {
        let options = zookeeper_client::TlsOptions::new()
            .with_pem_ca(&self.ca)
            .map_err(|e| format!("cacert: no CA certificate in it ({e})"))?;
        match &self.identity {
            Some((cert, key)) => options
                .with_pem_identity(cert, key)
                .map_err(|e| format!("cert=, key=: no certificate and private key in them ({e})")),
            None => Ok(options),
        }
    }
}

impl fmt::Display for Ensemble {
    /// The servers (never the credentials).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.servers)
    }
}

impl Ensemble {
    /// The ACLs of every node floe creates: with credentials, **creator-only** (`auth` ids,
    /// all permissions: only a session with the same user and password may read, write, delete
    /// or create children); without, open to anyone (`world:anyone`, all), as before.
    pub(crate) fn acls(&self) -> Acls<'static> {
        if self.credentials.is_some() {
            Acls::creator_all()
        } else {
            Acls::anyone_all()
        }
    }

    /// Persistent nodes with [`Self::acls`].
    fn persistent(&self) -> zookeeper_client::CreateOptions<'static> {
        CreateMode::Persistent.with_acls(self.acls())
    }

    /// Ephemeral nodes with [`Self::acls`].
    fn ephemeral(&self) -> zookeeper_client::CreateOptions<'static> {
        CreateMode::Ephemeral.with_acls(self.acls())
    }

    /// Connects `connector` to the servers, over TLS if asked.
    async fn connect(&self, connector: zookeeper_client::Connector) -> Result<Client, ZkError> {
        #[cfg(feature = "zookeeper-tls")]
        if let Some(tls) = &self.tls {
            // zookeeper-client builds its rustls configuration with the process's provider:
            // floe's is ring (its own TLS and its stores'), whichever other is compiled in.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let options = tls.options().map_err(ZkError::UnexpectedError)?;
            return connector
                .with_tls(options)
                .secure_connect(&self.servers)
                .await;
        }
        connector.connect(&self.servers).await
    }
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

    /// The terms of the current session: expiry = the session timeout the server granted.
    fn terms(&self) -> LeaseTerms {
        LeaseTerms::for_expiry(self.session().client.session_timeout())
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

/// Why `zks://` is refused by a build without the feature `zookeeper-tls`.
pub const NO_TLS: &str = "registry: ZooKeeper over TLS (zks://) is not in this build: build floe with the cargo feature zookeeper-tls";

/// The session timeout asked of the server by default (`?session_timeout=` in the URL).
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

/// Opens a session on `cluster`, asking for `timeout`.
///
/// Every session is **detached**: dropping its client does not end it, because the keeper
/// may have moved the session to a second connection (see [`resume_session`]), and the
/// first client, still trying to reconnect in the background, must not close it when it
/// gets through. The registry ends its session itself when it is dropped ([`Shared`]'s
/// `Drop`), and a clean close deletes the holder nodes anyway.
async fn open_session(cluster: &Ensemble, timeout: Duration) -> Result<Client, ZkError> {
    cluster
        .connect(connector(cluster, timeout).with_detached())
        .await
}

/// A connector for sessions of `timeout` on `cluster`, authenticated by its credentials (the
/// client sends them again on every connection of the session, so a reconnect or a session
/// resumed on a new client stays authenticated). Its connection timeout (`T/2`, at most 3 s)
/// is also how long a connection may stay silent before the client drops it; it pings every
/// 3/8 of it.
fn connector(cluster: &Ensemble, timeout: Duration) -> zookeeper_client::Connector {
    let connector = Client::connector()
        .with_session_timeout(timeout)
        .with_connection_timeout((timeout / 2).min(Duration::from_secs(3)));
    match &cluster.credentials {
        Some(c) => connector.with_auth("digest", format!("{}:{}", c.user, c.password).as_bytes()),
        None => connector,
    }
}

/// Connects to `session` again on a new client, trying each server of `cluster` once.
///
/// The client's own reconnects back off exponentially (100 ms doubling per round of the
/// servers: with one server its tries come 0.1, 0.3, 0.7, 1.5, 3.1 and 6.3 s after a refused
/// cut), so a cut of 3.7 s was healed only at 6.3 s, after a 6 s session had ended. The keeper
/// calls this every [`RESUME_EVERY`] once its client has been disconnected for `T/6`; the
/// server moves the session to the newest connection (the old client's, if it gets through
/// later, takes it back for a moment, finds its client dropped and goes).
async fn resume_session(
    cluster: &Ensemble,
    session: zookeeper_client::SessionInfo,
    timeout: Duration,
) -> Result<Client, ZkError> {
    cluster
        .connect(rejoin(cluster, session, timeout).with_detached())
        .await
}

/// A connector back into `session`, trying each server once.
fn rejoin(
    cluster: &Ensemble,
    session: zookeeper_client::SessionInfo,
    timeout: Duration,
) -> zookeeper_client::Connector {
    connector(cluster, timeout)
        .with_session(session)
        .with_fail_eagerly()
}

/// How often the keeper tries [`resume_session`] while its client stays disconnected.
const RESUME_EVERY: Duration = Duration::from_millis(250);

/// Ends `session` on `cluster`: a client of it that is not detached, dropped at once, sends
/// the server a close (its ephemeral nodes go now, not after the timeout).
/// Tries until the session is closed, or could no longer be alive (1.4 `T`, when the client
/// itself would give it up: a registry dropped during an outage).
async fn end_session(
    cluster: &Ensemble,
    session: zookeeper_client::SessionInfo,
    timeout: Duration,
) {
    let until = tokio::time::Instant::now() + timeout * 7 / 5;
    while tokio::time::Instant::now() < until {
        let connect = cluster.connect(rejoin(cluster, session.clone(), timeout));
        match tokio::time::timeout(timeout / 2, connect).await {
            Ok(Ok(client)) => {
                // A request answered, so that the close goes out on an established
                // connection.
                let _ = tokio::time::timeout(timeout / 2, client.check_stat("/")).await;
                return; // dropped: the close goes out
            }
            Ok(Err(ZkError::SessionExpired)) => return,
            _ => tokio::time::sleep(RESUME_EVERY).await,
        }
    }
}

/// The registration's claim: the session (kept open while the registration lives) and the
/// claim the keeper holds again after an expiry.
struct ZkHold {
    _shared: Arc<Shared>,
    _claim: Arc<Claim>,
}

impl ZkRegistry {
    /// Connects to `cluster` (`host:port[,host:port...]`) and uses `root` (e.g. `/floe`).
    /// Call it on a tokio runtime: it starts the session's keeper there (see the module docs).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a bad root; [`ErrorKind::Unavailable`] when no server answers
    /// within the connection timeout.
    pub async fn connect(cluster: &str, root: &str) -> Result<Self, RegistryError> {
        Self::connect_with(cluster, root, SESSION_TIMEOUT).await
    }

    /// As [`connect`](Self::connect), asking the server for sessions of `session_timeout`.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn connect_with(
        cluster: &str,
        root: &str,
        session_timeout: Duration,
    ) -> Result<Self, RegistryError> {
        Self::connect_nodes(
            cluster,
            root,
            session_timeout,
            Nodes::Floe,
            ZkAccess::default(),
        )
        .await
    }

    /// As [`connect_with`](Self::connect_with), every session authenticated by `credentials`
    /// (ZooKeeper's `digest` scheme), and every node floe creates given creator-only ACLs; with
    /// `None`, as [`connect_with`](Self::connect_with): open ACLs, and a warning logged.
    ///
    /// # Errors
    /// As [`connect`](Self::connect); [`ErrorKind::Config`] when the server refuses the
    /// session's authentication (it requires credentials and none were given).
    pub async fn connect_with_credentials(
        cluster: &str,
        root: &str,
        session_timeout: Duration,
        access: impl Into<ZkAccess>,
    ) -> Result<Self, RegistryError> {
        Self::connect_nodes(cluster, root, session_timeout, Nodes::Floe, access.into()).await
    }

    /// As [`connect_with`](Self::connect_with), with the records in Meituan Leaf's nodes under
    /// `root` (Leaf's `/snowflake`, or `/chroot/snowflake`), a node a Leaf server wrote last
    /// taken over only as `guard` allows ([`leaf`]).
    ///
    /// # Errors
    /// As [`connect`](Self::connect); [`ErrorKind::Config`] for a root whose last part is not
    /// `snowflake`.
    pub async fn connect_leaf(
        cluster: &str,
        root: &str,
        session_timeout: Duration,
        guard: LeafGuard,
    ) -> Result<Self, RegistryError> {
        Self::connect_leaf_with_credentials(cluster, root, session_timeout, guard, None).await
    }

    /// As [`connect_leaf`](Self::connect_leaf), authenticated by `credentials` as
    /// [`connect_with_credentials`](Self::connect_with_credentials).
    ///
    /// # Errors
    /// As [`connect_leaf`](Self::connect_leaf).
    pub async fn connect_leaf_with_credentials(
        cluster: &str,
        root: &str,
        session_timeout: Duration,
        guard: LeafGuard,
        access: impl Into<ZkAccess>,
    ) -> Result<Self, RegistryError> {
        leaf::check_root(root)?;
        Self::connect_nodes(
            cluster,
            root,
            session_timeout,
            Nodes::Leaf(guard),
            access.into(),
        )
        .await
    }

    async fn connect_nodes(
        cluster: &str,
        root: &str,
        session_timeout: Duration,
        nodes: Nodes,
        access: ZkAccess,
    ) -> Result<Self, RegistryError> {
        super::check_servers("ZooKeeper", cluster, root)?;
        #[cfg(not(feature = "zookeeper-tls"))]
        if access.tls.is_some() {
            return Err(RegistryError::config(NO_TLS));
        }
        let ensemble = Ensemble {
            servers: cluster.to_string(),
            credentials: access.credentials,
            tls: access.tls,
        };
        let client = open_session(&ensemble, session_timeout)
            .await
            .map_err(|e| map_err(&format!("cannot connect to {cluster}"), e))?;
        match &ensemble.credentials {
            Some(c) => tracing::debug!(
                "zookeeper: sessions on {cluster} authenticated as digest user {:?}; floe's nodes under {root} are created creator-only",
                c.user
            ),
            // Once per process and place: `floe serve` opens the registry once per generator.
            None if first_time(&format!("{cluster}{root}")) => tracing::warn!(
                "zookeeper: no credentials in the registry URL: the nodes floe creates under {root} on {cluster} are open to anyone (world:anyone), so anyone who reaches ZooKeeper can rewrite or delete the worker records and make two nodes issue the same IDs; give credentials (zk://USER:PASSWORD@host:port{root}, or zk://USER@host:port{root}?password_file=PATH) to create them creator-only"
            ),
            None => {}
        }
        let watcher = client.state_watcher();
        let shared = Arc::new(Shared {
            root: root.to_string(),
            cluster: ensemble,
            nodes,
            asked: session_timeout,
            session: Mutex::new(Session {
                client,
                epoch: 0,
                open: true,
            }),
            claims: Claims::default(),
            ended: Mutex::default(),
            runtime: tokio::runtime::Handle::current(),
        });
        tokio::spawn(keep(Arc::downgrade(&shared), watcher));
        Ok(ZkRegistry { shared })
    }

    fn client(&self) -> Client {
        self.shared.session().client
    }

    /// floe's mirror of a store's epoch, with its node's version (none in Leaf's layout).
    async fn read_store_epoch(
        &self,
        service: &str,
        name: &str,
    ) -> Result<Option<(i64, i32)>, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            return Ok(None);
        }
        let path = records::store_epoch_place(&self.shared.root, service, name);
        match self.client().get_data(&path).await {
            Ok((data, stat)) => Ok(Some((
                records::decode_epoch("zookeeper", &path, &data)?,
                stat.version,
            ))),
            Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(map_err(&format!("read {path}"), e)),
        }
    }

    fn workers(&self, service: &str) -> String {
        format!("{}/{service}/workers", self.shared.root)
    }

    /// Refuses floe's layout on a service directory that holds Meituan Leaf's nodes
    /// (`{root}/{service}/forever`): floe's worker IDs there know nothing of the IDs Leaf's
    /// servers hold, and on Leaf's layout the two would issue the same IDs.
    async fn refuse_leafs_directory(
        &self,
        client: &Client,
        service: &str,
    ) -> Result<(), RegistryError> {
        let forever = format!("{}/{service}/forever", self.shared.root);
        let found = client
            .check_stat(&forever)
            .await
            .map_err(|e| map_err(&format!("read {forever}"), e))?;
        if found.is_none() {
            return Ok(());
        }
        let root = if self.shared.root.is_empty() {
            "/"
        } else {
            self.shared.root.as_str()
        };
        Err(RegistryError::config(format!(
            "registry: {forever} holds Meituan Leaf's worker nodes: zk:// keeps floe's own records beside them and would take worker IDs Leaf's servers hold. To share Leaf's IDs use --registry leaf+zk://{}{root} (service {service:?} is leaf.name, with --layout meituan-leaf); otherwise choose another root or service",
            self.shared.cluster
        )))
    }

    fn holder(&self, identity: &Identity) -> String {
        self.shared.holder(identity)
    }

    fn worker(&self, service: &str, id: u32) -> String {
        format!("{}/{id}", self.workers(service))
    }

    /// Builds the registration of `allocation`, claimed under session `epoch` by a write sent
    /// at `sent`. `taken_over`: the holder node was created by this registration, so a
    /// previous holder that did not close cleanly may still be inside its window.
    fn registration(
        &self,
        allocation: Allocation,
        epoch: u64,
        sent: Sent,
        taken_over: bool,
    ) -> Registration {
        let Allocation {
            record,
            existing,
            previous,
        } = allocation;
        let terms = self.shared.terms();
        let previous_open = taken_over && previous.as_ref().is_some_and(|p| !p.closed);
        // In Leaf's layout a record with no registration number is a Leaf server's: it has no
        // window to wait out (it issues until it is stopped); the guard watched its node
        // instead (leaf::check_own). Its IDs are still kept behind: previous_open.
        let leaf_server = matches!(self.shared.nodes, Nodes::Leaf(_))
            && previous.as_ref().is_some_and(|p| p.holder == 0);
        let takeover_wait = match &previous {
            Some(p) if previous_open && !leaf_server => {
                LeaseTerms::takeover_wait(p.window_ms, terms.window)
            }
            _ => Duration::ZERO,
        };
        let fence = Arc::new(Fence::new());
        let claim = Arc::new(Claim::new(
            &record,
            fence.clone(),
            epoch,
            terms.window,
            sent,
        ));
        self.shared.add_claim(&claim);
        Registration {
            record,
            existing,
            fence,
            takeover_wait,
            previous_window_ms: previous.as_ref().map_or(0, |p| p.window_ms),
            previous_holder: previous.map(|p| p.identity),
            previous_open,
            _hold: Some(Hold::new(ZkHold {
                _shared: self.shared.clone(),
                _claim: claim,
            })),
        }
    }
}

/// Whether `place` is seen for the first time in this process (for warnings given once).
fn first_time(place: &str) -> bool {
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if seen.iter().any(|s| s == place) {
        return false;
    }
    seen.push(place.to_string());
    true
}

/// With credentials, warns (once per process and directories) when a directory floe uses, created
/// before with open ACLs, lets anyone change it: its existing children keep their ACLs, and
/// whoever may create or delete children in it can remove a worker record's holder or add
/// nodes. Only a warning: floe's own nodes in it are creator-only all the same.
async fn warn_if_open(client: &Client, root: &str, dirs: &[String]) {
    let mut paths = vec![root.to_string()];
    paths.extend(dirs.iter().cloned());
    let mut open = Vec::new();
    for path in paths {
        if let Ok((acls, _)) = client.get_acl(&path).await {
            let writable = acls.iter().any(|acl| {
                acl.scheme() == "world"
                    && acl.id() == "anyone"
                    && acl.permission() != zookeeper_client::Permission::READ
                    && acl.permission() != zookeeper_client::Permission::NONE
            });
            if writable {
                open.push(path);
            }
        }
    }
    if !open.is_empty() && first_time(&open.join(",")) {
        tracing::warn!(
            "zookeeper: {} created before with open ACLs (world:anyone may change {}): anyone who reaches ZooKeeper can still add or delete nodes there; set creator-only ACLs on them (zkCli: addauth digest USER:PASSWORD, then setAcl -R PATH auth::cdrwa), or start on a new root",
            open.join(", "),
            if open.len() == 1 { "it" } else { "them" }
        );
    }
}

/// What creating a holder node came to.
enum HolderNode {
    /// Created under this session.
    Created,
    /// It was already this session's (an earlier registration of the same identity).
    Ours,
    /// Another session holds it: its ID.
    Taken(i64),
    /// Another session held it until just now: try again.
    JustReleased,
}

/// Creates `identity`'s holder node `holder` under `client`'s session.
async fn create_holder(
    client: &Client,
    cluster: &Ensemble,
    holder: &str,
) -> Result<HolderNode, RegistryError> {
    match client.create(holder, b"", &cluster.ephemeral()).await {
        Ok(_) => Ok(HolderNode::Created),
        Err(ZkError::NodeExists) => match client.check_stat(holder).await {
            Ok(Some(stat)) if stat.ephemeral_owner == client.session_id().0 => Ok(HolderNode::Ours),
            Ok(Some(stat)) => Ok(HolderNode::Taken(stat.ephemeral_owner)),
            Ok(None) => Ok(HolderNode::JustReleased),
            Err(e) => Err(map_err(&format!("read {holder}"), e)),
        },
        Err(e) => Err(map_err(&format!("create {holder}"), e)),
    }
}

/// The error for an identity whose holder node another session has.
fn held_elsewhere(identity: &Identity, holder: &str) -> RegistryError {
    RegistryError::new(
        ErrorKind::Conflict,
        format!("{identity} is held by another live process ({holder} exists; it goes when that process's session ends)"),
    )
}

/// The keeper of a registry's session: confirms the session's claims every `T/6` by a write
/// (see the module docs); when the session ends, fences every claim, opens a new session and
/// holds each claim's ID again. Ends with the registry and its registrations.
async fn keep(shared: Weak<Shared>, mut watcher: zookeeper_client::StateWatcher) {
    // The rhythm of the session's confirmations (each new session may be granted another
    // timeout).
    let rhythm = |shared: &Weak<Shared>| {
        let every = shared.upgrade()?.terms().confirm_every;
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Some((every, ticks))
    };
    let Some((mut every, mut confirm)) = rhythm(&shared) else {
        return;
    };
    // Since when the client has been disconnected (its session not known to be over).
    let mut disconnected_since = None;
    loop {
        // Hold again the claims the last session left (none but after an expiry).
        let unsettled = match shared.upgrade() {
            Some(shared) => hold_claims_again(&shared).await,
            None => return,
        };
        let resumed = match shared.upgrade() {
            Some(shared) => resume(&shared, &mut disconnected_since, every).await,
            None => return,
        };
        let state = match resumed {
            Resume::Ended => SessionState::Expired,
            Resume::Connected(new) => {
                watcher = new;
                // Confirm the claims at once, then every T/6 again.
                match rhythm(&shared) {
                    Some((e, c)) => (every, confirm) = (e, c),
                    None => return,
                }
                continue;
            }
            Resume::Nothing => {
                let wait = if unsettled || disconnected_since.is_some() {
                    RESUME_EVERY
                } else {
                    Duration::from_secs(1)
                };
                tokio::select! {
                    state = watcher.changed() => state,
                    _ = confirm.tick() => {
                        match shared.upgrade() {
                            Some(shared) => confirm_claims(&shared, every).await,
                            None => return,
                        }
                        continue;
                    }
                    // A look at the claims and the connection, and whether the registry is
                    // still here.
                    _ = tokio::time::sleep(wait) => continue,
                }
            }
        };
        if !state.is_terminated() {
            continue; // disconnected or connected again: the same session
        }
        let asked = match shared.upgrade() {
            Some(shared) => {
                shared.expired();
                shared.asked
            }
            None => return,
        };
        let mut backoff = Duration::from_millis(100);
        watcher = loop {
            let Some(cluster) = shared.upgrade().map(|s| s.cluster.clone()) else {
                return;
            };
            match open_session(&cluster, asked).await {
                Ok(client) => {
                    let watcher = client.state_watcher();
                    match shared.upgrade() {
                        Some(shared) => shared.install(client),
                        None => {
                            // Nobody to hand it to: end it now (it is detached).
                            let info = client.session().clone();
                            end_session(&cluster, info, client.session_timeout()).await;
                            return;
                        }
                    }
                    disconnected_since = None;
                    match rhythm(&shared) {
                        Some((e, c)) => (every, confirm) = (e, c),
                        None => return,
                    }
                    break watcher;
                }
                Err(_) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        };
    }
}

/// What [`resume`] came to.
enum Resume {
    /// Nothing to do, or not yet, or the try failed.
    Nothing,
    /// The session is connected again on a new client: its state watcher.
    Connected(zookeeper_client::StateWatcher),
    /// The server said the session is over.
    Ended,
}

/// Once the current client has been disconnected for `after` (`T/6`), connects its session
/// again on a new client ([`resume_session`]) and puts it in the old one's place.
async fn resume(
    shared: &Arc<Shared>,
    since: &mut Option<tokio::time::Instant>,
    after: Duration,
) -> Resume {
    let session = shared.session();
    if !session.open || session.client.state() != SessionState::Disconnected {
        *since = None;
        return Resume::Nothing;
    }
    let disconnected = *since.get_or_insert_with(tokio::time::Instant::now);
    if disconnected.elapsed() < after {
        return Resume::Nothing;
    }
    let info = session.client.session().clone();
    let connect = resume_session(&shared.cluster, info, shared.asked);
    // A try is cut after `T/6`, so that it never holds up the confirmations for long (the old
    // client may connect again by itself meanwhile).
    match tokio::time::timeout(after.max(RESUME_EVERY), connect).await {
        // The same session, or nothing (ZooKeeper gives a session ID of its own choosing
        // only to a new session).
        Ok(Ok(client)) if client.session_id() != session.client.session_id() => {
            let info = client.session().clone();
            end_session(&shared.cluster, info, client.session_timeout()).await;
            Resume::Ended
        }
        Ok(Ok(client)) => {
            let watcher = client.state_watcher();
            if !shared.resumed(session.epoch, client) {
                return Resume::Nothing;
            }
            tracing::info!(
                "zookeeper: session {} connected again on a new connection after {:.1} s disconnected",
                session.client.session_id(),
                disconnected.elapsed().as_secs_f64()
            );
            *since = None;
            Resume::Connected(watcher)
        }
        Ok(Err(ZkError::SessionExpired)) => Resume::Ended,
        Ok(Err(e)) => {
            tracing::debug!("zookeeper: session not connected again yet: {e}");
            Resume::Nothing
        }
        Err(_) => Resume::Nothing,
    }
}

/// Confirms the claims standing under the current session: one transaction that writes each
/// one's holder node (it commits only while the leader holds the session valid, and only if
/// every node is still there). Answered within `within`: each claim's window runs from the
/// moment it was sent. Otherwise nothing moves: the deadlines close the fences by themselves.
async fn confirm_claims(shared: &Arc<Shared>, within: Duration) {
    let session = shared.session();
    if !session.open {
        return;
    }
    let claims: Vec<_> = shared
        .claims
        .live()
        .into_iter()
        .filter(|c| c.epoch() == session.epoch && !c.is_lapsed() && c.lost().is_none())
        .collect();
    if claims.is_empty() {
        return;
    }
    let sent = Sent::now(&SystemClock);
    let confirm = async {
        // Each holder node must be this session's: written at the version just read, so that
        // a node deleted and created again by another session (a replacement with this
        // identity) confirms nothing. Those claims' windows run out; the next heartbeat finds
        // them lost.
        let mut txn = session.client.new_multi_writer();
        let mut confirmed = Vec::new();
        for claim in &claims {
            let holder = shared.holder(&claim.identity);
            let Ok(Some(stat)) = session.client.check_stat(&holder).await else {
                continue;
            };
            if stat.ephemeral_owner != session.client.session_id().0
                || txn.add_set_data(&holder, b"", Some(stat.version)).is_err()
            {
                continue;
            }
            confirmed.push(claim);
        }
        if confirmed.is_empty() {
            return Vec::new();
        }
        match txn.commit().await {
            Ok(_) => confirmed,
            Err(e) => {
                tracing::debug!("zookeeper: the session's claims were not confirmed: {e}");
                Vec::new()
            }
        }
    };
    if let Ok(confirmed) = tokio::time::timeout(within, confirm).await {
        for claim in confirmed {
            claim.confirmed(sent);
        }
    }
}

/// Holds again, under the current session, every claim made under an earlier one. Whether
/// some are still to be tried (the server did not answer).
async fn hold_claims_again(shared: &Arc<Shared>) -> bool {
    let session = shared.session();
    if !session.open {
        return true;
    }
    let registry = ZkRegistry {
        shared: shared.clone(),
    };
    let mut unsettled = false;
    for claim in shared.claims.live() {
        if claim.epoch() == session.epoch || claim.lost().is_some() {
            continue;
        }
        let holder = shared.holder(&claim.identity);
        let mut created = false;
        let sent = Sent::now(&SystemClock);
        let held = match create_holder(&session.client, &shared.cluster, &holder).await {
            Ok(node @ (HolderNode::Created | HolderNode::Ours)) => {
                created = matches!(node, HolderNode::Created);
                records::may_hold_again(&registry, &claim).await
            }
            // This registry's own ended session: a ZooKeeper restarted from its snapshot
            // keeps it alive for a session timeout more, after the client gave it up. Wait
            // for its node to go.
            Ok(HolderNode::Taken(owner)) if shared.was_ours(owner) => {
                unsettled = true;
                continue;
            }
            Ok(HolderNode::Taken(_)) => Err(RegistryError::new(
                ErrorKind::Conflict,
                format!(
                    "zookeeper: {} was claimed by another process while this one's session had expired ({holder} is another session's): worker ID {} stays fenced (no IDs): restart floe to register again",
                    claim.identity, claim.id
                ),
            )),
            Ok(HolderNode::JustReleased) => {
                unsettled = true;
                continue;
            }
            Err(e) => Err(e),
        };
        match held {
            Ok(()) => {
                claim.set_window(LeaseTerms::for_expiry(session.client.session_timeout()).window);
                claim.held_under(session.epoch, sent);
            }
            Err(e) if e.kind == ErrorKind::Conflict => {
                // Someone else's now: fenced for good; the identity is not kept claimed.
                if created {
                    let _ = session.client.delete(&holder, None).await;
                }
                claim.lose(e);
            }
            Err(_) => unsettled = true,
        }
    }
    unsettled
}

#[async_trait]
impl VersionedRecords for ZkRegistry {
    type Version = NodeVersion;

    fn store(&self) -> &'static str {
        "ZooKeeper"
    }

    fn place(&self, identity: &Identity, id: u32) -> String {
        match self.shared.nodes {
            Nodes::Floe => self.worker(&identity.service, id),
            Nodes::Leaf(_) => leaf::node(&self.shared.root, identity, id),
        }
    }

    async fn read(
        &self,
        identity: &Identity,
        id: u32,
    ) -> Result<Option<(WorkerRecord, NodeVersion)>, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            return leaf::read(&self.client(), &self.shared.root, identity, id).await;
        }
        let path = self.worker(&identity.service, id);
        match self.client().get_data(&path).await {
            Ok((data, stat)) => Ok(Some((
                decode("zookeeper", &path, &data)?,
                NodeVersion::floe(stat.version),
            ))),
            Err(ZkError::NoNode) => Ok(None),
            Err(e) => Err(map_err(&format!("read {path}"), e)),
        }
    }

    async fn read_all(
        &self,
        service: &str,
    ) -> Result<Vec<(WorkerRecord, NodeVersion)>, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            return leaf::read_all(&self.client(), &self.shared.root, service).await;
        }
        let dir = self.workers(service);
        let children = match self.client().list_children(&dir).await {
            Ok(c) => c,
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(map_err(&format!("list {dir}"), e)),
        };
        let mut records = Vec::with_capacity(children.len());
        for child in children {
            let path = format!("{dir}/{child}");
            match self.client().get_data(&path).await {
                Ok((data, stat)) => {
                    records.push((
                        decode("zookeeper", &path, &data)?,
                        NodeVersion::floe(stat.version),
                    ));
                }
                Err(ZkError::NoNode) => continue, // released meanwhile
                Err(e) => return Err(map_err(&format!("read {path}"), e)),
            }
        }
        Ok(records)
    }

    async fn create(&self, record: &WorkerRecord) -> Result<bool, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            // Leaf's nodes are numbered by ZooKeeper: only create_new makes one.
            return Err(RegistryError::new(
                ErrorKind::Corrupt,
                format!(
                    "internal: worker ID {} of {} cannot be chosen in Leaf's layout",
                    record.id, record.identity
                ),
            ));
        }
        let path = self.worker(&record.identity.service, record.id);
        let persistent = self.shared.cluster.persistent();
        match self
            .client()
            .create(&path, &encode(record)?, &persistent)
            .await
        {
            Ok(_) => Ok(true),
            Err(ZkError::NodeExists) => Ok(false), // another process took it first
            Err(e) => Err(map_err(&format!("create {path}"), e)),
        }
    }

    async fn create_new(
        &self,
        template: &WorkerRecord,
        space: IdSpace,
        free: &[u32],
    ) -> Result<Option<WorkerRecord>, RegistryError> {
        match self.shared.nodes {
            Nodes::Leaf(_) => {
                leaf::create_new(
                    &self.client(),
                    &self.shared.root,
                    template,
                    space,
                    self.shared.cluster.acls(),
                )
                .await
            }
            Nodes::Floe => records::create_first_free(self, template, free).await,
        }
    }

    async fn check_own(
        &self,
        own: &WorkerRecord,
        version: NodeVersion,
    ) -> Result<NodeVersion, RegistryError> {
        match self.shared.nodes {
            Nodes::Leaf(guard) => {
                leaf::check_own(&self.client(), &self.shared.root, guard, own, version).await
            }
            Nodes::Floe => Ok(version),
        }
    }

    async fn replace(
        &self,
        record: &WorkerRecord,
        version: NodeVersion,
    ) -> Result<bool, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            return leaf::replace(
                &self.client(),
                &self.shared.root,
                record,
                version,
                self.shared.cluster.acls(),
            )
            .await;
        }
        let path = self.worker(&record.identity.service, record.id);
        match self
            .client()
            .set_data(&path, &encode(record)?, Some(version.node))
            .await
        {
            Ok(_) => Ok(true),
            Err(ZkError::BadVersion | ZkError::NoNode) => Ok(false),
            Err(e) => Err(map_err(&format!("write {path}"), e)),
        }
    }

    async fn take_over(
        &self,
        record: &WorkerRecord,
        version: NodeVersion,
        previous: &Identity,
    ) -> Result<bool, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            // A Leaf node's name is its ip:port: it cannot change hands (reclaim refuses).
            return Err(RegistryError::new(
                ErrorKind::Corrupt,
                format!(
                    "internal: worker ID {} of {previous} cannot be taken over by {} in Leaf's layout",
                    record.id, record.identity
                ),
            ));
        }
        // One transaction, so that the previous holder cannot come back between a check and
        // the write: create its holder node (fails if its session is alive: not idle after
        // all), write the record if unchanged since read, delete the holder node again.
        let client = self.client();
        let path = self.worker(&record.identity.service, record.id);
        let previous_holder = self.holder(previous);
        let ephemeral = self.shared.cluster.ephemeral();
        let data = encode(record)?;
        let mut txn = client.new_multi_writer();
        txn.add_create(&previous_holder, b"", &ephemeral)
            .and_then(|()| txn.add_set_data(&path, &data, Some(version.node)))
            .and_then(|()| txn.add_delete(&previous_holder, None))
            .map_err(|e| map_err(&format!("take over {path}"), e))?;
        match txn.commit().await {
            Ok(_) => Ok(true),
            Err(MultiWriteError::OperationFailed {
                source: ZkError::NodeExists | ZkError::BadVersion | ZkError::NoNode,
                ..
            }) => Ok(false),
            Err(e) => Err(map_err(&format!("take over {path}"), e.into())),
        }
    }

    async fn delete(
        &self,
        record: &WorkerRecord,
        version: NodeVersion,
    ) -> Result<bool, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            return leaf::delete(&self.client(), &self.shared.root, record, version).await;
        }
        let path = self.worker(&record.identity.service, record.id);
        match self.client().delete(&path, Some(version.node)).await {
            Ok(()) => Ok(true),
            Err(ZkError::NoNode | ZkError::BadVersion) => Ok(false),
            Err(e) => Err(map_err(&format!("delete {path}"), e)),
        }
    }
}

#[async_trait]
impl Registry for ZkRegistry {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    async fn store_epoch(&self, service: &str, name: &str) -> Result<Option<i64>, RegistryError> {
        Ok(self.read_store_epoch(service, name).await?.map(|(e, _)| e))
    }

    async fn keep_store_epoch(
        &self,
        service: &str,
        name: &str,
        epoch: i64,
    ) -> Result<bool, RegistryError> {
        if let Nodes::Leaf(_) = self.shared.nodes {
            return Ok(false);
        }
        let path = records::store_epoch_place(&self.shared.root, service, name);
        let data = epoch.to_string();
        for _ in 0..records::KEEP_ATTEMPTS {
            // Only ever raised: a set on the version read, or a create where there was none.
            let written = match self.read_store_epoch(service, name).await? {
                Some((e, _)) if e >= epoch => return Ok(true),
                Some((_, version)) => {
                    match self
                        .client()
                        .set_data(&path, data.as_bytes(), Some(version))
                        .await
                    {
                        Ok(_) => true,
                        Err(ZkError::BadVersion | ZkError::NoNode) => false,
                        Err(e) => return Err(map_err(&format!("write {path}"), e)),
                    }
                }
                None => {
                    let dir = format!("{}/{service}/stores", self.shared.root);
                    let persistent = self.shared.cluster.persistent();
                    self.client()
                        .mkdir(&dir, &persistent)
                        .await
                        .map_err(|e| map_err(&format!("create {dir}"), e))?;
                    match self
                        .client()
                        .create(&path, data.as_bytes(), &persistent)
                        .await
                    {
                        Ok(_) => true,
                        Err(ZkError::NodeExists) => false,
                        Err(e) => return Err(map_err(&format!("create {path}"), e)),
                    }
                }
            };
            if written {
                return Ok(true);
            }
        }
        Err(RegistryError::new(
            ErrorKind::Unavailable,
            format!(
                "zookeeper: {path} changed under {} attempts in a row",
                records::KEEP_ATTEMPTS
            ),
        ))
    }

    fn location(&self) -> String {
        let scheme = match (self.shared.nodes, self.shared.cluster.tls.is_some()) {
            (Nodes::Floe, false) => "zk",
            (Nodes::Floe, true) => "zks",
            (Nodes::Leaf(_), false) => "leaf+zk",
            (Nodes::Leaf(_), true) => "leaf+zks",
        };
        format!("{scheme}://{}{}", self.shared.cluster, self.shared.root)
    }

    fn holder_linger(&self) -> Duration {
        // The timeout the server granted (it may give more than was asked), which a dead
        // holder's ephemeral node outlives by up to one tick.
        self.client().session_timeout().max(self.shared.asked)
    }

    fn lease_terms(&self) -> Option<LeaseTerms> {
        Some(self.shared.terms())
    }

    async fn register(
        &self,
        identity: &Identity,
        space: IdSpace,
    ) -> Result<Registration, RegistryError> {
        identity.validate()?;
        // Leaf's directories stay open to anyone, as Leaf makes them (credentials must never
        // lock Leaf's servers out of their own nodes); floe's get the cluster's ACLs.
        let (open, dirs) = match self.shared.nodes {
            Nodes::Floe => (
                Vec::new(),
                [
                    self.workers(&identity.service),
                    format!("{}/{}/holders", self.shared.root, identity.service),
                ]
                .to_vec(),
            ),
            Nodes::Leaf(_) => {
                leaf::check_identity(identity)?;
                let (leafs, floes) = leaf::dirs(&self.shared.root, &identity.service);
                (leafs.to_vec(), floes.to_vec())
            }
        };
        let Session { client, epoch, .. } = self.shared.session();
        if self.shared.nodes == Nodes::Floe {
            self.refuse_leafs_directory(&client, &identity.service)
                .await?;
        }
        let persistent = self.shared.cluster.persistent();
        let anyone = CreateMode::Persistent.with_acls(Acls::anyone_all());
        for (dir, options) in open
            .iter()
            .map(|d| (d, &anyone))
            .chain(dirs.iter().map(|d| (d, &persistent)))
        {
            client
                .mkdir(dir, options)
                .await
                .map_err(|e| map_err(&format!("create {dir}"), e))?;
        }
        if self.shared.cluster.credentials.is_some() {
            warn_if_open(&client, &self.shared.root, &dirs).await;
        }
        let holder = self.holder(identity);
        // The create is a write: its answer confirms the session, from this moment on.
        let sent = Sent::now(&SystemClock);
        let created = match create_holder(&client, &self.shared.cluster, &holder).await? {
            HolderNode::Created => true,
            HolderNode::Ours => false,
            HolderNode::Taken(_) => return Err(held_elsewhere(identity, &holder)),
            HolderNode::JustReleased => {
                return Err(RegistryError::new(
                    ErrorKind::Conflict,
                    format!(
                        "{identity}: {holder} was just released by its previous holder; try again"
                    ),
                ))
            }
        };
        let window_ms = self.shared.terms().window_ms();
        let mut result =
            records::allocate(self, identity, space, window_ms, records::new_holder()).await;
        let mut sent = sent;
        if result.is_ok() && matches!(self.shared.nodes, Nodes::Leaf(_)) {
            // Taking a Leaf server's node may have watched it for seconds (leaf::check_own),
            // longer than the window the holder node's creation opened: confirm the session
            // again by a write, from now.
            sent = Sent::now(&SystemClock);
            if let Err(e) = client.set_data(&holder, b"", None).await {
                result = Err(map_err(&format!("write {holder}"), e));
            }
        }
        if result.is_err() && created {
            // Do not keep the identity claimed by a registration that failed.
            let _ = client.delete(&holder, None).await;
        }
        Ok(self.registration(result?, epoch, sent, created))
    }

    async fn heartbeat(
        &self,
        identity: &Identity,
        id: u32,
        last_time_ms: u64,
    ) -> Result<(), RegistryError> {
        let session = self.shared.session();
        let claim = self.shared.claims.find(identity, id);
        if let Some(claim) = &claim {
            if let Some(lost) = claim.lost() {
                return Err(lost);
            }
            if !session.open || claim.is_lapsed() || claim.epoch() != session.epoch {
                return Err(RegistryError::new(
                    ErrorKind::Unavailable,
                    format!("zookeeper: the session of {identity} expired; holding worker ID {id} again under a new one (no IDs meanwhile)"),
                ));
            }
            claim.record(last_time_ms);
        }
        // Our claim must still stand: the holder node, owned by this session. When the
        // session expired, or the node went, another process may hold the identity now.
        let holder = self.holder(identity);
        let result = match session.client.check_stat(&holder).await {
            Ok(Some(stat)) if stat.ephemeral_owner == session.client.session_id().0 => {
                records::heartbeat(
                    self,
                    identity,
                    id,
                    last_time_ms,
                    claim.as_ref().map(|c| c.holder),
                )
                .await
            }
            // The keeper holds the ID again under a new session.
            Err(e @ (ZkError::SessionExpired | ZkError::ClientClosed)) if claim.is_some() => {
                Err(map_err(&format!("read {holder}"), e))
            }
            Ok(_) | Err(ZkError::SessionExpired | ZkError::ClientClosed) => Err(RegistryError::new(
                ErrorKind::Conflict,
                format!("the claim on {identity} lapsed ({holder} is not this session's): stop issuing IDs"),
            )),
            Err(e) => Err(map_err(&format!("read {holder}"), e)),
        };
        records::settle(claim.as_deref(), result)
    }

    async fn release(&self, identity: &Identity) -> Result<bool, RegistryError> {
        // Never under a live holder: another identity could be given the ID while it issues.
        let holder = self.holder(identity);
        match self.client().check_stat(&holder).await {
            Ok(Some(_)) => return Err(crate::plan::released_while_held(identity, &holder)),
            Ok(None) => {}
            Err(e) => return Err(map_err(&format!("read {holder}"), e)),
        }
        records::release(self, identity).await
    }

    async fn close(&self, identity: &Identity, id: u32) -> Result<(), RegistryError> {
        // Only this registry's own claim: another registration of the identity (a replacement
        // that took it over) is not ours to mark closed or to end.
        let Some(claim) = self.shared.claims.find(identity, id) else {
            return Ok(());
        };
        records::mark_closed(self, identity, id, claim.holder).await?;
        // The holder node, if it is this session's (else it is a newer registration's).
        let client = self.client();
        let holder = self.holder(identity);
        match client.check_stat(&holder).await {
            Ok(Some(stat)) if stat.ephemeral_owner == client.session_id().0 => {
                match client.delete(&holder, Some(stat.version)).await {
                    Ok(()) | Err(ZkError::NoNode | ZkError::BadVersion) => Ok(()),
                    Err(e) => Err(map_err(&format!("delete {holder}"), e)),
                }
            }
            Ok(_) => Ok(()),
            Err(e) => Err(map_err(&format!("read {holder}"), e)),
        }
    }

    async fn reclaim(
        &self,
        identity: &Identity,
        space: IdSpace,
        idle_before_ms: u64,
    ) -> Result<Option<Registration>, RegistryError> {
        identity.validate()?;
        if let Nodes::Leaf(_) = self.shared.nodes {
            return Err(RegistryError::config(format!(
                "{identity}: in Leaf's layout a worker ID belongs to the ip:port its node is named by, and cannot be taken over by another (reclaim_after); start on the ip:port of a node no longer in use instead (`floe worker list`)"
            )));
        }
        let Session { client, epoch, .. } = self.shared.session();
        let ephemeral = self.shared.cluster.ephemeral();
        let holder = self.holder(identity);
        let sent = Sent::now(&SystemClock);
        match client.create(&holder, b"", &ephemeral).await {
            Ok(_) => {}
            Err(ZkError::NodeExists) => {
                return Err(RegistryError::new(
                    ErrorKind::Conflict,
                    format!("{identity} is held by another live process ({holder} exists)"),
                ))
            }
            Err(e) => return Err(map_err(&format!("create {holder}"), e)),
        }
        let window_ms = self.shared.terms().window_ms();
        let taken = records::take_over_idle(
            self,
            identity,
            space,
            idle_before_ms,
            window_ms,
            records::new_holder(),
        )
        .await;
        if !matches!(taken, Ok(Some(_))) {
            // Nothing taken: do not keep the identity claimed.
            let _ = client.delete(&holder, None).await;
        }
        Ok(taken?.map(|allocation| self.registration(allocation, epoch, sent, true)))
    }

    async fn list(&self, service: &str) -> Result<Vec<WorkerRecord>, RegistryError> {
        Ok(records::list(self, service)
            .await?
            .into_iter()
            .map(|(r, _)| r)
            .collect())
    }
}
