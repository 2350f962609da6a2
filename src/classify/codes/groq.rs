//! Groq's own error codes, read before the codes every dialect shares.

use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// Groq: OpenAI-shaped, plus a non-standard 498 when flex-tier capacity is exceeded, and
/// a 413 "request too large" (tagged `rate_limit_exceeded`) for a request larger than the
/// per-minute limit: waiting never makes it fit this route.
pub(super) fn class_of(status: u16, e: &ErrorFields) -> Option<Class> {
    match status {
        498 => Some(Class::Overloaded),
        413 => Some(Class::ContextOverflow),
        _ if e.has_code("capacity_exceeded") => Some(Class::Overloaded),
        _ => None,
    }
}
