//! The layer every call of a [`StoreHandle`](crate::StoreHandle) passes through: a store as
//! the server measures it (every call's latency, its errors, WEAK segment fetches and STRONG
//! increment sizes, through the `metrics` facade: nothing is recorded unless the program
//! installed a recorder, as `floe serve` does), and, for a durable store with ranges, guarded
//! against going backwards ([`crate::guard`]: refusals are counted as errors of kind
//! `DataLoss`).
//!
//! Labels are the store's configured name, the call (`reserve`, `segment`, `raise`,
//! `next_id`, `give_back`) and an error's kind: all bounded by the configuration and this
//! crate, never by a key or a request. The handles are registered once, when the store is wrapped, so a call
//! costs two clock reads and a few atomic adds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use floe_core::sequence::{Key, Segment};
use metrics::{counter, histogram, Counter, Histogram};

use crate::guard::{range_of, Guard};
use crate::{Capabilities, SeqError, Store};

/// The calls a store is measured by.
#[derive(Debug)]
struct Call {
    seconds: Histogram,
    name: &'static str,
}

impl Call {
    fn new(store: &str, name: &'static str) -> Call {
        Call {
            seconds: histogram!(
                "floe_store_call_duration_seconds",
                "store" => store.to_string(),
                "call" => name
            ),
            name,
        }
    }
}

/// A store whose calls are measured (see the module docs).
#[derive(Debug)]
pub struct Measured {
    inner: Arc<dyn Store>,
    store: String,
    reserve: Call,
    segment: Call,
    raise: Call,
    next_id: Call,
    give_back: Call,
    fetches: Counter,
    /// IDs of parked tails the store took back (`floe_weak_given_back_ids_total`).
    given_back: Counter,
    increment_size: Histogram,
    guard: Option<Arc<Guard>>,
}

impl Measured {
    /// `inner`, measured under the store name `store`, and guarded by `guard` when given.
    pub fn new(store: &str, inner: Arc<dyn Store>, guard: Option<Arc<Guard>>) -> Measured {
        Measured {
            guard,
            reserve: Call::new(store, "reserve"),
            segment: Call::new(store, "segment"),
            raise: Call::new(store, "raise"),
            next_id: Call::new(store, "next_id"),
            give_back: Call::new(store, "give_back"),
            given_back: counter!("floe_weak_given_back_ids_total", "store" => store.to_string()),
            fetches: counter!("floe_weak_segment_fetches_total", "store" => store.to_string()),
            increment_size: histogram!("floe_store_increment_size_ids", "store" => store.to_string()),
            store: store.to_string(),
            inner,
        }
    }

    fn error(&self, call: &Call, kind: String) {
        counter!(
            "floe_store_call_errors_total",
            "store" => self.store.clone(),
            "call" => call.name,
            "kind" => kind
        )
        .increment(1);
    }

    /// `call`, a reservation of `key` answered as `range` reads it, through the guard if any.
    async fn reserving<T>(
        &self,
        key: &Key,
        range: impl FnOnce(&T) -> Result<Option<(i64, i64)>, SeqError>,
        call: impl std::future::Future<Output = Result<T, SeqError>>,
    ) -> Result<T, SeqError> {
        match &self.guard {
            Some(g) => g.reserving(key, range, call).await,
            None => call.await,
        }
    }

    /// Times a call until [`Timing::done`], or until it is dropped unfinished (the caller's
    /// timeout cut it short: counted as an error of kind `Cancelled`).
    fn start<'a>(&'a self, call: &'a Call) -> Timing<'a> {
        Timing {
            store: self,
            call,
            started: Instant::now(),
            finished: false,
        }
    }
}

struct Timing<'a> {
    store: &'a Measured,
    call: &'a Call,
    started: Instant,
    finished: bool,
}

impl Timing<'_> {
    fn done<T>(mut self, result: &Result<T, SeqError>) {
        self.finished = true;
        if let Err(e) = result {
            self.store.error(self.call, format!("{:?}", e.kind));
        }
    }
}

impl Drop for Timing<'_> {
    fn drop(&mut self) {
        self.call
            .seconds
            .record(self.started.elapsed().as_secs_f64());
        if !self.finished {
            self.store.error(self.call, "Cancelled".to_string());
        }
    }
}

#[async_trait]
impl Store for Measured {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn reserve(&self, key: &Key, n: u32) -> Result<i64, SeqError> {
        let timing = self.start(&self.reserve);
        let call = self.inner.reserve(key, n);
        let result = self
            .reserving(key, |v| range_of(*v, n).map(Some), call)
            .await;
        timing.done(&result);
        if result.is_ok() {
            self.increment_size.record(f64::from(n));
        }
        result
    }

    async fn raise(&self, key: &Key, floor: i64) -> Result<(), SeqError> {
        let timing = self.start(&self.raise);
        let result = self.inner.raise(key, floor).await;
        timing.done(&result);
        result
    }

    async fn init(&self, bigger_than: &BTreeMap<Key, i64>) -> Result<(), SeqError> {
        let timing = self.start(&self.raise);
        let result = self.inner.init(bigger_than).await;
        timing.done(&result);
        result
    }

    async fn next_id(&self, key: &Key) -> Result<i64, SeqError> {
        let timing = self.start(&self.next_id);
        let call = self.inner.next_id(key);
        let result = self.reserving(key, |v| Ok(Some((*v, *v))), call).await;
        timing.done(&result);
        result
    }

    async fn segment(&self, key: &Key, size: u32) -> Result<Option<Segment>, SeqError> {
        let timing = self.start(&self.segment);
        let call = self.inner.segment(key, size);
        let result = self
            .reserving(key, |s| Ok(s.map(|s: Segment| (s.start, s.end))), call)
            .await;
        timing.done(&result);
        if matches!(result, Ok(Some(_))) {
            self.fetches.increment(1);
        }
        result
    }

    async fn give_back(&self, key: &Key, first: i64, last: i64) -> Result<bool, SeqError> {
        let timing = self.start(&self.give_back);
        let result = self.inner.give_back(key, first, last).await;
        timing.done(&result);
        if matches!(result, Ok(true)) {
            if let Some(g) = &self.guard {
                g.gave_back(key, first);
            }
            // Taken back: the store checked that `first <= last`.
            let ids = crate::tails::ids_in(Segment {
                start: first,
                end: last,
            });
            self.given_back.increment(ids);
        }
        result
    }

    // The operator's calls (the admin API): not on any request's path, passed through.
    async fn value(&self, key: &Key) -> Result<Option<i64>, SeqError> {
        self.inner.value(key).await
    }

    async fn keys(&self, after: Option<&Key>, limit: usize) -> Result<Vec<(Key, i64)>, SeqError> {
        self.inner.keys(after, limit).await
    }

    async fn is_registered(&self, key: &Key) -> Result<bool, SeqError> {
        self.inner.is_registered(key).await
    }

    async fn register(&self, key: &Key) -> Result<bool, SeqError> {
        self.inner.register(key).await
    }

    async fn unregister(&self, key: &Key) -> Result<bool, SeqError> {
        self.inner.unregister(key).await
    }

    async fn registered(&self, after: Option<&Key>, limit: usize) -> Result<Vec<Key>, SeqError> {
        self.inner.registered(after, limit).await
    }

    async fn ping(&self) -> Result<(), SeqError> {
        self.inner.ping().await
    }

    async fn close(&self) {
        self.inner.close().await;
    }
}
