//! Run artifacts, the blob store and the lineage spine against the Bernstein 3.23 vectors
//! `artifacts/` and `artifacts_tampered/`, their oracle reports, and scratch projects written by
//! this crate.

use std::fs;
use std::path::{Path, PathBuf};

use bernstein_journal::Error;
use bernstein_journal::artifacts::{
    ArtifactContent, ArtifactFields, AuditMirror, LineageSpine, MAX_ARTIFACT_BYTES, PostRequest,
    PostedArtifact, SPINE_FILE_NAME, SPINE_HEAD_FILE_NAME, SpineStatus, TraceContext,
    post_run_artifact_with_clock, verify_all_run_artifacts, verify_run_artifacts,
    verify_spine_bytes,
};
use bernstein_journal::audit::{self, AuditChain, Timestamp};
use bernstein_journal::crypto::{hmac_sha256_hex, sha256_hex};
use bernstein_journal::key::AuditKey;
use bernstein_protocol::encoding::hex;
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use proptest::prelude::*;

use crate::support::vector;

fn audit_key() -> AuditKey {
    let raw = fs::read_to_string(vector("_keys/audit.key")).unwrap();
    AuditKey::from_master_bytes(raw.trim().as_bytes().to_vec())
}

fn read_json(path: &Path) -> Value {
    Value::parse(&fs::read_to_string(path).unwrap()).unwrap()
}

fn object(value: &Value) -> &Object {
    value.as_object().unwrap()
}

/// Copies a vector tree into a writable scratch directory.
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::write(&target, fs::read(entry.path()).unwrap()).unwrap();
        }
    }
}

/// A clock that returns `start`, then steps by a quarter second per reading (the generator's
/// frozen journal clock).
fn stepping_clock(start: f64) -> impl FnMut() -> f64 {
    let mut now = start;
    move || {
        let value = now;
        now += 0.25;
        value
    }
}

/// The vector's audit clock: 2026-07-13T09:00:00Z plus `micros`.
fn audit_time(micros: i64) -> Timestamp {
    Timestamp::from_unix_micros(1_783_933_200_000_000 + micros).unwrap()
}

pub(crate) fn request<'a>(
    task_id: &'a str,
    key: &'a str,
    content: &'a ArtifactContent,
) -> PostRequest<'a> {
    PostRequest {
        task_id,
        key,
        content,
        holder: Some("worker-a"),
        poster: "worker-a",
        trace: TraceContext::default(),
        spine_timestamp: Some(1_780_000_700),
        audit_timestamp: Some(audit_time(1000)),
    }
}

/// Every file under `root`, relative, sorted.
fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(listing) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in listing {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------------
// Oracle verdicts on the vectors
// ---------------------------------------------------------------------------------------------

#[test]
fn vector_verdicts_match_the_oracle() {
    let key = audit_key();
    for name in ["artifacts", "artifacts_tampered"] {
        let root = vector(name);
        let oracle = read_json(&vector(&format!("oracle/{name}.json")));
        let section = object(object(&oracle).get("artifacts").unwrap());
        let report = verify_all_run_artifacts(&root, &key).unwrap();
        assert_eq!(
            Value::from(report.ok()),
            *section.get("ok").unwrap(),
            "{name}"
        );
        let expected = section.get("results").unwrap().as_array().unwrap();
        assert_eq!(report.results.len(), expected.len(), "{name}");
        for (ours, theirs) in report.results.iter().zip(expected) {
            let ours = ours.to_object();
            for (field, value) in object(theirs).iter() {
                assert_eq!(ours.get(field), Some(value), "{name}: {field}");
            }
        }

        // The generator's direct `verify_run_artifacts` call, which also reports content hashes.
        let direct = object(&read_json(&root.join("expected.json")))
            .get("verify_run_artifacts")
            .unwrap()
            .clone();
        let task = verify_run_artifacts(&root, "t-42", &key).unwrap();
        let ours: Vec<Value> = task
            .results
            .iter()
            .map(|check| Value::Object(check.to_object()))
            .collect();
        let sorted = |values: &[Value]| -> Vec<String> {
            values
                .iter()
                .map(|v| v.dumps(Dialect::PY_COMPACT_UTF8))
                .collect()
        };
        assert_eq!(sorted(&ours), sorted(direct.as_array().unwrap()), "{name}");

        let spines = object(
            object(object(&oracle).get("spines").unwrap())
                .get("spines")
                .unwrap(),
        );
        for (run_id, verdict) in spines.iter() {
            let spine = LineageSpine::open(&root, run_id, &key).unwrap();
            let ours = spine.verify().unwrap();
            assert_eq!(
                Value::Object(ours.to_object()).dumps(Dialect::PY_COMPACT_UTF8),
                verdict.dumps(Dialect::PY_COMPACT_UTF8),
                "{name}/{run_id}"
            );
            assert!(ours.head_findings.is_empty(), "{:?}", ours.head_findings);
        }
    }
}

#[test]
fn the_tampered_vector_lists_the_blob_problem_for_that_row_only() {
    let report = verify_run_artifacts(&vector("artifacts_tampered"), "t-42", &audit_key()).unwrap();
    let failing: Vec<_> = report.results.iter().filter(|r| !r.ok).collect();
    assert_eq!(failing.len(), 1);
    assert_eq!(failing[0].key, "summary");
    assert_eq!(failing[0].version, 1);
    assert_eq!(failing[0].problems, vec![failing[0].reason.clone()]);
    assert!(report.journal.as_ref().unwrap().ok());
    assert_eq!(report.spine.as_ref().unwrap().status, SpineStatus::Ok);
}

#[test]
fn the_first_spine_entry_rederives_from_its_fields() {
    let root = vector("artifacts");
    let expected = read_json(&root.join("expected.json"));
    let entry0 = object(object(&expected).get("spine_entry0").unwrap());
    let text = |name: &str| entry0.get(name).unwrap().as_str().unwrap().to_owned();
    let key = audit_key();
    assert_eq!(
        hex(&key.derived("lineage")),
        text("derived_lineage_key_hex")
    );

    let spine = LineageSpine::open(&root, "task-t-42", &key).unwrap();
    let entries = spine.entries().unwrap();
    let first = &entries[0];
    let preimage = text("entry_hash_preimage");
    assert_eq!(
        first.entry_hash,
        format!("sha256:{}", sha256_hex(preimage.as_bytes()))
    );
    assert_eq!(first.expected_entry_hash(), first.entry_hash);
    let body = Value::Object(first.body()).dumps(Dialect::PY_COMPACT_UTF8);
    assert_eq!(body, text("hmac_body_bytes"));
    assert_eq!(
        first.hmac,
        hmac_sha256_hex(&key.derived("lineage"), &[body.as_bytes()])
    );
    assert!(first.verify_standalone(&key));
    let raw = fs::read_to_string(root.join(".sdd/lineage/task-t-42/spine.jsonl")).unwrap();
    assert_eq!(
        raw.lines().next().unwrap(),
        first
            .row(bernstein_journal::artifacts::SpineHashProfile::PyJsonV1)
            .unwrap()
    );

    let head = object(object(&expected).get("spine_head_file").unwrap());
    let head_body = Object::new()
        .with("count", head.get("count").unwrap().clone())
        .with("head_hash", head.get("head_hash").unwrap().clone());
    assert_eq!(
        Value::from(hmac_sha256_hex(
            &key.derived("lineage"),
            &[Value::Object(head_body)
                .dumps(Dialect::PY_COMPACT_UTF8)
                .as_bytes()]
        )),
        *head.get("hmac").unwrap()
    );
}

// ---------------------------------------------------------------------------------------------
// Posting: byte-identical to the reference
// ---------------------------------------------------------------------------------------------

/// The vector's four posts, in order.
fn vector_posts() -> Vec<(&'static str, ArtifactContent)> {
    vec![
        (
            "summary",
            ArtifactContent::report("# Audit summary\n\nAll good. caf\u{e9}").unwrap(),
        ),
        (
            "summary",
            ArtifactContent::report("# Audit summary v2\n\nStill good.").unwrap(),
        ),
        (
            "matrix",
            ArtifactContent::table(
                &[Value::from("model"), Value::from("score")],
                &[
                    vec![Value::from("a"), Value::from("0.9")],
                    vec![Value::from("b"), Value::from(1)],
                ],
            )
            .unwrap(),
        ),
        (
            "preview",
            ArtifactContent::link("https://preview.example.com/pr/7", "preview").unwrap(),
        ),
    ]
}

fn post_vector_inputs(project: &Path) -> Vec<PostedArtifact> {
    let chain = AuditChain::open(project.join(".sdd/audit"), audit_key());
    let mut clock = stepping_clock(1_780_000_700.0);
    let posts = vector_posts();
    let mut posted = Vec::new();
    for (offset, (key, content)) in (0i64..).zip(&posts) {
        let request = PostRequest {
            spine_timestamp: Some(1_780_000_700 + offset),
            audit_timestamp: Some(audit_time(1000 + 2000 * offset)),
            ..request("t-42", key, content)
        };
        posted.push(post_run_artifact_with_clock(project, &chain, &request, &mut clock).unwrap());
    }
    posted
}

#[test]
fn posting_the_vector_inputs_reproduces_every_byte() {
    let scratch = tempfile::tempdir().unwrap();
    let posted = post_vector_inputs(scratch.path());

    let expected = read_json(&vector("artifacts/expected.json"));
    let posts = object(&expected).get("posts").unwrap().as_array().unwrap();
    for (ours, theirs) in posted.iter().zip(posts) {
        let theirs = object(theirs);
        let record = object(theirs.get("record").unwrap());
        let mut sorted_ours = ours.record.to_object();
        // The oracle dumps records with sorted keys; compare as values.
        for (field, value) in record.iter() {
            assert_eq!(sorted_ours.remove(field).as_ref(), Some(value), "{field}");
        }
        assert!(sorted_ours.is_empty());
        assert!(ours.verified, "{}", ours.verify_reason);
        assert!(matches!(ours.audit, AuditMirror::Recorded { .. }));
    }

    let vector_sdd = vector("artifacts/.sdd");
    let ours_sdd = scratch.path().join(".sdd");
    for rel in [
        "runs/task-t-42/journal.jsonl",
        "lineage/task-t-42/spine.jsonl",
        "lineage/task-t-42/spine.head",
        "lineage/task-t-42/.spine.lock",
        "audit/2026-07-13.jsonl",
    ] {
        assert_eq!(
            fs::read(ours_sdd.join(rel)).unwrap(),
            fs::read(vector_sdd.join(rel)).unwrap(),
            "{rel}"
        );
    }
    let blobs = |sdd: &Path| files_under(&sdd.join("evidence"));
    assert_eq!(blobs(&ours_sdd), blobs(&vector_sdd));
    for rel in blobs(&vector_sdd) {
        assert_eq!(
            fs::read(ours_sdd.join("evidence").join(&rel)).unwrap(),
            fs::read(vector_sdd.join("evidence").join(&rel)).unwrap()
        );
    }
    assert!(audit::verify(&ours_sdd.join("audit"), &audit_key()).ok());
}

#[test]
fn the_posted_wire_shape_follows_the_reference_key_order() {
    let scratch = tempfile::tempdir().unwrap();
    let posted = post_vector_inputs(scratch.path());
    let wire: Vec<String> = posted
        .iter()
        .map(|p| Value::Object(p.to_wire()).dumps(Dialect::PY_ROW))
        .collect();
    insta::assert_snapshot!(wire.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Scratch posts: every type, versions, trace context
// ---------------------------------------------------------------------------------------------

#[test]
fn scratch_posts_chain_versions_and_verify() {
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    let key = audit_key();
    let chain = AuditChain::open(project.join(".sdd/audit"), key.clone());
    let trace = TraceContext {
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        tracestate: Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE".into()),
        baggage: Some("userId=alice,serverNode=DF%2028".into()),
    };
    let report_v1 = ArtifactContent::report("v1 \u{2014} caf\u{e9}").unwrap();
    let report_v2 = ArtifactContent::report("v2").unwrap();
    let fields = ArtifactFields {
        columns: vec![Value::from("k"), Value::from("v")],
        rows: vec![vec![Value::from("x"), Value::from(2.5)]],
        ..ArtifactFields::default()
    };
    let table = ArtifactContent::build("table", &fields).unwrap();
    let link = ArtifactContent::link("https://dash.example.com/", "dashboard").unwrap();
    let post = |key: &str, content: &ArtifactContent, trace: TraceContext| {
        let request = PostRequest {
            trace,
            ..request("T:1.a", key, content)
        };
        post_run_artifact_with_clock(project, &chain, &request, || 1_780_000_000.0).unwrap()
    };
    let first = post("notes", &report_v1, trace.clone());
    let table_post = post("grid", &table, TraceContext::default());
    let second = post("notes", &report_v2, TraceContext::default());
    let link_post = post("dash", &link, TraceContext::default());

    assert_eq!((first.record.version, second.record.version), (1, 2));
    assert_eq!(first.record.prev_version_hash, "");
    assert_eq!(
        second.record.prev_version_hash,
        first.record.spine_entry_hash
    );
    assert_eq!(table_post.record.version, 1);
    assert_eq!(link_post.record.link_kind, "dashboard");
    assert_eq!(
        (first.record.journal_index, second.record.journal_index),
        (0, 2)
    );
    assert_eq!(first.spine_entry.trace, trace);
    assert_eq!(first.spine_entry.step_id, "artifact:notes:v1");
    assert_eq!(
        second.spine_entry.artifact_path,
        "run-artifacts/task-T-1.a/notes/v2"
    );
    assert_eq!(
        first.content.as_ref().unwrap().get("body"),
        Some(&Value::from("v1 \u{2014} caf\u{e9}"))
    );
    let spine_text =
        fs::read_to_string(project.join(".sdd/lineage/task-T-1.a/spine.jsonl")).unwrap();
    assert!(
        spine_text
            .lines()
            .next()
            .unwrap()
            .contains("\"baggage\":\"userId=alice,serverNode=DF%2028\"")
    );

    let report = verify_run_artifacts(project, "T:1.a", &key).unwrap();
    assert!(report.ok(), "{report:#?}");
    assert_eq!(report.results.len(), 4);
    let all = verify_all_run_artifacts(project, &key).unwrap();
    assert!(all.ok());
    assert_eq!(all.results, report.results);

    // The audit chain holds one run.artifact event per post, chained.
    let audit_report = audit::verify(&project.join(".sdd/audit"), &key);
    assert!(audit_report.ok());
    let events: Vec<String> = fs::read_to_string(project.join(".sdd/audit/2026-07-13.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            object(&Value::parse(line).unwrap())
                .get("event_type")
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(events, vec!["run.artifact"; 4]);
}

#[test]
fn version_one_rows_and_reference_appends_verify() {
    // Rows written by the reference's own code: a version-1 row (raw key, no domain tag), and
    // a version-2 row `LineageSpine.record` chained onto it carrying a traceparent.
    let v1 = "{\"actor\":\"worker-\u{e9}\",\"artifact_path\":\"src/legacy.py\",\"content_hash\":\"sha256:c49fea7425fa7f8699897a97c159c6690267d9003bb78c53fafa8fc15c325d84\",\"entry_hash\":\"sha256:01709ee8f2e9eb4d6bc6532ecd011346fa3006bb052490bf524c9349dc38f69a\",\"hmac\":\"8cab9aca2c7b8264abdf5117c13e4f3e8bb42554c898bd679c0b7403119e2708\",\"model\":\"m\",\"prev_hash\":\"\",\"step_id\":\"write:1\",\"timestamp\":1700000000,\"v\":1}\n";
    let v2 = "{\"actor\":\"worker-\u{e9}\",\"artifact_path\":\"src/legacy.py\",\"content_hash\":\"sha256:11507a0e2f5e69d5dfa40a62a1bd7b6ee57e6bcd85c67c9b8431b36fff21c437\",\"entry_hash\":\"sha256:695067e09786ffe7afa0e2031413b49ddc92209cbaef47e05f0b779cac838575\",\"hmac\":\"dc226174e5821609c24f162797f46757621c95b2c62c7e06027080ceab0b9577\",\"model\":\"m\",\"prev_hash\":\"sha256:01709ee8f2e9eb4d6bc6532ecd011346fa3006bb052490bf524c9349dc38f69a\",\"step_id\":\"write:2\",\"timestamp\":1700000001,\"traceparent\":\"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\",\"v\":2}\n";
    let head = "{\"count\":2,\"head_hash\":\"sha256:695067e09786ffe7afa0e2031413b49ddc92209cbaef47e05f0b779cac838575\",\"hmac\":\"9bf1da8939bd1dfbf1f5958035471208e142e812d7dfa0b5173b892aa8f1a7eb\"}";
    let key = audit_key();
    let both = format!("{v1}{v2}");
    let report = verify_spine_bytes(both.as_bytes(), Some(head.as_bytes()), &key);
    assert_eq!(report.status, SpineStatus::Ok, "{report:?}");
    assert!(report.head_findings.is_empty(), "{report:?}");
    let only_v1 = verify_spine_bytes(v1.as_bytes(), None, &key);
    assert_eq!(only_v1.status, SpineStatus::Ok);
    // A row without its head: the writer stopped before the head, crash debris.
    assert!(only_v1.head_findings.is_empty(), "{only_v1:?}");
    assert_eq!(only_v1.head_tears, vec!["spine.head is missing"]);

    // Our append onto the v1 row writes the reference's v2 row and head, byte for byte.
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join(".sdd/lineage/run");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(SPINE_FILE_NAME), v1).unwrap();
    let spine = LineageSpine::open(scratch.path(), "run", &key).unwrap();
    spine
        .append(&bernstein_journal::artifacts::NewSpineEntry {
            artifact_path: "src/legacy.py",
            content: b"new",
            actor: "worker-\u{e9}",
            step_id: "write:2",
            model: "m",
            timestamp: 1_700_000_001,
            trace: &TraceContext {
                traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
                ..TraceContext::default()
            },
        })
        .unwrap();
    assert_eq!(fs::read_to_string(dir.join(SPINE_FILE_NAME)).unwrap(), both);
    assert_eq!(
        fs::read_to_string(dir.join(SPINE_HEAD_FILE_NAME)).unwrap(),
        head
    );
}

// ---------------------------------------------------------------------------------------------
// Refusals: clear errors, nothing written
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_posts_are_refused_and_write_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    let chain = AuditChain::open(project.join(".sdd/audit"), audit_key());
    let small = ArtifactContent::report("x").unwrap();
    let huge = ArtifactContent::report(&"a".repeat(MAX_ARTIFACT_BYTES)).unwrap();
    let post = |request: PostRequest<'_>| {
        post_run_artifact_with_clock(project, &chain, &request, || 0.0).unwrap_err()
    };

    let err = post(request("t-1", "big", &huge));
    assert!(
        matches!(err, Error::ArtifactTooLarge { size, cap } if size == MAX_ARTIFACT_BYTES + 27 && cap == MAX_ARTIFACT_BYTES),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "artifact payload is 1048603 bytes, exceeds the 1048576-byte per-blob cap"
    );
    for bad_key in [
        ".hidden",
        "a/b",
        "",
        "a b",
        "x\n",
        &"k".repeat(129),
        "caf\u{e9}",
    ] {
        let err = post(request("t-1", bad_key, &small));
        assert!(
            matches!(err, Error::ArtifactInvalid { .. }),
            "{bad_key:?}: {err}"
        );
    }
    assert_eq!(
        post(request("t-1", "a/b", &small)).to_string(),
        "artifact key 'a/b' must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\\Z (a single safe segment)"
    );
    for bad_task in ["../x", "..", "a/b", "", "t\u{0}", &"t".repeat(257)] {
        let err = post(request(bad_task, "k", &small));
        assert!(
            matches!(err, Error::InvalidTaskId { .. }),
            "{bad_task:?}: {err}"
        );
    }
    // A task id the schema allows but whose run id would be too long for a journal directory.
    let err = post(request(&"t".repeat(60), "k", &small));
    assert!(matches!(err, Error::InvalidRunId { .. }), "{err}");
    let err = post(PostRequest {
        trace: TraceContext {
            traceparent: Some("not-a-trace".into()),
            ..TraceContext::default()
        },
        ..request("t-1", "k", &small)
    });
    assert!(matches!(err, Error::ArtifactInvalid { .. }), "{err}");
    assert!(matches!(
        ArtifactContent::build("video", &ArtifactFields::default()),
        Err(Error::ArtifactInvalid { .. })
    ));
    assert!(!project.join(".sdd").exists(), "{:?}", files_under(project));

    // A poster that does not hold the task: refused, and only the refusal is recorded.
    let err = post(PostRequest {
        holder: Some("worker-a"),
        poster: "mallory",
        ..request("t-1", "summary", &small)
    });
    assert!(
        matches!(&err, Error::ArtifactRefused { reason, .. } if *reason == "claim_scope_violation"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "caller does not hold an active claim for task 't-1'"
    );
    let err = post(PostRequest {
        holder: None,
        ..request("t-1", "summary", &small)
    });
    assert!(matches!(&err, Error::ArtifactRefused { reason, .. } if *reason == "unclaimed_task"));
    assert_eq!(
        files_under(&project.join(".sdd")),
        vec![
            PathBuf::from("audit/.chain.lock"),
            PathBuf::from("audit/2026-07-13.jsonl")
        ]
    );
    let segment = fs::read_to_string(project.join(".sdd/audit/2026-07-13.jsonl")).unwrap();
    let first = Value::parse(segment.lines().next().unwrap()).unwrap();
    let details = object(object(&first).get("details").unwrap());
    assert_eq!(
        object(&first).get("event_type"),
        Some(&Value::from("run.artifact_refused"))
    );
    assert_eq!(
        object(&first).get("actor"),
        Some(&Value::from("run_artifact"))
    );
    assert_eq!(details.get("caller"), Some(&Value::from("mallory")));
    assert_eq!(
        details.get("reason"),
        Some(&Value::from("claim_scope_violation"))
    );
    assert_eq!(details.get("key"), Some(&Value::from("")));
    assert!(audit::verify(&project.join(".sdd/audit"), &audit_key()).ok());
}

#[test]
fn a_journal_that_does_not_verify_blocks_the_post_before_any_write() {
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    copy_tree(&vector("artifacts"), project);
    let journal = project.join(".sdd/runs/task-t-42/journal.jsonl");
    let text = fs::read_to_string(&journal)
        .unwrap()
        .replace("\"size\": 75", "\"size\": 76");
    fs::write(&journal, text).unwrap();
    let before: Vec<(PathBuf, Vec<u8>)> = files_under(project)
        .into_iter()
        .map(|rel| {
            let bytes = fs::read(project.join(&rel)).unwrap();
            (rel, bytes)
        })
        .collect();

    let chain = AuditChain::open(project.join(".sdd/audit"), audit_key());
    let content = ArtifactContent::report("new").unwrap();
    let err = post_run_artifact_with_clock(
        project,
        &chain,
        &request("t-42", "summary", &content),
        || 0.0,
    )
    .unwrap_err();
    assert!(matches!(err, Error::JournalUnusable { .. }), "{err}");
    let after: Vec<(PathBuf, Vec<u8>)> = files_under(project)
        .into_iter()
        .map(|rel| {
            let bytes = fs::read(project.join(&rel)).unwrap();
            (rel, bytes)
        })
        .collect();
    assert_eq!(before, after);

    // The verifier reports the edited journal against every row.
    let report = verify_run_artifacts(project, "t-42", &audit_key()).unwrap();
    assert!(report.results.iter().all(|r| !r.ok));
    assert!(
        report.results[0]
            .reason
            .starts_with("task journal Merkle chain")
    );
}

#[test]
fn a_tampered_spine_or_corrupt_blob_blocks_the_post() {
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    copy_tree(&vector("artifacts_tampered"), project);
    let chain = AuditChain::open(project.join(".sdd/audit"), audit_key());
    // The tampered vector's v1 report blob is corrupt; posting the same content again would
    // overwrite the evidence, so it is refused.
    let same = ArtifactContent::report("# Audit summary\n\nAll good. caf\u{e9}").unwrap();
    let err =
        post_run_artifact_with_clock(project, &chain, &request("t-42", "summary", &same), || 0.0)
            .unwrap_err();
    assert!(matches!(err, Error::EvidenceUnusable { .. }), "{err}");

    let spine = project.join(".sdd/lineage/task-t-42/spine.jsonl");
    let text = fs::read_to_string(&spine)
        .unwrap()
        .replace("worker-a", "worker-b");
    fs::write(&spine, &text).unwrap();
    let other = ArtifactContent::report("other").unwrap();
    let err = post_run_artifact_with_clock(project, &chain, &request("t-42", "x", &other), || 0.0)
        .unwrap_err();
    assert!(matches!(err, Error::EvidenceUnusable { .. }), "{err}");
    assert_eq!(fs::read_to_string(&spine).unwrap(), text);
}

// ---------------------------------------------------------------------------------------------
// Any single-byte change is reported
// ---------------------------------------------------------------------------------------------

struct PostedProject {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

fn posted_project() -> &'static PostedProject {
    static PROJECT: std::sync::OnceLock<PostedProject> = std::sync::OnceLock::new();
    PROJECT.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        post_vector_inputs(&root);
        PostedProject { _dir: dir, root }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_single_byte_change_to_a_spine_is_reported(position in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let root = &posted_project().root;
        let spine_dir = root.join(".sdd/lineage/task-t-42");
        let original = fs::read(spine_dir.join(SPINE_FILE_NAME)).unwrap();
        let head = fs::read(spine_dir.join(SPINE_HEAD_FILE_NAME)).unwrap();
        let at = position.index(original.len());
        prop_assume!(original[at] != byte);
        let mut edited = original.clone();
        edited[at] = byte;
        let report = verify_spine_bytes(&edited, Some(&head), &audit_key());
        prop_assert_eq!(report.status, SpineStatus::Tampered, "byte {} -> {:#04x}", at, byte);
        prop_assert!(!report.errors.is_empty());
    }

    #[test]
    fn any_single_byte_change_to_a_blob_is_reported(blob in 0usize..4, position in any::<prop::sample::Index>(), byte in any::<u8>()) {
        // Each case works on its own copy, so cases stay independent.
        let scratch = tempfile::tempdir().unwrap();
        copy_tree(&posted_project().root, scratch.path());
        let blobs = files_under(&scratch.path().join(".sdd/evidence"));
        let path = scratch.path().join(".sdd/evidence").join(&blobs[blob]);
        let mut bytes = fs::read(&path).unwrap();
        let at = position.index(bytes.len());
        prop_assume!(bytes[at] != byte);
        bytes[at] = byte;
        fs::write(&path, &bytes).unwrap();
        let report = verify_run_artifacts(scratch.path(), "t-42", &audit_key()).unwrap();
        let failing: Vec<_> = report.results.iter().filter(|r| !r.ok).collect();
        prop_assert!(!failing.is_empty());
        for result in failing {
            prop_assert!(result.reason.starts_with("blob content hash"), "{}", result.reason);
        }
    }
}

#[test]
fn a_post_reproduces_the_live_server_record_and_spine() {
    // The live task server's `POST /tasks/55ad7026909d/artifacts` as `worker-a`, recorded in
    // `http/transcript.json`; its spine and blob are in `server_probe/`.
    let transcript = read_json(&vector("http/transcript.json"));
    let exchange = transcript
        .as_array()
        .unwrap()
        .iter()
        .find(|e| object(e).get("label") == Some(&Value::from("post artifact as claim holder")))
        .unwrap();
    let response = object(
        object(object(exchange).get("response").unwrap())
            .get("json")
            .unwrap(),
    );

    let scratch = tempfile::tempdir().unwrap();
    let chain = AuditChain::open(scratch.path().join(".sdd/audit"), audit_key());
    let content = ArtifactContent::report("# hi").unwrap();
    let posted = post_run_artifact_with_clock(
        scratch.path(),
        &chain,
        &PostRequest {
            spine_timestamp: Some(1_796_004_102),
            ..request("55ad7026909d", "summary", &content)
        },
        || 1_796_004_102.0,
    )
    .unwrap();
    let wire = posted.to_wire();
    let keys: Vec<&str> = wire.keys().collect();
    let theirs: Vec<&str> = response.keys().collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    let mut theirs_sorted = theirs.clone();
    theirs_sorted.sort_unstable();
    assert_eq!(sorted, theirs_sorted);
    for (field, value) in response.iter() {
        assert_eq!(
            wire.get(field).map(|v| v.dumps(Dialect::PY_COMPACT_UTF8)),
            Some(value.dumps(Dialect::PY_COMPACT_UTF8)),
            "{field}"
        );
    }
    let probe = vector("server_probe/.sdd");
    let ours = scratch.path().join(".sdd");
    for rel in [
        "lineage/task-55ad7026909d/spine.jsonl",
        "lineage/task-55ad7026909d/spine.head",
        "evidence/blobs/b2/b23b1e10fd6e3049c01d1ef479497a8a1be1085d8d58ac3277c4818cd6afcfff",
    ] {
        assert_eq!(
            fs::read(ours.join(rel)).unwrap(),
            fs::read(probe.join(rel)).unwrap(),
            "{rel}"
        );
    }
}

#[test]
fn findings_and_report_citations_match_the_reference() {
    // The reference posted the same finding and a report citing it; these are its content
    // hashes and, after the finding's blob was edited (`eval(x)` -> `eval(y)`), its reasons.
    let finding_hash = "sha256:0ce3ebd6008efbfc52c5f0675a9a20470b6a09b8fbceaf0fdf00846f8b7cceee";
    let report_hash = "sha256:7b2b8a9c1297d612eb32e2a455cf1fd6a1151d1f4a4fc0940add2640f1347c06";
    let edited_hash = "sha256:eae5e5a84e0c03d375effd0ff4846aecae3a3d71e3739d7050f330cc282faaf7";

    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    let key = audit_key();
    let chain = AuditChain::open(project.join(".sdd/audit"), key.clone());
    let sarif = Value::parse(
        r#"{"ruleId":"R1","locations":[{"physicalLocation":{"artifactLocation":{"uri":"src/a.py"},"region":{"startLine":4,"snippet":{"text":"eval(x)"}}}}]}"#,
    )
    .unwrap();
    let finding = ArtifactContent::finding(
        object(&sarif),
        &bernstein_journal::artifacts::FindingProvenance {
            tool: "scan".into(),
            tool_version: "1.0".into(),
            pinned_ruleset_or_feed_digest: "sha256:ab".into(),
            invocation_argv_hash: "h".into(),
            target: "repo".into(),
        },
    )
    .unwrap();
    let posted =
        post_run_artifact_with_clock(project, &chain, &request("t-9", "f1", &finding), || 0.0)
            .unwrap();
    assert_eq!(posted.record.content_hash, finding_hash);
    let report = ArtifactContent::report_citing(
        "cites f1",
        vec![
            Object::new()
                .with("task_id", "t-9")
                .with("key", "f1")
                .with("version", 1)
                .with("finding_hash", finding_hash),
        ],
    )
    .unwrap();
    let posted =
        post_run_artifact_with_clock(project, &chain, &request("t-9", "r1", &report), || 0.0)
            .unwrap();
    assert_eq!(posted.record.content_hash, report_hash);
    assert!(verify_run_artifacts(project, "t-9", &key).unwrap().ok());

    let hex = &finding_hash["sha256:".len()..];
    let blob = project.join(format!(".sdd/evidence/blobs/{}/{hex}", &hex[..2]));
    let text = fs::read_to_string(&blob)
        .unwrap()
        .replace("eval(x)", "eval(y)");
    fs::write(&blob, text).unwrap();
    let reasons: Vec<String> = verify_run_artifacts(project, "t-9", &key)
        .unwrap()
        .results
        .into_iter()
        .map(|r| r.reason)
        .collect();
    assert_eq!(
        reasons,
        vec![
            format!(
                "blob content hash {edited_hash} does not match journal row {finding_hash} (key='f1' version=1 index=0)"
            ),
            format!(
                "referenced finding 't-9':'f1' receipt hash {edited_hash} does not match report's recorded finding_hash {finding_hash} (key='r1' version=1 index=1)"
            ),
        ]
    );
}

#[test]
fn a_post_without_a_spine_timestamp_reads_the_system_clock() {
    let scratch = tempfile::tempdir().unwrap();
    let chain = AuditChain::open(scratch.path().join(".sdd/audit"), audit_key());
    let content = ArtifactContent::report("now").unwrap();
    let seconds = || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        i64::try_from(now.unwrap().as_secs()).unwrap()
    };
    let before = seconds();
    let posted = post_run_artifact_with_clock(
        scratch.path(),
        &chain,
        &PostRequest {
            spine_timestamp: None,
            ..request("t-3", "k", &content)
        },
        || 0.0,
    )
    .unwrap();
    let after = seconds();
    let stamped = posted.spine_entry.timestamp;
    assert!(
        (before..=after).contains(&stamped),
        "{before} <= {stamped} <= {after}"
    );
}

#[test]
fn a_post_whose_record_does_not_verify_says_why_and_returns_no_content() {
    // A report may cite a finding that does not exist; the post is anchored all the same, and
    // the answer carries the verifier's verdict on it instead of the content.
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    let chain = AuditChain::open(project.join(".sdd/audit"), audit_key());
    let report = ArtifactContent::report_citing(
        "cites nothing real",
        vec![
            Object::new()
                .with("task_id", "t-5")
                .with("key", "f1")
                .with("finding_hash", format!("sha256:{}", "0".repeat(64))),
        ],
    )
    .unwrap();
    let posted =
        post_run_artifact_with_clock(project, &chain, &request("t-9", "r1", &report), || 0.0)
            .unwrap();
    assert!(!posted.verified);
    assert_eq!(
        posted.verify_reason,
        "referenced finding task 't-5' has no artifacts (key='r1' version=1 index=0)"
    );
    assert_eq!(posted.content, None);
    assert_eq!(posted.to_wire().get("verified"), Some(&Value::from(false)));
    assert!(matches!(posted.audit, AuditMirror::Recorded { .. }));

    // The verdict is the new row's own, not that of an earlier version of the key.
    let plain = ArtifactContent::report("cites nothing").unwrap();
    let posted =
        post_run_artifact_with_clock(project, &chain, &request("t-9", "r1", &plain), || 0.0)
            .unwrap();
    assert_eq!(posted.record.version, 2);
    assert!(posted.verified, "{}", posted.verify_reason);
    assert_eq!(posted.verify_reason, "");
}

#[test]
fn the_post_verdict_is_its_own_row_even_when_another_claims_its_index() {
    // The journal's stored `index` member is outside its hashes, so an earlier row may claim
    // the index the next post receives and still verify; the verdict is found by key, version
    // and index together.
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    let key = audit_key();
    let chain = AuditChain::open(project.join(".sdd/audit"), key.clone());
    let post = |artifact_key: &str, body: &str| {
        let content = ArtifactContent::report(body).unwrap();
        post_run_artifact_with_clock(
            project,
            &chain,
            &request("t-4", artifact_key, &content),
            || 0.0,
        )
        .unwrap()
    };
    let first = post("a", "first");
    // The first row now claims index 1 and has lost its blob, so its own verdict fails.
    let journal = project.join(".sdd/runs/task-t-4/journal.jsonl");
    let text = fs::read_to_string(&journal)
        .unwrap()
        .replace("\"index\": 0", "\"index\": 1");
    fs::write(&journal, text).unwrap();
    let hex = &first.record.content_hash["sha256:".len()..];
    fs::remove_file(project.join(format!(".sdd/evidence/blobs/{}/{hex}", &hex[..2]))).unwrap();

    let second = post("b", "second");
    assert_eq!(second.record.journal_index, 1);
    assert!(second.verified, "{}", second.verify_reason);
    let results = verify_run_artifacts(project, "t-4", &key).unwrap().results;
    let verdicts: Vec<(&str, i64, bool)> = results
        .iter()
        .map(|r| (r.key.as_str(), r.journal_index, r.ok))
        .collect();
    assert_eq!(verdicts, vec![("a", 1, false), ("b", 1, true)]);
}

#[test]
fn a_journal_moved_under_another_task_name_fails_the_project_check() {
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    copy_tree(&vector("artifacts"), project);
    fs::rename(
        project.join(".sdd/runs/task-t-42"),
        project.join(".sdd/runs/task-t-43"),
    )
    .unwrap();
    // A task journal without artifact rows whose chain is broken may be hiding rows.
    let hidden = project.join(".sdd/runs/task-t-44");
    fs::create_dir_all(&hidden).unwrap();
    fs::write(
        hidden.join("journal.jsonl"),
        "{\"index\": 0, \"event\": \"x\"}\n",
    )
    .unwrap();
    let report = verify_all_run_artifacts(project, &audit_key()).unwrap();
    let reasons: Vec<(&str, &str)> = report
        .results
        .iter()
        .map(|r| (r.task_id.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (
                "t-43",
                "artifact row task id does not resolve to its own journal (task-t-43); the journal has been tampered with"
            ),
            (
                "t-44",
                "task journal Merkle chain/reader coverage does not verify (task-t-44); artifact rows may be hidden"
            ),
        ]
    );
    assert!(!report.ok());
}

// ---------------------------------------------------------------------------------------------
// Crash windows: torn tails and a post killed between its spine entry and its journal row
// ---------------------------------------------------------------------------------------------

/// What a post killed after its spine append and before its journal row leaves behind: the
/// spine entry for `artifact:<key>:v<version>`, without the journal row.
pub(crate) fn orphan_spine_entry(project: &Path, run_id: &str, key: &str, version: i64) {
    let spine = LineageSpine::open(project, run_id, &audit_key()).unwrap();
    let content = ArtifactContent::report("lost").unwrap().canonical_bytes();
    spine
        .append(&bernstein_journal::artifacts::NewSpineEntry {
            artifact_path: &format!("run-artifacts/{run_id}/{key}/v{version}"),
            content: &content,
            actor: "worker-a",
            step_id: &format!("artifact:{key}:v{version}"),
            model: "",
            timestamp: 1_780_000_701,
            trace: &TraceContext::default(),
        })
        .unwrap();
}

#[test]
fn a_post_killed_before_its_journal_row_never_reuses_its_version() {
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    let key = audit_key();
    let chain = AuditChain::open(project.join(".sdd/audit"), key.clone());
    let v1 = ArtifactContent::report("v1").unwrap();
    let post = |content: &ArtifactContent| {
        post_run_artifact_with_clock(project, &chain, &request("T-9", "notes", content), || {
            1_780_000_000.0
        })
        .unwrap()
    };
    let first = post(&v1);
    orphan_spine_entry(project, "task-T-9", "notes", 2);

    // The verifier sees the orphan from the spine side, as a torn post: crash debris of a
    // post never acknowledged, reported without failing the task.
    let report = verify_run_artifacts(project, "T-9", &key).unwrap();
    assert!(report.ok(), "{report:?}");
    assert!(
        report.spine_findings.is_empty(),
        "{:?}",
        report.spine_findings
    );
    assert_eq!(report.spine_tears.len(), 1, "{:?}", report.spine_tears);
    assert!(
        report.spine_tears[0].starts_with("torn post: ")
            && report.spine_tears[0].contains("artifact:notes:v2")
            && report.spine_tears[0].contains("no artifact_posted row"),
        "{:?}",
        report.spine_tears
    );

    let next = post(&ArtifactContent::report("v3").unwrap());
    assert_eq!(next.record.version, 3, "version 2 is spent by the orphan");
    assert_eq!(
        next.record.prev_version_hash, first.record.spine_entry_hash,
        "the previous version is the last one the journal acknowledged"
    );
    let steps: Vec<String> = LineageSpine::open(project, "task-T-9", &key)
        .unwrap()
        .entries()
        .unwrap()
        .into_iter()
        .map(|entry| entry.step_id)
        .collect();
    assert_eq!(
        steps,
        vec![
            "artifact:notes:v1",
            "artifact:notes:v2",
            "artifact:notes:v3"
        ]
    );
    let report = verify_run_artifacts(project, "T-9", &key).unwrap();
    assert!(report.results.iter().all(|r| r.ok), "{report:#?}");
    assert!(
        report.spine_findings.is_empty(),
        "{:?}",
        report.spine_findings
    );
    assert_eq!(report.spine_tears.len(), 1, "{:?}", report.spine_tears);
}

#[test]
fn a_reused_version_in_the_spine_is_reported() {
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    let key = audit_key();
    let chain = AuditChain::open(project.join(".sdd/audit"), key.clone());
    post_run_artifact_with_clock(
        project,
        &chain,
        &request("T-8", "notes", &ArtifactContent::report("v1").unwrap()),
        || 1_780_000_000.0,
    )
    .unwrap();
    // What a reusing writer leaves: a second `artifact:notes:v1` entry.
    orphan_spine_entry(project, "task-T-8", "notes", 1);
    let findings = bernstein_journal::artifacts::spine_findings(project, "task-T-8", &key).unwrap();
    assert!(
        findings
            .problems
            .iter()
            .any(|f| f.contains("more than once")),
        "{findings:?}"
    );
}

#[test]
fn torn_journal_and_spine_tails_do_not_block_the_next_post() {
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    let key = audit_key();
    let chain = AuditChain::open(project.join(".sdd/audit"), key.clone());
    let post = |content: &ArtifactContent| {
        post_run_artifact_with_clock(project, &chain, &request("T-7", "notes", content), || {
            1_780_000_000.0
        })
    };
    post(&ArtifactContent::report("v1").unwrap()).unwrap();
    let journal = project.join(".sdd/runs/task-T-7/journal.jsonl");
    let spine = project.join(".sdd/lineage/task-T-7/spine.jsonl");
    for (path, half) in [
        (
            &journal,
            &b"{\"ts\": 1780000001.0, \"elapsed_s\": 0.0, \"ind"[..],
        ),
        (&spine, &b"{\"v\":2,\"prev_hash\":\"sha256:"[..]),
    ] {
        let mut bytes = fs::read(path).unwrap();
        bytes.extend_from_slice(half);
        fs::write(path, bytes).unwrap();
    }
    let second = post(&ArtifactContent::report("v2").unwrap()).unwrap();
    assert_eq!(second.record.version, 2);
    assert!(second.verified, "{}", second.verify_reason);
    let report = verify_run_artifacts(project, "T-7", &key).unwrap();
    assert!(report.ok(), "{report:#?}");
    let log = bernstein_journal::durable::read_tear_log(project).unwrap();
    let cut: Vec<&str> = log.tears.iter().map(|t| t.file.as_str()).collect();
    assert_eq!(
        cut,
        vec![
            ".sdd/lineage/task-T-7/spine.jsonl",
            ".sdd/runs/task-T-7/journal.jsonl"
        ]
    );
}

/// A post killed after its spine row and before it replaced `spine.head` leaves the head of the
/// row before: an authentic snapshot, behind by one. That is crash debris (a head tear), not a
/// head finding; a head whose snapshot does not authenticate stays a finding.
#[test]
fn a_head_left_behind_by_a_killed_post_is_a_tear_and_a_forged_one_is_not() {
    let scratch = tempfile::tempdir().unwrap();
    let project = scratch.path();
    let key = audit_key();
    let chain = AuditChain::open(project.join(".sdd/audit"), key.clone());
    let post = |body: &str| {
        post_run_artifact_with_clock(
            project,
            &chain,
            &request("T-6", "notes", &ArtifactContent::report(body).unwrap()),
            || 1_780_000_000.0,
        )
        .unwrap()
    };
    post("v1");
    let head_path = project.join(".sdd/lineage/task-T-6/spine.head");
    let behind = fs::read(&head_path).unwrap();
    post("v2");
    let spine = LineageSpine::open(project, "task-T-6", &key).unwrap();
    let current = spine.verify().unwrap();
    assert!(current.head_findings.is_empty() && current.head_tears.is_empty());

    fs::write(&head_path, &behind).unwrap();
    let stale = spine.verify().unwrap();
    assert!(stale.ok(), "{stale:?}");
    assert!(stale.head_findings.is_empty(), "{stale:?}");
    assert!(
        stale
            .head_tears
            .iter()
            .any(|t| t.contains("spine.head names head")),
        "{stale:?}"
    );

    // The same snapshot with one digit of its hmac changed.
    let mut forged = String::from_utf8(behind).unwrap();
    let at = forged.find("\"hmac\"").unwrap() + "\"hmac\"".len();
    let digit = at + forged[at..].find(|c: char| c.is_ascii_hexdigit()).unwrap();
    let flipped = if &forged[digit..=digit] == "0" {
        "1"
    } else {
        "0"
    };
    forged.replace_range(digit..=digit, flipped);
    fs::write(&head_path, forged).unwrap();
    let tampered = spine.verify().unwrap();
    assert!(
        tampered
            .head_findings
            .iter()
            .any(|f| f.contains("hmac mismatch")),
        "{tampered:?}"
    );
    assert!(tampered.head_tears.is_empty(), "{tampered:?}");
}
