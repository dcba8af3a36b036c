//! `baton serve`: the job service (in the `baton-service` binary only).

use std::path::PathBuf;
use std::time::Duration;

use baton_lock::BatonDir;
use clap::Args;

use crate::duration::parse_duration;
use crate::exit_codes::BATON_FAILED;
use crate::say::fail;

/// `baton serve` options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The TOML configuration file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:7420]; a non-loopback one requires a token.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Jobs running at once [default: 10]; with a PostgreSQL store, across all its nodes.
    #[arg(long, value_name = "N")]
    pub max_concurrency: Option<u64>,
    /// Jobs running at once on this node (1..=max-concurrency) [default: max-concurrency].
    #[arg(long, value_name = "N")]
    pub node_max_concurrency: Option<u64>,
    /// Running + queued jobs never exceed this; beyond it submissions get 429 [default: 100].
    #[arg(long, value_name = "N")]
    pub max_queue_depth: Option<u64>,
    /// Finished jobs and their logs are removed this long after they end [default: 1h].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub job_ttl: Option<Duration>,
    /// The job store [default: sqlite://<baton dir>/serve.db], or postgres://... (TLS as
    /// libpq's `?sslmode=...&sslrootcert=...` say; default prefer).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
}

/// `baton serve`.
pub(crate) fn cmd_serve(args: ServeArgs, dir: BatonDir) -> u8 {
    let overrides = baton_serve::Overrides {
        listen: args.listen,
        max_concurrency: args.max_concurrency,
        node_max_concurrency: args.node_max_concurrency,
        max_queue_depth: args.max_queue_depth,
        job_ttl: args.job_ttl,
        store: args.store,
    };
    let config = match baton_serve::Config::load(args.config.as_deref(), &overrides) {
        Ok(c) => c,
        Err(e) => return fail(&e, BATON_FAILED),
    };
    match crate::serve_process::run(config, dir) {
        Ok(()) => 0,
        Err(e) => fail(&e, BATON_FAILED),
    }
}
