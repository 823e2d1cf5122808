//! The bodies the clients send and read (pure): the SQL instance XML pyodps posts, the instance
//! and task status, the table XML with its schema JSON, the Tunnel's session JSON.

use super::schema::{OdpsType, TableColumn};

/// The text of the first `<tag …>…</tag>` element (CDATA unwrapped, entities decoded).
pub fn tag_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}");
    let mut from = 0;
    let start = loop {
        let at = from + xml[from..].find(&open)?;
        let after = at + open.len();
        match xml[after..].chars().next() {
            Some('>') | Some(' ') | Some('/') => break after,
            _ => from = after,
        }
    };
    let gt = start + xml[start..].find('>')?;
    if xml[..gt].ends_with('/') {
        return Some(String::new());
    }
    let close = format!("</{tag}>");
    let end = gt + 1 + xml[gt + 1..].find(&close)?;
    Some(inner_text(&xml[gt + 1..end]))
}

fn inner_text(s: &str) -> String {
    let t = s.trim();
    if let Some(rest) = t.strip_prefix("<![CDATA[") {
        if let Some(body) = rest.strip_suffix("]]>") {
            return body.to_string();
        }
    }
    t.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The body of `POST /projects/{p}/instances` for one SQL statement, as pyodps's
/// `Instance.AnonymousSQLTask` posts it: priority 9, the settings as the JSON `settings`
/// property. A `]]>` inside the statement is split across two CDATA sections.
pub fn instance_xml(sql: &str, settings: &[(&str, &str)]) -> String {
    let settings: serde_json::Map<String, serde_json::Value> = settings
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    let sql = sql.replace("]]>", "]]]]><![CDATA[>");
    format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><Instance><Job><Priority>9</Priority><Tasks><SQL>\
         <Name>AnonymousSQLTask</Name><Config><Property><Name>settings</Name><Value>{}</Value>\
         </Property></Config><Query><![CDATA[{sql}]]></Query></SQL></Tasks><DAG><RunMode>Sequence\
         </RunMode></DAG></Job></Instance>",
        xml_escape(&serde_json::Value::Object(settings).to_string())
    )
}

/// The instance id at the end of a `Location` header.
pub fn instance_id(location: &str) -> Option<&str> {
    let id = location.trim_end_matches('/').rsplit('/').next()?;
    (!id.is_empty()).then_some(id)
}

/// Every task of a `?taskstatus` answer: (name, status).
pub fn task_statuses(xml: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(at) = rest.find("<Task ").or_else(|| rest.find("<Task>")) {
        let Some(end) = rest[at..].find("</Task>") else {
            break;
        };
        let task = &rest[at..at + end];
        out.push((
            tag_text(task, "Name").unwrap_or_default(),
            tag_text(task, "Status").unwrap_or_default(),
        ));
        rest = &rest[at + end + "</Task>".len()..];
    }
    out
}

/// A page of a table listing (`GET /projects/{p}/tables`, pyodps `Tables.iterate`): the names
/// of its `<Table>` entries and the `<Marker>` of the next page (empty or absent: the last).
pub fn table_names(xml: &str) -> (Vec<String>, Option<String>) {
    let mut names = Vec::new();
    let mut rest = xml;
    while let Some(at) = rest.find("<Table>").or_else(|| rest.find("<Table ")) {
        let Some(end) = rest[at..].find("</Table>") else {
            break;
        };
        if let Some(n) = tag_text(&rest[at..at + end], "Name") {
            names.push(n);
        }
        rest = &rest[at + end + "</Table>".len()..];
    }
    let marker = tag_text(xml, "Marker").filter(|m| !m.is_empty());
    (names, marker)
}

/// The error text of a `?result` answer: every task's `<Result>`, joined.
pub fn result_text(xml: &str) -> String {
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(at) = rest.find("<Result") {
        let piece = &rest[at..];
        match tag_text(piece, "Result") {
            Some(t) => out.push(t),
            None => break,
        }
        rest = &piece["<Result".len()..];
    }
    out.join("\n")
}

/// A table's columns (partition columns excluded) from the schema JSON (`{"columns": [{"name",
/// "type"}…], "partitionKeys": […]}`): in the table XML's `<Schema>` CDATA, or a Tunnel session's
/// `Schema`. A type we do not write (e.g. `DATETIME`, `DECIMAL`) is an error naming the column.
pub fn columns_of(schema: &serde_json::Value) -> Result<Vec<TableColumn>, String> {
    let cols = schema
        .get("columns")
        .and_then(|c| c.as_array())
        .ok_or("the schema has no columns")?;
    cols.iter()
        .map(|c| {
            let name = c
                .get("name")
                .and_then(|n| n.as_str())
                .ok_or("a column has no name")?;
            let ty = c.get("type").and_then(|n| n.as_str()).unwrap_or("");
            let ty = OdpsType::parse(ty).ok_or_else(|| {
                format!("column {name:?} has type {ty:?}, which the sink does not write")
            })?;
            Ok(TableColumn {
                name: name.to_string(),
                ty,
            })
        })
        .collect()
}

/// The columns of a table XML (`GET /projects/{p}/tables/{t}`).
pub fn table_columns(xml: &str) -> Result<Vec<TableColumn>, String> {
    let schema = tag_text(xml, "Schema").ok_or("the table answer has no <Schema>")?;
    let v: serde_json::Value =
        serde_json::from_str(&schema).map_err(|e| format!("the table's schema JSON: {e}"))?;
    columns_of(&v)
}

/// A Tunnel upload session (`POST …?uploads=1`, `GET …?uploadid=X`, the commit's answer).
#[derive(Debug, Clone, PartialEq)]
pub struct UploadSession {
    /// `UploadID`.
    pub id: String,
    /// `Status` (`normal` while blocks may be written).
    pub status: String,
    /// The table's columns in the session's order (the tags of the records).
    pub columns: Vec<TableColumn>,
    /// `UploadedBlockList`: the block ids the service holds.
    pub blocks: Vec<u64>,
}

/// Reads a session JSON.
pub fn upload_session(body: &[u8]) -> Result<UploadSession, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("the upload session's JSON: {e}"))?;
    let id = v
        .get("UploadID")
        .and_then(|i| i.as_str())
        .ok_or("the upload session has no UploadID")?
        .to_string();
    let status = v
        .get("Status")
        .and_then(|i| i.as_str())
        .unwrap_or("")
        .to_string();
    let columns = match v.get("Schema") {
        Some(s) => columns_of(s)?,
        None => Vec::new(),
    };
    let blocks = v
        .get("UploadedBlockList")
        .and_then(|b| b.as_array())
        .map(|b| {
            b.iter()
                .filter_map(|x| x.get("BlockID").and_then(|i| i.as_u64()))
                .collect()
        })
        .unwrap_or_default();
    Ok(UploadSession {
        id,
        status,
        columns,
        blocks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_cdata_and_entities() {
        let x = "<Instance><Status>Terminated</Status><Tasks><Task Type=\"SQL\"><Name>A</Name>\
                 <Status>Failed</Status></Task><Task><Name>B</Name><Status>Success</Status></Task>\
                 </Tasks></Instance>";
        assert_eq!(tag_text(x, "Status").as_deref(), Some("Terminated"));
        assert_eq!(
            task_statuses(x),
            vec![
                ("A".to_string(), "Failed".to_string()),
                ("B".to_string(), "Success".to_string())
            ]
        );
        assert_eq!(
            tag_text("<a><StatusX>1</StatusX><Status>2</Status></a>", "Status").as_deref(),
            Some("2")
        );
        assert_eq!(
            tag_text("<M>a &amp;&lt;b&gt;</M>", "M").as_deref(),
            Some("a &<b>")
        );
        let r = "<Instance><Tasks><Task><Result Format=\"text\"><![CDATA[ODPS-0130161: a < b]]></Result></Task></Tasks></Instance>";
        assert_eq!(result_text(r), "ODPS-0130161: a < b");
    }

    #[test]
    fn the_instance_body_carries_the_statement_and_settings() {
        let x = instance_xml("select ']]>' from t", &[("odps.namespace.schema", "true")]);
        assert!(
            x.contains("<Value>{&quot;odps.namespace.schema&quot;:&quot;true&quot;}</Value>"),
            "{x}"
        );
        assert!(
            x.contains("<Query><![CDATA[select ']]]]><![CDATA[>' from t]]></Query>"),
            "{x}"
        );
        assert_eq!(
            instance_id("http://h/api/projects/p/instances/2026abc"),
            Some("2026abc")
        );
        assert_eq!(instance_id(""), None);
    }

    #[test]
    fn a_table_listing_page_gives_names_and_the_next_marker() {
        let page = "<?xml version=\"1.0\"?><Tables><Marker>m2</Marker><MaxItems>2</MaxItems>\
            <Table><Name>t_stg_a_1</Name><Owner>o</Owner></Table>\
            <Table><Name>t_stg_b_2</Name></Table></Tables>";
        assert_eq!(
            table_names(page),
            (
                vec!["t_stg_a_1".into(), "t_stg_b_2".into()],
                Some("m2".into())
            )
        );
        let last = "<Tables><Marker></Marker><MaxItems>0</MaxItems></Tables>";
        assert_eq!(table_names(last), (vec![], None));
    }

    #[test]
    fn table_and_session_schemas() {
        let xml = r#"<Table><Name>t</Name><Schema><![CDATA[{"columns":[{"name":"a","type":"BIGINT"},{"name":"ts","type":"TIMESTAMP"}],"partitionKeys":[{"name":"pt","type":"STRING"}]}]]></Schema></Table>"#;
        let cols = table_columns(xml).unwrap();
        assert_eq!(cols.len(), 2);
        assert_eq!(
            (cols[1].name.as_str(), cols[1].ty),
            ("ts", OdpsType::Timestamp)
        );
        let bad = r#"<Table><Schema><![CDATA[{"columns":[{"name":"d","type":"DECIMAL(10,2)"}]}]]></Schema></Table>"#;
        assert!(table_columns(bad).unwrap_err().contains("\"d\""));
        let s = upload_session(br#"{"UploadID":"u1","Status":"normal","UploadedBlockList":[{"BlockID":0},{"BlockID":7}],"Schema":{"columns":[{"name":"a","type":"STRING"}]}}"#).unwrap();
        assert_eq!(
            (s.id.as_str(), s.status.as_str(), s.blocks.as_slice()),
            ("u1", "normal", &[0, 7][..])
        );
        assert_eq!(s.columns[0].ty, OdpsType::String);
    }
}
