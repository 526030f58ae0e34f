use thiserror::Error;

/// A placeholder or selector that is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct ParseError {
    /// What is wrong, as a lowercase fragment.
    pub message: String,
    /// Byte offset of the problem in the parsed string.
    pub offset: usize,
    /// JSON pointer of the string inside a compiled value (`""` for a lone string).
    pub pointer: String,
}

impl ParseError {
    pub(crate) fn new(offset: usize, message: impl Into<String>) -> Self {
        ParseError {
            message: message.into(),
            offset,
            pointer: String::new(),
        }
    }
}

/// A placeholder that does not resolve in the given scope.
///
/// Displays as ``"`$var.user.nmae`: `user` has no field `nmae`; it has `name`, `tags`"``.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("`{placeholder}`: {reason}")]
pub struct ResolveError {
    /// The placeholder as written in the plan.
    pub placeholder: String,
    /// Why it does not resolve.
    pub reason: String,
}
