//! What `baton doctor` checks about a backend database: the server, the
//! schema, and the privileges baton needs there.

use std::sync::Arc;

use crate::error::PgError;
use crate::schema::SCHEMA_VERSION;
use crate::session::Database;

/// Facts about the database behind a backend URL.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Diagnosis {
    /// `server_version`.
    pub server_version: String,
    /// `server_version_num` (e.g. 150004).
    pub server_version_num: i32,
    /// The role baton connects as.
    pub user: String,
    /// Whether baton's tables exist.
    pub tables_exist: bool,
    /// The schema version of baton's tables; `None` before first use (or
    /// when the user may not read them).
    pub schema_version: Option<i32>,
    /// The newest schema version this baton knows.
    pub schema_known: i32,
    /// Whether the user may create tables (needed before first use).
    pub can_create_tables: bool,
    /// Whether the user may read and write baton's tables (once they exist).
    pub can_use_tables: bool,
    /// Whether the user may end other roles' sessions (`lock break` on
    /// holders connected as another role): a superuser or a member of
    /// `pg_signal_backend`.
    pub can_signal_others: bool,
}

impl Database {
    /// Connects and reads what `baton doctor` reports.
    ///
    /// # Errors
    ///
    /// [`PgError`] when no session can be established or a query fails.
    pub fn diagnose(&self) -> Result<Diagnosis, PgError> {
        let session = self.connect()?;
        let c = Arc::clone(&session.client);
        let result = session.run("read the server's facts", |_| async move {
            let r = c
                .query_one(
                    "SELECT current_setting('server_version'), \
                     current_setting('server_version_num')::int, current_user::text, \
                     coalesce(has_schema_privilege(current_schema(), 'CREATE'), false), \
                     coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false) \
                       OR pg_has_role(current_user, 'pg_signal_backend', 'MEMBER'), \
                     to_regclass('baton_lock_schema') IS NOT NULL",
                    &[],
                )
                .await?;
            let exists: bool = r.get(5);
            let (schema_version, can_use_tables) = if exists {
                let ok = c
                    .query_one(
                        "SELECT has_table_privilege('baton_lock_schema', 'SELECT') \
                         AND has_table_privilege('baton_locks', 'SELECT, INSERT, UPDATE') \
                         AND has_table_privilege('baton_lock_holders', 'SELECT, INSERT, UPDATE, DELETE') \
                         AND has_table_privilege('baton_group_runs', 'SELECT, INSERT, UPDATE, DELETE') \
                         AND has_sequence_privilege('baton_locks_id_seq', 'USAGE') \
                         AND has_sequence_privilege('baton_group_runs_seq_seq', 'USAGE')",
                        &[],
                    )
                    .await?
                    .get::<_, bool>(0);
                let v = if ok {
                    c.query_opt("SELECT version FROM baton_lock_schema", &[])
                        .await?
                        .map(|row| row.get::<_, i32>(0))
                } else {
                    None
                };
                (v, ok)
            } else {
                (None, false)
            };
            Ok(Diagnosis {
                server_version: r.get(0),
                server_version_num: r.get(1),
                user: r.get(2),
                tables_exist: exists,
                schema_version,
                schema_known: SCHEMA_VERSION,
                can_create_tables: r.get(3),
                can_use_tables,
                can_signal_others: r.get(4),
            })
        });
        session.close();
        result
    }
}
