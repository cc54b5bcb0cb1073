//! Named templates and scramble keys, as the routes use them: `?template=NAME` /
//! `?scramble=true` (HTTP) and `template` / `scramble` (gRPC `floe.v1.Floe/NextSequence`).
//!
//! A sequence written through a dated template is numbered under `KEY@DATE`
//! ([`Template::sequence_key`]), dated by this server's clock; Layotto's `GetNextId` stays a
//! plain int64.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::{ErrorKind, ServerError};
use floe_core::scramble::{Domain, Keyring, ScrambleError, Scrambler};
use floe_core::template::{Lookup, RenderError, Template};

use crate::config::SCRAMBLE_KEY_ENV;
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

impl<'a> Shown<'a> {
    /// What a request asked for: a template's name, or `scramble`, not both.
    ///
    /// # Errors
    /// `InvalidArgument` when both are given.
    pub fn from_request(
        template: Option<&'a str>,
        scramble: bool,
    ) -> Result<Option<Self>, ServerError> {
        match (template, scramble) {
            (None, false) => Ok(None),
            (None, true) => Ok(Some(Shown::Scrambled)),
            (Some(name), false) => Ok(Some(Shown::Template(name))),
            (Some(_), true) => Err(ServerError::new(
                ErrorKind::InvalidArgument,
                "template, scramble: give one (a template can hold {seq:scrambled})",
            )),
        }
    }
}

impl Presentation {
    /// The checked templates and scramble domain ([`crate::config::Plan`]), with the scramble
    /// keys read from `key_file` or the environment (blocking: a file).
    ///
    /// # Errors
    /// A message naming the field (`scramble.key_file`), never a key.
    pub fn load(
        templates: BTreeMap<String, Template>,
        domain: Domain,
        key_file: Option<&std::path::Path>,
    ) -> Result<Presentation, String> {
        let text = match key_file {
            Some(path) => {
                Some(read_key_file(path).map_err(|e| format!("scramble.key_file: {}", e.message))?)
            }
            None => key_env().map_err(|e| e.message)?,
        };
        let scrambler = match text {
            Some(text) => {
                let source = match key_file {
                    Some(p) => format!("scramble.key_file: {}", shown_path(p)),
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
    pub fn template(&self, asked: Shown<'_>) -> Result<&Template, ServerError> {
        match asked {
            Shown::Template(name) => self.templates.get(name).ok_or_else(|| {
                let names: Vec<&str> = self.templates.keys().map(String::as_str).collect();
                ServerError::new(
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
                ServerError::new(
                    ErrorKind::InvalidArgument,
                    "scramble: this server has no scramble key (scramble.key_file or $FLOE_SCRAMBLE_KEY)",
                )
            }),
        }
    }

    /// Checks a request's `meta.NAME` values for `template` before a number is spent on them.
    ///
    /// # Errors
    /// `InvalidArgument` for a missing or bad value.
    pub fn check_meta(&self, template: &Template, meta: &Meta) -> Result<(), ServerError> {
        // A value the template does not read would be ignored: refused, as the CLI's --set.
        if let Some((name, _)) = meta.pairs.iter().find(|(given, _)| {
            !template.meta_names().any(|n| {
                if meta.lower_case {
                    n.eq_ignore_ascii_case(given)
                } else {
                    n == given
                }
            })
        }) {
            return Err(ServerError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "meta.{}: template {} has no {{meta.{}}}",
                    echo(name, MAX_ECHO),
                    echo(template.pattern(), MAX_ECHO),
                    echo(name, MAX_ECHO)
                ),
            ));
        }
        template
            .check_meta(meta)
            .map_err(|e| render_error(template, &e))
    }

    /// Whether every number from `smallest` on fits `template` (see
    /// [`Template::check_fits`]).
    ///
    /// # Errors
    /// `InvalidArgument` saying why.
    pub fn check_fits(&self, template: &Template, smallest: u64) -> Result<(), ServerError> {
        template
            .check_fits(smallest, self.scrambler.as_ref())
            .map_err(|e| ServerError::new(ErrorKind::InvalidArgument, e.to_string()))
    }

    /// Every `(value, at_ms)` through `template`; a big scrambled batch (about 1.2 µs an ID)
    /// off the async executor.
    ///
    /// # Errors
    /// As [`Presentation::render`], for the first that fails.
    pub async fn render_all(
        self: &Arc<Self>,
        template: &Template,
        values: Vec<(u64, u64)>,
        meta: &Meta,
    ) -> Result<Vec<String>, ServerError> {
        fn all(
            p: &Presentation,
            t: &Template,
            meta: &Meta,
            values: &[(u64, u64)],
        ) -> Result<Vec<String>, ServerError> {
            values
                .iter()
                .map(|&(v, at)| {
                    let mut text = String::with_capacity(32);
                    p.render(t, v, at, meta, &mut text).map(|()| text)
                })
                .collect()
        }
        if values.len() < 1024 || !template.scrambles() {
            return all(self, template, meta, &values);
        }
        let (p, t, meta) = (Arc::clone(self), template.clone(), meta.clone());
        tokio::task::spawn_blocking(move || all(&p, &t, &meta, &values))
            .await
            .map_err(|e| {
                ServerError::new(ErrorKind::Internal, format!("internal: rendering: {e}"))
            })?
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
    ) -> Result<(), ServerError> {
        template
            .render_into(out, value, at_ms, meta, self.scrambler.as_ref())
            .map_err(|e| render_error(template, &e))
    }
}

/// A render error as a request's error, of the kind that says whose it is.
fn render_error(template: &Template, e: &RenderError) -> ServerError {
    let kind = match e {
        RenderError::MissingMeta(_) | RenderError::BadMeta(_) => ErrorKind::InvalidArgument,
        RenderError::TooWide { .. } => ErrorKind::Exhausted,
        RenderError::Scramble(ScrambleError::OutOfDomain { .. }) => ErrorKind::Exhausted,
        RenderError::Scramble(_) | RenderError::NoScrambler => ErrorKind::NotConfigured,
        other => {
            crate::warn(
                crate::Topic::Internal,
                format_args!("a template error this server does not map: {other}"),
            );
            ErrorKind::Internal
        }
    };
    ServerError::new(
        kind,
        format!("template {}: {e}", echo(template.pattern(), MAX_ECHO)),
    )
}

/// The `meta.NAME` values of a request: HTTP query pairs `meta.NAME=VALUE` (names as
/// written), or gRPC metadata `floe-meta-NAME` (names in lower case, as HTTP/2 sends them).
#[derive(Debug, Default, Clone)]
pub struct Meta {
    pairs: Vec<(String, String)>,
    lower_case: bool,
}

impl Meta {
    /// Values looked up by their exact name (an HTTP query).
    pub fn exact(pairs: Vec<(String, String)>) -> Meta {
        Meta {
            pairs,
            lower_case: false,
        }
    }

    /// Values whose names are in lower case (gRPC metadata): `{meta.userId}` reads `userid`.
    pub fn lower_case(pairs: Vec<(String, String)>) -> Meta {
        Meta {
            pairs,
            lower_case: true,
        }
    }
}

impl Lookup for Meta {
    fn lookup(&self, name: &str) -> Option<&str> {
        if !self.lower_case {
            return self.pairs[..].lookup(name);
        }
        // The names here are all lower case: comparing without case is comparing with the
        // name in lower case, with no string made per lookup.
        self.pairs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why keys could not be read: a message that never holds a key, and whether it was the
/// file's fault (bad input) or the disk's (I/O).
#[derive(Debug)]
pub struct KeyReadError {
    /// One line, naming the file (unless its path looks like a key).
    pub message: String,
    /// An I/O failure, not bad input.
    pub io: bool,
}

/// The most bytes a key file may hold (ten keys take under 700).
pub const MAX_KEY_FILE: u64 = 64 * 1024;

/// A path as errors show it: itself, unless it looks like a key (a run of 32 hex digits or
/// more: a key given where its file's path was expected), which is never repeated.
pub fn shown_path(path: &std::path::Path) -> String {
    let text = path.to_string_lossy();
    if looks_like_key(&text) {
        return "(a path that looks like a key, not repeated: give the key's file, or the key in $FLOE_SCRAMBLE_KEY)".into();
    }
    text.into_owned()
}

/// Whether `text` holds a run of 32 hex digits or more: maybe a key, never to be repeated in
/// an error.
pub fn looks_like_key(text: &str) -> bool {
    let mut run = 0;
    text.chars().any(|c| {
        run = if c.is_ascii_hexdigit() { run + 1 } else { 0 };
        run >= 32
    })
}

/// Reads a key file: at most [`MAX_KEY_FILE`] bytes of UTF-8 (a byte-order mark is skipped).
///
/// # Errors
/// [`KeyReadError`] naming the file: missing, not a file, too big, not UTF-8, unreadable.
pub fn read_key_file(path: &std::path::Path) -> Result<String, KeyReadError> {
    use std::io::Read;
    let shown = shown_path(path);
    let fail = |message: String, io: bool| KeyReadError { message, io };
    let file = std::fs::File::open(path).map_err(|e| {
        let io = !matches!(
            e.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
        );
        fail(format!("{shown}: {e}"), io)
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_KEY_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            let io = e.kind() != std::io::ErrorKind::IsADirectory;
            fail(format!("{shown}: {e}"), io)
        })?;
    if bytes.len() as u64 > MAX_KEY_FILE {
        return Err(fail(
            format!(
                "{shown}: more than {MAX_KEY_FILE} bytes: expected a small file of ID:HEX lines"
            ),
            false,
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        fail(
            format!("{shown}: expected ID:HEX lines, found bytes that are not UTF-8"),
            false,
        )
    })?;
    Ok(text.strip_prefix('\u{feff}').unwrap_or(&text).to_string())
}

/// The keys in `$FLOE_SCRAMBLE_KEY`, if it is set.
///
/// # Errors
/// [`KeyReadError`] when it is set but not UTF-8 or too long.
pub fn key_env() -> Result<Option<String>, KeyReadError> {
    match std::env::var(SCRAMBLE_KEY_ENV) {
        Ok(text) if text.len() as u64 > MAX_KEY_FILE => Err(KeyReadError {
            message: format!("${SCRAMBLE_KEY_ENV}: more than {MAX_KEY_FILE} bytes"),
            io: false,
        }),
        Ok(text) => Ok(Some(text)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(KeyReadError {
            message: format!(
                "${SCRAMBLE_KEY_ENV}: expected ID:HEX entries, found text that is not UTF-8"
            ),
            io: false,
        }),
    }
}

/// Shared presentation.
pub type SharedPresentation = Arc<Presentation>;
