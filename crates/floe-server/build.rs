//! Compiles proto/runtime.proto with protox (no protoc needed) and tonic-prost-build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/runtime.proto");
    let files = protox::compile(["proto/runtime.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // prost's codec, with a malformed message answered INVALID_ARGUMENT (src/codec.rs).
        .codec_path("crate::codec::MessageCodec")
        .compile_fds(files)?;
    Ok(())
}
