//! Why `tether host` could not run.

/// Why the host could not start, or stopped before a `shutdown`. The
/// binary prints it with its sources and exits non-zero.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Flags that make no runnable engine: the combinations clap cannot
    /// check itself (an openai engine without a model, a bad URL, ...).
    #[error("{0}")]
    Usage(String),
    /// The openai engine's HTTP client could not be built.
    #[error(transparent)]
    HttpClient(#[from] reqwest::Error),
    /// The thread that owns stdin or stdout could not be started.
    #[error("cannot start the {pipe}")]
    Pipe {
        /// `stdout writer` or `stdin reader`.
        pipe: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// stdout closed before the host could say `hello`.
    #[error("stdout is closed")]
    StdoutClosed,
}

impl From<crate::io::Closed> for HostError {
    fn from(_: crate::io::Closed) -> Self {
        HostError::StdoutClosed
    }
}

/// Why an engine could not summarize a history (`control` op `compress`).
/// Its text is the `control.error` message the gateway passes on.
#[derive(Debug, thiserror::Error)]
pub enum CompressError {
    /// The command engine's agent process could not be started.
    #[error("cannot start the agent: {0}")]
    AgentStart(std::io::Error),
    /// Its output could not be read.
    #[error("cannot read the agent's output: {0}")]
    AgentRead(std::io::Error),
    /// It exited unsuccessfully: how, and the tail of its stderr.
    #[error("{0}")]
    AgentExit(String),
    /// The summary passed the host's bound on it.
    #[error("the summary is longer than {limit} bytes")]
    TooLong { limit: usize },
    /// The model answered with nothing.
    #[error("the model answered the compress with an empty summary")]
    Empty,
    /// The model's completion failed.
    #[error(transparent)]
    Completion(#[from] crate::openai::CompletionError),
}
