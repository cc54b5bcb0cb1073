//! The HTTP routes' own cost, in-process: floe-server's HTTP service (its host guard, the
//! common requests answered in front of the router, and the router's handlers)
//! answering one request, without sockets, beside `/healthz` on the same router. scripts/load.sh
//! measures the same routes over loopback, where the connection's cost comes in too.
//!
//!   cargo bench -p floe-bench --bench http

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use criterion::{criterion_group, criterion_main, Criterion};
use floe_sequencer::stores::memory::MemoryStore;
use floe_sequencer::{Sequencer, ServeOptions, StoreHandle};
use floe_server::App;
use tower::ServiceExt;

/// The HTTP service of a server with one memory store, `default`.
fn router() -> floe_server::http::fast::Http {
    let mut sequencer = Sequencer::new();
    sequencer.add(StoreHandle::new(
        "default",
        Arc::new(MemoryStore::new()),
        ServeOptions::default(),
    ));
    let app = Arc::new(App::sequencer_only(Arc::new(sequencer), Vec::new()));
    floe_server::http::service(app, None, false)
}

const PATHS: [(&str, &str); 4] = [
    ("healthz", "/healthz"),
    ("sequencer_weak", "/v1/sequencer/default/k"),
    ("sequencer_weak_count_1", "/v1/sequencer/default/k?count=1"),
    ("leaf_segment", "/api/segment/get/k"),
];

/// `n` answers of `router` to `path`, one after another.
async fn answer(router: floe_server::http::fast::Http, path: &'static str, n: u64) {
    for _ in 0..n {
        let request = Request::get(path)
            .header("host", "127.0.0.1:34903")
            .body(Body::empty())
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        assert!(response.status().is_success(), "{path}");
    }
}

fn routes(c: &mut Criterion) {
    // One task on one thread; then two tasks on a runtime of two threads, as a server's
    // workers, on one key: the time per answer of all of them.
    for threads in [1usize, 2] {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .unwrap();
        let router = router();
        let mut g = c.benchmark_group(format!("http_route_{threads}_threads"));
        for (name, path) in PATHS {
            g.bench_function(name, |b| {
                b.iter_custom(|iters| {
                    let per_task = iters.div_ceil(threads as u64);
                    rt.block_on(async {
                        let start = std::time::Instant::now();
                        let tasks: Vec<_> = (0..threads)
                            .map(|_| tokio::spawn(answer(router.clone(), path, per_task)))
                            .collect();
                        for t in tasks {
                            t.await.unwrap();
                        }
                        start.elapsed()
                    })
                });
            });
        }
        g.finish();
    }
}

criterion_group!(benches, routes);
criterion_main!(benches);
