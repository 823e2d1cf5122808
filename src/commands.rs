//! The subcommands' bodies. Each loads only the configuration it needs, reports every problem
//! at once (exit 2), and returns an exit code.

use crate::cli::{ConfigArgs, ConfigOnlyArgs, ConvertArgs, GenArgs, RunArgs};
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

/// `convert`.
pub fn convert(_a: ConvertArgs) -> ExitCode {
    eprintln!("convert: being built");
    ExitCode::from(EXIT_FAILURE)
}

/// `gen`.
pub fn gen(_a: GenArgs) -> ExitCode {
    eprintln!("gen: being built");
    ExitCode::from(EXIT_FAILURE)
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
