//! The binary starts on its image base: every shared library it needs is in distroless
//! cc-debian12 (libc6, libgcc-s1, libssl3 and the loader; no zlib, no libstdc++ needed). A new
//! dynamic dependency (say, a crate feature that links the system zlib or libcurl) fails here
//! instead of crash-looping every Deployment with exit 127.

use std::process::Command;

/// What `distroless/cc-debian12` provides (see deploy/Dockerfile and scripts/image).
const ON_THE_BASE: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libgcc_s.so.1",
    "libssl.so.3",
    "libcrypto.so.3",
    "ld-linux-x86-64.so.2",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
];

/// The `NEEDED` entries of an ELF file's dynamic section, as `readelf -d` prints them.
fn needed(path: &str) -> Vec<String> {
    let out = Command::new("readelf")
        .args(["-d", "-W", path])
        .output()
        .expect("readelf (binutils, installed with gcc) runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| Some(l.split_once('[')?.1.split_once(']')?.0.to_string()))
        .collect()
}

#[test]
fn every_shared_library_the_binary_needs_is_on_the_image_base() {
    let libs = needed(env!("CARGO_BIN_EXE_observation-publisher"));
    assert!(
        libs.iter().any(|l| l == "libc.so.6"),
        "the dynamic section was read: {libs:?}"
    );
    let missing: Vec<_> = libs
        .iter()
        .filter(|l| !ON_THE_BASE.contains(&l.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the binary needs {missing:?}, which distroless cc-debian12 does not have (all: {libs:?})"
    );
}
