//! Helpers shared by the registry tests that run against real servers.
#![allow(dead_code)] // each test binary uses a part of them

use std::time::{Duration, Instant};

use floe_core::clock::SystemClock;
use floe_core::snowflake::{Layout, SnowflakeConfig, SnowflakeGenerator};
use floe_registry::lease::Lease;

/// A root path no other test uses: `/{prefix}-{pid}-{nanos}-{n}`.
pub fn unique_root(prefix: &str) -> String {
    format!("/{}", floe_testkit::unique(prefix))
}

/// Waits until `done`, failing the test after `limit`.
pub async fn until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The Leaf generator a lease allows: its worker ID, after its last time, behind its fence.
pub fn generator(lease: &Lease) -> SnowflakeGenerator<SystemClock> {
    SnowflakeConfig::new(Layout::LEAF)
        .worker(u64::from(lease.id))
        .not_before_ms(lease.not_before_ms)
        .fence(lease.fence.clone())
        .build(SystemClock)
        .unwrap()
}

/// A TCP proxy in front of a server, that a test can cut (every connection dropped, new ones
/// closed at once: a network partition) and restore.
pub struct Proxy {
    /// Where clients connect: `127.0.0.1:PORT`.
    pub addr: String,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    links: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to `target` (`host:port`) on a free loopback port.
    pub async fn start(target: &str) -> Proxy {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let links = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (target, accept_cut, accept_links) = (target.to_string(), cut.clone(), links.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if accept_cut.load(Ordering::SeqCst) {
                    continue; // dropped: the client sees its connection closed
                }
                let target = target.clone();
                let link = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                accept_links.lock().unwrap().push(link);
            }
        });
        Proxy {
            addr,
            cut,
            links,
            accept,
        }
    }

    /// Drops every connection, and every new one until [`restore`](Self::restore).
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }
}
