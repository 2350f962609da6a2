//! Together's own error codes, read before the codes every dialect shares.

use crate::classify::evidence::has_decisive_code;
use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// Together: OpenAI-shaped bodies; its 403 is a context overflow (`dialect_status`), and
/// a 400 "`inputs` tokens + `max_new_tokens` must be <= N" is one too, told by its text
/// inside a generic code.
pub(super) fn class_of(status: u16, e: &ErrorFields) -> Option<Class> {
    if status == 400 && !has_decisive_code(e) && e.message_lower().contains("max_new_tokens") {
        return Some(Class::ContextOverflow);
    }
    None
}
