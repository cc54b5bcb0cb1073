//! A registry that could not be reached when it was opened.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use floe_core::fence::Fence;

use crate::terms::LeaseTerms;
use crate::{
    Continued, Hold, IdSpace, Identity, Registration, Registry, RegistryError, WorkerRecord,
};

/// How long after a failed try an unreachable registry is tried again.
const TRY_EVERY: Duration = Duration::from_secs(1);

/// A registry that could not be reached when it was opened. The first call after it was made
/// starts a task that opens it again in the background (a try every second, each as long as the
/// client's own connection timeout) until it opens; then every call is passed on to it. Until
/// then every call answers with the error (kind
/// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable)), at once, so
/// [`lease::acquire`](crate::lease::acquire) falls back to the cache, or continues a lease. A
/// lease continued meanwhile ([`Registry::adopt`]) is handed to the registry once it opens.
pub struct Unreachable {
    name: &'static str,
    location: String,
    error: RegistryError,
    terms: Option<LeaseTerms>,
    /// The URL to open again (none: never).
    url: Option<String>,
    shared: Arc<Opening>,
}

/// What the background task and the registry share.
#[derive(Default)]
struct Opening {
    inner: std::sync::OnceLock<Box<dyn Registry>>,
    /// Whether the task was started.
    started: std::sync::atomic::AtomicBool,
    /// Leases continued before it opened, each with the slot its registration goes in.
    pending: Mutex<Vec<Pending>>,
}

struct Pending {
    continued: Continued,
    fence: Arc<Fence>,
    slot: Weak<Mutex<Option<Registration>>>,
}

impl std::fmt::Debug for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unreachable")
            .field("name", &self.name)
            .field("location", &self.location)
            .field("open", &self.shared.inner.get().is_some())
            .finish_non_exhaustive()
    }
}

impl Unreachable {
    /// A registry named `name` at `location` that answers every call with `error`; `terms`:
    /// the terms it would have leased on (ZooKeeper, etcd), if any; `url`: where to open it
    /// again (none: never).
    pub(crate) fn new(
        name: &'static str,
        location: String,
        error: RegistryError,
        terms: Option<LeaseTerms>,
        url: Option<String>,
    ) -> Self {
        Unreachable {
            name,
            location,
            error,
            terms,
            url,
            shared: Arc::new(Opening::default()),
        }
    }

    /// The registry if it opened; else starts opening it in the background (once) and
    /// answers with the error at once.
    fn reach(&self) -> Result<&dyn Registry, RegistryError> {
        if let Some(inner) = self.shared.inner.get() {
            return Ok(inner.as_ref());
        }
        self.start();
        Err(self.error.clone())
    }

    /// Starts the background task that opens the registry, once.
    fn start(&self) {
        let Some(url) = self.url.clone() else {
            return;
        };
        if !self
            .shared
            .started
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            let (shared, name) = (Arc::downgrade(&self.shared), self.name);
            tokio::spawn(open_in_background(shared, url, name));
        }
    }
}

/// Opens `url` again and again (a second between tries) until it opens or nobody holds the
/// registry any more; then hands it every lease continued meanwhile.
async fn open_in_background(shared: Weak<Opening>, url: String, name: &'static str) {
    let registry = loop {
        if shared.strong_count() == 0 {
            return;
        }
        let began = Instant::now();
        match crate::open(&url).await {
            Ok(registry) => break registry,
            Err(e) => tracing::debug!("registry {name} still unreachable: {e}"),
        }
        tokio::time::sleep(TRY_EVERY.saturating_sub(began.elapsed())).await;
    };
    let Some(shared) = shared.upgrade() else {
        return;
    };
    tracing::info!(
        "registry {name} reachable again: {}",
        crate::location_of(&url)
    );
    // Under the lock `adopt` takes: a lease continued now is either in the list or sees the
    // registry open.
    let (inner, pending) = {
        let mut pending = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
        let inner = shared.inner.get_or_init(|| registry);
        (inner, std::mem::take(&mut *pending))
    };
    for p in pending {
        if let Some(slot) = p.slot.upgrade() {
            let reg = inner.adopt(&p.continued, p.fence);
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = reg;
        }
    }
}

#[async_trait]
impl Registry for Unreachable {
    fn name(&self) -> &'static str {
        self.name
    }
    fn location(&self) -> String {
        self.location.clone()
    }
    fn lease_terms(&self) -> Option<LeaseTerms> {
        self.shared
            .inner
            .get()
            .map_or(self.terms, |inner| inner.lease_terms())
    }
    fn may_answer_later(&self) -> bool {
        self.url.is_some()
    }
    fn holder_linger(&self) -> Duration {
        self.shared
            .inner
            .get()
            .map_or(Duration::ZERO, |inner| inner.holder_linger())
    }
    fn adopt(&self, continued: &Continued, fence: Arc<Fence>) -> Option<Registration> {
        self.terms?;
        self.url.as_ref()?;
        self.start();
        let slot = Arc::new(Mutex::new(None));
        let mut pending = self
            .shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(inner) = self.shared.inner.get() {
            drop(pending);
            return inner.adopt(continued, fence);
        }
        pending.push(Pending {
            continued: continued.clone(),
            fence: fence.clone(),
            slot: Arc::downgrade(&slot),
        });
        Some(Registration {
            fence,
            ..Registration::new(continued.record(), true, Some(Hold::new(slot)))
        })
    }
    async fn register(
        &self,
        identity: &Identity,
        space: IdSpace,
    ) -> Result<Registration, RegistryError> {
        self.reach()?.register(identity, space).await
    }
    async fn heartbeat(
        &self,
        identity: &Identity,
        id: u32,
        last_time_ms: u64,
    ) -> Result<(), RegistryError> {
        self.reach()?.heartbeat(identity, id, last_time_ms).await
    }
    async fn release(&self, identity: &Identity) -> Result<bool, RegistryError> {
        self.reach()?.release(identity).await
    }
    async fn list(&self, service: &str) -> Result<Vec<WorkerRecord>, RegistryError> {
        self.reach()?.list(service).await
    }
    async fn close(&self, identity: &Identity, id: u32) -> Result<(), RegistryError> {
        self.reach()?.close(identity, id).await
    }
    async fn store_epoch(&self, service: &str, name: &str) -> Result<Option<i64>, RegistryError> {
        self.reach()?.store_epoch(service, name).await
    }
    async fn keep_store_epoch(
        &self,
        service: &str,
        name: &str,
        epoch: i64,
    ) -> Result<bool, RegistryError> {
        self.reach()?.keep_store_epoch(service, name, epoch).await
    }
    async fn reclaim(
        &self,
        identity: &Identity,
        space: IdSpace,
        idle_before_ms: u64,
    ) -> Result<Option<Registration>, RegistryError> {
        self.reach()?.reclaim(identity, space, idle_before_ms).await
    }
}
