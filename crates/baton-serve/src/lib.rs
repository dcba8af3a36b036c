//! The baton job service (`baton serve`): agent jobs run in parallel over
//! HTTP, each through the run library (its group, its workspace, its
//! timeout), on a store that survives restarts.
//!
//! - [`config`]: the TOML file and its command-line overrides.
//! - [`store`]: opens the job store the setting ([`store::StoreUrl`])
//!   names; the trait and its drivers are crates of their own
//!   (`baton-store`, `baton-store-sqlite`, `baton-store-pg`: the last only
//!   with the feature `postgres`, on by default).
//! - [`service`]: the running service and its parts: the scheduler (global
//!   semaphore, strict FIFO), the rescuer, the cleaner, restart recovery,
//!   cancel and the drain.
//! - [`exec`]: running one job (through the run library, on a blocking
//!   thread).
//! - [`api`], [`compat`], [`dashboard`]: the HTTP front end.
//! - [`activation`]: a listening socket passed by the service manager
//!   (systemd's socket activation), so that restarts refuse no connection.
//! - [`openapi`]: the OpenAPI document, for the running configuration.
//! - [`browser`]: the Host, Origin and content-type checks of every request.
//! - [`server`]: the entry points (`claim_instance`, `bind` or `adopt`,
//!   `open`, `launch`) and the router; [`conn`]: its connections' limits.
//!
//! The wire model (requests, jobs, statuses, modes, errors) is `baton-api`;
//! the client of the service (`baton job ...`) is `baton-client`.
//!
//! Design: see `docs/src/design/service.md` in baton's repository, and
//! `docs/src/design/postgres.md` for a store several nodes share.
//!
//! # Platforms
//!
//! Linux has everything above. Windows (tested under wine) serves on TCP
//! loopback as everywhere (there are no Unix sockets in this crate) and runs
//! jobs through baton-proc's Windows supervisor: each command in a Job
//! Object that dies with the service. What differs is in one module,
//! `sys` (the table is there): a job's prompt reaches its stdin through a
//! pipe fed by a thread, its output through pipes drained by a thread each
//! (tokio has no anonymous pipes there), files carry their directory's ACL
//! instead of modes 0600/0700, there is no open files limit to raise, and a
//! job's base environment is Windows' own (`SystemRoot`, `TEMP`, ...: see
//! [`config::BASE_ENV`]). Refused there: a store several nodes share
//! (PostgreSQL), whose jobs run with a guardian that Windows builds lack
//! (`baton_proc::RunSpec::guard`): [`server::open`] says so
//! ([`ServeError::Unsupported`]); the store itself works (its tests pass).

pub mod activation;
pub mod api;
pub mod browser;
pub mod compat;
pub mod config;
pub mod conn;
pub mod dashboard;
pub mod exec;
pub mod follow;
pub mod journal;
pub mod metrics;
pub mod model;
pub mod openapi;
pub mod output;
pub mod server;
pub mod service;
pub mod store;
mod sys;

pub use config::{Config, ConfigError, Overrides};
pub use server::{
    adopt, bind, claim_instance, launch, launch_with, open, Instance, Listening, ServeError,
};
