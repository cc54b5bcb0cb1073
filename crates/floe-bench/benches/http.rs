//! The HTTP routes' own cost, in-process: floe-server's router (its host guard and handlers)
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

fn routes(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut sequencer = Sequencer::new();
    sequencer.add(StoreHandle::new(
        "default",
        Arc::new(MemoryStore::new()),
        ServeOptions::default(),
    ));
    let app = Arc::new(App::sequencer_only(Arc::new(sequencer), Vec::new()));
    let router = floe_server::http::router(app);
    let mut g = c.benchmark_group("http_route");
    for (name, path) in [
        ("healthz", "/healthz"),
        ("sequencer_weak", "/v1/sequencer/default/k"),
        ("sequencer_weak_count_1", "/v1/sequencer/default/k?count=1"),
        ("leaf_segment", "/api/segment/get/k"),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let request = Request::get(path)
                    .header("host", "127.0.0.1:34903")
                    .body(Body::empty())
                    .unwrap();
                let response = rt.block_on(router.clone().oneshot(request)).unwrap();
                assert!(response.status().is_success(), "{path}");
                response
            });
        });
    }
    g.finish();
}

criterion_group!(benches, routes);
criterion_main!(benches);
