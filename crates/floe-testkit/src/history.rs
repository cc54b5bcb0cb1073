//! A history of calls to floe nodes, and the checks the fault suite trusts.
//!
//! Client threads record every call as it was seen from outside: which node answered, the
//! moment just before the request was sent and just after the answer was read (one monotonic
//! clock for every thread), and what came back: values, or "unavailable" (503 /
//! `UNAVAILABLE`), or anything else. [`History::check`] then proves, from the answers alone:
//!
//! - **uniqueness**: no value came back twice within a stream (all Snowflake IDs of every
//!   node; one sequence key's STRONG values; ...), across every node and every restart;
//! - **real-time order** for streams that promise it (STRONG): a call that ended before
//!   another began returned smaller values;
//! - **ownership**: every ID's owner field (a Snowflake worker, a sno partition) is one the
//!   node that issued it was given, and no node issued an ID with a field after another node
//!   had already issued IDs with it (a call of the old holder that began after a call of the
//!   new holder ended: an old holder still issuing after another was given its ID).
//!
//! Each check names what it found; the checks are themselves tested on histories with a
//! planted fault, so that a clean report means something.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Values, in the order the node gave them.
    Values(Vec<u128>),
    /// The node said to retry (503, `UNAVAILABLE`): fenced, or a store down.
    Unavailable,
    /// Anything else: a refused connection, a timeout, an unexpected answer.
    Failed(String),
}

/// One call as a client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The node that answered (its name in the scenario: `A`, `B`, ...).
    pub node: String,
    /// The stream the values belong to (`snowflake`, `sno`, `strong:orders`, ...).
    pub stream: String,
    /// Just before the request was sent, since the history began.
    pub start: Duration,
    /// Just after the answer was read, since the history began.
    pub end: Duration,
    /// What came back.
    pub outcome: Outcome,
}

impl Call {
    fn values(&self) -> &[u128] {
        match &self.outcome {
            Outcome::Values(v) => v,
            _ => &[],
        }
    }
}

/// How a stream is checked.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rules {
    /// STRONG: a call that ended before another began returned smaller values.
    pub real_time_order: bool,
    /// The owner field of a value (a Snowflake worker, a sno partition), for the ownership
    /// check; `None`: the stream has none.
    pub owner: Option<fn(u128) -> u64>,
    /// The time a value carries (in the stream's own unit), for the ownership check by time:
    /// the nodes of one test run on one clock, so an old holder's value with a time at or
    /// after the new holder's first was issued after the new holder began, however its call
    /// was timed (a call sent before a pause and answered after it).
    pub time: Option<fn(u128) -> u64>,
}

/// The owner fields each node was given, by (stream, node): a Snowflake worker, a sno
/// partition. A node missing from it may use none in that stream.
pub type Grants = HashMap<(String, String), HashSet<u64>>;

/// Calls recorded by many threads at once; cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct History {
    origin: Instant,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

/// A repeat: the value, and the two calls that returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repeat {
    /// The stream.
    pub stream: String,
    /// The value seen twice.
    pub value: u128,
    /// The earlier call that returned it.
    pub first: Call,
    /// The later one.
    pub second: Call,
}

/// What [`History::check`] found.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Calls recorded.
    pub calls: usize,
    /// Values returned.
    pub values: usize,
    /// Values returned twice within a stream.
    pub repeats: Vec<Repeat>,
    /// Real-time order violations (STRONG), each described.
    pub order_violations: Vec<String>,
    /// Ownership violations, each described.
    pub ownership_violations: Vec<String>,
    /// Calls answered "unavailable", by node.
    pub unavailable: BTreeMap<String, usize>,
    /// The longest time each node answered nothing but "unavailable" (or failed): from the
    /// start of the first such call after a success to the end of the last before the next
    /// success.
    pub longest_outage: BTreeMap<String, Duration>,
    /// Calls that failed otherwise, by node.
    pub failed: BTreeMap<String, usize>,
}

impl Report {
    /// Whether no repeat, order or ownership violation was found.
    pub fn clean(&self) -> bool {
        self.repeats.is_empty()
            && self.order_violations.is_empty()
            && self.ownership_violations.is_empty()
    }

    /// Everything found wrong, one line each (at most `limit` of each kind).
    pub fn problems(&self, limit: usize) -> Vec<String> {
        let mut out: Vec<String> = self
            .repeats
            .iter()
            .take(limit)
            .map(|r| {
                format!(
                    "repeat in {}: {} from {} [{:?}..{:?}] and {} [{:?}..{:?}]",
                    r.stream,
                    r.value,
                    r.first.node,
                    r.first.start,
                    r.first.end,
                    r.second.node,
                    r.second.start,
                    r.second.end
                )
            })
            .collect();
        out.extend(self.order_violations.iter().take(limit).cloned());
        out.extend(self.ownership_violations.iter().take(limit).cloned());
        out
    }
}

impl History {
    /// An empty history; its clock starts now.
    pub fn new() -> History {
        History {
            origin: Instant::now(),
            calls: Arc::default(),
        }
    }

    /// The history's clock: time since it began.
    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Runs `call` (a request to `node`) and records it, timed around it.
    pub fn record(&self, node: &str, stream: &str, call: impl FnOnce() -> Outcome) -> Outcome {
        let start = self.now();
        let outcome = call();
        let end = self.now();
        self.push(Call {
            node: node.to_string(),
            stream: stream.to_string(),
            start,
            end,
            outcome: outcome.clone(),
        });
        outcome
    }

    /// Records a call timed by the caller.
    pub fn push(&self, call: Call) {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(call);
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Checks every stream by its rules (streams without rules: uniqueness only).
    /// `granted` says which owner fields each node was given (for streams with an owner).
    pub fn check(&self, rules: &HashMap<String, Rules>, granted: &Grants) -> Report {
        check(&self.calls(), rules, granted)
    }
}

/// [`History::check`] on a list of calls.
pub fn check(calls: &[Call], rules: &HashMap<String, Rules>, granted: &Grants) -> Report {
    let mut report = Report {
        calls: calls.len(),
        ..Report::default()
    };
    let mut by_stream: BTreeMap<&str, Vec<&Call>> = BTreeMap::new();
    for c in calls {
        by_stream.entry(&c.stream).or_default().push(c);
        match &c.outcome {
            Outcome::Values(v) => report.values += v.len(),
            Outcome::Unavailable => *report.unavailable.entry(c.node.clone()).or_default() += 1,
            Outcome::Failed(_) => *report.failed.entry(c.node.clone()).or_default() += 1,
        }
    }
    for (stream, mut calls) in by_stream {
        calls.sort_by_key(|c| (c.start, c.end));
        uniqueness(stream, &calls, &mut report);
        let rules = rules.get(stream).copied().unwrap_or_default();
        if rules.real_time_order {
            real_time_order(stream, &calls, &mut report);
        }
        if let Some(owner) = rules.owner {
            ownership(stream, &calls, owner, rules.time, granted, &mut report);
        }
    }
    outages(calls, &mut report);
    report
}

fn uniqueness(stream: &str, calls: &[&Call], report: &mut Report) {
    let mut seen: HashMap<u128, &Call> = HashMap::new();
    for c in calls {
        for &v in c.values() {
            if let Some(first) = seen.insert(v, c) {
                report.repeats.push(Repeat {
                    stream: stream.to_string(),
                    value: v,
                    first: first.clone(),
                    second: (*c).clone(),
                });
            }
        }
    }
}

/// For every call `b`, the largest value of the calls that ended before `b` began must be
/// below `b`'s smallest. Calls sorted by end with a running maximum; a binary search per call.
fn real_time_order(stream: &str, calls: &[&Call], report: &mut Report) {
    let mut ended: Vec<(Duration, u128, &Call)> = calls
        .iter()
        .filter_map(|c| c.values().iter().max().map(|&m| (c.end, m, *c)))
        .collect();
    ended.sort_by_key(|(end, _, _)| *end);
    let mut running: Vec<(u128, &Call)> = Vec::with_capacity(ended.len());
    for (_, m, c) in &ended {
        match running.last() {
            Some(&(best, bc)) if best >= *m => running.push((best, bc)),
            _ => running.push((*m, c)),
        }
    }
    for b in calls {
        let Some(&least) = b.values().iter().min() else {
            continue;
        };
        // Calls that ended strictly before b began.
        let n = ended.partition_point(|(end, _, _)| *end < b.start);
        if n == 0 {
            continue;
        }
        let (max_before, a) = running[n - 1];
        if max_before >= least {
            report.order_violations.push(format!(
                "{stream}: {} returned {max_before} by {:?}, then {} (sent at {:?}) returned {least}",
                a.node, a.end, b.node, b.start
            ));
        }
    }
}

/// Every owner field a node used must have been granted to it; and for every field, no
/// call of one node may begin after a call of another node with that field ended, if that
/// other node's use began after the first node's (the old holder still issuing after the new
/// one did); and, with `time`, no value of the old holder may carry a time at or after the
/// new holder's first.
fn ownership(
    stream: &str,
    calls: &[&Call],
    owner: fn(u128) -> u64,
    time: Option<fn(u128) -> u64>,
    granted: &Grants,
    report: &mut Report,
) {
    // Per field, per node: the calls that used it.
    let mut by_field: BTreeMap<u64, BTreeMap<&str, Vec<&Call>>> = BTreeMap::new();
    for c in calls {
        let mut fields: Vec<u64> = c.values().iter().map(|&v| owner(v)).collect();
        fields.sort_unstable();
        fields.dedup();
        for f in fields {
            let key = (stream.to_string(), c.node.clone());
            if !granted.get(&key).is_some_and(|g| g.contains(&f)) {
                report.ownership_violations.push(format!(
                    "{stream}: {} issued field {f} at {:?}..{:?}, never granted to it",
                    c.node, c.start, c.end
                ));
            }
            by_field
                .entry(f)
                .or_default()
                .entry(&c.node)
                .or_default()
                .push(c);
        }
    }
    for (field, nodes) in by_field {
        // Holders in the order they began to use the field.
        let mut holders: Vec<(&str, Duration, Duration, Duration)> = nodes
            .iter()
            .map(|(node, cs)| {
                let first_start = cs.iter().map(|c| c.start).min().unwrap_or_default();
                let first_end = cs.iter().map(|c| c.end).min().unwrap_or_default();
                let last_start = cs.iter().map(|c| c.start).max().unwrap_or_default();
                (*node, first_start, first_end, last_start)
            })
            .collect();
        holders.sort_by_key(|h| h.1);
        // Per node, the times its values with this field carry: (earliest, latest).
        let times = |node: &str| -> Option<(u64, u64)> {
            let time = time?;
            nodes
                .get(node)?
                .iter()
                .flat_map(|c| c.values())
                .filter(|&&v| owner(v) == field)
                .map(|&v| time(v))
                .fold(None, |acc, t| match acc {
                    None => Some((t, t)),
                    Some((lo, hi)) => Some((lo.min(t), hi.max(t))),
                })
        };
        for (i, earlier) in holders.iter().enumerate() {
            for later in &holders[i + 1..] {
                // The later holder's first call ended before the earlier holder's last began:
                // both issued, the old one after the new one had.
                if later.2 < earlier.3 {
                    report.ownership_violations.push(format!(
                        "{stream}: field {field}: {} issued with it until a call sent at {:?}, after {} had issued with it by {:?}",
                        earlier.0, earlier.3, later.0, later.2
                    ));
                }
                if let (Some((_, old_last)), Some((new_first, _))) =
                    (times(earlier.0), times(later.0))
                {
                    if old_last >= new_first {
                        report.ownership_violations.push(format!(
                            "{stream}: field {field}: {} issued a value of time {old_last}, at or after the first of {} ({new_first})",
                            earlier.0, later.0
                        ));
                    }
                }
            }
        }
    }
}

fn outages(calls: &[Call], report: &mut Report) {
    let mut by_node: BTreeMap<&str, Vec<&Call>> = BTreeMap::new();
    for c in calls {
        by_node.entry(&c.node).or_default().push(c);
    }
    for (node, mut calls) in by_node {
        calls.sort_by_key(|c| c.start);
        let mut longest = Duration::ZERO;
        let mut since: Option<Duration> = None;
        let mut last_bad_end = Duration::ZERO;
        for c in calls {
            match c.outcome {
                Outcome::Values(_) => {
                    if let Some(s) = since.take() {
                        longest = longest.max(last_bad_end.saturating_sub(s));
                    }
                }
                _ => {
                    since.get_or_insert(c.start);
                    last_bad_end = last_bad_end.max(c.end);
                }
            }
        }
        if let Some(s) = since {
            longest = longest.max(last_bad_end.saturating_sub(s));
        }
        if !longest.is_zero() {
            report.longest_outage.insert(node.to_string(), longest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn call(node: &str, stream: &str, start: u64, end: u64, values: &[u128]) -> Call {
        Call {
            node: node.into(),
            stream: stream.into(),
            start: ms(start),
            end: ms(end),
            outcome: Outcome::Values(values.to_vec()),
        }
    }

    fn worker(v: u128) -> u64 {
        (v >> 12) as u64 & 0x3ff
    }

    /// An ID at time 1 (the unit above the worker and sequence bits).
    fn id(worker: u64, seq: u64) -> u128 {
        id_at(1, worker, seq)
    }

    fn id_at(t: u64, worker: u64, seq: u64) -> u128 {
        u128::from((t << 22) | (worker << 12) | seq)
    }

    fn time(v: u128) -> u64 {
        (v >> 22) as u64
    }

    fn rules() -> HashMap<String, Rules> {
        HashMap::from([
            (
                "strong:k".to_string(),
                Rules {
                    real_time_order: true,
                    ..Rules::default()
                },
            ),
            (
                "snowflake".to_string(),
                Rules {
                    real_time_order: false,
                    owner: Some(worker),
                    time: Some(time),
                },
            ),
        ])
    }

    fn granted() -> Grants {
        HashMap::from([
            (("snowflake".into(), "A".into()), HashSet::from([7])),
            (("snowflake".into(), "B".into()), HashSet::from([7, 8])),
            // A's sno partition 8 does not grant it Snowflake worker 8.
            (("sno".into(), "A".into()), HashSet::from([8])),
        ])
    }

    /// A history that is right: A holds worker 7, stops; B takes it over after; STRONG in
    /// order; unavailable answers in between.
    fn good() -> Vec<Call> {
        vec![
            call("A", "snowflake", 0, 10, &[id(7, 0), id(7, 1)]),
            call("A", "snowflake", 20, 30, &[id(7, 2)]),
            Call {
                outcome: Outcome::Unavailable,
                ..call("A", "snowflake", 40, 45, &[])
            },
            call("B", "snowflake", 50, 60, &[id_at(2, 7, 3)]),
            call("B", "snowflake", 55, 70, &[id_at(2, 8, 0)]),
            call("A", "strong:k", 0, 10, &[1, 2]),
            call("B", "strong:k", 5, 12, &[3]),
            call("B", "strong:k", 20, 25, &[4]),
        ]
    }

    #[test]
    fn a_good_history_is_clean_and_counted() {
        let r = check(&good(), &rules(), &granted());
        assert!(r.clean(), "{:?}", r.problems(10));
        assert_eq!((r.calls, r.values), (8, 9));
        assert_eq!(r.unavailable.get("A"), Some(&1));
        assert_eq!(r.longest_outage.get("A"), Some(&ms(5)));
    }

    #[test]
    fn a_planted_repeat_is_found_across_nodes() {
        let mut calls = good();
        calls.push(call("B", "snowflake", 80, 90, &[id(7, 1)]));
        let r = check(&calls, &rules(), &granted());
        assert_eq!(r.repeats.len(), 1, "{:?}", r.problems(10));
        assert_eq!(r.repeats[0].value, id(7, 1));
        assert_eq!(
            (
                r.repeats[0].first.node.as_str(),
                r.repeats[0].second.node.as_str()
            ),
            ("A", "B")
        );
        // The same value in another stream is not a repeat.
        let mut calls = good();
        calls.push(call("B", "strong:other", 80, 90, &[1]));
        assert!(check(&calls, &rules(), &granted()).clean());
    }

    #[test]
    fn a_planted_order_violation_is_found_and_overlapping_calls_are_not_one() {
        let mut calls = good();
        // Sent after the call that returned 4 ended, yet smaller.
        calls.push(call("A", "strong:k", 30, 40, &[3]));
        let r = check(&calls, &rules(), &granted());
        // 3 is also a repeat; the order violation is reported on its own.
        assert_eq!(r.order_violations.len(), 1, "{:?}", r.problems(10));
        assert!(
            r.order_violations[0].contains("returned 4"),
            "{:?}",
            r.order_violations
        );
        // Overlapping calls may come back in either order.
        let overlapping = vec![
            call("A", "strong:k", 0, 20, &[5]),
            call("B", "strong:k", 10, 30, &[4]),
        ];
        assert!(check(&overlapping, &rules(), &granted()).clean());
    }

    #[test]
    fn an_old_holder_issuing_after_the_new_one_is_found() {
        let mut calls = good();
        // A issues with worker 7 in a call sent after B's call with worker 7 had ended.
        calls.push(call("A", "snowflake", 61, 65, &[id(7, 9)]));
        let r = check(&calls, &rules(), &granted());
        assert_eq!(r.ownership_violations.len(), 1, "{:?}", r.problems(10));
        assert!(r.repeats.is_empty());
        // A call sent before the new holder's first (a request that waited out a pause),
        // answered with a value of a time at or after the new holder's first: found by time.
        let mut calls = good();
        calls.push(call("A", "snowflake", 45, 80, &[id_at(2, 7, 9)]));
        let r = check(&calls, &rules(), &granted());
        assert_eq!(r.ownership_violations.len(), 1, "{:?}", r.problems(10));
        assert!(
            r.ownership_violations[0].contains("of time 2"),
            "{:?}",
            r.ownership_violations
        );
        // A field never granted to the node that used it.
        let calls = vec![call("A", "snowflake", 0, 1, &[id(8, 0)])];
        let r = check(&calls, &rules(), &granted());
        assert_eq!(r.ownership_violations.len(), 1, "{:?}", r.problems(10));
        assert!(r.ownership_violations[0].contains("never granted"));
    }

    #[test]
    fn recorded_calls_are_timed_on_one_clock() {
        let h = History::new();
        let a = h.record("A", "snowflake", || Outcome::Values(vec![1]));
        assert_eq!(a, Outcome::Values(vec![1]));
        h.record("A", "snowflake", || {
            std::thread::sleep(ms(5));
            Outcome::Failed("refused".into())
        });
        let calls = h.calls();
        assert_eq!(calls.len(), 2);
        assert!(calls[1].end >= calls[1].start + ms(5));
        assert!(calls[1].start >= calls[0].end);
        let r = h.check(&HashMap::new(), &HashMap::new());
        assert_eq!(r.failed.get("A"), Some(&1));
    }
}
