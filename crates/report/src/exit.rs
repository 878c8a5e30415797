//! What the process tells its caller: its exit status, one per outcome (documented in
//! `virtperf --help`), and the top-level error that carries one.

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
    /// `compare`, `history`, `ab` with `--fail-on`: a metric regressed beyond noise and the
    /// threshold.
    Regression = 4,
    /// `compare`, `history`, `ab` with `--fail-on`: no regression, but a metric whose interval
    /// neither shows nor rules out a change of the threshold's size.
    Inconclusive = 5,
    /// Ctrl-C or SIGTERM: completed trials are saved; `run --resume` finishes the rest.
    Interrupted = 130,
}

impl From<ExitStatus> for std::process::ExitCode {
    fn from(s: ExitStatus) -> Self {
        std::process::ExitCode::from(s as u8)
    }
}

/// Bad input — a flag, a file, a run id — found before anything was created. A command returns it
/// as its error (`Err(bad_input(…))`); anywhere in an error's chain it makes the exit status 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// The error of a command refused for its input.
pub fn bad_input(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(BadInput(e.to_string()))
}

/// The exit status of a command that ended in an error.
pub trait ExitStatusOf {
    fn exit_status(&self) -> ExitStatus;
}

impl ExitStatusOf for anyhow::Error {
    /// Bad input anywhere in the chain: 2; anything else (I/O, the database…): 1.
    fn exit_status(&self) -> ExitStatus {
        if self.chain().any(|c| c.is::<BadInput>()) {
            ExitStatus::BadInput
        } else {
            ExitStatus::Failure
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn bad_input_anywhere_in_the_chain_exits_2() {
        assert_eq!(bad_input("--threshold -1").exit_status(), ExitStatus::BadInput);
        let wrapped = Err::<(), _>(bad_input("no such run")).context("reading run 7").unwrap_err();
        assert_eq!(wrapped.exit_status(), ExitStatus::BadInput);
        assert_eq!(anyhow::anyhow!("disk full").exit_status(), ExitStatus::Failure);
        assert_eq!(ExitStatus::BadInput as u8, 2);
    }
}
