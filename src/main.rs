//! Entry point: parse the command line, dispatch, map the outcome to an exit code.
//! Exit codes: 0 done, 1 runtime failure, 2 invalid usage or configuration.

use clap::Parser;
use observation_publisher::cli::{self, Cli, Command};
use observation_publisher::{commands, merlin_entry};
use std::process::ExitCode;

fn main() -> ExitCode {
    // Merlin's pod spec runs `python -m publisher +environment=config`; the image ships `python`
    // as a symlink to this binary. Kubernetes' `command` replaces the entrypoint, so the name
    // decides before any parsing.
    let mut args = std::env::args_os();
    if args
        .next()
        .is_some_and(|argv0| merlin_entry::is_python_name(&argv0))
    {
        return commands::merlin(&args.collect::<Vec<_>>());
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // A misplaced override (`key=value` without `--set`) is quoted by clap: show its
            // key, never its value.
            // `args_os`: an argument that is not UTF-8 is an error to report, not a panic.
            let args: Vec<String> = std::env::args_os()
                .skip(1)
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            eprint!("{}", cli::without_values(&e.render().to_string(), &args));
            return ExitCode::from(2);
        }
        // --help, --version: printed on stdout, exit 0.
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Convert(a) => commands::convert(a),
        Command::Gen(a) => commands::gen(a),
        Command::Schema(a) => commands::schema(a),
        Command::CheckConfig(a) => commands::check_config(a),
        Command::Run(a) => commands::run(a),
        Command::Produce(a) => commands::produce(a),
        Command::Bootstrap(a) => commands::bootstrap(a),
    }
}
