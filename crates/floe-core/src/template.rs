//! ID templates: a sequence number or Snowflake ID written in a business's own schema.
//!
//! ```text
//! ORD-{date:%Y%m%d}-{seq:06}     ORD-20261123-000042
//! {meta.uid:08}{seq:08}          1234567800000042   (uid from the request)
//! INV{seq:08}{luhn}              INV000000420       (a Luhn check digit over the digits)
//! {seq:scrambled}                40572138819203664211   (key ID + FF1, see `scramble`)
//! ```
//!
//! **Placeholders.** `{seq}` (also `{id}`): the number, in decimal; `{seq:08}` zero-pads it to
//! exactly 8 digits; `{seq:scrambled}` writes it scrambled (see [`crate::scramble`]).
//! `{date:FORMAT}`: a date and time, with `%Y %y %m %d %H %M %S %j %%` (`{date}` alone is
//! `%Y%m%d`). `{meta.NAME}` / `{meta.NAME:08}`: a value the request gives (letters and digits;
//! with a width, digits only, zero-padded). `{luhn}` / `{damm}`: a check digit over every digit
//! written before it. `{{` and `}}` are braces. Everything else is written as it is.
//!
//! **Never a repeat.** A value wider than its width is an error ([`RenderError::TooWide`]),
//! never cut (cutting `1000000` to 6 digits would give `000000` again). A template holds at most
//! one part of varying width (`{seq}` or `{meta.NAME}` without a width), so the text can always
//! be split back into its parts: `{meta.a}{seq}` could write `1`+`23` and `12`+`3` the same.
//!
//! **Periods.** With `{date}` in a sequence's template, the date is part of the sequence's key
//! ([`Template::sequence_key`]: `orders` becomes `orders@20261123`), so numbering starts again at
//! 1 each period, and two texts with the same date come from the same key, whose numbers never
//! repeat: a restart, a crash or two nodes across midnight cannot repeat an ID. The date is
//! the time the caller passes (the issuing node's system clock in floe's CLI and server), in
//! UTC or the template's UTC offset, and never goes back within a process
//! ([`Template::moment`] keeps the latest time it saw). A node whose clock is off writes its own date: its IDs stay
//! unique (they are numbered under that date's key), but may carry the previous or next date
//! for as long as it is off.
//!
//! ```
//! use floe_core::template::{NoMeta, Template};
//!
//! let t = Template::parse("ORD-{date:%Y%m%d}-{seq:06}").unwrap();
//! let at = t.moment(1_795_395_723_004); // the clock, in Unix ms: 2026-11-23T01:02:03Z
//! assert_eq!(t.sequence_key("orders", at), "orders@20261123"); // number this key...
//! assert_eq!(t.render(42, at, &NoMeta, None).unwrap(), "ORD-20261123-000042"); // ...and show it
//! assert!(t.render(1_000_000, at, &NoMeta, None).is_err()); // never cut to 000000
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};

use time::{OffsetDateTime, UtcOffset};

use crate::scramble::{ScrambleError, Scrambler};
use crate::sequence::{Key, MAX_KEY_LEN};

/// The longest template, in bytes.
pub const MAX_TEMPLATE_LEN: usize = 256;
/// The longest value of a `{meta.NAME}` placeholder without a width.
pub const MAX_META_LEN: usize = 64;
/// The widest `{seq:N}` (a `u64` has at most 20 digits).
pub const MAX_SEQ_WIDTH: u8 = 20;

/// Where a template's `{meta.NAME}` values come from: a request's query or metadata.
pub trait Lookup {
    /// The value of `name`, if the request gave one.
    fn lookup(&self, name: &str) -> Option<&str>;
}

impl Lookup for HashMap<String, String> {
    fn lookup(&self, name: &str) -> Option<&str> {
        self.get(name).map(String::as_str)
    }
}

impl Lookup for BTreeMap<String, String> {
    fn lookup(&self, name: &str) -> Option<&str> {
        self.get(name).map(String::as_str)
    }
}

impl Lookup for [(&str, &str)] {
    fn lookup(&self, name: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
    }
}

impl Lookup for [(String, String)] {
    fn lookup(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// No values at all.
#[derive(Debug, Clone, Copy)]
pub struct NoMeta;

impl Lookup for NoMeta {
    fn lookup(&self, _: &str) -> Option<&str> {
        None
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DateField {
    Year,
    Year2,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    DayOfYear,
    Char(char),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    /// `{seq}` or `{id}` (`name`: as written).
    Seq {
        width: Option<u8>,
        name: &'static str,
    },
    Scrambled,
    Date(Vec<DateField>),
    Meta {
        name: String,
        width: Option<u8>,
    },
    Luhn,
    Damm,
}

impl Part {
    /// Whether the text it writes can be of more than one length.
    fn varies(&self) -> bool {
        matches!(
            self,
            Part::Seq { width: None, .. } | Part::Meta { width: None, .. }
        )
    }

    /// Whether it writes decimal digits (something a check digit can cover).
    fn digits(&self) -> bool {
        match self {
            Part::Seq { .. } | Part::Scrambled | Part::Luhn | Part::Damm => true,
            Part::Meta { width, .. } => width.is_some(),
            Part::Date(fields) => fields.iter().any(|f| !matches!(f, DateField::Char(_))),
            Part::Text(t) => t.bytes().any(|b| b.is_ascii_digit()),
        }
    }
}

/// A template that failed to load: where, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError(String);

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "template: {}", self.0)
    }
}

impl std::error::Error for TemplateError {}

/// Why one ID could not be written. Nothing is cut to fit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenderError {
    /// A value has more digits or characters than its placeholder's width.
    TooWide {
        /// The placeholder, as written in the template.
        placeholder: String,
        /// The value's length.
        len: usize,
        /// The width.
        width: u8,
    },
    /// The request gave no value for `{meta.NAME}`.
    MissingMeta(String),
    /// A `{meta.NAME}` value the placeholder cannot take: what was expected.
    BadMeta(String),
    /// The template scrambles but no scrambler was given, or the number is outside its
    /// domain.
    Scramble(ScrambleError),
    /// The template scrambles and was given no keys.
    NoScrambler,
}

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenderError::TooWide {
                placeholder,
                len,
                width,
            } => write!(
                f,
                "{placeholder}: the value has {len} characters, more than its width of {width}; refusing to cut it (the ID could repeat): widen the template"
            ),
            RenderError::MissingMeta(name) => write!(f, "meta.{name}: no value given"),
            RenderError::BadMeta(m) => f.write_str(m),
            RenderError::Scramble(e) => write!(f, "{{seq:scrambled}}: {e}"),
            RenderError::NoScrambler => {
                f.write_str("{seq:scrambled}: no scramble key is configured")
            }
        }
    }
}

impl std::error::Error for RenderError {}

/// The period a dated template numbers under: the finest unit its dates show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Period {
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
}

/// The period the date fields of a template show, or an error when they leave out a coarser
/// field (a text that repeats: `%m` alone comes back every year).
fn period_of(parts: &[Part], pattern: &str) -> Result<Option<Period>, TemplateError> {
    let fields: Vec<DateField> = parts
        .iter()
        .filter_map(|p| match p {
            Part::Date(f) => Some(f.iter().copied()),
            _ => None,
        })
        .flatten()
        .collect();
    if fields.is_empty() {
        return Ok(None);
    }
    let has = |f: DateField| fields.contains(&f);
    let year = has(DateField::Year) || has(DateField::Year2);
    let day = has(DateField::Day) || has(DateField::DayOfYear);
    // Each shown field needs the coarser ones that make its text name one period only.
    let missing = if has(DateField::Second) && !has(DateField::Minute) {
        Some("%S needs %M")
    } else if has(DateField::Minute) && !has(DateField::Hour) {
        Some("%M needs %H")
    } else if has(DateField::Hour) && !day {
        Some("%H needs the day (%d or %j)")
    } else if has(DateField::Day) && !has(DateField::Month) {
        Some("%d needs %m")
    } else if (day || has(DateField::Month)) && !year {
        Some("the day or month needs the year (%Y or %y)")
    } else if !year {
        Some("a date needs at least the year")
    } else {
        None
    };
    if let Some(why) = missing {
        return err(format!(
            "{}: {why}: a date that leaves out a coarser field comes back (November every year), and its IDs would repeat",
            crate::endpoint::quoted(pattern)
        ));
    }
    Ok(Some(if has(DateField::Second) {
        Period::Second
    } else if has(DateField::Minute) {
        Period::Minute
    } else if has(DateField::Hour) {
        Period::Hour
    } else if day {
        Period::Day
    } else if has(DateField::Month) {
        Period::Month
    } else {
        Period::Year
    }))
}

/// Characters that show nothing or reorder text (zero-width, bidirectional controls, soft
/// hyphen, BOM): an ID that looks like another.
fn invisible(c: char) -> bool {
    matches!(c, '\u{00ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// A parsed, validated template (see the [module docs](self)).
#[derive(Debug)]
pub struct Template {
    pattern: String,
    parts: Vec<Part>,
    period: Option<Period>,
    offset: UtcOffset,
    /// The latest time (Unix ms) a date was taken at: dates never go back in a process.
    latest_ms: AtomicU64,
}

impl Clone for Template {
    fn clone(&self) -> Self {
        Template {
            pattern: self.pattern.clone(),
            parts: self.parts.clone(),
            period: self.period,
            offset: self.offset,
            latest_ms: AtomicU64::new(self.latest_ms.load(Ordering::Relaxed)),
        }
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern)
    }
}

fn err<T>(message: String) -> Result<T, TemplateError> {
    Err(TemplateError(message))
}

/// `+08:00`, `-05:30`, `Z` or `UTC`.
///
/// # Errors
/// What was expected (for the caller to prefix with its field).
pub fn parse_utc_offset(text: &str) -> Result<UtcOffset, String> {
    let t = text.trim();
    if t == "Z" || t.eq_ignore_ascii_case("utc") {
        return Ok(UtcOffset::UTC);
    }
    let bad = || {
        format!(
            "expected +HH:MM, -HH:MM or UTC, found {}",
            crate::endpoint::quoted(text)
        )
    };
    let (sign, rest) = match t.as_bytes().first() {
        Some(b'+') => (1i8, &t[1..]),
        Some(b'-') => (-1i8, &t[1..]),
        _ => return Err(bad()),
    };
    let (h, m) = rest.split_once(':').ok_or_else(bad)?;
    let two = |s: &str| -> Option<i8> {
        (s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (h, m) = (two(h).ok_or_else(bad)?, two(m).ok_or_else(bad)?);
    if h > 18 || m > 59 {
        return Err(bad());
    }
    UtcOffset::from_hms(sign * h, sign * m, 0).map_err(|_| bad())
}

fn parse_date(format: &str, at: usize) -> Result<Vec<DateField>, TemplateError> {
    let mut fields = Vec::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            fields.push(DateField::Char(c));
            continue;
        }
        fields.push(match chars.next() {
            Some('Y') => DateField::Year,
            Some('y') => DateField::Year2,
            Some('m') => DateField::Month,
            Some('d') => DateField::Day,
            Some('H') => DateField::Hour,
            Some('M') => DateField::Minute,
            Some('S') => DateField::Second,
            Some('j') => DateField::DayOfYear,
            Some('%') => DateField::Char('%'),
            other => {
                return err(format!(
                    "{{date:{format}}} at {at}: unknown field %{}: expected %Y %y %m %d %H %M %S %j or %%",
                    other.map(String::from).unwrap_or_default()
                ))
            }
        });
    }
    if !fields.iter().any(|f| !matches!(f, DateField::Char(_))) {
        return err(format!(
            "{{date:{format}}} at {at}: expected at least one field such as %Y%m%d"
        ));
    }
    Ok(fields)
}

/// A width such as `06` or `8`: 1 to `max`.
fn parse_width(spec: &str, what: &str, max: u8, at: usize) -> Result<u8, TemplateError> {
    let bad = || {
        err(format!(
            "{{{what}:{spec}}} at {at}: expected a width of 1 to {max} digits (e.g. {{{what}:08}})"
        ))
    };
    if spec.is_empty() || spec.len() > 3 || !spec.bytes().all(|b| b.is_ascii_digit()) {
        return bad();
    }
    match spec.parse::<u8>() {
        Ok(w) if (1..=max).contains(&w) => Ok(w),
        _ => bad(),
    }
}

fn valid_meta_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Template {
    /// Parses and checks `pattern` (see the [module docs](self)), with dates in UTC.
    ///
    /// # Errors
    /// [`TemplateError`] naming the placeholder and its byte position: an unknown
    /// placeholder, a bad width, an unclosed brace, no `{seq}`, two parts of varying width, a
    /// check digit with no digits before it, a control character.
    pub fn parse(pattern: &str) -> Result<Template, TemplateError> {
        if pattern.len() > MAX_TEMPLATE_LEN {
            return err(format!(
                "expected at most {MAX_TEMPLATE_LEN} bytes, found {}",
                pattern.len()
            ));
        }
        if let Some((at, c)) = pattern
            .char_indices()
            .find(|(_, c)| c.is_control() || invisible(*c))
        {
            return err(format!(
                "a control or invisible character {c:?} at {at}: a template is printable text"
            ));
        }
        let mut parts: Vec<Part> = Vec::new();
        let mut text = String::new();
        let mut rest = pattern;
        let mut at = 0;
        while let Some(c) = rest.chars().next() {
            match c {
                '{' if rest.starts_with("{{") => {
                    text.push('{');
                    rest = &rest[2..];
                    at += 2;
                }
                '}' if rest.starts_with("}}") => {
                    text.push('}');
                    rest = &rest[2..];
                    at += 2;
                }
                '}' => {
                    return err(format!(
                        "a '}}' at {at} closes nothing: write }}}} for a brace"
                    ))
                }
                '{' => {
                    let Some(end) = rest.find('}') else {
                        return err(format!(
                            "the '{{' at {at} is never closed: write {{{{ for a brace"
                        ));
                    };
                    let inner = &rest[1..end];
                    if inner.contains('{') {
                        return err(format!(
                            "a '{{' inside the placeholder at {at}: write {{{{ for a brace outside placeholders"
                        ));
                    }
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(Self::placeholder(inner, at)?);
                    rest = &rest[end + 1..];
                    at += end + 1;
                }
                c => {
                    text.push(c);
                    rest = &rest[c.len_utf8()..];
                    at += c.len_utf8();
                }
            }
        }
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        if !parts
            .iter()
            .any(|p| matches!(p, Part::Seq { .. } | Part::Scrambled))
        {
            return err(format!(
                "{}: expected {{seq}} (or {{id}}) somewhere: without the number every ID would be the same",
                crate::endpoint::quoted(pattern)
            ));
        }
        let varying: Vec<&Part> = parts.iter().filter(|p| p.varies()).collect();
        if varying.len() > 1 {
            return err(format!(
                "{}: {} and {} both have no width, so two different IDs could be written the same (1 and 23, 12 and 3): give one a width, e.g. {{seq:08}}",
                crate::endpoint::quoted(pattern),
                Self::shown(varying[0]),
                Self::shown(varying[1])
            ));
        }
        for (i, p) in parts.iter().enumerate() {
            if matches!(p, Part::Luhn | Part::Damm) && !parts[..i].iter().any(Part::digits) {
                return err(format!(
                    "{}: {} has no digits before it to check",
                    crate::endpoint::quoted(pattern),
                    Self::shown(p)
                ));
            }
        }
        let period = period_of(&parts, pattern)?;
        Ok(Template {
            pattern: pattern.to_string(),
            parts,
            period,
            offset: UtcOffset::UTC,
            latest_ms: AtomicU64::new(0),
        })
    }

    fn shown(p: &Part) -> String {
        match p {
            Part::Seq { width: None, name } => format!("{{{name}}}"),
            Part::Seq {
                width: Some(w),
                name,
            } => format!("{{{name}:{w:02}}}"),
            Part::Scrambled => "{seq:scrambled}".into(),
            Part::Meta { name, width: None } => format!("{{meta.{name}}}"),
            Part::Meta {
                name,
                width: Some(w),
            } => format!("{{meta.{name}:{w:02}}}"),
            Part::Date(_) => "{date}".into(),
            Part::Luhn => "{luhn}".into(),
            Part::Damm => "{damm}".into(),
            Part::Text(t) => t.clone(),
        }
    }

    fn placeholder(inner: &str, at: usize) -> Result<Part, TemplateError> {
        let (name, spec) = match inner.split_once(':') {
            Some((n, s)) => (n, Some(s)),
            None => (inner, None),
        };
        let number = if name == "id" { "id" } else { "seq" };
        match (name, spec) {
            ("seq" | "id", None) => Ok(Part::Seq {
                width: None,
                name: number,
            }),
            ("seq" | "id", Some("scrambled")) => Ok(Part::Scrambled),
            ("seq" | "id", Some(spec)) => Ok(Part::Seq {
                width: Some(parse_width(spec, name, MAX_SEQ_WIDTH, at)?),
                name: number,
            }),
            ("date", None) => parse_date("%Y%m%d", at).map(Part::Date),
            ("date", Some(format)) => parse_date(format, at).map(Part::Date),
            ("luhn", None) => Ok(Part::Luhn),
            ("damm", None) => Ok(Part::Damm),
            (meta, spec) if meta.starts_with("meta.") => {
                let field = &meta[5..];
                if !valid_meta_name(field) {
                    return err(format!(
                        "{{{inner}}} at {at}: a meta name is 1 to 32 of A-Z a-z 0-9 _ -"
                    ));
                }
                let width = spec
                    .map(|s| parse_width(s, meta, 32, at))
                    .transpose()?;
                Ok(Part::Meta {
                    name: field.to_string(),
                    width,
                })
            }
            _ => err(format!(
                "unknown placeholder {{{inner}}} at {at}: expected {{seq}}, {{seq:08}}, {{seq:scrambled}}, {{id}}, {{date:%Y%m%d}}, {{meta.NAME}}, {{luhn}} or {{damm}}"
            )),
        }
    }

    /// This template with dates written at `offset` from UTC (UTC by default).
    #[must_use]
    pub fn with_utc_offset(mut self, offset: UtcOffset) -> Template {
        self.offset = offset;
        self
    }

    /// The template as written.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Whether it writes a date (and so numbers each period under its own key).
    pub fn has_date(&self) -> bool {
        self.period.is_some()
    }

    /// Whether it writes `{seq:scrambled}` (and so needs a [`Scrambler`]).
    pub fn scrambles(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Scrambled))
    }

    /// The `{meta.NAME}` names it reads.
    pub fn meta_names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Meta { name, .. } => Some(name.as_str()),
            _ => None,
        })
    }

    /// Checks at load time that every ID from `smallest` on can be written: a `{seq:N}` of
    /// fewer digits than `smallest` never could (a Snowflake ID of today has 18 digits), nor a
    /// `{seq:scrambled}` whose domain ends below it.
    ///
    /// # Errors
    /// [`TemplateError`] naming the placeholder.
    pub fn check_fits(
        &self,
        smallest: u64,
        scrambler: Option<&Scrambler>,
    ) -> Result<(), TemplateError> {
        let len = itoa::Buffer::new().format(smallest).len();
        if let (true, Some(s)) = (self.scrambles(), scrambler) {
            if smallest > s.domain().max() {
                return err(format!(
                    "{}: IDs here are {smallest} already, past the scramble domain {} (0 to {}): use int63",
                    crate::endpoint::quoted(&self.pattern),
                    s.domain(),
                    s.domain().max()
                ));
            }
        }
        for p in &self.parts {
            if let Part::Seq { width: Some(w), .. } = p {
                if len > usize::from(*w) {
                    return err(format!(
                        "{}: IDs here have {len} digits already ({smallest}), more than {} can hold: widen it",
                        crate::endpoint::quoted(&self.pattern),
                        Self::shown(p)
                    ));
                }
            }
        }
        Ok(())
    }

    /// The time to date an ID at: `now_ms`, or the latest time this template dated an ID at
    /// if the clock went back since (so a period never goes back within a process).
    pub fn moment(&self, now_ms: u64) -> u64 {
        self.latest_ms
            .fetch_max(now_ms, Ordering::Relaxed)
            .max(now_ms)
    }

    /// The sequence key to number an ID dated `at_ms` under: `key@PERIOD` when the template
    /// writes dates, `key` itself otherwise. `PERIOD` is the period its dates show, written
    /// the same way whatever the template's own format (`%Y%m%d` for a day, `%Y%m` for a
    /// month, `%Y%m%d%H` for an hour...), in the template's UTC offset: every template that
    /// shows the same day numbers under the same key, so none can write another's text again.
    pub fn sequence_key(&self, key: &str, at_ms: u64) -> String {
        let Some(period) = self.period else {
            return key.to_string();
        };
        use DateField as F;
        let fields: &[DateField] = match period {
            Period::Year => &[F::Year],
            Period::Month => &[F::Year, F::Month],
            Period::Day => &[F::Year, F::Month, F::Day],
            Period::Hour => &[F::Year, F::Month, F::Day, F::Hour],
            Period::Minute => &[F::Year, F::Month, F::Day, F::Hour, F::Minute],
            Period::Second => &[F::Year, F::Month, F::Day, F::Hour, F::Minute, F::Second],
        };
        let mut out = String::with_capacity(key.len() + 16);
        out.push_str(key);
        out.push('@');
        write_date(&mut out, fields, self.datetime(at_ms));
        out
    }

    /// [`Template::sequence_key`] as a checked [`Key`].
    ///
    /// # Errors
    /// The key's own error, or, when only its period makes it too long, one that says so.
    pub fn dated_key(&self, key: &str, at_ms: u64) -> Result<Key, String> {
        Key::check(key).map_err(|e| e.to_string())?;
        let dated = self.sequence_key(key, at_ms);
        if dated.len() > MAX_KEY_LEN {
            return Err(format!(
                "invalid key: {} bytes with its period ({}, as a dated template numbers it), more than {MAX_KEY_LEN}",
                dated.len(),
                crate::endpoint::quoted(&dated[key.len()..])
            ));
        }
        Key::new(dated).map_err(|e| e.to_string())
    }

    /// Checks the request's values for every `{meta.NAME}` (present, of the right kind and
    /// width) without writing anything: what to run before a number is spent on them.
    ///
    /// # Errors
    /// [`RenderError::MissingMeta`] or [`RenderError::BadMeta`].
    pub fn check_meta(&self, meta: &(impl Lookup + ?Sized)) -> Result<(), RenderError> {
        for p in &self.parts {
            if let Part::Meta { name, width } = p {
                let v = meta
                    .lookup(name)
                    .ok_or_else(|| RenderError::MissingMeta(name.clone()))?;
                check_meta(name, v, *width)?;
            }
        }
        Ok(())
    }

    fn datetime(&self, at_ms: u64) -> OffsetDateTime {
        let nanos = i128::from(at_ms) * 1_000_000;
        OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH)
            .to_offset(self.offset)
    }

    /// Writes the ID for `value` dated `at_ms` into `out` (nothing is appended on error).
    ///
    /// # Errors
    /// [`RenderError`]: a value wider than its width, a missing or bad `{meta.NAME}` value, a
    /// number outside the scramble domain or no scrambler.
    pub fn render_into(
        &self,
        out: &mut String,
        value: u64,
        at_ms: u64,
        meta: &(impl Lookup + ?Sized),
        scrambler: Option<&Scrambler>,
    ) -> Result<(), RenderError> {
        let start = out.len();
        let result = self.write(out, start, value, at_ms, meta, scrambler);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    /// [`Template::render_into`] into a new string.
    ///
    /// # Errors
    /// See [`Template::render_into`].
    pub fn render(
        &self,
        value: u64,
        at_ms: u64,
        meta: &(impl Lookup + ?Sized),
        scrambler: Option<&Scrambler>,
    ) -> Result<String, RenderError> {
        let mut out = String::with_capacity(self.pattern.len() + 16);
        self.render_into(&mut out, value, at_ms, meta, scrambler)?;
        Ok(out)
    }

    fn write(
        &self,
        out: &mut String,
        start: usize,
        value: u64,
        at_ms: u64,
        meta: &(impl Lookup + ?Sized),
        scrambler: Option<&Scrambler>,
    ) -> Result<(), RenderError> {
        let mut when = None;
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Seq { width, .. } => {
                    let mut digits = itoa::Buffer::new();
                    pad(out, digits.format(value), *width, || Self::shown(part))?;
                }
                Part::Scrambled => {
                    let s = scrambler.ok_or(RenderError::NoScrambler)?;
                    s.write_encoded(value, out).map_err(RenderError::Scramble)?;
                }
                Part::Date(fields) => {
                    let w = *when.get_or_insert_with(|| self.datetime(at_ms));
                    write_date(out, fields, w);
                }
                Part::Meta { name, width } => {
                    let v = meta
                        .lookup(name)
                        .ok_or_else(|| RenderError::MissingMeta(name.clone()))?;
                    check_meta(name, v, *width)?;
                    pad(out, v, *width, || Self::shown(part))?;
                }
                Part::Luhn => {
                    let d = luhn_digit(&out[start..]);
                    out.push(char::from(b'0' + d));
                }
                Part::Damm => {
                    let d = damm_digit(&out[start..]);
                    out.push(char::from(b'0' + d));
                }
            }
        }
        Ok(())
    }
}

fn check_meta(name: &str, v: &str, width: Option<u8>) -> Result<(), RenderError> {
    match width {
        Some(w) => {
            if v.is_empty() || v.len() > usize::from(w) || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(RenderError::BadMeta(format!(
                    "meta.{name}: expected 1 to {w} digits, found {}",
                    crate::endpoint::quoted(v)
                )));
            }
        }
        None => {
            if v.is_empty()
                || v.len() > MAX_META_LEN
                || !v.bytes().all(|b| b.is_ascii_alphanumeric())
            {
                return Err(RenderError::BadMeta(format!(
                    "meta.{name}: expected 1 to {MAX_META_LEN} letters and digits, found {}",
                    crate::endpoint::quoted(v)
                )));
            }
        }
    }
    Ok(())
}

/// `text` zero-padded to `width`, or an error if it is wider.
fn pad(
    out: &mut String,
    text: &str,
    width: Option<u8>,
    shown: impl FnOnce() -> String,
) -> Result<(), RenderError> {
    if let Some(w) = width {
        let w_us = usize::from(w);
        if text.len() > w_us {
            return Err(RenderError::TooWide {
                placeholder: shown(),
                len: text.len(),
                width: w,
            });
        }
        for _ in text.len()..w_us {
            out.push('0');
        }
    }
    out.push_str(text);
    Ok(())
}

fn write_date(out: &mut String, fields: &[DateField], w: OffsetDateTime) {
    for f in fields {
        // Writing to a String cannot fail.
        let _ = match f {
            DateField::Year => write!(out, "{:04}", w.year()),
            DateField::Year2 => write!(out, "{:02}", w.year().rem_euclid(100)),
            DateField::Month => write!(out, "{:02}", u8::from(w.month())),
            DateField::Day => write!(out, "{:02}", w.day()),
            DateField::Hour => write!(out, "{:02}", w.hour()),
            DateField::Minute => write!(out, "{:02}", w.minute()),
            DateField::Second => write!(out, "{:02}", w.second()),
            DateField::DayOfYear => write!(out, "{:03}", w.ordinal()),
            DateField::Char(c) => {
                out.push(*c);
                Ok(())
            }
        };
    }
}

/// The Luhn check digit to append to the decimal digits of `text` (other characters are
/// skipped).
pub fn luhn_digit(text: &str) -> u8 {
    let sum: u32 = text
        .bytes()
        .rev()
        .filter(u8::is_ascii_digit)
        .enumerate()
        .map(|(i, b)| {
            let d = u32::from(b - b'0');
            if i % 2 == 0 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                d
            }
        })
        .sum();
    ((10 - sum % 10) % 10) as u8
}

/// Whether the decimal digits of `text` end in their Luhn check digit (at least two digits).
pub fn luhn_valid(text: &str) -> bool {
    let digits: String = text.chars().filter(char::is_ascii_digit).collect();
    digits.len() >= 2 && {
        let (body, check) = digits.split_at(digits.len() - 1);
        luhn_digit(body) == check.as_bytes()[0] - b'0'
    }
}

/// Damm's quasigroup of order 10 (H. M. Damm, 2004): catches every single-digit error and
/// every swap of adjacent digits.
const DAMM: [[u8; 10]; 10] = [
    [0, 3, 1, 7, 5, 9, 8, 6, 4, 2],
    [7, 0, 9, 2, 1, 5, 4, 8, 6, 3],
    [4, 2, 0, 6, 8, 7, 1, 3, 5, 9],
    [1, 7, 5, 0, 9, 8, 3, 4, 2, 6],
    [6, 1, 2, 3, 0, 4, 5, 9, 7, 8],
    [3, 6, 7, 4, 2, 0, 9, 5, 8, 1],
    [5, 8, 6, 9, 7, 2, 0, 1, 3, 4],
    [8, 9, 4, 5, 3, 6, 2, 0, 1, 7],
    [9, 4, 3, 8, 6, 1, 7, 2, 0, 5],
    [2, 5, 8, 1, 4, 3, 6, 7, 9, 0],
];

/// The Damm check digit to append to the decimal digits of `text` (other characters are
/// skipped).
pub fn damm_digit(text: &str) -> u8 {
    text.bytes()
        .filter(u8::is_ascii_digit)
        .fold(0u8, |i, b| DAMM[usize::from(i)][usize::from(b - b'0')])
}

/// Whether the decimal digits of `text` end in their Damm check digit (at least two digits).
pub fn damm_valid(text: &str) -> bool {
    text.bytes().filter(u8::is_ascii_digit).count() >= 2 && damm_digit(text) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scramble::{Domain, Keyring};
    use proptest::prelude::*;

    /// 2026-11-23T01:02:03.004Z.
    const AT: u64 = 1_795_395_723_004;

    fn t(p: &str) -> Template {
        Template::parse(p).unwrap()
    }

    fn parse_err(p: &str) -> String {
        Template::parse(p).unwrap_err().to_string()
    }

    #[test]
    fn the_issues_examples() {
        let orders = t("ORD-{date:%Y%m%d}-{seq:06}");
        assert_eq!(
            orders.render(42, AT, &NoMeta, None).unwrap(),
            "ORD-20261123-000042"
        );
        assert_eq!(orders.sequence_key("orders", AT), "orders@20261123");
        assert!(orders.has_date());
        let uid = t("{meta.uid:08}{seq:08}");
        let meta = [("uid", "1234")];
        assert_eq!(
            uid.render(42, AT, &meta[..], None).unwrap(),
            "0000123400000042"
        );
        assert_eq!(uid.sequence_key("orders", AT), "orders");
        assert_eq!(uid.meta_names().collect::<Vec<_>>(), ["uid"]);
        assert_eq!(
            t("ORD-{seq:06}").render(1, AT, &NoMeta, None).unwrap(),
            "ORD-000001"
        );
    }

    #[test]
    fn dates_fields_offsets_and_escapes() {
        let all = t("{date:%Y-%m-%dT%H:%M:%S %y %j %%}{{{seq}}}");
        assert_eq!(
            all.render(7, AT, &NoMeta, None).unwrap(),
            "2026-11-23T01:02:03 26 327 %{7}"
        );
        assert_eq!(
            t("{date}{seq:03}").render(7, AT, &NoMeta, None).unwrap(),
            "20261123007"
        );
        // 01:02 UTC on the 23rd is still the 22nd in New York.
        let ny = t("{date:%Y%m%d}-{seq}").with_utc_offset(parse_utc_offset("-05:00").unwrap());
        assert_eq!(ny.render(7, AT, &NoMeta, None).unwrap(), "20261122-7");
        assert_eq!(ny.sequence_key("k", AT), "k@20261122");
        let two = t("{date:%Y}/{seq:04}/{date:%m}");
        assert_eq!(two.sequence_key("k", AT), "k@202611");
        // Every template that shows the same day numbers under the same key.
        for same in [
            "ORD-{date:%Y%m%d}-{seq:06}",
            "ORD-20{date:%y%m%d}-{seq:06}",
            "ORD-{date:%Y%m}{date:%d}-{seq:06}",
            "{date:%d.%m.%Y} {seq}",
            "{date:%Y-%j}-{seq}",
        ] {
            assert_eq!(
                t(same).sequence_key("orders", AT),
                "orders@20261123",
                "{same}"
            );
        }
        assert_eq!(
            t("{date:%Y%m%d%H%M}{seq:04}").sequence_key("k", AT),
            "k@202611230102"
        );
        assert_eq!(
            t("{date:%Y%m%d%H%M%S}{seq:04}").sequence_key("k", AT),
            "k@20261123010203"
        );
        assert_eq!(t("{date:%y}{seq:04}").sequence_key("k", AT), "k@2026");
        assert_eq!(parse_utc_offset("+08:00").unwrap().whole_hours(), 8);
        assert_eq!(parse_utc_offset("UTC").unwrap(), UtcOffset::UTC);
        for bad in ["8", "+8:00", "+08", "+19:00", "+08:60", "08:00", ""] {
            let e = parse_utc_offset(bad).unwrap_err();
            assert!(e.starts_with("expected +HH:MM, -HH:MM or UTC"), "{e}");
        }
    }

    #[test]
    fn a_value_too_wide_is_an_error_never_cut() {
        let six = t("ORD-{seq:06}");
        let mut out = String::from("before:");
        let e = six
            .render_into(&mut out, 1_000_000, AT, &NoMeta, None)
            .unwrap_err();
        assert_eq!(
            e,
            RenderError::TooWide {
                placeholder: "{seq:06}".into(),
                len: 7,
                width: 6
            }
        );
        assert!(e.to_string().contains("refusing to cut it"), "{e}");
        assert_eq!(out, "before:", "nothing written on error");
        assert_eq!(
            six.render(999_999, AT, &NoMeta, None).unwrap(),
            "ORD-999999"
        );
        let uid = t("{meta.uid:04}{seq:08}");
        // A request's value too wide for its width is bad input, not a sequence run out.
        let wide = [("uid", "12345")];
        let e = uid.render(1, AT, &wide[..], None).unwrap_err().to_string();
        assert!(
            e.contains("meta.uid: expected 1 to 4 digits, found \"12345\""),
            "{e}"
        );
        assert_eq!(
            uid.render(1, AT, &NoMeta, None),
            Err(RenderError::MissingMeta("uid".into()))
        );
        for bad in ["12a", "", "-1", "１２"] {
            let e = uid
                .render(1, AT, &[("uid", bad)][..], None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("meta.uid: expected 1 to 4 digits"), "{e}");
        }
        let free = t("{meta.shop}-{seq:06}");
        assert_eq!(
            free.render(3, AT, &[("shop", "Ab9")][..], None).unwrap(),
            "Ab9-000003"
        );
        for bad in ["a-b", "a b", "é", &"x".repeat(65)] {
            let e = free
                .render(3, AT, &[("shop", bad)][..], None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("letters and digits"), "{e}");
        }
    }

    #[test]
    fn check_digits() {
        // Wikipedia's Luhn example 7992739871 -> 3, Damm's 572 -> 4.
        assert_eq!(
            t("{seq}{luhn}")
                .render(7_992_739_871, AT, &NoMeta, None)
                .unwrap(),
            "79927398713"
        );
        assert_eq!(
            t("{seq}{damm}").render(572, AT, &NoMeta, None).unwrap(),
            "5724"
        );
        assert!(luhn_valid("7992-7398-713") && !luhn_valid("79927398710"));
        assert!(damm_valid("5724") && !damm_valid("5274") && !damm_valid("5"));
        // Over the digits of everything before it, letters skipped.
        let inv = t("INV-{meta.c:02}-{seq:05}{luhn}");
        let text = inv.render(42, AT, &[("c", "7")][..], None).unwrap();
        assert_eq!(&text[..12], "INV-07-00042");
        assert!(luhn_valid(&text));
        // Every single-digit change and adjacent swap is caught by Damm.
        let text = t("{seq:08}{damm}")
            .render(31_415_926, AT, &NoMeta, None)
            .unwrap();
        let b = text.as_bytes();
        for i in 0..b.len() {
            for d in b'0'..=b'9' {
                if d != b[i] {
                    let mut m = b.to_vec();
                    m[i] = d;
                    assert!(!damm_valid(std::str::from_utf8(&m).unwrap()));
                }
            }
            if i + 1 < b.len() && b[i] != b[i + 1] {
                let mut m = b.to_vec();
                m.swap(i, i + 1);
                assert!(!damm_valid(std::str::from_utf8(&m).unwrap()));
            }
        }
    }

    #[test]
    fn templates_are_checked_when_loaded() {
        for (p, why) in [
            (
                "ORD-{sequence}",
                "unknown placeholder {sequence} at 4: expected",
            ),
            ("{seq:00}", "expected a width of 1 to 20 digits"),
            ("{seq:21}", "expected a width of 1 to 20 digits"),
            ("{seq:-6}", "expected a width"),
            ("{seq:six}", "expected a width"),
            ("{meta.uid:40}{seq}", "expected a width of 1 to 32"),
            ("{meta.}{seq:02}", "a meta name is"),
            ("{meta.a b}{seq:02}", "a meta name is"),
            ("ORD-{seq", "never closed"),
            ("ORD}-{seq}", "closes nothing"),
            ("ORD-{date:%Y%m%d}", "expected {seq}"),
            ("{meta.uid}{seq}", "both have no width"),
            ("{seq}-{meta.uid}", "both have no width"),
            ("{luhn}{seq}", "no digits before it"),
            ("A-{damm}-{seq}", "no digits before it"),
            ("{date:%Q}{seq}", "unknown field %Q"),
            ("{date:%}{seq}", "unknown field %"),
            ("{date:-}{seq}", "at least one field"),
            ("ORD\n{seq}", "control or invisible character"),
            ("ORD\u{200b}{seq}", "control or invisible character"),
            ("\u{202e}{seq}", "control or invisible character"),
            ("{date:{%Y}{seq:02}", "a '{' inside the placeholder at 0"),
            ("{date:%m}-{seq}", "the day or month needs the year"),
            ("{date:%d}-{seq}", "%d needs %m"),
            ("{date:%Y%d}-{seq}", "%d needs %m"),
            ("{date:%Y%m%H}-{seq}", "%H needs the day"),
            ("{date:%Y%m%d%M}-{seq}", "%M needs %H"),
            ("{date:%Y%m%d%H%S}-{seq}", "%S needs %M"),
        ] {
            let e = parse_err(p);
            assert!(e.starts_with("template: ") && e.contains(why), "{p}: {e}");
        }
        assert!(parse_err(&"x".repeat(300)).contains("at most 256 bytes"));
        // A Snowflake ID of today does not fit 10 digits: said at load.
        let e = t("{id:10}")
            .check_fits(7_000_000_000_000_000, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("widen it"), "{e}");
        t("{id:19}")
            .check_fits(7_000_000_000_000_000, None)
            .unwrap();
        let keys = Keyring::parse(&"5a".repeat(32)).unwrap();
        let ten = Scrambler::new(Domain::Digits(10), &keys);
        let e = t("{id:scrambled}")
            .check_fits(7_000_000_000_000_000, Some(&ten))
            .unwrap_err()
            .to_string();
        assert!(e.contains("past the scramble domain digits:10"), "{e}");
    }

    /// The checked key: the key's own errors, and one that names the period when only it
    /// makes the key too long; meta checked without writing.
    #[test]
    fn dated_keys_and_meta_checks() {
        let tpl = t("{date}-{meta.u:02}{seq:04}");
        assert_eq!(tpl.dated_key("k", AT).unwrap().as_str(), "k@20261123");
        assert!(tpl.dated_key("", AT).unwrap_err().contains("empty key"));
        let e = tpl.dated_key(&"k".repeat(250), AT).unwrap_err();
        assert!(
            e.contains("259 bytes with its period (\"@20261123\""),
            "{e}"
        );
        assert_eq!(t("{seq}").dated_key("k", AT).unwrap().as_str(), "k");
        assert_eq!(
            tpl.check_meta(&NoMeta),
            Err(RenderError::MissingMeta("u".into()))
        );
        assert!(tpl.check_meta(&[("u", "123")][..]).is_err());
        tpl.check_meta(&[("u".to_string(), "12".to_string())][..])
            .unwrap();
    }

    #[test]
    fn dates_never_go_back_in_a_process() {
        let tpl = t("{date}-{seq:04}");
        let day2 = AT + 86_400_000;
        assert_eq!(tpl.moment(day2), day2);
        // The clock steps back across midnight: the later day is kept.
        assert_eq!(tpl.moment(AT), day2);
        assert_eq!(tpl.sequence_key("k", tpl.moment(AT)), "k@20261124");
    }

    #[test]
    fn scrambled_ids_in_templates() {
        let keys = Keyring::parse(&format!("3:{}", "5a".repeat(32))).unwrap();
        let s = Scrambler::new(Domain::Digits(9), &keys);
        let tpl = t("PUB-{seq:scrambled}");
        assert!(tpl.scrambles());
        assert_eq!(
            tpl.render(5, AT, &NoMeta, None),
            Err(RenderError::NoScrambler)
        );
        let text = tpl.render(5, AT, &NoMeta, Some(&s)).unwrap();
        assert_eq!(text.len(), 4 + 10);
        assert_eq!(s.decode(&text[4..]).unwrap(), 5);
        let e = tpl
            .render(1_000_000_000, AT, &NoMeta, Some(&s))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("outside the scramble domain digits:9"),
            "{e}"
        );
    }

    proptest! {
        /// Distinct numbers never write the same text (same date, same meta), whatever the
        /// widths; a number too wide for its width is an error, never cut.
        #[test]
        fn distinct_numbers_never_render_the_same(
            a in any::<u64>(), b in any::<u64>(), width in 1u8..=20, uid in "[0-9]{1,6}"
        ) {
            let tpl = t(&format!("X{{meta.uid:06}}-{{seq:{width:02}}}{{luhn}}"));
            let meta = [("uid", uid.as_str())];
            let ra = tpl.render(a, AT, &meta[..], None);
            let rb = tpl.render(b, AT, &meta[..], None);
            for (v, r) in [(a, &ra), (b, &rb)] {
                let digits = v.to_string().len();
                prop_assert_eq!(r.is_err(), digits > usize::from(width));
                if let Ok(text) = r {
                    prop_assert!(luhn_valid(text));
                    // The number reads back from its fixed place.
                    let n = &text[8..8 + usize::from(width)];
                    prop_assert_eq!(n.parse::<u64>().unwrap(), v);
                }
            }
            if let (Ok(x), Ok(y)) = (&ra, &rb) {
                prop_assert_eq!(x == y, a == b);
            }
        }

        /// Garbage templates are refused or accepted, never a panic; accepted ones render or
        /// fail cleanly.
        #[test]
        fn garbage_never_panics(p in "[{}a-z0-9.:%YmdHMS-]{0,40}", v in any::<u64>()) {
            if let Ok(tpl) = Template::parse(&p) {
                let _ = tpl.render(v, AT, &[("a", "1")][..], None);
                let _ = tpl.sequence_key("k", AT);
            }
        }
    }
}
