//! `bernstein-conformance`: serves the conformance fixtures over stdio or HTTP.
//!
//! ```text
//! bernstein-conformance [--workdir DIR] [--transport stdio|http] [--host H] [--port P]
//! ```
//!
//! Over HTTP it serves streamable HTTP on `/mcp` and SSE on `/sse` (the `bernstein-http`
//! service, anonymous, loopback only), prints `listening on http://ADDR/mcp` on stderr once
//! bound (`--port 0` picks a free port) and stops on SIGINT or SIGTERM. Without `--workdir` the
//! fixtures are served over a scratch project that is removed at exit. Exit codes: 0 served
//! until EOF or a signal, 2 usage or setup error.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use bernstein_mcp_core::TransportInfo;

const USAGE: &str =
    "usage: bernstein-conformance [--workdir DIR] [--transport stdio|http] [--host H] [--port P]";

fn main() -> ExitCode {
    let mut workdir: Option<PathBuf> = None;
    let mut http = false;
    let mut host = "127.0.0.1".to_owned();
    let mut port: u16 = 0;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| args.next().ok_or_else(|| format!("{flag} needs a value"));
        let parsed = match arg.as_str() {
            "--workdir" => value("--workdir").map(|dir| workdir = Some(PathBuf::from(dir))),
            "--transport" => value("--transport").and_then(|t| match t.as_str() {
                "stdio" => {
                    http = false;
                    Ok(())
                }
                "http" => {
                    http = true;
                    Ok(())
                }
                other => Err(format!("unknown transport {other:?}")),
            }),
            "--host" => value("--host").map(|h| host = h),
            "--port" => value("--port").and_then(|p| {
                p.parse()
                    .map(|p| port = p)
                    .map_err(|_| format!("--port {p:?} is not a port number"))
            }),
            "-h" | "--help" => {
                // A help text that cannot be written has nobody to be shown to.
                let _ = writeln!(std::io::stdout(), "{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => Err(format!("unknown argument {other:?}")),
        };
        if let Err(problem) = parsed {
            return usage(&problem);
        }
    }
    // The scratch project lives as long as `scratch`.
    let scratch = match &workdir {
        Some(_) => None,
        None => match tempfile::tempdir() {
            Ok(dir) => Some(dir),
            Err(err) => return setup_error(&format!("cannot create a scratch project: {err}")),
        },
    };
    let root = match (&workdir, &scratch) {
        (Some(dir), _) => dir.clone(),
        (None, Some(dir)) => dir.path().to_path_buf(),
        (None, None) => return setup_error("no project directory"),
    };
    let builder = match bernstein_conformance::dispatcher_builder(&root) {
        Ok(builder) => builder,
        Err(err) => return setup_error(&err.to_string()),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return setup_error(&format!("cannot start the runtime: {err}")),
    };
    let served = if http {
        runtime.block_on(serve_http(builder, &host, port))
    } else {
        match builder.build() {
            Ok(dispatcher) => runtime
                .block_on(bernstein_stdio::serve_stdio(dispatcher))
                .map_err(|err| format!("stdio: {err}")),
            Err(err) => Err(format!("dispatcher: {err}")),
        }
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(problem) => setup_error(&problem),
    }
}

async fn serve_http(
    builder: bernstein_mcp_core::DispatcherBuilder,
    host: &str,
    port: u16,
) -> Result<(), String> {
    let address: SocketAddr = format!("{host}:{port}")
        .parse()
        .map_err(|_| format!("--host {host:?} is not an IP address"))?;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|err| format!("cannot listen on {address}: {err}"))?;
    let local = listener
        .local_addr()
        .map_err(|err| format!("cannot read the bound address: {err}"))?;
    let config = bernstein_http::HttpConfig::builder(local)
        .build()
        .map_err(|err| format!("http configuration: {err}"))?;
    let dispatcher = builder
        .transports(vec![
            TransportInfo::Http {
                path: bernstein_http::MCP_PATH.to_owned(),
                default: true,
            },
            TransportInfo::Sse {
                command: "bernstein-conformance --transport http".to_owned(),
                default: false,
            },
        ])
        .build()
        .map_err(|err| format!("dispatcher: {err}"))?;
    let _ = writeln!(std::io::stderr(), "listening on http://{local}/mcp");
    bernstein_http::serve(
        listener,
        bernstein_http::McpHttp::new(dispatcher, config),
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
    )
    .await
    .map_err(|err| format!("serving HTTP failed: {err}"))
}

fn usage(problem: &str) -> ExitCode {
    // Stderr is the only place to say it; if it is gone, the exit code still says it.
    let _ = writeln!(
        std::io::stderr(),
        "bernstein-conformance: {problem}\n{USAGE}"
    );
    ExitCode::from(2)
}

fn setup_error(problem: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "bernstein-conformance: {problem}");
    ExitCode::from(2)
}
