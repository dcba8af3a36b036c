//! What the client reads or chooses on its own side: which captured stream
//! of a job, where a prompt comes from, and the token file.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::ClientError;

/// Which of a job's captured streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogStream {
    /// Its standard output.
    Stdout,
    /// Its standard error.
    Stderr,
}

/// Where a prompt comes from.
#[derive(Clone, Debug)]
pub enum PromptSource {
    /// The text itself.
    Text(String),
    /// A file.
    File(PathBuf),
    /// Standard input, to its end.
    Stdin,
}

impl PromptSource {
    /// Reads the prompt.
    pub fn read(&self) -> Result<String, ClientError> {
        let read_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ClientError::File {
                what: "the prompt",
                path,
                source,
            }
        };
        match self {
            PromptSource::Text(t) => Ok(t.clone()),
            PromptSource::File(p) => std::fs::read_to_string(p).map_err(read_err(p)),
            PromptSource::Stdin => {
                let mut s = String::new();
                io::stdin()
                    .read_to_string(&mut s)
                    .map_err(read_err(Path::new("-")))?;
                Ok(s)
            }
        }
    }
}

/// Reads a token from a file: its first line, without surrounding blanks.
pub fn read_token_file(path: &Path) -> Result<String, ClientError> {
    let text = std::fs::read_to_string(path).map_err(|source| ClientError::File {
        what: "the token file",
        path: path.to_path_buf(),
        source,
    })?;
    Ok(text.lines().next().unwrap_or("").trim().to_string())
}
