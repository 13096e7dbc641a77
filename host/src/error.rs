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

/// A directive of the echo engine with arguments it cannot take. Its text
/// is the turn's `turn.error` message.
#[derive(Debug, thiserror::Error)]
pub enum DirectiveError {
    #[error("{directive} takes no arguments, got `{got}`")]
    NoArguments {
        directive: &'static str,
        got: String,
    },
    #[error("{directive} needs {needs}, got `{got}`")]
    Arguments {
        directive: &'static str,
        needs: String,
        got: String,
    },
    #[error("/tool needs a NAME and JSON args")]
    ToolName,
    #[error("/tool {name}: the args are not JSON: {source}")]
    ToolArgs {
        name: String,
        source: serde_json::Error,
    },
}
