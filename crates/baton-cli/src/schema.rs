//! The JSON Schemas of every `--json` output and of the job API's bodies,
//! generated from the types that serialize them (feature `schema`). The
//! generator (`crates/baton-schema`) writes them to `schemas/` and tests
//! that the checked-in files are what these types generate; the CLI's
//! integration tests validate the real binary's output against them.
//!
//! [`OUTPUTS`] is the table: one [`Output`] per file, with the contract
//! shape ([`baton_contract::json`]) its fields must match. Each schema's
//! `$id` carries its version ([`Output::id`]): fields are only added; a
//! removal, rename or change of type bumps the version (see
//! `baton_contract::json`, "Schemas and stability").

use baton_contract::json::{self, Shape};
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::Value;

use crate::commands::doctor::Report as DoctorReport;
use crate::commands::hold::Held;
use crate::commands::state::{EditJson, GetJson};

/// One schema file of `schemas/`.
#[derive(Clone, Copy, Debug)]
pub struct Output {
    /// The file's name without `.json` (`lock-status`).
    pub name: &'static str,
    /// Its version, in its `$id`: bumped by a removal, a rename or a
    /// change of type, never by an added field.
    pub version: u32,
    /// What prints or carries it (the schema's `title`).
    pub title: &'static str,
    /// Whether the output is an array of objects of [`Output::shape`].
    pub array: bool,
    /// The contract of the object (of each element, for an array).
    pub shape: fn() -> Shape,
    /// Fields that may be absent: the schema describes the fields of
    /// [`Output::shape`] and these, and requires those of the shape that
    /// are not among these (present, `null` standing for "none"). Every
    /// field of a request body may be absent (see [`Output::request`]).
    pub optional: &'static [&'static str],
    /// Objects inside it: the name of their definition in `$defs`, the
    /// contract each must match, and the fields of it that may be absent.
    pub nested: &'static [Nested],
    /// Whether it is a request body (a schema of what is accepted) rather
    /// than an output (of what is written): every field of one may be
    /// absent (the service decides what an absent field means).
    pub request: bool,
    generate: fn(SchemaGenerator) -> Schema,
}

impl Output {
    /// Its `$id`: `urn:baton:schema:NAME:vVERSION`.
    pub fn id(&self) -> String {
        format!("urn:baton:schema:{}:v{}", self.name, self.version)
    }

    /// The schema: JSON Schema 2020-12, with `$id`, `title` and the
    /// types' doc comments as descriptions.
    pub fn schema(&self) -> Value {
        let settings = SchemaSettings::draft2020_12();
        let settings = if self.request {
            settings.for_deserialize()
        } else {
            settings.for_serialize()
        };
        let mut schema = (self.generate)(settings.into_generator());
        let description = match schema.remove("description") {
            Some(Value::String(d)) if self.array => format!("An array; each element: {d}"),
            Some(Value::String(d)) => d,
            _ => String::new(),
        };
        schema.remove("title");
        let mut out = serde_json::Map::new();
        out.insert("$id".into(), Value::String(self.id()));
        out.insert("title".into(), Value::String(self.title.to_string()));
        out.insert("description".into(), Value::String(description));
        if let Some(map) = schema.as_object_mut() {
            out.append(map);
        }
        Value::Object(out)
    }
}

fn root<T: JsonSchema>(g: SchemaGenerator) -> Schema {
    g.into_root_schema_for::<T>()
}

/// An array of `T`, described as `T` is.
fn array_of<T: JsonSchema>(g: SchemaGenerator) -> Schema {
    let mut g = g;
    let mut schema = g.root_schema_for::<Vec<T>>();
    let item = g.root_schema_for::<T>();
    if let Some(d) = item.get("description").cloned() {
        schema.insert("description".into(), d);
    }
    schema
}

/// `T` or `null`, described as `T` is, with `when_null` said.
fn nullable<T: JsonSchema>(g: SchemaGenerator, when_null: &str) -> Schema {
    let mut g = g;
    let mut schema = g.root_schema_for::<Option<T>>();
    let item = g.root_schema_for::<T>();
    if let Some(Value::String(d)) = item.get("description") {
        schema.insert(
            "description".into(),
            Value::String(format!("{d} `null` {when_null}.")),
        );
    }
    schema
}

fn group_status_or_null(g: SchemaGenerator) -> Schema {
    nullable::<baton_run::GroupStatus>(
        g,
        "on a PostgreSQL backend (`--backend`) when the key has no live run",
    )
}

const HOLDERS: &[Nested] = &[
    ("HolderInfo", || json::HOLDER, &[]),
    ("KernelHolder", || json::KERNEL_HOLDER, &[]),
];

/// An object inside an output: its definition in `$defs`, its contract,
/// and the fields that may be absent.
pub type Nested = (&'static str, fn() -> Shape, &'static [&'static str]);

/// Every schema file, in the order of `baton_contract::json`'s table.
pub const OUTPUTS: &[Output] = &[
    Output {
        name: "lock-status",
        version: 1,
        title: "baton lock status NAME --json",
        array: false,
        shape: || json::LOCK_STATUS,
        optional: &[],
        nested: HOLDERS,
        request: false,
        generate: root::<baton_lock::LockStatus>,
    },
    Output {
        name: "lock-list",
        version: 1,
        title: "baton lock status --json, baton lock list --json",
        array: true,
        shape: || json::LOCK_STATUS,
        optional: &[],
        nested: HOLDERS,
        request: false,
        generate: array_of::<baton_lock::LockStatus>,
    },
    Output {
        name: "lock-acquire",
        version: 1,
        title: "baton lock acquire NAME --json",
        array: false,
        shape: || json::LOCK_ACQUIRE,
        optional: &[],
        nested: &[("HolderInfo", || json::HOLDER, &[])],
        request: false,
        generate: root::<Held>,
    },
    Output {
        name: "lock-release",
        version: 1,
        title: "baton lock release NAME --json",
        array: false,
        shape: || json::LOCK_RELEASE,
        optional: &[],
        nested: &[],
        request: false,
        generate: root::<baton_run::hold::ReleaseReport>,
    },
    Output {
        name: "lock-break",
        version: 1,
        title: "baton lock break NAME --json",
        array: false,
        shape: || json::LOCK_BREAK,
        optional: &[],
        nested: &[("HolderInfo", || json::HOLDER, &[])],
        request: false,
        generate: root::<baton_run::hold::BreakReport>,
    },
    Output {
        name: "group-status",
        version: 1,
        title: "baton group status KEY --json",
        array: false,
        shape: || json::GROUP_STATUS,
        optional: &[],
        nested: &[("HolderInfo", || json::HOLDER, &[])],
        request: false,
        generate: group_status_or_null,
    },
    Output {
        name: "group-list",
        version: 1,
        title: "baton group status --json",
        array: true,
        shape: || json::GROUP_STATUS,
        optional: &[],
        nested: &[("HolderInfo", || json::HOLDER, &[])],
        request: false,
        generate: array_of::<baton_run::GroupStatus>,
    },
    Output {
        name: "state-get",
        version: 1,
        title: "baton state get FILE --json",
        array: false,
        shape: || json::STATE_GET,
        optional: &[],
        nested: &[],
        request: false,
        generate: root::<GetJson<'static>>,
    },
    Output {
        name: "state-edit",
        version: 1,
        title: "baton state edit FILE --json",
        array: false,
        shape: || json::STATE_EDIT,
        optional: &[],
        nested: &[],
        request: false,
        generate: root::<EditJson<'static>>,
    },
    Output {
        name: "workspace",
        version: 1,
        title: "baton workspace create --json",
        array: false,
        shape: || json::WORKSPACE,
        optional: &[],
        nested: &[],
        request: false,
        generate: root::<baton_git::Workspace>,
    },
    Output {
        name: "workspace-list",
        version: 1,
        title: "baton workspace list --json",
        array: true,
        shape: || json::WORKSPACE_LISTED,
        optional: &[],
        nested: &[],
        request: false,
        generate: array_of::<baton_git::WorkspaceInfo>,
    },
    Output {
        name: "workspace-gc",
        version: 1,
        title: "baton workspace gc --json",
        array: false,
        shape: || json::WORKSPACE_GC,
        optional: &[],
        nested: &[("Workspace", || json::WORKSPACE, &[])],
        request: false,
        generate: root::<baton_git::GcReport>,
    },
    Output {
        name: "event",
        version: 1,
        title: "baton events (one JSON object a line)",
        array: false,
        shape: || json::EVENT,
        optional: &["by", "code", "detail", "pushed"],
        nested: &[],
        request: false,
        generate: root::<baton_run::events::Event>,
    },
    Output {
        name: "git-push",
        version: 1,
        title: "baton git push --json",
        array: false,
        shape: || json::GIT_PUSH,
        optional: &[],
        nested: &[],
        request: false,
        generate: root::<baton_git::PushReport>,
    },
    Output {
        name: "doctor",
        version: 1,
        title: "baton doctor --json",
        array: false,
        shape: || json::DOCTOR,
        optional: &[],
        nested: &[("Check", || json::DOCTOR_CHECK, &[])],
        request: false,
        generate: root::<DoctorReport>,
    },
    Output {
        name: "job-submitted",
        version: 1,
        title: "baton job submit --json; the 202 answer of POST /v1/jobs",
        array: false,
        shape: baton_api::contract::job_submitted,
        optional: &[],
        nested: &[],
        request: false,
        generate: root::<baton_api::Queued>,
    },
    Output {
        name: "job",
        version: 1,
        title: "baton job status ID --json, job submit --wait --json, job cancel --json; GET and DELETE /v1/jobs/{id}",
        array: false,
        shape: baton_api::contract::job,
        optional: baton_api::contract::ONE_JOB_ONLY,
        nested: &[],
        request: false,
        generate: root::<baton_api::JobView>,
    },
    Output {
        name: "job-list",
        version: 1,
        title: "baton job list --json; GET /v1/jobs",
        array: false,
        shape: baton_api::contract::job_list,
        optional: &[],
        nested: &[(
            "JobView",
            baton_api::contract::job_listed,
            baton_api::contract::ONE_JOB_ONLY,
        )],
        request: false,
        generate: root::<baton_api::JobList>,
    },
    Output {
        name: "error",
        version: 1,
        title: "Every error of the job API (/v1/...)",
        array: false,
        shape: baton_api::contract::error,
        optional: &[],
        nested: &[("ErrorDetail", baton_api::contract::error_detail, &[])],
        request: false,
        generate: root::<baton_api::ErrorBody>,
    },
    Output {
        name: "submit-request",
        version: 1,
        title: "The body of POST /v1/jobs",
        array: false,
        shape: baton_api::contract::submit_request,
        optional: &[],
        nested: &[],
        request: true,
        generate: root::<baton_api::SubmitRequest>,
    },
];
