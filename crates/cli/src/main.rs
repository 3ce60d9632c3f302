//! The `tcgkit` command-line tool.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

mod images;

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
    Images {
        /// Image files (.NET assemblies, ELF executables).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Print machine-readable JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
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
        Command::Images { paths, json } => images::run(&paths, json),
    }
}
