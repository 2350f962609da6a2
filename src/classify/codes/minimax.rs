//! MiniMax's own error codes, read before the codes every dialect shares.

use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// MiniMax: `base_resp.status_code` (usually inside an HTTP 200, see `in_band`), from
/// the code table of platform.minimax.io/docs/api-reference/errorcode.
pub(super) fn class_of(e: &ErrorFields) -> Option<Class> {
    Some(match e.code.as_deref()? {
        "1000" | "1001" | "1013" | "1024" | "1033" => Class::ServerError,
        // 1039: tokens per minute; 1041: connections; 2045: request rate grew too fast.
        "1002" | "1039" | "1041" | "2045" => Class::RateLimited,
        "1004" | "2049" => Class::Auth,
        // 2056: the Token Plan's usage limit.
        "1008" | "2056" => Class::QuotaExhausted,
        "1026" | "1027" => Class::ContentPolicy,
        // 2061: the model is not part of this key's plan.
        "2061" => Class::ModelUnavailable,
        "1042" | "2013" => Class::InvalidRequest,
        _ => return None,
    })
}
