//! The process around `baton serve`: the parts only a binary may own (the
//! async runtime, the open files limit, who may read its `/proc` files,
//! the child subreaper,
//! SIGTERM and SIGINT; on Windows
//! Ctrl-C and Ctrl-Break), around the
//! service's entry points, in the order they must be taken (see
//! `baton_serve::server`).

use baton_lock::BatonDir;
use baton_serve::{Config, ServeError};

/// Runs the service on `dir` until SIGTERM or SIGINT, then drains and
/// returns.
///
/// A listening socket passed by the service manager (systemd's socket
/// activation, `LISTEN_FDS`) is served instead of the `listen` address; it
/// is taken before any thread starts (it changes the environment).
pub(crate) fn run(config: Config, dir: BatonDir) -> Result<(), ServeError> {
    let inherited = baton_serve::activation::inherited_listener()?;
    let _instance = baton_serve::claim_instance(&dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("baton-serve")
        .build()
        .map_err(ServeError::Runtime)?;
    baton_serve::conn::raise_nofile_limit();
    baton_serve::conn::hide_from_jobs();
    baton_serve::conn::adopt_orphans();
    runtime.block_on(async move {
        let (listener, listening) = match inherited {
            Some(socket) => (
                baton_serve::adopt(socket, &config)?,
                baton_serve::Listening::Activated,
            ),
            None => (
                baton_serve::bind(config.listen).await?,
                baton_serve::Listening::Bound,
            ),
        };
        let service = baton_serve::open(config, dir).await?;
        baton_serve::launch_with(
            listener,
            listening,
            service,
            say_listening,
            shutdown_signal(),
        )
        .await
    })
}

/// The one line a supervisor (or a test) waits for, once the service answers.
fn say_listening(local: std::net::SocketAddr) {
    use std::io::Write;
    let mut out = std::io::stdout();
    let _ = writeln!(out, "baton serve: listening on http://{local}");
    let _ = out.flush();
}

/// Completes on the first SIGTERM or SIGINT (never, if they cannot be
/// watched).
#[cfg(unix)]
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending::<()>().await,
    }
}

/// Windows: completes on the first Ctrl-C or Ctrl-Break (what `baton.exe`
/// forwards, and what ends a console program there; never, if they cannot
/// be watched).
#[cfg(windows)]
async fn shutdown_signal() {
    use tokio::signal::windows::{ctrl_break, ctrl_c};
    match (ctrl_c(), ctrl_break()) {
        (Ok(mut c), Ok(mut b)) => {
            tokio::select! {
                _ = c.recv() => {}
                _ = b.recv() => {}
            }
        }
        _ => std::future::pending::<()>().await,
    }
}
