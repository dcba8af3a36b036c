#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The service in process, through its testable entry point
//! (`server::serve`): a listener bound by the caller, a shutdown future that
//! ends it, and a store that only one service may own.

use std::time::Duration;

use baton_serve::store::StoreError;
use baton_serve::{server, Config, Overrides, ServeError};

fn config() -> Config {
    Config::load(None, &Overrides::default()).unwrap()
}

/// The status of `GET /health` at `addr`.
async fn health(addr: std::net::SocketAddr) -> u16 {
    tokio::task::spawn_blocking(move || {
        ureq::get(&format!("http://{addr}/health"))
            .call()
            .map(|r| r.status().as_u16())
    })
    .await
    .unwrap()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_on_the_given_listener_and_returns_once_its_shutdown_future_completes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = baton_lock::BatonDir::open(tmp.path().join("baton")).unwrap();
    let listener = server::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server::serve(config(), dir, listener, async {
        let _ = stopped.await;
    }));

    assert_eq!(health(addr).await, 200);

    stop.send(()).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), serving)
        .await
        .expect("serve did not return after its shutdown future completed")
        .unwrap();
    assert!(ended.is_ok(), "{ended:?}");
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "the listener is still open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_an_owned_store_is_refused_naming_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config();
    config.store = baton_serve::store::StoreUrl::Sqlite(tmp.path().join("shared.db"));
    let first_dir = baton_lock::BatonDir::open(tmp.path().join("a")).unwrap();
    let listener = server::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let first_addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let first = tokio::spawn(server::serve(config.clone(), first_dir, listener, async {
        let _ = stopped.await;
    }));
    // The first one owns the store once it answers.
    assert_eq!(health(first_addr).await, 200);

    let second_dir = baton_lock::BatonDir::open(tmp.path().join("b")).unwrap();
    let listener = server::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let second = tokio::time::timeout(
        Duration::from_secs(30),
        server::serve(config, second_dir, listener, std::future::pending()),
    )
    .await
    .expect("the second serve did not refuse to start");
    match second {
        Err(ServeError::Store(StoreError::Open { message, .. })) => {
            assert!(message.contains("shared.db"), "{message}");
            assert!(message.contains("in use"), "{message}");
        }
        other => panic!("the second serve was not refused: {other:?}"),
    }
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), first)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
