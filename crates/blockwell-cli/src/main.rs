//! `blockwell`: the command-line front of the Blockwell block-cache engine. Thin glue over the libraries:
//! each subcommand lives in its own module under `cmd/`, with its flags and their help beside it.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// `println!` for the long-running commands (`serve`, `mount`): a stdout whose reader went away (a closed
/// pipe, a terminal gone) loses the line and nothing else. `println!` would panic, and the release profile
/// aborts on a panic: a server stopped by SIGTERM would die before shutting its cache device down.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that never panics (see `say!`).
macro_rules! warn_line {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod cmd;

/// Blockwell: block-cache simulation, analysis, and a live caching block device.
#[derive(Parser, Debug)]
#[command(name = "blockwell", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay a trace through every (policy × cache size) combination in one pass.
    Sim(cmd::sim::Args),
    /// Miss-ratio curve: exact LRU in one pass (stack distances) or SHARDS-sampled.
    Mrc(cmd::mrc::Args),
    /// Serve a file or block device through a RAM cache and a persistent cache device over NBD.
    Serve(cmd::serve::Args),
    /// Print the counters of a running `blockwell serve --control`, one line per export (or JSON).
    Status(cmd::status::Args),
    /// Export a cached file or device as one file through FUSE (for losetup + mkfs + mount).
    Mount(cmd::mount::Args),
    /// The persistent cache device (--cache-dev): format, check, status, flush, detach, mode.
    #[command(subcommand)]
    Cache(cmd::cache::Command),
    /// Trace tools: stats, gen, convert.
    #[command(subcommand)]
    Trace(cmd::trace::Command),
    /// Run a policy comparison on a small workload built into the binary.
    Demo(cmd::demo::Args),
    /// Disk timing models: list them, time a request or a stream, validate against measured service times.
    #[command(subcommand)]
    Disk(cmd::disk::Command),
    /// One time-aware run: page cache, file layout, block cache or REDCAP, disk model, on a virtual clock.
    Tsim(cmd::tsim::Args),
    /// Workload tools: gen (save a generated workload as a file-level trace).
    #[command(subcommand)]
    Workload(cmd::tsim::WorkloadCommand),
    /// Papers' experiments: redcap (REDCAP, Fig. 1), prefetch-policies (Butt et al., SIGMETRICS'05, Figs. 3-6),
    /// dedup (Morrey & Grunwald, content-based caching), es-equivalence (extended storage, Table II),
    /// device-caches (Koutoupis, SSD and RAM caches, live).
    #[command(subcommand)]
    Experiment(cmd::experiment::Command),
    /// List the policies, presets and trace formats.
    List,
}

/// Parses the command line. A value that its type refuses is one error line, like every other error of a run;
/// other usage errors (an unknown flag, a missing one) keep clap's report with its usage and tips.
fn parse() -> Cli {
    use clap::FromArgMatches;
    match command().try_get_matches().and_then(|mut m| Cli::from_arg_matches_mut(&mut m)) {
        Ok(cli) => cli,
        Err(e)
            if matches!(e.kind(), clap::error::ErrorKind::ValueValidation | clap::error::ErrorKind::InvalidValue) =>
        {
            // The message, and the possible values if clap lists them, up to the first blank line.
            let text = e.to_string();
            let lines: Vec<&str> = text.lines().map(str::trim).take_while(|l| !l.is_empty()).collect();
            warn_line!("blockwell: {}", lines.join(" "));
            std::process::exit(2)
        }
        Err(e) => e.exit(),
    }
}

/// The command line: the derived definition, where every option that takes a value also takes a negative
/// number (`--threads -1`, `--cache -5`), so that the option's own parser says what is wrong with it instead of
/// clap calling it an unexpected argument.
fn command() -> clap::Command {
    fn negative_numbers(c: clap::Command) -> clap::Command {
        c.mut_args(|a| if a.get_action().takes_values() { a.allow_negative_numbers(true) } else { a })
            .mut_subcommands(negative_numbers)
    }
    negative_numbers(<Cli as clap::CommandFactory>::command())
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = parse();
    match cli.command {
        Command::Sim(a) => cmd::sim::run(a),
        Command::Mrc(a) => cmd::mrc::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Status(a) => cmd::status::run(a),
        Command::Mount(a) => cmd::mount::run(a),
        Command::Cache(c) => cmd::cache::run(c),
        Command::Trace(c) => cmd::trace::run(c),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Disk(c) => cmd::disk::run(c),
        Command::Tsim(a) => cmd::tsim::run(a),
        Command::Workload(c) => cmd::tsim::run_workload(c),
        Command::Experiment(c) => cmd::experiment::run(c),
        Command::List => cmd::list(),
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            // A closed pipe (`blockwell ... | head`) is not a failure.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            warn_line!("blockwell: error: {}", message(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line, `outer: cause: cause`, each said once: a library error that already
/// shows its source in its own message (`file: No such file or directory`) also returns it as its source, and
/// printing both would repeat it.
fn message(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for c in e.chain().skip(1) {
        let c = c.to_string();
        if !c.is_empty() && !msg.contains(&c) {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::message;

    /// Phrases that name the project's internals instead of papers and features.
    const INTERNAL: &[&str] = &["seed 0", "seed `0", "seed00", "seed's", "the seed ", "issue 1", "issue 2", "issue #"];

    /// Every problem with the help of `c` and its subcommands: an argument without a description, text that
    /// speaks of seeds or issue numbers.
    fn help_problems(c: &clap::Command, path: &str, out: &mut Vec<String>) {
        let mut texts: Vec<(String, String)> = Vec::new();
        for (what, t) in
            [("about", c.get_about()), ("long about", c.get_long_about()), ("after help", c.get_after_help())]
        {
            texts.push((format!("{path}: {what}"), t.map(|t| t.to_string()).unwrap_or_default()));
        }
        for a in c.get_arguments().filter(|a| !a.is_hide_set() && !["help", "version"].contains(&a.get_id().as_str())) {
            let name = match a.get_long() {
                Some(l) => format!("{path} --{l}"),
                None => format!("{path} {}", a.get_value_names().and_then(|v| v.first()).map_or("?", |v| v.as_str())),
            };
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            if help.trim().is_empty() {
                out.push(format!("{name}: no description"));
            }
            texts.push((name.clone(), help));
            texts.push((name, a.get_long_help().map(|h| h.to_string()).unwrap_or_default()));
        }
        for (name, text) in texts {
            let lower = text.to_lowercase();
            for phrase in INTERNAL.iter().filter(|p| lower.contains(*p)) {
                out.push(format!("{name}: says '{phrase}': {text}"));
            }
        }
        for s in c.get_subcommands().filter(|s| !s.is_hide_set()) {
            help_problems(s, &format!("{path} {}", s.get_name()), out);
        }
    }

    #[test]
    fn every_argument_has_a_description_that_names_features_not_seeds_or_issues() {
        let mut c = super::command();
        c.build();
        let mut problems = Vec::new();
        help_problems(&c, "blockwell", &mut problems);
        assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
    }

    #[test]
    fn causes_already_in_the_message_are_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory (os error 2)");
        let e = anyhow::Error::new(blockwell_trace::TraceError::Io { file: "t.csv".into(), source: io });
        assert_eq!(message(&e), "t.csv: No such file or directory (os error 2)");
        let e = e.context("--trace");
        assert_eq!(message(&e), "--trace: t.csv: No such file or directory (os error 2)");
    }
}
