#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The service in process, through its testable entry point
//! (`server::launch`): a listener bound by the caller, a shutdown future
//! that ends it, a store that only one service may own, and real jobs that
//! run real commands and are drained at the end. The commands are `sh` on
//! unix and, on Windows, this test binary itself running [`job_helper`]
//! (a job's environment is clean: its role travels as an argument).

use std::time::Duration;

use baton_serve::model::JobStatus;
use baton_serve::service::Service;
use baton_serve::store::{StoreError, StoreUrl};
use baton_serve::{server, Config, Overrides, ServeError};
use serde_json::{json, Value};

fn config() -> Config {
    Config::load(None, &Overrides::default()).unwrap()
}

/// A service launched in process on 127.0.0.1:0: its address, the service
/// (to look into its store), the sender that ends it and its task.
struct Launched {
    addr: std::net::SocketAddr,
    service: std::sync::Arc<Service>,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<Result<(), ServeError>>,
}

async fn launch(config: Config, dir: baton_lock::BatonDir) -> Launched {
    let listener = server::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = server::open(config, dir).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server::launch(
        listener,
        std::sync::Arc::clone(&service),
        async {
            let _ = stopped.await;
        },
    ));
    Launched {
        addr,
        service,
        stop,
        serving,
    }
}

impl Launched {
    /// Triggers the shutdown and waits (at most 30 s) for `launch` to return.
    async fn shut_down(self) -> std::sync::Arc<Service> {
        self.stop.send(()).unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(30), self.serving)
            .await
            .expect("launch did not return after its shutdown future completed")
            .unwrap();
        assert!(ended.is_ok(), "{ended:?}");
        // Under wine the listener was seen to answer for a moment after
        // `launch` returned when a job's process had just been killed
        // through its Job Object (a killed process lingers there, and
        // wine's sockets are its host's descriptors): allow it 10 s there.
        let patience = if cfg!(windows) { 10_000 } else { 0 };
        let deadline = std::time::Instant::now() + Duration::from_millis(patience);
        while std::net::TcpStream::connect(self.addr).is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "the listener is still open"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.service
    }
}

/// `method path` with an optional JSON body: the status and the body.
async fn call(
    addr: std::net::SocketAddr,
    method: &'static str,
    path: &str,
    body: Option<Value>,
) -> (u16, String) {
    let url = format!("http://{addr}{path}");
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let resp = match (method, body) {
            ("POST", Some(b)) => agent.post(&url).send_json(b),
            ("GET", None) => agent.get(&url).call(),
            ("DELETE", None) => agent.delete(&url).call(),
            other => panic!("no such call: {other:?}"),
        };
        let mut resp = resp.unwrap();
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap())
    })
    .await
    .unwrap()
}

/// What a job's command does.
enum Act<'a> {
    /// Prints `hello from <its name>`, exits 3.
    HelloExit3,
    /// Waits until the file exists, prints `finished`.
    WaitFor(&'a std::path::Path),
    /// Prints `second`.
    Second,
    /// Sleeps a minute.
    Sleep,
}

/// The command of a job that does `act`, and the name it says hello with.
#[cfg(unix)]
fn command(act: Act) -> (Vec<String>, &'static str) {
    let script = match act {
        Act::HelloExit3 => "echo hello from $0; exit 3".to_string(),
        Act::WaitFor(marker) => format!(
            "while [ ! -e '{}' ]; do sleep 0.02; done; echo finished",
            marker.display()
        ),
        Act::Second => "echo second".to_string(),
        Act::Sleep => "sleep 60".to_string(),
    };
    (vec!["sh".into(), "-c".into(), script], "sh")
}

/// The command of a job that does `act`, and the name it says hello with.
#[cfg(windows)]
fn command(act: Act) -> (Vec<String>, &'static str) {
    let role = match act {
        Act::HelloExit3 => "role:hello".to_string(),
        Act::WaitFor(marker) => format!("role:wait|{}", marker.display()),
        Act::Second => "role:second".to_string(),
        Act::Sleep => "role:sleep".to_string(),
    };
    let exe = std::env::current_exe().unwrap().display().to_string();
    let args = [
        "--ignored",
        "--exact",
        "entry_point::job_helper",
        "--quiet",
        "--nocapture",
    ];
    let mut argv = vec![exe];
    argv.extend(args.map(String::from));
    argv.push(role);
    (argv, "helper")
}

/// A job's command on Windows, in the role given as an extra test filter
/// `role:...` (which names no test).
#[test]
#[ignore = "a helper: a job's command (Windows)"]
fn job_helper() {
    let Some(role) = std::env::args().find_map(|a| a.strip_prefix("role:").map(str::to_owned))
    else {
        return;
    };
    match role.split_once('|').unwrap_or((&role, "")) {
        ("hello", _) => {
            println!("hello from helper");
            std::process::exit(3);
        }
        ("wait", marker) => {
            while !std::path::Path::new(marker).exists() {
                std::thread::sleep(Duration::from_millis(20));
            }
            println!("finished");
        }
        ("second", _) => println!("second"),
        ("sleep", _) => std::thread::sleep(Duration::from_secs(60)),
        _ => panic!("unknown role {role}"),
    }
}

/// Submits a raw command doing `act`; returns its job id.
async fn submit(addr: std::net::SocketAddr, act: Act<'_>) -> String {
    let (argv, _) = command(act);
    let (code, body) = call(addr, "POST", "/v1/jobs", Some(json!({"command": argv}))).await;
    assert_eq!(code, 202, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["id"].as_str().unwrap().to_string()
}

/// The job as the API shows it.
async fn job(addr: std::net::SocketAddr, id: &str) -> Value {
    let (code, body) = call(addr, "GET", &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Polls job `id` until its status is `status` (at most 30 s).
async fn wait_for(addr: std::net::SocketAddr, id: &str, status: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let v = job(addr, id).await;
        if v["status"] == status {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job {id} never became {status}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn raw_config() -> Config {
    let mut config = config();
    config.allow_raw_commands = true;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_answers_on_the_given_listener_and_returns_once_its_shutdown_future_completes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = baton_lock::BatonDir::open(tmp.path().join("baton")).unwrap();
    let launched = launch(config(), dir).await;
    assert_eq!(call(launched.addr, "GET", "/health", None).await.0, 200);
    launched.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_submitted_in_process_runs_its_command_and_its_output_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = baton_lock::BatonDir::open(tmp.path().join("baton")).unwrap();
    let launched = launch(raw_config(), dir).await;
    let id = submit(launched.addr, Act::HelloExit3).await;
    let done = wait_for(launched.addr, &id, "failed").await;
    assert_eq!(done["exit_code"], 3, "{done}");
    let (code, log) = call(launched.addr, "GET", &format!("/v1/jobs/{id}/log"), None).await;
    assert_eq!(code, 200, "{log}");
    let name = command(Act::HelloExit3).1;
    // On Windows the helper's test harness speaks first.
    assert!(log.ends_with(&format!("hello from {name}\n")), "{log:?}");
    assert!(cfg!(windows) || log == "hello from sh\n", "{log:?}");
    let service = launched.shut_down().await;
    // What the API showed is what the store keeps.
    let stored = service.store.get(&id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Failed);
    assert_eq!(stored.exit_code, Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_lets_a_running_job_finish_and_keeps_queued_ones_for_the_next_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = baton_lock::BatonDir::open(tmp.path().join("baton")).unwrap();
    let mut config = raw_config();
    config.max_concurrency = 1;
    let marker = tmp.path().join("go");
    let launched = launch(config.clone(), dir.clone()).await;
    let running = submit(launched.addr, Act::WaitFor(&marker)).await;
    wait_for(launched.addr, &running, "running").await;
    let queued = submit(launched.addr, Act::Second).await;
    assert_eq!(job(launched.addr, &queued).await["status"], "queued");

    // The shutdown begins while the job runs; the drain waits for it.
    let addr = launched.addr;
    let watched = std::sync::Arc::clone(&launched.service);
    let shutting = tokio::spawn(launched.shut_down());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !watched.is_draining() {
        assert!(tokio::time::Instant::now() < deadline, "no drain began");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(call(addr, "GET", "/health", None).await.0, 503);
    assert!(
        !shutting.is_finished(),
        "launch returned before its job ended"
    );
    std::fs::write(&marker, b"").unwrap();
    let service = tokio::time::timeout(Duration::from_secs(30), shutting)
        .await
        .unwrap()
        .unwrap();
    let ran = service.store.get(&running).await.unwrap().unwrap();
    assert_eq!(ran.status, JobStatus::Succeeded, "{ran:?}");
    let waiting = service.store.get(&queued).await.unwrap().unwrap();
    assert_eq!(waiting.status, JobStatus::Queued, "{waiting:?}");
    // Nothing of the first service holds its store once its holders let go.
    drop((watched, service));

    // The next start runs it.
    let launched = launch(config, dir).await;
    wait_for(launched.addr, &queued, "succeeded").await;
    launched.shut_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_still_running_at_the_drain_timeout_is_cancelled_before_launch_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = baton_lock::BatonDir::open(tmp.path().join("baton")).unwrap();
    let mut config = raw_config();
    config.drain_timeout = Duration::from_millis(200);
    config.grace = Duration::from_millis(200);
    let launched = launch(config, dir).await;
    let id = submit(launched.addr, Act::Sleep).await;
    wait_for(launched.addr, &id, "running").await;
    let service = launched.shut_down().await;
    let stored = service.store.get(&id).await.unwrap().unwrap();
    assert_eq!(stored.status, JobStatus::Cancelled, "{stored:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_service_on_an_owned_store_is_refused_naming_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config();
    config.store = StoreUrl::Sqlite(tmp.path().join("shared.db"));
    let first_dir = baton_lock::BatonDir::open(tmp.path().join("a")).unwrap();
    let first = launch(config.clone(), first_dir).await;
    // The first one owns the store once it is open.
    assert_eq!(call(first.addr, "GET", "/health", None).await.0, 200);

    let second_dir = baton_lock::BatonDir::open(tmp.path().join("b")).unwrap();
    let second = tokio::time::timeout(Duration::from_secs(30), server::open(config, second_dir))
        .await
        .expect("the second service did not refuse to open the store");
    match second {
        Err(ServeError::Store(StoreError::Open { message, .. })) => {
            assert!(message.contains("shared.db"), "{message}");
            assert!(message.contains("in use"), "{message}");
        }
        Err(other) => panic!("the second service was refused for another reason: {other:?}"),
        Ok(_) => panic!("the second service was not refused"),
    }
    first.shut_down().await;
}

#[test]
fn a_second_instance_on_a_baton_dir_is_refused_while_the_first_is_held() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = baton_lock::BatonDir::open(tmp.path().join("baton")).unwrap();
    let first = server::claim_instance(&dir).unwrap();
    // From another thread, as another process would (a thread taking a
    // lock it holds is refused for another reason).
    let second = std::thread::scope(|s| s.spawn(|| server::claim_instance(&dir)).join().unwrap());
    match second {
        Err(ServeError::Instance(message)) => {
            assert!(message.contains("another `baton serve`"), "{message}")
        }
        other => panic!("not refused: {:?}", other.err()),
    }
    drop(first);
    let again = std::thread::scope(|s| s.spawn(|| server::claim_instance(&dir)).join().unwrap());
    assert!(again.is_ok(), "{:?}", again.err());
}
