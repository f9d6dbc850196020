//! Typed artifact content and its canonical, content-addressed bytes (FORMATS §6.1 step 1).
//!
//! The bytes that are stored, hashed and sealed are PY-COMPACT-UTF8 of the typed content
//! (`json.dumps(content, ensure_ascii=False, sort_keys=True, separators=(",", ":"))`):
//!
//! * report: `{"body", "type":"report"[, "finding_references"]}`; the references key is
//!   present only when the list is non-empty, so reports written before the field existed keep
//!   their address;
//! * table: `{"columns", "rows", "type":"table"}` with every header and cell passed through
//!   Python's `str()`;
//! * link: `{"kind", "type":"link", "url"}` with `kind` one of [`LINK_KINDS`];
//! * finding: a normalised SARIF 2.1.0 result bound to its provenance. The normalisation is the
//!   reference's `_build_finding_content` (`core/evidence/run_artifacts.py`): text is folded to
//!   `\n` line endings and NFC, the artifact URI is `posixpath.normpath`ed, absolute line
//!   numbers are kept out of the identity (only the span is hashed), and the address is the
//!   SHA-256 of the canonical `{identity, provenance}`.
//!
//! Validation messages are the reference's, because the task server returns them verbatim as
//! the 422 detail.

use bernstein_protocol::pyjson::{Dialect, Object, Value};
use unicode_normalization::UnicodeNormalization;

use crate::audit::python_str;
use crate::crypto::sha256_hex;
use crate::run_journal::python_str_repr;
use crate::{Error, Result};

/// The per-blob cap on canonical content bytes (the reference's `DEFAULT_MAX_BLOB_BYTES`).
pub const MAX_ARTIFACT_BYTES: usize = 1 << 20;

/// The link kinds a link artifact may declare, in Python `sorted()` order.
pub const LINK_KINDS: [&str; 3] = ["dashboard", "document", "preview"];

/// The four artifact shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArtifactType {
    /// A markdown report.
    Report,
    /// A table of string cells.
    Table,
    /// A URL with a declared kind.
    Link,
    /// A normalised SARIF result.
    Finding,
}

impl ArtifactType {
    /// The wire name (`report`, `table`, `link`, `finding`).
    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactType::Report => "report",
            ArtifactType::Table => "table",
            ArtifactType::Link => "link",
            ArtifactType::Finding => "finding",
        }
    }

    /// Parses a wire name.
    ///
    /// # Errors
    ///
    /// [`Error::ArtifactInvalid`] naming the unknown type (the reference's
    /// `unknown artifact type '…'`).
    pub fn from_name(name: &str) -> Result<ArtifactType> {
        match name {
            "report" => Ok(ArtifactType::Report),
            "table" => Ok(ArtifactType::Table),
            "link" => Ok(ArtifactType::Link),
            "finding" => Ok(ArtifactType::Finding),
            other => Err(invalid(format!(
                "unknown artifact type {}",
                python_str_repr(other)
            ))),
        }
    }
}

/// The provenance a finding is bound to; every field must be non-empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FindingProvenance {
    /// The scanner that produced the result.
    pub tool: String,
    /// The scanner's version.
    pub tool_version: String,
    /// Digest of the pinned rule set or vulnerability feed.
    pub pinned_ruleset_or_feed_digest: String,
    /// Hash of the scanner's invocation arguments.
    pub invocation_argv_hash: String,
    /// What was scanned.
    pub target: String,
}

impl FindingProvenance {
    /// The provenance as the reference orders it.
    fn to_object(&self) -> Object {
        Object::new()
            .with("tool", self.tool.as_str())
            .with("tool_version", self.tool_version.as_str())
            .with(
                "pinned_ruleset_or_feed_digest",
                self.pinned_ruleset_or_feed_digest.as_str(),
            )
            .with("invocation_argv_hash", self.invocation_argv_hash.as_str())
            .with("target", self.target.as_str())
    }
}

/// The fields of a post request, as the MCP tool and the task route receive them. Which fields
/// are read depends on the artifact type; the others are ignored, as in the reference's
/// `_build_payload`.
#[derive(Debug, Clone, Default)]
pub struct ArtifactFields {
    /// Report body.
    pub body: String,
    /// Table headers (each passed through Python `str()`).
    pub columns: Vec<Value>,
    /// Table rows (each cell passed through Python `str()`).
    pub rows: Vec<Vec<Value>>,
    /// Link URL.
    pub url: String,
    /// Link kind.
    pub link_kind: String,
    /// The SARIF result of a finding.
    pub sarif_result: Object,
    /// The provenance of a finding.
    pub provenance: FindingProvenance,
}

/// Validated, typed artifact content.
#[derive(Debug, Clone, PartialEq)]
pub enum ArtifactContent {
    /// A markdown report, optionally citing findings.
    Report {
        /// The non-empty markdown body.
        body: String,
        /// `{task_id, key, version?, finding_hash}` objects; empty when the report cites none.
        finding_references: Vec<Object>,
    },
    /// A table.
    Table {
        /// At least one header.
        columns: Vec<String>,
        /// Rows with exactly one cell per header.
        rows: Vec<Vec<String>>,
    },
    /// A link.
    Link {
        /// The non-empty URL.
        url: String,
        /// One of [`LINK_KINDS`].
        kind: String,
    },
    /// A normalised SARIF finding; the object is the whole content (`type`, `address`,
    /// `identity`, `location`, `provenance`, `sarif_result`).
    Finding {
        /// The normalised content.
        content: Object,
    },
}

impl ArtifactContent {
    /// Builds the content of `artifact_type` from request fields (the route's `_build_payload`).
    ///
    /// # Errors
    ///
    /// [`Error::ArtifactInvalid`] for an unknown type or invalid fields.
    pub fn build(artifact_type: &str, fields: &ArtifactFields) -> Result<ArtifactContent> {
        match ArtifactType::from_name(artifact_type)? {
            ArtifactType::Report => ArtifactContent::report(&fields.body),
            ArtifactType::Table => ArtifactContent::table(&fields.columns, &fields.rows),
            ArtifactType::Link => ArtifactContent::link(&fields.url, &fields.link_kind),
            ArtifactType::Finding => {
                ArtifactContent::finding(&fields.sarif_result, &fields.provenance)
            }
        }
    }

    /// A report without finding references.
    ///
    /// # Errors
    ///
    /// [`Error::ArtifactInvalid`] when `body` is empty.
    pub fn report(body: &str) -> Result<ArtifactContent> {
        ArtifactContent::report_citing(body, Vec::new())
    }

    /// A report citing findings; each reference is kept verbatim.
    ///
    /// # Errors
    ///
    /// [`Error::ArtifactInvalid`] when `body` is empty.
    pub fn report_citing(body: &str, finding_references: Vec<Object>) -> Result<ArtifactContent> {
        if body.is_empty() {
            return Err(invalid(
                "report artifact requires a non-empty markdown body".to_owned(),
            ));
        }
        Ok(ArtifactContent::Report {
            body: body.to_owned(),
            finding_references,
        })
    }

    /// A table; headers and cells are converted with Python's `str()`.
    ///
    /// # Errors
    ///
    /// [`Error::ArtifactInvalid`] when there is no column or a row's width differs.
    pub fn table(columns: &[Value], rows: &[Vec<Value>]) -> Result<ArtifactContent> {
        let columns: Vec<String> = columns.iter().map(python_str).collect();
        if columns.is_empty() {
            return Err(invalid(
                "table artifact requires at least one column".to_owned(),
            ));
        }
        let mut normalised = Vec::with_capacity(rows.len());
        for (index, row) in rows.iter().enumerate() {
            if row.len() != columns.len() {
                return Err(invalid(format!(
                    "table row {index} has {} cells, expected {} to match the columns",
                    row.len(),
                    columns.len()
                )));
            }
            normalised.push(row.iter().map(python_str).collect());
        }
        Ok(ArtifactContent::Table {
            columns,
            rows: normalised,
        })
    }

    /// A link.
    ///
    /// # Errors
    ///
    /// [`Error::ArtifactInvalid`] for an empty URL or a kind outside [`LINK_KINDS`].
    pub fn link(url: &str, kind: &str) -> Result<ArtifactContent> {
        if url.is_empty() {
            return Err(invalid("link artifact requires a non-empty url".to_owned()));
        }
        if !LINK_KINDS.contains(&kind) {
            let listed: Vec<String> = LINK_KINDS.iter().map(|k| python_str_repr(k)).collect();
            return Err(invalid(format!(
                "link kind {} is not one of [{}]",
                python_str_repr(kind),
                listed.join(", ")
            )));
        }
        Ok(ArtifactContent::Link {
            url: url.to_owned(),
            kind: kind.to_owned(),
        })
    }

    /// A finding: normalises one SARIF result and binds it to `provenance`.
    ///
    /// # Errors
    ///
    /// [`Error::ArtifactInvalid`] with the reference's message when a required SARIF field is
    /// missing or invalid, or a provenance field is empty.
    pub fn finding(
        sarif_result: &Object,
        provenance: &FindingProvenance,
    ) -> Result<ArtifactContent> {
        let content = build_finding_content(sarif_result, provenance).map_err(invalid)?;
        Ok(ArtifactContent::Finding { content })
    }

    /// The artifact type.
    pub fn artifact_type(&self) -> ArtifactType {
        match self {
            ArtifactContent::Report { .. } => ArtifactType::Report,
            ArtifactContent::Table { .. } => ArtifactType::Table,
            ArtifactContent::Link { .. } => ArtifactType::Link,
            ArtifactContent::Finding { .. } => ArtifactType::Finding,
        }
    }

    /// The declared link kind, or `""` for anything but a link (the journal row's `link_kind`).
    pub fn link_kind(&self) -> &str {
        match self {
            ArtifactContent::Link { kind, .. } => kind,
            _ => "",
        }
    }

    /// The content object whose canonical bytes are addressed.
    pub fn to_object(&self) -> Object {
        match self {
            ArtifactContent::Report {
                body,
                finding_references,
            } => {
                let mut object = Object::new()
                    .with("type", "report")
                    .with("body", body.as_str());
                if !finding_references.is_empty() {
                    let references: Vec<Value> = finding_references
                        .iter()
                        .cloned()
                        .map(Value::Object)
                        .collect();
                    object.insert("finding_references", Value::Array(references));
                }
                object
            }
            ArtifactContent::Table { columns, rows } => Object::new()
                .with("type", "table")
                .with("columns", columns.clone())
                .with(
                    "rows",
                    Value::Array(rows.iter().map(|row| Value::from(row.clone())).collect()),
                ),
            ArtifactContent::Link { url, kind } => Object::new()
                .with("type", "link")
                .with("url", url.as_str())
                .with("kind", kind.as_str()),
            ArtifactContent::Finding { content } => content.clone(),
        }
    }

    /// The canonical content bytes: PY-COMPACT-UTF8 of [`ArtifactContent::to_object`].
    pub fn canonical_bytes(&self) -> Vec<u8> {
        canonical_json(&self.to_object()).into_bytes()
    }
}

fn invalid(reason: String) -> Error {
    Error::ArtifactInvalid { reason }
}

/// PY-COMPACT-UTF8 of an object.
pub(crate) fn canonical_json(object: &Object) -> String {
    Value::Object(object.clone()).dumps(Dialect::PY_COMPACT_UTF8)
}

fn sha256_address(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

/// Folds platform spellings of the same text: `\r\n` and `\r` become `\n`, then NFC.
fn canonical_text(text: &str) -> String {
    text.replace("\r\n", "\n")
        .replace('\r', "\n")
        .nfc()
        .collect()
}

/// Python's `posixpath.normpath`.
pub(crate) fn posix_normpath(path: &str) -> String {
    if path.is_empty() {
        return ".".to_owned();
    }
    // POSIX keeps exactly two leading slashes (implementation-defined meaning); one or three
    // and more collapse to one.
    let leading = if path.starts_with("//") && !path.starts_with("///") {
        "//"
    } else if path.starts_with('/') {
        "/"
    } else {
        ""
    };
    let mut parts: Vec<&str> = Vec::new();
    for component in path.split('/') {
        if component.is_empty() || component == "." {
            continue;
        }
        if component != ".." || (leading.is_empty() && parts.last().is_none_or(|p| *p == "..")) {
            parts.push(component);
        } else if parts.last().is_some() {
            parts.pop();
        }
    }
    let joined = format!("{leading}{}", parts.join("/"));
    if joined.is_empty() {
        ".".to_owned()
    } else {
        joined
    }
}

fn normalise_artifact_uri(uri: &str) -> Result<String, String> {
    let normalised = posix_normpath(&canonical_text(uri).replace('\\', "/"));
    if normalised.is_empty() || normalised == "." {
        return Err("finding SARIF result has an empty normalized artifact URI".to_owned());
    }
    Ok(normalised
        .strip_prefix("./")
        .map(str::to_owned)
        .unwrap_or(normalised))
}

fn required_mapping<'a>(value: &'a Object, key: &str, path: &str) -> Result<&'a Object, String> {
    value
        .get(key)
        .and_then(Value::as_object)
        .ok_or_else(|| format!("finding SARIF result is missing required field {path}.{key}"))
}

fn required_string<'a>(value: &'a Object, key: &str, path: &str) -> Result<&'a str, String> {
    match value.get(key).and_then(Value::as_str) {
        Some(text) if !text.is_empty() => Ok(text),
        _ => Err(format!(
            "finding SARIF result is missing required field {path}.{key}"
        )),
    }
}

/// A value Python's `isinstance(x, int)` accepts (an int or a bool), with its numeric value.
/// Integers beyond `i64` are refused; line and column numbers never reach them.
fn python_int_value(value: &Value) -> Option<i64> {
    match value {
        Value::Bool(b) => Some(i64::from(*b)),
        Value::Int(i) => i.as_i64(),
        _ => None,
    }
}

const REGION_PATH: &str = "result.locations[0].physicalLocation.region";

/// The reference's `_build_finding_content`; `Err` carries its message.
fn build_finding_content(
    sarif_result: &Object,
    provenance: &FindingProvenance,
) -> Result<Object, String> {
    let rule_id = required_string(sarif_result, "ruleId", "result")?;
    let first_location = sarif_result
        .get("locations")
        .and_then(Value::as_array)
        .and_then(<[Value]>::first)
        .and_then(Value::as_object)
        .ok_or_else(|| {
            "finding SARIF result is missing required field result.locations[0]".to_owned()
        })?;
    let physical = required_mapping(first_location, "physicalLocation", "result.locations[0]")?;
    let artifact_location = required_mapping(
        physical,
        "artifactLocation",
        "result.locations[0].physicalLocation",
    )?;
    let uri = normalise_artifact_uri(required_string(
        artifact_location,
        "uri",
        "result.locations[0].physicalLocation.artifactLocation",
    )?)?;
    let region = required_mapping(physical, "region", "result.locations[0].physicalLocation")?;
    let snippet = required_mapping(region, "snippet", REGION_PATH)?;
    let snippet_text = required_string(snippet, "text", &format!("{REGION_PATH}.snippet"))?;

    // `region.get("endLine", start_line)`: a present key wins even when its value is unusable.
    let start_line_value = region.get("startLine").cloned().unwrap_or(Value::Null);
    let end_line_value = region
        .get("endLine")
        .cloned()
        .unwrap_or_else(|| start_line_value.clone());
    let start_line = python_int_value(&start_line_value)
        .filter(|line| *line >= 1)
        .ok_or_else(|| {
            format!("finding SARIF result is missing required field {REGION_PATH}.startLine")
        })?;
    let end_line = python_int_value(&end_line_value)
        .filter(|line| *line >= start_line)
        .ok_or_else(|| format!("finding SARIF result has invalid field {REGION_PATH}.endLine"))?;
    let start_column_value = region.get("startColumn").cloned().unwrap_or(Value::from(1));
    let end_column_value = region
        .get("endColumn")
        .cloned()
        .unwrap_or_else(|| start_column_value.clone());
    let start_column = python_int_value(&start_column_value)
        .filter(|column| *column >= 1)
        .ok_or_else(|| {
            format!("finding SARIF result has invalid field {REGION_PATH}.startColumn")
        })?;
    python_int_value(&end_column_value)
        .filter(|column| *column >= start_column)
        .ok_or_else(|| format!("finding SARIF result has invalid field {REGION_PATH}.endColumn"))?;

    let provenance_object = provenance.to_object();
    for (key, value) in provenance_object.iter() {
        if value.as_str().is_none_or(str::is_empty) {
            return Err(format!("finding provenance requires non-empty {key}"));
        }
    }

    // Absolute lines stay out of the identity: blank lines inserted above an unchanged finding
    // must not change its address. Both bounds are positive and ordered, so this cannot overflow.
    let region_identity = Object::new()
        .with("line_span", end_line - start_line)
        .with("start_column", start_column_value.clone())
        .with("end_column", end_column_value.clone());
    let identity = Object::new()
        .with("rule_id", rule_id)
        .with("artifact_uri", uri.as_str())
        .with("region", region_identity)
        .with(
            "snippet_hash",
            sha256_address(canonical_text(snippet_text).as_bytes()),
        );
    let address_preimage = Object::new()
        .with("identity", identity.clone())
        .with("provenance", provenance_object.clone());
    let address = sha256_address(canonical_json(&address_preimage).as_bytes());
    let location = Object::new()
        .with("artifact_uri", uri.as_str())
        .with("start_line", start_line_value)
        .with("end_line", end_line_value)
        .with("start_column", start_column_value)
        .with("end_column", end_column_value);
    Ok(Object::new()
        .with("type", "finding")
        .with("address", address)
        .with("identity", identity)
        .with("location", location)
        .with("provenance", provenance_object)
        .with("sarif_result", sarif_result.clone()))
}

/// The reference's `_verify_finding_content`: rebuilds the normalised finding from the stored
/// SARIF result and provenance and compares address, identity, location and type. Returns the
/// problem, or `None` when the stored finding is what its SARIF result normalises to.
pub(crate) fn verify_finding_blob(blob: &[u8], where_: &str) -> Option<String> {
    let fail = |reason: String| {
        Some(format!(
            "finding payload does not verify: {reason} ({where_})"
        ))
    };
    let text = match std::str::from_utf8(blob) {
        Ok(text) => text,
        Err(err) => return fail(format!("payload is not UTF-8: {err}")),
    };
    let parsed = match Value::parse(text) {
        Ok(value) => value,
        Err(err) => return fail(err.to_string()),
    };
    let Some(content) = parsed.as_object() else {
        return fail("finding payload must be a JSON object".to_owned());
    };
    let Some(provenance) = content.get("provenance").and_then(Value::as_object) else {
        return fail("finding payload is missing required field provenance".to_owned());
    };
    let Some(sarif_result) = content.get("sarif_result").and_then(Value::as_object) else {
        return fail("finding payload is missing required field sarif_result".to_owned());
    };
    let field = |key: &str| provenance.get(key).map(python_str).unwrap_or_default();
    let recorded = FindingProvenance {
        tool: field("tool"),
        tool_version: field("tool_version"),
        pinned_ruleset_or_feed_digest: field("pinned_ruleset_or_feed_digest"),
        invocation_argv_hash: field("invocation_argv_hash"),
        target: field("target"),
    };
    let expected = match build_finding_content(sarif_result, &recorded) {
        Ok(expected) => expected,
        Err(reason) => return fail(reason),
    };
    let same = |key: &str| match (content.get(key), expected.get(key)) {
        (Some(a), Some(b)) => crate::identity::python_eq(a, b),
        (None, None) => true,
        _ => false,
    };
    let expected_address = expected.get("address").map(python_str).unwrap_or_default();
    if !same("address") {
        let recorded_address = content
            .get("address")
            .map(crate::audit::python_repr)
            .unwrap_or_else(|| "None".to_owned());
        return Some(format!(
            "recorded finding address {recorded_address} does not match recomputed address {expected_address} ({where_})"
        ));
    }
    if !same("identity") {
        return Some(format!(
            "recorded finding identity does not match normalized SARIF result ({where_})"
        ));
    }
    if !same("location") {
        return Some(format!(
            "recorded finding location does not match normalized SARIF result ({where_})"
        ));
    }
    if content.get("type").and_then(Value::as_str) != Some("finding") {
        return Some(format!(
            "recorded finding payload has wrong artifact type ({where_})"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(content: &ArtifactContent) -> String {
        String::from_utf8(content.canonical_bytes()).unwrap()
    }

    #[test]
    fn canonical_bytes_of_the_vector_posts() {
        let check = |content: ArtifactContent, expect: &str| assert_eq!(text(&content), expect);
        check(
            ArtifactContent::report("# Audit summary\n\nAll good. caf\u{e9}").unwrap(),
            "{\"body\":\"# Audit summary\\n\\nAll good. caf\u{e9}\",\"type\":\"report\"}",
        );
        check(
            ArtifactContent::table(
                &[Value::from("model"), Value::from("score")],
                &[
                    vec![Value::from("a"), Value::from("0.9")],
                    vec![Value::from("b"), Value::from(1)],
                ],
            )
            .unwrap(),
            "{\"columns\":[\"model\",\"score\"],\"rows\":[[\"a\",\"0.9\"],[\"b\",\"1\"]],\"type\":\"table\"}",
        );
        check(
            ArtifactContent::link("https://preview.example.com/pr/7", "preview").unwrap(),
            "{\"kind\":\"preview\",\"type\":\"link\",\"url\":\"https://preview.example.com/pr/7\"}",
        );
        check(
            ArtifactContent::report_citing(
                "see",
                vec![Object::new().with("task_id", "t").with("key", "f")],
            )
            .unwrap(),
            "{\"body\":\"see\",\"finding_references\":[{\"key\":\"f\",\"task_id\":\"t\"}],\"type\":\"report\"}",
        );
    }

    #[test]
    fn table_cells_use_python_str() {
        let content = ArtifactContent::table(
            &[Value::from(true)],
            &[
                vec![Value::from(2.0)],
                vec![Value::Null],
                vec![Value::Array(vec![Value::from("x")])],
            ],
        )
        .unwrap();
        assert_eq!(
            text(&content),
            "{\"columns\":[\"True\"],\"rows\":[[\"2.0\"],[\"None\"],[\"['x']\"]],\"type\":\"table\"}"
        );
    }

    #[test]
    fn invalid_content_is_refused_with_the_reference_messages() {
        let check = |result: Result<ArtifactContent>, expect: &str| match result {
            Err(Error::ArtifactInvalid { reason }) => assert_eq!(reason, expect),
            other => panic!("expected a refusal, got {other:?}"),
        };
        check(
            ArtifactContent::report(""),
            "report artifact requires a non-empty markdown body",
        );
        check(
            ArtifactContent::table(&[], &[]),
            "table artifact requires at least one column",
        );
        check(
            ArtifactContent::table(&[Value::from("a")], &[vec![]]),
            "table row 0 has 0 cells, expected 1 to match the columns",
        );
        check(
            ArtifactContent::link("", "preview"),
            "link artifact requires a non-empty url",
        );
        check(
            ArtifactContent::link("u", "video"),
            "link kind 'video' is not one of ['dashboard', 'document', 'preview']",
        );
        check(
            ArtifactContent::build("blob", &ArtifactFields::default()),
            "unknown artifact type 'blob'",
        );
    }

    #[test]
    fn normpath_matches_posixpath() {
        let check =
            |input: &str, expect: &str| assert_eq!(posix_normpath(input), expect, "{input:?}");
        check("", ".");
        check(".", ".");
        check("./a", "a");
        check("a//b/./c/", "a/b/c");
        check("a/../../b", "../b");
        check("../..", "../..");
        check("/../a", "/a");
        check("//a//b", "//a/b");
        check("///a", "/a");
        check("a/b/..", "a");
        check("a/..", ".");
    }

    fn sarif(uri: &str, snippet: &str, start: Value) -> Object {
        let region = Object::new()
            .with("startLine", start)
            .with("snippet", Object::new().with("text", snippet));
        let physical = Object::new()
            .with("artifactLocation", Object::new().with("uri", uri))
            .with("region", region);
        Object::new().with("ruleId", "R1").with(
            "locations",
            Value::Array(vec![Value::Object(
                Object::new().with("physicalLocation", physical),
            )]),
        )
    }

    fn provenance() -> FindingProvenance {
        FindingProvenance {
            tool: "scan".into(),
            tool_version: "1".into(),
            pinned_ruleset_or_feed_digest: "sha256:ab".into(),
            invocation_argv_hash: "h".into(),
            target: "repo".into(),
        }
    }

    #[test]
    fn finding_address_ignores_platform_spelling_and_absolute_lines() {
        let nfd = "src/cafe\u{301}.py";
        let a =
            ArtifactContent::finding(&sarif(nfd, "x\r\ny", Value::from(3)), &provenance()).unwrap();
        let b = ArtifactContent::finding(
            &sarif(".\\src\\caf\u{e9}.py", "x\ny", Value::from(40)),
            &provenance(),
        )
        .unwrap();
        let address = |c: &ArtifactContent| match c {
            ArtifactContent::Finding { content } => content.get("address").cloned(),
            _ => None,
        };
        assert_eq!(address(&a), address(&b));
        assert_ne!(a, b, "the location still records the absolute lines");
        let ArtifactContent::Finding { content } = &a else {
            panic!("not a finding")
        };
        let location = content.get("location").unwrap().as_object().unwrap();
        assert_eq!(
            location.get("artifact_uri"),
            Some(&Value::from("src/caf\u{e9}.py"))
        );
        assert_eq!(verify_finding_blob(&a.canonical_bytes(), "w"), None);
    }

    #[test]
    fn finding_refusals_name_the_field() {
        let check = |result: Result<ArtifactContent>, expect: &str| match result {
            Err(Error::ArtifactInvalid { reason }) => assert_eq!(reason, expect),
            other => panic!("expected a refusal, got {other:?}"),
        };
        check(
            ArtifactContent::finding(&Object::new(), &provenance()),
            "finding SARIF result is missing required field result.ruleId",
        );
        check(
            ArtifactContent::finding(&sarif("a", "s", Value::from(0)), &provenance()),
            "finding SARIF result is missing required field result.locations[0].physicalLocation.region.startLine",
        );
        check(
            ArtifactContent::finding(&sarif("./", "s", Value::from(1)), &provenance()),
            "finding SARIF result has an empty normalized artifact URI",
        );
        check(
            ArtifactContent::finding(
                &sarif("a", "s", Value::from(1)),
                &FindingProvenance {
                    target: String::new(),
                    ..provenance()
                },
            ),
            "finding provenance requires non-empty target",
        );
    }

    #[test]
    fn an_edited_finding_blob_is_reported() {
        let content =
            ArtifactContent::finding(&sarif("a.py", "s", Value::from(2)), &provenance()).unwrap();
        let bytes = String::from_utf8(content.canonical_bytes()).unwrap();
        let edited = bytes.replace("\"start_line\":2", "\"start_line\":3");
        assert_eq!(
            verify_finding_blob(edited.as_bytes(), "w").as_deref(),
            Some("recorded finding location does not match normalized SARIF result (w)")
        );
        assert!(
            verify_finding_blob(b"[1]", "w")
                .unwrap()
                .starts_with("finding payload does not verify")
        );
    }

    /// Canonical bytes produced by the reference's `ArtifactPayload.finding` for the same input
    /// (NFD path with backslashes, CRLF/CR snippet, `startLine: true`, non-ASCII message).
    #[test]
    fn finding_bytes_match_the_reference() {
        let cases: [(&str, &str); 2] = [
            (
                r#"{"ruleId":"R1","level":"warning","locations":[{"physicalLocation":{"artifactLocation":{"uri":".\\src\\cafe\u0301.py"},"region":{"startLine":3,"endLine":5,"startColumn":2,"snippet":{"text":"a\r\nb\rc"}}}}]}"#,
                "{\"address\":\"sha256:c22926945f4ffe345952efa856fa0da348166a14ee1be159334af075f6691cc8\",\"identity\":{\"artifact_uri\":\"src/caf\u{e9}.py\",\"region\":{\"end_column\":2,\"line_span\":2,\"start_column\":2},\"rule_id\":\"R1\",\"snippet_hash\":\"sha256:ea7fb08b7a2dc4619ffb7c7bb38d95a2047935fa165d71b12efd3852a2e6d0cc\"},\"location\":{\"artifact_uri\":\"src/caf\u{e9}.py\",\"end_column\":2,\"end_line\":5,\"start_column\":2,\"start_line\":3},\"provenance\":{\"invocation_argv_hash\":\"h\",\"pinned_ruleset_or_feed_digest\":\"sha256:ab\",\"target\":\"repo\",\"tool\":\"scan\",\"tool_version\":\"1.0\"},\"sarif_result\":{\"level\":\"warning\",\"locations\":[{\"physicalLocation\":{\"artifactLocation\":{\"uri\":\".\\\\src\\\\cafe\u{301}.py\"},\"region\":{\"endLine\":5,\"snippet\":{\"text\":\"a\\r\\nb\\rc\"},\"startColumn\":2,\"startLine\":3}}}],\"ruleId\":\"R1\"},\"type\":\"finding\"}",
            ),
            (
                r#"{"ruleId":"R2","locations":[{"physicalLocation":{"artifactLocation":{"uri":"a//b/../c.py"},"region":{"startLine":true,"snippet":{"text":"x"}}}}],"message":{"text":"\u00e9"}}"#,
                "{\"address\":\"sha256:a01af1e0a2873508dd2ab45d6d463471cc17f45cb6d2ea39bab4393c89e2e4f0\",\"identity\":{\"artifact_uri\":\"a/c.py\",\"region\":{\"end_column\":1,\"line_span\":0,\"start_column\":1},\"rule_id\":\"R2\",\"snippet_hash\":\"sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881\"},\"location\":{\"artifact_uri\":\"a/c.py\",\"end_column\":1,\"end_line\":true,\"start_column\":1,\"start_line\":true},\"provenance\":{\"invocation_argv_hash\":\"h\",\"pinned_ruleset_or_feed_digest\":\"sha256:ab\",\"target\":\"repo\",\"tool\":\"scan\",\"tool_version\":\"1.0\"},\"sarif_result\":{\"locations\":[{\"physicalLocation\":{\"artifactLocation\":{\"uri\":\"a//b/../c.py\"},\"region\":{\"snippet\":{\"text\":\"x\"},\"startLine\":true}}}],\"message\":{\"text\":\"\u{e9}\"},\"ruleId\":\"R2\"},\"type\":\"finding\"}",
            ),
        ];
        let provenance = FindingProvenance {
            tool: "scan".into(),
            tool_version: "1.0".into(),
            pinned_ruleset_or_feed_digest: "sha256:ab".into(),
            invocation_argv_hash: "h".into(),
            target: "repo".into(),
        };
        for (sarif, expect) in cases {
            let sarif = Value::parse(sarif).unwrap();
            let content =
                ArtifactContent::finding(sarif.as_object().unwrap(), &provenance).unwrap();
            assert_eq!(text(&content), expect);
            assert_eq!(verify_finding_blob(expect.as_bytes(), "w"), None);
        }
    }
}
