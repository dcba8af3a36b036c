//! The stable machine contract of `baton`: what scripts may rely on.
//!
//! Two things, each in one place, so that they cannot drift apart between
//! the crates that produce them:
//!
//! - [`exit`]: every exit code of every command, and what it means;
//! - [`json`]: every `--json` output, the type it serializes and its fields.
//!
//! Both are tested against the real binary (`crates/baton-cli/tests/contract.rs`).
//! A change here is a change of the contract: add, never rename or remove.

#![forbid(unsafe_code)]

pub mod exit;
pub mod json;
