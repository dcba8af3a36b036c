//! Jobs as the store keeps them: the job store's own types
//! (`baton_store::model`), under the name the service has always used.

pub use baton_store::model::*;
