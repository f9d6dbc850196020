//! `cargo xtask interop clients`: real MCP clients drive the `bernstein-mcp` binary over stdio.
//!
//! The clients are the reference kit's own (`shared/clients/`, installed by its `install.sh`):
//! the Python SDK `mcp` 2.3.0 behind `mcp-py-client` in its three protocol modes (`legacy`
//! initialize handshake, `auto` discovery, pinned stateless `2026-07-28`), the TypeScript SDK
//! 1.32.2 behind `mcp-sdk-client`, and MCP Inspector 2.12 `--cli` in its `legacy` and `modern`
//! eras. Each client gets a fresh scratch project and, through the server started with
//! `--mcp-tier all`:
//!
//! * lists the tools (exactly the catalogue's 16 names), the prompts and reads the capability
//!   card `bernstein://capability`;
//! * gets each prompt (`orchestrate_goal`, `triage_failed_tasks`, `cost_recap`);
//! * calls every tool once with valid arguments, feeding the ids earlier calls returned into
//!   later ones (run → claim → post message → post artifact → complete → run status, and a
//!   second task for cancel and approve);
//! * leaves evidence that `bernstein-mcp verify` accepts.
//!
//! Inspector's `modern` era declares the Tasks extension, so its `bernstein_run` is
//! task-augmented: the server answers with a task, and Inspector polls `tasks/get` until the
//! task settles. That call runs in the background while the rest of the script claims and
//! completes the very task it polls, and its final answer is checked last.
//!
//! A step passes when the client reports no protocol error and the tool's payload (the
//! `{"result": …, "_meter": …}` envelope stripped) is what the step expects. A tool-level
//! refusal passes only where the script expects that refusal (approving a cancelled task, the
//! capsule of a task no orchestrator sealed).
//!
//! The drivers live in `interop_drivers.rs`; the worker-loop stage (`interop_loop.rs`) reuses
//! them and the loop steps defined here.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bernstein_tools::{Catalogue, Tier, ToolConfig};
use serde_json::{Value, json};

use crate::interop_drivers::{
    Client, ClientKit, Expect, Op, Project, Reply, Server, Step, Transcript, brief, exit_zero,
    field, field_is, inspector_reply, judge, shorten, tool_payload, verify_project,
};

/// The three prompts every client gets.
const PROMPTS: [&str; 3] = ["orchestrate_goal", "triage_failed_tasks", "cost_recap"];

/// The names of the tools the `all` tier lists, from the catalogue itself.
fn catalogue_names() -> anyhow::Result<Vec<String>> {
    let config = ToolConfig {
        tier: Tier::All,
        ..ToolConfig::default()
    };
    let catalogue = Catalogue::new(&config).context("build the tool catalogue")?;
    let mut names: Vec<String> = catalogue.tools().iter().map(|t| t.name.clone()).collect();
    names.sort();
    Ok(names)
}

/// The names in a `tools/list` or `prompts/list` result, sorted.
fn listed_names(result: &Value, list: &str) -> Vec<String> {
    let mut names: Vec<String> = result
        .get(list)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.get("name").and_then(Value::as_str))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The ids the second half of the script feeds back into the server.
struct Ids {
    /// The run's task id, when known before the claim (Inspector `modern` learns it from the
    /// claim receipt, since its `bernstein_run` is still being polled).
    task_id: Option<String>,
    /// The run id, or the task id, which `bernstein_run_status` takes alike.
    run_id: String,
    /// The second task, for cancel and approve.
    other_task_id: String,
}

/// The role the run's task is created with, so the worker's claim finds exactly it.
const RUN_ROLE: &str = "interop-backend";
const WORKER: &str = "interop-worker-1";

/// The first half of the script: listings, prompts, the card, and every call that needs no id.
fn discovery_steps(client: Client, tools: &[String]) -> Vec<Step> {
    let version = client.negotiated_version();
    let expected_tools = tools.to_vec();
    let mut steps = vec![
        Step::new(
            "info",
            Op::Info,
            Expect::result(move |result| {
                field_is(result, "protocolVersion", &Value::from(version))
            }),
        ),
        Step::new(
            "tools",
            Op::ListTools,
            Expect::result(move |result| {
                let listed = listed_names(result, "tools");
                if listed == expected_tools {
                    Ok(format!("{} tools", listed.len()))
                } else {
                    Err(format!("listed {listed:?}, expected {expected_tools:?}"))
                }
            }),
        ),
        Step::new(
            "prompts",
            Op::ListPrompts,
            Expect::result(|result| {
                let listed = listed_names(result, "prompts");
                let missing: Vec<&str> = PROMPTS
                    .iter()
                    .copied()
                    .filter(|p| !listed.iter().any(|l| l == p))
                    .collect();
                if missing.is_empty() {
                    Ok(format!("{} prompts", listed.len()))
                } else {
                    Err(format!("prompts {missing:?} are not listed in {listed:?}"))
                }
            }),
        ),
    ];
    let prompt_arguments: [(&'static str, Vec<(&'static str, &'static str)>); 3] = [
        (
            "orchestrate_goal",
            vec![("goal", "Add request tracing to the API")],
        ),
        ("triage_failed_tasks", vec![("limit", "3")]),
        ("cost_recap", vec![("window", "today")]),
    ];
    for (name, arguments) in prompt_arguments {
        steps.push(Step::new(
            name,
            Op::GetPrompt { name, arguments },
            Expect::result(|result| {
                let text = result
                    .pointer("/messages/0/content/text")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if text.is_empty() {
                    Err(format!("no message text in {}", brief(result)))
                } else {
                    Ok(format!("{} characters", text.chars().count()))
                }
            }),
        ));
    }
    let tool_count = tools.len();
    steps.push(Step::new(
        "card",
        Op::ReadResource("bernstein://capability"),
        Expect::result(move |result| {
            let text = result
                .pointer("/contents/0/text")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("no text contents in {}", brief(result)))?;
            let card: Value =
                serde_json::from_str(text).map_err(|err| format!("card is not JSON: {err}"))?;
            let tier = card.pointer("/tools/activeTier").and_then(Value::as_str);
            let advertised = card
                .pointer("/tools/advertised")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            if tier == Some("all") && advertised == tool_count {
                Ok(format!("tier all, {advertised} tools advertised"))
            } else {
                Err(format!(
                    "card says tier {tier:?} with {advertised} tools: {}",
                    shorten(text, 300)
                ))
            }
        }),
    ));
    steps.push(Step::new(
        "status",
        Op::call("bernstein_status", json!({})),
        Expect::payload(|p| field_is(p, "live", &Value::Bool(true))),
    ));
    if client != Client::Inspector("modern") {
        steps.push(run_step());
    }
    steps.extend([
        Step::new(
            "create_task",
            Op::call(
                "bernstein_create_task",
                json!({"title": "Review the tracing change", "description": "Second task of the interop script", "role": "interop-reviewer"}),
            ),
            Expect::payload(|p| field(p, "id").map(|id| format!("task {id}"))),
        ),
        Step::new(
            "subscribe",
            Op::call(
                "bernstein_subscribe",
                json!({"role": "interop-idle", "timeout_seconds": 1}),
            ),
            Expect::payload(|p| field_is(p, "timed_out", &Value::Bool(true))),
        ),
        Step::new(
            "skills",
            Op::call("load_skill", json!({})),
            Expect::payload(|p| non_empty_array(p.get("skills"), "skills")),
        ),
        Step::new(
            "scenarios",
            Op::call("bernstein_scenario", json!({"action": "list"})),
            Expect::payload(|p| non_empty_array(Some(p), "scenarios")),
        ),
        Step::new(
            "lineage",
            Op::call(
                "bernstein_verify_lineage",
                json!({"artefact_path": "src/lib.rs"}),
            ),
            Expect::payload(|p| match p.get("ok") {
                Some(Value::Bool(ok)) => Ok(format!("ok={ok}")),
                _ => Err(format!("no boolean ok in {}", brief(p))),
            }),
        ),
    ]);
    steps
}

/// `bernstein_run` for the task the worker claims.
pub(crate) fn run_step_with(role: &'static str) -> Step {
    Step::new(
        "run",
        Op::call(
            "bernstein_run",
            json!({"goal": "Add request tracing to the API", "role": role}),
        ),
        Expect::payload(|p| {
            field(p, "task_id")?;
            field(p, "run_id")?;
            Ok("task_id and run_id returned".to_owned())
        }),
    )
}

fn run_step() -> Step {
    run_step_with(RUN_ROLE)
}

fn non_empty_array(value: Option<&Value>, what: &str) -> Result<String, String> {
    match value.and_then(Value::as_array) {
        Some(items) if !items.is_empty() => Ok(format!("{} {what}", items.len())),
        _ => Err(format!(
            "no {what}: {}",
            value.map_or_else(|| "missing".to_owned(), brief)
        )),
    }
}

/// The worker's claim, by the role the run's task was created with. With `task_id` known the
/// claim must grant exactly that task.
pub(crate) fn claim_step(task_id: Option<String>, role: &'static str) -> Step {
    Step::new(
        "claim",
        Op::call(
            "bernstein_claim",
            json!({"claimer_id": WORKER, "role": role}),
        ),
        Expect::payload(move |p| {
            if p.get("granted") != Some(&Value::Bool(true)) {
                return Err(format!("not granted: {}", brief(p)));
            }
            let claimed = field(p, "taskId")?;
            match &task_id {
                Some(want) if want != claimed => {
                    Err(format!("claimed {claimed}, expected the run's task {want}"))
                }
                Some(_) => Ok("granted the run's task".to_owned()),
                None => Ok(format!("granted {claimed}")),
            }
        }),
    )
}

/// The rest of the worker loop on a claimed task: message, artifact (posted by the claimer),
/// complete, then the run status, which must read `expected_status` when one is given.
pub(crate) fn worker_steps(
    task: &str,
    run_id: &str,
    expected_status: Option<&'static str>,
) -> Vec<Step> {
    let expected_task = task.to_owned();
    vec![
        Step::new(
            "message",
            Op::call(
                "bernstein_post_message",
                json!({"task_id": task, "sender": WORKER, "body": "Found the slow handler; tracing it now."}),
            ),
            Expect::payload(move |p| {
                field_is(p, "task_id", &Value::from(expected_task.as_str()))?;
                field(p, "entry_hash")?;
                field(p, "signature")?;
                field_is(p, "seq", &Value::from(0))
            }),
        ),
        Step::new(
            "artifact",
            Op::call(
                "bernstein_post_artifact",
                json!({"task_id": task, "key": "summary", "artifact_type": "report", "body": "# Tracing\n\nSpans added to every handler.", "poster": WORKER}),
            ),
            Expect::payload(|p| {
                field_is(p, "verified", &Value::Bool(true))?;
                field_is(p, "version", &Value::from(1))
            }),
        ),
        Step::new(
            "complete",
            Op::call(
                "bernstein_complete",
                json!({"task_id": task, "result_summary": "Tracing added and verified."}),
            ),
            Expect::payload(|p| field_is(p, "status", &Value::from("done"))),
        ),
        Step::new(
            "run_status",
            Op::call("bernstein_run_status", json!({"run_id": run_id})),
            Expect::payload(move |p| match expected_status {
                Some(want) => field_is(p, "status", &Value::from(want)),
                None => field(p, "status").map(|s| format!("status={s:?}")),
            }),
        ),
    ]
}

/// A `bernstein_run_status` poll of `id` (a run id or a task id) that must read `completed`.
fn poll_step(key: &'static str, id: &str) -> Step {
    Step::new(
        key,
        Op::call("bernstein_run_status", json!({"run_id": id})),
        Expect::payload(|p| field_is(p, "status", &Value::from("completed"))),
    )
}

/// The settled run's handle, polled by run id, by task id and again after the closing steps'
/// other calls, is one and the same, and its `chainHead` is set (the run's seal).
fn polls_hold_still(transcript: &Transcript) -> Result<String, String> {
    let poll = |key: &str| {
        transcript
            .payloads
            .get(key)
            .ok_or_else(|| format!("no {key} payload"))
    };
    let by_run = poll("run_status")?;
    for key in ["run_status_by_task", "run_status_after_calls"] {
        let other = poll(key)?;
        if other != by_run {
            return Err(format!(
                "{key} differs: {} vs {}",
                brief(other),
                brief(by_run)
            ));
        }
    }
    match by_run.get("chainHead").and_then(Value::as_str) {
        Some(head) if !head.is_empty() => Ok(format!("3 identical handles, chainHead {head:.12}…")),
        _ => Err(format!("no chainHead in {}", brief(by_run))),
    }
}

/// The rest of the tools, after the worker loop: the task surface, refusals, cancel, shutdown.
fn closing_steps(ids: &Ids, project: &Project) -> Vec<Step> {
    let task = ids.task_id.clone().unwrap_or_default();
    vec![
        Step::new(
            "tasks_get",
            Op::Request {
                method: "tasks/get",
                params: json!({"taskId": task}),
            },
            Expect::result(|r| field_is(r, "status", &Value::from("completed"))),
        ),
        Step::new(
            "capsule",
            Op::call("bernstein_task_capsule", json!({"task_id": task})),
            Expect::Refusal("no context capsule"),
        ),
        Step::new(
            "cancel",
            Op::call(
                "bernstein_cancel",
                json!({"task_id": ids.other_task_id, "reason": "superseded"}),
            ),
            Expect::payload(|p| field_is(p, "status", &Value::from("cancelled"))),
        ),
        Step::new(
            "approve",
            Op::call(
                "bernstein_approve",
                json!({"task_id": ids.other_task_id, "note": "looks good"}),
            ),
            Expect::Refusal("task_not_awaiting_approval"),
        ),
        Step::new(
            "shutdown",
            Op::call(
                "bernstein_shutdown_orchestrator",
                json!({"workdir": project.root.display().to_string()}),
            ),
            Expect::payload(|p| field_is(p, "status", &Value::from("shutdown signal sent"))),
        ),
    ]
}

/// The tools a script calls, to prove it calls every one.
fn called_tools(steps: &[&Step]) -> Vec<String> {
    let mut names: Vec<String> = steps
        .iter()
        .filter_map(|s| match &s.op {
            Op::CallTool { name, .. } => Some((*name).to_owned()),
            _ => None,
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// One client through the whole script in a fresh project.
fn drive(
    client: Client,
    wire: Wire,
    kit: &ClientKit,
    binary: &Path,
    dir: &Path,
    tools: &[String],
) -> anyhow::Result<Transcript> {
    let project = Project::create(dir)?;
    let stdio = Server::bernstein_mcp(binary, &project);
    // Over HTTP and SSE one listener serves every request of the script; it is stopped before
    // the evidence is verified, so the verifier reads a project nobody writes any more.
    let (listener, server) = match wire {
        Wire::Stdio => (None, stdio),
        Wire::Http { bearer } | Wire::Sse { bearer } => {
            let token = bearer.then_some(BEARER);
            let (listener, server) = stdio.over_http(
                token,
                matches!(wire, Wire::Sse { .. }),
                &dir.join("server.log"),
            )?;
            (Some(listener), server)
        }
    };
    let mut transcript = Transcript::default();

    // Inspector `modern` gets a task back from bernstein_run and polls it until it settles,
    // so that call runs in the background while the worker loop below settles it.
    let task_augmented = if client == Client::Inspector("modern") {
        let step = Step::new(
            "run",
            Op::call(
                "bernstein_run",
                json!({"goal": "Add request tracing to the API", "role": RUN_ROLE}),
            ),
            Expect::payload(|_| Ok(String::new())),
        );
        let running = client.spawn_inspector(kit, &server, &step.op)?;
        Some((step, running))
    } else {
        None
    };

    let discovery = discovery_steps(client, tools);
    transcript.run(client, kit, &server, &discovery);

    let ids = Ids {
        task_id: transcript.text("run", "task_id"),
        run_id: transcript.text("run", "run_id").unwrap_or_default(),
        other_task_id: transcript.text("create_task", "id").unwrap_or_default(),
    };
    let claim = claim_step(ids.task_id.clone(), RUN_ROLE);
    if task_augmented.is_some() {
        // The background call creates the task; claim until its row is there.
        claim_when_created(&mut transcript, client, kit, &server, &claim);
    } else {
        transcript.run(client, kit, &server, std::slice::from_ref(&claim));
    }
    let task_id = ids
        .task_id
        .clone()
        .or_else(|| transcript.text("claim", "taskId"));
    // `bernstein_run_status` takes the run id or the task id alike; Inspector `modern` has
    // only the task id, from the claim.
    let run_id = if ids.run_id.is_empty() {
        task_id.clone().unwrap_or_default()
    } else {
        ids.run_id.clone()
    };
    let loop_steps = worker_steps(
        task_id.as_deref().unwrap_or_default(),
        &run_id,
        Some("completed"),
    );
    let closing = closing_steps(
        &Ids {
            task_id: task_id.clone(),
            ..ids
        },
        &project,
    );
    if let Some(task) = &task_id {
        transcript.run(client, kit, &server, &loop_steps);
        let by_task = poll_step("run_status_by_task", task);
        transcript.run(client, kit, &server, std::slice::from_ref(&by_task));
        transcript.run(client, kit, &server, &closing);
        let after_calls = poll_step("run_status_after_calls", &run_id);
        transcript.run(client, kit, &server, std::slice::from_ref(&after_calls));
        transcript.note(
            "polls hold still (by run id, by task id, after the closing calls)",
            polls_hold_still(&transcript),
        );
        let mut verify_handle = std::process::Command::new(binary);
        verify_handle
            .args(["journal", "handle", &run_id, "--verify", "--workdir"])
            .arg(&project.root)
            .arg("--key-file")
            .arg(&project.key);
        transcript.note(
            "bernstein-mcp journal handle --verify on the settled run",
            exit_zero(&mut verify_handle, "bernstein-mcp journal handle --verify"),
        );
    } else {
        transcript.note(
            "worker loop",
            Err("no task id to work on (bernstein_run and the claim both failed)".to_owned()),
        );
    }

    if let Some((step, running)) = task_augmented {
        let reply = inspector_reply(running.finish());
        let (outcome, _) = judge(&step, &reply);
        transcript.note(
            "bernstein_run (task-augmented, polled to completion)",
            outcome.map(|_| "task settled and its result accepted".to_owned()),
        );
    }

    // Every tool of the tier must have been called by this script.
    let all_steps: Vec<&Step> = discovery
        .iter()
        .chain(std::iter::once(&claim))
        .chain(&loop_steps)
        .chain(&closing)
        .collect();
    let mut called = called_tools(&all_steps);
    if client == Client::Inspector("modern") {
        called.push("bernstein_run".to_owned());
        called.sort();
    }
    transcript.note(
        "every tool called",
        if called == tools {
            Ok(format!("{} tools", called.len()))
        } else {
            Err(format!("called {called:?}, the tier lists {tools:?}"))
        },
    );

    drop(listener);
    // The evidence every call left must verify offline.
    transcript.note(
        "bernstein-mcp verify",
        verify_project(binary, &project, &[]),
    );
    Ok(transcript)
}

/// Sends the claim until it is granted (at most 20 tries, half a second apart), recording
/// only the last answer.
fn claim_when_created(
    transcript: &mut Transcript,
    client: Client,
    kit: &ClientKit,
    server: &Server,
    claim: &Step,
) {
    let mut last = None;
    for _ in 0..20 {
        let reply = client
            .run(kit, server, std::slice::from_ref(&claim.op))
            .pop()
            .unwrap_or_else(|| Reply::failed("no reply".to_owned()));
        let granted = tool_payload(&reply)
            .is_ok_and(|payload| payload.get("granted") == Some(&Value::Bool(true)));
        last = Some(reply);
        if granted {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    if let Some(reply) = last {
        transcript.record(claim, &reply);
    }
}

/// How the script reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    /// Each client starts the server over stdio.
    Stdio,
    /// One `--transport http` server, reached on `/mcp`; with a bearer token when `bearer`.
    Http { bearer: bool },
    /// The same server reached through the SSE transport (`GET /sse`, `POST /messages`).
    Sse { bearer: bool },
}

impl Wire {
    fn label(self) -> &'static str {
        match self {
            Wire::Stdio => "stdio",
            Wire::Http { bearer: false } => "http",
            Wire::Http { bearer: true } => "http+bearer",
            Wire::Sse { bearer: false } => "sse",
            Wire::Sse { bearer: true } => "sse+bearer",
        }
    }
}

/// The static bearer the HTTP servers of this stage require when they require one.
const BEARER: &str = "interop-clients-bearer";

/// Every client and protocol mode the kit has.
const CLIENTS: [Client; 6] = [
    Client::Python("legacy"),
    Client::Python("auto"),
    Client::Python("2026-07-28"),
    Client::Inspector("legacy"),
    Client::Inspector("modern"),
    Client::TypeScript,
];

/// The (client, wire) pairs of the stage. Over stdio every client runs once. With `--http`
/// every client runs over streamable HTTP without and with a bearer token, and the two
/// clients that speak SSE (the Python SDK's `sse_client` and Inspector `--transport sse`, both
/// with the initialize handshake, as SSE has no other) run over SSE, again without and with
/// the token.
fn matrix(http: bool) -> Vec<(Client, Wire)> {
    if !http {
        return CLIENTS
            .iter()
            .map(|&client| (client, Wire::Stdio))
            .collect();
    }
    let mut pairs = Vec::new();
    for bearer in [false, true] {
        pairs.extend(
            CLIENTS
                .iter()
                .map(|&client| (client, Wire::Http { bearer })),
        );
    }
    for bearer in [false, true] {
        pairs.push((Client::Python("legacy"), Wire::Sse { bearer }));
        pairs.push((Client::Inspector("legacy"), Wire::Sse { bearer }));
    }
    pairs
}

/// The clients stage: every client and mode through the script, over stdio, or over HTTP and
/// SSE with `http`. Fails when any step failed.
pub(crate) fn run(
    kit: &ClientKit,
    binary: &Path,
    scratch: &Path,
    http: bool,
) -> anyhow::Result<()> {
    let tools = catalogue_names()?;
    let mut failed = Vec::new();
    for (client, wire) in matrix(http) {
        let started = Instant::now();
        let dir = scratch.join(format!(
            "clients-{}-{}-{}",
            client.wrapper(),
            client.mode().replace('-', ""),
            wire.label().replace('+', "-")
        ));
        let transcript = drive(client, wire, kit, binary, &dir, &tools)?;
        let total = transcript.verdicts.len();
        let passed = transcript.passed();
        let label = format!("{} over {}", client.label(), wire.label());
        eprintln!(
            "interop: clients {label}: {passed}/{total} ok ({:.1} s)",
            started.elapsed().as_secs_f64()
        );
        for (step, why) in transcript.failures() {
            eprintln!("interop:   FAILED {step}: {why}");
        }
        if passed != total {
            failed.push(label);
        }
    }
    if !failed.is_empty() {
        bail!(
            "real clients failed against bernstein-mcp: {}",
            failed.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn the_script_calls_every_tool_of_the_tier() {
        let tools = catalogue_names().unwrap();
        assert_eq!(tools.len(), 16);
        let ids = Ids {
            task_id: Some("t".to_owned()),
            run_id: "task-t".to_owned(),
            other_task_id: "u".to_owned(),
        };
        let project = Project {
            root: PathBuf::from("/p"),
            key: PathBuf::from("/k"),
        };
        let discovery = discovery_steps(Client::Python("legacy"), &tools);
        let claim = claim_step(Some("t".to_owned()), RUN_ROLE);
        let worker = worker_steps("t", "task-t", None);
        let closing = closing_steps(&ids, &project);
        let steps: Vec<&Step> = discovery
            .iter()
            .chain(std::iter::once(&claim))
            .chain(&worker)
            .chain(&closing)
            .collect();
        assert_eq!(called_tools(&steps), tools);
    }

    #[test]
    fn http_runs_every_client_with_and_without_a_token_and_sse_where_clients_have_it() {
        assert_eq!(matrix(false).len(), CLIENTS.len());
        assert!(matrix(false).iter().all(|(_, wire)| *wire == Wire::Stdio));
        let http = matrix(true);
        for client in CLIENTS {
            for bearer in [false, true] {
                assert!(
                    http.contains(&(client, Wire::Http { bearer })),
                    "{client:?}"
                );
            }
        }
        let sse: Vec<_> = http
            .iter()
            .filter(|(_, wire)| matches!(wire, Wire::Sse { .. }))
            .collect();
        assert_eq!(sse.len(), 4);
        assert!(
            sse.iter()
                .all(|(client, _)| client.mode() == "legacy" && *client != Client::TypeScript)
        );
        assert!(http.iter().all(|(_, wire)| *wire != Wire::Stdio));
    }
}
