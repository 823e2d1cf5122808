//! The publisher processes: two slots running `observation-publisher run` with the same
//! configuration (one consumer group), each on its own metrics port. Tracks starts, kills,
//! graceful stops, exits nobody asked for, and the largest RSS each slot reached.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One publisher slot.
pub(crate) struct Slot {
    pub(crate) name: &'static str,
    port: u16,
    child: Option<Child>,
    /// Processes started in this slot.
    pub(crate) starts: u32,
    /// SIGKILLs sent.
    pub(crate) kills: u32,
    /// Graceful stops (SIGTERM) and how each ended.
    pub(crate) stops: Vec<Option<i32>>,
    /// Exits nobody asked for: (process number, exit status).
    pub(crate) crashes: Vec<(u32, String)>,
    /// Largest resident set seen, KiB.
    pub(crate) max_rss_kib: u64,
    /// Latest resident set sample, KiB.
    pub(crate) rss_kib: u64,
}

/// Both slots and how to start a publisher.
pub(crate) struct Fleet {
    pub(crate) slots: Vec<Slot>,
    bin: PathBuf,
    config: PathBuf,
    logs: PathBuf,
}

impl Fleet {
    pub(crate) fn new(bin: &Path, config: &Path, logs: &Path, ports: [u16; 2]) -> Self {
        let slot = |name, port| Slot {
            name,
            port,
            child: None,
            starts: 0,
            kills: 0,
            stops: Vec::new(),
            crashes: Vec::new(),
            max_rss_kib: 0,
            rss_kib: 0,
        };
        Fleet {
            slots: vec![slot("A", ports[0]), slot("B", ports[1])],
            bin: bin.to_path_buf(),
            config: config.to_path_buf(),
            logs: logs.to_path_buf(),
        }
    }

    /// Starts slot `i` (no-op if it runs).
    pub(crate) fn start(&mut self, i: usize) -> std::io::Result<()> {
        let s = &mut self.slots[i];
        if s.child.is_some() {
            return Ok(());
        }
        s.starts += 1;
        let log = std::fs::File::create(
            self.logs
                .join(format!("publisher-{}-{}.log", s.name, s.starts)),
        )?;
        let child = Command::new(&self.bin)
            .args(["run", "-c"])
            .arg(&self.config)
            .args(["--set", &format!("server.listen=127.0.0.1:{}", s.port)])
            .env_remove("OBS_PUBLISHER_CONFIG")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        s.child = Some(child);
        Ok(())
    }

    /// SIGKILLs slot `i`.
    pub(crate) fn kill(&mut self, i: usize) {
        let s = &mut self.slots[i];
        if let Some(mut c) = s.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            s.kills += 1;
        }
    }

    /// SIGTERMs slot `i` and waits up to `grace` for it to drain and exit (then SIGKILLs it).
    /// Returns the exit code (`None`: killed or signalled).
    pub(crate) fn stop(&mut self, i: usize, grace: Duration) -> Option<i32> {
        let s = &mut self.slots[i];
        let mut c = s.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let deadline = Instant::now() + grace;
        let code = loop {
            match c.try_wait() {
                Ok(Some(st)) => break st.code(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = c.kill();
                    let _ = c.wait();
                    break None;
                }
            }
        };
        s.stops.push(code);
        code
    }

    /// Samples RSS and notices processes that exited on their own (they are restarted, and the
    /// exit is reported as a crash).
    pub(crate) fn poll(&mut self) {
        for i in 0..self.slots.len() {
            let s = &mut self.slots[i];
            let Some(c) = s.child.as_mut() else { continue };
            match c.try_wait() {
                Ok(Some(status)) => {
                    s.crashes.push((s.starts, status.to_string()));
                    s.child = None;
                    s.rss_kib = 0;
                    eprintln!(
                        "chaos: publisher {} exited on its own ({status}); restarting",
                        s.name
                    );
                    let _ = self.start(i);
                }
                Ok(None) => {
                    let rss = rss_kib(c.id()).unwrap_or(0);
                    s.rss_kib = rss;
                    s.max_rss_kib = s.max_rss_kib.max(rss);
                }
                Err(_) => {}
            }
        }
    }

    /// Whether slot `i` answers `/readyz` with 200.
    pub(crate) fn ready(&self, i: usize) -> bool {
        let s = &self.slots[i];
        s.child.is_some() && http_status(s.port, "/readyz") == Some(200)
    }
}

impl Drop for Fleet {
    /// No publisher outlives the harness, whatever way it ends.
    fn drop(&mut self) {
        for s in &mut self.slots {
            if let Some(mut c) = s.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// VmRSS of a process, KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Status code of a plain HTTP/1.0 GET on loopback.
fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}
