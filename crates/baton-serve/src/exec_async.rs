//! Running one job on the runtime (Linux): a plain job (no group, no
//! workspace, no guardian: what most jobs are) is supervised by
//! `Supervisor::run_async` (cloned by baton-proc's spawner thread, its end
//! awaited on the runtime), so it holds no blocking thread while it runs;
//! any other job runs through the run library on a blocking thread, as
//! [`run_job`](crate::exec::run_job) everywhere else.

use baton_run::{PlainRun, RunControl};

use crate::exec::{prepare, ExecContext, Hooks};
use crate::model::{Finish, Job};

/// Runs `job` to its end and says how it ended; see the module.
pub async fn run_job_async(
    ctx: ExecContext,
    job: Job,
    control: RunControl,
    hooks: Hooks,
) -> Finish {
    let (req, ending) = match prepare(&ctx, &job, control, hooks) {
        Ok(p) => p,
        Err(failed) => return failed,
    };
    let plain = match async_supervisor_wanted() {
        true => PlainRun::new(&ctx.dir, &req),
        false => Ok(None),
    };
    match plain {
        Ok(Some(plain)) => {
            drop(req); // our copies of the pipes' write ends
            let PlainRun {
                supervisor,
                recorder,
                end,
            } = plain;
            let finished = supervisor
                .run_async(move |started| recorder.record(started))
                .await;
            ending.finish_async(end.report(finished)).await
        }
        Ok(None) => {
            let dir = ctx.dir.clone();
            let ran = tokio::task::spawn_blocking(move || {
                let result = baton_run::run(&dir, &req);
                drop(req); // our copies of the pipes' write ends
                ending.finish(result)
            })
            .await;
            ran.unwrap_or_else(|e| crate::exec::thread_failed(&e))
        }
        Err(e) => ending.finish_async(Err(e)).await,
    }
}

/// Whether plain jobs are supervised on the runtime: yes, unless
/// `BATON_NO_ASYNC_SUPERVISOR=1` (read once), the off-switch with which
/// `bench/devices_bench.py` measures what it buys (`docs/src/design/service.md`,
/// "Speed devices").
fn async_supervisor_wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var_os("BATON_NO_ASYNC_SUPERVISOR").is_none_or(|v| v != "1"))
}
