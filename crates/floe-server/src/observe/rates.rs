//! IDs issued so far, and the rates the status page shows.

use std::time::{Duration, Instant};

use crate::App;

/// What a count of issued IDs is of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Issued {
    /// IDs of a kind.
    Kind(&'static str),
    /// Sequence IDs of a store, WEAK or STRONG.
    Store(String, &'static str),
}

impl std::fmt::Display for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Issued::Kind(kind) => f.write_str(kind),
            Issued::Store(store, mode) => write!(f, "{store} {mode}"),
        }
    }
}

/// IDs issued so far: per kind served, and per store and mode.
pub fn totals(app: &App) -> Vec<(Issued, u64)> {
    let mut out = Vec::new();
    if let Some(g) = app.ids.as_deref() {
        for kind in crate::ids::IdKind::ALL {
            if g.serves(kind) {
                out.push((Issued::Kind(kind.name()), g.issued_total(kind)));
            }
        }
    }
    for h in app.sequencer.stores() {
        for (mode, name) in [
            (floe_sequencer::Mode::Weak, "weak"),
            (floe_sequencer::Mode::Strong, "strong"),
        ] {
            out.push((
                Issued::Store(h.name().to_string(), name),
                h.issued_total(mode),
            ));
        }
    }
    out
}

/// Totals at one moment.
type Sampled = (Instant, Vec<(Issued, u64)>);

/// Totals sampled once a second, for the status page's rates.
#[derive(Debug, Default)]
pub struct Rates {
    samples: std::sync::Mutex<std::collections::VecDeque<Sampled>>,
}

/// How far back a rate looks.
const RATE_WINDOW: Duration = Duration::from_secs(10);

impl Rates {
    /// Records the totals now.
    pub fn sample(&self, totals: Vec<(Issued, u64)>) {
        let now = Instant::now();
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        samples.push_back((now, totals));
        while samples
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RATE_WINDOW + Duration::from_secs(1))
        {
            samples.pop_front();
        }
    }

    /// IDs per second over the last ten seconds (as far back as there are samples).
    pub fn per_second(&self) -> Vec<(Issued, f64)> {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let (Some((t0, first)), Some((t1, last))) = (samples.front(), samples.back()) else {
            return Vec::new();
        };
        let secs = t1.duration_since(*t0).as_secs_f64();
        last.iter()
            .map(|(what, total)| {
                let before = first
                    .iter()
                    .find(|(w, _)| w == what)
                    .map_or(*total, |(_, n)| *n);
                let rate = if secs > 0.0 {
                    total.saturating_sub(before) as f64 / secs
                } else {
                    0.0
                };
                (what.clone(), rate)
            })
            .collect()
    }
}
