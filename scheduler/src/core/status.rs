//! The result code of a scheduling pass, as upstream's framework status.

use std::fmt;

/// Upstream's codes: `Success=0, Warning=1, Error=2, Misconfigured=3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Code {
    Success,
    /// Scheduled normally, but something the user should know (expired scores).
    Warning,
    /// The inputs could not be evaluated (not the Placement's fault).
    Error,
    /// The Placement itself is wrong; it selects nothing until fixed.
    Misconfigured,
}

/// A code with the plugin that raised it and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    /// Empty for checks that belong to no plugin (upstream leaves it empty for weight errors).
    pub plugin: String,
    pub message: String,
}

impl Status {
    pub fn success() -> Self {
        Self {
            code: Code::Success,
            plugin: String::new(),
            message: String::new(),
        }
    }

    pub fn new(code: Code, plugin: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code,
            plugin: plugin.into(),
            message: message.into(),
        }
    }

    pub fn misconfigured(plugin: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Code::Misconfigured, plugin, message)
    }

    /// Error or Misconfigured: scheduling stops and selects nothing.
    pub fn is_error(&self) -> bool {
        matches!(self.code, Code::Error | Code::Misconfigured)
    }
}

impl fmt::Display for Status {
    /// `<plugin>:<message>`, the PlacementMisconfigured message format.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.plugin, self.message)
    }
}
