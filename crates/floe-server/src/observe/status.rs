//! The status page (`/`): one self-contained HTML page, no script, no external asset, that
//! refreshes itself every 5 s; and the same figures as JSON (`/v1/status`).
//!
//! It shows whether the server is ready (and why not), each generator's worker ID and lease,
//! the clock against each generator's last issued time and durable time bound, how long each
//! layout's timestamp field lasts, issue rates over the last ten seconds, and each store with
//! its keys' WEAK segment buffers (what Leaf's `/cache` shows), at most [`PAGE_KEYS`] keys a
//! store.

use std::fmt::Write as _;

use floe_core::clock::Clock;
use serde::Serialize;

use crate::observe::{layout_horizon, sno_end_ms};
use crate::App;

/// The most keys a store lists on the page.
pub const PAGE_KEYS: usize = 50;

/// A generator, as the page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct GeneratorView {
    /// `snowflake default`, `sno`, ...
    pub generator: String,
    /// The worker ID or partition (none for UUIDv7 and ULID).
    pub worker_id: Option<u32>,
    /// `held`, `lost (fenced)`, or `none` (a kind that needs no lease).
    pub lease: String,
    /// The identity the lease belongs to.
    pub identity: Option<String>,
    /// Where the lease came from.
    pub source: Option<String>,
    /// Unix ms of the last issued ID's time (or of the time the generator may start from).
    pub last_issued_ms: Option<u64>,
    /// The clock minus the last issued time, in ms (negative: the clock is behind it).
    pub clock_ahead_ms: Option<i64>,
    /// The durable time bound: no ID past this Unix ms until it is moved.
    pub durable_bound_ms: Option<u64>,
    /// Unix ms at which the timestamp field runs out.
    pub field_ends_ms: Option<u64>,
    /// Years left before it does.
    pub years_left: Option<f64>,
    /// When the field ends past what a date here can show (UUIDv7, ULID, LexicalUUID).
    pub field_ends_note: Option<&'static str>,
}

/// One store.
#[derive(Debug, Clone, Serialize)]
pub struct StoreView {
    /// The configured name.
    pub name: String,
    /// The backend.
    pub kind: String,
    /// Whether it answered its last probe.
    pub ready: bool,
    /// Keys held in memory.
    pub keys_in_memory: usize,
    /// Each WEAK key's buffer (what Leaf's cache page shows), the first [`PAGE_KEYS`] by key.
    pub keys: Vec<KeyView>,
    /// Whether there were more keys than shown.
    pub truncated: bool,
}

/// One WEAK key's segment buffer (IDs as text: they pass 2^53).
#[derive(Debug, Clone, Serialize)]
pub struct KeyView {
    /// The key.
    pub key: String,
    /// The current segment's next ID (none when it is used up).
    pub next_id: Option<String>,
    /// IDs left in the current segment.
    pub left: u64,
    /// The current segment's size.
    pub segment: u64,
    /// The next segment, if fetched: first and last ID.
    pub next_segment: Option<(String, String)>,
    /// The step of the next fetch.
    pub step: u32,
    /// Whether a fetch is under way.
    pub fetching: bool,
}

/// A rate.
#[derive(Debug, Clone, Serialize)]
pub struct RateView {
    /// A kind, or `STORE MODE`.
    pub what: String,
    /// IDs issued in all.
    pub total: u64,
    /// IDs a second over the last ten seconds.
    pub per_second: f64,
}

/// Everything the page shows.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// floe's version.
    pub version: &'static str,
    /// Ready to serve.
    pub ready: bool,
    /// Why not.
    pub not_ready: Vec<String>,
    /// The clock now (Unix ms).
    pub now_ms: u64,
    /// When the server started (Unix ms).
    pub started_ms: u64,
    /// The listeners.
    pub listeners: Vec<String>,
    /// The registry's location.
    pub registry: String,
    /// The generators.
    pub generators: Vec<GeneratorView>,
    /// The stores.
    pub stores: Vec<StoreView>,
    /// Issue rates.
    pub rates: Vec<RateView>,
}

fn years(ms: f64) -> f64 {
    ms / (365.25 * 86_400_000.0)
}

fn signed_diff(a: u64, b: u64) -> i64 {
    if a >= b {
        i64::try_from(a - b).unwrap_or(i64::MAX)
    } else {
        i64::try_from(b - a).map_or(i64::MIN, |d| -d)
    }
}

/// The figures of `app` now (walks every store's keys: call it off the async executor).
pub fn snapshot(app: &App) -> Snapshot {
    let now_ms = app.clock.now_nanos() / 1_000_000;
    let t = &app.telemetry;
    let lease_of = |generator: &str| t.leases.iter().find(|l| l.generator == generator);
    let mut generators = Vec::new();
    let mut push = |generator: String,
                    last: Option<u64>,
                    bound: Option<u64>,
                    ends: Result<u64, &'static str>| {
        let lease = lease_of(&generator);
        let ends_ms = ends.ok();
        generators.push(GeneratorView {
            worker_id: lease.map(|l| l.id),
            lease: match lease {
                Some(l) if l.fenced() => "lost (fenced)".to_string(),
                Some(_) => "held".to_string(),
                None => "none".to_string(),
            },
            identity: lease.map(|l| l.identity.clone()),
            source: lease.map(|l| l.source.clone()),
            last_issued_ms: last,
            clock_ahead_ms: last.map(|l| signed_diff(now_ms, l)),
            durable_bound_ms: bound,
            field_ends_ms: ends_ms,
            years_left: ends_ms.map(|e| years(signed_diff(e, now_ms) as f64)),
            field_ends_note: ends.err(),
            generator,
        });
    };
    if let Some(g) = app.ids.as_deref() {
        for (name, s) in g.snowflakes() {
            let layout = s.layout();
            let (_, end_s) = layout_horizon(&layout, now_ms);
            push(
                format!("snowflake {name}"),
                Some(s.last_timestamp_ms()).filter(|ms| *ms > layout.epoch_ms()),
                s.horizon().map(|h| h.bound_ms()),
                Ok((end_s * 1000.0) as u64),
            );
        }
        if let Some(sno) = g.sno() {
            push(
                "sno".to_string(),
                Some(sno.last_time_ms()).filter(|ms| *ms > floe_core::sno::EPOCH_MS),
                None,
                Ok(sno_end_ms()),
            );
        }
        if let Some(lexical) = g.lexical() {
            push(
                "lexical".to_string(),
                Some(lexical.last_time_ms()).filter(|ms| *ms > 0),
                g.lexical_bound_ms(),
                Err("year 294247 (64-bit microseconds)"),
            );
        }
        for kind in [crate::ids::IdKind::Uuid7, crate::ids::IdKind::Ulid] {
            if g.serves(kind) {
                push(
                    kind.name().to_string(),
                    None,
                    None,
                    Err("year 10889 (48-bit milliseconds)"),
                );
            }
        }
    }
    let stores = app
        .sequencer
        .stores()
        .map(|h| {
            let buffers = h.weak_buffers();
            StoreView {
                name: h.name().to_string(),
                kind: h.store().kind().to_string(),
                ready: t.store_ready(h.name()),
                keys_in_memory: h.keys_in_memory(),
                truncated: buffers.len() > PAGE_KEYS,
                keys: buffers
                    .into_iter()
                    .take(PAGE_KEYS)
                    .map(|(key, b)| KeyView {
                        key: key.as_str().to_string(),
                        next_id: (b.left > 0).then(|| b.next_id.to_string()),
                        left: b.left,
                        segment: b.current_len,
                        next_segment: b.next.map(|n| (n.start.to_string(), n.end.to_string())),
                        step: b.step,
                        fetching: b.fetching,
                    })
                    .collect(),
            }
        })
        .collect();
    let totals = crate::observe::totals(app);
    let rates = t.rates.per_second();
    let rates = totals
        .into_iter()
        .map(|(what, total)| RateView {
            per_second: rates
                .iter()
                .find(|(w, _)| *w == what)
                .map_or(0.0, |(_, r)| *r),
            what: what.to_string(),
            total,
        })
        .collect();
    let not_ready = app.not_ready(None);
    Snapshot {
        version: env!("CARGO_PKG_VERSION"),
        ready: not_ready.is_empty(),
        not_ready,
        now_ms,
        started_ms: t.started_ms,
        listeners: t.listeners.clone(),
        registry: t.registry.clone(),
        generators,
        stores,
        rates,
    }
}

/// `text` safe inside HTML.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Unix ms as `2026-11-22 23:59:59.123 UTC`.
pub fn utc(ms: u64) -> String {
    i128::from(ms)
        .checked_mul(1_000_000)
        .and_then(|ns| time::OffsetDateTime::from_unix_timestamp_nanos(ns).ok())
        .and_then(|t| {
            t.format(time::macros::format_description!(
                "[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:3] UTC"
            ))
            .ok()
        })
        .unwrap_or_else(|| format!("{ms} ms"))
}

fn duration(ms: i64) -> String {
    let abs = ms.unsigned_abs();
    let text = if abs < 10_000 {
        format!("{abs} ms")
    } else if abs < 3_600_000 {
        format!("{:.1} s", abs as f64 / 1000.0)
    } else if abs < 86_400_000 * 2 {
        format!("{:.1} h", abs as f64 / 3_600_000.0)
    } else {
        format!("{:.1} days", abs as f64 / 86_400_000.0)
    };
    if ms < 0 {
        format!("-{text}")
    } else {
        text
    }
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}\
h1{font-size:1.5em;margin:0 0 .3em}h2{font-size:1.1em;margin:1.4em 0 .4em}\
table{border-collapse:collapse;background:#fff;margin-bottom:.5em}\
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;font-variant-numeric:tabular-nums}\
th{background:#eee}.badge{display:inline-block;padding:.2em .7em;border-radius:.3em;color:#fff;font-weight:bold}\
.ready{background:#2a7d2a}.notready{background:#b22}.warn{color:#b22;font-weight:bold}.muted{color:#777}";

/// The page.
pub fn html(s: &Snapshot) -> String {
    let mut o = String::with_capacity(8 * 1024);
    let _ = write!(
        o,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta http-equiv=\"refresh\" content=\"5\"><title>floe status</title><style>{STYLE}</style></head><body>"
    );
    let (badge, class) = if s.ready {
        ("READY", "ready")
    } else {
        ("NOT READY", "notready")
    };
    let _ = write!(
        o,
        "<h1>floe {} <span id=\"readiness\" class=\"badge {class}\">{badge}</span></h1>",
        escape(s.version)
    );
    for why in &s.not_ready {
        let _ = write!(o, "<p class=\"warn\">{}</p>", escape(why));
    }
    let _ = write!(
        o,
        "<p>clock {} &middot; up {} &middot; registry <code>{}</code> &middot; listening on {}</p>",
        utc(s.now_ms),
        duration(signed_diff(s.now_ms, s.started_ms)),
        escape(&s.registry),
        escape(&s.listeners.join(", "))
    );

    o.push_str("<h2>Generators</h2><table id=\"generators\"><tr><th>generator</th><th>worker ID</th><th>lease</th><th>last issued</th><th>clock vs last issued</th><th>durable bound</th><th>timestamp field ends</th><th>years left</th></tr>");
    for g in &s.generators {
        let lease_class = if g.lease.starts_with("lost") {
            " class=\"warn\""
        } else {
            ""
        };
        let clock = match g.clock_ahead_ms {
            Some(d) if d < 0 => format!("<span class=\"warn\">behind by {}</span>", duration(-d)),
            Some(d) => format!("ahead by {}", duration(d)),
            None => "<span class=\"muted\">-</span>".to_string(),
        };
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td{lease_class}>{}{}</td><td>{}</td><td>{clock}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&g.generator),
            g.worker_id.map_or("-".to_string(), |w| w.to_string()),
            escape(&g.lease),
            g.identity
                .as_ref()
                .map_or(String::new(), |i| format!(" <span class=\"muted\">({})</span>", escape(i))),
            g.last_issued_ms.map_or("none yet".to_string(), utc),
            g.durable_bound_ms.map_or("-".to_string(), utc),
            g.field_ends_ms
                .map_or_else(|| g.field_ends_note.unwrap_or("-").to_string(), utc),
            g.years_left.map_or("-".to_string(), |y| format!("{y:.1}")),
        );
    }
    o.push_str("</table>");

    o.push_str("<h2>Issue rates (last 10 s)</h2><table id=\"rates\"><tr><th>what</th><th>IDs/s</th><th>issued since start</th></tr>");
    for r in &s.rates {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{:.0}</td><td>{}</td></tr>",
            escape(&r.what),
            r.per_second,
            r.total
        );
    }
    o.push_str("</table>");

    o.push_str("<h2>Stores</h2>");
    for st in &s.stores {
        let state = if st.ready {
            "answering"
        } else {
            "<span class=\"warn\">not answering</span>"
        };
        let _ = write!(
            o,
            "<h3 class=\"store\">{} <span class=\"muted\">({})</span>: {state}, {} key(s) in memory</h3>",
            escape(&st.name),
            escape(&st.kind),
            st.keys_in_memory
        );
        if st.keys.is_empty() {
            o.push_str("<p class=\"muted\">no WEAK key buffered</p>");
            continue;
        }
        o.push_str("<table class=\"keys\"><tr><th>key</th><th>next ID</th><th>left</th><th>segment</th><th>next segment</th><th>step</th><th>fetching</th></tr>");
        for k in &st.keys {
            let next = k
                .next_segment
                .as_ref()
                .map_or_else(|| "-".to_string(), |(a, b)| format!("{a} to {b}"));
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{next}</td><td>{}</td><td>{}</td></tr>",
                escape(&k.key),
                k.next_id.as_deref().unwrap_or("-"),
                k.left,
                k.segment,
                k.step,
                k.fetching,
            );
        }
        o.push_str("</table>");
        if st.truncated {
            let _ = write!(o, "<p class=\"muted\">first {PAGE_KEYS} keys shown</p>");
        }
    }
    o.push_str("<p class=\"muted\">This page refreshes every 5 s. JSON: <a href=\"/v1/status\">/v1/status</a> &middot; <a href=\"/metrics\">/metrics</a> &middot; <a href=\"/readyz\">/readyz</a></p></body></html>");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_keys_and_names_is_escaped() {
        assert_eq!(
            escape("<script>alert('x')&\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;)&amp;&quot;&lt;/script&gt;"
        );
    }

    #[test]
    fn durations_and_times_read_well() {
        assert_eq!(duration(1500), "1500 ms");
        assert_eq!(duration(-2500), "-2500 ms");
        assert_eq!(duration(90_000), "90.0 s");
        assert_eq!(utc(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(signed_diff(5, 7), -2);
        assert_eq!(signed_diff(u64::MAX, 0), i64::MAX);
    }
}
