//! The subcommands' bodies. Each loads only the configuration it needs, reports every problem
//! at once (exit 2), and returns an exit code.

use crate::cli::{ConfigArgs, ConfigOnlyArgs, ConvertArgs, GenArgs, OutputFormat, RunArgs};
use crate::config::{Config, Loaded, Needs};
use crate::decode::Decoder;
use crate::framing::{write_frame, FrameReader};
use crate::gen::{GenOptions, Generator};
use crate::mapped::MappedReader;
use crate::output::{ArrowStreamWriter, BatchWriter, JsonlWriter, ParquetFileWriter};
use crate::readbuf::AlignedReader;
use crate::stdout::Watched;
use crate::table::TableLayout;
use progress::{Progress, Total};
use std::fs::File;
use std::io::{BufRead, BufWriter, IsTerminal, Read, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub mod formats;
pub mod produce;
pub mod progress;
pub mod schema;

pub use produce::produce;
pub use schema::schema;

/// Exit code: invalid usage or configuration.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the command failed at run time.
pub const EXIT_FAILURE: u8 = 1;

/// Loads and validates the configuration for `needs`; prints warnings; on problems prints them
/// all and returns the exit code to use.
pub fn load_config(args: &ConfigArgs, needs: Needs) -> Result<Config, ExitCode> {
    let l = load_checked(args, needs, false)?;
    Ok(l.config)
}

/// Loads the configuration for `needs` and prints its warnings; with `preflight`, also checks
/// the files it names ([`Loaded::preflight`]). On problems prints them all and returns the exit
/// code to use.
fn load_checked(args: &ConfigArgs, needs: Needs, preflight: bool) -> Result<Loaded, ExitCode> {
    let l = load_quiet(args, needs)?;
    for w in &l.warnings {
        eprintln!("warning: {w}");
    }
    if preflight {
        check_files(&l)?;
    }
    Ok(l)
}

/// Loads the configuration for `needs`, leaving its warnings to the caller; on problems prints
/// them all and returns the exit code to use.
fn load_quiet(args: &ConfigArgs, needs: Needs) -> Result<Loaded, ExitCode> {
    let env: Vec<(String, String)> = std::env::vars().collect();
    crate::config::load(&args.config, env, &args.sets, needs).map_err(|p| {
        eprint!("{p}");
        ExitCode::from(EXIT_USAGE)
    })
}

/// [`Loaded::preflight`] with this process's environment; on problems prints them all and
/// returns the exit code to use.
fn check_files(l: &Loaded) -> Result<(), ExitCode> {
    l.preflight(&|name| std::env::var_os(name)).map_err(|p| {
        eprint!("{p}");
        ExitCode::from(EXIT_USAGE)
    })
}

/// `check-config`: validates for `run` and prints the resolved configuration, secrets redacted.
/// After it, as YAML comments, how each of Merlin's compatibility keys in the file is understood
/// ([`crate::config::merlin_keys`]) and the memory formula's bound, term by term.
pub fn check_config(a: ConfigOnlyArgs) -> ExitCode {
    match load_checked(&a.cfg, Needs::RUN, true) {
        Ok(Loaded {
            value, config: c, ..
        }) => {
            let extra = c
                .observation_source
                .as_ref()
                .map(|s| &s.additional_consumer_config);
            if let Some(Err(e)) = extra.map(|x| crate::auth::kafka::method(x)) {
                eprintln!("observation_source.config.{e}");
                return ExitCode::from(2);
            }
            let keys = maxcompute_credentials(&c, &|k| std::env::var(k).ok());
            let notes = crate::config::as_comments(&crate::config::merlin_keys(&value, &c));
            let memory: String = crate::footprint::Footprint::of(&c, true)
                .describe()
                .lines()
                .map(|l| format!("#{l}\n"))
                .collect();
            crate::stdout::print(
                "check-config",
                &format!(
                    "{}{}{keys}{notes}# resident memory bound (docs/reliability.md, \"The memory formula\"):\n{memory}",
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
/// partition it never committed starts; then where dead letters go (`dead-letter topic: <name>`
/// or `dead-letter file: <path>`).
fn run_plan(c: &Config) -> String {
    // Quoted only where YAML needs it.
    let yaml = |s: &str| serde_yaml_ng::to_string(s).unwrap_or_else(|_| format!("{s:?}\n"));
    let mut out = String::new();
    if let Some(group) = c.consumer_group() {
        out.push_str(&format!(
            "consumer group: {}# where it starts: {}\n",
            yaml(&group),
            c.start_text()
        ));
    }
    if let Some(m) = c
        .observation_source
        .as_ref()
        .and_then(|s| crate::auth::kafka::method(&s.additional_consumer_config).ok())
        .flatten()
    {
        out.push_str(&format!(
            "# Kafka OAUTHBEARER tokens from the publisher: {m:?}\n"
        ));
    }
    let source_topic = c.observation_source.as_ref().map(|s| s.topic.as_str());
    if let Some((kind, name, how)) = c.dead_letter.target(source_topic) {
        out.push_str(&format!("dead-letter {kind}: {}", yaml(&name)));
        if !how.is_empty() {
            out.push_str(&format!("# {how}\n"));
        }
    }
    out
}

/// Which credential source each MAXCOMPUTE sink will use in this environment, as YAML comments
/// (never a secret); a source that cannot resolve (a half-set environment, which `run` refuses
/// with exit 2) is also warned about on stderr.
fn maxcompute_credentials(c: &Config, env: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    for (i, sink) in c.observation_sinks.iter().enumerate() {
        let crate::config::SinkConfig::MaxCompute(mc) = sink else {
            continue;
        };
        let line = match crate::sink::maxcompute::client::credentials_source(mc, env) {
            Ok(source) => source,
            Err(e) => {
                eprintln!("warning: observation_sinks[{i}] (MAXCOMPUTE): {e}");
                format!("none: {e}")
            }
        };
        out.push_str(&format!(
            "# MAXCOMPUTE credentials (observation_sinks[{i}]): {line}\n"
        ));
    }
    out
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
pub(crate) fn open_input(path: &str) -> std::io::Result<(Stream, Option<u64>)> {
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
/// still gathered cost more than the copy saved: 401.4 against 385.5 ms per million logs
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

/// Bad logs `convert` reports one by one; the rest are counted (a file that is mostly bad would
/// otherwise bury the summary under thousands of lines).
const SHOWN_BAD_LOGS: u64 = 10;

/// `convert`: length-delimited PredictionLogs → table rows. The format is `-f`'s or the output's
/// extension's; binary is never written to a terminal. Bad logs are skipped and the first
/// [`SHOWN_BAD_LOGS`] reported (index, byte offset of the length prefix, reason), the rest
/// counted; an input whose first frame fails and whose start is plainly something else (JSON
/// lines, text, Parquet) stops at once with one line. Exit 0 done, 1 with `--strict` and any bad
/// log, an I/O error or an unrecoverable frame, 2 usage/config.
pub fn convert(a: ConvertArgs) -> ExitCode {
    let format = match formats::convert_format(&a.output, a.format).and_then(|f| {
        formats::check_terminal(
            &a.output,
            formats::binary_rows(f),
            std::io::stdout().is_terminal(),
        )
        .map(|()| f)
    }) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("convert: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
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
        match format {
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
    let progress = Progress::new("convert", total.map_or(Total::Unknown, Total::Bytes));
    let decoder = Decoder::new(Arc::clone(&layout)).with_max_log_bytes(cfg.batching.max_log_bytes);
    let max_frame = cfg.batching.max_frame_bytes;
    let mut job = Converting {
        decoder,
        writer: writer.as_mut(),
        progress: &progress,
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
    progress.finish();
    if let Some(Failure::NotFramed(what)) = failure {
        eprintln!(
            "convert: {} is not length-delimited PredictionLogs (it looks like {what}): convert \
             reads what gen writes and a file dead-letter target holds, each serialized \
             PredictionLog after its length as a varint",
            if a.input == "-" { "stdin" } else { &a.input }
        );
        return ExitCode::from(EXIT_FAILURE);
    }
    let result = if decoder.rows() > 0 {
        writer.write(&decoder.finish())
    } else {
        Ok(())
    }
    .and_then(|()| writer.finish());
    if let Err(e) = result {
        failure.get_or_insert(Failure::Other(format!("write error: {e}")));
    }
    if failure.is_some() && reader_gone.load(Ordering::Relaxed) {
        // `convert … | head`: the reader has what it wanted; end quietly, as standard tools do.
        return ExitCode::SUCCESS;
    }
    if bad > SHOWN_BAD_LOGS {
        eprintln!(
            "convert: {} more bad logs not shown (the first {SHOWN_BAD_LOGS} are above)",
            bad - SHOWN_BAD_LOGS
        );
    }
    eprintln!("convert: {logs} logs read, {rows} rows written, {bad} bad logs skipped");
    if let Some(Failure::Other(f)) = failure {
        eprintln!("convert: {f}");
        return ExitCode::from(EXIT_FAILURE);
    }
    if a.strict && bad > 0 {
        return ExitCode::from(EXIT_FAILURE);
    }
    ExitCode::SUCCESS
}

/// Why `convert`'s loop stopped before the end of its input.
enum Failure {
    /// The first frame failed and the input plainly is something else (what it looks like).
    NotFramed(&'static str),
    /// A write error or an unrecoverable frame.
    Other(String),
}

/// `convert`'s loop: frames in, batches out, counts kept.
struct Converting<'a> {
    decoder: Decoder,
    writer: &'a mut dyn BatchWriter,
    progress: &'a Progress,
    logs: u64,
    rows: u64,
    bad: u64,
}

impl Converting<'_> {
    /// Decodes every frame of `reader`, writing a batch every [`BATCH_ROWS`] rows or
    /// [`BATCH_BYTES`] bytes (the last, partial batch is the caller's). Generic over the
    /// reader so that the per-log `fill_buf` and `consume` are static calls. The failure that
    /// stopped it, if any.
    fn run<R: BufRead>(&mut self, mut reader: FrameReader<R>) -> Option<Failure> {
        // Judged once, on the input's first bytes; acted on only if the first frame fails.
        let looks_like = reader.peek().ok().and_then(crate::framing::looks_like);
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
                            if let (0, Some(what)) = (self.logs, looks_like) {
                                return Some(Failure::NotFramed(what));
                            }
                            self.bad += 1;
                            if self.bad <= SHOWN_BAD_LOGS {
                                let logs = self.logs;
                                self.progress
                                    .suspend(|| eprintln!("log {logs} at byte {offset}: {e}"));
                            }
                        }
                    }
                    self.logs += 1;
                    if decoder.rows() >= BATCH_ROWS || decoder.approx_bytes() >= BATCH_BYTES {
                        let batch = decoder.finish();
                        if let Err(e) = self.writer.write(&batch) {
                            return Some(Failure::Other(format!("write error: {e}")));
                        }
                        decoder.recycle(batch);
                        self.progress.update(self.logs, reader.position());
                    }
                }
                Err(e) => {
                    if let (0, Some(what)) = (self.logs, looks_like) {
                        return Some(Failure::NotFramed(what));
                    }
                    return Some(Failure::Other(format!("unrecoverable input: {e}")));
                }
            }
        }
    }
}

/// `gen`: synthetic logs for the configured schema, length-delimited.
pub fn gen(a: GenArgs) -> ExitCode {
    let writable = formats::check_gen_output(&a.output).and_then(|()| {
        formats::check_terminal(
            &a.output,
            Some("length-delimited PredictionLogs"),
            std::io::stdout().is_terminal(),
        )
    });
    if let Err(e) = writable {
        eprintln!("gen: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
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
    let progress = Progress::new("gen", Total::Logs(a.count));
    let mut malformed = 0u64;
    for i in 0..a.count {
        let log = g.next_log();
        malformed += u64::from(log.malformed);
        if let Err(e) = write_frame(&mut out, &log.bytes) {
            return crate::stdout::exit_code("gen", &Err(e));
        }
        if i % 4096 == 0 {
            progress.update(i, 0);
        }
    }
    progress.finish();
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
    let loaded = match load_quiet(&cfg, Needs::RUN) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let warnings = &loaded.warnings;
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
    if let Err(code) = check_files(&loaded) {
        return code;
    }
    crate::pipeline::run(loaded.config, None)
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
    let mut cfg = match load_checked(&a.cfg, needs, true) {
        Ok(l) => l.config,
        Err(code) => return code,
    };
    if let Some(f) = a.log_format {
        cfg.logging.format = f;
    }
    crate::pipeline::run(cfg, a.replay)
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
