//! The run's table and its verdict.

use crate::audit::{DeadLetters, Tally};
use crate::fleet::Fleet;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// RSS around the sink outage and whether offsets moved during it.
#[derive(Default)]
pub(crate) struct Outage {
    pub(crate) active: bool,
    pub(crate) started: Option<Instant>,
    pub(crate) length: Duration,
    pub(crate) rss_at_start: [u64; 2],
    pub(crate) rss_max: [u64; 2],
    pub(crate) offsets_at_snapshot: Option<BTreeMap<i32, i64>>,
    pub(crate) advanced: Vec<String>,
}

/// What the table says besides the counts.
pub(crate) struct Summary<'a> {
    pub(crate) delivery: &'a str,
    pub(crate) minutes: f64,
    pub(crate) rate: u32,
    pub(crate) partitions: i32,
    /// How long producing took (until every delivery report was in).
    pub(crate) produced_for: Duration,
    /// When lag 0 was reached, from the start of the load.
    pub(crate) lag_at: Duration,
    /// The faults as they happened.
    pub(crate) journal: &'a str,
    /// Produced-but-uncommitted messages summed over the kills and the Kafka cut.
    pub(crate) replay_window: i64,
    /// AppendRows requests the fault proxy saw, and forwarded.
    pub(crate) proxy: (usize, usize),
    /// Logs the broker never acknowledged.
    pub(crate) failed_deliveries: u64,
    /// Malformed logs whose delivery report named another position than the one the topic
    /// holds them at (both positions counted); the dead letters are checked against the topic.
    pub(crate) misreported: usize,
    /// Malformed logs the broker acknowledged that its topic does not hold byte for byte.
    pub(crate) malformed_altered: usize,
    pub(crate) max_rss_mib: u64,
    pub(crate) exactly_once: bool,
}

/// KiB as MiB.
pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The table, ending in PASS or FAIL with every problem (`problems` holds those found during
/// the run; the verdict on the counts is added to it).
pub(crate) fn render(
    run: &Summary<'_>,
    t: &Tally,
    dead: &DeadLetters,
    fleet: &Fleet,
    outage: &Outage,
    problems: &mut Vec<String>,
) -> String {
    let (exactly_once, journal, replay_window) = (run.exactly_once, run.journal, run.replay_window);
    let kills: u32 = fleet.slots.iter().map(|s| s.kills).sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "chaos {}: {:.1} min of load ({:.0} s to deliver) at {} logs/s, {} partitions, 2 publishers; lag 0 at {:.0} s\n\nfaults (seconds into the load):\n{journal}",
        run.delivery,
        run.minutes,
        run.produced_for.as_secs_f64(),
        run.rate,
        run.partitions,
        run.lag_at.as_secs_f64()
    );
    let row = |out: &mut String, k: &str, v: String| {
        let _ = writeln!(out, "  {k:<28} {v}");
    };
    row(
        &mut out,
        "produced",
        format!(
            "{} ({} well-formed, {} malformed)",
            t.produced, t.produced_valid, t.expected_dead_letters
        ),
    );
    row(&mut out, "landed", t.landed.to_string());
    row(&mut out, "distinct landed", t.distinct_landed.to_string());
    row(&mut out, "lost", t.lost.to_string());
    row(
        &mut out,
        "duplicated",
        format!(
            "{} (over {kills} kills and a Kafka cut; produced but uncommitted at those faults: {replay_window})",
            t.duplicated
        ),
    );
    row(
        &mut out,
        "dead-lettered",
        format!(
            "{} (+ {} rows refused by the sink)",
            t.dead_lettered, t.rows_dead_lettered
        ),
    );
    row(
        &mut out,
        "expected dead letters",
        format!(
            "{} at their positions in the topic (missing {}, unexpected {}, unreadable {}; \
             delivery reports naming another position: {}; acknowledged malformed logs the \
             topic does not hold byte for byte: {}; positions the topic serves otherwise than \
             acknowledged, letters following the acknowledgement: {}; positions acknowledged for \
             two logs: {})",
            t.expected_dead_letters,
            t.missing_dead_letters,
            t.unexpected_dead_letters,
            dead.unreadable,
            run.misreported,
            run.malformed_altered,
            t.served_otherwise,
            t.given_twice
        ),
    );
    row(
        &mut out,
        "landed but never produced",
        t.unknown_landed.to_string(),
    );
    for (i, s) in fleet.slots.iter().enumerate() {
        row(
            &mut out,
            &format!("publisher {}", s.name),
            format!(
                "max RSS {:.1} MiB, {} starts ({} restarts), {} SIGKILLs, {} SIGTERMs, {} crashes; outage RSS {:.1} → max {:.1} MiB",
                mib(s.max_rss_kib),
                s.starts,
                s.starts.saturating_sub(1),
                s.kills,
                s.stops.len(),
                s.crashes.len(),
                mib(outage.rss_at_start[i]),
                mib(outage.rss_max[i]),
            ),
        );
    }
    row(
        &mut out,
        "sink outage",
        format!(
            "{:.0} s, committed offsets {}",
            outage.length.as_secs_f64(),
            if outage.advanced.is_empty() {
                "unchanged".to_string()
            } else {
                format!("ADVANCED: {}", outage.advanced.join(", "))
            }
        ),
    );
    row(
        &mut out,
        "gRPC proxy",
        format!(
            "{} AppendRows requests, {} forwarded",
            run.proxy.0, run.proxy.1
        ),
    );

    if t.lost > 0 {
        problems.push(format!("{} rows lost, e.g. {:?}", t.lost, t.lost_sample));
    }
    if t.missing_dead_letters > 0 {
        problems.push(format!(
            "{} malformed logs missing from the DLQ",
            t.missing_dead_letters
        ));
    }
    if t.unexpected_dead_letters > 0 || t.unknown_landed > 0 || dead.unreadable > 0 {
        problems.push("rows or letters nobody produced".into());
    }
    if !t.rejected_valid.is_empty() {
        problems.push(format!(
            "well-formed logs dead-lettered, at {:?}",
            t.rejected_valid
        ));
    }
    if !t.letters_sample.is_empty() {
        problems.push(format!("the letters in question: {:?}", t.letters_sample));
    }
    if exactly_once && t.duplicated > 0 {
        problems.push(format!("{} duplicates in exactly_once mode", t.duplicated));
    }
    if !outage.advanced.is_empty() {
        problems.push("offsets advanced while BigQuery was unreachable".into());
    }
    if run.failed_deliveries > 0 {
        problems.push(format!(
            "{} logs the broker never took",
            run.failed_deliveries
        ));
    }
    for s in &fleet.slots {
        if !s.crashes.is_empty() {
            problems.push(format!(
                "publisher {} exited on its own: {:?}",
                s.name, s.crashes
            ));
        }
        if mib(s.max_rss_kib) > run.max_rss_mib as f64 {
            problems.push(format!(
                "publisher {} RSS {:.1} MiB > {} MiB",
                s.name,
                mib(s.max_rss_kib),
                run.max_rss_mib
            ));
        }
    }
    let _ = writeln!(out);
    if problems.is_empty() {
        let _ = writeln!(out, "PASS");
    } else {
        let _ = writeln!(out, "FAIL:");
        for p in problems.iter() {
            let _ = writeln!(out, "  - {p}");
        }
    }
    out
}
