//! DashScope (Qwen)'s own error codes, read before the codes every dialect shares.

use crate::classify::evidence::has_decisive_code;
use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// Alibaba DashScope / Qwen. `Throttling.AllocationQuota` is a per-minute throttle that
/// may surface as `insufficient_quota` in OpenAI-compatible mode: on DashScope that
/// code is a rate limit, not an empty wallet.
pub(super) fn class_of(status: u16, e: &ErrorFields) -> Option<Class> {
    let codes: Vec<&str> = e.codes().collect();
    let any = |p: &dyn Fn(&str) -> bool| codes.iter().any(|c| p(c));
    if any(&|c| c.starts_with("Throttling")) {
        return Some(Class::RateLimited);
    }
    if status == 429 && any(&|c| c == "insufficient_quota") {
        return Some(Class::RateLimited);
    }
    if any(&|c| {
        c == "Arrearage"
            || c.starts_with("AllocationQuota.FreeTier")
            || c == "Arrearage.Overdue"
            || c == "QuotaExhausted"
    }) {
        return Some(Class::QuotaExhausted);
    }
    if any(&|c| c == "InvalidApiKey" || c == "invalid_api_key" || c.starts_with("AccessDenied")) {
        return Some(Class::Auth);
    }
    if any(&|c| c == "ModelNotFound" || c == "model_not_found" || c == "Model.AccessDenied") {
        return Some(Class::ModelUnavailable);
    }
    if any(&|c| c == "DataInspectionFailed" || c == "data_inspection_failed") {
        return Some(Class::ContentPolicy);
    }
    // DashScope's own 403 for an exhausted free tier sometimes carries only a generic
    // code; a tie broken inside the 403.
    if status == 403 && !has_decisive_code(e) {
        let m = e.message_lower();
        if m.contains("free tier") || m.contains("免费额度") || m.contains("quota") {
            return Some(Class::QuotaExhausted);
        }
    }
    None
}
