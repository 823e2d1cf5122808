//! What an offline command writes and where it may write it, decided before anything is read:
//! `convert`'s format from `-f` or the output's extension (a mismatch is refused, so
//! `-o rows.parquet` never holds JSON lines), `gen`'s output never named for rows, and binary
//! never written to a terminal. Pure: the caller says whether stdout is a terminal.

use crate::cli::OutputFormat;
use std::path::Path;

/// The extensions that name a row format, lower case.
const ROW_EXTENSIONS: &[(&str, OutputFormat)] = &[
    ("jsonl", OutputFormat::Jsonl),
    ("ndjson", OutputFormat::Jsonl),
    ("json", OutputFormat::Jsonl),
    ("parquet", OutputFormat::Parquet),
    ("arrow", OutputFormat::Arrow),
    ("arrows", OutputFormat::Arrow),
    ("ipc", OutputFormat::Arrow),
];

/// What an output path's extension says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Extension {
    /// stdout, or a name without an extension (`/dev/null`, `rows`).
    None,
    /// A row format.
    Rows(OutputFormat),
    /// Anything else, as written.
    Other(String),
}

fn extension(output: &str) -> Extension {
    if output == "-" {
        return Extension::None;
    }
    let Some(ext) = Path::new(output).extension() else {
        return Extension::None;
    };
    let ext = ext.to_string_lossy();
    let lower = ext.to_ascii_lowercase();
    match ROW_EXTENSIONS.iter().find(|(e, _)| *e == lower) {
        Some((_, f)) => Extension::Rows(*f),
        None => Extension::Other(ext.into_owned()),
    }
}

/// A format's name as `-f` takes it.
pub fn flag_name(f: OutputFormat) -> &'static str {
    match f {
        OutputFormat::Jsonl => "jsonl",
        OutputFormat::Parquet => "parquet",
        OutputFormat::Arrow => "arrow",
    }
}

/// A format's name in a sentence.
fn title(f: OutputFormat) -> &'static str {
    match f {
        OutputFormat::Jsonl => "JSON lines",
        OutputFormat::Parquet => "Parquet",
        OutputFormat::Arrow => "Arrow IPC",
    }
}

/// `convert`'s format: `-f` when given, else the output's extension; JSON lines for stdout and
/// a name without an extension. `Err`: one line saying what disagrees and what to do (exit 2).
pub fn convert_format(output: &str, flag: Option<OutputFormat>) -> Result<OutputFormat, String> {
    match (flag, extension(output)) {
        (Some(f), Extension::Rows(named)) if f != named => Err(format!(
            "-f {} but -o {output} names {}: drop -f to write {}, or name the output .{}",
            flag_name(f),
            title(named),
            title(named),
            flag_name(f),
        )),
        (Some(f), _) => Ok(f),
        (None, Extension::Rows(named)) => Ok(named),
        (None, Extension::None) => Ok(OutputFormat::Jsonl),
        (None, Extension::Other(ext)) => Err(format!(
            "cannot tell the format of -o {output} from its extension .{ext}: name it .jsonl, \
             .parquet or .arrow, or give -f jsonl|parquet|arrow"
        )),
    }
}

/// `gen` writes length-delimited logs: an output named for rows is refused, since the file
/// would not be what its name says (one line: what to do instead).
pub fn check_gen_output(output: &str) -> Result<(), String> {
    match extension(output) {
        Extension::Rows(f) => Err(format!(
            "-o {output} names {} rows, but gen writes length-delimited PredictionLogs: write \
             them to a .bin file and turn them into rows with `convert -i LOGS.bin -o {output}`",
            title(f)
        )),
        _ => Ok(()),
    }
}

/// Whether a command may write its output: binary (`binary`) to stdout (`-`) when stdout is a
/// terminal is refused with one line saying what to do; a file, a pipe, or text is fine.
pub fn check_terminal(
    output: &str,
    binary: Option<&str>,
    stdout_is_terminal: bool,
) -> Result<(), String> {
    match binary {
        Some(what) if output == "-" && stdout_is_terminal => Err(format!(
            "not writing {what} to a terminal: give -o FILE, or pipe the output into another \
             command"
        )),
        _ => Ok(()),
    }
}

/// What `convert` writes in `f`, when it is binary.
pub fn binary_rows(f: OutputFormat) -> Option<&'static str> {
    match f {
        OutputFormat::Jsonl => None,
        OutputFormat::Parquet => Some("Parquet"),
        OutputFormat::Arrow => Some("Arrow IPC"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OutputFormat::{Arrow, Jsonl, Parquet};

    #[test]
    fn the_extension_names_the_format_and_a_mismatch_is_refused() {
        assert_eq!(convert_format("rows.parquet", None), Ok(Parquet));
        assert_eq!(convert_format("dir.v2/ROWS.Arrow", None), Ok(Arrow));
        assert_eq!(convert_format("rows.ipc", None), Ok(Arrow));
        assert_eq!(convert_format("rows.jsonl", None), Ok(Jsonl));
        assert_eq!(convert_format("-", None), Ok(Jsonl));
        assert_eq!(convert_format("/dev/null", None), Ok(Jsonl));
        assert_eq!(convert_format("dir.v2/rows", None), Ok(Jsonl));
        // An explicit -f wins where the extension names no row format.
        assert_eq!(convert_format("/dev/null", Some(Arrow)), Ok(Arrow));
        assert_eq!(convert_format("rows.out", Some(Parquet)), Ok(Parquet));
        assert_eq!(convert_format("rows.parquet", Some(Parquet)), Ok(Parquet));
        assert_eq!(
            convert_format("rows.parquet", Some(Jsonl)).unwrap_err(),
            "-f jsonl but -o rows.parquet names Parquet: drop -f to write Parquet, or name the \
             output .jsonl"
        );
        assert_eq!(
            convert_format("rows.csv", None).unwrap_err(),
            "cannot tell the format of -o rows.csv from its extension .csv: name it .jsonl, \
             .parquet or .arrow, or give -f jsonl|parquet|arrow"
        );
    }

    #[test]
    fn gen_refuses_an_output_named_for_rows() {
        assert!(check_gen_output("logs.bin").is_ok());
        assert!(check_gen_output("-").is_ok());
        assert!(check_gen_output("/dev/null").is_ok());
        let e = check_gen_output("rows.parquet").unwrap_err();
        assert!(
            e.contains("gen writes length-delimited PredictionLogs"),
            "{e}"
        );
    }

    #[test]
    fn binary_goes_to_a_terminal_never() {
        assert!(check_terminal("-", Some("Parquet"), true).is_err());
        assert!(
            check_terminal("-", Some("Parquet"), false).is_ok(),
            "a pipe"
        );
        assert!(check_terminal("rows.parquet", Some("Parquet"), true).is_ok());
        assert!(
            check_terminal("-", binary_rows(Jsonl), true).is_ok(),
            "text"
        );
        assert_eq!(binary_rows(Arrow), Some("Arrow IPC"));
    }
}
