//! Compiles floe's proto/floe/v1/floe.proto (kept in floe-server, the one copy) with protox
//! (no protoc needed) and tonic-prost-build: the client side only.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = "../floe-server/proto";
    println!("cargo:rerun-if-changed={root}");
    let files = protox::compile(["floe/v1/floe.proto"], [root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(files)?;
    Ok(())
}
