//! Reads FILE to the end with `read(2)` into a buffer of CAP bytes that starts OFFSET bytes past
//! a page boundary, and prints the bytes read. Run it under `/usr/bin/time` with the file in the
//! page cache: the system time is the kernel's copy into that buffer (docs/performance.md, "The
//! read buffer's alignment"; `src/readbuf.rs` is why it matters).
//!
//! ```sh
//! cargo build --release --example read_alignment
//! for o in 16 0 64 2048; do /usr/bin/time -f "offset $o: %S s system" \
//!   target/release/examples/read_alignment FILE 1048576 $o; done
//! ```

use std::io::Read;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, cap, offset] = &args[..] else {
        eprintln!("usage: read_alignment FILE CAP OFFSET");
        std::process::exit(2);
    };
    let cap: usize = cap.parse().expect("CAP: a number of bytes");
    let offset: usize = offset.parse().expect("OFFSET: a number of bytes");
    let mut buf = vec![0u8; cap + offset + 4096];
    let page_start = (4096 - buf.as_ptr().addr() % 4096) % 4096;
    let start = page_start + offset;
    let mut f = std::fs::File::open(path)?;
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf[start..start + cap])?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    println!("{total}");
    Ok(())
}
