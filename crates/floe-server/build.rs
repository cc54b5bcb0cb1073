//! Compiles proto/runtime.proto with protox (no protoc needed) and tonic-prost-build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/runtime.proto");
    let files = protox::compile(["proto/runtime.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(files)?;
    Ok(())
}
