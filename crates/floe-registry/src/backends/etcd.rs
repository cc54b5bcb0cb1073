//! The `etcd` registry (etcd 3.4+): `etcd://host:port[,host:port...][/root][?ttl=SECONDS]`,
//! or over TLS, with a client certificate and an etcd user:
//! `etcds://[user[:password]@]host:port[,...][/root]?cacert=PATH&cert=PATH&key=PATH&password_file=PATH`
//! ([`floe_etcd::Security`]). The user's role needs readwrite on the keys with the root as
//! prefix.
//!
//! Keys, all under the root (default `/floe`):
//! - `{root}/{service}/workers/{id}`: one per allocated ID, holding the [`WorkerRecord`] as
//!   JSON (identity, last time). It has **no lease**: the last time outlives every lease.
//! - `{root}/{service}/holders/{host}:{port}`: the live holder's claim, **attached to its
//!   lease** (TTL 10 s by default). A second process with the same identity cannot create it.
//!
//! **Fencing.** A keeper task sends a keep-alive every TTL/6, and each one answered moves the
//! registration's [`Fence`](floe_core::fence::Fence) deadline to the moment that keep-alive was
//! *sent* plus the window `W = H - H/10` of the reach `H` (`?reach=`, [`crate::terms`]): a
//! lease that ends (an outage longer than the TTL) does not stop the holder, whose keeper holds
//! the ID again under a new lease, if the worker record still carries this registration's
//! number, as soon as etcd answers. An ID found lost (the record released, wiped or taken
//! over) stays fenced for good, whatever the keep-alives say, and every heartbeat says why. A
//! takeover waits the previous holder's reach and margin from the moment it found its lease
//! gone ([`LeaseTerms::takeover_wait`]). `sim` runs this keeper against a simulated etcd for
//! thousands of seeds.
//!
//! All changes are transactions: a new ID is taken only if its worker key does not exist
//! (`create_revision == 0`), a heartbeat or take-over only if the record is unchanged since it
//! was read (`mod_revision`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use floe_core::clock::{Clock, SystemClock};
use floe_core::fence::{Fence, Sent};
use floe_etcd::{
    Client, Compare, CompareOp, ConnectOptions, Error as EtcdError, Security, Txn, TxnOp,
};

mod kv;
#[cfg(test)]
mod sim;

use kv::Kv;

use super::records::{self, decode, encode, Allocation, Claim, Claims, VersionedRecords};
use crate::terms::LeaseTerms;
use crate::{
    ErrorKind, Hold, IdSpace, Identity, Registration, Registry, RegistryError, WorkerRecord,
};

/// A registry on an etcd cluster.
pub struct EtcdRegistry {
    keys: Keys,
    endpoints: String,
    /// `etcd` or `etcds` (TLS), for the location.
    scheme: &'static str,
    ttl_secs: i64,
    /// The reach of its claims ([`crate::terms`]).
    reach: Duration,
    claims: Claims,
}

/// The registry's keys under its root, the client that reads and writes them and the clock
/// its confirmations are timed on (cheap to clone: the keeper task has its own).
#[derive(Clone)]
struct Keys {
    client: Arc<dyn Kv>,
    root: String,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for EtcdRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdRegistry")
            .field("endpoints", &self.endpoints)
            .field("root", &self.keys.root)
            .field("ttl_secs", &self.ttl_secs)
            .finish()
    }
}

fn map_err(what: &str, e: EtcdError) -> RegistryError {
    let kind = if e.is_config() {
        ErrorKind::Config
    } else {
        ErrorKind::Unavailable
    };
    RegistryError::new(kind, format!("etcd: {what}: {e}"))
}

/// The registration's claim: the keeper task (and the lease it keeps).
struct EtcdHold {
    keeper: tokio::task::JoinHandle<()>,
    _claim: Arc<Claim>,
}

impl Drop for EtcdHold {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

impl EtcdRegistry {
    /// Connects to `endpoints` (`host:port[,host:port...]`), using `root` and leases of
    /// `ttl_secs` seconds.
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a bad address, root or TTL; [`ErrorKind::Unavailable`] when
    /// no endpoint answers.
    pub async fn connect(
        endpoints: &str,
        root: &str,
        ttl_secs: i64,
    ) -> Result<Self, RegistryError> {
        EtcdRegistry::connect_secure(endpoints, root, ttl_secs, Security::plain()).await
    }

    /// As [`EtcdRegistry::connect`], with TLS and an etcd user as `security` asks.
    ///
    /// # Errors
    /// As [`EtcdRegistry::connect`]; [`ErrorKind::Config`] too for a certificate or password
    /// file that cannot be read, and for TLS or a user etcd refuses (a wrong password, a client
    /// certificate it does not trust, plain text to its TLS port): waiting will not help.
    pub async fn connect_secure(
        endpoints: &str,
        root: &str,
        ttl_secs: i64,
        security: Security,
    ) -> Result<Self, RegistryError> {
        super::check_servers("etcd", endpoints, root)?;
        if !(2..=3600).contains(&ttl_secs) {
            return Err(RegistryError::config(format!(
                "registry: ttl must be 2 to 3600 seconds, found {ttl_secs}"
            )));
        }
        let scheme = security.scheme();
        let at = |e: EtcdError| {
            let what = if e.is_config() {
                format!("{scheme}://{endpoints}")
            } else {
                format!("cannot reach {endpoints}")
            };
            map_err(&what, e)
        };
        let client =
            Client::connect_secure(endpoints.split(','), ConnectOptions::default(), security)
                .await
                .map_err(at)?;
        // The connection is made lazily: ask once, so that an unreachable cluster (or one that
        // refuses this client) says so now.
        client.get(root).await.map_err(at)?;
        let mut registry =
            EtcdRegistry::over(Arc::new(client), root, ttl_secs, Arc::new(SystemClock));
        endpoints.clone_into(&mut registry.endpoints);
        registry.scheme = scheme;
        Ok(registry)
    }

    /// A registry on `client` (etcd, or a stand-in), its confirmations timed on `clock`.
    fn over(client: Arc<dyn Kv>, root: &str, ttl_secs: i64, clock: Arc<dyn Clock>) -> Self {
        EtcdRegistry {
            keys: Keys {
                client,
                root: root.to_string(),
                clock,
            },
            endpoints: String::new(),
            scheme: "etcd",
            ttl_secs,
            reach: crate::terms::DEFAULT_REACH,
            claims: Claims::default(),
        }
    }

    /// Creates the holder key, naming registration `holder`, under a new lease. `Ok(None)`:
    /// someone else holds it.
    async fn claim(
        &self,
        identity: &Identity,
        holder: u64,
    ) -> Result<Option<(i64, Sent)>, RegistryError> {
        let key = self.keys.holder_key(identity);
        claim_holder(&self.keys, &key, self.ttl_secs, holder).await
    }

    /// Sets the reach of the claims this registry makes ([`crate::terms`]):
    /// [`DEFAULT_REACH`](crate::terms::DEFAULT_REACH) unless told.
    #[must_use]
    pub fn with_reach(mut self, reach: Duration) -> Self {
        self.reach = reach.clamp(crate::terms::MIN_REACH, crate::terms::MAX_REACH);
        self
    }

    /// The terms of this registry's leases: expiry = the TTL; the reach it was given.
    fn terms(&self) -> LeaseTerms {
        LeaseTerms::new(
            Duration::from_secs(u64::try_from(self.ttl_secs).unwrap_or(0)),
            self.reach,
        )
    }

    /// Starts the keeper of `lease` (granted in answer to a request sent at `sent`) and builds
    /// the registration.
    fn registration(&self, allocation: Allocation, lease: i64, sent: Sent) -> Registration {
        let Allocation {
            record,
            existing,
            previous,
        } = allocation;
        let previous_open = previous.as_ref().is_some_and(|p| !p.closed);
        let fence = Arc::new(Fence::new());
        let terms = self.terms();
        let claim = Claim::new(&record, fence.clone(), 0, terms.window, sent);
        let hold = self.keep(claim, lease);
        // The holder key was free, the previous holder's lease ended: but a holder issues for
        // its reach after its last confirmed keep-alive, longer than the TTL.
        let takeover_wait = match &previous {
            Some(p) if previous_open => LeaseTerms::takeover_wait(p.reach(), terms.reach),
            _ => Duration::ZERO,
        };
        Registration {
            fence,
            record,
            existing,
            takeover_wait,
            previous_reach_ms: previous.as_ref().map_or(0, WorkerRecord::reach),
            previous_token: previous.as_ref().map_or(0, |p| p.holder),
            previous_holder: previous.map(|p| p.identity),
            previous_open,
            _hold: Some(hold),
        }
    }

    /// Adds `claim` to the registry's and starts its keeper on `lease` (0: none yet): the
    /// hold of its registration.
    fn keep(&self, claim: Claim, lease: i64) -> Hold {
        let claim = Arc::new(claim);
        self.claims.add(&claim);
        let keeper = tokio::spawn(keep(
            self.keys.clone(),
            claim.clone(),
            self.ttl_secs,
            self.terms(),
            lease,
        ));
        Hold::new(EtcdHold {
            keeper,
            _claim: claim,
        })
    }
}

impl Keys {
    fn workers(&self, service: &str) -> String {
        format!("{}/{service}/workers/", self.root)
    }

    fn worker_key(&self, service: &str, id: u32) -> String {
        format!("{}{id}", self.workers(service))
    }

    fn holder_key(&self, identity: &Identity) -> String {
        format!(
            "{}/{}/holders/{}:{}",
            self.root, identity.service, identity.host, identity.port
        )
    }

    /// floe's mirror of a store's epoch, with its version (its `mod_revision`).
    async fn store_epoch(
        &self,
        service: &str,
        name: &str,
    ) -> Result<Option<(i64, i64)>, RegistryError> {
        let key = records::store_epoch_place(&self.root, service, name);
        let resp = self
            .client
            .get(key.as_str())
            .await
            .map_err(|e| map_err(&format!("read {key}"), e))?;
        match resp.kvs.first() {
            Some(kv) => Ok(Some((
                records::decode_epoch("etcd", &key, &kv.value)?,
                kv.mod_revision,
            ))),
            None => Ok(None),
        }
    }

    /// Runs a transaction; whether its conditions held. `what` names it in errors.
    async fn run(&self, txn: Txn, what: &str) -> Result<bool, RegistryError> {
        let resp = self.client.txn(txn).await.map_err(|e| map_err(what, e))?;
        Ok(resp.succeeded)
    }
}

#[async_trait]
impl VersionedRecords for Keys {
    type Version = i64;

    fn store(&self) -> &'static str {
        "etcd"
    }

    fn place(&self, identity: &Identity, id: u32) -> String {
        self.worker_key(&identity.service, id)
    }

    async fn read(
        &self,
        identity: &Identity,
        id: u32,
    ) -> Result<Option<(WorkerRecord, i64)>, RegistryError> {
        let key = self.worker_key(&identity.service, id);
        let resp = self
            .client
            .get(key.as_str())
            .await
            .map_err(|e| map_err(&format!("read {key}"), e))?;
        match resp.kvs.first() {
            Some(kv) => Ok(Some((decode("etcd", &key, &kv.value)?, kv.mod_revision))),
            None => Ok(None),
        }
    }

    async fn read_all(&self, service: &str) -> Result<Vec<(WorkerRecord, i64)>, RegistryError> {
        let prefix = self.workers(service);
        let resp = self
            .client
            .get_prefix(prefix.as_str())
            .await
            .map_err(|e| map_err(&format!("list {prefix}"), e))?;
        resp.kvs
            .iter()
            .map(|kv| {
                let key = String::from_utf8_lossy(&kv.key);
                Ok((decode("etcd", &key, &kv.value)?, kv.mod_revision))
            })
            .collect()
    }

    async fn create(&self, record: &WorkerRecord) -> Result<bool, RegistryError> {
        let key = self.worker_key(&record.identity.service, record.id);
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), encode(record)?, 0)]);
        self.run(txn, &format!("create {key}")).await
    }

    async fn replace(&self, record: &WorkerRecord, version: i64) -> Result<bool, RegistryError> {
        let key = self.worker_key(&record.identity.service, record.id);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.as_str(),
                CompareOp::Equal,
                version,
            )])
            .and_then([TxnOp::put(key.as_str(), encode(record)?, 0)]);
        self.run(txn, &format!("write {key}")).await
    }

    async fn take_over(
        &self,
        record: &WorkerRecord,
        version: i64,
        previous: &Identity,
    ) -> Result<bool, RegistryError> {
        let key = self.worker_key(&record.identity.service, record.id);
        let previous_holder = self.holder_key(previous);
        // Only if unchanged since read and its holder's claim is gone (lease ended).
        let txn = Txn::new()
            .when([
                Compare::mod_revision(key.as_str(), CompareOp::Equal, version),
                Compare::create_revision(previous_holder.as_str(), CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::put(key.as_str(), encode(record)?, 0)]);
        self.run(txn, &format!("take over {key}")).await
    }

    async fn delete(&self, record: &WorkerRecord, version: i64) -> Result<bool, RegistryError> {
        let key = self.worker_key(&record.identity.service, record.id);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.as_str(),
                CompareOp::Equal,
                version,
            )])
            .and_then([TxnOp::delete(key.as_str())]);
        self.run(txn, &format!("delete {key}")).await
    }
}

/// Grants a lease and creates the holder key `key` under it, naming registration `holder`,
/// unless it exists: the lease and when its grant was sent (its TTL runs from a moment after
/// that), or `None` when the key exists.
async fn claim_holder(
    keys: &Keys,
    key: &str,
    ttl_secs: i64,
    holder: u64,
) -> Result<Option<(i64, Sent)>, RegistryError> {
    let client = &keys.client;
    let sent = Sent::now(&*keys.clock);
    let lease = client
        .lease_grant(ttl_secs)
        .await
        .map_err(|e| map_err("grant a lease", e))?
        .id;
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key, holder.to_string(), lease)]);
    match client.txn(txn).await {
        Ok(resp) if resp.succeeded => Ok(Some((lease, sent))),
        other => {
            let _ = client.lease_revoke(lease).await;
            other
                .map(|_| None)
                .map_err(|e| map_err(&format!("claim {key}"), e))
        }
    }
}

/// The lease of holder key `key` if it names registration `holder` (a claim of ours), `None`
/// when the key is gone or another registration's.
async fn own_lease(client: &dyn Kv, key: &str, holder: u64) -> Result<Option<i64>, RegistryError> {
    let resp = client
        .get(key)
        .await
        .map_err(|e| map_err(&format!("read {key}"), e))?;
    Ok(resp
        .kvs
        .first()
        .filter(|kv| kv.value == holder.to_string().as_bytes())
        .map(|kv| kv.lease))
}

/// Whether the keep-alive of `lease` succeeded: `Some(true)` alive, `Some(false)` the lease is
/// gone, `None` etcd did not answer in time.
async fn keep_alive_once(client: &dyn Kv, lease: i64, within: Duration) -> Option<bool> {
    let round = async { client.lease_keep_alive_once(lease).await.ok()? };
    match tokio::time::timeout(within, round).await {
        Ok(Some(resp)) => Some(resp.ttl > 0),
        // The stream ended without an answer: treat as no answer.
        Ok(None) | Err(_) => None,
    }
}

/// The keeper: keeps the lease alive, each keep-alive answered moving the fence's deadline to
/// its send time plus the window; raises the fence when the lease is gone, and lowers it when
/// the ID is held again under a new lease, the record still the identity's and its last time
/// not past what this process recorded. An ID lost for good (see [`Claim::lose`]) is never
/// lowered: the keeper then ends the lease, so that the identity is not kept claimed, and
/// stops.
async fn keep(keys: Keys, claim: Arc<Claim>, ttl_secs: i64, terms: LeaseTerms, mut lease: i64) {
    let (client, holder) = (&*keys.client, keys.holder_key(&claim.identity));
    let period = terms.confirm_every;
    // Keep-alives leave every period whatever the last one took: two lost in a row (each
    // waited for a period) still leave the window open for the third.
    // A continued claim (no lease yet) looks for its lease at once.
    let first = if lease == 0 { Duration::ZERO } else { period };
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + first, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if claim.lost().is_some() {
            let _ = client.lease_revoke(lease).await;
            return;
        }
        // Taken before the request leaves: the lease lives at least the TTL from a moment
        // after this, at the server.
        let sent = Sent::now(&*keys.clock);
        // No lease yet (a continued claim): look for the one it continues, or grant one.
        let answer = if lease == 0 {
            Some(false)
        } else {
            keep_alive_once(client, lease, period).await
        };
        match answer {
            Some(true) => {
                if claim.is_lapsed() {
                    // The lease outlived the doubt, so the identity stayed ours.
                    hold_again(&keys, &claim, None, sent).await;
                } else {
                    claim.confirmed(sent);
                }
                continue;
            }
            Some(false) => claim.lapse(),
            // No answer in time: nothing moves; the deadline closes the fence by itself when
            // the window runs out.
            None => {}
        }
        if !claim.is_lapsed() {
            continue;
        }
        // Hold the ID again under a fresh lease.
        let (new_lease, sent) = match claim_holder(&keys, &holder, ttl_secs, claim.holder).await {
            Ok(Some(claimed)) => claimed,
            Ok(None) => {
                match own_lease(client, &holder, claim.holder).await {
                    // Our own claim after all: a grant whose answer was lost. Keep that lease:
                    // the next keep-alive on it confirms it (or finds it gone).
                    Ok(Some(orphan)) => {
                        lease = orphan;
                        continue;
                    }
                    Err(_) => continue,
                    Ok(None) => {}
                }
                // Our lease is gone (etcd said so), and the holder key stands for another
                // registration: another process claimed the identity meanwhile (a
                // replacement on a fresh state directory).
                claim.lose(RegistryError::new(
                    ErrorKind::Conflict,
                    format!(
                        "etcd: {} was claimed by another process while this one's lease had ended ({holder} is another lease's): worker ID {} stays fenced (no IDs): restart floe to register again",
                        claim.identity, claim.id
                    ),
                ));
                continue;
            }
            Err(_) => continue,
        };
        if hold_again(&keys, &claim, Some(new_lease), sent).await {
            lease = new_lease;
        }
    }
}

/// Lowers the fence of `claim` if its ID may be held again (see
/// [`records::may_hold_again`]), with a window from `sent` (when the request that confirmed the
/// lease was sent); loses it for good on a conflict. `new_lease`, if any, is revoked unless the
/// ID is held again. Whether it is.
async fn hold_again(keys: &Keys, claim: &Claim, new_lease: Option<i64>, sent: Sent) -> bool {
    let held = records::may_hold_again(keys, claim).await;
    match &held {
        Ok(()) => claim.held_under(0, sent),
        Err(e) if e.kind == ErrorKind::Conflict => claim.lose(e.clone()),
        Err(_) => {}
    }
    if held.is_err() {
        if let Some(new_lease) = new_lease {
            let _ = keys.client.lease_revoke(new_lease).await;
        }
    }
    held.is_ok()
}

#[async_trait]
impl Registry for EtcdRegistry {
    fn name(&self) -> &'static str {
        "etcd"
    }

    async fn store_epoch(&self, service: &str, name: &str) -> Result<Option<i64>, RegistryError> {
        Ok(self.keys.store_epoch(service, name).await?.map(|(e, _)| e))
    }

    async fn keep_store_epoch(
        &self,
        service: &str,
        name: &str,
        epoch: i64,
    ) -> Result<bool, RegistryError> {
        let key = records::store_epoch_place(&self.keys.root, service, name);
        for _ in 0..records::KEEP_ATTEMPTS {
            // Only ever raised: a compare on the version read (0: absent).
            let version = match self.keys.store_epoch(service, name).await? {
                Some((e, _)) if e >= epoch => return Ok(true),
                Some((_, version)) => version,
                None => 0,
            };
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    version,
                )])
                .and_then([TxnOp::put(key.as_str(), epoch.to_string(), 0)]);
            if self.keys.run(txn, &format!("write {key}")).await? {
                return Ok(true);
            }
        }
        Err(RegistryError::new(
            ErrorKind::Unavailable,
            format!(
                "etcd: {key} changed under {} attempts in a row",
                records::KEEP_ATTEMPTS
            ),
        ))
    }

    fn location(&self) -> String {
        format!("{}://{}{}", self.scheme, self.endpoints, self.keys.root)
    }

    fn lease_terms(&self) -> Option<LeaseTerms> {
        Some(self.terms())
    }

    fn holder_linger(&self) -> Duration {
        // The lease lives its TTL after the last keep-alive; etcd checks expiry every 0.5 s.
        Duration::from_secs(u64::try_from(self.ttl_secs).unwrap_or(0)) + Duration::from_millis(500)
    }

    async fn register(
        &self,
        identity: &Identity,
        space: IdSpace,
    ) -> Result<Registration, RegistryError> {
        identity.validate()?;
        let key = self.keys.holder_key(identity);
        let holder = records::new_holder();
        let Some((lease, sent)) = self.claim(identity, holder).await? else {
            return Err(RegistryError::new(
                ErrorKind::Conflict,
                format!("{identity} is held by another live process ({key} exists until its lease ends)"),
            ));
        };
        match records::allocate(&self.keys, identity, space, self.terms(), holder).await {
            Ok(allocation) => Ok(self.registration(allocation, lease, sent)),
            Err(e) => {
                let _ = self.keys.client.lease_revoke(lease).await;
                Err(e)
            }
        }
    }

    async fn heartbeat(
        &self,
        identity: &Identity,
        id: u32,
        last_time_ms: u64,
    ) -> Result<(), RegistryError> {
        let claim = self.claims.find(identity, id);
        if let Some(claim) = &claim {
            if let Some(lost) = claim.lost() {
                return Err(lost);
            }
            if claim.is_lapsed() {
                return Err(RegistryError::new(
                    ErrorKind::Unavailable,
                    format!("etcd: the lease of {identity} was lost or may be; holding worker ID {id} again (IDs go on until the window of the last confirmation ends)"),
                ));
            }
            claim.record(last_time_ms);
        }
        let result = records::heartbeat(
            &self.keys,
            identity,
            id,
            last_time_ms,
            claim.as_ref().map(|c| c.holder),
        )
        .await;
        records::settle(claim.as_deref(), result)
    }

    async fn release(&self, identity: &Identity) -> Result<bool, RegistryError> {
        // Never under a live holder: another identity could be given the ID while it issues.
        let holder = self.keys.holder_key(identity);
        let resp = self
            .keys
            .client
            .get(holder.as_str())
            .await
            .map_err(|e| map_err(&format!("read {holder}"), e))?;
        if !resp.kvs.is_empty() {
            return Err(crate::plan::released_while_held(identity, &holder));
        }
        records::release(&self.keys, identity).await
    }

    fn adopt(&self, continued: &crate::Continued, fence: Arc<Fence>) -> Option<Registration> {
        let claim = Claim::adopted(continued, fence.clone(), self.terms().window, 0);
        // No lease yet (0): the keeper finds the continued registration's own, or grants one.
        let hold = self.keep(claim, 0);
        Some(Registration {
            fence,
            ..Registration::new(continued.record(), true, Some(hold))
        })
    }

    async fn list(&self, service: &str) -> Result<Vec<WorkerRecord>, RegistryError> {
        Ok(records::list(&self.keys, service)
            .await?
            .into_iter()
            .map(|(r, _)| r)
            .collect())
    }

    async fn close(&self, identity: &Identity, id: u32) -> Result<(), RegistryError> {
        // Only this registry's own claim: another registration of the identity (a replacement
        // that took it over) is not ours to mark closed or to end.
        let Some(claim) = self.claims.find(identity, id) else {
            return Ok(());
        };
        records::mark_closed(&self.keys, identity, id, claim.holder).await?;
        let key = self.keys.holder_key(identity);
        if let Some(lease) = own_lease(&*self.keys.client, &key, claim.holder).await? {
            self.keys
                .client
                .lease_revoke(lease)
                .await
                .map_err(|e| map_err("revoke the lease", e))?;
        }
        Ok(())
    }

    async fn reclaim(
        &self,
        identity: &Identity,
        space: IdSpace,
        idle_before_ms: u64,
    ) -> Result<Option<Registration>, RegistryError> {
        identity.validate()?;
        let holder = records::new_holder();
        let Some((lease, sent)) = self.claim(identity, holder).await? else {
            return Err(RegistryError::new(
                ErrorKind::Conflict,
                format!("{identity} is held by another live process"),
            ));
        };
        let taken = records::take_over_idle(
            &self.keys,
            identity,
            space,
            idle_before_ms,
            self.terms(),
            holder,
        )
        .await;
        if !matches!(taken, Ok(Some(_))) {
            // Nothing taken: do not keep the identity claimed.
            let _ = self.keys.client.lease_revoke(lease).await;
        }
        Ok(taken?.map(|allocation| self.registration(allocation, lease, sent)))
    }
}
