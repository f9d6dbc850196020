//! What `Dispatcher::accept` decides before anything runs: the params size limit at its exact
//! boundary, a reused id, a full stream or process, and what each accepted message tells its
//! transport (whether it will be answered, whether the answer is already known); and which hard
//! timeout a call is then given.

use std::sync::Arc;
use std::time::Duration;

use bernstein_mcp_core::{Accepted, CallScope, DiscardNotifications, Limits};
use serde_json::{Value, json};

use crate::support::{Project, payload};

/// The params limit the boundary tests use.
const LIMIT: usize = 64;

fn project(limits: Limits) -> Project {
    Project::with(|b| b.limits(limits))
}

/// `ping` whose params are `{"p":"x…x"}` with `fill` x's: `fill + 8` bytes in compact form.
fn ping_with(fill: usize) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"p": "x".repeat(fill)}})
}

/// The error an accepted message is answered with, or "admitted" for a request that will run.
async fn refusal(accepted: Accepted) -> String {
    if !accepted.is_ready() {
        return "admitted".to_owned();
    }
    let reply = accepted
        .respond(Arc::new(DiscardNotifications))
        .await
        .expect("a refused request is answered");
    format!(
        "{} {} {} {}",
        reply["id"], reply["error"]["code"], reply["error"]["message"], reply["error"]["data"]
    )
}

#[tokio::test]
async fn params_are_refused_past_the_limit_and_admitted_at_it() {
    let project = project(Limits {
        max_params_bytes: LIMIT,
        ..Limits::default()
    });
    let check = |message: Value, expect: &'static str| {
        let dispatcher = project.dispatcher.clone();
        async move {
            // A parsed message has no framed length, so its params are always measured.
            let accepted = dispatcher.accept(message.clone(), &CallScope::new());
            assert_eq!(refusal(accepted).await, expect, "{message}");
        }
    };
    check(ping_with(LIMIT - 8), "admitted").await;
    check(
        ping_with(LIMIT - 7),
        r#"1 -32602 "params exceed 64 bytes (got at least 65)" {"maxParamsBytes":64}"#,
    )
    .await;
    // The count stops at the first byte past the limit, however long the params are.
    check(
        ping_with(10 * LIMIT),
        r#"1 -32602 "params exceed 64 bytes (got at least 646)" {"maxParamsBytes":64}"#,
    )
    .await;
    check(
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"a": [1, 2, 3], "b": {"c": null}}}),
        "admitted",
    )
    .await;
}

#[tokio::test]
async fn a_framed_message_longer_than_the_limit_has_its_params_measured() {
    let project = project(Limits {
        max_params_bytes: LIMIT,
        ..Limits::default()
    });
    let check = |text: String, expect: &'static str| {
        let accepted = project.dispatcher.accept_text(&text, &CallScope::new());
        async move { assert_eq!(refusal(accepted).await, expect, "{text}") }
    };
    check(
        ping_with(LIMIT - 7).to_string(),
        r#"1 -32602 "params exceed 64 bytes (got at least 65)" {"maxParamsBytes":64}"#,
    )
    .await;
    // Whitespace makes the line long, not the params: they fit once measured.
    let padded = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{{}\"p\":1}}}}",
        " ".repeat(2 * LIMIT)
    );
    check(padded, "admitted").await;
    let accepted = project.dispatcher.accept_bytes(
        ping_with(LIMIT - 7).to_string().as_bytes(),
        &CallScope::new(),
    );
    assert_eq!(
        refusal(accepted).await,
        r#"1 -32602 "params exceed 64 bytes (got at least 65)" {"maxParamsBytes":64}"#
    );
}

/// The limit is on the params' compact form, and a number can be longer there than on the
/// line: `1e9` is written back as `1000000000.0`. A line within the limit whose params are
/// past it once compacted is refused as the same message parsed beforehand is.
#[tokio::test]
async fn params_that_compact_longer_than_their_line_are_measured() {
    let project = project(Limits {
        max_params_bytes: 100,
        ..Limits::default()
    });
    // Ten times `1e9`: a line of 97 bytes whose params take 137 in compact form.
    let text = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"a\":[{}]}}}}",
        ["1e9"; 10].join(",")
    );
    assert_eq!(text.len(), 97);
    let refused = r#"1 -32602 "params exceed 100 bytes (got at least 109)" {"maxParamsBytes":100}"#;
    let accepted = project.dispatcher.accept_text(&text, &CallScope::new());
    assert_eq!(refusal(accepted).await, refused, "{text}");
    let accepted = project
        .dispatcher
        .accept_bytes(text.as_bytes(), &CallScope::new());
    assert_eq!(refusal(accepted).await, refused, "{text}");
    let parsed: Value = serde_json::from_str(&text).unwrap();
    let accepted = project.dispatcher.accept(parsed, &CallScope::new());
    assert_eq!(refusal(accepted).await, refused, "{text}");
}

#[tokio::test]
async fn a_reused_id_and_a_full_stream_or_process_are_refused_before_running() {
    let project = project(Limits {
        max_in_flight_per_stream: 2,
        max_in_flight: 3,
        ..Limits::default()
    });
    let dispatcher = &project.dispatcher;
    let request = |id: i64| json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    let stream = CallScope::new();
    let first = dispatcher.accept(request(1), &stream);
    assert_eq!(first.scope().in_flight(), 1);
    assert_eq!(
        refusal(dispatcher.accept(request(1), &stream)).await,
        r#"1 -32600 "Invalid Request: a request with id 1 is already in flight" null"#
    );
    let second = dispatcher.accept(request(2), &stream);
    assert_eq!(
        refusal(dispatcher.accept(request(3), &stream)).await,
        "3 -32603 \"server busy: this stream already has the most requests in flight allowed; retry after one settles\" null"
    );
    let other = CallScope::new();
    let third = dispatcher.accept(request(4), &other);
    assert_eq!(
        refusal(dispatcher.accept(request(5), &other)).await,
        "5 -32603 \"server busy: the server already has the most requests in flight allowed; retry after one settles\" null"
    );
    // The refusals took no place on their streams; the admitted requests still run.
    assert_eq!((stream.in_flight(), other.in_flight()), (2, 1));
    for accepted in [first, second, third] {
        let reply = accepted
            .respond(Arc::new(DiscardNotifications))
            .await
            .unwrap();
        assert_eq!(reply["result"], json!({}), "{reply}");
    }
    assert_eq!((stream.in_flight(), other.in_flight()), (0, 0));
    // A settled request gives its place back to the process too.
    assert_eq!(
        refusal(dispatcher.accept(request(5), &other)).await,
        "admitted"
    );
}

#[tokio::test]
async fn an_accepted_message_says_whether_it_is_answered_and_whether_the_answer_is_known() {
    let project = Project::new();
    let check = |text: &str, expect: (bool, bool)| {
        let accepted = project.dispatcher.accept_text(text, &CallScope::new());
        assert_eq!(
            (accepted.expects_response(), accepted.is_ready()),
            expect,
            "{text}"
        );
    };
    // A request runs and is answered.
    check(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, (true, false));
    // A notification and a client's response are never answered.
    check(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        (false, true),
    );
    check(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, (false, true));
    // An invalid message is answered at once.
    check("{not json", (true, true));
    check(r#"{"jsonrpc":"2.0","id":1}"#, (true, true));
}

#[tokio::test]
async fn a_tools_declared_timeout_lifts_the_hard_timeout_of_its_calls() {
    // A hard timeout far shorter than the wait below: only the declared 65 s of
    // `bernstein_subscribe` (plus grace) lets the call finish its wait and answer.
    let project = project(Limits {
        call_timeout: Duration::from_millis(1),
        ..Limits::default()
    });
    let result = project
        .call(
            "bernstein_subscribe",
            json!({"role": "backend", "timeout_seconds": 1}),
        )
        .await;
    assert_eq!(
        payload(&result),
        json!({"notifications": [], "timed_out": true})
    );
}
