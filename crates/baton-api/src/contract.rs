//! The `--json` contract of the `baton job` outputs, read from the wire
//! types instead of restated: `baton job ... --json` prints the service's
//! answers as the client received them, so each output's fields are its
//! type's, as serde names them (serde reflection: the field names serde's
//! derive hands a deserializer). A field added to [`JobView`] is in the
//! contract, the JSON Schemas (`schemas/`) and the OpenAPI document at once.
//!
//! | command | type | shape |
//! |---|---|---|
//! | `job submit --json` | [`Queued`] | [`job_submitted`] |
//! | `job submit --wait --json`, `job status --json` | [`JobView`] | [`job`] |
//! | `job cancel --json` | [`JobView`] | [`job_listed`] |
//! | `job list --json` | [`JobList`] | [`job_list`]; each of `jobs`, [`job_listed`] |
//! | every refusal of the API | [`ErrorBody`] | [`error`]; its `error`, [`error_detail`] |
//! | the body of `POST /v1/jobs` | [`SubmitRequest`] | [`submit_request`] (every field optional) |

use std::fmt;
use std::sync::OnceLock;

use baton_contract::json::Shape;
use serde::de::{self, Deserialize, Deserializer, Visitor};

use crate::{ErrorBody, ErrorDetail, JobList, JobView, Queued, SubmitRequest};

/// The field of [`JobView`] written only when one job is asked for (`GET
/// /v1/jobs/{id}`, `job status`): the tail of its stdout.
pub const ONE_JOB_ONLY: &[&str] = &["output"];

/// `baton job submit --json` (without `--wait`): the job as the service
/// stored it; `status` is `queued`, `position` its 1-based place in the queue.
pub fn job_submitted() -> Shape {
    static FIELDS: OnceLock<Vec<&'static str>> = OnceLock::new();
    shape_of::<Queued>("job submit", &FIELDS)
}

/// `baton job status ID --json` and `job submit --wait --json`: a job as
/// in [`job_listed`], plus `output` (the tail of its stdout).
pub fn job() -> Shape {
    static FIELDS: OnceLock<Vec<&'static str>> = OnceLock::new();
    shape_of::<JobView>("job status ID", &FIELDS)
}

/// A job in `baton job list --json` and `job cancel --json`; `status` is
/// one of `baton_contract::json::JOB_STATUSES`, times are RFC 3339,
/// durations milliseconds; `node` is the node of the service that runs or
/// ran it.
pub fn job_listed() -> Shape {
    static FIELDS: OnceLock<Vec<&'static str>> = OnceLock::new();
    Shape {
        command: "job list (a job)",
        fields: FIELDS.get_or_init(|| {
            let mut fields = fields_of::<JobView>();
            fields.retain(|f| !ONE_JOB_ONLY.contains(f));
            fields
        }),
    }
}

/// `baton job list --json`: `jobs` newest first, `next_cursor` `null` on
/// the last page.
pub fn job_list() -> Shape {
    static FIELDS: OnceLock<Vec<&'static str>> = OnceLock::new();
    shape_of::<JobList>("job list", &FIELDS)
}

/// The body of every refusal of the job API ([`ErrorBody`]).
pub fn error() -> Shape {
    static FIELDS: OnceLock<Vec<&'static str>> = OnceLock::new();
    shape_of::<ErrorBody>("an error of the job API", &FIELDS)
}

/// The `error` of an [`error`] ([`ErrorDetail`]).
pub fn error_detail() -> Shape {
    static FIELDS: OnceLock<Vec<&'static str>> = OnceLock::new();
    shape_of::<ErrorDetail>("an error of the job API (its error)", &FIELDS)
}

/// The body of `POST /v1/jobs` ([`SubmitRequest`]): every field may be
/// absent.
pub fn submit_request() -> Shape {
    static FIELDS: OnceLock<Vec<&'static str>> = OnceLock::new();
    shape_of::<SubmitRequest>("POST /v1/jobs", &FIELDS)
}

/// The shape of `T` for `command`, its fields read once into `cell`.
fn shape_of<T: for<'de> Deserialize<'de>>(
    command: &'static str,
    cell: &'static OnceLock<Vec<&'static str>>,
) -> Shape {
    Shape {
        command,
        fields: cell.get_or_init(fields_of::<T>),
    }
}

/// Every shape of this contract.
pub fn all() -> [Shape; 7] {
    [
        job_submitted(),
        job_listed(),
        job(),
        job_list(),
        error(),
        error_detail(),
        submit_request(),
    ]
}

/// The fields of the struct `T` as serde names them on the wire, sorted
/// (empty for a type that is not a struct with named fields).
pub fn fields_of<T: for<'de> Deserialize<'de>>() -> Vec<&'static str> {
    let mut found = None;
    // Always an error: the reflecting deserializer stops once it has the
    // names.
    let _ = T::deserialize(Reflect(&mut found));
    let mut fields = found.unwrap_or_default().to_vec();
    fields.sort_unstable();
    fields
}

/// A deserializer that reads a struct's field names and stops.
struct Reflect<'a>(&'a mut Option<&'static [&'static str]>);

/// Why [`Reflect`] stops: always.
#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("reflection only")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<M: fmt::Display>(_: M) -> Stop {
        Stop
    }
}

impl<'de> Deserializer<'de> for Reflect<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Stop> {
        *self.0 = Some(fields);
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_are_the_types_sorted() {
        assert_eq!(job_submitted().fields, ["id", "position", "status"]);
        assert_eq!(job_list().fields, ["jobs", "next_cursor"]);
        assert_eq!(error_detail().fields, ["code", "message"]);
        assert!(submit_request().fields.contains(&"workspace"));
        assert!(job().fields.contains(&"abandoned_ref"));
        for s in all() {
            assert!(
                s.fields.windows(2).all(|w| w[0] < w[1]),
                "{}: fields must be sorted and unique",
                s.command
            );
        }
    }

    #[test]
    fn a_listed_job_is_a_job_without_its_output() {
        let mut listed: Vec<&str> = job_listed().fields.to_vec();
        listed.extend(ONE_JOB_ONLY);
        listed.sort_unstable();
        assert_eq!(listed, job().fields);
    }
}
