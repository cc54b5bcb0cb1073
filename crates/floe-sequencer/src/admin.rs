//! What an operator sees and changes of a store's keys (the admin API), written once above
//! every store: a key's value and the next IDs without taking one, the keys a store holds,
//! a floor raised at run time, and registrations for registered-keys mode
//! ([`StoreHandle::registered_only`]).
//!
//! **Raising a floor at run time** ([`StoreHandle::raise_floor`]) lifts the key's value to at
//! least the floor, then reserves one more ID (a gap of one), so that a parked tail given back
//! elsewhere ([`Store::give_back`](crate::Store::give_back)) can no longer lower the value below
//! the floor; this process's WEAK buffer and parked tail of the key drop their IDs at or below
//! it. Every STRONG ID and every segment reserved afterwards is above the floor. **Other
//! processes** of the store hear of it through the store within
//! [`REACH`](crate::changes::REACH) (5 s) and drop what they hold ([`crate::changes`]).
//!
//! **Registrations** are kept apart from the values ([`Store::register`](crate::Store::register)):
//! a key unregistered and registered again goes on above every ID it issued. An unregistered
//! key is refused by this process at its next request, held in memory or not, and by every
//! other process of the store within the same bound.

use floe_core::sequence::Key;

use crate::{ErrorKind, SeqError, StoreHandle};

/// One key as the admin API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyState {
    /// The key.
    pub key: Key,
    /// The store's value: the last ID reserved (`None`: the store holds none).
    pub value: Option<i64>,
    /// The next STRONG ID, if nobody takes one first: the value plus one.
    pub next_strong: Option<i64>,
    /// The next WEAK ID this process would serve, if nobody takes one first: from the key's
    /// buffer or parked tail, else the first of a fresh segment (the value plus one).
    pub next_weak: Option<i64>,
    /// Whether the key is registered (`None`: the store keeps no registrations).
    pub registered: Option<bool>,
}

/// The most keys one page lists.
pub const MAX_PAGE: usize = 1000;

/// The highest floor [`StoreHandle::raise_floor`] takes: the raise itself takes the next ID, so
/// one is left to issue above it.
pub const MAX_FLOOR: i64 = i64::MAX - 2;

/// `Some` of a store call's answer, `None` when the store cannot (`Unsupported`).
fn supported<T>(answer: Result<T, SeqError>) -> Result<Option<T>, SeqError> {
    match answer {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind == ErrorKind::Unsupported => Ok(None),
        Err(e) => Err(e),
    }
}

fn check_page(limit: usize) -> Result<(), SeqError> {
    if (1..=MAX_PAGE).contains(&limit) {
        Ok(())
    } else {
        Err(SeqError::new(
            ErrorKind::InvalidArgument,
            format!("limit: expected 1 to {MAX_PAGE}, found {limit}"),
        ))
    }
}

impl StoreHandle {
    /// The same handle, serving only keys the store has registered ([`Store::register`]):
    /// others are refused with `UnknownKey`, as Leaf refuses tags that are not in its table.
    ///
    /// [`Store::register`]: crate::Store::register
    pub fn registered_only(mut self, on: bool) -> Self {
        self.registered_only = on;
        self
    }

    /// Whether it serves registered keys only.
    pub fn serves_registered_only(&self) -> bool {
        self.registered_only
    }

    /// One key as it stands, nothing taken.
    ///
    /// # Errors
    /// `Unsupported` from a store that cannot read its values; `Unavailable` as ever.
    pub async fn key_state(&self, key: &Key) -> Result<KeyState, SeqError> {
        let value = self
            .bounded("read the value of", key, self.store.value(key))
            .await?;
        self.state_of(key.clone(), value).await
    }

    async fn state_of(&self, key: Key, value: Option<i64>) -> Result<KeyState, SeqError> {
        let registered = supported(
            self.bounded(
                "read the registration of",
                &key,
                self.store.is_registered(&key),
            )
            .await,
        )?;
        Ok(self.state_with(key, value, registered))
    }

    /// `key`'s state from its value and registration: the next IDs from this process's buffer
    /// or parked tail, else the value's successor.
    fn state_with(&self, key: Key, value: Option<i64>, registered: Option<bool>) -> KeyState {
        let fresh = value.unwrap_or(0).checked_add(1);
        let buffered = self
            .keys
            .weak_of(&key)
            .and_then(|w| w.next_buffered())
            .or_else(|| self.keys.parked_first(&key));
        KeyState {
            next_strong: fresh,
            next_weak: buffered.or(fresh),
            value,
            registered,
            key,
        }
    }

    /// The registered keys from just after `after` to `last` (inclusive), in as few pages of
    /// [`Store::registered`](crate::Store::registered) as they take: one call for a page of
    /// keys, not one per key.
    async fn registered_between(
        &self,
        after: Option<&Key>,
        last: &Key,
    ) -> Result<Option<std::collections::HashSet<Key>>, SeqError> {
        let mut found = std::collections::HashSet::new();
        let mut cursor = after.cloned();
        loop {
            let call = self.store.registered(cursor.as_ref(), MAX_PAGE);
            let Some(page) = supported(
                self.bounded("list the registered keys up to", last, call)
                    .await,
            )?
            else {
                return Ok(None);
            };
            let full = page.len() == MAX_PAGE;
            let past = page.last().is_some_and(|k| k >= last);
            cursor = page.last().cloned();
            found.extend(page.into_iter().filter(|k| k <= last));
            if !full || past {
                return Ok(Some(found));
            }
        }
    }

    /// A page of the keys the store holds a value of, in byte order: at most `limit` (1 to
    /// [`MAX_PAGE`]), those after `after`.
    ///
    /// # Errors
    /// `InvalidArgument` for the limit; then as [`key_state`](Self::key_state).
    pub async fn key_states(
        &self,
        after: Option<&Key>,
        limit: usize,
    ) -> Result<Vec<KeyState>, SeqError> {
        check_page(limit)?;
        let anchor = after
            .cloned()
            .unwrap_or_else(|| Key::new("-").expect("a key"));
        let page = self
            .bounded(
                "list the keys after",
                &anchor,
                self.store.keys(after, limit),
            )
            .await?;
        let registered = match page.last() {
            Some((last, _)) => self.registered_between(after, last).await?,
            None => None,
        };
        Ok(page
            .into_iter()
            .map(|(key, value)| {
                let r = registered.as_ref().map(|set| set.contains(&key));
                self.state_with(key, Some(value), r)
            })
            .collect())
    }

    /// Raises `key`'s floor while serving: every ID issued afterwards by this process, and
    /// every STRONG ID and new segment by any, is above `floor`; every other process of the
    /// store drops what it holds within [`REACH`](crate::changes::REACH) of the return
    /// ([`crate::changes`]). Never lowers anything. The key's value after it.
    ///
    /// # Errors
    /// `InvalidArgument` for a floor of `i64::MAX` (nothing changed); `Unsupported` on a store
    /// without segments (the Snowflake store); the store's errors.
    pub async fn raise_floor(&self, key: &Key, floor: i64) -> Result<i64, SeqError> {
        if floor > MAX_FLOOR {
            // Nothing would be left to issue, ever (the raise takes one ID itself): refused
            // before anything changes.
            return Err(SeqError::new(
                ErrorKind::InvalidArgument,
                format!("above: at most {MAX_FLOOR} (a higher floor leaves no ID to issue)"),
            ));
        }
        if !self.store.capabilities().segments {
            return Err(SeqError::new(
                ErrorKind::Unsupported,
                format!(
                    "store {} ({}) has no values to raise",
                    self.name,
                    self.store.kind()
                ),
            ));
        }
        {
            let mut floors = self.floors.lock().unwrap_or_else(|p| p.into_inner());
            let kept = floors.entry(key.clone()).or_insert(floor);
            *kept = (*kept).max(floor);
        }
        // This process first: nothing at or below the floor is served from here on.
        if let Some(weak) = self.keys.weak_of(key) {
            weak.cut_above(floor);
        }
        self.keys.cut_parked(key, floor);
        self.bounded("raise the floor of", key, self.store.raise(key, floor))
            .await?;
        // One more ID: the value moves, so no tail given back elsewhere lowers it again.
        let value = match self
            .bounded("raise the floor of", key, self.store.reserve(key, 1))
            .await
        {
            // A store refused for going back (crate::guard): raising its keys is how it is
            // repaired, and the raise was made; the repair key (never refused) lifts it.
            Err(e) if e.kind == ErrorKind::DataLoss => self
                .bounded("read the value of", key, self.store.value(key))
                .await?
                .unwrap_or(floor),
            other => other?,
        };
        if let (Some(g), crate::REPAIR_KEY) = (self.guard(), key.as_str()) {
            g.check_repair().await;
        }
        // Every other node of the store drops what it holds below (crate::changes).
        self.announce_change().await?;
        Ok(value)
    }

    /// Registers `key` (for registered-keys mode); whether it was not registered already.
    ///
    /// # Errors
    /// `Unsupported` from a store that keeps no registrations; the store's errors.
    pub async fn register(&self, key: &Key) -> Result<bool, SeqError> {
        self.bounded("register", key, self.store.register(key))
            .await
    }

    /// Unregisters `key` (its value kept); whether it was registered. This process lets the key
    /// go from memory when nothing holds it (its unused WEAK IDs parked), so that it is refused
    /// here at once.
    ///
    /// # Errors
    /// As [`register`](Self::register).
    pub async fn unregister(&self, key: &Key) -> Result<bool, SeqError> {
        let was = self
            .bounded("unregister", key, self.store.unregister(key))
            .await?;
        // Refused here at its next request, and on every other node within
        // crate::changes::REACH.
        self.changes.recheck_registrations();
        self.keys.let_go(key);
        self.announce_change().await?;
        Ok(was)
    }

    /// A page of the registered keys, in byte order: at most `limit` (1 to [`MAX_PAGE`]),
    /// those after `after`.
    ///
    /// # Errors
    /// As [`key_states`](Self::key_states).
    pub async fn registered_keys(
        &self,
        after: Option<&Key>,
        limit: usize,
    ) -> Result<Vec<Key>, SeqError> {
        check_page(limit)?;
        let anchor = after
            .cloned()
            .unwrap_or_else(|| Key::new("-").expect("a key"));
        self.bounded(
            "list the registered keys after",
            &anchor,
            self.store.registered(after, limit),
        )
        .await
    }
}
