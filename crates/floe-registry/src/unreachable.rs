//! A registry that could not be reached when it was opened.

use async_trait::async_trait;

use crate::terms::LeaseTerms;
use crate::{IdSpace, Identity, Registration, Registry, RegistryError, WorkerRecord};

/// A registry that could not be reached when it was opened: every call answers with that
/// error (kind [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable)), so [`lease::acquire`](crate::lease::acquire) falls back to the cache.
#[derive(Debug)]
pub struct Unreachable {
    name: &'static str,
    location: String,
    error: RegistryError,
    terms: Option<LeaseTerms>,
}

impl Unreachable {
    /// A registry named `name` at `location` that answers every call with `error`; `terms`:
    /// the terms it would have leased on (ZooKeeper, etcd), if any.
    pub(crate) fn new(
        name: &'static str,
        location: String,
        error: RegistryError,
        terms: Option<LeaseTerms>,
    ) -> Self {
        Unreachable {
            name,
            location,
            error,
            terms,
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
        self.terms
    }
    fn may_answer_later(&self) -> bool {
        false
    }
    async fn register(&self, _: &Identity, _: IdSpace) -> Result<Registration, RegistryError> {
        Err(self.error.clone())
    }
    async fn heartbeat(&self, _: &Identity, _: u32, _: u64) -> Result<(), RegistryError> {
        Err(self.error.clone())
    }
    async fn release(&self, _: &Identity) -> Result<bool, RegistryError> {
        Err(self.error.clone())
    }
    async fn list(&self, _: &str) -> Result<Vec<WorkerRecord>, RegistryError> {
        Err(self.error.clone())
    }
    async fn store_epoch(&self, _: &str, _: &str) -> Result<Option<i64>, RegistryError> {
        Err(self.error.clone())
    }
    async fn keep_store_epoch(&self, _: &str, _: &str, _: i64) -> Result<bool, RegistryError> {
        Err(self.error.clone())
    }
}
