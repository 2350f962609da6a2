//! Zhipu (GLM)'s own error codes, read before the codes every dialect shares.

use crate::classify::failure::ErrorFields;
use crate::core::vocab::Class;

/// Zhipu GLM business codes, which ride inside HTTP 400/401/429/500 and decide the
/// class on their own: one 429 can be an empty balance (1113) or a throttle (1302).
pub(super) fn class_of(e: &ErrorFields) -> Option<Class> {
    let code = e.code.as_deref()?;
    Some(match code {
        "1000" | "1001" | "1002" | "1003" | "1004" | "1100" | "1110" | "1111" | "1112" | "1120"
        | "1121" | "1220" => Class::Auth,
        "1113" | "1304" | "1308" | "1309" | "1310" | "1313" | "1314" | "1316" | "1317" | "1318"
        | "1319" | "1320" | "1321" => Class::QuotaExhausted,
        "1302" | "1303" => Class::RateLimited,
        "1305" | "1312" => Class::Overloaded,
        // 1311: the subscription plan does not include this model (arrives as a 429).
        "1211" | "1221" | "1222" | "1311" => Class::ModelUnavailable,
        "1261" => Class::ContextOverflow,
        "1301" => Class::ContentPolicy,
        // 1210 ("parameter error") and 1200 ("call failed") are generic: status and text decide.
        "1212" | "1213" | "1214" | "1215" => Class::InvalidRequest,
        "500" | "1230" | "1231" | "1234" => Class::ServerError,
        _ => return None,
    })
}
