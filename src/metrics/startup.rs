//! Series registered at 0 when the recorder is installed. An alert rule's `increase()` sees a
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alerting_counters_render_at_zero_before_any_event() {
        let recorder = super::super::prometheus_builder().unwrap().build_recorder();
        let handle = recorder.handle();
        ::metrics::with_local_recorder(&recorder, register_zero_series);
        let text = handle.render();
        for line in [
            format!("{} 0", names::COMMIT_FAILURES),
            format!("{} 0", names::MESSAGES_CONSUMED),
            format!(
                r#"{}{{reason="unparseable"}} 0"#,
                names::CHECKPOINT_PROBLEMS
            ),
            format!(r#"{}{{reason="unread"}} 0"#, names::CHECKPOINT_PROBLEMS),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
