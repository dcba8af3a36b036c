#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The wire model end to end, in process: a service started through its
//! entry point, talked to by `baton-client`. What the server sends is
//! exactly what `baton-api` describes: a job read back through the client
//! has every field the raw answer has, and no other.

use std::collections::BTreeSet;
use std::time::Duration;

use baton_client::{Client, ClientError, GroupMode, JobStatus, ListQuery, SubmitRequest};
use baton_serve::{server, Config, Overrides};

const CONFIG: &str = r#"
default_template = "sh"
grace = "1s"
[templates.sh]
command = ["sh", "-c", "{prompt}"]
"#;

fn keys(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_and_the_server_speak_the_same_types() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("serve.toml");
    std::fs::write(&file, CONFIG).unwrap();
    let config = Config::load(Some(&file), &Overrides::default()).unwrap();
    let dir = baton_lock::BatonDir::open(tmp.path().join("baton")).unwrap();
    let listener = server::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let service = server::open(config, dir).await.unwrap();
    let serving = tokio::spawn(server::launch(listener, service, async {
        let _ = stopped.await;
    }));

    tokio::task::spawn_blocking(move || {
        let client = Client::new(&format!("http://{addr}"), None).unwrap();
        let queued = client
            .submit(&SubmitRequest {
                prompt: Some("echo hi".into()),
                group: Some("wire/g".into()),
                mode: Some(GroupMode::Coalesce.as_str().into()),
                timeout: Some(SubmitRequest::timeout_value(Duration::from_secs(60))),
                ..SubmitRequest::default()
            })
            .unwrap();
        assert_eq!(queued.status, JobStatus::Queued);
        assert!(queued.position >= 1);

        let job = client.wait(&queued.id, &mut std::io::sink()).unwrap();
        assert_eq!(job.status, JobStatus::Succeeded, "{job:?}");
        assert_eq!(job.exit_code(), 0);
        assert_eq!(job.mode, GroupMode::Coalesce);
        assert_eq!(job.group.as_deref(), Some("wire/g"));
        assert_eq!(job.timeout_ms, 60_000);
        assert_eq!(job.output.as_deref(), Some("hi\n"));
        assert!(job.node.is_some(), "{job:?}");

        // The raw answer has exactly the fields of the type.
        let raw: serde_json::Value = ureq::get(&format!("http://{addr}/v1/jobs/{}", queued.id))
            .call()
            .unwrap()
            .body_mut()
            .read_json()
            .unwrap();
        assert_eq!(keys(&raw), keys(&serde_json::to_value(&job).unwrap()));

        let list = client
            .list(&ListQuery {
                status: Some(JobStatus::Succeeded.as_str().into()),
                ..ListQuery::default()
            })
            .unwrap();
        assert_eq!(list.jobs.len(), 1);
        assert_eq!(list.jobs[0].id, queued.id);
        assert_eq!(list.jobs[0].output, None);

        match client.submit(&SubmitRequest {
            prompt: Some("true".into()),
            group: Some("wire/g".into()),
            mode: Some("sideways".into()),
            ..SubmitRequest::default()
        }) {
            Err(ClientError::Refused {
                status,
                code,
                message,
                ..
            }) => {
                assert_eq!((status, code.as_str()), (400, "invalid_request"));
                assert!(message.contains("'mode'"), "{message}");
            }
            other => panic!("an unknown mode was not refused: {other:?}"),
        }
        match client.job("no-such-job") {
            Err(e) => assert!(e.is_not_found(), "{e}"),
            Ok(j) => panic!("an unknown job was found: {j:?}"),
        }
    })
    .await
    .unwrap();

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), serving)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
