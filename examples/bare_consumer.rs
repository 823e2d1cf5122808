//! A bare rdkafka consumer: the baseline of `scripts/bench-e2e`. Joins a fresh group, reads
//! `COUNT` messages from `TOPIC` (touching each payload, nothing else) and prints its rate
//! (from the first message, so the group join is excluded), CPU time per message and peak RSS.
//! With `BROKER_PID` set (the broker on this machine), also the share of a core the broker used
//! over the same span (`broker_cpu_share`; 1.0 is one core busy all the time).
//!   bare_consumer BROKERS TOPIC GROUP COUNT [SPIN_NS]
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::Message;
use std::time::{Duration, Instant};

/// CPU seconds (user + system) of a process so far: `self` or a pid.
fn cpu_seconds_of(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn cpu_seconds() -> f64 {
    cpu_seconds_of("self")
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (brokers, topic, group, count): (&str, &str, &str, u64) =
        (&a[1], &a[2], &a[3], a[4].parse().expect("COUNT"));
    // Optional: busy-work per message, in nanoseconds (to compare with a consumer that works).
    let spin = Duration::from_nanos(a.get(5).and_then(|s| s.parse().ok()).unwrap_or(0));
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("session.timeout.ms", "6000")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    c.subscribe(&[topic]).expect("subscribe");
    let mut n = 0u64;
    let mut bytes = 0u64;
    let broker = std::env::var("BROKER_PID").ok();
    let broker_cpu = || broker.as_deref().map_or(0.0, cpu_seconds_of);
    let mut first: Option<(Instant, f64, f64)> = None;
    while n < count {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
            if first.is_none() {
                first = Some((Instant::now(), cpu_seconds(), broker_cpu()));
            }
            bytes += m.payload().map_or(0, |p| p.len() as u64);
            n += 1;
            if !spin.is_zero() {
                let t = Instant::now();
                while t.elapsed() < spin {
                    std::hint::spin_loop();
                }
            }
        }
    }
    let (t0, c0, b0) = first.expect("messages");
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - c0;
    let broker_share = (broker_cpu() - b0) / secs;
    println!(
        "{{\"messages\":{n},\"bytes\":{bytes},\"seconds\":{secs:.3},\"msgs_per_second\":{:.0},\"cpu_us_per_message\":{:.3},\"peak_rss_mib\":{:.1},\"cpu_share\":{:.3},\"broker_cpu_share\":{broker_share:.3}}}",
        n as f64 / secs,
        cpu * 1e6 / n as f64,
        peak_rss_kib() as f64 / 1024.0,
        cpu / secs
    );
}
