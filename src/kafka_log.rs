//! librdkafka's log lines and client errors, forwarded to the process log once per kind.
//!
//! A broker that stays unreachable makes librdkafka report the same failure every few
//! milliseconds, to every client (the consumer, the dead-letter producer, each admin client):
//! hundreds of identical lines a minute that bury everything else. Each kind of line is said
//! at once the first time; repeats are counted, and said with their count at most once per
//! [`SAY_AGAIN_AFTER`]. A kind is the line without the parts librdkafka varies between
//! repeats (`(after 12ms in state CONNECT, 3 identical error(s) suppressed)`).

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::ClientContext;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// How long a kind of line stays quiet after it was said.
pub const SAY_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// Kinds remembered at once: a bound on memory whatever librdkafka prints (the kind said
/// longest ago is forgotten first).
const KINDS: usize = 256;

/// When each kind of line was last said, and how many repeats were counted since (pure: the
/// caller passes the time).
#[derive(Debug)]
pub struct Repeats {
    said: HashMap<String, (Instant, u64)>,
    every: Duration,
    cap: usize,
}

impl Repeats {
    /// Says a kind again at most once per `every`, remembering at most `cap` kinds.
    pub fn new(every: Duration, cap: usize) -> Self {
        Repeats {
            said: HashMap::new(),
            every,
            cap: cap.max(1),
        }
    }

    /// A line of kind `kind` at `now`: `Some(n)` to say it, `n` being the repeats counted
    /// since it was last said; `None` to count it silently.
    pub fn note(&mut self, kind: &str, now: Instant) -> Option<u64> {
        if let Some((at, repeats)) = self.said.get_mut(kind) {
            if now.saturating_duration_since(*at) < self.every {
                *repeats += 1;
                return None;
            }
            let n = *repeats;
            (*at, *repeats) = (now, 0);
            return Some(n);
        }
        if self.said.len() >= self.cap {
            let oldest = self.said.iter().min_by_key(|(_, (at, _))| *at);
            if let Some(k) = oldest.map(|(k, _)| k.clone()) {
                self.said.remove(&k);
            }
        }
        self.said.insert(kind.to_string(), (now, 0));
        Some(0)
    }

    /// Repeats of `kind` counted and not yet said.
    pub fn pending(&self, kind: &str) -> u64 {
        self.said.get(kind).map_or(0, |(_, n)| *n)
    }
}

/// The kind of a librdkafka line: the line without what librdkafka varies between repeats
/// (its `(after 12ms in state CONNECT, 3 identical error(s) suppressed)` and `, 4 identical
/// error(s) suppressed` tails).
pub fn kind(line: &str) -> String {
    const SUPPRESSED: &str = " identical error(s) suppressed";
    let mut out = line.to_string();
    while let Some(i) = out.find("(after ") {
        // The matching parenthesis: the tail holds "(s)" of its own.
        let mut depth = 0usize;
        let end = out[i..].char_indices().find_map(|(j, c)| {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i + j + 1);
                    }
                }
                _ => {}
            }
            None
        });
        let Some(end) = end else { break };
        out.replace_range(i..end, "");
    }
    if let Some(j) = out.find(SUPPRESSED) {
        let head = &out[..j];
        let digits = head.len() - head.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 && head[..head.len() - digits].ends_with(", ") {
            out.replace_range(head.len() - digits - 2..j + SUPPRESSED.len(), "");
        }
    }
    out.trim_end().to_string()
}

static REPEATS: LazyLock<Mutex<Repeats>> =
    LazyLock::new(|| Mutex::new(Repeats::new(SAY_AGAIN_AFTER, KINDS)));

/// Whether to say `line` now (process-wide), and the repeats since it was last said.
fn say(line: &str) -> Option<u64> {
    REPEATS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .note(&kind(line), Instant::now())
}

/// A client error (`client`: which client reports it), said once per kind.
pub fn error(client: &str, error: &KafkaError, reason: &str) {
    let line = format!("{error}: {reason}");
    if let Some(repeats) = say(&line) {
        tracing::warn!(
            target: "librdkafka",
            client,
            repeats_since_last_said = repeats,
            "librdkafka: {client} error: {line}"
        );
    }
}

/// A `poll` that returned an error instead of a message (the same failure the client error
/// reports), said once per kind.
pub fn poll_error(error: &KafkaError) {
    use rdkafka::types::RDKafkaErrorCode as C;
    if let Some(
        C::BrokerTransportFailure
        | C::AllBrokersDown
        | C::Resolve
        | C::Authentication
        | C::SaslAuthenticationFailed
        | C::SSL,
    ) = error.rdkafka_error_code()
    {
        // The client's error callback says these, with the broker and the cause.
        return;
    }
    let line = format!("consumer: {error}");
    if let Some(repeats) = say(&line) {
        tracing::warn!(
            repeats_since_last_said = repeats,
            "Kafka poll error: {error}"
        );
    }
}

/// A librdkafka log line: warnings and errors said once per kind, the rest as they come.
pub fn log(client: &str, level: RDKafkaLogLevel, fac: &str, line: &str) {
    use RDKafkaLogLevel as L;
    let loud = matches!(
        level,
        L::Emerg | L::Alert | L::Critical | L::Error | L::Warning
    );
    if !loud {
        match level {
            L::Debug => tracing::debug!(target: "librdkafka", client, "librdkafka: {fac} {line}"),
            _ => tracing::info!(target: "librdkafka", client, "librdkafka: {fac} {line}"),
        }
        return;
    }
    let Some(repeats) = say(&format!("{fac} {line}")) else {
        return;
    };
    if matches!(level, L::Warning) {
        tracing::warn!(target: "librdkafka", client, repeats_since_last_said = repeats, "librdkafka: {fac} {line}");
    } else {
        tracing::error!(target: "librdkafka", client, repeats_since_last_said = repeats, "librdkafka: {fac} {line}");
    }
}

/// The context of the clients besides the consumer and the producer (admin clients, the
/// reader of another group's offsets): rdkafka's default, but with errors and log lines said
/// once per kind, naming the client, and OAUTHBEARER tokens from the process's source.
pub struct HelperContext(
    pub &'static str,
    pub Option<std::sync::Arc<crate::auth::kafka::Tokens>>,
);

impl ClientContext for HelperContext {
    crate::auth::kafka::token_refresh!(1);

    fn log(&self, level: RDKafkaLogLevel, fac: &str, line: &str) {
        log(self.0, level, fac, line);
    }

    fn error(&self, e: KafkaError, reason: &str) {
        error(self.0, &e, reason);
    }
}

impl rdkafka::consumer::ConsumerContext for HelperContext {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kinds_drop_what_librdkafka_varies_between_repeats() {
        let a = "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused (after 0ms in state CONNECT)";
        let b = "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused (after 12ms in state CONNECT, 3 identical error(s) suppressed)";
        let c = "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused, 4 identical error(s) suppressed";
        assert_eq!(kind(a), kind(b));
        assert_eq!(kind(a), kind(c));
        assert_eq!(
            kind(a),
            "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused"
        );
        let other = "127.0.0.2:9/bootstrap: Connect to ipv4#127.0.0.2:9 failed: Connection refused (after 0ms in state CONNECT)";
        assert_ne!(kind(a), kind(other), "another broker is another kind");
        assert_eq!(kind("a, b (c"), "a, b (c");
        assert_eq!(
            kind("x (after 1ms (y"),
            "x (after 1ms (y",
            "unbalanced: kept"
        );
        assert_eq!(kind("n, 12 identical error(s) suppressed"), "n");
        assert_eq!(
            kind("n, x identical error(s) suppressed"),
            "n, x identical error(s) suppressed"
        );
    }

    proptest! {
        /// Every kind is said the first time; a kind is said again only `every` after it was
        /// last said; what is said plus the repeats it reports plus what is pending is every
        /// line; memory stays within the cap.
        #[test]
        fn each_kind_is_said_once_per_window_and_every_line_is_counted(
            events in prop::collection::vec((0usize..6, 0u64..30), 1..300),
            cap in 1usize..8,
        ) {
            let every = Duration::from_secs(10);
            let mut r = Repeats::new(every, cap);
            let start = Instant::now();
            let mut now = start;
            let mut seen: HashMap<usize, u64> = HashMap::new();
            let mut reported: HashMap<usize, u64> = HashMap::new();
            let mut last: HashMap<usize, Instant> = HashMap::new();
            let mut forgotten = false;
            for (k, step) in events {
                now += Duration::from_secs(step);
                let first = !seen.contains_key(&k);
                *seen.entry(k).or_default() += 1;
                let said = r.note(&k.to_string(), now);
                prop_assert!(r.said.len() <= cap);
                if first {
                    prop_assert_eq!(said, Some(0), "a new kind is said at once");
                }
                match said {
                    Some(n) => {
                        if let Some(at) = last.get(&k) {
                            prop_assert!(forgotten || now.duration_since(*at) >= every);
                        }
                        last.insert(k, now);
                        *reported.entry(k).or_default() += 1 + n;
                    }
                    None => prop_assert!(now.duration_since(last[&k]) < every),
                }
                forgotten |= seen.len() > cap;
            }
            if !forgotten {
                for (k, n) in &seen {
                    prop_assert_eq!(reported[k] + r.pending(&k.to_string()), *n);
                }
            }
        }
    }
}
