//! Compiles Layotto's proto/runtime.proto and floe's proto/floe/v1/floe.proto with protox (no
//! protoc needed) and tonic-prost-build, and keeps their descriptor set for server reflection.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(["runtime.proto", "floe/v1/floe.proto"], ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("descriptors.bin"),
        prost::Message::encode_to_vec(&files),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // prost's codec, with a malformed message answered INVALID_ARGUMENT (src/grpc/codec.rs).
        .codec_path("crate::grpc::codec::MessageCodec")
        .compile_fds(files)?;
    Ok(())
}
