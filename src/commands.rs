//! The subcommands' bodies. Each loads only the configuration it needs, reports every problem
//! at once (exit 2), and returns an exit code.

use crate::cli::{
    ConfigArgs, ConfigOnlyArgs, ConvertArgs, GenArgs, OutputFormat, ProduceArgs, RunArgs,
};
use crate::config::{load_value, override_scrubber, Config, Needs};
use crate::decode::Decoder;
use crate::framing::{write_frame, FrameReader};
use crate::gen::{GenOptions, Generator};
use crate::mapped::MappedReader;
use crate::output::{ArrowStreamWriter, BatchWriter, JsonlWriter, ParquetFileWriter};
use crate::readbuf::AlignedReader;
use crate::stdout::Watched;
use crate::table::{bigquery_table_resource, TableLayout};
use indicatif::{ProgressBar, ProgressStyle};
use std::fs::File;
use std::io::{BufRead, BufWriter, IsTerminal, Read, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Exit code: invalid usage or configuration.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the command failed at run time.
pub const EXIT_FAILURE: u8 = 1;

/// Loads and validates the configuration for `needs`; prints warnings; on problems prints them
/// all and returns the exit code to use.
pub fn load_config(args: &ConfigArgs, needs: Needs) -> Result<Config, ExitCode> {
    let (_, cfg, warnings) = load_config_and_warnings(args, needs)?;
    for w in warnings {
        eprintln!("warning: {w}");
    }
    Ok(cfg)
}

/// Like [`load_config`], returning the layered tree the config was read from and the warnings
/// instead of printing them.
fn load_config_and_warnings(
    args: &ConfigArgs,
    needs: Needs,
) -> Result<(serde_yaml_ng::Value, Config, Vec<String>), ExitCode> {
    // An override's value may be a secret: no message about it shows the value.
    let scrubber = override_scrubber(std::env::vars(), &args.sets);
    let value = load_value(Some(&args.config), std::env::vars(), &args.sets).map_err(|p| {
        eprint!("{}", scrubber.scrub(&p.to_string()));
        ExitCode::from(EXIT_USAGE)
    })?;
    let (cfg, warnings) = Config::from_value(&value, needs).map_err(|p| {
        eprint!("{}", scrubber.scrub(&p.to_string()));
        ExitCode::from(EXIT_USAGE)
    })?;
    let warnings = warnings
        .iter()
        .map(|w| scrubber.scrub(w).into_owned())
        .collect();
    Ok((value, cfg, warnings))
}

/// `schema`: prints the BigQuery REST table resource.
pub fn schema(a: ConfigOnlyArgs) -> ExitCode {
    let cfg = match load_config(&a.cfg, Needs::SCHEMA) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let layout = TableLayout::from_config(&cfg);
    let sink = cfg.bigquery().expect("validated: one BIGQUERY sink");
    let doc = bigquery_table_resource(&layout, &cfg.project, &cfg.model_id, sink);
    let json = serde_json::to_string_pretty(&doc).expect("json");
    crate::stdout::print("schema", &format!("{json}\n"))
}

/// `check-config`: validates for `run` and prints the resolved configuration, secrets redacted.
/// After it, as YAML comments, how each of Merlin's compatibility keys in the file is understood
/// ([`crate::config::merlin_keys`]) and the memory formula's bound, term by term.
pub fn check_config(a: ConfigOnlyArgs) -> ExitCode {
    match load_config_and_warnings(&a.cfg, Needs::RUN) {
        Ok((value, c, warnings)) => {
            for w in warnings {
                eprintln!("warning: {w}");
            }
            let extra = c
                .observation_source
                .as_ref()
                .map(|s| &s.additional_consumer_config);
            if let Some(Err(e)) = extra.map(|x| crate::auth::kafka::method(x)) {
                eprintln!("observation_source.config.{e}");
                return ExitCode::from(2);
            }
            let notes = crate::config::as_comments(&crate::config::merlin_keys(&value, &c));
            let memory: String = crate::footprint::Footprint::of(&c, true)
                .describe()
                .lines()
                .map(|l| format!("#{l}\n"))
                .collect();
            crate::stdout::print(
                "check-config",
                &format!(
                    "{}{}{notes}# resident memory bound (docs/reliability.md, \"The memory formula\"):\n{memory}",
                    c.to_redacted_yaml(),
                    run_plan(&c),
                ),
            )
        }
        Err(code) => code,
    }
}

/// What `run` will use that the configuration only implies, after the YAML: the consumer group
/// on a line of its own (`consumer group: <name>`, itself YAML) and, as a comment, where a
/// partition it never committed starts.
fn run_plan(c: &Config) -> String {
    let Some(group) = c.consumer_group() else {
        return String::new();
    };
    // Quoted only where YAML needs it.
    let name = serde_yaml_ng::to_string(&group).unwrap_or_else(|_| format!("{group:?}\n"));
    let tokens = c
        .observation_source
        .as_ref()
        .and_then(|s| crate::auth::kafka::method(&s.additional_consumer_config).ok())
        .flatten()
        .map(|m| format!("# Kafka OAUTHBEARER tokens from the publisher: {m:?}\n"))
        .unwrap_or_default();
    format!(
        "consumer group: {name}# where it starts: {}\n{tokens}",
        c.start_text()
    )
}

/// Rows per record batch in offline commands.
const BATCH_ROWS: usize = 8192;
/// Arrow bytes per record batch in offline commands.
const BATCH_BYTES: usize = 8 << 20;

/// The read buffer of an input read as a stream.
const STREAM_BUFFER: usize = 1 << 18;

/// An offline command's input read as a stream.
type Stream = AlignedReader<Box<dyn Read>>;

/// The input stream (`-` is stdin) and its length if it is a file. Only the source is behind
/// a `dyn` (one call per 256 KiB read): the buffer's `fill_buf` and `consume`, called per log,
/// stay static calls the frame reader can inline.
fn open_input(path: &str) -> std::io::Result<(Stream, Option<u64>)> {
    let (source, len): (Box<dyn Read>, _) = if path == "-" {
        (Box::new(std::io::stdin()), None)
    } else {
        let f = File::open(path)?;
        let len = f.metadata().ok().map(|m| m.len());
        (Box::new(f), len)
    };
    Ok((AlignedReader::with_capacity(STREAM_BUFFER, source), len))
}

/// `convert`'s input: a regular file through a memory map, anything else as a stream.
enum Input {
    Mapped(MappedReader),
    Stream(Stream),
}

/// [`open_input`], mapping a regular file ([`crate::mapped`]); anything else is read as a
/// stream from the same open file (a named pipe must not be opened twice).
fn open_mapped(path: &str) -> std::io::Result<(Input, Option<u64>)> {
    if path == "-" {
        let (s, len) = open_input(path)?;
        return Ok((Input::Stream(s), len));
    }
    let f = File::open(path)?;
    let len = f.metadata().ok().map(|m| m.len());
    Ok(match MappedReader::open(f) {
        Ok(m) => (Input::Mapped(m), len),
        Err(f) => (
            Input::Stream(AlignedReader::with_capacity(STREAM_BUFFER, Box::new(f))),
            len,
        ),
    })
}

/// The output buffer's capacity. Writes at least this long go straight to the stream. A
/// smaller buffer lets an Arrow writer's column buffers skip the copy through it (16 KiB:
/// 4,065 → 3,900 instructions per log in `convert -f arrow`), but the system calls for what is
/// still gathered cost more than the copy saved: 402 against 388 ms per million logs
/// (docs/performance.md, "The input reader and the output buffer").
const OUTPUT_BUFFER: usize = 256 << 10;

/// The output stream (`-` is stdout) and a flag that turns true if its reader closed the pipe.
fn open_output(path: &str) -> std::io::Result<(Box<dyn Write + Send>, Arc<AtomicBool>)> {
    let (out, gone) = if path == "-" {
        let (w, gone) = Watched::new(std::io::stdout());
        (Box::new(w) as Box<dyn Write + Send>, gone)
    } else {
        let (w, gone) = Watched::new(File::create(path)?);
        (Box::new(w) as Box<dyn Write + Send>, gone)
    };
    Ok((Box::new(BufWriter::with_capacity(OUTPUT_BUFFER, out)), gone))
}

/// A progress bar on stderr when it is a terminal (hidden otherwise).
fn progress(total_bytes: Option<u64>, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = match total_bytes {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template(
                "{spinner} {bytes}/{total_bytes} {bar:30} {per_sec} {msg}",
            )
            .expect("template"),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {bytes} {per_sec} {msg}").expect("template"),
        ),
    };
    pb.set_message(what.to_string());
    pb
}

/// `convert`: length-delimited PredictionLogs → table rows. Bad logs are skipped and reported
/// (index, byte offset of the length prefix, reason). Exit 0 done, 1 with `--strict` and any bad
/// log, an I/O error or an unrecoverable frame, 2 usage/config.
pub fn convert(a: ConvertArgs) -> ExitCode {
    let cfg = match load_config(&a.cfg, Needs::CONVERT) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let layout = Arc::new(TableLayout::from_config(&cfg));
    let (input, total) = match open_mapped(&a.input) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("convert: cannot open {}: {e}", a.input);
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let (out, reader_gone) = match open_output(&a.output) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("convert: cannot create {}: {e}", a.output);
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let writer: std::io::Result<Box<dyn BatchWriter>> =
        match a.format {
            OutputFormat::Jsonl => Ok(Box::new(JsonlWriter::new(out, &layout.arrow))),
            OutputFormat::Arrow => ArrowStreamWriter::new(out, &layout.arrow)
                .map(|w| Box::new(w) as Box<dyn BatchWriter>),
            OutputFormat::Parquet => ParquetFileWriter::new(out, &layout.arrow)
                .map(|w| Box::new(w) as Box<dyn BatchWriter>),
        };
    let mut writer = match writer {
        Ok(w) => w,
        Err(e) => {
            eprintln!("convert: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let pb = progress(total, "converting");
    let decoder = Decoder::new(Arc::clone(&layout)).with_max_log_bytes(cfg.batching.max_log_bytes);
    let max_frame = cfg.batching.max_frame_bytes;
    let mut job = Converting {
        decoder,
        writer: writer.as_mut(),
        pb: &pb,
        logs: 0,
        rows: 0,
        bad: 0,
    };
    let mut failure = match input {
        Input::Mapped(m) => job.run(FrameReader::new(m).with_max_frame(max_frame)),
        Input::Stream(s) => job.run(FrameReader::new(s).with_max_frame(max_frame)),
    };
    let Converting {
        mut decoder,
        logs,
        rows,
        bad,
        ..
    } = job;
    pb.finish_and_clear();
    let result = if decoder.rows() > 0 {
        writer.write(&decoder.finish())
    } else {
        Ok(())
    }
    .and_then(|()| writer.finish());
    if let Err(e) = result {
        failure.get_or_insert(format!("write error: {e}"));
    }
    if failure.is_some() && reader_gone.load(Ordering::Relaxed) {
        // `convert … | head`: the reader has what it wanted; end quietly, as standard tools do.
        return ExitCode::SUCCESS;
    }
    eprintln!("convert: {logs} logs read, {rows} rows written, {bad} bad logs skipped");
    if let Some(f) = failure {
        eprintln!("convert: {f}");
        return ExitCode::from(EXIT_FAILURE);
    }
    if a.strict && bad > 0 {
        return ExitCode::from(EXIT_FAILURE);
    }
    ExitCode::SUCCESS
}

/// `convert`'s loop: frames in, batches out, counts kept.
struct Converting<'a> {
    decoder: Decoder,
    writer: &'a mut dyn BatchWriter,
    pb: &'a ProgressBar,
    logs: u64,
    rows: u64,
    bad: u64,
}

impl Converting<'_> {
    /// Decodes every frame of `reader`, writing a batch every [`BATCH_ROWS`] rows or
    /// [`BATCH_BYTES`] bytes (the last, partial batch is the caller's). Generic over the
    /// reader so that the per-log `fill_buf` and `consume` are static calls. The failure that
    /// stopped it, if any.
    fn run<R: BufRead>(&mut self, mut reader: FrameReader<R>) -> Option<String> {
        let mut buf = Vec::new();
        let decoder = &mut self.decoder;
        loop {
            // Decoded in place from the reader's buffer (no copy) when the frame is all there.
            match reader.next_with(&mut buf, |offset, log| (offset, decoder.decode(log))) {
                Ok(None) => return None,
                Ok(Some((offset, decoded))) => {
                    match decoded {
                        Ok(n) => self.rows += n as u64,
                        Err(e) => {
                            self.bad += 1;
                            let logs = self.logs;
                            self.pb
                                .suspend(|| eprintln!("log {logs} at byte {offset}: {e}"));
                        }
                    }
                    self.logs += 1;
                    if decoder.rows() >= BATCH_ROWS || decoder.approx_bytes() >= BATCH_BYTES {
                        let batch = decoder.finish();
                        if let Err(e) = self.writer.write(&batch) {
                            return Some(format!("write error: {e}"));
                        }
                        decoder.recycle(batch);
                        self.pb.set_position(reader.position());
                    }
                }
                Err(e) => return Some(format!("unrecoverable input: {e}")),
            }
        }
    }
}

/// `gen`: synthetic logs for the configured schema, length-delimited.
pub fn gen(a: GenArgs) -> ExitCode {
    let cfg = match load_config(&a.cfg, Needs::CONVERT) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if !(0.0..=1.0).contains(&a.malformed_ratio) {
        eprintln!("gen: --malformed-ratio must be between 0 and 1");
        return ExitCode::from(EXIT_USAGE);
    }
    let start_micros = if a.start_time == "now" {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or(0)
    } else {
        match humantime::parse_rfc3339_weak(&a.start_time) {
            Ok(t) => t
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros() as i64)
                .unwrap_or(0),
            Err(e) => {
                eprintln!("gen: --start-time {:?}: {e}", a.start_time);
                return ExitCode::from(EXIT_USAGE);
            }
        }
    };
    let (mut out, _) = match open_output(&a.output) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("gen: cannot create {}: {e}", a.output);
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let mut g = Generator::new(
        &cfg.inference_schema,
        GenOptions {
            rows_per_log: a.rows_per_log,
            seed: a.seed,
            malformed_ratio: a.malformed_ratio,
            start_micros,
            model: (
                cfg.project.clone(),
                cfg.model_id.clone(),
                cfg.model_version.clone(),
            ),
        },
    )
    .with_columns(&cfg.gen);
    if let Some(at) = a.drift_at {
        if !(0.0..=1.0).contains(&at) {
            eprintln!("gen: --drift-at {at}: a fraction from 0.0 to 1.0");
            return ExitCode::from(EXIT_USAGE);
        }
        let has = |k| a.drift.contains(&k);
        let drift = crate::gen::Drift {
            after: (at * a.count as f64).round() as u64,
            feature: has(crate::cli::DriftKind::Feature),
            nulls: has(crate::cli::DriftKind::Nulls),
            score: has(crate::cli::DriftKind::Score),
        };
        let (dist, nulls) = g.drift_targets();
        let name =
            |i: Option<usize>| i.map_or("-", |i| cfg.inference_schema.feature_types[i].0.as_str());
        eprintln!(
            "gen: drift from log {}: feature distribution {}, NULL share {}, score {}",
            drift.after,
            if drift.feature { name(dist) } else { "-" },
            if drift.nulls { name(nulls) } else { "-" },
            if drift.score { "+1.5 logit" } else { "-" },
        );
        g = g.with_drift(drift);
    }
    let pb = progress(None, "generating");
    let mut malformed = 0u64;
    for i in 0..a.count {
        let log = g.next_log();
        malformed += u64::from(log.malformed);
        if let Err(e) = write_frame(&mut out, &log.bytes) {
            return crate::stdout::exit_code("gen", &Err(e));
        }
        if i % 4096 == 0 {
            pb.set_position(i);
        }
    }
    pb.finish_and_clear();
    if let Err(e) = out.flush() {
        return crate::stdout::exit_code("gen", &Err(e));
    }
    eprintln!("gen: {} logs written ({malformed} malformed)", a.count);
    ExitCode::SUCCESS
}

/// Merlin's container command, `python -m publisher +environment=NAME [overrides]` (see
/// [`crate::merlin_entry`]): `run` on `conf/environment/NAME.yaml` where Merlin mounts it, the
/// overrides applied as `--set`. A malformed command, or an override naming a key the
/// publisher does not read, exits 2.
pub fn merlin(args: &[std::ffi::OsString]) -> ExitCode {
    use crate::merlin_entry::{self, CONF_DIR_ENV, EXPECTED, MERLIN_CONF_DIR};
    let inv = match merlin_entry::parse(args) {
        Ok(i) => i,
        Err(problems) => {
            for p in problems {
                eprintln!("python: {p}");
            }
            eprintln!("expected: {EXPECTED}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let dir = std::env::var_os(CONF_DIR_ENV)
        .map_or_else(|| std::path::PathBuf::from(MERLIN_CONF_DIR), Into::into);
    let cfg = ConfigArgs {
        config: inv.config_path(&dir),
        sets: inv.sets,
    };
    let (_, cfg_resolved, warnings) = match load_config_and_warnings(&cfg, Needs::RUN) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let unknown: Vec<&String> = cfg
        .sets
        .iter()
        .filter(|s| {
            warnings
                .iter()
                .any(|w| merlin_entry::override_is_unknown(s, w))
        })
        .collect();
    if !unknown.is_empty() {
        for s in unknown {
            eprintln!(
                "python: override {} names a key this publisher does not read",
                merlin_entry::shown(s)
            );
        }
        eprintln!("expected: {EXPECTED}");
        return ExitCode::from(EXIT_USAGE);
    }
    for w in warnings {
        eprintln!("warning: {w}");
    }
    crate::pipeline::run(cfg_resolved, None)
}

/// `run`: the daemon (or, with `--replay`, the pipeline over a file).
pub fn run(a: RunArgs) -> ExitCode {
    let needs = if a.replay.is_some() {
        Needs {
            source: false,
            sinks: true,
            bigquery: false,
        }
    } else {
        Needs::RUN
    };
    let mut cfg = match load_config(&a.cfg, needs) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(f) = a.log_format {
        cfg.logging.format = f;
    }
    crate::pipeline::run(cfg, a.replay)
}

/// `produce`: sends every frame of a length-delimited file as one Kafka message (no key),
/// batching and waiting for every delivery report. Exit 1 if any message was not delivered.
pub fn produce(a: ProduceArgs) -> ExitCode {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{
        BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer,
    };
    use std::sync::atomic::{AtomicU64, Ordering};
    /// Counts failed deliveries; supplies OAUTHBEARER tokens when the settings ask for them.
    struct Counting(
        AtomicU64,
        Option<std::sync::Arc<crate::auth::kafka::Tokens>>,
    );
    impl rdkafka::ClientContext for Counting {
        const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;
        fn generate_oauth_token(
            &self,
            _: Option<&str>,
        ) -> Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
            crate::auth::kafka::refresh(self.1.as_ref())
        }
    }
    impl ProducerContext for Counting {
        type DeliveryOpaque = ();
        fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
            if r.is_err() {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &a.brokers)
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576");
    let mut pairs = Vec::new();
    for kv in &a.producer_config {
        match kv.split_once('=') {
            Some((k, v)) => pairs.push((k.to_string(), v.to_string())),
            None => {
                eprintln!("produce: --producer-config {kv:?}: expected key=value");
                return ExitCode::from(EXIT_USAGE);
            }
        }
    }
    let tokens = match crate::auth::kafka::Tokens::from_settings(&pairs) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "produce: --producer-config {}",
                e.replace("additional_consumer_config.", "")
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let method = crate::auth::kafka::method(&pairs).ok().flatten();
    for (k, v) in crate::auth::kafka::librdkafka_pairs(&pairs, method.as_ref()) {
        cfg.set(k, v);
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("produce: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    if tokens.is_some() {
        // rdkafka's admin client never asks for a token: the topic must exist (or the broker
        // create it on first produce).
        eprintln!("produce: under sasl.oauthbearer.method the topic is not created first");
    } else if let Ok(admin) = cfg.create::<AdminClient<rdkafka::client::DefaultClientContext>>() {
        let t = NewTopic::new(&a.topic, a.partitions, TopicReplication::Fixed(1));
        let _ = rt.block_on(admin.create_topics([&t], &AdminOptions::new()));
    }
    let producer: ThreadedProducer<Counting> =
        match cfg.create_with_context(Counting(AtomicU64::new(0), tokens)) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("produce: {e}");
                return ExitCode::from(EXIT_FAILURE);
            }
        };
    let (input, _) = match open_input(&a.input) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("produce: cannot open {}: {e}", a.input);
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let started = std::time::Instant::now();
    let mut reader = FrameReader::new(input);
    let mut buf = Vec::new();
    let mut n = 0u64;
    loop {
        match reader.next_into(&mut buf) {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                eprintln!("produce: {e}");
                return ExitCode::from(EXIT_FAILURE);
            }
        }
        let mut record = BaseRecord::<(), [u8]>::to(&a.topic).payload(&buf[..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, r))
                    if matches!(
                        e.rdkafka_error_code(),
                        Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
                    ) =>
                {
                    record = r;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err((e, _)) => {
                    eprintln!("produce: {e}");
                    return ExitCode::from(EXIT_FAILURE);
                }
            }
        }
        n += 1;
    }
    if let Err(e) = producer.flush(std::time::Duration::from_secs(60)) {
        eprintln!("produce: not every message was delivered: {e}");
        return ExitCode::from(EXIT_FAILURE);
    }
    let failed = producer.context().0.load(Ordering::Relaxed);
    if failed > 0 {
        eprintln!("produce: {failed} of {n} messages were not delivered");
        return ExitCode::from(EXIT_FAILURE);
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "produce: {n} messages to {} in {secs:.2}s ({:.0} msg/s)",
        a.topic,
        n as f64 / secs.max(1e-9)
    );
    ExitCode::SUCCESS
}

/// `bootstrap`.
pub fn bootstrap(a: crate::bootstrap::BootstrapArgs) -> ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(crate::bootstrap::run(a))
}
