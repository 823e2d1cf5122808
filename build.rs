//! Generates the prost types for `proto/caraml/upi/v1/*.proto` and `proto/arize/schema.proto`
//! (the Arize sink's schema header). The files are parsed by `protox`
//! (a protobuf compiler written in Rust), so building needs no `protoc` binary.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(
        [
            "proto/caraml/upi/v1/prediction_log.proto",
            "proto/caraml/upi/v1/table.proto",
            "proto/arize/schema.proto",
        ],
        ["proto"],
    )?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
