//! The subcommands' bodies. Each loads only the configuration it needs, reports every problem
//! at once (exit 2), and returns an exit code.

use crate::cli::{ConfigArgs, ConfigOnlyArgs, ConvertArgs, GenArgs, OutputFormat, RunArgs};
use crate::decode::Decoder;
use crate::framing::{write_frame, FrameReader};
use crate::gen::{GenOptions, Generator};
use crate::output::{ArrowStreamWriter, BatchWriter, JsonlWriter, ParquetFileWriter};
use indicatif::{ProgressBar, ProgressStyle};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, IsTerminal, Write};
use std::sync::Arc;
use crate::config::{load_value, Config, Needs};
use crate::table::{bigquery_table_resource, TableLayout};
use std::process::ExitCode;

/// Exit code: invalid usage or configuration.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the command failed at run time.
pub const EXIT_FAILURE: u8 = 1;

/// Loads and validates the configuration for `needs`; prints warnings; on problems prints them
/// all and returns the exit code to use.
pub fn load_config(args: &ConfigArgs, needs: Needs) -> Result<Config, ExitCode> {
    let value = load_value(Some(&args.config), std::env::vars(), &args.sets).map_err(|p| {
        eprint!("{p}");
        ExitCode::from(EXIT_USAGE)
    })?;
    match Config::from_value(&value, needs) {
        Ok((cfg, warnings)) => {
            for w in warnings {
                eprintln!("warning: {w}");
            }
            Ok(cfg)
        }
        Err(p) => {
            eprint!("{p}");
            Err(ExitCode::from(EXIT_USAGE))
        }
    }
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
    println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
    ExitCode::SUCCESS
}

/// `check-config`: validates for `run` and prints the resolved configuration, secrets redacted.
pub fn check_config(a: ConfigOnlyArgs) -> ExitCode {
    match load_config(&a.cfg, Needs::RUN) {
        Ok(c) => {
            print!("{}", c.to_redacted_yaml());
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// Rows per record batch in offline commands.
const BATCH_ROWS: usize = 8192;
/// Arrow bytes per record batch in offline commands.
const BATCH_BYTES: usize = 8 << 20;

fn open_input(path: &str) -> std::io::Result<(Box<dyn BufRead>, Option<u64>)> {
    if path == "-" {
        Ok((Box::new(BufReader::with_capacity(1 << 18, std::io::stdin())), None))
    } else {
        let f = File::open(path)?;
        let len = f.metadata().ok().map(|m| m.len());
        Ok((Box::new(BufReader::with_capacity(1 << 18, f)), len))
    }
}

fn open_output(path: &str) -> std::io::Result<Box<dyn Write + Send>> {
    if path == "-" {
        Ok(Box::new(BufWriter::with_capacity(1 << 18, std::io::stdout())))
    } else {
        Ok(Box::new(BufWriter::with_capacity(1 << 18, File::create(path)?)))
    }
}

/// A progress bar on stderr when it is a terminal (hidden otherwise).
fn progress(total_bytes: Option<u64>, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = match total_bytes {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template("{spinner} {bytes}/{total_bytes} {bar:30} {per_sec} {msg}").expect("template"),
        ),
        None => ProgressBar::new_spinner()
            .with_style(ProgressStyle::with_template("{spinner} {bytes} {per_sec} {msg}").expect("template")),
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
    let (input, total) = match open_input(&a.input) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("convert: cannot open {}: {e}", a.input);
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let out = match open_output(&a.output) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("convert: cannot create {}: {e}", a.output);
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let writer: std::io::Result<Box<dyn BatchWriter>> = match a.format {
        OutputFormat::Jsonl => Ok(Box::new(JsonlWriter::new(out, &layout.arrow))),
        OutputFormat::Arrow => ArrowStreamWriter::new(out, &layout.arrow).map(|w| Box::new(w) as Box<dyn BatchWriter>),
        OutputFormat::Parquet => ParquetFileWriter::new(out, &layout.arrow).map(|w| Box::new(w) as Box<dyn BatchWriter>),
    };
    let mut writer = match writer {
        Ok(w) => w,
        Err(e) => {
            eprintln!("convert: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let pb = progress(total, "converting");
    let mut reader = FrameReader::new(input);
    let mut decoder = Decoder::new(Arc::clone(&layout));
    let mut buf = Vec::new();
    let (mut logs, mut rows, mut bad) = (0u64, 0u64, 0u64);
    let mut failure = None;
    loop {
        match reader.next_into(&mut buf) {
            Ok(None) => break,
            Ok(Some(offset)) => {
                match decoder.decode(&buf) {
                    Ok(n) => rows += n as u64,
                    Err(e) => {
                        bad += 1;
                        pb.suspend(|| eprintln!("log {logs} at byte {offset}: {e}"));
                    }
                }
                logs += 1;
                if decoder.rows() >= BATCH_ROWS || decoder.approx_bytes() >= BATCH_BYTES {
                    if let Err(e) = writer.write(&decoder.finish()) {
                        failure = Some(format!("write error: {e}"));
                        break;
                    }
                    pb.set_position(reader.position());
                }
            }
            Err(e) => {
                failure = Some(format!("unrecoverable input: {e}"));
                break;
            }
        }
    }
    pb.finish_and_clear();
    let result = if decoder.rows() > 0 { writer.write(&decoder.finish()) } else { Ok(()) }.and_then(|()| writer.finish());
    if let Err(e) = result {
        failure.get_or_insert(format!("write error: {e}"));
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
            Ok(t) => t.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0),
            Err(e) => {
                eprintln!("gen: --start-time {:?}: {e}", a.start_time);
                return ExitCode::from(EXIT_USAGE);
            }
        }
    };
    let mut out = match open_output(&a.output) {
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
            model: (cfg.project.clone(), cfg.model_id.clone(), cfg.model_version.clone()),
        },
    );
    let pb = progress(None, "generating");
    let mut malformed = 0u64;
    for i in 0..a.count {
        let log = g.next_log();
        malformed += u64::from(log.malformed);
        if let Err(e) = write_frame(&mut out, &log.bytes) {
            eprintln!("gen: write error: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
        if i % 4096 == 0 {
            pb.set_position(i);
        }
    }
    pb.finish_and_clear();
    if let Err(e) = out.flush() {
        eprintln!("gen: write error: {e}");
        return ExitCode::from(EXIT_FAILURE);
    }
    eprintln!("gen: {} logs written ({malformed} malformed)", a.count);
    ExitCode::SUCCESS
}

/// `run`.
pub fn run(_a: RunArgs) -> ExitCode {
    eprintln!("run: being built");
    ExitCode::from(EXIT_FAILURE)
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
