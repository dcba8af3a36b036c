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
    // Every running job holds a blocking thread from its start to its end
    // (`baton_serve::exec::run_job`): the pool must fit this node's jobs
    // and the store's and workspaces' own blocking work beside them, or a
    // claimed job would wait for a thread (tokio's default is 512).
    let jobs = config
        .node_max_concurrency
        .unwrap_or(config.max_concurrency);
    let blocking = usize::try_from(jobs)
        .unwrap_or(usize::MAX)
        .saturating_add(64)
        .max(512);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(blocking)
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

/// The one line a supervisor (or a test) waits for, once the service
/// answers. Written past the standard library's stdout buffer, on a
/// duplicate of the descriptor: a reader that closed the pipe makes the
/// line go nowhere, not the clean stop at the end fail for bytes still
/// buffered (exit 0 after a drain, however stdout went).
fn say_listening(local: std::net::SocketAddr) {
    use std::io::Write;
    #[cfg(unix)]
    let out = std::os::fd::AsFd::as_fd(&std::io::stdout()).try_clone_to_owned();
    #[cfg(windows)]
    let out = std::os::windows::io::AsHandle::as_handle(&std::io::stdout()).try_clone_to_owned();
    if let Ok(out) = out {
        let _ = std::fs::File::from(out)
            .write_all(format!("baton serve: listening on http://{local}\n").as_bytes());
    }
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
