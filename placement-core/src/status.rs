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
    /// Ours: a limit of this scheduler stopped the pass (see [`super::limits`]). Nothing is
    /// selected and the current decisions are kept; `PlacementSatisfied` says which limit.
    Exceeded(Limit),
    /// Ours: the pass failed for a reason that may pass (the CEL compiler thread could not
    /// start). Nothing is written, decisions and status stay as they are; the controller
    /// retries with backoff. Never cached.
    Transient,
}

/// Which limit stopped a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Limit {
    /// The Placement's CEL budget over all clusters: cost units or wall time.
    CelBudget,
    /// The number of list items in the spec.
    ListItems,
}

impl Limit {
    /// The `PlacementSatisfied` reason (and the event reason).
    pub fn reason(self) -> &'static str {
        use ocm_api::wellknown::placement_condition::reason;
        match self {
            Limit::CelBudget => reason::CEL_BUDGET_EXCEEDED,
            Limit::ListItems => reason::LIST_LIMIT_EXCEEDED,
        }
    }
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

    /// Error, Misconfigured, Exceeded or Transient: scheduling stops and selects nothing.
    pub fn is_error(&self) -> bool {
        matches!(
            self.code,
            Code::Error | Code::Misconfigured | Code::Exceeded(_) | Code::Transient
        )
    }

    /// The current decisions stay: the inputs could not be read (Error), a limit stopped the
    /// pass (Exceeded), or a transient failure (Transient). Emptying them would make their
    /// consumers (the add-on manager) uninstall from every cluster.
    pub fn keeps_decisions(&self) -> bool {
        matches!(self.code, Code::Error | Code::Exceeded(_) | Code::Transient)
    }
}

impl fmt::Display for Status {
    /// `<plugin>:<message>`, the PlacementMisconfigured message format.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.plugin, self.message)
    }
}
