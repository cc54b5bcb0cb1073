//! Compiles the subset of etcd's v3 API that floe uses (proto/etcd/api/...) with protox (no
//! protoc needed) and tonic-prost-build: message types and gRPC clients, no servers.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(["etcd/api/etcdserverpb/rpc.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(files)?;
    Ok(())
}
