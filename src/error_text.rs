//! An error's text with the text of every cause, joined by `: `. Pure.
//!
//! reqwest's own message names the URL but not why a connection failed (the refused connect,
//! the TLS or DNS error are its sources), which is what a person needs to read.

/// `e`'s message followed by its causes' (`a: b: c`).
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);

    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn every_cause_follows_in_order() {
        let e = E(
            "sending",
            Some(Box::new(E("connect", Some(Box::new(E("refused", None)))))),
        );
        assert_eq!(with_causes(&e), "sending: connect: refused");
        assert_eq!(with_causes(&E("alone", None)), "alone");
    }
}
