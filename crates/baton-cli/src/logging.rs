//! Diagnostics (`-v`, `BATON_LOG`, `--log-format`): the one place a tracing
//! subscriber is installed. The library crates only emit events and spans.
//!
//! Without `-v` and `BATON_LOG` no subscriber is installed at all, so baton
//! prints exactly what it printed before diagnostics existed and the events
//! in the libraries cost one relaxed load each. Every line is written inside
//! the `baton{run_id=...}` span that [`enter_run_span`] opens, so it carries
//! the run id of this invocation (for `baton run`, the command's
//! `BATON_RUN_ID`; for `lock acquire`, the hold's).
//!
//! `BATON_LOG` is a list of `target=level` directives and a bare default
//! level (`debug`, `baton_lock=trace,info`), parsed by `Targets`, not
//! `EnvFilter`: no span or field filters, and no regex engine in a binary
//! that starts once per `baton run`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;

use crate::args::LogFormat;

/// The environment variable holding a filter, as `RUST_LOG` would.
pub const LOG_ENV: &str = "BATON_LOG";

static RUN_ID: OnceLock<String> = OnceLock::new();
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Whether diagnostics are being written (a subscriber was installed).
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// The run id of this invocation: made once, then always the same.
pub fn run_id() -> &'static str {
    RUN_ID.get_or_init(baton_lock::new_run_id)
}

/// Installs the subscriber that `-v`/`BATON_LOG` ask for; nothing when
/// neither is given. A malformed `BATON_LOG` is an error (one line).
pub fn init(verbose: u8, format: LogFormat) -> Result<(), String> {
    let filter = match std::env::var(LOG_ENV) {
        Ok(spec) if !spec.trim().is_empty() => spec
            .trim()
            .parse::<Targets>()
            .map_err(|e| format!("invalid {LOG_ENV} {:?}: {e}", spec.trim()))?,
        _ => Targets::new().with_default(match verbose {
            0 => return Ok(()),
            1 => LevelFilter::INFO,
            2 => LevelFilter::DEBUG,
            _ => LevelFilter::TRACE,
        }),
    };
    let builder = tracing_subscriber::fmt()
        .with_max_level(LevelFilter::TRACE)
        .with_writer(std::io::stderr)
        // Its default reports a failed write with eprintln!, which panics
        // when stderr itself is what failed (`2>/dev/full`): exit 101.
        .log_internal_errors(false);
    let installed = match format {
        LogFormat::Text => tracing::subscriber::set_global_default(builder.finish().with(filter)),
        LogFormat::Json => tracing::subscriber::set_global_default(
            builder
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .finish()
                .with(filter),
        ),
    };
    installed.map_err(|e| format!("cannot install the diagnostics subscriber: {e}"))?;
    ACTIVE.store(true, Ordering::Relaxed);
    Ok(())
}

/// Enters the span every diagnostic line of this invocation is written in.
pub fn enter_run_span() -> tracing::span::EnteredSpan {
    tracing::info_span!("baton", run_id = %run_id()).entered()
}
