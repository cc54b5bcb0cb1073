//! Who holds an ID, how many IDs there are, and the record a registry keeps of each.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::RegistryError;

/// Who holds a worker ID: a service and the host and port it runs on (as Leaf's
/// `/leaf_snowflake/{service}/{host:port}`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Identity {
    /// The service name.
    pub service: String,
    /// The host name or address.
    pub host: String,
    /// The port.
    pub port: u16,
}

impl Identity {
    /// An identity.
    pub fn new(service: impl Into<String>, host: impl Into<String>, port: u16) -> Self {
        Identity {
            service: service.into(),
            host: host.into(),
            port,
        }
    }

    /// Checks the fields: a non-empty service of `[A-Za-z0-9._-]`, a non-empty host.
    ///
    /// # Errors
    /// [`RegistryError`] of kind [`ErrorKind::Config`](crate::ErrorKind::Config) naming the field.
    pub fn validate(&self) -> Result<(), RegistryError> {
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        // Names become file and node names: bounded, so that a long one is a configuration
        // error here, not a "file name too long" taken for an unreachable registry.
        if self.service.is_empty() || self.service.len() > 100 || !self.service.chars().all(ok) {
            return Err(RegistryError::config(format!(
                "service: expected 1 to 100 letters, digits, '.', '_' or '-', found {}",
                floe_core::endpoint::quoted(&self.service)
            )));
        }
        if self.host.is_empty()
            || self.host.len() > 253
            || self.host.contains(['/', ' ', '\\'])
            || self.host.chars().any(char::is_control)
        {
            return Err(RegistryError::config(format!(
                "host: expected a host name or address of 1 to 253 bytes, found {}",
                floe_core::endpoint::quoted(&self.host)
            )));
        }
        Ok(())
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}:{}", self.service, self.host, self.port)
    }
}

/// How many IDs there are to hand out: `2^node_bits` for a Snowflake layout (1024 for `leaf`,
/// 32 x 32 for `twitter`), 65536 for sno partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdSpace {
    /// IDs run from 0 to `size - 1`.
    pub size: u32,
    /// The Snowflake layout the IDs are worker numbers of, if they are. A registry that keeps
    /// records of its own writes it into each record, and refuses a registration whose layout
    /// differs from one already recorded in the service: two layouts on one service issue
    /// the same IDs (worker 4 of `41/10/12` and worker 1 of `41/8/14` share their bits).
    pub layout: Option<floe_core::snowflake::Layout>,
}

impl IdSpace {
    /// `size` IDs of no particular layout.
    pub const fn new(size: u32) -> Self {
        IdSpace { size, layout: None }
    }

    /// The worker IDs of a Snowflake layout (datacenter and worker bits together).
    pub fn snowflake(layout: &floe_core::snowflake::Layout) -> Self {
        IdSpace {
            size: (layout.max_node() + 1).min(u64::from(u32::MAX)) as u32,
            layout: Some(*layout),
        }
    }

    /// sno partitions (16 bits).
    pub const SNO_PARTITIONS: IdSpace = IdSpace::new(1 << 16);

    /// How a record names this space's layout ([`WorkerRecord::layout`]); `None` when it has
    /// none.
    pub fn layout_text(&self) -> Option<String> {
        self.layout.map(|l| format!("snowflake {l}"))
    }
}

/// One allocated ID, as a registry records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRecord {
    /// The ID.
    pub id: u32,
    /// Who holds it.
    pub identity: Identity,
    /// The last time (Unix ms) its holder was known alive; 0 if never.
    pub last_time_ms: u64,
    /// The holder's local window in ms: how long after sending a request the registry
    /// confirmed it may issue IDs ([`crate::terms`]); 0 when unknown (a record from before
    /// floe kept it, or a registry without one). A process that takes the ID over after the
    /// holder's claim lapsed waits it out ([`crate::terms::LeaseTerms::takeover_wait`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub window_ms: u64,
    /// Whether its last holder closed it cleanly (stopped issuing for good and said so): a new
    /// holder need not wait out the previous one's window. False while held, and when the last
    /// holder crashed, was cut off or paused.
    #[serde(default, skip_serializing_if = "is_false")]
    pub closed: bool,
    /// Which registration holds it: a random number each registration writes (compare-and-set)
    /// before it hands the ID out, and every later write of its holder checks. A process that
    /// finds another number there knows the ID was registered again meanwhile (by another
    /// identity, or by a replacement with its own identity); 0 in records floe wrote before it
    /// kept one, and in the file registry (whose OS lock is the holder).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub holder: u64,
    /// The Snowflake layout its holder issues IDs of ([`IdSpace::layout_text`]), so that a
    /// node of another layout on the same service is refused rather than issuing the same
    /// IDs. `None` in records written before floe kept it, in sno's and LexicalUUID's, and in
    /// Leaf's nodes (whose format has no room for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// The lease rule its holder follows ([`LEASE_RULE`] in records this floe writes to a
    /// registry that leases; 0 in records written before floe numbered its rules, and in the
    /// file registry's and Leaf's). A floe that finds a rule above its own refuses to take the
    /// ID over: the holder may issue for longer than this floe's takeover would wait (a fleet
    /// mid-upgrade, or a downgrade).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub rule: u32,
    /// The holder's reach in ms ([`crate::terms`]): how long it may issue without hearing from
    /// its registry, margin included. 0 in records written under lease rule 1 (their reach
    /// counts as 3/2 of their window: [`WorkerRecord::reach`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reach_ms: u64,
}

/// The lease rule this floe follows ([`WorkerRecord::rule`]). Rule 1: a holder issued until
/// `2T/3` of the registry's expiry after its last confirmed send. Rule 2 (this floe): until
/// its reach less a margin, chosen apart from the expiry, and a takeover waits the reach and
/// margin ([`crate::terms`]). Nodes of the version that followed rule 1 refuse records of
/// rule 2 (they would wait too short a time for the holder); a later rule that lets a holder
/// issue for longer bumps it again.
pub const LEASE_RULE: u32 = 2;

/// What a worker record says of its ID ([`WorkerRecord::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    /// Its holder heartbeats (or has not yet): in use.
    Live,
    /// Its holder stopped for good and said so: another identity may take it at once.
    Closed,
    /// Its holder went silent without closing it (crashed, or cut off and perhaps still
    /// issuing): nobody else may take it before about `frees_at_ms` (Unix ms), unless an
    /// operator who knows the holder is gone releases it (`floe worker release`).
    Parked {
        /// About when a takeover could issue with it.
        frees_at_ms: u64,
    },
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl WorkerRecord {
    /// Its holder's reach in ms: as recorded, or for a record of lease rule 1 (none recorded)
    /// 3/2 of its window (`2T/3`): the registry's expiry, all that holder could issue for.
    pub fn reach(&self) -> u64 {
        if self.reach_ms > 0 {
            self.reach_ms
        } else {
            self.window_ms.saturating_mul(3) / 2
        }
    }

    /// What the record says of its ID at `now_ms` (Unix ms, this node's clock): closed by its
    /// holder; heartbeaten lately (a live holder); or silent, its holder crashed or cut off
    /// and perhaps still issuing: parked until about its last time plus a heartbeat and the
    /// takeover wait of its reach (a registry that ends claims with their process, the file
    /// registry, records no reach: nothing to wait).
    pub fn state(&self, now_ms: u64) -> RecordState {
        use crate::lease::{HEARTBEAT_INTERVAL, HEARTBEAT_TIMEOUT};
        if self.closed {
            return RecordState::Closed;
        }
        let silent_after = 2 * HEARTBEAT_INTERVAL + HEARTBEAT_TIMEOUT;
        let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let silent_since = self.last_time_ms.saturating_add(millis(silent_after));
        if self.last_time_ms == 0 || now_ms < silent_since || self.reach() == 0 {
            return RecordState::Live;
        }
        let wait = crate::terms::LeaseTerms::takeover_wait(self.reach(), std::time::Duration::ZERO);
        RecordState::Parked {
            frees_at_ms: self
                .last_time_ms
                .saturating_add(millis(HEARTBEAT_INTERVAL))
                .saturating_add(millis(wait)),
        }
    }

    /// A record of `id` held by `identity`, last alive at `last_time_ms`, open (held), with no
    /// window recorded.
    pub fn new(id: u32, identity: Identity, last_time_ms: u64) -> Self {
        WorkerRecord {
            id,
            identity,
            last_time_ms,
            window_ms: 0,
            closed: false,
            holder: 0,
            layout: None,
            rule: 0,
            reach_ms: 0,
        }
    }

    /// This record taken over by `identity` (registration `holder`) under `terms` (none: a
    /// registry without leases): the same
    /// ID and last time, a new holder, open.
    pub(crate) fn taken_over_by(
        self,
        identity: &Identity,
        space: IdSpace,
        terms: Option<crate::terms::LeaseTerms>,
        holder: u64,
    ) -> WorkerRecord {
        WorkerRecord {
            identity: identity.clone(),
            window_ms: terms.map_or(0, |t| t.window_ms()),
            reach_ms: terms.map_or(0, |t| t.reach_ms()),
            closed: false,
            holder,
            layout: space.layout_text().or(self.layout.clone()),
            rule: LEASE_RULE,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::terms::LeaseTerms;
    use std::time::Duration;

    fn held(last_time_ms: u64, reach_ms: u64) -> WorkerRecord {
        WorkerRecord {
            reach_ms,
            holder: 7,
            rule: LEASE_RULE,
            ..WorkerRecord::new(3, Identity::new("s", "h", 1), last_time_ms)
        }
    }

    #[test]
    fn a_record_is_live_closed_or_parked_until_its_reach_and_margin_pass() {
        let t = 1_000_000;
        // Heartbeaten within two beats and a timeout: live.
        assert_eq!(held(t, 900_000).state(t + 7_999), RecordState::Live);
        // Silent longer: parked until its last time, a beat and the takeover wait of its reach.
        let wait = LeaseTerms::takeover_wait(900_000, Duration::ZERO).as_millis() as u64;
        assert_eq!(wait, 1_009_850);
        assert_eq!(
            held(t, 900_000).state(t + 8_000),
            RecordState::Parked {
                frees_at_ms: t + 3_000 + wait
            }
        );
        // Closed by its holder: free for another identity at once, whatever its age.
        let closed = WorkerRecord {
            closed: true,
            ..held(t, 900_000)
        };
        assert_eq!(closed.state(t + 60_000), RecordState::Closed);
        // Never heartbeaten (registered a moment ago), or no reach (the file registry): live.
        assert_eq!(held(0, 900_000).state(t), RecordState::Live);
        assert_eq!(held(t, 0).state(t + 60_000), RecordState::Live);
        // A rule-1 record (no reach): 3/2 of its window.
        let old = WorkerRecord {
            reach_ms: 0,
            window_ms: 6_666,
            ..held(t, 0)
        };
        assert!(matches!(old.state(t + 9_000), RecordState::Parked { .. }));
    }
}
