//! `bernstein-mcp completions <bash|zsh|fish>`: a shell completion script on stdout, generated
//! by clap_complete from the same command definition the binary parses.

use clap::CommandFactory;

use crate::Outcome;
use crate::cli::Cli;
use crate::cli_ops::Shell;

pub(crate) fn completions(shell: Shell) -> anyhow::Result<Outcome> {
    let mut command = Cli::command();
    let mut stdout = std::io::stdout().lock();
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(shell, &mut command, "bernstein-mcp", &mut stdout);
    std::io::Write::flush(&mut stdout)?;
    Ok(Outcome::Verified)
}
