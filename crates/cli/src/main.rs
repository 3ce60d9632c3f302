//! The `tcgkit` command-line tool.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod images;
mod run;
mod trace;

/// Run RV64 Linux programs with plugins and traces; inspect images.
#[derive(Parser, Debug)]
#[command(name = "tcgkit", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Load images and their reference closure, print what they are, unload them.
    Images(images::ImagesArgs),
    /// Run a static RV64 Linux program like qemu-riscv64; exit with its status.
    Run(run::RunArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tcgkit: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Images(args) => images::run(&args),
        Command::Run(args) => run::run(args),
    }
}
