//! How IDs are shown: `--template` for `floe gen` and `floe seq`, and `floe scramble` /
//! `floe unscramble`. The templates and the cipher are floe-core's; this is their command line.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;

use clap::Args;
use floe_core::scramble::{Domain, Keyring, Scrambler};
use floe_core::template::{parse_utc_offset, Template};
use floe_server::config::SCRAMBLE_KEY_ENV;
use floe_server::present::{key_env, looks_like_key, read_key_file, shown_path, KeyReadError};

use crate::Failure;

/// Where scramble keys come from, and the domain they permute.
#[derive(Debug, Args, Clone)]
pub(crate) struct KeyArgs {
    /// File of scramble keys: `ID:HEX` lines (a key ID 0-9, then 64 hex digits of AES-256
    /// key; `openssl rand -hex 32` makes one), the current key first, old keys after it to
    /// decode what they made; or one bare HEX line (key ID 0). Without it, the keys are read
    /// from $FLOE_SCRAMBLE_KEY (same text; commas may separate entries). Keys are never
    /// printed or logged.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// The numbers scrambled: int63 (0 to 2^63-1, any non-negative int64) or digits:N (N
    /// decimal digits, 6 to 18). A scrambled ID is written as its key ID, then the number
    /// zero-padded to 19 digits (int63) or N [default: int63].
    #[arg(long, value_name = "DOMAIN")]
    pub domain: Option<String>,
}

impl KeyArgs {
    /// The keys: from --key-file, else from $FLOE_SCRAMBLE_KEY; `None` when neither is given.
    pub(crate) fn keyring(&self) -> Result<Option<Keyring>, Failure> {
        let failure = |e: KeyReadError, prefix: &str| {
            let message = format!("{prefix}{}", e.message);
            if e.io {
                Failure::Io(io::Error::other(message))
            } else {
                Failure::Usage(message)
            }
        };
        let text = match &self.key_file {
            Some(path) => read_key_file(path).map_err(|e| failure(e, "--key-file "))?,
            None => match key_env().map_err(|e| failure(e, ""))? {
                Some(text) => text,
                None => return Ok(None),
            },
        };
        let source = match &self.key_file {
            Some(p) => format!("--key-file {}", shown_path(p)),
            None => format!("${SCRAMBLE_KEY_ENV}"),
        };
        Keyring::parse(&text)
            .map(Some)
            .map_err(|e| Failure::Usage(format!("{source}: {e}")))
    }

    /// --domain, checked (int63 when not given).
    pub(crate) fn domain(&self) -> Result<Domain, Failure> {
        Domain::parse(self.domain.as_deref().unwrap_or("int63"))
            .map_err(|e| Failure::Usage(format!("--domain: {e}")))
    }

    /// A scrambler of --domain with the keys, or an error saying where to put them.
    pub(crate) fn scrambler(&self) -> Result<Scrambler, Failure> {
        let domain = self.domain()?;
        let keys = self.keyring()?.ok_or_else(|| {
            Failure::Usage(format!(
                "no scramble key: give --key-file FILE or set ${SCRAMBLE_KEY_ENV} (ID:HEX, e.g. 1:$(openssl rand -hex 32))"
            ))
        })?;
        Ok(Scrambler::new(domain, &keys))
    }
}

/// `--template` and what it reads: shared by `floe gen` and `floe seq`.
#[derive(Debug, Args, Clone)]
pub(crate) struct TemplateArgs {
    /// Write each ID through a template, e.g. 'ORD-{date:%Y%m%d}-{seq:06}': {seq} (or {id})
    /// the number, {seq:06} zero-padded to exactly 6 digits (a wider number is an error, never
    /// cut), {seq:scrambled} scrambled (see `floe scramble`), {date:FORMAT} (%Y %y %m %d %H %M
    /// %S %j), {meta.NAME} / {meta.NAME:08} a --set value, {luhn} / {damm} a check digit.
    /// With `floe seq`, a template with {date} numbers each period under its own key,
    /// KEY@DATE, from 1.
    #[arg(long, value_name = "TEMPLATE")]
    pub template: Option<String>,
    /// The UTC offset of {date}, e.g. +08:00 [default: UTC].
    #[arg(
        long,
        value_name = "+HH:MM",
        allow_hyphen_values = true,
        requires = "template"
    )]
    pub utc_offset: Option<String>,
    /// A {meta.NAME} value: NAME=VALUE (repeat for more).
    #[arg(long = "set", value_name = "NAME=VALUE", requires = "template")]
    pub set: Vec<String>,
    #[command(flatten)]
    pub keys: KeyArgs,
}

/// A loaded template, with its meta values and scrambler.
#[derive(Debug)]
pub(crate) struct Presenter {
    pub template: Template,
    pub meta: Vec<(String, String)>,
    pub scrambler: Option<Scrambler>,
}

impl TemplateArgs {
    /// The template, checked, or `None` without --template.
    pub(crate) fn presenter(&self) -> Result<Option<Presenter>, Failure> {
        let Some(pattern) = &self.template else {
            // Options of a template, given without one, would be ignored.
            if self.keys.key_file.is_some() || self.keys.domain.is_some() {
                return Err(Failure::Usage(
                    "--key-file, --domain: they scramble a template's {seq:scrambled}: give --template too (or use `floe scramble`)".into(),
                ));
            }
            return Ok(None);
        };
        let mut template =
            Template::parse(pattern).map_err(|e| Failure::Usage(format!("--{e}")))?;
        if let Some(offset) = &self.utc_offset {
            template = template.with_utc_offset(
                parse_utc_offset(offset)
                    .map_err(|e| Failure::Usage(format!("--utc-offset: {e}")))?,
            );
        }
        // Checked even when the template does not scramble: a wrong option is never ignored.
        self.keys.domain()?;
        let mut meta = Vec::new();
        for m in &self.set {
            let (name, value) = m.split_once('=').ok_or_else(|| {
                Failure::Usage(format!(
                    "--set: expected NAME=VALUE, found {}",
                    floe_core::endpoint::quoted(m)
                ))
            })?;
            let name = name.strip_prefix("meta.").unwrap_or(name);
            if !template.meta_names().any(|n| n == name) {
                return Err(Failure::Usage(format!(
                    "--set {}: the template has no {{meta.{name}}}",
                    floe_core::endpoint::quoted(name),
                )));
            }
            meta.push((name.to_string(), value.to_string()));
        }
        if let Some(missing) = template
            .meta_names()
            .find(|n| !meta.iter().any(|(m, _)| m == n))
        {
            return Err(Failure::Usage(format!(
                "--template: {{meta.{missing}}} needs a value: --set {missing}=VALUE"
            )));
        }
        let scrambler = if template.scrambles() {
            Some(self.keys.scrambler()?)
        } else {
            None
        };
        let presenter = Presenter {
            template,
            meta,
            scrambler,
        };
        // Bad --set values fail here, before a number is taken for them.
        presenter
            .template
            .check_meta(&presenter.meta[..])
            .map_err(|e| Failure::Usage(format!("--set: {e}")))?;
        Ok(Some(presenter))
    }
}

impl Presenter {
    /// Writes `value`, dated `at_ms`, through the template (`buf`: reused between IDs).
    pub(crate) fn write<W: Write>(
        &self,
        out: &mut W,
        buf: &mut String,
        value: u64,
        at_ms: u64,
    ) -> Result<(), Failure> {
        buf.clear();
        self.template
            .render_into(buf, value, at_ms, &self.meta[..], self.scrambler.as_ref())
            .map_err(|e| Failure::Usage(format!("--template: {e}")))?;
        buf.push('\n');
        out.write_all(buf.as_bytes())?;
        Ok(())
    }
}

/// `floe scramble` and `floe unscramble`.
#[derive(Debug, Args)]
pub(crate) struct ScrambleArgs {
    /// The numbers (scramble) or scrambled IDs (unscramble); `-` reads one per line from
    /// standard input.
    #[arg(required = true, allow_negative_numbers = true)]
    pub ids: Vec<String>,
    #[command(flatten)]
    pub keys: KeyArgs,
    /// Plain numbers in and out, with no key ID: the scrambled number alone (scramble with
    /// the current key, or --key-id).
    #[arg(long)]
    pub raw: bool,
    /// With --raw: the key to use [default: the current key, the first].
    #[arg(long, requires = "raw", value_name = "ID")]
    pub key_id: Option<u8>,
}

/// Runs `floe scramble` (`forward`) or `floe unscramble`: one line out for each ID in; the
/// first ID that cannot be read stops it with exit 2, after the lines before it.
pub(crate) fn scramble(args: &ScrambleArgs, forward: bool) -> Result<(), Failure> {
    let s = args.keys.scrambler()?;
    let key_id = args.key_id.unwrap_or(s.key_id());
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut one = |text: &str| -> Result<(), Failure> {
        let text = text.trim();
        if looks_like_key(text) {
            // Never repeated: a key pasted where an ID belongs.
            return Err(Failure::Usage(
                "an argument that looks like a key (not repeated): expected a number or a scrambled ID".into(),
            ));
        }
        let number = |t: &str| {
            if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Failure::Usage(format!(
                    "{}: expected a number of 0 to {} in decimal digits",
                    floe_core::endpoint::quoted(t),
                    s.domain().max()
                )));
            }
            t.parse::<u64>().map_err(|_| {
                Failure::Usage(format!(
                    "{}: expected a number of 0 to {}",
                    floe_core::endpoint::quoted(t),
                    s.domain().max()
                ))
            })
        };
        let shown = |e: floe_core::scramble::ScrambleError| Failure::Usage(e.to_string());
        match (forward, args.raw) {
            (true, false) => {
                writeln!(out, "{}", s.encode(number(text)?).map_err(shown)?)?;
            }
            (true, true) => {
                let v = s.scramble_with(key_id, number(text)?).map_err(shown)?;
                writeln!(out, "{v}")?;
            }
            (false, false) => writeln!(out, "{}", s.decode(text).map_err(shown)?)?,
            (false, true) => {
                let v = s.unscramble_with(key_id, number(text)?).map_err(shown)?;
                writeln!(out, "{v}")?;
            }
        }
        Ok(())
    };
    for id in &args.ids {
        if id == "-" {
            for (i, line) in io::stdin().lines().enumerate() {
                let line = line.map_err(|e| match e.kind() {
                    io::ErrorKind::InvalidData => {
                        Failure::Usage(format!("standard input line {}: not UTF-8", i + 1))
                    }
                    _ => Failure::Io(e),
                })?;
                if !line.trim().is_empty() {
                    one(&line)?;
                }
            }
        } else {
            one(id)?;
        }
    }
    out.flush()?;
    Ok(())
}
