//! The ADR-009 lineage log behind `bernstein_verify_lineage` (FORMATS §6.2), byte-compatible
//! with Bernstein 3.23's `core/lineage/{entry,store,signed_write}.py`.
//!
//! Layout under `.sdd/lineage/`:
//!
//! * `log.jsonl`: the source of truth, one entry per line;
//! * `by-artefact/<aa>/<sha256(path)>.jsonl`: the same lines per artefact (rebuildable);
//! * `tips/<sha256(path)>.json`: `{"merged":[…],"open":[…]}` (rebuildable);
//! * `signatures/<aa>/<sha256(path)>/<entry-hex>.jws`: the agent's detached JWS of each entry.
//!
//! An entry is PY-COMPACT-UTF8 (`ensure_ascii=False`, sorted, compact) of
//! `{v:1, artefact_path, artefact_kind, content_hash, parent_hashes, agent_id, agent_card_kid,
//! tool_call_id, span_id, ts_ns, operator_hmac[, optional fields, dropped when null]}`. The
//! dialect is established from the writer, `entry.canonicalise`, which dumps with
//! `ensure_ascii=False`:
//!
//! * `entry_hash = "sha256:" + sha256(canonical)`;
//! * `operator_hmac = hex(HMAC-SHA256(operator key, canonical with operator_hmac = ""))`;
//! * the JWS (`b64=false`, kid = `agent_card_kid`) signs `protected + "." + canonical`.
//!
//! **Verification checks more than the reference.** The reference's `_verify_chain` checks
//! only that each line equals `json.dumps(sort_keys, compact)` of itself — with the default
//! `ensure_ascii=True`, so any entry holding a non-ASCII character is reported non-canonical —
//! and that parents exist; it checks neither the operator HMAC nor the signatures, and its MCP
//! tool always errors in 3.23. [`verify_lineage`] checks every line of the log in the writer's
//! dialect, the entry schema, every parent, *and* every entry's operator HMAC and JWS (against
//! the Agent Cards the caller supplies), and reports every problem with its line.
//!
//! [`LineageLog::append`] is the signed-write path (`seal_write`): it chains a new entry to the
//! artefact's single open tip, tags and signs it, and writes the log line, the projection line,
//! the tip file and the signature sidecar under an exclusive `flock` on `log.jsonl`.

mod cards;
mod verify;

use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use bernstein_protocol::pyjson::{Dialect, Object, Value};

use crate::artifacts::{content_address, lineage_dir, write_atomically};
use crate::crypto::{hmac_sha256_hex, sha256_hex};
use crate::identity::SigningIdentity;
use crate::run_journal::{contained_path, python_str_repr};
use crate::{Error, Result};

pub use cards::{AgentCard, AgentCards, DEFAULT_PROTOCOL_VERSION};
pub use verify::{LineageProblem, LineageProblemKind, LineageVerification, verify_lineage};

/// The log file inside `.sdd/lineage`.
pub const LOG_FILE_NAME: &str = "log.jsonl";
/// The per-artefact projection directory.
pub const BY_ARTEFACT_DIR: &str = "by-artefact";
/// The tip-set directory.
pub const TIPS_DIR: &str = "tips";
/// The signature sidecar directory.
pub const SIGNATURES_DIR: &str = "signatures";
/// The only entry version.
pub const LINEAGE_ENTRY_VERSION: i64 = 1;

/// The recordable artefact kinds.
pub const ARTEFACT_KINDS: [&str; 14] = [
    "file",
    "sdd-runtime",
    "mcp-result",
    "config",
    "tool-result",
    "report",
    "dataset",
    "action_log",
    "ops_result",
    "query-result",
    "external",
    "finding",
    "coverage",
    "blob",
];
/// The provenance trust classes an entry may carry.
pub const TRUST_CLASSES: [&str; 5] = [
    "operator",
    "workspace",
    "first_party",
    "third_party",
    "public",
];
/// The data-sensitivity classes an entry may carry.
pub const SENSITIVITY_CLASSES: [&str; 4] = ["public", "internal", "confidential", "restricted"];
/// The activity sources an entry may carry.
pub const ACTIVITY_SOURCES: [&str; 2] = ["scheduler", "adapter"];

/// `(shard, full)`: the hex SHA-256 of the artefact path and its first two characters.
pub fn artefact_digest(artefact_path: &str) -> (String, String) {
    let full = sha256_hex(artefact_path.as_bytes());
    (full[..2].to_owned(), full)
}

/// The operator HMAC of an entry object: over its canonical bytes with `operator_hmac` set to
/// `""`.
pub fn operator_hmac(entry: &Object, operator_key: &[u8]) -> String {
    let mut blanked = entry.clone();
    blanked.insert("operator_hmac", "");
    hmac_sha256_hex(operator_key, &[canonical_entry(&blanked).as_bytes()])
}

/// The canonical bytes of an entry object (PY-COMPACT-UTF8).
pub fn canonical_entry(entry: &Object) -> String {
    Value::Object(entry.clone()).dumps(Dialect::PY_COMPACT_UTF8)
}

/// `sha256:<hex>` of an entry's canonical bytes.
pub fn entry_hash(entry: &Object) -> String {
    format!("sha256:{}", sha256_hex(canonical_entry(entry).as_bytes()))
}

/// The open and merged tips of one artefact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TipSet {
    /// Heads no other entry names as a parent.
    pub open: Vec<String>,
    /// Former fork siblings consumed by a merge entry.
    pub merged: Vec<String>,
}

impl TipSet {
    /// Projects `(entry_hash, parent_hashes)` pairs in log order (the reference's
    /// `_compute_tips_from_entries`): a linear successor demotes its parent silently; only a
    /// multi-parent merge records what it consumed as `merged`.
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = (&'a str, &'a [String])>) -> TipSet {
        let mut tips = TipSet::default();
        for (hash, parents) in entries {
            if !tips.open.iter().any(|h| h == hash) {
                tips.open.push(hash.to_owned());
            }
            let is_merge = parents.len() >= 2;
            for parent in parents {
                if let Some(at) = tips.open.iter().position(|h| h == parent) {
                    tips.open.remove(at);
                    if is_merge && !tips.merged.contains(parent) {
                        tips.merged.push(parent.clone());
                    }
                }
            }
        }
        tips
    }

    /// The tip file's bytes: `json.dumps(tips, sort_keys=True, separators=(",", ":"))`.
    pub fn to_json(&self) -> String {
        Value::Object(
            Object::new()
                .with("open", self.open.clone())
                .with("merged", self.merged.clone()),
        )
        .dumps(Dialect::PY_COMPACT_ASCII)
    }
}

/// A write to seal into the log.
#[derive(Debug, Clone)]
pub struct NewLineageEntry<'a> {
    /// Repo-relative POSIX path of the artefact written.
    pub artefact_path: &'a str,
    /// One of [`ARTEFACT_KINDS`] (`file` for a file write).
    pub artefact_kind: &'a str,
    /// The bytes that landed (hashed into `content_hash`).
    pub content: &'a [u8],
    /// The writing agent, e.g. `agent:worker-a`.
    pub agent_id: &'a str,
    /// The key id of the agent's card; the JWS is signed under it.
    pub agent_card_kid: &'a str,
    /// Cross-link to the originating tool call.
    pub tool_call_id: &'a str,
    /// The span id carried verbatim in the signed body.
    pub span_id: &'a str,
    /// Entry timestamp in nanoseconds.
    pub ts_ns: u64,
    /// Cross-artefact parents recorded after the artefact's own tip (duplicates dropped).
    pub extra_parents: &'a [String],
    /// Optional provenance trust class (one of [`TRUST_CLASSES`]).
    pub trust_class: Option<&'a str>,
    /// Optional data classification (one of [`SENSITIVITY_CLASSES`]).
    pub sensitivity: Option<&'a str>,
}

/// What an append wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendedLineageEntry {
    /// The entry object.
    pub entry: Object,
    /// Its canonical line (without the newline).
    pub line: String,
    /// `sha256:<hex>` of the line.
    pub entry_hash: String,
    /// The detached JWS written to the sidecar.
    pub jws: String,
}

/// The lineage log of one project.
#[derive(Debug, Clone)]
pub struct LineageLog {
    project_root: PathBuf,
}

impl LineageLog {
    /// The log under `<project_root>/.sdd/lineage`. Opening does no IO.
    pub fn for_project(project_root: &Path) -> LineageLog {
        LineageLog {
            project_root: project_root.to_path_buf(),
        }
    }

    /// The log's entries in file order, each with its canonical line. A missing log has none;
    /// lines that do not parse as objects are skipped, as the reference's reader skips them.
    ///
    /// # Errors
    ///
    /// [`Error::Containment`] or [`Error::Io`] when the log exists but cannot be read.
    pub fn read_entries(&self) -> Result<Vec<Object>> {
        let path = self.log_path()?;
        let bytes = match crate::regular_file::read_regular(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(Error::io("read", &path, err)),
        };
        Ok(bytes
            .split(|b| *b == b'\n')
            .filter_map(|line| std::str::from_utf8(line).ok())
            .filter(|line| !line.trim().is_empty())
            .filter_map(|line| Value::parse(line).ok())
            .filter_map(|value| match value {
                Value::Object(entry) => Some(entry),
                _ => None,
            })
            .collect())
    }

    /// The body of the `lineage://artefact/{artefact_path}` resource: the canonical JSON of
    /// each entry for that artefact, joined by `\n`.
    ///
    /// # Errors
    ///
    /// As [`LineageLog::read_entries`].
    pub fn artefact_resource_body(&self, artefact_path: &str) -> Result<String> {
        let lines: Vec<String> = self
            .read_entries()?
            .iter()
            .filter(|entry| {
                entry.get("artefact_path").and_then(Value::as_str) == Some(artefact_path)
            })
            .map(canonical_entry)
            .collect();
        Ok(lines.join("\n"))
    }

    /// The body of the `lineage://stats` resource: `{agents_seen, artefacts, last_24h_entries,
    /// open_forks, total_entries}` with sorted keys, counted over the whole log; an entry is in
    /// the last 24 hours when its `ts_ns` is at or after `now_ns` minus a day, and an open fork
    /// is an artefact whose tip set has more than one open tip.
    ///
    /// # Errors
    ///
    /// As [`LineageLog::read_entries`], or when a tip file cannot be read.
    pub fn stats_resource_body(&self, now_ns: u128) -> Result<String> {
        let entries = self.read_entries()?;
        let cutoff = now_ns.saturating_sub(24 * 3_600 * 1_000_000_000);
        let mut artefacts = std::collections::BTreeSet::new();
        let mut agents = std::collections::BTreeSet::new();
        let mut last_day = 0u64;
        for entry in &entries {
            if let Some(path) = entry.get("artefact_path").and_then(Value::as_str) {
                artefacts.insert(path.to_owned());
            }
            if let Some(agent) = entry.get("agent_id").and_then(Value::as_str) {
                agents.insert(agent.to_owned());
            }
            let ts = entry.get("ts_ns").and_then(|v| match v {
                Value::Int(i) => i.as_str().parse::<u128>().ok(),
                _ => None,
            });
            if ts.is_some_and(|ts| ts >= cutoff) {
                last_day += 1;
            }
        }
        let mut open_forks = 0u64;
        for path in &artefacts {
            if self.tip_set(path)?.open.len() > 1 {
                open_forks += 1;
            }
        }
        let body = Object::new()
            .with("total_entries", entries.len())
            .with("artefacts", artefacts.len())
            .with("open_forks", open_forks)
            .with("agents_seen", agents.into_iter().collect::<Vec<_>>())
            .with("last_24h_entries", last_day);
        Ok(Value::Object(body).dumps(Dialect::PY_SPACED))
    }

    /// The containment-checked path of `segments` under `.sdd/lineage`.
    ///
    /// # Errors
    ///
    /// [`Error::Containment`] when it resolves outside `.sdd/lineage`.
    pub fn path(&self, segments: &[&str]) -> Result<PathBuf> {
        contained_path(
            &self.project_root,
            &lineage_dir(&self.project_root),
            segments,
        )
    }

    /// `log.jsonl`.
    ///
    /// # Errors
    ///
    /// As [`LineageLog::path`].
    pub fn log_path(&self) -> Result<PathBuf> {
        self.path(&[LOG_FILE_NAME])
    }

    /// The signature sidecar of `entry_hash` (`sha256:` stripped from the file name).
    ///
    /// # Errors
    ///
    /// As [`LineageLog::path`].
    pub fn signature_path(&self, artefact_path: &str, entry_hash: &str) -> Result<PathBuf> {
        let (shard, full) = artefact_digest(artefact_path);
        let stem = entry_hash
            .split_once(':')
            .map_or(entry_hash, |(_, hex)| hex);
        let file = format!("{stem}.jws");
        if stem.is_empty() || stem.contains(['/', '\\', '\0']) || stem.starts_with('.') {
            return Err(Error::Malformed {
                what: "lineage entry hash",
                reason: format!(
                    "{} cannot name a signature file",
                    python_str_repr(entry_hash)
                ),
            });
        }
        self.path(&[SIGNATURES_DIR, &shard, &full, &file])
    }

    /// The per-artefact projection file.
    ///
    /// # Errors
    ///
    /// As [`LineageLog::path`].
    pub fn projection_path(&self, artefact_path: &str) -> Result<PathBuf> {
        let (shard, full) = artefact_digest(artefact_path);
        self.path(&[BY_ARTEFACT_DIR, &shard, &format!("{full}.jsonl")])
    }

    /// The tip file.
    ///
    /// # Errors
    ///
    /// As [`LineageLog::path`].
    pub fn tip_path(&self, artefact_path: &str) -> Result<PathBuf> {
        let (_, full) = artefact_digest(artefact_path);
        self.path(&[TIPS_DIR, &format!("{full}.json")])
    }

    /// The tip set of `artefact_path`, projected from `log.jsonl` itself (the source of truth,
    /// rather than the rebuildable tip file). Lines that do not parse are skipped.
    ///
    /// # Errors
    ///
    /// As [`LineageLog::path`], or [`Error::Io`] when the log exists but cannot be read.
    pub fn tip_set(&self, artefact_path: &str) -> Result<TipSet> {
        let bytes = match crate::regular_file::read_regular(&self.log_path()?) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(err) => return Err(Error::io("read", self.log_path()?, err)),
        };
        Ok(tips_in(&bytes, artefact_path))
    }

    /// Seals one signed write (the reference's `seal_write`) and returns it.
    ///
    /// # Errors
    ///
    /// [`Error::Malformed`] for an unsafe artefact path, an unknown kind or class, or a parent
    /// that is not a `sha256:` hash; [`Error::EvidenceUnusable`] when the log's last line is
    /// torn; [`Error::Containment`] or [`Error::Io`].
    pub fn append(
        &self,
        new: &NewLineageEntry<'_>,
        operator_key: &[u8],
        signer: &SigningIdentity,
    ) -> Result<AppendedLineageEntry> {
        check_new_entry(new)?;
        let log_path = self.log_path()?;
        let root = lineage_dir(&self.project_root);
        crate::durable::create_dir_all_durable(&root)
            .map_err(|err| Error::io("create", &root, err))?;
        let log_path_checked = self.log_path()?;
        let mut log = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&log_path_checked)
            .map_err(|err| Error::io("open", &log_path, err))?;
        log.lock()
            .map_err(|err| Error::io("lock", &log_path, err))?;
        let mut existing = Vec::new();
        log.read_to_end(&mut existing)
            .map_err(|err| Error::io("read", &log_path, err))?;
        if !existing.is_empty() && !existing.ends_with(b"\n") {
            return Err(Error::EvidenceUnusable {
                path: log_path,
                reason: "the last line is torn (no trailing newline)".to_owned(),
            });
        }

        let tips = tips_in(&existing, new.artefact_path);
        let mut parents: Vec<String> = tips.open.into_iter().take(1).collect();
        for parent in new.extra_parents {
            if !parents.contains(parent) {
                parents.push(parent.clone());
            }
        }
        let mut entry = Object::new()
            .with("v", LINEAGE_ENTRY_VERSION)
            .with("artefact_path", new.artefact_path)
            .with("artefact_kind", new.artefact_kind)
            .with("content_hash", content_address(new.content))
            .with("parent_hashes", parents.clone())
            .with("agent_id", new.agent_id)
            .with("agent_card_kid", new.agent_card_kid)
            .with("tool_call_id", new.tool_call_id)
            .with("span_id", new.span_id)
            .with("ts_ns", new.ts_ns)
            .with("operator_hmac", "");
        if let Some(class) = new.trust_class {
            entry.insert("trust_class", class);
        }
        if let Some(class) = new.sensitivity {
            entry.insert("sensitivity", class);
        }
        let tag = operator_hmac(&entry, operator_key);
        entry.insert("operator_hmac", tag);
        let line = canonical_entry(&entry);
        let hash = format!("sha256:{}", sha256_hex(line.as_bytes()));
        let jws = signer.sign_detached_jws(line.as_bytes(), new.agent_card_kid);

        // 1. The log line, in one write at the end, made durable before the projections.
        log.seek(SeekFrom::End(0))
            .map_err(|err| Error::io("seek", &log_path, err))?;
        log.write_all(format!("{line}\n").as_bytes())
            .map_err(|err| Error::io("append to", &log_path, err))?;
        log.sync_all()
            .map_err(|err| Error::io("fsync", &log_path, err))?;

        // 2. The projection line (rebuildable).
        let projection = self.projection_path(new.artefact_path)?;
        append_line(&projection, &line)?;
        let projection = self.projection_path(new.artefact_path)?;
        let projected = fs::read(&projection).map_err(|err| Error::io("read", &projection, err))?;

        // 3. The tip file, replaced atomically.
        let mut sequence: Vec<(String, Vec<String>)> = Vec::new();
        for raw in lines(&projected) {
            if let Some((h, p, _)) = parse_line(raw)
                && h != hash
            {
                sequence.push((h, p));
            }
        }
        sequence.push((hash.clone(), parents));
        let tips = TipSet::from_entries(sequence.iter().map(|(h, p)| (h.as_str(), p.as_slice())));
        let tip_path = self.tip_path(new.artefact_path)?;
        ensure_parent(&tip_path)?;
        let tip_path = self.tip_path(new.artefact_path)?;
        write_replacing(&tip_path, tips.to_json().as_bytes())?;

        // 4. The signature sidecar.
        let signature_path = self.signature_path(new.artefact_path, &hash)?;
        ensure_parent(&signature_path)?;
        let signature_path = self.signature_path(new.artefact_path, &hash)?;
        write_replacing(&signature_path, jws.as_bytes())?;
        drop(log);

        Ok(AppendedLineageEntry {
            entry,
            line,
            entry_hash: hash,
            jws,
        })
    }
}

fn check_new_entry(new: &NewLineageEntry<'_>) -> Result<()> {
    let refuse = |reason: String| {
        Err(Error::Malformed {
            what: "lineage entry",
            reason,
        })
    };
    if let Some(problem) = artefact_path_problem(new.artefact_path) {
        return refuse(problem.to_owned());
    }
    if !ARTEFACT_KINDS.contains(&new.artefact_kind) {
        return refuse(format!(
            "unknown artefact_kind: {}",
            python_str_repr(new.artefact_kind)
        ));
    }
    if let Some(parent) = new.extra_parents.iter().find(|p| !p.starts_with("sha256:")) {
        return refuse(format!(
            "parent_hash must start with 'sha256:', got {}",
            python_str_repr(parent)
        ));
    }
    if let Some(class) = new.trust_class.filter(|c| !TRUST_CLASSES.contains(c)) {
        return refuse(format!("unknown trust_class: {}", python_str_repr(class)));
    }
    if let Some(class) = new.sensitivity.filter(|c| !SENSITIVITY_CLASSES.contains(c)) {
        return refuse(format!("unknown sensitivity: {}", python_str_repr(class)));
    }
    Ok(())
}

/// The reference's repo-path rules with its `artefact_path` wording; artifact URIs are not
/// written by this crate.
fn artefact_path_problem(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("empty artefact_path");
    }
    if path.contains("://") {
        return Some("artefact URIs are not supported by this writer");
    }
    if path.starts_with('/') || (path.chars().count() > 2 && path.get(1..3) == Some(":\\")) {
        return Some("absolute artefact_path not allowed");
    }
    if path
        .replace('\\', "/")
        .split('/')
        .any(|segment| segment == "..")
    {
        return Some("path traversal in artefact_path");
    }
    None
}

/// The non-empty lines of a `\n`-separated file.
fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes.split(|b| *b == b'\n').filter(|line| !line.is_empty())
}

/// `(entry_hash, parent_hashes, artefact_path)` of a line that parses as an object.
fn parse_line(raw: &[u8]) -> Option<(String, Vec<String>, String)> {
    let value = Value::parse(std::str::from_utf8(raw).ok()?).ok()?;
    let object = value.as_object()?;
    let parents = object
        .get("parent_hashes")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(crate::audit::python_str)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let path = object
        .get("artefact_path")
        .map(crate::audit::python_str)
        .unwrap_or_default();
    Some((entry_hash(object), parents, path))
}

fn tips_in(log: &[u8], artefact_path: &str) -> TipSet {
    let sequence: Vec<(String, Vec<String>)> = lines(log)
        .filter_map(parse_line)
        .filter(|(_, _, path)| path == artefact_path)
        .map(|(h, p, _)| (h, p))
        .collect();
    TipSet::from_entries(sequence.iter().map(|(h, p)| (h.as_str(), p.as_slice())))
}

fn ensure_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(dir) => {
            crate::durable::create_dir_all_durable(dir).map_err(|err| Error::io("create", dir, err))
        }
        None => Ok(()),
    }
}

/// Replaces `path` atomically (temporary file, fsync, rename, directory fsync).
fn write_replacing(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().ok_or_else(|| Error::Containment {
        path: path.to_path_buf(),
        reason: "the path has no parent directory".to_owned(),
    })?;
    write_atomically(dir, path, bytes)
}

/// Appends `line` and a newline to `path` (created when missing) and fsyncs it.
fn append_line(path: &Path, line: &str) -> Result<()> {
    ensure_parent(path)?;
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|err| Error::io("open", path, err))?;
    file.write_all(format!("{line}\n").as_bytes())
        .map_err(|err| Error::io("append to", path, err))?;
    file.sync_all()
        .map_err(|err| Error::io("fsync", path, err))?;
    drop(file);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tips_follow_linear_successors_and_merges() {
        let p = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let a: Vec<String> = p(&[]);
        let b = p(&["a"]);
        let c = p(&["a"]);
        let d = p(&["b", "c"]);
        let linear = TipSet::from_entries([("a", a.as_slice()), ("b", b.as_slice())]);
        assert_eq!(
            linear,
            TipSet {
                open: p(&["b"]),
                merged: vec![]
            }
        );
        let forked = TipSet::from_entries([
            ("a", a.as_slice()),
            ("b", b.as_slice()),
            ("c", c.as_slice()),
        ]);
        assert_eq!(forked.open, p(&["b", "c"]));
        let merged = TipSet::from_entries([
            ("a", a.as_slice()),
            ("b", b.as_slice()),
            ("c", c.as_slice()),
            ("d", d.as_slice()),
        ]);
        assert_eq!(
            merged,
            TipSet {
                open: p(&["d"]),
                merged: p(&["b", "c"])
            }
        );
        assert_eq!(
            merged.to_json(),
            "{\"merged\":[\"b\",\"c\"],\"open\":[\"d\"]}"
        );
    }

    #[test]
    fn bad_writes_are_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let log = LineageLog::for_project(dir.path());
        let signer = SigningIdentity::from_seed(&[7; 32]).unwrap();
        let base = NewLineageEntry {
            artefact_path: "src/a.py",
            artefact_kind: "file",
            content: b"x",
            agent_id: "agent:a",
            agent_card_kid: "k",
            tool_call_id: "c",
            span_id: "s",
            ts_ns: 1,
            extra_parents: &[],
            trust_class: None,
            sensitivity: None,
        };
        let parents = vec!["md5:x".to_owned()];
        for bad in [
            NewLineageEntry {
                artefact_path: "../x",
                ..base.clone()
            },
            NewLineageEntry {
                artefact_path: "/etc/x",
                ..base.clone()
            },
            NewLineageEntry {
                artefact_path: "",
                ..base.clone()
            },
            NewLineageEntry {
                artefact_kind: "video",
                ..base.clone()
            },
            NewLineageEntry {
                extra_parents: &parents,
                ..base.clone()
            },
            NewLineageEntry {
                trust_class: Some("gold"),
                ..base.clone()
            },
            NewLineageEntry {
                sensitivity: Some("secret"),
                ..base.clone()
            },
        ] {
            assert!(
                matches!(
                    log.append(&bad, b"key", &signer),
                    Err(Error::Malformed { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(!dir.path().join(".sdd").exists());
    }
}
