//! A node's liveness on a shared store: it claims only while its own
//! session holds its liveness lock. The lock held by another session (a
//! rescuer taking the node's jobs over holds it while it marks them; a
//! second process with the same node id takes it once the first one's
//! session ends) says nothing about this node: it must claim nothing then.

use std::time::Duration;

use baton_store::suite::{job, status, submit, t, Ctx, MANY};
use baton_store::{JobStatus, Store, StoreUrl};

/// The liveness lock's class (first key), as the store takes it.
const NODE_CLASS: i32 = 0x6261_746e;

/// A plain connection to the store's database (the test's own session).
async fn connect(ctx: &Ctx) -> tokio_postgres::Client {
    let StoreUrl::Postgres(url) = &ctx.url else {
        panic!("not a PostgreSQL store");
    };
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// The backend pid of the session that holds `node`'s liveness lock, and
/// the lock's number, once one does.
async fn liveness_session(c: &tokio_postgres::Client, node: &str) -> (i32, i32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let row = c
            .query_opt(
                "SELECT l.pid, n.num FROM baton_nodes n JOIN pg_locks l \
                 ON l.locktype = 'advisory' AND l.classid = $1::int4::oid \
                 AND l.objid = n.num::oid AND l.objsubid = 2 AND l.granted \
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 WHERE n.id = $2",
                &[&NODE_CLASS, &node],
            )
            .await
            .unwrap();
        if let Some(row) = row {
            return (row.get(0), row.get(1));
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no session holds the liveness lock of '{node}'"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (generously) until the store says whether it is live as `want`.
async fn until_live(s: &dyn Store, want: bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while s.is_live() != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the store's liveness did not become {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The node's session is ended (`pg_terminate_backend`) and another
/// session takes its liveness lock (as a rescuer does while it takes the
/// node's jobs over): a claim of that node, already under way when it lost
/// its session, takes nothing, and the node is not listed live. Once its
/// session is re-established (a new backend) it claims again.
pub(crate) async fn a_node_claims_only_while_its_own_session_holds_its_lock(ctx: Ctx) {
    let s = &*ctx.store;
    if !ctx.shared() {
        // One node: its liveness is the store's owner lock.
        return;
    }
    let me = s.node().to_string();
    submit(s, job("j", 1)).await;
    let c = connect(&ctx).await;
    let (old, num) = liveness_session(&c, &me).await;
    let ended: bool = c
        .query_one("SELECT pg_terminate_backend($1)", &[&old])
        .await
        .unwrap()
        .get(0);
    assert!(ended);
    // Granted once the old session has gone.
    tokio::time::timeout(
        Duration::from_secs(60),
        c.execute(
            "SELECT pg_advisory_lock($1::int4, $2::int4)",
            &[&NODE_CLASS, &num],
        ),
    )
    .await
    .expect("the node's old session did not end")
    .unwrap();
    until_live(s, false).await;
    // The claim itself (the scheduler asks `is_live` before, but a claim
    // sent just before the session ended runs on): nothing while the lock
    // is another session's.
    let claimed = s.claim_many(&me, MANY, 1, t(10)).await.unwrap();
    assert!(
        claimed.is_empty(),
        "claimed while another session held this node's liveness lock: {claimed:?}"
    );
    assert_eq!(status(s, "j").await, Some(JobStatus::Queued));
    let nodes = s.nodes().await.unwrap().unwrap();
    let listed = nodes.iter().find(|n| n.id == me).unwrap();
    assert!(
        !listed.live,
        "listed live while its session is gone: {listed:?}"
    );
    // Released: the node's session comes back (a new backend), and with it
    // the claims.
    c.execute(
        "SELECT pg_advisory_unlock($1::int4, $2::int4)",
        &[&NODE_CLASS, &num],
    )
    .await
    .unwrap();
    until_live(s, true).await;
    let (new, _) = liveness_session(&c, &me).await;
    assert_ne!(new, old);
    let claimed = s.claim_many(&me, MANY, 1, t(20)).await.unwrap();
    let ids: Vec<&str> = claimed.iter().map(|j| j.spec.id.as_str()).collect();
    assert_eq!(ids, ["j"]);
    let nodes = s.nodes().await.unwrap().unwrap();
    assert!(nodes.iter().any(|n| n.id == me && n.live), "{nodes:?}");
}
