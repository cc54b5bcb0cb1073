//! The `static` registry: an ID from configuration (the manual case, as flake-idgen and
//! Twitter's Snowflake are run), or from the StatefulSet ordinal of the identity's host name
//! (`static:ordinal`, `static:ordinal+OFFSET`: pod `floe-3` is worker 3, or 3 + OFFSET). It
//! stores nothing: the local cache still records the last time, so the clock guard protects a
//! restart as for any other registry.

use async_trait::async_trait;

use crate::{IdSpace, Identity, Registration, Registry, RegistryError, WorkerRecord};

/// Where a static registry's ID comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaticId {
    /// This ID (`static:ID`).
    Fixed(u32),
    /// The trailing `-N` of the identity's host (a StatefulSet pod's name, `floe-3`), plus
    /// `offset` (`static:ordinal`, `static:ordinal+OFFSET`).
    Ordinal {
        /// Added to the ordinal.
        offset: u32,
    },
}

impl StaticId {
    /// Parses what follows `static:`: a number, `ordinal` or `ordinal+OFFSET`; `None` for
    /// anything else.
    pub fn parse(text: &str) -> Option<StaticId> {
        let text = text.trim_start_matches('/');
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        match text.strip_prefix("ordinal") {
            Some("") => Some(StaticId::Ordinal { offset: 0 }),
            Some(rest) => {
                let offset = rest.strip_prefix('+').filter(|s| digits(s))?;
                offset
                    .parse()
                    .ok()
                    .map(|offset| StaticId::Ordinal { offset })
            }
            None if digits(text) => text.parse().ok().map(StaticId::Fixed),
            None => None,
        }
    }

    /// The ID for a server whose identity's host is `host`.
    ///
    /// # Errors
    /// A configuration error naming `registry.host` when the host has no trailing `-N`, or
    /// when the ordinal plus the offset overflows.
    pub fn resolve(self, host: &str) -> Result<u32, RegistryError> {
        match self {
            StaticId::Fixed(id) => Ok(id),
            StaticId::Ordinal { offset } => {
                let ordinal = ordinal_of(host).ok_or_else(|| {
                    // Digits too many for an ID: out of range, not a name without an ordinal.
                    let huge = host.rsplit_once('-').is_some_and(|(name, n)| {
                        !name.is_empty()
                            && n.len() > 1
                            && !n.starts_with('0')
                            && n.bytes().all(|b| b.is_ascii_digit())
                    });
                    if huge {
                        RegistryError::config(format!(
                            "worker_id: the ordinal of registry.host {host:?} ({self}) is out of \
                             range"
                        ))
                    } else {
                        RegistryError::config(format!(
                            "registry.host: {host:?} has no StatefulSet ordinal (a name ending \
                             in -N, such as floe-3), which {self} takes as the worker ID: set \
                             the host (--host; for floe serve also FLOE_HOST) to the pod's name"
                        ))
                    }
                })?;
                ordinal.checked_add(offset).ok_or_else(|| {
                    RegistryError::config(format!(
                        "registry: {self}: the ordinal {ordinal} of {host:?} plus {offset} \
                         overflows"
                    ))
                })
            }
        }
    }
}

impl std::fmt::Display for StaticId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StaticId::Fixed(id) => write!(f, "static:{id}"),
            StaticId::Ordinal { offset: 0 } => f.write_str("static:ordinal"),
            StaticId::Ordinal { offset } => write!(f, "static:ordinal+{offset}"),
        }
    }
}

/// The StatefulSet ordinal of a pod name: the decimal number after its last `-` (`floe-3`:
/// 3); `None` when there is none, it is not plain decimal digits (no sign, no leading zero
/// but `0` itself), or it does not fit a `u32`.
pub fn ordinal_of(host: &str) -> Option<u32> {
    let (name, n) = host.rsplit_once('-')?;
    let plain =
        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'));
    if name.is_empty() || !plain {
        return None;
    }
    n.parse().ok()
}

/// Always the same ID: configured, or the host's ordinal.
#[derive(Debug, Clone, Copy)]
pub struct StaticRegistry {
    id: StaticId,
}

impl StaticRegistry {
    /// A registry that hands out `id`.
    pub fn new(id: u32) -> Self {
        StaticRegistry {
            id: StaticId::Fixed(id),
        }
    }

    /// A registry that hands out the ID `id` gives each identity's host.
    pub fn of(id: StaticId) -> Self {
        StaticRegistry { id }
    }
}

#[async_trait]
impl Registry for StaticRegistry {
    fn name(&self) -> &'static str {
        "static"
    }

    fn location(&self) -> String {
        self.id.to_string()
    }

    async fn register(
        &self,
        identity: &Identity,
        space: IdSpace,
    ) -> Result<Registration, RegistryError> {
        identity.validate()?;
        let id = self.id.resolve(&identity.host)?;
        if id >= space.size {
            let from = match self.id {
                StaticId::Fixed(_) => String::new(),
                StaticId::Ordinal { .. } => {
                    format!(" ({} of registry.host {:?})", self.id, identity.host)
                }
            };
            return Err(RegistryError::config(format!(
                "worker_id: {id}{from} is out of range: this layout has IDs 0..={}",
                space.size - 1
            )));
        }
        let record = WorkerRecord::new(id, identity.clone(), 0);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_ids_parse_as_numbers_or_ordinals() {
        assert_eq!(StaticId::parse("7"), Some(StaticId::Fixed(7)));
        assert_eq!(StaticId::parse("//7"), Some(StaticId::Fixed(7)));
        assert_eq!(
            StaticId::parse("ordinal"),
            Some(StaticId::Ordinal { offset: 0 })
        );
        assert_eq!(
            StaticId::parse("ordinal+100"),
            Some(StaticId::Ordinal { offset: 100 })
        );
        for bad in [
            "",
            "-1",
            "+7",
            "x",
            "ordinal+",
            "ordinal-1",
            "ordinal+-1",
            "ordinal++1",
            "ordinal+1x",
            "ordinals",
            "ordinal+4294967296",
            "4294967296",
        ] {
            assert_eq!(StaticId::parse(bad), None, "{bad:?}");
        }
        for text in ["static:7", "static:ordinal", "static:ordinal+100"] {
            let id = StaticId::parse(text.strip_prefix("static:").unwrap()).unwrap();
            assert_eq!(id.to_string(), text);
        }
    }

    #[test]
    fn the_ordinal_is_the_pod_names_trailing_number() {
        assert_eq!(ordinal_of("floe-0"), Some(0));
        assert_eq!(ordinal_of("floe-3"), Some(3));
        assert_eq!(ordinal_of("my-floe-set-12"), Some(12));
        assert_eq!(ordinal_of("floe-4294967295"), Some(u32::MAX));
        for bad in [
            "floe",
            "floe-",
            "-3",
            "floe-03",
            "floe-3a",
            "floe-+3",
            "floe-4294967296",
            "floe-3.example",
            "",
        ] {
            assert_eq!(ordinal_of(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_ordinal_resolves_with_its_offset_or_names_the_field() {
        let ordinal = |offset| StaticId::Ordinal { offset };
        assert_eq!(ordinal(0).resolve("floe-3").unwrap(), 3);
        assert_eq!(ordinal(100).resolve("floe-3").unwrap(), 103);
        assert_eq!(StaticId::Fixed(9).resolve("no-ordinal").unwrap(), 9);
        let e = ordinal(0).resolve("floe").unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Config);
        assert!(e.message.starts_with("registry.host: \"floe\""), "{e}");
        // An ordinal of more digits than an ID has: out of range, not "no ordinal" (found by
        // hand on the release binary).
        let e = ordinal(0).resolve("floe-99999999999").unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Config);
        assert!(e.message.starts_with("worker_id: "), "{e}");
        assert!(e.message.contains("out of range"), "{e}");
        let e = ordinal(u32::MAX).resolve("floe-1").unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Config);
        assert!(e.message.contains("overflows"), "{e}");
    }

    #[tokio::test]
    async fn an_ordinal_out_of_the_layouts_range_is_refused() {
        let registry = StaticRegistry::of(StaticId::Ordinal { offset: 1000 });
        let space = IdSpace::new(1024);
        let got = registry
            .register(&Identity::new("floe", "floe-23", 1), space)
            .await
            .unwrap();
        assert_eq!(got.record.id, 1023);
        let e = registry
            .register(&Identity::new("floe", "floe-24", 1), space)
            .await
            .unwrap_err();
        assert!(
            e.message.starts_with("worker_id: 1024 (static:ordinal+1000 of registry.host \"floe-24\") is out of range"),
            "{e}"
        );
    }
}
