//! Series registered at 0 when the recorder is installed or the sinks are built, the two
//! memory gauges (resident memory, the formula's bound) and readiness. An alert rule's `increase()` sees a
//! counter's first event only when the series existed before it; a series born at 1 reads as no
//! increase. Every counter an alert rule in `deploy/alerts/` uses is registered here.

use super::names;

/// Registers, at 0, the counters alert rules use whose labels are known at start-up.
pub fn register_zero_series() {
    for name in [
        names::MESSAGES_CONSUMED,
        names::COMMITS,
        names::COMMIT_FAILURES,
    ] {
        ::metrics::counter!(name).absolute(0);
    }
    for reason in ["unread", "unparseable"] {
        ::metrics::counter!(names::CHECKPOINT_PROBLEMS, names::REASON => reason).absolute(0);
    }
    // Not ready until the first scrape reads the readiness conditions.
    ready(false);
}

/// Sets the readiness gauge (called before each render, from what `/readyz` would answer).
pub fn ready(ready: bool) {
    ::metrics::gauge!(names::READY).set(if ready { 1.0 } else { 0.0 });
}

/// Registers, at 0, the series alert rules use whose labels are known once the sinks are
/// built: rows written per sink, sink errors per sink, `error_codes` (every code the sink seam
/// classifies errors into) and retryability, and dead letters of every decode reason. (A row a
/// sink refuses carries a reason code of that sink's own, born with its first letter.)
pub fn register_sink_series(sinks: &[&'static str], error_codes: &[&'static str]) {
    for &sink in sinks {
        ::metrics::counter!(names::ROWS_WRITTEN, names::SINK => sink).absolute(0);
        for &code in error_codes {
            for retryable in ["true", "false"] {
                ::metrics::counter!(names::SINK_ERRORS, names::SINK => sink,
                    names::ERROR_CODE => code, names::RETRYABLE => retryable)
                .absolute(0);
            }
        }
    }
    for kind in crate::decode::ErrorKind::ALL {
        ::metrics::counter!(names::DEAD_LETTERS, names::KIND => "decode", names::REASON => kind.code())
            .absolute(0);
    }
}

/// Registers, at 0, failed dead-letter writes for every `(error code, retryable)` class the
/// pipeline counts them by.
pub fn register_dead_letter_series(classes: &[(&'static str, &'static str)]) {
    for &(code, retryable) in classes {
        ::metrics::counter!(names::DEAD_LETTER_WRITE_ERRORS, names::ERROR_CODE => code,
            names::RETRYABLE => retryable)
        .absolute(0);
    }
}

/// Registers the MaxCompute mover's series when the sink starts: moves past `move_timeout` at 0
/// (the alert's `increase()` sees the first), no move running, and the timeout itself, which
/// the alert compares the running move's age with.
pub fn maxcompute_moves(move_timeout: std::time::Duration) {
    use names::maxcompute;
    ::metrics::counter!(maxcompute::MOVES_OVERDUE_TOTAL).absolute(0);
    ::metrics::gauge!(maxcompute::MOVE_AGE_SECONDS).set(0.0);
    ::metrics::gauge!(maxcompute::MOVE_TIMEOUT_SECONDS).set(move_timeout.as_secs_f64());
}

/// Sets the memory formula's bound, once the configuration is known.
pub fn memory_bound(bytes: u64) {
    ::metrics::gauge!(names::MEMORY_BOUND).set(bytes as f64);
}

/// Sets the resident memory gauge to what the process holds now (called before each render).
pub fn resident_memory() {
    if let Some(rss) = resident_bytes() {
        ::metrics::gauge!(names::RESIDENT_MEMORY).set(rss as f64);
    }
}

/// Resident memory of this process in bytes (`VmRSS` of `/proc/self/status`, in kB whatever
/// the page size), or `None` where there is no procfs.
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alerting_counters_render_at_zero_before_any_event() {
        let recorder = super::super::prometheus_builder().unwrap().build_recorder();
        let handle = recorder.handle();
        ::metrics::with_local_recorder(&recorder, || {
            register_zero_series();
            register_dead_letter_series(&[("needs_operator", "false"), ("transient", "true")]);
        });
        let text = handle.render();
        for line in [
            format!("{} 0", names::COMMIT_FAILURES),
            format!("{} 0", names::MESSAGES_CONSUMED),
            format!(
                r#"{}{{reason="unparseable"}} 0"#,
                names::CHECKPOINT_PROBLEMS
            ),
            format!(r#"{}{{reason="unread"}} 0"#, names::CHECKPOINT_PROBLEMS),
            format!(
                r#"{}{{error_code="needs_operator",retryable="false"}} 0"#,
                names::DEAD_LETTER_WRITE_ERRORS
            ),
            format!(
                r#"{}{{error_code="transient",retryable="true"}} 0"#,
                names::DEAD_LETTER_WRITE_ERRORS
            ),
            format!("{} 0", names::READY),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }

    #[test]
    fn sink_series_render_at_zero_for_every_sink_code_and_decode_reason() {
        let recorder = super::super::prometheus_builder().unwrap().build_recorder();
        let handle = recorder.handle();
        ::metrics::with_local_recorder(&recorder, || {
            register_sink_series(&["bigquery", "maxcompute"], &["unavailable", "rejected"]);
            maxcompute_moves(std::time::Duration::from_secs(600));
            memory_bound(123 << 20);
            resident_memory();
        });
        let text = handle.render();
        let zero = |prefix: String| {
            text.lines()
                .filter(|l| l.starts_with(&prefix) && l.ends_with(" 0"))
                .count()
        };
        assert_eq!(zero(format!("{}{{", names::ROWS_WRITTEN)), 2, "{text}");
        assert_eq!(
            zero(format!("{}{{", names::SINK_ERRORS)),
            2 * 2 * 2,
            "{text}"
        );
        assert_eq!(
            zero(format!("{}{{kind=\"decode\"", names::DEAD_LETTERS)),
            crate::decode::ErrorKind::ALL.len(),
            "{text}"
        );
        for line in [
            format!("{} 0", names::maxcompute::MOVES_OVERDUE_TOTAL),
            format!("{} 0", names::maxcompute::MOVE_AGE_SECONDS),
            format!("{} 600", names::maxcompute::MOVE_TIMEOUT_SECONDS),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        let line = format!("{} {}", names::MEMORY_BOUND, 123u64 << 20);
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        let rss: f64 = text
            .lines()
            .find_map(|l| {
                l.strip_prefix(names::RESIDENT_MEMORY)?
                    .strip_prefix(' ')?
                    .parse()
                    .ok()
            })
            .expect("resident memory rendered");
        let hwm = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(rss > (1u64 << 20) as f64, "{rss}");
        assert!(hwm.contains("VmRSS"));
    }
}
