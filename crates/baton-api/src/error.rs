//! The body of every refusal of the job API.

use serde::{Deserialize, Serialize};

/// Every error of `/v1/...`, `/health` aside: `{"error": {"code", "message"}}`
/// (429 and 503 add a `Retry-After` header).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The error inside an [`ErrorBody`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ErrorDetail {
    /// A stable, machine-readable code: `invalid_request`, `not_found`,
    /// `queue_full`, `draining`, `unauthorized`, `request_timeout`,
    /// `store_unavailable`, ...
    #[serde(default)]
    pub code: String,
    /// What went wrong, in one line, naming the thing and the reason.
    pub message: String,
}

impl ErrorBody {
    /// The body for `code` and `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: code.into(),
                message: message.into(),
            },
        }
    }
}
