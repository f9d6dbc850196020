//! The capsule and its signed on-disk record `.sdd/context/capsules/<task_id>.json`
//! (the reference's `ContextCapsule` and `SignedContextCapsule`).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use bernstein_protocol::encoding::hex;
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use ring::rand::{SecureRandom, SystemRandom};

use crate::audit::python_str;
use crate::claim::python::{python_int, python_truthy, python_type_name};
use crate::crypto::sha256_hex;
use crate::identity::{SigningIdentity, verify_detached_jws};
use crate::run_journal::contained_path;
use crate::{Error, Result};

/// Wire-format version stamped into every capsule.
pub const CONTEXT_CAPSULE_VERSION: i64 = 1;

/// `kid` of the detached JWS protected header.
pub const CONTEXT_CAPSULE_KID: &str = "context-capsule";

/// Signing-input prefix of a real capsule.
pub const CONTEXT_CAPSULE_DOMAIN_REAL: &[u8] = b"bernstein.context-capsule.v1\x00";

/// Signing-input prefix of a mock-layer fixture; byte-distinct from the real domain, so a mock
/// signature never verifies as real.
pub const CONTEXT_CAPSULE_DOMAIN_MOCK: &[u8] = b"bernstein.context-capsule.MOCK.v1\x00";

/// What a worker was given at spawn: the canonical, content-addressed capsule.
///
/// All numbers are integers (USD in micro-dollars), so the canonical bytes never depend on a
/// float's spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextCapsule {
    /// Wire-format version ([`CONTEXT_CAPSULE_VERSION`]).
    pub v: i64,
    /// The task the worker was spawned for.
    pub task_id: String,
    /// The run whose journal records the capsule hash.
    pub run_id: String,
    /// `sha256:` hash of the validated parameter map.
    pub params_hash: String,
    /// The worker's worktree.
    pub worktree_path: String,
    /// The worker's role.
    pub role: String,
    /// Token envelope remaining at spawn.
    pub budget_remaining_tokens: i64,
    /// USD envelope remaining at spawn, in micro-dollars.
    pub budget_remaining_usd_micros: i64,
    /// `(task_id, state)` pairs of the declared dependencies; sorted when built with
    /// [`ContextCapsule::set_dependency_state`], kept as stored when read.
    pub dependency_state: Vec<(String, String)>,
    /// The audit-chain head pinned at spawn.
    pub audit_chain_head: String,
    /// The intent capsule hash, when the run has one (`""` otherwise).
    pub intent_capsule_hash: String,
    /// Integer Unix seconds the capsule was built at.
    pub spawned_at: i64,
}

impl ContextCapsule {
    /// A capsule for `task_id` in `run_id` with every other field empty or zero (the defaults
    /// of the reference's `build_context_capsule`).
    pub fn new(task_id: impl Into<String>, run_id: impl Into<String>) -> ContextCapsule {
        ContextCapsule {
            v: CONTEXT_CAPSULE_VERSION,
            task_id: task_id.into(),
            run_id: run_id.into(),
            params_hash: String::new(),
            worktree_path: String::new(),
            role: String::new(),
            budget_remaining_tokens: 0,
            budget_remaining_usd_micros: 0,
            dependency_state: Vec::new(),
            audit_chain_head: String::new(),
            intent_capsule_hash: String::new(),
            spawned_at: 0,
        }
    }

    /// Sets the dependency state from `(task_id, state)` pairs, sorted as `build_context_capsule`
    /// sorts them.
    pub fn set_dependency_state<I, K, S>(&mut self, dependencies: I)
    where
        I: IntoIterator<Item = (K, S)>,
        K: Into<String>,
        S: Into<String>,
    {
        let mut pairs: Vec<(String, String)> = dependencies
            .into_iter()
            .map(|(k, s)| (k.into(), s.into()))
            .collect();
        pairs.sort();
        self.dependency_state = pairs;
    }

    /// The capsule as a JSON object (`to_canonical_dict`).
    pub fn to_object(&self) -> Object {
        Object::new()
            .with("v", self.v)
            .with("task_id", self.task_id.as_str())
            .with("run_id", self.run_id.as_str())
            .with("params_hash", self.params_hash.as_str())
            .with("worktree_path", self.worktree_path.as_str())
            .with("role", self.role.as_str())
            .with("budget_remaining_tokens", self.budget_remaining_tokens)
            .with(
                "budget_remaining_usd_micros",
                self.budget_remaining_usd_micros,
            )
            .with("dependency_state", self.dependency_state_value())
            .with("audit_chain_head", self.audit_chain_head.as_str())
            .with("intent_capsule_hash", self.intent_capsule_hash.as_str())
            .with("spawned_at", self.spawned_at)
    }

    fn dependency_state_value(&self) -> Value {
        Value::Array(
            self.dependency_state
                .iter()
                .map(|(id, state)| Value::from(vec![id.as_str(), state.as_str()]))
                .collect(),
        )
    }

    /// The canonical bytes: PY-COMPACT-UTF8 of [`ContextCapsule::to_object`].
    pub fn canonical_bytes(&self) -> String {
        Value::Object(self.to_object()).dumps(Dialect::PY_COMPACT_UTF8)
    }

    /// `capsule_hash`: `"sha256:" + sha256_hex(canonical_bytes)`.
    pub fn capsule_hash(&self) -> String {
        format!("sha256:{}", sha256_hex(self.canonical_bytes().as_bytes()))
    }

    /// Hydrates a capsule the way `ContextCapsule.from_dict` does: `task_id` is required,
    /// strings are `str()`-ed (`null` becomes `"None"`), integers are `int()`-ed with their
    /// defaults (`v` = 1, others 0), and `dependency_state` keeps the two-item lists of an
    /// iterable (a `null` or a number there is an error, as iterating it is in Python).
    ///
    /// # Errors
    ///
    /// A description of the first field that does not load.
    pub fn from_object(row: &Object) -> Result<ContextCapsule, String> {
        let text = |key: &str| row.get(key).map(python_str).unwrap_or_default();
        let int = |key: &str, default: i64| match row.get(key) {
            None => Ok(default),
            Some(value) => python_int(value).map_err(|m| format!("{key}: {m}")),
        };
        let task_id = row
            .get("task_id")
            .map(python_str)
            .ok_or_else(|| "capsule has no task_id".to_owned())?;
        let dependency_state = match row.get("dependency_state") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|item| match item.as_array() {
                    Some([id, state]) => Some((python_str(id), python_str(state))),
                    _ => None,
                })
                .collect(),
            // Iterating a string yields one-character strings and a dict yields its keys:
            // neither is a two-item list, so nothing is kept.
            Some(Value::Str(_) | Value::Object(_)) => Vec::new(),
            Some(other) => {
                return Err(format!(
                    "dependency_state: '{}' object is not iterable",
                    python_type_name(other)
                ));
            }
        };
        Ok(ContextCapsule {
            v: int("v", CONTEXT_CAPSULE_VERSION)?,
            task_id,
            run_id: text("run_id"),
            params_hash: text("params_hash"),
            worktree_path: text("worktree_path"),
            role: text("role"),
            budget_remaining_tokens: int("budget_remaining_tokens", 0)?,
            budget_remaining_usd_micros: int("budget_remaining_usd_micros", 0)?,
            dependency_state,
            audit_chain_head: text("audit_chain_head"),
            intent_capsule_hash: text("intent_capsule_hash"),
            spawned_at: int("spawned_at", 0)?,
        })
    }

    /// The bytes a signature covers under `domain`: `domain + canonical_bytes`.
    pub fn signing_payload(&self, domain: &[u8]) -> Vec<u8> {
        let mut payload = domain.to_vec();
        payload.extend_from_slice(self.canonical_bytes().as_bytes());
        payload
    }
}

/// A capsule with its detached signature, as stored on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedContextCapsule {
    /// The capsule.
    pub capsule: ContextCapsule,
    /// Detached JWS (`b64=false`, kid [`CONTEXT_CAPSULE_KID`]) over the domain-prefixed
    /// canonical bytes.
    pub signature: String,
    /// SPKI PEM of the signer, embedded verbatim.
    pub signer_public_key_pem: String,
    /// The on-disk mock marker. Only a diagnostic: the domain separation is what keeps a mock
    /// from verifying as real.
    pub is_mock: bool,
}

impl SignedContextCapsule {
    /// Signs a real capsule over [`CONTEXT_CAPSULE_DOMAIN_REAL`].
    pub fn seal(capsule: ContextCapsule, identity: &SigningIdentity) -> SignedContextCapsule {
        let signature = identity.sign_detached_jws(
            &capsule.signing_payload(CONTEXT_CAPSULE_DOMAIN_REAL),
            CONTEXT_CAPSULE_KID,
        );
        SignedContextCapsule {
            capsule,
            signature,
            signer_public_key_pem: identity.public_key_pem().to_owned(),
            is_mock: false,
        }
    }

    /// Signs a fixture capsule over [`CONTEXT_CAPSULE_DOMAIN_MOCK`] and marks it as a mock: it
    /// can feed offline tests and can never verify as real.
    pub fn seal_mock(capsule: ContextCapsule, identity: &SigningIdentity) -> SignedContextCapsule {
        let signature = identity.sign_detached_jws(
            &capsule.signing_payload(CONTEXT_CAPSULE_DOMAIN_MOCK),
            CONTEXT_CAPSULE_KID,
        );
        SignedContextCapsule {
            capsule,
            signature,
            signer_public_key_pem: identity.public_key_pem().to_owned(),
            is_mock: true,
        }
    }

    /// `(real_ok, mock_ok)`: whether the signature verifies under the real and under the mock
    /// domain. Both are false when the signature or the key is empty.
    pub fn signature_verdict(&self) -> (bool, bool) {
        if self.signature.is_empty() || self.signer_public_key_pem.is_empty() {
            return (false, false);
        }
        let verify = |domain: &[u8]| {
            verify_detached_jws(
                &self.capsule.signing_payload(domain),
                &self.signature,
                CONTEXT_CAPSULE_KID,
                &self.signer_public_key_pem,
            )
        };
        (
            verify(CONTEXT_CAPSULE_DOMAIN_REAL),
            verify(CONTEXT_CAPSULE_DOMAIN_MOCK),
        )
    }

    /// The record object: `{capsule, capsule_hash, signature, signer_public_key_pem, is_mock}`.
    pub fn to_object(&self) -> Object {
        Object::new()
            .with("capsule", self.capsule.to_object())
            .with("capsule_hash", self.capsule.capsule_hash())
            .with("signature", self.signature.as_str())
            .with("signer_public_key_pem", self.signer_public_key_pem.as_str())
            .with("is_mock", self.is_mock)
    }

    /// The record file bytes: PY-COMPACT-UTF8 of [`SignedContextCapsule::to_object`], no
    /// trailing newline.
    pub fn record_bytes(&self) -> String {
        Value::Object(self.to_object()).dumps(Dialect::PY_COMPACT_UTF8)
    }

    /// Hydrates a record the way `SignedContextCapsule.from_dict` does. The stored
    /// `capsule_hash` is ignored (it is recomputed); `signature` and `signer_public_key_pem`
    /// are `str()`-ed, `is_mock` is Python truthiness.
    ///
    /// # Errors
    ///
    /// A description of what does not load.
    pub fn from_value(record: &Value) -> Result<SignedContextCapsule, String> {
        let Value::Object(record) = record else {
            return Err(format!(
                "the record is a {}, not an object",
                python_type_name(record)
            ));
        };
        let capsule = match record.get("capsule") {
            Some(Value::Object(capsule)) => ContextCapsule::from_object(capsule)?,
            Some(other) => {
                return Err(format!(
                    "capsule is a {}, not an object",
                    python_type_name(other)
                ));
            }
            None => return Err("the record has no capsule".to_owned()),
        };
        let text = |key: &str| record.get(key).map(python_str).unwrap_or_default();
        Ok(SignedContextCapsule {
            capsule,
            signature: text("signature"),
            signer_public_key_pem: text("signer_public_key_pem"),
            is_mock: record.get("is_mock").is_some_and(python_truthy),
        })
    }

    /// The operator-facing projection the capsule tool returns (`project_capsule`): the capsule
    /// without `v` and `spawned_at`, plus `capsule_hash` and `is_mock`, in the reference's key
    /// order.
    pub fn project(&self) -> Object {
        let capsule = &self.capsule;
        Object::new()
            .with("task_id", capsule.task_id.as_str())
            .with("run_id", capsule.run_id.as_str())
            .with("capsule_hash", capsule.capsule_hash())
            .with("params_hash", capsule.params_hash.as_str())
            .with("role", capsule.role.as_str())
            .with("worktree_path", capsule.worktree_path.as_str())
            .with("budget_remaining_tokens", capsule.budget_remaining_tokens)
            .with(
                "budget_remaining_usd_micros",
                capsule.budget_remaining_usd_micros,
            )
            .with("dependency_state", capsule.dependency_state_value())
            .with("audit_chain_head", capsule.audit_chain_head.as_str())
            .with("intent_capsule_hash", capsule.intent_capsule_hash.as_str())
            .with("is_mock", self.is_mock)
    }
}

/// Checks a task id can name a capsule record, with the reference's rule (`_safe_task_id`):
/// non-empty, no `/`, `\` or NUL, and not `.` or `..`.
///
/// # Errors
///
/// [`Error::InvalidTaskId`].
pub fn validate_capsule_task_id(task_id: &str) -> Result<&str> {
    let reason = if task_id.is_empty() {
        Some("a capsule task id must not be empty")
    } else if task_id.contains(['/', '\\', '\0']) {
        Some("a capsule task id must not contain '/', '\\' or NUL")
    } else if task_id == "." || task_id == ".." {
        Some("a capsule task id must not be '.' or '..'")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidTaskId {
            id: task_id.to_owned(),
            reason,
        }),
        None => Ok(task_id),
    }
}

/// `<project_root>/.sdd/context/capsules`, unresolved.
pub fn capsules_dir(project_root: &Path) -> PathBuf {
    project_root.join(".sdd").join("context").join("capsules")
}

/// The containment-checked record path of `task_id`: `.sdd/context/capsules/<task_id>.json`,
/// resolved, and proven to stay inside the capsules directory and the project root.
///
/// # Errors
///
/// [`Error::InvalidTaskId`] for an unsafe id, [`Error::Containment`] when a symlink leads out.
pub fn capsule_record_path(project_root: &Path, task_id: &str) -> Result<PathBuf> {
    validate_capsule_task_id(task_id)?;
    let file_name = format!("{task_id}.json");
    contained_path(project_root, &capsules_dir(project_root), &[&file_name])
}

/// What is at a task's capsule record path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapsuleRecord {
    /// No record file.
    Missing,
    /// A file that does not load as a signed capsule (the reference treats it as missing).
    Malformed {
        /// Why it does not load.
        reason: String,
    },
    /// A record that loads (not yet verified).
    Loaded(Box<SignedContextCapsule>),
}

/// Reads the capsule record of `task_id` (`read_capsule_record`).
///
/// # Errors
///
/// [`Error::InvalidTaskId`] / [`Error::Containment`] for an unsafe id or path, [`Error::Io`]
/// when the file exists but cannot be read.
pub fn read_capsule_record(project_root: &Path, task_id: &str) -> Result<CapsuleRecord> {
    let path = capsule_record_path(project_root, task_id)?;
    // A FIFO or device at the path is refused without blocking (`read_regular`).
    let bytes = match crate::regular_file::read_regular(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Ok(CapsuleRecord::Missing);
        }
        // The reference's `is_file()` check: a directory at the path is no record.
        Err(err) if err.kind() == std::io::ErrorKind::IsADirectory => {
            return Ok(CapsuleRecord::Missing);
        }
        Err(err) => return Err(Error::io("read", &path, err)),
    };
    let Ok(text) = String::from_utf8(bytes) else {
        return Ok(CapsuleRecord::Malformed {
            reason: "the record is not UTF-8".to_owned(),
        });
    };
    let parsed = match Value::parse(&text) {
        Ok(value) => value,
        Err(err) => {
            return Ok(CapsuleRecord::Malformed {
                reason: format!("the record is not JSON: {err}"),
            });
        }
    };
    Ok(match SignedContextCapsule::from_value(&parsed) {
        Ok(signed) => CapsuleRecord::Loaded(Box::new(signed)),
        Err(reason) => CapsuleRecord::Malformed { reason },
    })
}

/// Writes `signed` to its record path, replacing an earlier record atomically (temporary file,
/// fsync, rename). The bytes are [`SignedContextCapsule::record_bytes`].
///
/// # Errors
///
/// As [`capsule_record_path`], plus [`Error::Io`].
pub fn write_capsule_record(project_root: &Path, signed: &SignedContextCapsule) -> Result<PathBuf> {
    let path = capsule_record_path(project_root, &signed.capsule.task_id)?;
    let parent = path.parent().unwrap_or(project_root);
    // Directories we create have their parents fsynced, so the capsule cannot vanish with a
    // directory entry a crash lost.
    crate::durable::create_dir_all_durable(parent)
        .map_err(|err| Error::io("create directory", parent, err))?;
    let mut suffix = [0u8; 4];
    SystemRandom::new()
        .fill(&mut suffix)
        .map_err(|_| Error::Encode("the system random generator failed".to_owned()))?;
    // A fixed-length temporary name: the task id may already be close to the file-name limit.
    let tmp = parent.join(format!(
        ".capsule.tmp.{}.{}",
        std::process::id(),
        hex(&suffix)
    ));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut file| {
            file.write_all(signed.record_bytes().as_bytes())?;
            file.sync_all()
        })
        .map_err(|err| Error::io("write", &tmp, err))
        .and_then(|()| {
            fs::rename(&tmp, &path).map_err(|err| Error::io("rename into place", &path, err))
        });
    if let Err(err) = written {
        // The temporary file is garbage either way; the write error is what matters.
        let _ = fs::remove_file(&tmp);
        return Err(err);
    }
    // The rename is made durable in the parent every time; the ancestors' entries once per
    // process, since another process may have created them and died before its own fsync.
    crate::durable::sync_dir(parent)
        .and_then(|()| crate::durable::ensure_entry_durable(parent))
        .map_err(|err| Error::io("sync directory", parent, err))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_object(json: &str) -> Object {
        Value::parse(json).unwrap().as_object().unwrap().clone()
    }

    #[test]
    fn from_object_coerces_like_the_reference() {
        let check = |json: &str, expect: Result<&str, &str>| {
            let got = ContextCapsule::from_object(&parse_object(json)).map(|c| c.canonical_bytes());
            assert_eq!(got.as_deref().map_err(String::as_str), expect, "{json}");
        };
        // Expected bytes from CPython 3.12 with bernstein 3.23:
        // ContextCapsule.from_dict(json.loads(row)).canonical_bytes()
        check(
            r#"{"task_id": 5}"#,
            Ok(
                r#"{"audit_chain_head":"","budget_remaining_tokens":0,"budget_remaining_usd_micros":0,"dependency_state":[],"intent_capsule_hash":"","params_hash":"","role":"","run_id":"","spawned_at":0,"task_id":"5","v":1,"worktree_path":""}"#,
            ),
        );
        check(
            r#"{"task_id": "t", "run_id": null, "spawned_at": "7", "budget_remaining_tokens": 2.9, "dependency_state": [["b", 1], ["a"], "xy", ["a", "done"]]}"#,
            Ok(
                r#"{"audit_chain_head":"","budget_remaining_tokens":2,"budget_remaining_usd_micros":0,"dependency_state":[["b","1"],["a","done"]],"intent_capsule_hash":"","params_hash":"","role":"","run_id":"None","spawned_at":7,"task_id":"t","v":1,"worktree_path":""}"#,
            ),
        );
        check(
            r#"{"task_id": "t", "dependency_state": {"a": "b"}}"#,
            Ok(
                r#"{"audit_chain_head":"","budget_remaining_tokens":0,"budget_remaining_usd_micros":0,"dependency_state":[],"intent_capsule_hash":"","params_hash":"","role":"","run_id":"","spawned_at":0,"task_id":"t","v":1,"worktree_path":""}"#,
            ),
        );
        check(r#"{"run_id": "r"}"#, Err("capsule has no task_id"));
        check(
            r#"{"task_id": "t", "v": null}"#,
            Err(
                "v: int() argument must be a string, a bytes-like object or a real number, not 'NoneType'",
            ),
        );
        check(
            r#"{"task_id": "t", "dependency_state": null}"#,
            Err("dependency_state: 'NoneType' object is not iterable"),
        );
    }

    #[test]
    fn record_round_trips_and_detects_mocks() {
        let identity = SigningIdentity::from_seed(&[0x44; 32]).unwrap();
        let mut capsule = ContextCapsule::new("t-1", "task-t-1");
        capsule.set_dependency_state([("t-9", "done"), ("t-1", "closed")]);
        assert_eq!(
            capsule.dependency_state,
            vec![
                ("t-1".to_owned(), "closed".to_owned()),
                ("t-9".to_owned(), "done".to_owned())
            ]
        );
        let real = SignedContextCapsule::seal(capsule.clone(), &identity);
        let mock = SignedContextCapsule::seal_mock(capsule, &identity);
        assert_eq!(real.signature_verdict(), (true, false));
        assert_eq!(mock.signature_verdict(), (false, true));
        let reparsed =
            SignedContextCapsule::from_value(&Value::parse(&real.record_bytes()).unwrap()).unwrap();
        assert_eq!(reparsed, real);
        let mut unsigned = real.clone();
        unsigned.signature.clear();
        assert_eq!(unsigned.signature_verdict(), (false, false));
        let mut tampered = real;
        tampered.capsule.budget_remaining_tokens = 1;
        assert_eq!(tampered.signature_verdict(), (false, false));
        assert_eq!(
            SignedContextCapsule::from_value(&Value::parse(r#"{"capsule": []}"#).unwrap()),
            Err("capsule is a list, not an object".to_owned())
        );
        assert_eq!(
            SignedContextCapsule::from_value(&Value::parse("[]").unwrap()),
            Err("the record is a list, not an object".to_owned())
        );
    }

    /// Issue 14 item 7: the capsule's new directories have their parents fsynced, the rename is
    /// made durable in its directory on every write, and the ancestors up to the project root
    /// once per process (their creator may have died before its own fsync).
    #[test]
    fn a_capsule_write_makes_every_entry_it_depends_on_durable() {
        use crate::durable::seams::take_dir_syncs;
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        std::fs::create_dir(base.join(".sdd")).unwrap();
        let identity = SigningIdentity::from_seed(&[0x44; 32]).unwrap();
        let signed = SignedContextCapsule::seal(ContextCapsule::new("t-1", "task-t-1"), &identity);
        take_dir_syncs();
        let path = write_capsule_record(&base, &signed).unwrap();
        let capsules = path.parent().unwrap().to_path_buf();
        let syncs = take_dir_syncs();
        // Every directory from the capsule's own up to the one holding `.sdd` was fsynced.
        let mut dir = capsules.clone();
        loop {
            assert!(
                syncs.contains(&dir),
                "{} not fsynced: {syncs:?}",
                dir.display()
            );
            if dir == base {
                break;
            }
            dir = dir.parent().unwrap().to_path_buf();
        }
        // A second write fsyncs the rename's directory again, and nothing above it.
        write_capsule_record(&base, &signed).unwrap();
        assert_eq!(take_dir_syncs(), vec![capsules]);
    }

    #[test]
    fn task_ids_that_could_escape_are_refused() {
        let check = |id: &str, ok: bool| {
            assert_eq!(validate_capsule_task_id(id).is_ok(), ok, "{id:?}");
        };
        check("t-42", true);
        check("t 42:é", true);
        check("..x", true);
        check("", false);
        check(".", false);
        check("..", false);
        check("../etc", false);
        check("a/b", false);
        check("a\\b", false);
        check("a\0b", false);
    }

    #[test]
    fn a_directory_at_the_record_path_is_no_record_and_a_fifo_is_an_error() {
        let project = tempfile::tempdir().unwrap();
        // The reference's `is_file()` check: a directory is no record, as a missing file is.
        let directory = capsule_record_path(project.path(), "t-1").unwrap();
        std::fs::create_dir_all(&directory).unwrap();
        assert_eq!(
            read_capsule_record(project.path(), "t-1").unwrap(),
            CapsuleRecord::Missing
        );
        // A FIFO is refused before it could block, and the refusal is an error, not a miss.
        let fifo = capsule_record_path(project.path(), "t-2").unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let err = read_capsule_record(project.path(), "t-2").unwrap_err();
        assert!(
            matches!(&err, Error::Io { op: "read", path, .. } if *path == fifo),
            "{err:?}"
        );
    }
}
