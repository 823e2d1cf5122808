//! Generates the prost types for `proto/caraml/upi/v1/*.proto` (needs `protoc`, or `$PROTOC`).
fn main() -> std::io::Result<()> {
    println!("cargo:rerun-if-changed=proto");
    prost_build::Config::new().compile_protos(
        &[
            "proto/caraml/upi/v1/prediction_log.proto",
            "proto/caraml/upi/v1/table.proto",
        ],
        &["proto"],
    )
}
