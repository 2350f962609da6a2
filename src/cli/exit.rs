//! Exit codes, in one place (spec/cli.md).

/// What a command's result means to a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything passed / succeeded.
    Ok,
    /// The command ran, and what it checked did not hold (a failed scenario, a tier
    /// with no live route, a walk that did not succeed).
    Failed,
    /// Usage, config or input error: nothing meaningful could run.
    Usage,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
        }
    }
}
