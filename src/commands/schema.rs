//! `schema`: what a configured sink creates or sends, from the sink's own code, so what is
//! printed is what `run` does: the BigQuery table resource, the MaxCompute `CREATE TABLE`, the
//! Arize schema and body columns.

use super::{load_config, EXIT_USAGE};
use crate::cli::{SchemaArgs, SchemaSink};
use crate::config::{Config, Needs, SinkConfig};
use crate::table::{bigquery_table_resource, TableLayout};
use serde_json::json;
use std::process::ExitCode;

/// `schema`: prints the chosen sink type's schema for every sink of that type, in
/// configuration order (JSON documents one after another, SQL statements each ending in `;`).
pub fn schema(a: SchemaArgs) -> ExitCode {
    let needs = Needs {
        source: false,
        sinks: true,
        bigquery: false,
    };
    let cfg = match load_config(&a.cfg, needs) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let types: Vec<SchemaSink> = cfg.observation_sinks.iter().map(type_of).collect();
    let chosen = match choose(&types, a.sink) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("schema: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let layout = TableLayout::from_config(&cfg);
    let mut text = String::new();
    for sink in &cfg.observation_sinks {
        match (chosen, sink) {
            (SchemaSink::Bigquery, SinkConfig::BigQuery(s)) => {
                let doc = bigquery_table_resource(&layout, &cfg.project, &cfg.model_id, s);
                text += &serde_json::to_string_pretty(&doc).expect("json");
                text.push('\n');
            }
            (SchemaSink::Maxcompute, SinkConfig::MaxCompute(s)) => {
                text += &maxcompute_ddl(&cfg, &layout, &s.project, &s.dataset);
            }
            (SchemaSink::Arize, SinkConfig::Arize(_)) => match arize(&cfg, &layout) {
                Ok(doc) => {
                    text += &serde_json::to_string_pretty(&doc).expect("json");
                    text.push('\n');
                }
                Err(e) => {
                    eprintln!("schema: {e}");
                    return ExitCode::from(EXIT_USAGE);
                }
            },
            _ => {}
        }
    }
    crate::stdout::print("schema", &text)
}

fn type_of(s: &SinkConfig) -> SchemaSink {
    match s {
        SinkConfig::BigQuery(_) => SchemaSink::Bigquery,
        SinkConfig::MaxCompute(_) => SchemaSink::Maxcompute,
        SinkConfig::Arize(_) => SchemaSink::Arize,
    }
}

fn merlin_name(t: SchemaSink) -> &'static str {
    match t {
        SchemaSink::Bigquery => "BIGQUERY",
        SchemaSink::Maxcompute => "MAXCOMPUTE",
        SchemaSink::Arize => "ARIZE",
    }
}

fn flag(t: SchemaSink) -> &'static str {
    match t {
        SchemaSink::Bigquery => "bigquery",
        SchemaSink::Maxcompute => "maxcompute",
        SchemaSink::Arize => "arize",
    }
}

/// The sink type to print: `--sink` when that type is configured, else the one type the
/// configured sinks have. `Err`: one line saying what is configured and what to give.
fn choose(configured: &[SchemaSink], asked: Option<SchemaSink>) -> Result<SchemaSink, String> {
    let mut types: Vec<SchemaSink> = Vec::new();
    for t in configured {
        if !types.contains(t) {
            types.push(*t);
        }
    }
    let names = |ts: &[SchemaSink]| {
        ts.iter()
            .map(|t| merlin_name(*t))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (asked, types.as_slice()) {
        (_, []) => Err(
            "no BIGQUERY, MAXCOMPUTE or ARIZE sink in observation_sinks: schema prints what one \
             of them creates or sends (the local sink's Parquet files have the rows of \
             `convert -o rows.parquet`)"
                .into(),
        ),
        (Some(t), _) if types.contains(&t) => Ok(t),
        (Some(t), _) => Err(format!(
            "--sink {}: no {} sink in observation_sinks (configured: {})",
            flag(t),
            merlin_name(t),
            names(&types)
        )),
        (None, [one]) => Ok(*one),
        (None, several) => Err(format!(
            "observation_sinks has {} sinks: choose one with {}",
            names(several),
            several
                .iter()
                .map(|t| format!("--sink {}", flag(*t)))
                .collect::<Vec<_>>()
                .join(" or ")
        )),
    }
}

/// The MaxCompute sink's `CREATE TABLE` for a missing target, runnable as printed (odpscmd):
/// the settings every statement of the sink runs with, then the statement.
fn maxcompute_ddl(cfg: &Config, layout: &TableLayout, project: &str, dataset: &str) -> String {
    use crate::sink::maxcompute::ddl::{create_table_sql, table_name, SQL_SETTINGS};
    use crate::sink::maxcompute::schema::TableColumn;
    let columns = TableColumn::from_layout(&layout.columns);
    let mut text = format!("-- MaxCompute project {project}\n");
    for (k, v) in SQL_SETTINGS {
        text += &format!("set {k}={v};\n");
    }
    let table = table_name(&cfg.project, &cfg.model_id);
    text += &create_table_sql(dataset, &table, &columns);
    text += ";\n";
    text
}

/// What the Arize sink sends for this model: the `public.Schema` (constants and column roles,
/// and its base64 as it travels) and the Arrow body's columns with their types.
fn arize(cfg: &Config, layout: &TableLayout) -> Result<serde_json::Value, String> {
    use crate::sink::arize::encode::body_schema;
    use crate::sink::arize::schema::pb::schema::{Environment, ModelType};
    use crate::sink::arize::schema::{Plan, SchemaCarrier};
    let plan = Plan::new(cfg).map_err(|e| format!("ARIZE sink: {e}"))?;
    let constants = plan.schema.constants.clone().unwrap_or_default();
    let arrow = plan.schema.arrow_schema.clone().unwrap_or_default();
    let model_type =
        ModelType::try_from(constants.model_type).map_or("UNKNOWN_MODELTYPE", |m| m.as_str_name());
    let environment = Environment::try_from(constants.environment)
        .map_or("UNKNOWN_ENVIRONMENT", |e| e.as_str_name());
    // Only the roles this model fills, as the SDK leaves the others empty.
    let mut roles = serde_json::Map::new();
    for (key, value) in [
        (
            "prediction_id_column_name",
            &arrow.prediction_id_column_name,
        ),
        ("timestamp_column_name", &arrow.timestamp_column_name),
        (
            "prediction_label_column_name",
            &arrow.prediction_label_column_name,
        ),
        (
            "prediction_score_column_name",
            &arrow.prediction_score_column_name,
        ),
        (
            "prediction_group_id_column_name",
            &arrow.prediction_group_id_column_name,
        ),
        ("rank_column_name", &arrow.rank_column_name),
    ] {
        if !value.is_empty() {
            roles.insert(key.into(), json!(value));
        }
    }
    roles.insert(
        "feature_column_names".into(),
        json!(arrow.feature_column_names),
    );
    let body = body_schema(&plan, &layout.arrow, None);
    let columns: Vec<serde_json::Value> = body
        .fields()
        .iter()
        .map(|f| json!({"name": f.name(), "type": f.data_type().to_string()}))
        .collect();
    let (carrier, base64) = match plan.schema_carrier() {
        SchemaCarrier::Header(b) => ("the schema header", b),
        SchemaCarrier::Metadata(b) => ("the Arrow body's arize-schema metadata", b),
    };
    Ok(json!({
        "model_id": constants.model_id,
        "model_version": constants.model_version,
        "model_type": model_type,
        "environment": environment,
        "arrow_schema": roles,
        "body_columns": columns,
        "schema_base64": base64,
        "schema_sent_in": carrier,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use SchemaSink::{Arize, Bigquery, Maxcompute};

    #[test]
    fn the_sink_is_the_one_configured_or_the_one_asked_for() {
        assert_eq!(choose(&[Bigquery, Bigquery], None), Ok(Bigquery));
        assert_eq!(choose(&[Bigquery, Arize], Some(Arize)), Ok(Arize));
        assert_eq!(
            choose(&[Bigquery, Arize], None).unwrap_err(),
            "observation_sinks has BIGQUERY, ARIZE sinks: choose one with --sink bigquery or \
             --sink arize"
        );
        assert_eq!(
            choose(&[Bigquery], Some(Maxcompute)).unwrap_err(),
            "--sink maxcompute: no MAXCOMPUTE sink in observation_sinks (configured: BIGQUERY)"
        );
        assert!(choose(&[], Some(Bigquery))
            .unwrap_err()
            .starts_with("no BIGQUERY, MAXCOMPUTE or ARIZE sink"));
    }
}
