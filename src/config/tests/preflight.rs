//! Preflight: the files the configuration and the environment name, checked the way `run`
//! uses them.

use super::{parse, MERLIN};
use crate::config::preflight::{check, named_files, preflight, Use, CREDENTIALS_ENV};
use crate::config::{load, Needs};
use std::ffi::OsString;
use std::path::Path;

fn with_consumer_keys(keys: &str) -> String {
    MERLIN.replace(
        "      fetch.min.bytes: \"1024000\"\n",
        &format!("      fetch.min.bytes: \"1024000\"\n{keys}"),
    )
}

fn no_env(_: &str) -> Option<OsString> {
    None
}

#[test]
fn every_file_setting_is_listed_with_how_run_uses_it() {
    let yaml = format!(
        "{}dead_letter: {{target: file, path: /d/letters}}\nlocal_sink: {{path: /d/rows}}\n",
        with_consumer_keys(
            "      ssl.ca.location: /c/ca.pem\n      ssl.certificate.location: /c/cert.pem\n      ssl.key.location: /c/key.pem\n      ssl.keystore.location: /c/ks.p12\n      ssl.crl.location: /c/crl.pem\n      sasl.kerberos.keytab: /c/kt\n"
        )
    );
    let (cfg, _) = parse(&yaml, Needs::RUN).unwrap();
    let env = |n: &str| (n == CREDENTIALS_ENV).then(|| OsString::from("/g/key.json"));
    let listed: Vec<(String, String, Use)> = named_files(&cfg, &env)
        .into_iter()
        .map(|f| (f.setting, f.path.display().to_string(), f.usage))
        .collect();
    let acc = "observation_source.config.additional_consumer_config";
    let s = |k: &str, p: &str, u: Use| (k.to_string(), p.to_string(), u);
    assert_eq!(
        listed,
        [
            s(
                &format!("{acc}.ssl.ca.location"),
                "/c/ca.pem",
                Use::Read(true)
            ),
            s(
                &format!("{acc}.ssl.certificate.location"),
                "/c/cert.pem",
                Use::Read(false)
            ),
            s(
                &format!("{acc}.ssl.key.location"),
                "/c/key.pem",
                Use::Read(false)
            ),
            s(
                &format!("{acc}.ssl.keystore.location"),
                "/c/ks.p12",
                Use::Read(false)
            ),
            s(
                &format!("{acc}.ssl.crl.location"),
                "/c/crl.pem",
                Use::Read(false)
            ),
            s(
                &format!("{acc}.sasl.kerberos.keytab"),
                "/c/kt",
                Use::Read(false)
            ),
            s(CREDENTIALS_ENV, "/g/key.json", Use::Read(false)),
            s("dead_letter.path", "/d/letters", Use::Append),
            s("local_sink.path", "/d/rows", Use::Dir),
        ]
    );
    // `probe` is librdkafka's own search; the key file matters only to a sink that uses it.
    let yaml = with_consumer_keys("      ssl.ca.location: probe\n")
        .replace("    ttl_days: 14\n", "    ttl_days: 14\n    auth: none\n");
    let (cfg, _) = parse(&yaml, Needs::RUN).unwrap();
    assert_eq!(named_files(&cfg, &env), []);
}

#[test]
fn each_use_is_checked_as_run_would_meet_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = d.join("f");
    std::fs::write(&file, "x").unwrap();
    let missing = d.join("missing");
    assert_eq!(check(&file, Use::Read(false)), Ok(()));
    assert_eq!(check(d, Use::Read(true)), Ok(()), "a CA directory");
    assert_eq!(
        check(d, Use::Read(false)).unwrap_err(),
        "is a directory, not a file"
    );
    assert_eq!(
        check(&missing, Use::Read(true)).unwrap_err(),
        "does not exist"
    );
    assert_eq!(check(&file, Use::Append), Ok(()));
    assert_eq!(
        check(&missing.join("a/b"), Use::Append),
        Ok(()),
        "created with its folders"
    );
    assert_eq!(
        check(d, Use::Append).unwrap_err(),
        "is a directory, not a file"
    );
    assert_eq!(
        check(&file.join("x"), Use::Append).unwrap_err(),
        format!("cannot be created: {file:?} is not a directory")
    );
    assert_eq!(check(d, Use::Dir), Ok(()));
    assert_eq!(check(&missing, Use::Dir), Ok(()));
    assert_eq!(check(&file, Use::Dir).unwrap_err(), "is not a directory");
    assert_eq!(check(Path::new("relative/new"), Use::Dir), Ok(()));
}

#[test]
fn a_missing_file_is_a_problem_at_its_setting_with_where_it_was_set() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let text = with_consumer_keys(&format!("      ssl.ca.location: {}\n", ca.display()));
    let line = text
        .lines()
        .position(|l| l.contains("ssl.ca.location"))
        .unwrap()
        + 1;
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, &text).unwrap();
    let l = load(&path, vec![], &[], Needs::RUN).unwrap();
    let key = dir.path().join("key.json");
    let env = |n: &str| (n == CREDENTIALS_ENV).then(|| key.clone().into_os_string());
    let p = l.preflight(&env).unwrap_err();
    assert_eq!(
        p.0,
        [
            format!(
                "observation_source.config.additional_consumer_config.ssl.ca.location: {ca:?} does not exist (at {}:{line})",
                path.display()
            ),
            format!(
                "GOOGLE_APPLICATION_CREDENTIALS: {key:?} does not exist; point it at the service-account key file, or unset it to use the metadata server"
            ),
        ]
    );
    std::fs::write(&ca, "x").unwrap();
    std::fs::write(&key, "{}").unwrap();
    l.preflight(&env).unwrap();
    assert!(preflight(&l.config, &no_env).is_empty());
}
