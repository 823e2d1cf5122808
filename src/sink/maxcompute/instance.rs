//! What one poll of an SQL instance says (pure), compared as pyodps compares it: the instance's
//! `<Status>` against `Terminated` and each task's `<Status>` upper-cased against `SUCCESS`,
//! `FAILED`, `CANCELLED` (`odps/models/instance.py`, `Instance.Task.TaskStatus(s.upper())`).
//!
//! Only an explicit `FAILED` or `CANCELLED` task says the statement did nothing; a caller that
//! must not run a statement twice (the mover's `INSERT`) starts a new instance only then. Every
//! other answer that is not a success (still running, no task listed yet, a status we do not
//! know) is [`Poll::Pending`]: poll the same instance again.

/// One poll's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poll {
    /// Not terminated, or terminated with no verdict yet: poll the same instance again.
    Pending,
    /// Terminated and every task `SUCCESS`.
    Succeeded,
    /// Terminated with a task `FAILED` or `CANCELLED`: the statement did nothing.
    Failed,
}

/// Whether the instance's `<Status>` says it terminated (pyodps: `Instance.Status.TERMINATED`).
pub fn terminated(status: Option<&str>) -> bool {
    status.is_some_and(|s| s.trim().eq_ignore_ascii_case("terminated"))
}

/// The verdict of a terminated instance from its `?taskstatus` tasks (name, status).
pub fn verdict(tasks: &[(String, String)]) -> Poll {
    let upper = |s: &str| s.trim().to_ascii_uppercase();
    if tasks
        .iter()
        .any(|(_, s)| matches!(upper(s).as_str(), "FAILED" | "CANCELLED"))
    {
        return Poll::Failed;
    }
    if !tasks.is_empty() && tasks.iter().all(|(_, s)| upper(s) == "SUCCESS") {
        return Poll::Succeeded;
    }
    Poll::Pending
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tasks(s: &[&str]) -> Vec<(String, String)> {
        s.iter()
            .enumerate()
            .map(|(i, s)| (format!("t{i}"), (*s).to_string()))
            .collect()
    }

    #[test]
    fn statuses_are_compared_as_pyodps_does() {
        for s in ["Success", "SUCCESS", "success", " Success "] {
            assert_eq!(verdict(&tasks(&[s])), Poll::Succeeded, "{s}");
        }
        for s in ["Failed", "FAILED", "Cancelled", "CANCELLED"] {
            assert_eq!(verdict(&tasks(&[s])), Poll::Failed, "{s}");
            assert_eq!(verdict(&tasks(&["Success", s])), Poll::Failed, "{s}");
        }
        assert!(terminated(Some("Terminated")));
        assert!(terminated(Some("TERMINATED")));
        assert!(!terminated(Some("Running")));
        assert!(!terminated(None));
    }

    #[test]
    fn anything_else_polls_the_same_instance_again() {
        assert_eq!(verdict(&[]), Poll::Pending, "no task listed is no verdict");
        for s in ["Running", "WAITING", "Suspended", "", "Whatever"] {
            assert_eq!(verdict(&tasks(&[s])), Poll::Pending, "{s:?}");
            assert_eq!(verdict(&tasks(&["Success", s])), Poll::Pending, "{s:?}");
        }
    }

    proptest! {
        /// A new statement only after an explicit failure: `Failed` exactly when a task says
        /// FAILED or CANCELLED (any case), `Succeeded` exactly when all say SUCCESS.
        #[test]
        fn failed_only_when_a_task_says_so(
            picks in proptest::collection::vec((0usize..8, any::<bool>()), 0..6)
        ) {
            const S: [&str; 8] = ["Success", "Failed", "Cancelled", "Running", "Waiting",
                "Suspended", "", "Terminated"];
            let t: Vec<(String, String)> = picks
                .iter()
                .map(|(i, up)| {
                    let s = if *up { S[*i].to_uppercase() } else { S[*i].to_string() };
                    ("t".to_string(), s)
                })
                .collect();
            let failed = picks.iter().any(|(i, _)| matches!(*i, 1 | 2));
            let ok = !picks.is_empty() && picks.iter().all(|(i, _)| *i == 0);
            let want = if failed { Poll::Failed } else if ok { Poll::Succeeded } else { Poll::Pending };
            prop_assert_eq!(verdict(&t), want);
        }
    }
}
