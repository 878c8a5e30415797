//! What the process tells its caller: its exit status, one per outcome (documented in
//! `virtperf --help`).

/// Process exit codes (documented in `virtperf --help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Success = 0,
    /// Something failed (I/O, database), or every trial failed.
    Failure = 1,
    /// Bad input: experiment, flags, run id. Nothing was created.
    BadInput = 2,
    /// An environment of the experiment cannot run on this host. Nothing was created.
    Unavailable = 3,
    /// Ctrl-C or SIGTERM: completed trials are saved; `run --resume` finishes the rest.
    Interrupted = 130,
}

impl From<ExitStatus> for std::process::ExitCode {
    fn from(s: ExitStatus) -> Self {
        std::process::ExitCode::from(s as u8)
    }
}
