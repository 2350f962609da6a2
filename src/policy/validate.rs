//! The output validator (seed 001): a structured answer must satisfy the request's JSON
//! Schema, or it is rejected as `invalid_output` and the next route is asked — a backup
//! that drops a required field must not reach the caller.

use crate::classify::failure::{ErrorFields, Headers, UpstreamFailure};

/// Why an answer breaks the request's response schema, if it does: its text is checked
/// only when it calls no tool. An answer that calls a tool has not answered yet (the
/// structured answer comes after the tool's result), and any text beside the calls is a
/// preamble, not the answer: checking it would reject every tool turn of an agent loop
/// that asks for structured output.
pub fn answer_violation(
    schema: &serde_json::Value,
    text: &str,
    calls: &[crate::core::conversation::ToolCall],
) -> Option<String> {
    if !calls.is_empty() {
        return None;
    }
    violation(schema, text)
}

/// Why `text` does not satisfy `schema`, if it does not.
fn violation(schema: &serde_json::Value, text: &str) -> Option<String> {
    let value: serde_json::Value = match serde_json::from_str(text.trim()) {
        Ok(v) => v,
        Err(e) => return Some(format!("the answer is not JSON: {e}")),
    };
    let validator = match jsonschema::validator_for(schema) {
        Ok(v) => v,
        Err(e) => return Some(format!("the request's JSON schema is invalid: {e}")),
    };
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(3)
        .map(|e| e.to_string())
        .collect();
    (!errors.is_empty()).then(|| errors.join("; "))
}

/// Why a tool call of the answer breaks its tool's `strict` schema, if one does: the
/// router's check where the serving wire has no strict mode (fidelity.md §3). A call of
/// a tool that is not strict, or not offered, is not checked here.
pub fn call_violation(
    tools: &[crate::core::conversation::ToolSpec],
    calls: &[crate::core::conversation::ToolCall],
) -> Option<String> {
    calls.iter().find_map(|call| {
        let tool = tools.iter().find(|t| t.strict && t.name == call.name)?;
        let validator = match jsonschema::validator_for(&tool.parameters) {
            Ok(v) => v,
            Err(e) => return Some(format!("tool `{}`'s schema is invalid: {e}", tool.name)),
        };
        let errors: Vec<String> = validator
            .iter_errors(&call.arguments)
            .take(3)
            .map(|e| e.to_string())
            .collect();
        (!errors.is_empty()).then(|| {
            format!(
                "the call of tool `{}` breaks its strict schema: {}",
                tool.name,
                errors.join("; ")
            )
        })
    })
}

/// A rejected answer as a failure the classifier reads as `invalid_output`.
pub fn rejected(headers: &Headers, why: String) -> UpstreamFailure {
    UpstreamFailure {
        status: Some(200),
        headers: headers.clone(),
        error: Some(ErrorFields {
            code: Some("invalid_output".into()),
            message: Some(why.clone()),
            ..Default::default()
        }),
        excerpt: why,
        transport: None,
        malformed: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn required_fields_and_types() {
        let schema = json!({"type": "object", "required": ["answer", "confidence"],
                            "properties": {"answer": {"type": "string"}, "confidence": {"type": "number"}}});
        assert_eq!(
            violation(&schema, r#"{"answer":"4","confidence":0.9}"#),
            None
        );
        assert!(violation(&schema, r#"{"answer":"4"}"#)
            .unwrap()
            .contains("confidence"));
        assert!(violation(&schema, "not json").unwrap().contains("not JSON"));
    }

    #[test]
    fn only_strict_tools_have_their_calls_checked() {
        use crate::core::conversation::{ToolCall, ToolSpec};
        let tool = |strict| ToolSpec {
            name: "f".into(),
            description: String::new(),
            parameters: json!({"type": "object", "required": ["city"]}),
            strict,
        };
        let call = |args| ToolCall {
            id: "1".into(),
            name: "f".into(),
            arguments: args,
        };
        let bad = [call(json!({"town": "Paris"}))];
        assert!(call_violation(&[tool(true)], &bad)
            .unwrap()
            .contains("tool `f`"));
        assert_eq!(call_violation(&[tool(false)], &bad), None);
        assert_eq!(
            call_violation(&[tool(true)], &[call(json!({"city": "Paris"}))]),
            None
        );
    }
}
