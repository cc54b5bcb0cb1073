//! A value out of its bounds, named by its field ([`FieldError`]): what a settings check
//! returns, so that a caller maps the field to its own key (a configuration file's, a flag's)
//! without reading the message again.

/// A field's value out of its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field, as its type names it (`step.min`, `max_connections`).
    pub field: &'static str,
    /// What is wrong: `expected ..., found ...`.
    pub message: String,
}

impl FieldError {
    /// `field`'s value is wrong: `message`.
    pub fn new(field: &'static str, message: impl Into<String>) -> FieldError {
        FieldError {
            field,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for FieldError {}
