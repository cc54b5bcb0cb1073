//! floe-client against a real floe server, assembled from its configuration as `floe serve`
//! does (floe-server in-process, on 127.0.0.1:0): many tasks and threads drawing from one
//! client and from two, WEAK IDs increasing per thread, segments fetched ahead, a server
//! stopped mid-way (errors, then IDs again after a restart, never one twice), Snowflake
//! buffers, STRONG passed through, TLS with a bearer token, and bad input.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe_client::{CacheOptions, Client, Code, Error, Increment};
use floe_server::ServerConfig;

/// A server on this runtime until [`Node::stop`] (or the end of the test's runtime).
struct Node {
    grpc: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

/// An embedded store `main` (durable, in `state`), Snowflake on, gRPC on `grpc`.
fn config(state: &Path, grpc: &str) -> ServerConfig {
    let mut c = ServerConfig {
        state_dir: state.to_path_buf(),
        ..ServerConfig::default()
    };
    c.listen.grpc = grpc.into();
    c.listen.http = "off".into();
    c.stores.insert("main".into(), "embedded".into());
    c
}

impl Node {
    async fn start(config: &ServerConfig) -> Node {
        let clock: floe_server::ServerClock = Arc::new(floe_core::clock::SystemClock);
        let now_ms = clock.now_nanos() / 1_000_000;
        let server = floe_server::Server::start(config.check(now_ms).unwrap(), clock)
            .await
            .unwrap();
        let grpc = server.grpc_addr().unwrap().to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        Node {
            grpc,
            stop: Some(stop),
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap().unwrap();
    }
}

async fn started() -> (Node, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&config(dir.path(), "127.0.0.1:0")).await;
    (node, dir)
}

/// Waits (polling) until `done`, at most 30 s.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not after 30 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn no_duplicates(ids: impl IntoIterator<Item = i64>) -> usize {
    let mut seen = HashSet::new();
    for id in ids {
        assert!(seen.insert(id), "{id} handed out twice");
    }
    seen.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_and_threads_of_two_clients_never_share_an_id() {
    let (node, _dir) = started().await;
    let options = CacheOptions::segment(1_000);
    let a = Client::connect(node.url()).await.unwrap();
    let b = Client::connect(node.url()).await.unwrap();
    let seq_a = a.weak_sequence("main", "orders", options).unwrap();
    let seq_b = b.weak_sequence("main", "orders", options).unwrap();
    // 8 tasks on the runtime (4 a client), awaiting next().
    let mut tasks = Vec::new();
    for t in 0..8 {
        let seq = if t % 2 == 0 { &seq_a } else { &seq_b }.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::with_capacity(5_000);
            for _ in 0..5_000 {
                mine.push(seq.next().await.unwrap());
            }
            mine
        }));
    }
    // 4 threads of their own (2 a client), try_next() first and next() when it has nothing.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let seq = if t % 2 == 0 { &seq_a } else { &seq_b }.clone();
            let handle = tokio::runtime::Handle::current();
            std::thread::spawn(move || {
                let mut mine = Vec::with_capacity(5_000);
                while mine.len() < 5_000 {
                    let id = match seq.try_next() {
                        Some(id) => id,
                        None => handle.block_on(seq.next()).unwrap(),
                    };
                    mine.push(id);
                }
                mine
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    for t in threads {
        let mine = t.join().unwrap();
        // A thread's IDs increase: its blocks come from the cache's segments in order.
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "a thread's IDs went back"
        );
        all.extend(mine);
    }
    assert_eq!(no_duplicates(all.iter().copied()), 12 * 5_000);
    assert!(all.iter().all(|&id| id > 0));
    // Each client fetched whole segments, each of them once.
    for seq in [&seq_a, &seq_b] {
        let stats = seq.stats();
        assert!(stats.fetches >= 30, "{stats:?}");
        assert_eq!(stats.failures, 0, "{stats:?}");
    }
    node.stop().await;
}

#[tokio::test(flavor = "current_thread")]
async fn weak_ids_increase_per_client_and_segments_come_ahead() {
    let (node, _dir) = started().await;
    let a = Client::connect(node.url()).await.unwrap();
    let b = Client::connect(node.url()).await.unwrap();
    let seq_a = a
        .weak_sequence("main", "trend", CacheOptions::segment(1_000))
        .unwrap();
    let seq_b = b
        .weak_sequence("main", "trend", CacheOptions::segment(1_000))
        .unwrap();

    // The first call waits for the first segment; 10 % of it in, the next one is fetched.
    let mut got_a = vec![seq_a.next().await.unwrap()];
    while got_a.len() < 100 {
        got_a.push(seq_a.next().await.unwrap());
    }
    until("the second segment", || seq_a.stats().next_ready).await;
    assert_eq!(seq_a.stats().fetches, 2);
    // Five segments more, each fetched ahead while the one before was in use: no call waits.
    for segment in 0..5 {
        while got_a.len() < 1_000 * (segment + 1) + 100 {
            got_a.push(seq_a.try_next().expect("an ID cached ahead"));
        }
        until("the segment after", || seq_a.stats().next_ready).await;
    }
    let stats = seq_a.stats();
    assert_eq!(stats.waits, 1, "{stats:?}");
    assert_eq!(stats.fetches, 7, "{stats:?}");
    // The last segment's 100 IDs came in blocks of 31 (a 32nd of the segment): 4 blocks
    // taken from it; the next segment waits whole.
    assert_eq!(stats.buffered, (1_000 - 4 * 31) + 1_000, "{stats:?}");
    // One thread: every ID above the one before; segments of 1,000 consecutive IDs.
    assert!(got_a.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(got_a[999] - got_a[0], 999);

    // A second client of the same key gets segments of its own, above the first's so far.
    let first_b = seq_b.next().await.unwrap();
    let top_a = *got_a.last().unwrap();
    assert!(first_b > top_a, "{first_b} after {top_a}");
    let mut got_b = vec![first_b];
    while got_b.len() < 3_000 {
        got_b.push(seq_b.next().await.unwrap());
    }
    assert!(got_b.windows(2).all(|w| w[0] < w[1]));
    no_duplicates(got_a.iter().chain(&got_b).copied());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stopped_mid_way_gives_errors_then_ids_again_never_twice() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(&config(dir.path(), "127.0.0.1:0")).await;
    let addr = node.grpc.clone();
    let client = Client::builder(node.url())
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let options = CacheOptions {
        segment: 500,
        block: Some(10),
        refill_at_percent: 10,
    };
    let seq = client.weak_sequence("main", "outage", options).unwrap();
    let snow = client.snowflake_buffer("", options).unwrap();
    let mut ids = Vec::new();
    let mut snowflakes = Vec::new();
    for _ in 0..100 {
        ids.push(seq.next().await.unwrap());
        snowflakes.push(snow.next().await.unwrap());
    }
    until("the next segments", || {
        seq.stats().next_ready && snow.stats().next_ready
    })
    .await;

    node.stop().await;
    // What was cached is still handed out (the rest of this segment and the next one), then
    // each call is an error: typed, retryable, no panic, no ID.
    let cached = seq.stats().buffered;
    assert_eq!(cached, 400 + 500);
    let mut errors = 0;
    for _ in 0..cached + 20 {
        match seq.next().await {
            Ok(id) => ids.push(id),
            Err(e) => {
                assert!(e.is_retryable(), "{e:?}");
                errors += 1;
            }
        }
        match snow.next().await {
            Ok(id) => snowflakes.push(id),
            Err(e) => assert!(e.is_retryable(), "{e}"),
        }
    }
    assert_eq!(errors, 20);
    assert_eq!(ids.len(), 1_000);
    assert_eq!(seq.try_next(), None);
    let e = client
        .next_sequence("main", "outage", Increment::Weak, 1)
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e}");

    // The server again on the same address and state: the same client goes on, with IDs
    // above every ID before (the embedded store is durable), none twice.
    let node = Node::start(&config(dir.path(), &addr)).await;
    let mut after = Vec::new();
    for _ in 0..1_200 {
        after.push(seq.next().await.unwrap());
        snowflakes.push(snow.next().await.unwrap());
    }
    let top = *ids.iter().max().unwrap();
    assert!(after.iter().all(|&id| id > top));
    ids.extend(after);
    no_duplicates(ids.iter().copied());
    let distinct: HashSet<u64> = snowflakes.iter().copied().collect();
    assert_eq!(distinct.len(), snowflakes.len());
    assert!(seq.stats().failures >= 1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snowflake_buffers_of_two_clients_never_share_an_id() {
    let (node, _dir) = started().await;
    let options = CacheOptions::segment(5_000);
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let client = Client::connect(node.url()).await.unwrap();
        let buffer = client.snowflake_buffer("", options).unwrap();
        for _ in 0..3 {
            let buffer = buffer.clone();
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::with_capacity(20_000);
                for _ in 0..20_000 {
                    mine.push(buffer.next().await.unwrap());
                }
                mine
            }));
        }
    }
    let mut all = HashSet::new();
    for t in tasks {
        for id in t.await.unwrap() {
            assert!(all.insert(id), "{id} handed out twice");
        }
    }
    assert_eq!(all.len(), 6 * 20_000);
    // Uncached, one call: ascending, the number asked for.
    let client = Client::connect(node.url()).await.unwrap();
    let ids = client.snowflakes("", 1_000).await.unwrap();
    assert_eq!(ids.len(), 1_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert!(ids.iter().all(|id| !all.contains(id)));
    node.stop().await;
}

#[tokio::test(flavor = "current_thread")]
async fn strong_goes_to_the_server_every_call() {
    let (node, _dir) = started().await;
    let client = Client::connect(node.url()).await.unwrap();
    let first = client.next_strong("main", "invoices").await.unwrap();
    let run = client
        .next_sequence("main", "invoices", Increment::Strong, 5)
        .await
        .unwrap();
    assert!(run[0] > first);
    assert_eq!(run, (run[0]..run[0] + 5).collect::<Vec<_>>());
    // Another client's next STRONG ID is above every one before.
    let other = Client::connect(node.url()).await.unwrap();
    let next = other.next_strong("main", "invoices").await.unwrap();
    assert!(next > run[4]);
    node.stop().await;
}

#[tokio::test(flavor = "current_thread")]
async fn bad_input_is_a_clear_error() {
    let (node, _dir) = started().await;
    let client = Client::connect(node.url()).await.unwrap();
    let invalid = |r: Result<_, Error>, what: &str| match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(what), "{m}"),
        other => panic!("{what}: {other:?}"),
    };
    invalid(
        client
            .weak_sequence("main", "", CacheOptions::default())
            .map(drop),
        "key: ",
    );
    invalid(
        client
            .weak_sequence("main", "k", CacheOptions::segment(0))
            .map(drop),
        "segment: expected 1 to 1000000, found 0",
    );
    invalid(
        client
            .snowflake_buffer("", CacheOptions::segment(u32::MAX))
            .map(drop),
        "segment: expected 1 to 1000000",
    );
    invalid(
        client
            .next_sequence("main", "k", Increment::Weak, 0)
            .await
            .map(drop),
        "count: expected 1 to 10000 (the sequencer's largest batch), found 0",
    );
    invalid(client.snowflakes("", 1_000_001).await.map(drop), "count: ");
    invalid(
        client
            .binary_ids(floe_client::Kind::Snowflake, 1)
            .await
            .map(drop),
        "kind: ",
    );

    invalid(
        client
            .weak_sequence("main", "k", CacheOptions::segment(10_001))
            .map(drop),
        "segment: expected 1 to 10000 for a sequence",
    );
    invalid(
        client
            .next_sequence("main", "k", Increment::Strong, 10_001)
            .await
            .map(drop),
        "count: expected 1 to 10000",
    );

    // The server's refusals, typed: a segment above its max_batch (10,000), an unknown store
    // and layout. Nothing cached, nothing handed out.
    let big = client
        .snowflake_buffer("", CacheOptions::segment(20_000))
        .unwrap();
    let e = big.next().await.unwrap_err();
    assert_eq!(e.code(), Some(Code::InvalidArgument), "{e}");
    assert_eq!(big.try_next(), None);
    let e = client
        .weak_sequence("nope", "k", CacheOptions::default())
        .unwrap()
        .next()
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(Code::InvalidArgument), "{e}");
    let e = client.snowflakes("nope", 1).await.unwrap_err();
    assert!(e.code().is_some(), "{e}");

    // Nothing listening.
    let port = floe_testkit::free_port();
    let e = Client::connect(format!("127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
    node.stop().await;
}

#[tokio::test(flavor = "current_thread")]
async fn tls_and_a_bearer_token() {
    let dir = tempfile::tempdir().unwrap();
    let certs = floe_testkit::test_ca(dir.path());
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "# ops\nthe-token\n").unwrap();
    let mut c = config(&dir.path().join("state"), "127.0.0.1:0");
    c.tls.cert = Some(certs.cert.clone());
    c.tls.key = Some(certs.key.clone());
    c.auth.token_file = Some(tokens);
    let node = Node::start(&c).await;
    let url = format!("https://{}", node.grpc);
    let ca = std::fs::read(&certs.ca).unwrap();

    let client = Client::builder(&url)
        .ca_certificate_pem(ca.clone())
        .bearer_token("the-token")
        .connect()
        .await
        .unwrap();
    let seq = client
        .weak_sequence("main", "secure", CacheOptions::segment(100))
        .unwrap();
    let ids: Vec<i64> = {
        let mut v = Vec::new();
        for _ in 0..250 {
            v.push(seq.next().await.unwrap());
        }
        v
    };
    assert!(ids.windows(2).all(|w| w[0] < w[1]));

    // Without the token: UNAUTHENTICATED, from the server.
    let anonymous = Client::builder(&url)
        .ca_certificate_pem(ca)
        .connect()
        .await
        .unwrap();
    let e = anonymous.next_strong("main", "secure").await.unwrap_err();
    assert_eq!(e.code(), Some(Code::Unauthenticated), "{e}");
    // Without the CA: the certificate is not trusted, the server never reached.
    let e = Client::builder(&url)
        .bearer_token("the-token")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
    node.stop().await;
}
