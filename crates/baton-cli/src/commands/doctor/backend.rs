//! `baton doctor`'s check of the `--backend` database: reachable, baton's
//! tables there (or creatable), and the privileges `run`, `lock` and
//! `break` need. The facts come from `baton_run::diagnose_database`.

use super::check::{Check, Status};

/// The `--backend` database: reachable, baton's tables there (or creatable),
/// the privileges `run`, `lock` and `break` need.
pub(crate) fn backend_check(url: Option<&str>) -> Check {
    const NAME: &str = "backend";
    let Some(url) = url else {
        return Check::skipped(NAME, "no --backend (locks are in the baton dir)");
    };
    #[cfg(not(feature = "postgres"))]
    {
        let _ = url;
        Check::new(
            NAME,
            Status::Error,
            "this baton was built without PostgreSQL support: --backend (BATON_BACKEND) cannot be used".to_string(),
        )
    }
    #[cfg(feature = "postgres")]
    database_check(url)
}

/// [`backend_check`] of the database `url` names.
#[cfg(feature = "postgres")]
fn database_check(url: &str) -> Check {
    const NAME: &str = "backend";
    let (d, shown) =
        match baton_run::diagnose_database(url) {
            Ok(found) => found,
            Err(e @ baton_run::DiagnoseError::Url(_)) => {
                return Check::new(NAME, Status::Error, e.to_string())
            }
            Err(e) => return Check::new(NAME, Status::Error, e.to_string()).remedy(
                "check the URL, that the server runs, and that it accepts this user (pg_hba.conf)",
            ),
        };
    let detail = serde_json::to_value(&d).unwrap_or_default();
    let migrate = format!(
        "run `baton --backend {} db migrate` once as the database's owner",
        shown
    );
    let user = &d.user;
    let check = match d.schema_version {
        _ if d.tables_exist && !d.can_use_tables => Check::new(
            NAME,
            Status::Error,
            format!("user '{user}' may not read and write baton's tables"),
        )
        .remedy(format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {user}; \
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {user}"
        )),
        Some(v) if v > d.schema_known => Check::new(
            NAME,
            Status::Error,
            format!("baton's tables have schema version {v}, newer than this baton's {}", d.schema_known),
        )
        .remedy("upgrade baton"),
        None if !d.can_create_tables => Check::new(
            NAME,
            Status::Error,
            format!("baton's tables do not exist yet and user '{user}' may not create them"),
        )
        .remedy(migrate),
        _ if !d.can_signal_others => Check::new(
            NAME,
            Status::Warning,
            format!("`baton lock break` can end only sessions of role '{user}'"),
        )
        .remedy(format!("GRANT pg_signal_backend TO {user}, if holders connect as other roles")),
        _ if d.server_version_num < 140_000 => Check::new(
            NAME,
            Status::Warning,
            format!(
                "PostgreSQL {}: a waiter killed while it waits keeps its place in the server's queue until granted",
                d.server_version
            ),
        )
        .remedy("use PostgreSQL 14 or later (client_connection_check_interval)"),
        _ => Check::new(
            NAME,
            Status::Ok,
            format!(
                "PostgreSQL {} at {} as '{user}', {}",
                d.server_version,
                shown,
                d.schema_version.map_or("tables created on first use".to_string(), |v| format!("schema version {v}"))
            ),
        ),
    };
    check.detail(detail)
}
