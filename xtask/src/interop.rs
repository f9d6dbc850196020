//! `cargo xtask interop [evidence | chain | clients | loop]`: checks bernstein-mcp against the reference
//! implementation and real MCP clients. With no stage every stage runs; each says SKIPPED when
//! what it needs is missing, and the command fails when any stage that ran failed.
//!
//! `evidence` works in two directions, both with real files on disk:
//!
//! 1. evidence written by this workspace's crates (an audit chain, run journals in both hash
//!    profiles, a run handle, a claimable backlog with granted and refused claim receipts, run
//!    artifacts with their blobs and lineage spine, a signed context capsule, signed mailbox
//!    entries mirrored to the chain) is fed to the reference's own verifiers: the kit's
//!    `verify_dir.py` and `bernstein audit verify-hmac`;
//! 2. a chain written by the reference is fed to our `bernstein-mcp audit verify`;
//! 3. the portable `TaskBackend` suite runs through our remote backend against a live
//!    `bernstein serve` started on a free loopback port.
//!
//! `chain` has the reference's own audit writer and ours append to one chain at the same moment
//! (both start on a go-file and share `.chain.lock`); both verifiers must accept the result.
//! `.ci/run` runs it whenever it has set up the reference.
//!
//! `clients` drives the `bernstein-mcp` binary over stdio with the kit's real MCP clients
//! (`interop_clients.rs`); `loop` runs the worker loop through a real client on the embedded
//! store and against a live `bernstein serve`, then verifies the evidence (`interop_loop.rs`).
//! With `--http` both run over `bernstein-mcp --transport http` instead: `clients` drives
//! streamable HTTP without and with a bearer token and the SSE transport, `loop` drives
//! streamable HTTP with a bearer.
//!
//! The reference ("oracle") is optional: when it is not installed `evidence` and `loop` say so
//! and succeed without claiming anything. Install it with
//! `bash ../shared/reference/setup-oracle.sh`. The clients come from the kit's
//! `clients/install.sh`, which `clients` runs when they are missing.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};
use bernstein_journal::artifacts::{ArtifactContent, PostRequest, TraceContext, post_run_artifact};
use bernstein_journal::audit::{AuditChain, AuditEvent, keyless_newest_segment_head};
use bernstein_journal::capsule::{ContextCapsule, seal_and_bind};
use bernstein_journal::claim::{
    BacklogEntry, ClaimFilter, ClaimRequest, ClaimTime, backlog_path, claim_in_project,
    write_backlog,
};
use bernstein_journal::dlp::RedactionContext;
use bernstein_journal::handle;
use bernstein_journal::identity::SigningIdentity;
use bernstein_journal::key::AuditKey;
use bernstein_journal::mailbox::{Mailbox, NewMessage};
use bernstein_journal::run_journal::{HashProfile, JournalWriter};
use bernstein_protocol::pyjson::{Int, Object, Value};

use crate::interop_drivers::ClientKit;
use crate::{cargo, interop_clients, interop_loop, project_root};

/// The reference kit and its interpreter, when both are present.
pub(crate) struct Oracle {
    pub(crate) python: PathBuf,
    pub(crate) cli: PathBuf,
    pub(crate) verify_dir: PathBuf,
}

impl Oracle {
    pub(crate) fn locate() -> Option<Oracle> {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        let python = std::env::var_os("BERNSTEIN_PY")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".cache/bernstein-mcp/oracle/bin/python"));
        let kit = std::env::var_os("BERNSTEIN_REFERENCE_KIT")
            .map(PathBuf::from)
            .unwrap_or_else(|| project_root().join("../shared/reference"));
        let verify_dir = kit.join("vectors/verify_dir.py");
        let cli = python.with_file_name("bernstein");
        (python.exists() && verify_dir.exists() && cli.exists()).then_some(Oracle {
            python,
            cli,
            verify_dir,
        })
    }
}

/// The stages `cargo xtask interop STAGE` can run alone.
const STAGES: [&str; 4] = ["evidence", "chain", "clients", "loop"];

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let http = args.iter().any(|arg| arg == "--http");
    let stages: Vec<&String> = args.iter().filter(|arg| *arg != "--http").collect();
    let only = match stages.as_slice() {
        [] => None,
        [stage] if STAGES.contains(&stage.as_str()) => Some(stage.as_str()),
        _ => bail!(
            "unknown interop stage {:?}; usage: cargo xtask interop [{}] [--http]",
            args.join(" "),
            STAGES.join(" | ")
        ),
    };
    let scratch = tempfile_dir()?;
    let mut failed = Vec::new();
    let mut ran = 0;
    for stage in STAGES.into_iter().filter(|s| only.is_none_or(|o| o == *s)) {
        match run_stage(stage, &scratch, http) {
            Ok(Ran::Yes) => ran += 1,
            Ok(Ran::Skipped) => {}
            Err(err) => {
                eprintln!("interop: {stage} FAILED: {err:#}");
                failed.push(stage);
            }
        }
    }
    if !failed.is_empty() {
        eprintln!("interop: scratch projects kept in {}", scratch.display());
        bail!("interop stages failed: {}", failed.join(", "));
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if ran == 0 {
        eprintln!("interop: nothing ran, every stage was SKIPPED");
    } else {
        eprintln!("interop: OK");
    }
    Ok(())
}

/// Whether a stage ran or was skipped for a missing prerequisite.
enum Ran {
    Yes,
    Skipped,
}

/// Runs one stage, or says SKIPPED (and succeeds) when a prerequisite is missing: the oracle
/// for `evidence`, `chain` and `loop`, the real MCP clients for `clients` and `loop`.
fn run_stage(stage: &str, scratch: &Path, http: bool) -> anyhow::Result<Ran> {
    let oracle = Oracle::locate();
    if oracle.is_none() && stage != "clients" {
        eprintln!(
            "interop: {stage} SKIPPED, the reference oracle is not installed \
             (run `bash ../shared/reference/setup-oracle.sh`, or set BERNSTEIN_PY and \
             BERNSTEIN_REFERENCE_KIT)"
        );
        return Ok(Ran::Skipped);
    }
    if let (Some(oracle), "chain") = (&oracle, stage) {
        appends_beside_the_reference_share_the_chain_lock(oracle, scratch)?;
        return Ok(Ran::Yes);
    }
    if let (Some(oracle), "evidence") = (&oracle, stage) {
        evidence_we_write_verifies_under_the_reference(oracle, scratch)?;
        chain_the_reference_writes_verifies_under_ours(oracle, scratch)?;
        backend_suite_passes_against_a_live_server(oracle, scratch)?;
        return Ok(Ran::Yes);
    }
    let kit = match ClientKit::locate_or_install()? {
        Ok(kit) => kit,
        Err(reason) => {
            eprintln!("interop: {stage} SKIPPED, {reason}");
            return Ok(Ran::Skipped);
        }
    };
    let binary = bernstein_mcp_binary()?;
    match (&oracle, stage) {
        (Some(oracle), "loop") => interop_loop::run(oracle, &kit, &binary, scratch, http)?,
        _ => interop_clients::run(&kit, &binary, scratch, http)?,
    }
    Ok(Ran::Yes)
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("bernstein-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

pub(crate) fn write_key(path: &Path) -> anyhow::Result<AuditKey> {
    std::fs::write(
        path,
        "3f1c9a7e5b2d4068a1c3e5f7092b4d6f8a0c2e4f6a8b0d2f4e6a8c0e2f4a6b8d\n",
    )?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(AuditKey::from_file(path)?)
}

/// Writes a project with our crates, then runs the reference's verifiers on it.
fn evidence_we_write_verifies_under_the_reference(
    oracle: &Oracle,
    scratch: &Path,
) -> anyhow::Result<()> {
    let root = scratch.join("ours");
    let sdd = root.join(".sdd");
    std::fs::create_dir_all(&sdd)?;
    let key_path = scratch.join("audit.key");
    let key = write_key(&key_path)?;
    let chain = AuditChain::open(sdd.join("audit"), key.clone());

    // Audit events whose details exercise the dialect: non-ASCII, astral characters, floats in
    // both notations, an integer beyond 64 bits, nesting.
    let tricky = Object::new()
        .with("task_id", "t-1")
        .with("title", "caf\u{e9} \u{1d11e} \u{2028} \"quoted\" \\ /")
        .with("cost_usd", 1e-7)
        .with("elapsed", 2.0)
        .with(
            "huge",
            Value::Int(Int::parse("1000000000000000000000000000000").context("int")?),
        )
        .with(
            "nested",
            Object::new().with("b", vec![1, 2]).with("a", Value::Null),
        );
    chain.append(&AuditEvent::new(
        "task.created",
        "task_server",
        "task",
        "t-1",
        tricky,
    ))?;

    // The claimable backlog and a granted, signed claim receipt for t-1.
    let mut row = BacklogEntry::new("t-1");
    row.role = Some("backend".to_owned());
    write_backlog(&backlog_path(&root), &[row, BacklogEntry::new("t-2")])?;
    let filter = ClaimFilter {
        role: Some("backend".to_owned()),
        ..ClaimFilter::default()
    };
    let request = ClaimRequest::new("worker-a", filter);
    let granted = claim_in_project(&root, key.clone(), &request, ClaimTime::now())?;
    ensure!(granted.granted(), "the backlog row should be claimable");
    let mut receipts = vec![write_receipt(
        scratch,
        "granted",
        &granted.receipt.to_wire_text(),
    )?];

    // A run journal in each hash profile, moving the run from working to completed.
    let mut journal = JournalWriter::open(&root, "task-t-1", HashProfile::PyJsonV1)?;
    journal.append(
        "task_claimed",
        &Object::new()
            .with("task_id", "t-1")
            .with("claimed_by", "w\u{e9}"),
    )?;
    journal.append(
        "task_progress",
        &Object::new().with("task_id", "t-1").with("fraction", 0.5),
    )?;

    // Artifacts: each writes a blob, a spine entry, an `artifact_posted` row and a `run.artifact`
    // audit event.
    let contents = [
        (
            "summary",
            ArtifactContent::report("# R\u{e9}sum\u{e9}\n\nAll green \u{2705}")?,
        ),
        (
            "results",
            ArtifactContent::table(
                &["name".into(), "score".into()],
                &[vec!["caf\u{e9}".into(), 2.5.into()]],
            )?,
        ),
        (
            "preview",
            ArtifactContent::link("https://example.invalid/preview", "preview")?,
        ),
        ("summary", ArtifactContent::report("second version")?),
    ];
    for (artifact_key, content) in &contents {
        post_run_artifact(
            &root,
            &chain,
            &PostRequest {
                task_id: "t-1",
                key: artifact_key,
                content,
                holder: Some("worker-a"),
                poster: "worker-a",
                trace: TraceContext::default(),
                spine_timestamp: None,
                audit_timestamp: None,
            },
        )?;
    }

    // A signed context capsule bound to the chain and the run journal.
    let mut capsule = ContextCapsule::new("t-1", "task-t-1");
    capsule.role = "backend".to_owned();
    capsule.budget_remaining_tokens = 1000;
    capsule.audit_chain_head = chain.recovered_head();
    let capsule_signer = SigningIdentity::load_or_create(&sdd.join("identity"), "context_capsule")?;
    seal_and_bind(
        &root,
        &chain,
        Some(&mut journal),
        capsule,
        &capsule_signer,
        None,
    )?;
    journal.append(
        "task_completed",
        &Object::new()
            .with("task_id", "t-1")
            .with("result_summary", "done \u{1f600}"),
    )?;
    let mut jcs = JournalWriter::open(&root, "run-jcs", HashProfile::JcsV2)?;
    jcs.append(
        "run_started",
        &Object::new()
            .with("goal", "\u{e9}t\u{e9}")
            .with("ratio", 1e21),
    )?;
    jcs.append("run_completed", &Object::new().with("ok", true))?;

    // Mailbox entries, each mirrored to the chain as the task server does. No body holds U+2028,
    // U+2029 or U+0085: the reference reloads rows with `str.splitlines()` and cannot read such a
    // mailbox back (FORMATS.md §5); ours can, and a unit test covers that case.
    let signer = SigningIdentity::load_or_create(&sdd.join("identity"), "mailbox_signing")?;
    let mailbox = Mailbox::open(&sdd, key.master(), signer);
    for body in [
        "first finding",
        "token=abc export API_TOKEN=s3cret",
        "caf\u{e9} \u{1d11e} mail to someone@example.com",
    ] {
        let entry = mailbox.post(
            &NewMessage::new("t-1", "worker-a", "finding", body, 1_780_000_000.25),
            &RedactionContext::default(),
        )?;
        chain.append(&entry.audit_mirror_event())?;
    }

    // A second claim finds nothing eligible: a signed refusal, with no audit event.
    let refused = claim_in_project(&root, key.clone(), &request, ClaimTime::now())?;
    ensure!(!refused.granted(), "nothing should be left to claim");
    receipts.push(write_receipt(
        scratch,
        "refused",
        &refused.receipt.to_wire_text(),
    )?);

    // The run handle, projected after the last audit append, as `bernstein_run_status` does.
    let chain_head = keyless_newest_segment_head(&sdd.join("audit"));
    let handle = handle::project_run_handle(&root, "t-1", &chain_head)?;
    let handle_path = scratch.join("handle.json");
    std::fs::write(&handle_path, handle.render_run_status_body())?;

    let output = Command::new(&oracle.python)
        .arg(&oracle.verify_dir)
        .arg(&root)
        .arg("--key-file")
        .arg(&key_path)
        .arg("--handle")
        .arg(&handle_path)
        .args(
            receipts
                .iter()
                .flat_map(|r| [std::ffi::OsStr::new("--receipt"), r.as_os_str()]),
        )
        .output()
        .context("run verify_dir.py")?;
    let report = String::from_utf8_lossy(&output.stdout);
    let parsed = Value::parse(&report)
        .with_context(|| format!("verify_dir.py printed no JSON: {report}"))?;
    let object = parsed.as_object().context("report is an object")?;
    for section in [
        "audit",
        "journals",
        "handles",
        "receipts",
        "mailbox",
        "artifacts",
        "spines",
        "capsules",
    ] {
        let ok = object
            .get(section)
            .and_then(Value::as_object)
            .and_then(|s| s.get("ok"));
        eprintln!(
            "interop: reference verify_dir.py section {section:<8} ok={}",
            ok.map(Value::to_python_str).unwrap_or_default()
        );
    }
    ensure!(
        output.status.success(),
        "the reference rejected evidence we wrote:\n{report}"
    );

    let output = Command::new(&oracle.cli)
        .args(["audit", "verify-hmac"])
        .current_dir(&root)
        .env("BERNSTEIN_AUDIT_KEY_PATH", &key_path)
        .output()
        .context("run bernstein audit verify-hmac")?;
    eprintln!(
        "interop: reference `bernstein audit verify-hmac` exit={} {}",
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).trim()
    );
    ensure!(
        output.status.success(),
        "bernstein audit verify-hmac rejected our chain"
    );
    Ok(())
}

fn write_receipt(scratch: &Path, name: &str, wire: &str) -> anyhow::Result<PathBuf> {
    let path = scratch.join(format!("receipt_{name}.json"));
    std::fs::write(&path, wire)?;
    Ok(path)
}

/// Starts the reference's task server (`bernstein serve`) on a free loopback port in a scratch
/// project and runs the portable `TaskBackend` suite against it through our remote backend.
fn backend_suite_passes_against_a_live_server(
    oracle: &Oracle,
    scratch: &Path,
) -> anyhow::Result<()> {
    let root = scratch.join("served");
    std::fs::create_dir_all(root.join(".sdd"))?;
    let key_path = scratch.join("audit.key");
    // Ask the kernel for a free port, then hand it to the server.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let token = "interop-token";
    let mut server = Command::new(&oracle.cli)
        .args(["serve", "--host", "127.0.0.1", "--port", &port.to_string()])
        .current_dir(&root)
        .env("BERNSTEIN_AUTH_TOKEN", token)
        .env("BERNSTEIN_AUDIT_KEY_PATH", &key_path)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(scratch.join("serve.log"))?)
        .spawn()
        .context("start bernstein serve")?;
    let result = (|| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            ensure!(
                std::time::Instant::now() < deadline,
                "bernstein serve did not start within 60 s"
            );
            ensure!(
                server.try_wait()?.is_none(),
                "bernstein serve exited early (see serve.log)"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let output = cargo()
            .args([
                "test",
                "-q",
                "-p",
                "bernstein-tasks",
                "--test",
                "it",
                "remote::live_server",
                "--",
                "--exact",
                "--ignored",
                "--nocapture",
            ])
            .env("BERNSTEIN_REMOTE_URL", format!("http://127.0.0.1:{port}"))
            .env("BERNSTEIN_AUTH_TOKEN", token)
            .current_dir(project_root())
            .output()?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        for line in text.lines().filter(|l| l.starts_with("live_server:")) {
            eprintln!("interop: {line}");
        }
        ensure!(
            output.status.success(),
            "the TaskBackend suite failed against bernstein serve:\n{text}"
        );
        ensure!(
            text.contains("TaskBackend suite passed"),
            "the live suite did not run:\n{text}"
        );
        Ok(())
    })();
    let _ = server.kill();
    let _ = server.wait();
    result
}

/// The reference's own writer (`AuditChainStore.log_with_prev_digest`, in a Python process) and
/// ours append to one chain at the same moment, each taking `.chain.lock`: both start on one
/// go-file. Every record must be there, the two writers' records must interleave, and both our
/// verifier and the reference's `bernstein audit verify-hmac` must accept the chain.
fn appends_beside_the_reference_share_the_chain_lock(
    oracle: &Oracle,
    scratch: &Path,
) -> anyhow::Result<()> {
    const EACH: usize = 60;
    let root = scratch.join("shared-chain");
    let audit_dir = root.join(".sdd/audit");
    std::fs::create_dir_all(&audit_dir)?;
    let key_path = scratch.join("shared-chain.key");
    let key = write_key(&key_path)?;
    let go = scratch.join("shared-chain.go");
    let ready = scratch.join("shared-chain.ready");
    let script = r#"
import sys, time
from pathlib import Path
from bernstein.core.security.audit_chain import AuditChainStore
audit_dir, key_path, go, ready, count = sys.argv[1:6]
store = AuditChainStore(Path(audit_dir), key=Path(key_path).read_bytes().strip())
Path(ready).write_text("")
deadline = time.monotonic() + 60
while not Path(go).exists():
    if time.monotonic() > deadline:
        sys.exit("no go-file within 60 s")
    time.sleep(0.001)
for n in range(int(count)):
    store.log_with_prev_digest(event_type="task.created", actor="task_server", resource_type="task",
        resource_id=f"ref-{n}", details={"task_id": f"ref-{n}", "n": n})
"#;
    let mut python = Command::new(&oracle.python)
        .args(["-c", script])
        .arg(&audit_dir)
        .arg(&key_path)
        .arg(&go)
        .arg(&ready)
        .arg(EACH.to_string())
        .spawn()
        .context("start the reference's writer")?;
    let result = (|| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !ready.exists() {
            ensure!(
                python.try_wait()?.is_none(),
                "the reference's writer exited early"
            );
            ensure!(
                std::time::Instant::now() < deadline,
                "the reference's writer did not start within 60 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::fs::write(&go, b"")?;
        let chain = AuditChain::open(&audit_dir, key.clone());
        let bar = crate::progress::counter("interop: appending to the shared chain", EACH as u64);
        for n in 0..EACH {
            bar.inc();
            chain.append(&AuditEvent::new(
                "task.created",
                "bernstein-mcp",
                "task",
                format!("ours-{n}"),
                Object::new()
                    .with("task_id", format!("ours-{n}"))
                    .with("n", n),
            ))?;
        }
        ensure!(python.wait()?.success(), "the reference's writer failed");
        Ok(())
    })();
    if result.is_err() {
        let _ = python.kill();
        let _ = python.wait();
    }
    result?;

    let mut walk = bernstein_journal::audit::verified_records(&audit_dir, &key);
    let actors: Vec<String> = walk.by_ref().map(|record| record.actor).collect();
    let report = walk.finish();
    ensure!(
        report.ok(),
        "our verifier rejected the shared chain: {:?}",
        report.verify_messages()
    );
    ensure!(
        actors.len() == 2 * EACH,
        "{} records for {} appends",
        actors.len(),
        2 * EACH
    );
    let switches = actors.windows(2).filter(|w| w[0] != w[1]).count();
    eprintln!(
        "interop: shared chain: {} records, the writer changed {switches} times",
        actors.len()
    );
    ensure!(switches >= 2, "the two writers never interleaved");
    let output = Command::new(&oracle.cli)
        .args(["audit", "verify-hmac"])
        .current_dir(&root)
        .env("BERNSTEIN_AUDIT_KEY_PATH", &key_path)
        .output()
        .context("run bernstein audit verify-hmac")?;
    eprintln!(
        "interop: reference `bernstein audit verify-hmac` on the shared chain exit={} {}",
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).trim()
    );
    ensure!(
        output.status.success(),
        "bernstein audit verify-hmac rejected the shared chain"
    );
    Ok(())
}

/// Builds the `bernstein-mcp` binary and returns its path, so a build failure is reported as one
/// rather than as a verification verdict.
pub(crate) fn bernstein_mcp_binary() -> anyhow::Result<PathBuf> {
    let status = cargo()
        .args(["build", "-q", "-p", "bernstein-mcp"])
        .current_dir(project_root())
        .status()?;
    ensure!(status.success(), "cargo build -p bernstein-mcp failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| project_root().join("target"));
    Ok(target.join("debug/bernstein-mcp"))
}

/// Has the reference append a chain (with a concurrent writer of ours in between), then runs
/// `bernstein-mcp audit verify` on it.
fn chain_the_reference_writes_verifies_under_ours(
    oracle: &Oracle,
    scratch: &Path,
) -> anyhow::Result<()> {
    let root = scratch.join("theirs");
    let audit_dir = root.join(".sdd/audit");
    std::fs::create_dir_all(&audit_dir)?;
    let key_path = scratch.join("audit.key");
    let key = AuditKey::from_file(&key_path)?;
    let script = r#"
import sys
from pathlib import Path
from bernstein.core.security.audit_chain import AuditChainStore
store = AuditChainStore(Path(sys.argv[1]), key=Path(sys.argv[2]).read_bytes().strip())
for n in range(int(sys.argv[3])):
    store.log_with_prev_digest(event_type="task.created", actor="task_server", resource_type="task",
        resource_id=f"t-{n}", details={"task_id": f"t-{n}", "title": "caf\u00e9 \U0001d11e", "cost": 0.1 * n})
"#;
    let python = |count: &str| -> anyhow::Result<()> {
        let status = Command::new(&oracle.python)
            .args(["-c", script])
            .arg(&audit_dir)
            .arg(&key_path)
            .arg(count)
            .status()?;
        ensure!(status.success(), "the reference failed to append");
        Ok(())
    };
    python("20")?;
    // Our appender continues the reference's chain under the shared lock, then theirs again.
    AuditChain::open(&audit_dir, key).append(&AuditEvent::new(
        "task.created",
        "bernstein-mcp",
        "task",
        "ours",
        Object::new().with("task_id", "ours"),
    ))?;
    python("20")?;

    let status = Command::new(bernstein_mcp_binary()?)
        .args(["audit", "verify", "--workdir"])
        .arg(&root)
        .arg("--key-file")
        .arg(&key_path)
        .status()?;
    eprintln!(
        "interop: bernstein-mcp audit verify on a reference-written chain exit={}",
        status.code().unwrap_or(-1)
    );
    ensure!(
        status.success(),
        "bernstein-mcp rejected a chain the reference wrote"
    );
    Ok(())
}
