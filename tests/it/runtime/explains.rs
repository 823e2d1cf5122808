//! A running publisher explains itself: the start-up line, and a broker it cannot reach named
//! in `/readyz` (not its consequences) and said once in the log, however often librdkafka
//! reports it.

use super::*;

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn an_unreachable_broker_is_named_by_readyz_and_said_once_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on the discard port.
    let s = Setup::at(
        "127.0.0.1:9",
        dir.path(),
        "a",
        &unique("rt-nobroker"),
        &unique("g"),
        "",
    );
    let c = s.start();
    let named = wait_for(LIMIT, || {
        s.get("/readyz").is_some_and(|(code, body)| {
            code == 503
                && body.contains("cannot reach a Kafka broker: 127.0.0.1:9/bootstrap")
                && body.contains("Connection refused")
                && body.contains("observation_source.bootstrap_servers")
                && !body.contains("source topic does not exist")
        })
    });
    assert!(named, "{:?}\n{}", s.get("/readyz"), s.log_tail());
    // librdkafka retries the connection every second or so: several attempts, one line.
    std::thread::sleep(Duration::from_secs(5));
    let fail = "Connect to ipv4#127.0.0.1:9 failed: Connection refused";
    assert_eq!(
        s.log_count(&format!(
            "librdkafka: FAIL [thrd:127.0.0.1:9/bootstrap]: 127.0.0.1:9/bootstrap: {fail}"
        )),
        1,
        "{}",
        s.log_tail()
    );
    assert_eq!(
        s.log_count("librdkafka: consumer error: Global error: AllBrokersDown"),
        1
    );
    assert_eq!(
        s.log_count("\"message\":\"starting: "),
        1,
        "one start-up line"
    );
    assert_eq!(
        s.log_count("on 127.0.0.1:9 in group"),
        1,
        "it names the brokers and the group"
    );
    assert_eq!(stop(c), Some(0), "{}", s.log_tail());
}
