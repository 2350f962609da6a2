//! Errors reported inside a success: some providers answer a failed call with HTTP 200
//! and an error object in the body. MiniMax puts a non-zero `base_resp.status_code` next
//! to (usually) `choices: null`; Tencent Cloud APIs, Hunyuan's included, answer every
//! processed request with 200 and put a failure in `Response.Error`; OpenRouter, once a
//! model has started, answers a failure mid-generation with 200 and a top-level `error`
//! object, often beside a `choices` entry with empty content (openrouter.ai/docs/errors:
//! "any error occurred while the LLM is producing the output will be emitted in the
//! response body"). Read as a success, such a body would be an empty answer, or worse, a
//! partial one.
//!
//! Pure: the wire calls `error_in_success` once, on every 2xx JSON body, before it
//! parses the answer; the classifier then judges the returned fields by the dialect's
//! code table, and the attempt keeps its HTTP status (200) in the record.

use crate::classify::dialect::Dialect;
use crate::classify::failure::{minimax_base_resp, tencent_response_error, ErrorFields};
use serde_json::Value;

/// The error a dialect reports inside a 2xx body, if any. `None` for a body with no such
/// field, or one that says "no error" (`status_code: 0`).
pub fn error_in_success(dialect: Dialect, body: &Value) -> Option<ErrorFields> {
    let own = match dialect {
        Dialect::Minimax => minimax_base_resp(body),
        Dialect::Hunyuan => tencent_response_error(body),
        _ => None,
    };
    own.or_else(|| top_level_error(body))
}

/// A top-level `error` object in a 2xx body, on any dialect: no provider puts one beside
/// a usable answer, so the answer next to it (if any) is not one. `"error": null` and an
/// empty `{}` say nothing and are not errors.
fn top_level_error(body: &Value) -> Option<ErrorFields> {
    let err = body.get("error")?.as_object()?;
    if err.is_empty() {
        return None;
    }
    let f = ErrorFields::from_value(body)?;
    // An object that names no failure (no code, type, status or message), or one that
    // says "no error" by its code alone, is no error.
    let says_nothing =
        f.kind.is_none() && f.status.is_none() && f.message.is_none() && f.code.is_none();
    let says_ok = f.kind.is_none() && matches!(f.code.as_deref(), Some("0" | "200"));
    (!says_nothing && !says_ok).then_some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::failure::embedded_error;
    use serde_json::json;

    #[test]
    fn minimax_base_resp_is_an_error_only_when_non_zero() {
        let spent = json!({"id":"x","choices":null,"base_resp":{"status_code":1008,"status_msg":"insufficient balance"}});
        let f = error_in_success(Dialect::Minimax, &spent).unwrap();
        assert_eq!(f.code.as_deref(), Some("1008"));
        assert_eq!(f.message.as_deref(), Some("insufficient balance"));
        let ok = json!({"choices":[{"message":{"content":"hi"}}],"base_resp":{"status_code":0,"status_msg":""}});
        assert_eq!(error_in_success(Dialect::Minimax, &ok), None);
        let as_text = json!({"base_resp":{"status_code":"1002"}});
        assert_eq!(
            error_in_success(Dialect::Minimax, &as_text).and_then(|f| f.code),
            Some("1002".to_string())
        );
        for odd in [
            json!({"base_resp": null}),
            json!({"base_resp": {"status_code": null}}),
            json!({"base_resp": "1008"}),
            json!([1, 2]),
        ] {
            assert_eq!(error_in_success(Dialect::Minimax, &odd), None, "{odd}");
        }
    }

    /// Guards the OpenRouter 200 whose top-level `error` sits beside a `choices` entry
    /// with empty content: it was served as an empty success.
    #[test]
    fn a_top_level_error_object_beside_choices_is_an_error_on_every_dialect() {
        let body = json!({"id":"gen-1","object":"chat.completion","provider":"Foo",
            "error":{"code":"server_error","message":"Provider disconnected unexpectedly"},
            "choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"error"}]});
        for d in Dialect::ALL {
            let f = error_in_success(*d, &body).unwrap_or_else(|| panic!("{d}: no error"));
            assert_eq!(f.code.as_deref(), Some("server_error"), "{d}");
        }
        for fine in [
            json!({"choices":[{"message":{"content":"hi"}}],"error":null}),
            json!({"choices":[{"message":{"content":"hi"}}],"error":{}}),
            json!({"choices":[{"message":{"content":"hi"}}],"error":"none"}),
            json!({"choices":[{"message":{"content":"hi"}}],"error":{"code":0,"message":"success"}}),
            json!({"choices":[{"message":{"content":"hi"}}],"error":{"code":null,"message":null}}),
        ] {
            assert_eq!(error_in_success(Dialect::Openrouter, &fine), None, "{fine}");
        }
    }

    #[test]
    fn only_the_dialect_that_defines_the_field_reads_it() {
        let spent =
            json!({"choices":[{"message":{"content":"hi"}}],"base_resp":{"status_code":1008}});
        assert_eq!(error_in_success(Dialect::Openai, &spent), None);
        assert_eq!(error_in_success(Dialect::Hunyuan, &spent), None);
        let tencent = json!({"Response":{"Error":{"Code":"LimitExceeded","Message":"超过配额限制"},"RequestId":"r"}});
        assert_eq!(
            error_in_success(Dialect::Hunyuan, &tencent).and_then(|f| f.code),
            Some("LimitExceeded".to_string())
        );
        assert_eq!(error_in_success(Dialect::Minimax, &tencent), None);
        assert!(embedded_error(&tencent).is_some() && embedded_error(&spent).is_some());
    }
}
