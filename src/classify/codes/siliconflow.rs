//! SiliconFlow's own error codes, read before the codes every dialect shares.

use crate::classify::evidence::mentions_any;
use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// SiliconFlow: flat `{"code": <int>, "message", "data"}`. An empty balance arrives as
/// 402 or 403 with code 30001 (the generic reading of that 403 is auth).
pub(super) fn class_of(e: &ErrorFields) -> Option<Class> {
    Some(match e.code.as_deref()? {
        "30001" => Class::QuotaExhausted,
        // 20012: "Model does not exist"; 30003: "Model disabled."
        "20012" | "30003" => Class::ModelUnavailable,
        // 503 "Model service overloaded" / "System is really busy".
        "50505" | "50603" => Class::Overloaded,
        // 20015 is SiliconFlow's generic "parameter is invalid"; an over-long prompt
        // shares it, told apart only by its text (a tie inside the code).
        "20015" => {
            let m = e.message_lower();
            if mentions_any(
                &m,
                &[
                    "max_prompt_tokens",
                    "max_seq_len",
                    "context length",
                    "上下文",
                ],
            ) {
                Class::ContextOverflow
            } else {
                Class::InvalidRequest
            }
        }
        _ => return None,
    })
}
