//! Named templates and scramble keys, as the routes use them: `?template=NAME` /
//! `?scramble=true` (HTTP) and `template` / `scramble` (gRPC `floe.v1.Floe/NextSequence`).
//!
//! A sequence written through a dated template is numbered under `KEY@DATE`
//! ([`Template::sequence_key`]), dated by this server's clock; Layotto's `GetNextId` stays a
//! plain int64.

use std::collections::BTreeMap;
use std::sync::Arc;

use floe_core::clock::{Clock, SystemClock};
use floe_core::scramble::{Domain, Keyring, ScrambleError, Scrambler};
use floe_core::template::{Lookup, RenderError, Template};
use floe_sequencer::{ErrorKind, SeqError};

use crate::config::{ServerConfig, SCRAMBLE_KEY_ENV};
use crate::{echo, MAX_ECHO};

/// The server's templates and keys.
#[derive(Debug, Default)]
pub struct Presentation {
    templates: BTreeMap<String, Template>,
    scrambler: Option<Scrambler>,
    /// `{seq:scrambled}`: what `?scramble=true` writes.
    scrambled: Option<Template>,
}

/// What a request asked to be written: a template, or the scrambled number.
#[derive(Debug, Clone, Copy)]
pub enum Shown<'a> {
    /// `?template=NAME`.
    Template(&'a str),
    /// `?scramble=true`.
    Scrambled,
}

impl Presentation {
    /// Loads the configuration's templates and reads the scramble keys (blocking: a file).
    ///
    /// # Errors
    /// A message naming the field (`templates.NAME.pattern`, `scramble.key_file`), never a
    /// key.
    pub fn load(config: &ServerConfig) -> Result<Presentation, String> {
        let templates = config.templates().map_err(|e| e.to_string())?;
        let domain =
            Domain::parse(&config.scramble.domain).map_err(|e| format!("scramble.domain: {e}"))?;
        let text = match &config.scramble.key_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("scramble.key_file: {}: {e}", path.display()))?,
            ),
            None => std::env::var(SCRAMBLE_KEY_ENV).ok(),
        };
        let scrambler = match text {
            Some(text) => {
                let source = match &config.scramble.key_file {
                    Some(p) => format!("scramble.key_file: {}", p.display()),
                    None => format!("${SCRAMBLE_KEY_ENV}"),
                };
                let keys = Keyring::parse(&text).map_err(|e| format!("{source}: {e}"))?;
                Some(Scrambler::new(domain, &keys))
            }
            None => None,
        };
        let scrambled = scrambler
            .as_ref()
            .and_then(|_| Template::parse("{seq:scrambled}").ok());
        Ok(Presentation {
            templates,
            scrambler,
            scrambled,
        })
    }

    /// Whether anything is configured (for the start-up line).
    pub fn describe(&self) -> Option<String> {
        if self.templates.is_empty() && self.scrambler.is_none() {
            return None;
        }
        let names: Vec<&str> = self.templates.keys().map(String::as_str).collect();
        Some(format!(
            "templates: {}; scramble: {}",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            },
            self.scrambler
                .as_ref()
                .map_or("off".to_string(), |s| format!(
                    "{} (key {})",
                    s.domain(),
                    s.key_id()
                ))
        ))
    }

    /// The template a request asked for.
    ///
    /// # Errors
    /// `InvalidArgument` for a name that is not configured (listing those that are), or
    /// `?scramble=true` on a server without keys.
    pub fn template(&self, asked: Shown<'_>) -> Result<&Template, SeqError> {
        match asked {
            Shown::Template(name) => self.templates.get(name).ok_or_else(|| {
                let names: Vec<&str> = self.templates.keys().map(String::as_str).collect();
                SeqError::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "template: no template is named \"{}\" on this server (configured: {})",
                        echo(name, MAX_ECHO),
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    ),
                )
            }),
            Shown::Scrambled => self.scrambled.as_ref().ok_or_else(|| {
                SeqError::new(
                    ErrorKind::InvalidArgument,
                    "scramble: this server has no scramble key (scramble.key_file or $FLOE_SCRAMBLE_KEY)",
                )
            }),
        }
    }

    /// The time to date a sequence ID at (this server's clock, never back in a process).
    pub fn moment(template: &Template) -> u64 {
        template.moment(SystemClock.now_nanos() / 1_000_000)
    }

    /// Writes `value` dated `at_ms` through `template`.
    ///
    /// # Errors
    /// `InvalidArgument` for a missing or bad `meta.NAME`; `Exhausted` for a number wider than
    /// its width or outside the scramble domain (nothing is ever cut into a repeat).
    pub fn render(
        &self,
        template: &Template,
        value: u64,
        at_ms: u64,
        meta: &(impl Lookup + ?Sized),
        out: &mut String,
    ) -> Result<(), SeqError> {
        template
            .render_into(out, value, at_ms, meta, self.scrambler.as_ref())
            .map_err(|e| render_error(template, &e))
    }
}

/// A render error as a request's error, of the kind that says whose it is.
fn render_error(template: &Template, e: &RenderError) -> SeqError {
    let kind = match e {
        RenderError::MissingMeta(_) | RenderError::BadMeta(_) => ErrorKind::InvalidArgument,
        RenderError::TooWide { .. } => ErrorKind::Exhausted,
        RenderError::Scramble(ScrambleError::OutOfDomain { .. }) => ErrorKind::Exhausted,
        RenderError::Scramble(_) | RenderError::NoScrambler => ErrorKind::Config,
        other => {
            crate::warn(
                crate::Topic::Internal,
                format_args!("a template error this server does not map: {other}"),
            );
            ErrorKind::Corrupt
        }
    };
    SeqError::new(
        kind,
        format!("template {}: {e}", echo(template.pattern(), MAX_ECHO)),
    )
}

/// The `meta.NAME` values of a request: HTTP query pairs `meta.NAME=VALUE`, or gRPC metadata
/// `floe-meta-NAME`.
#[derive(Debug, Default)]
pub struct Meta(pub Vec<(String, String)>);

impl Lookup for Meta {
    /// By name, ignoring ASCII case (gRPC metadata names are lower case).
    fn lookup(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Shared presentation.
pub type SharedPresentation = Arc<Presentation>;
