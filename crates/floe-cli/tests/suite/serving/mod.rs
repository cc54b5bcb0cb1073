//! `floe serve` as a child process ([`floe_testkit::process::Floe`]): started here with the
//! suite's [`cmd`](crate::common::cmd), talked to with floe-testkit's plain-socket clients
//! and with gRPC health.
#![allow(dead_code)] // each test binary uses a part of them

use std::time::Duration;

pub use floe_testkit::http::{
    closed_within, grpc_headers_without_body, http, next_strong, H2_PREFACE,
};
pub use floe_testkit::process::Floe as Serve;

/// Starts `floe serve ARGS --grpc 127.0.0.1:0 --http 127.0.0.1:0` and waits for its line.
pub fn start(args: &[&str]) -> Serve {
    start_on("127.0.0.1:0", "127.0.0.1:0", args)
}

/// Starts `floe serve --grpc GRPC --http HTTP ARGS` and waits for its line, at most
/// [`START_WITHIN`](floe_testkit::process::START_WITHIN) (then kills it and panics with its
/// standard error).
pub fn start_on(grpc: &str, http: &str, args: &[&str]) -> Serve {
    start_with_env(grpc, http, args, &[])
}

/// [`start_on`] with environment variables set for the server.
pub fn start_with_env(grpc: &str, http: &str, args: &[&str], env: &[(&str, &str)]) -> Serve {
    // A working directory of its own (crate::common::cmd): a server given no --state-dir
    // keeps `.floe` there, never beside another test's.
    let mut command = crate::common::cmd();
    command
        .arg("serve")
        .args(["--grpc", grpc, "--http", http])
        .args(args)
        .envs(env.iter().copied());
    Serve::start(command)
}

/// gRPC health's SERVING and NOT_SERVING.
pub const SERVING: i32 = 1;
pub const NOT_SERVING: i32 = 2;

/// The gRPC health status of `service` on `server`.
pub fn health(server: &Serve, service: &str) -> i32 {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
            .unwrap()
            .connect()
            .await
            .unwrap();
        tonic_health::pb::health_client::HealthClient::new(channel)
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status
    })
}

/// Waits (up to 10 s) until the gRPC health of `service` is `want`: the health service follows
/// readiness on a watch of its own, a moment after `/readyz` does. Panics with the last state.
pub fn wait_health(server: &Serve, service: &str, want: i32) {
    let started = std::time::Instant::now();
    loop {
        let got = health(server, service);
        if got == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "gRPC health of {service:?}: {got}, not {want}, after 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
