//! `UpstreamFailure`: the protocol fields of one attempt that did not produce a usable
//! answer — HTTP status, headers, and the error body's type / code / status /
//! details — extracted the same way from every wire. The classifier reads only this.

use crate::core::secret::{mask, mask_owned};
use serde_json::Value;

/// Response headers with lowercase names, in arrival order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Headers(
            pairs
                .into_iter()
                // In place: a new string a name was an allocation a header, on every answer.
                .map(|(mut k, v)| {
                    k.make_ascii_lowercase();
                    (k, v)
                })
                .collect(),
        )
    }

    /// Header values pass through `secret::mask`: an upstream can copy the request's
    /// `Authorization` into `x-request-id`.
    pub fn from_reqwest(map: &reqwest::header::HeaderMap) -> Self {
        Headers::from_pairs(map.iter().map(|(k, v)| {
            (
                k.as_str().to_string(),
                mask_owned(String::from_utf8_lossy(v.as_bytes()).into_owned()),
            )
        }))
    }

    /// The first value of a header (name in lowercase).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = &(String, String)> {
        self.0.iter()
    }

    /// The provider's request id, whichever header it uses.
    pub fn request_id(&self) -> Option<&str> {
        [
            "x-request-id",
            "request-id",
            "apim-request-id",
            "x-goog-request-id",
            "req-id",
        ]
        .iter()
        .find_map(|n| self.get(n))
    }
}

/// What went wrong below HTTP, when no usable response arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// No response (or no first byte) within the deadline.
    Timeout,
    /// Refused, reset, TLS or DNS failure before a response.
    Network,
    /// A stream broke after it began.
    StreamInterrupted,
    /// The route's wire has no endpoint for this path.
    Unsupported,
}

/// The structured error fields of a body, whatever the wire put them in:
/// OpenAI `{"error":{"message","type","param","code"}}`, Anthropic
/// `{"type":"error","error":{"type","message"}}`, Gemini
/// `{"error":{"code":429,"message","status","details":[..]}}`, DashScope native
/// `{"code","message","request_id"}`, OpenRouter `{"error":{"code":402,...}}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErrorFields {
    /// `error.type` (OpenAI, Anthropic, Moonshot).
    pub kind: Option<String>,
    /// `error.code` as text (a string code, or a number such as Gemini's / OpenRouter's).
    pub code: Option<String>,
    /// Gemini's canonical `error.status` (`RESOURCE_EXHAUSTED`, ...).
    pub status: Option<String>,
    pub message: Option<String>,
    pub param: Option<String>,
    /// Azure `innererror.code`.
    pub inner_code: Option<String>,
    /// Gemini `QuotaFailure.violations[].quotaId`.
    pub quota_ids: Vec<String>,
    /// Gemini `ErrorInfo.reason` (`API_KEY_INVALID`, ...).
    pub reasons: Vec<String>,
    /// Gemini `QuotaFailure.violations[].quotaValue` (`"0"`: no quota at all).
    pub quota_values: Vec<String>,
    /// Gemini `RetryInfo.retryDelay` (`"38s"`).
    pub retry_delay: Option<String>,
    /// OpenRouter `metadata.limit_source` / `metadata.reason` / `metadata.error_type`.
    pub metadata: Vec<String>,
    /// When the body says the limit or budget comes back: OpenRouter `metadata.resets_at`
    /// (an RFC 3339 instant, on spent key / workspace / guardrail budgets), else its
    /// `metadata.headers.X-RateLimit-Reset` (epoch milliseconds, on the 429s of its own
    /// free-model limits).
    pub resets_at: Option<String>,
}

impl ErrorFields {
    /// Reads the error fields of a body; `None` when the body is not JSON or carries
    /// no error object (an HTML page, an empty or truncated body, a success body).
    pub fn parse(body: &[u8]) -> Option<ErrorFields> {
        let v: Value = serde_json::from_slice(body).ok()?;
        Self::from_value(&v)
    }

    pub fn from_value(v: &Value) -> Option<ErrorFields> {
        // Some gateways wrap the body in a one-element array (Gemini streams do).
        let v = match v {
            Value::Array(items) if items.len() == 1 => &items[0],
            other => other,
        };
        let obj = v.as_object()?;
        let mut f = ErrorFields::default();
        match obj.get("error") {
            Some(Value::Object(e)) => {
                f.kind = text(e.get("type"));
                f.code = text(e.get("code"));
                f.status = text(e.get("status"));
                f.message = text(e.get("message"));
                f.param = text(e.get("param"));
                f.inner_code = e.get("innererror").and_then(|i| text(i.get("code")));
                if let Some(Value::Array(details)) = e.get("details") {
                    read_details(details, &mut f);
                }
                if let Some(Value::Object(meta)) = e.get("metadata") {
                    for key in ["limit_source", "reason", "error_type"] {
                        f.metadata.extend(text(meta.get(key)));
                    }
                    let echoed_reset = meta
                        .get("headers")
                        .and_then(Value::as_object)
                        .and_then(|h| {
                            h.iter()
                                .find(|(k, _)| k.eq_ignore_ascii_case("x-ratelimit-reset"))
                        })
                        .and_then(|(_, v)| text(Some(v)));
                    f.resets_at = text(meta.get("resets_at")).or(echoed_reset);
                }
            }
            Some(Value::String(s)) => {
                f.message = Some(mask_owned(s.clone()));
                f.code = text(obj.get("code"));
                f.kind = text(obj.get("type"));
            }
            _ => {
                // MiniMax `base_resp`, Tencent Cloud `Response.Error`.
                if let Some(embedded) = embedded_error(v) {
                    return Some(embedded);
                }
                // Flat shapes: DashScope native {"code":"Throttling","message":..}, Mistral
                // {"object":"error","message":..,"type":..,"code":"3505"}. Require a message
                // and a code, a type or `object: error`, so a success body never reads as an error.
                let code = text(obj.get("code"));
                let kind = text(obj.get("type"));
                let is_error_object = obj.get("object").and_then(Value::as_str) == Some("error");
                let message = text(obj.get("message")).or_else(|| text(obj.get("msg")));
                let message = match message {
                    Some(m) => m,
                    // Mistral's 422 carries `message` as an object of field errors.
                    None if is_error_object => {
                        obj.get("message").map(|m| mask_owned(m.to_string()))?
                    }
                    // An empty message beside a code (SiliconFlow's 403 `30001` with
                    // `"message": ""`): the code still decides.
                    None if code.is_some() && obj.get("message").is_some_and(Value::is_string) => {
                        String::new()
                    }
                    None => return None,
                };
                if code.is_none() && kind.is_none() && !is_error_object {
                    return None;
                }
                if matches!(code.as_deref(), Some("200" | "0")) {
                    return None;
                }
                f.code = code;
                f.kind = kind;
                f.message = Some(message);
            }
        }
        Some(f)
    }

    /// Every code-like field, for rules that match "type or code".
    pub fn codes(&self) -> impl Iterator<Item = &str> {
        [&self.kind, &self.code, &self.inner_code]
            .into_iter()
            .filter_map(|o| o.as_deref())
    }

    pub fn has_code(&self, wanted: &str) -> bool {
        self.codes().any(|c| c.eq_ignore_ascii_case(wanted))
    }

    pub fn message_lower(&self) -> String {
        self.message.as_deref().unwrap_or("").to_lowercase()
    }
}

fn read_details(details: &[Value], f: &mut ErrorFields) {
    for d in details {
        let kind = d.get("@type").and_then(Value::as_str).unwrap_or("");
        if kind.ends_with("QuotaFailure") {
            if let Some(Value::Array(vs)) = d.get("violations") {
                f.quota_ids
                    .extend(vs.iter().filter_map(|v| text(v.get("quotaId"))));
                f.quota_values
                    .extend(vs.iter().filter_map(|v| text(v.get("quotaValue"))));
            }
        } else if kind.ends_with("ErrorInfo") {
            f.reasons.extend(text(d.get("reason")));
        } else if kind.ends_with("RetryInfo") {
            f.retry_delay = text(d.get("retryDelay"));
        }
    }
}

/// A JSON scalar as text; `null`, objects and arrays are not codes. Masked: this is
/// where an upstream's error strings become ours.
fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) if !s.is_empty() => Some(mask_owned(s.clone())),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// One attempt that did not produce a usable answer, as the wire saw it.
#[derive(Debug, Clone, Default)]
pub struct UpstreamFailure {
    /// The HTTP status, or `None` when no response came back.
    pub status: Option<u16>,
    pub headers: Headers,
    /// Parsed error fields, when the body carried an error object.
    pub error: Option<ErrorFields>,
    /// A short, key-free excerpt of the body for traces and `detail`.
    pub excerpt: String,
    /// Set when the failure happened below HTTP.
    pub transport: Option<Transport>,
    /// Why the body could not be used, when a 2xx was still a failure
    /// ("body over 8 MiB", "not JSON", "no choices"), or why a response is no answer
    /// whatever its body says (a redirect, which is never followed).
    pub malformed: Option<String>,
}

impl UpstreamFailure {
    pub fn transport(kind: Transport, detail: impl Into<String>) -> Self {
        UpstreamFailure {
            transport: Some(kind),
            excerpt: mask_owned(detail.into()),
            ..Default::default()
        }
    }

    /// A failure from an HTTP response: status, headers and the (capped) body.
    pub fn from_response(status: u16, headers: Headers, body: &[u8]) -> Self {
        // The wires' clients follow no redirect: a POST must never be replayed at another
        // address. A 3xx usually has an empty body (or a "Moved" page), so without this
        // the attempt's detail said nothing and the client read only `unknown`.
        let malformed = (300..400)
            .contains(&status)
            .then(|| format!("upstream answered {status} (a redirect, not followed)"));
        UpstreamFailure {
            status: Some(status),
            headers,
            error: ErrorFields::parse(body),
            excerpt: excerpt(body),
            transport: None,
            malformed,
        }
    }
}

/// The first 200 characters of a body on one line, for humans. Keys are masked before
/// the cut, so a key split by the cut cannot survive as a prefix.
pub fn excerpt(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    let s = mask(&s);
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 200 {
        let cut: String = one_line.chars().take(200).collect();
        format!("{cut}…")
    } else {
        one_line
    }
}

/// The same error shapes anywhere (a non-2xx body carries them too): the failure
/// parser reads them when a body has no OpenAI-style `error` object.
pub fn embedded_error(body: &Value) -> Option<ErrorFields> {
    minimax_base_resp(body).or_else(|| tencent_response_error(body))
}

/// MiniMax `{"base_resp": {"status_code": 1008, "status_msg": "insufficient balance"}}`.
pub fn minimax_base_resp(body: &Value) -> Option<ErrorFields> {
    let base = body.get("base_resp")?.as_object()?;
    let code = match base.get("status_code")? {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.trim().to_string(),
        _ => return None,
    };
    if code.is_empty() || code == "0" {
        return None;
    }
    Some(ErrorFields {
        code: Some(code),
        message: base
            .get("status_msg")
            .and_then(Value::as_str)
            .map(str::to_string),
        ..Default::default()
    })
}

/// Tencent Cloud API 3.0 `{"Response": {"Error": {"Code", "Message"}, "RequestId"}}`.
pub fn tencent_response_error(body: &Value) -> Option<ErrorFields> {
    let err = body.pointer("/Response/Error")?.as_object()?;
    let code = err
        .get("Code")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())?;
    Some(ErrorFields {
        code: Some(code.to_string()),
        message: err
            .get("Message")
            .and_then(Value::as_str)
            .map(str::to_string),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_shape() {
        let openai = br#"{"error":{"message":"You exceeded","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        let f = ErrorFields::parse(openai).unwrap();
        assert_eq!(f.kind.as_deref(), Some("insufficient_quota"));
        assert!(f.param.is_none());

        let gemini = br#"{"error":{"code":429,"message":"x","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateContentInputTokensPerModelPerMinute-FreeTier"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"}]}}"#;
        let f = ErrorFields::parse(gemini).unwrap();
        assert_eq!(f.code.as_deref(), Some("429"));
        assert_eq!(f.status.as_deref(), Some("RESOURCE_EXHAUSTED"));
        assert_eq!(f.retry_delay.as_deref(), Some("26s"));
        assert_eq!(f.quota_ids.len(), 1);

        let native = br#"{"code":"Throttling.RateQuota","message":"Requests rate limit exceeded","request_id":"x"}"#;
        assert_eq!(
            ErrorFields::parse(native).unwrap().code.as_deref(),
            Some("Throttling.RateQuota")
        );

        assert!(ErrorFields::parse(b"<html><body>502 Bad Gateway</body></html>").is_none());
        assert!(ErrorFields::parse(b"").is_none());
        assert!(ErrorFields::parse(br#"{"error":{"message":"trunc"#).is_none());
        assert!(ErrorFields::parse(br#"{"id":"chatcmpl-1","choices":[]}"#).is_none());
    }

    #[test]
    fn excerpt_is_short_and_one_line() {
        let long = "a\n".repeat(500);
        let e = excerpt(long.as_bytes());
        assert!(e.chars().count() <= 201);
        assert!(!e.contains('\n'));
    }
}
