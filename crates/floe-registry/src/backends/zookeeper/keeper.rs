//! The keeper of a registry's session: confirms its claims every `T/6`, connects a lost
//! connection again, and after an expiry opens a new session and holds every claim again.

use std::sync::{Arc, Weak};
use std::time::Duration;

use zookeeper_client::{Error as ZkError, SessionState};

use floe_core::clock::SystemClock;
use floe_core::fence::Sent;

use super::records;
use super::session::{end_session, open_session, resume_session, RESUME_EVERY};
use super::{create_holder, HolderNode, Shared, ZkRegistry};
use crate::{ErrorKind, RegistryError};

/// The keeper of a registry's session: confirms the session's claims every `T/6` by a write
/// (see the module docs); when the session ends, fences every claim, opens a new session and
/// holds each claim's ID again. Ends with the registry and its registrations.
pub(super) async fn keep(shared: Weak<Shared>, mut watcher: zookeeper_client::StateWatcher) {
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
        let Some(new) = new_session(&shared).await else {
            return;
        };
        watcher = new;
        disconnected_since = None;
        match rhythm(&shared) {
            Some((e, c)) => (every, confirm) = (e, c),
            None => return,
        }
    }
}

/// After the session ended: tells the registry so (its claims wait to be held again), then
/// opens a new session with the timeout first asked for, trying again with a backoff (0.1 s
/// doubling to 2 s) until one opens, and installs it. `None` once the registry is gone (a
/// session opened meanwhile is ended at once: nobody would end it).
async fn new_session(shared: &Weak<Shared>) -> Option<zookeeper_client::StateWatcher> {
    let asked = {
        let shared = shared.upgrade()?;
        shared.expired();
        shared.asked
    };
    let mut backoff = Duration::from_millis(100);
    loop {
        let cluster = shared.upgrade()?.cluster.clone();
        match open_session(&cluster, asked).await {
            Ok(client) => {
                let watcher = client.state_watcher();
                match shared.upgrade() {
                    Some(shared) => shared.install(client),
                    None => {
                        // Nobody to hand it to: end it now (it is detached).
                        let info = client.session().clone();
                        end_session(&cluster, info, client.session_timeout()).await;
                        return None;
                    }
                }
                return Some(watcher);
            }
            Err(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
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
                || txn
                    .add_set_data(
                        &holder,
                        claim.holder.to_string().as_bytes(),
                        Some(stat.version),
                    )
                    .is_err()
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
        let held = match create_holder(&session.client, &shared.cluster, &holder, claim.holder)
            .await
        {
            Ok(node @ (HolderNode::Created | HolderNode::Ours)) => {
                created = matches!(node, HolderNode::Created);
                records::may_hold_again(&registry, &claim).await
            }
            // This registry's own ended session: a ZooKeeper restarted from its snapshot
            // keeps it alive for a session timeout more, after the client gave it up. Or the
            // session of the process this one continues (the node names this registration):
            // it is dead, its session lingers until the server expires it. Wait for its node
            // to go; the claim's window runs on meanwhile.
            Ok(HolderNode::Taken(owner, number))
                if shared.was_ours(owner) || number == Some(claim.holder) =>
            {
                unsettled = true;
                continue;
            }
            Ok(HolderNode::Taken(..)) => Err(RegistryError::new(
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
                claim.set_window(shared.terms().window);
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
