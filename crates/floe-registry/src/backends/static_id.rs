//! The `static` registry: an ID from configuration (the manual case, as flake-idgen and
//! Twitter's Snowflake are run). It stores nothing: the local cache still records the last
//! time, so the clock guard protects a restart as for any other registry.

use async_trait::async_trait;

use crate::{IdSpace, Identity, Registration, Registry, RegistryError, WorkerRecord};

/// Always the same configured ID.
#[derive(Debug, Clone, Copy)]
pub struct StaticRegistry {
    id: u32,
}

impl StaticRegistry {
    /// A registry that hands out `id`.
    pub fn new(id: u32) -> Self {
        StaticRegistry { id }
    }
}

#[async_trait]
impl Registry for StaticRegistry {
    fn name(&self) -> &'static str {
        "static"
    }

    fn location(&self) -> String {
        format!("static:{}", self.id)
    }

    async fn register(
        &self,
        identity: &Identity,
        space: IdSpace,
    ) -> Result<Registration, RegistryError> {
        identity.validate()?;
        if self.id >= space.size {
            return Err(RegistryError::config(format!(
                "worker_id: {} is out of range: this layout has IDs 0..={}",
                self.id,
                space.size - 1
            )));
        }
        let record = WorkerRecord::new(self.id, identity.clone(), 0);
        Ok(Registration::new(record, true, None))
    }

    async fn heartbeat(&self, _: &Identity, _: u32, _: u64) -> Result<(), RegistryError> {
        Ok(())
    }

    async fn release(&self, _: &Identity) -> Result<bool, RegistryError> {
        Ok(false)
    }

    async fn list(&self, _service: &str) -> Result<Vec<WorkerRecord>, RegistryError> {
        Ok(Vec::new())
    }
}
