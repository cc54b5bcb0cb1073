//! The worker-ID lease rule ([`floe_registry::terms`]), modelled and checked exhaustively
//! with [stateright](https://docs.rs/stateright).
//!
//! Runs prove that floe did not repeat an ID in the runs made; this proves, for every
//! interleaving of a small fleet's events, that no two nodes can issue IDs with one worker ID at
//! the same moment. The property is **one issuer per ID**: at every instant, at most one
//! node may issue with each worker ID.
//!
//! **What is modelled** (lease rule 2: a reach `H` chosen apart from the registry's expiry).
//! Nodes (3 in the suite) and worker IDs (2). Time moves in ticks of the margin `H/10`. A node
//! registers (the registry gives it the lowest free ID and a session); a holder sends
//! confirmations (keep-alives, writes on its session), each taking up to [`Lease::delay`]
//! ticks each way or lost (a partition); it issues while its last *confirmed send* is less than
//! the window `W = 9H/10` old by its own clock, whatever became of its session meanwhile. It
//! may stop cleanly (the record is marked closed), crash (its session lingers until the
//! registry expires it), restart from its state directory (continuing its lease from the last
//! confirmation it recorded, with no session of its own until it holds the ID again), or pause
//! with its clock standing still (a frozen VM) for up to [`Lease::frozen`] ticks. The registry
//! expires a session a tick after the last request it saw (its expiry `T` is far shorter than
//! `H`: 6 s against 900 s by default), or at any time (ZooKeeper: the leader, which expires
//! sessions, may never hear of the requests a follower answered). A node whose session ended
//! holds its ID again under a new one if nobody registered the ID meanwhile, and has lost it
//! otherwise. An ID whose holder did not close it cleanly is taken only after a wait of
//! [`Lease::wait`] ticks, on etcd as on ZooKeeper.
//!
//! **Bounds of the check.** At most one crash or restart, one pause, one clean stop, and one
//! registration more than there are nodes (a restart or a takeover), in any order, at any
//! moment; time itself is unbounded (every age is capped where larger ones behave alike).
//! Clock rates are not modelled below a tick: the window is rounded up and the waits down.
//!
//! **Planted bugs** the suite makes the checker find ([`Lease::bug_from_answer`],
//! [`Lease::bug_restart_afresh`], a window as long as the takeover wait, no takeover wait)
//! show that the property can fail, and how.

use std::time::Duration;

use floe_registry::terms::LeaseTerms;
use stateright::{Model, Property};

/// What a node does with an ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Holds nothing (not started, stopped, crashed, or its ID lost).
    Idle,
    /// Registered the ID; waiting out a previous holder that did not close it cleanly.
    Waiting {
        /// The worker ID.
        id: u8,
        /// Ticks of its own clock left to wait.
        left: u8,
    },
    /// Holds the ID: issues while its last confirmed send is less than the window old.
    Holding {
        /// The worker ID.
        id: u8,
    },
}

/// A confirmation of a node's claim in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// On its way to the registry, `age` ticks since it was sent.
    Out {
        /// Ticks since the send.
        age: u8,
    },
    /// Its answer on its way back (`ok`: the session was alive when it arrived).
    Back {
        /// Whether the registry confirmed the claim.
        ok: bool,
        /// Ticks since the send.
        age: u8,
    },
}

/// One node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// What it does.
    pub phase: Phase,
    /// Ticks of its own clock since it sent the last request the registry confirmed (capped at
    /// the window: older is as old).
    pub confirmed: u8,
    /// Paused with its clock standing still: for how many ticks so far.
    pub paused: Option<u8>,
    /// Its confirmation in flight (one at a time).
    pub msg: Option<Msg>,
    /// Restarted from its state directory: the session the registry holds for it is its dead
    /// predecessor's, which it cannot confirm on; it holds the ID again once that one is gone.
    pub detached: bool,
}

/// A node's session (ZooKeeper) or lease (etcd) at the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Session {
    /// Whether the registry still holds it.
    pub alive: bool,
    /// Ticks since the registry last heard from it (capped at the expiry).
    pub since_seen: u8,
}

/// The fleet and the registry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Registrations so far (bounded: see the module docs).
    pub registrations: u8,
    /// Crashes, pauses and clean stops so far (at most one each).
    pub crashes: u8,
    /// See `crashes`.
    pub pauses: u8,
    /// See `crashes`.
    pub closes: u8,
    /// Sessions the ZooKeeper leader expired so far ([`Lease::max_expiries`]).
    pub expiries: u8,
    /// The nodes.
    pub nodes: Vec<Node>,
    /// Each node's latest session.
    pub sessions: Vec<Option<Session>>,
    /// Per worker ID: the node whose session holds it.
    pub holder: Vec<Option<u8>>,
    /// Per worker ID: whether its last holder closed it cleanly (true while never held).
    pub closed: Vec<bool>,
    /// Per worker ID: the node that registered it last (its record's registration number).
    pub owner: Vec<Option<u8>>,
}

/// What can happen next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A tick of time passes.
    Tick,
    /// Node `n` sends a confirmation.
    Send(u8),
    /// It reaches the registry, which refreshes the session (etcd).
    Arrive(u8),
    /// It reaches the registry, which answers it without the expiry learning of it
    /// (ZooKeeper: a follower answers).
    ArriveUnseen(u8),
    /// The answer reaches node `n`.
    Deliver(u8),
    /// The registry expires node `n`'s session (before the tick that forces it).
    Expire(u8),
    /// Node `n` registers and is given worker ID `id`.
    Register(u8, u8),
    /// Node `n` stops cleanly.
    Close(u8),
    /// Node `n` crashes.
    Crash(u8),
    /// Node `n` pauses with its clock standing still.
    Pause(u8),
    /// Node `n` resumes.
    Resume(u8),
    /// Node `n`, whose session ended (or which restarted), holds its ID again under a new
    /// session if nobody registered it meanwhile, or learns that it lost it.
    HoldAgain(u8),
    /// Node `n` is killed and started again on its state directory, continuing its lease.
    Restart(u8),
}

/// The lease rule in ticks, and the fleet it is checked on.
#[derive(Clone, Debug)]
pub struct Lease {
    /// Nodes in the fleet.
    pub nodes: u8,
    /// Worker IDs.
    pub ids: u8,
    /// `T`: the registry gives a session's IDs away once it heard nothing of it for this many
    /// ticks.
    pub expiry: u8,
    /// ZooKeeper: the leader may expire a session this many ticks before `T`, counted from the
    /// session's start, whatever its holder's confirmations (it may hear of none of them).
    /// `None`: the registry sees every confirmation that it answers (etcd).
    pub unseen_early: Option<u8>,
    /// `W`: a holder issues while its last confirmed send is less than this many of its ticks
    /// old.
    pub window: u8,
    /// A node taking an ID whose holder did not close it cleanly waits this many of its ticks.
    pub wait: u8,
    /// The longest one-way trip of a message (a longer one is lost).
    pub delay: u8,
    /// The longest pause with the clock standing still.
    pub frozen: u8,
    /// ZooKeeper: at most this many sessions expired by its leader in a run (`None`: any
    /// number), a bound of the check like the crashes and pauses.
    pub max_expiries: Option<u8>,
    /// Planted bug: a confirmation counts from its answer instead of its send.
    pub bug_from_answer: bool,
    /// Planted bug: a restart counts its lease from the restart, not from the last
    /// confirmation its predecessor recorded.
    pub bug_restart_afresh: bool,
}

/// Ticks per reach: the model's time unit is the margin, `H/10`.
pub const TICKS_PER_REACH: u64 = 10;

impl Lease {
    /// The rule floe-registry applies at reach `reach` (its [`LeaseTerms`] and
    /// [`LeaseTerms::takeover_wait`]), in ticks of `H/10`: the window rounded up, the takeover
    /// wait down; `zookeeper` for its unseen confirmations. A frozen pause of up to `frozen`
    /// ticks.
    pub fn floe(reach: Duration, zookeeper: bool, frozen: u8, nodes: u8, ids: u8) -> Lease {
        Lease::floe_in(TICKS_PER_REACH, reach, zookeeper, frozen, nodes, ids)
    }

    /// As [`floe`](Self::floe), in ticks of `H/ticks` (coarser ticks: fewer states, and a
    /// margin that rounds away, so no frozen pause can be covered).
    pub fn floe_in(
        ticks: u64,
        reach: Duration,
        zookeeper: bool,
        frozen: u8,
        nodes: u8,
        ids: u8,
    ) -> Lease {
        // The registry's expiry is seconds, far below a tick: it plays no part in the rule.
        let terms = LeaseTerms::new(Duration::from_secs(6), reach);
        let tick_ms = u64::try_from(terms.reach.as_millis()).unwrap_or(u64::MAX) / ticks.max(1);
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let up = |d: Duration| u8::try_from(ms(d).div_ceil(tick_ms)).unwrap_or(u8::MAX);
        let down = |d: Duration| u8::try_from(ms(d) / tick_ms).unwrap_or(u8::MAX);
        Lease {
            nodes,
            ids,
            expiry: 1,
            unseen_early: zookeeper.then_some(1),
            window: up(terms.window),
            wait: down(terms.own_takeover_wait()),
            delay: 1,
            frozen,
            max_expiries: None,
            bug_from_answer: false,
            bug_restart_afresh: false,
        }
    }

    /// Whether node `n` may issue IDs with worker ID `id` now.
    pub fn may_issue(&self, n: &Node, id: u8) -> bool {
        n.phase == Phase::Holding { id } && n.paused.is_none() && n.confirmed < self.window
    }

    fn free(s: &mut State, node: u8) {
        for h in s.holder.iter_mut() {
            if *h == Some(node) {
                *h = None;
            }
        }
    }

    fn tick(&self, s: &mut State) {
        for n in s.nodes.iter_mut() {
            if let Some(p) = &mut n.paused {
                *p += 1;
            } else {
                n.confirmed = (n.confirmed + 1).min(self.window);
                if let Phase::Waiting { id, left } = n.phase {
                    n.phase = if left <= 1 {
                        Phase::Holding { id }
                    } else {
                        Phase::Waiting { id, left: left - 1 }
                    };
                }
            }
            n.msg = match n.msg {
                Some(Msg::Out { age }) if age < self.delay => Some(Msg::Out { age: age + 1 }),
                Some(Msg::Back { ok, age }) if age < 2 * self.delay => {
                    Some(Msg::Back { ok, age: age + 1 })
                }
                // Older: lost on the way.
                _ => None,
            };
        }
        for i in 0..s.sessions.len() {
            let Some(x) = &mut s.sessions[i] else {
                continue;
            };
            if !x.alive {
                continue;
            }
            x.since_seen = (x.since_seen + 1).min(self.expiry);
            if self.unseen_early.is_none() && x.since_seen >= self.expiry {
                x.alive = false;
                Lease::free(s, i as u8);
            }
        }
    }
}

/// Index `i` as a node number.
fn node(i: usize) -> u8 {
    u8::try_from(i).unwrap_or(u8::MAX)
}

impl Model for Lease {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let idle = Node {
            phase: Phase::Idle,
            confirmed: self.window,
            paused: None,
            msg: None,
            detached: false,
        };
        vec![State {
            registrations: 0,
            crashes: 0,
            pauses: 0,
            closes: 0,
            expiries: 0,
            nodes: vec![idle; usize::from(self.nodes)],
            sessions: vec![None; usize::from(self.nodes)],
            holder: vec![None; usize::from(self.ids)],
            closed: vec![true; usize::from(self.ids)],
            owner: vec![None; usize::from(self.ids)],
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        // Time moves on unless a frozen pause would outlast its bound.
        if !s
            .nodes
            .iter()
            .any(|n| n.paused.is_some_and(|p| p >= self.frozen))
        {
            actions.push(Action::Tick);
        }
        for (i, n) in s.nodes.iter().enumerate() {
            let i = node(i);
            let running = n.paused.is_none();
            let session = s.sessions[usize::from(i)];
            match n.msg {
                None if running && n.phase != Phase::Idle => actions.push(Action::Send(i)),
                Some(Msg::Out { .. }) if self.unseen_early.is_some() => {
                    actions.push(Action::ArriveUnseen(i));
                }
                Some(Msg::Out { .. }) => actions.push(Action::Arrive(i)),
                Some(Msg::Back { .. }) if running => actions.push(Action::Deliver(i)),
                _ => {}
            }
            if let (Some(x), Some(early)) = (session, self.unseen_early) {
                if x.alive
                    && x.since_seen + early >= self.expiry
                    && self.max_expiries.is_none_or(|m| s.expiries < m)
                {
                    actions.push(Action::Expire(i));
                }
            }
            let session_alive = session.is_some_and(|x| x.alive);
            if running && n.phase == Phase::Idle && n.msg.is_none() && !session_alive {
                // The lowest free ID, as the registries allocate.
                let free = (0..self.ids).find(|&id| s.holder[usize::from(id)].is_none());
                if let Some(id) = free.filter(|_| s.registrations < self.nodes + 1) {
                    actions.push(Action::Register(i, id));
                }
            }
            if n.phase != Phase::Idle {
                if running && s.closes == 0 {
                    actions.push(Action::Close(i));
                }
                if s.crashes == 0 {
                    actions.push(Action::Crash(i));
                    if matches!(n.phase, Phase::Holding { .. }) {
                        actions.push(Action::Restart(i));
                    }
                }
                if running && n.msg.is_none() && (n.detached || !session_alive) {
                    actions.push(Action::HoldAgain(i));
                }
                if running && s.pauses == 0 && self.frozen > 0 && n.msg.is_none() {
                    actions.push(Action::Pause(i));
                }
            }
            if n.paused.is_some() {
                actions.push(Action::Resume(i));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => self.tick(&mut s),
            Action::Send(i) => s.nodes[usize::from(i)].msg = Some(Msg::Out { age: 0 }),
            Action::Arrive(i) | Action::ArriveUnseen(i) => {
                let Some(Msg::Out { age }) = s.nodes[usize::from(i)].msg else {
                    return None;
                };
                let detached = s.nodes[usize::from(i)].detached;
                let ok = match &mut s.sessions[usize::from(i)] {
                    Some(x) if x.alive && !detached => {
                        if action == Action::Arrive(i) {
                            x.since_seen = 0;
                        }
                        true
                    }
                    _ => false,
                };
                s.nodes[usize::from(i)].msg = Some(Msg::Back { ok, age });
            }
            Action::Deliver(i) => {
                let n = &mut s.nodes[usize::from(i)];
                let Some(Msg::Back { ok, age }) = n.msg.take() else {
                    return None;
                };
                if ok {
                    // The claim holds from the moment the request was sent (not answered).
                    let sent = if self.bug_from_answer { 0 } else { age };
                    n.confirmed = n.confirmed.min(sent);
                }
                // Not confirmed (the session is gone): nothing moves. The window runs out by
                // itself unless the node holds the ID again (HoldAgain).
            }
            Action::Expire(i) => {
                if let Some(x) = &mut s.sessions[usize::from(i)] {
                    x.alive = false;
                }
                s.expiries += 1;
                Lease::free(&mut s, i);
            }
            Action::Register(i, id) => {
                s.sessions[usize::from(i)] = Some(Session {
                    alive: true,
                    since_seen: 0,
                });
                s.holder[usize::from(id)] = Some(i);
                s.owner[usize::from(id)] = Some(i);
                s.registrations += 1;
                let clean = std::mem::replace(&mut s.closed[usize::from(id)], false);
                let n = &mut s.nodes[usize::from(i)];
                // The registration is a request the registry answered: confirmed from its send.
                n.confirmed = 0;
                n.detached = false;
                n.phase = if clean || self.wait == 0 {
                    Phase::Holding { id }
                } else {
                    Phase::Waiting {
                        id,
                        left: self.wait,
                    }
                };
            }
            Action::Close(i) => {
                let n = &mut s.nodes[usize::from(i)];
                let (Phase::Holding { id } | Phase::Waiting { id, .. }) = n.phase else {
                    return None;
                };
                let holding = matches!(n.phase, Phase::Holding { .. });
                n.phase = Phase::Idle;
                n.msg = None;
                s.closes += 1;
                // Only the holder marks the record closed (a compare on the holder), and only
                // once its wait is over: a start stopped while it waits leaves it open.
                let session = &mut s.sessions[usize::from(i)];
                if session.is_some_and(|x| x.alive) && s.holder[usize::from(id)] == Some(i) {
                    s.closed[usize::from(id)] = holding;
                    s.holder[usize::from(id)] = None;
                }
                if let Some(x) = session {
                    x.alive = false;
                }
            }
            Action::Crash(i) => {
                let n = &mut s.nodes[usize::from(i)];
                n.msg = None;
                n.phase = Phase::Idle;
                n.paused = None;
                n.detached = false;
                s.crashes += 1;
            }
            Action::Pause(i) => {
                s.nodes[usize::from(i)].paused = Some(0);
                s.pauses += 1;
            }
            Action::Resume(i) => s.nodes[usize::from(i)].paused = None,
            Action::HoldAgain(i) => {
                let (Phase::Holding { id } | Phase::Waiting { id, .. }) =
                    s.nodes[usize::from(i)].phase
                else {
                    return None;
                };
                let id = usize::from(id);
                if s.holder[id].is_none() && s.owner[id] == Some(i) {
                    // Free, and its record still this registration's: a new session's claim,
                    // confirmed from its send.
                    s.sessions[usize::from(i)] = Some(Session {
                        alive: true,
                        since_seen: 0,
                    });
                    s.holder[id] = Some(i);
                    let n = &mut s.nodes[usize::from(i)];
                    n.confirmed = 0;
                    n.detached = false;
                } else if s.holder[id] != Some(i) {
                    // Registered again by another: lost for good.
                    s.nodes[usize::from(i)].phase = Phase::Idle;
                    s.nodes[usize::from(i)].detached = false;
                } else {
                    // Its dead predecessor's session still holds it: try later.
                    return None;
                }
            }
            Action::Restart(i) => {
                let n = &mut s.nodes[usize::from(i)];
                n.msg = None;
                n.paused = None;
                n.detached = true;
                if self.bug_restart_afresh {
                    n.confirmed = 0;
                }
                s.crashes += 1;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![Property::always(
            "one issuer per ID",
            |m: &Lease, s: &State| {
                (0..m.ids).all(|id| s.nodes.iter().filter(|n| m.may_issue(n, id)).count() <= 1)
            },
        )]
    }
}

/// The state with its nodes in a canonical order (nodes are interchangeable), for the
/// checker's symmetry reduction.
pub fn representative(s: &State) -> State {
    let mut order: Vec<usize> = (0..s.nodes.len()).collect();
    order.sort_by_key(|&i| (s.nodes[i], s.sessions[i]));
    let mut renamed = vec![0u8; order.len()];
    for (new, &old) in order.iter().enumerate() {
        renamed[old] = node(new);
    }
    State {
        nodes: order.iter().map(|&i| s.nodes[i]).collect(),
        sessions: order.iter().map(|&i| s.sessions[i]).collect(),
        holder: s
            .holder
            .iter()
            .map(|h| h.map(|i| renamed[usize::from(i)]))
            .collect(),
        owner: s
            .owner
            .iter()
            .map(|h| h.map(|i| renamed[usize::from(i)]))
            .collect(),
        ..s.clone()
    }
}

/// A path of the checker, one line a step: each node's phase, confirmation age, pause and
/// message; each session; the holders; the action taken.
pub fn trace(path: &stateright::Path<State, Action>) -> String {
    let mut t = String::new();
    for (s, a) in path.clone().into_vec() {
        let nodes: Vec<String> = s
            .nodes
            .iter()
            .map(|n| {
                format!(
                    "{:?} c{} {:?} {:?}{}",
                    n.phase,
                    n.confirmed,
                    n.paused,
                    n.msg,
                    if n.detached { " detached" } else { "" }
                )
            })
            .collect();
        let sessions: Vec<String> = s
            .sessions
            .iter()
            .map(|x| match x {
                Some(x) if x.alive => format!("seen {} ago", x.since_seen),
                Some(_) => "expired".into(),
                None => "-".into(),
            })
            .collect();
        t.push_str(&format!(
            "{nodes:?} {sessions:?} holders {:?} -> {a:?}\n",
            s.holder
        ));
    }
    t
}
