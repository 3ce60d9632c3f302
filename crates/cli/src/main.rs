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
    let cli = match Cli::try_parse_from(qemu_spellings(std::env::args_os().collect())) {
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

/// `tcgkit run`'s options that take a value as the next argument, as
/// `--name` and `-c`: from the parser's own definition, so none is missed.
fn run_options_with_values() -> Vec<String> {
    use clap::CommandFactory;
    let cli = Cli::command();
    let Some(run) = cli.find_subcommand("run") else {
        return Vec::new();
    };
    run.get_arguments()
        .filter(|a| a.get_action().takes_values() && !a.is_positional())
        .flat_map(|a| {
            let long = a.get_long().map(|l| format!("--{l}"));
            let short = a.get_short().map(|c| format!("-{c}"));
            long.into_iter().chain(short)
        })
        .collect()
}

/// QEMU's single-dash `-plugin` as `--plugin`, among `tcgkit run`'s own
/// options (before the guest: what follows it is the guest's), so that a
/// qemu-riscv64 command line works with `tcgkit run` in front.
fn qemu_spellings(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let Some(run) = args.iter().position(|a| a == "run") else {
        return args;
    };
    let with_values = run_options_with_values();
    let mut at = run + 1;
    while let Some(arg) = args.get(at) {
        if arg == "-plugin" {
            args[at] = "--plugin".into();
        }
        let arg = args[at].to_string_lossy();
        if !arg.starts_with('-') || arg == "--" {
            break; // The guest.
        }
        let takes_value = with_values.iter().any(|o| *o == arg);
        at += if takes_value { 2 } else { 1 };
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(items: &[&str]) -> Vec<std::ffi::OsString> {
        items.iter().map(Into::into).collect()
    }

    #[test]
    fn qemu_plugin_option_is_rewritten_only_before_the_guest() {
        let args = os(&[
            "tcgkit",
            "run",
            "-plugin",
            "./libinsn.so",
            "-d",
            "plugin",
            "-D",
            "log",
            "guest",
            "-plugin",
            "x",
        ]);
        assert_eq!(
            qemu_spellings(args),
            os(&[
                "tcgkit",
                "run",
                "--plugin",
                "./libinsn.so",
                "-d",
                "plugin",
                "-D",
                "log",
                "guest",
                "-plugin",
                "x"
            ])
        );
        // After tcgkit's own options with values.
        let args = os(&["tcgkit", "run", "--jit", "off", "-plugin", "a.so", "g"]);
        assert_eq!(
            qemu_spellings(args),
            os(&["tcgkit", "run", "--jit", "off", "--plugin", "a.so", "g"])
        );
        // A value that looks like the option is left alone.
        let args = os(&["tcgkit", "run", "-E", "-plugin", "-plugin", "a.so", "g"]);
        assert_eq!(
            qemu_spellings(args),
            os(&["tcgkit", "run", "-E", "-plugin", "--plugin", "a.so", "g"])
        );
    }
}
