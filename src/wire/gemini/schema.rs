//! Gemini's `Schema`: the OpenAPI 3.0 subset its `responseSchema` and a function
//! declaration's `parameters` take, made from a request's JSON Schema.

use serde_json::{json, Value};

/// The keywords of Gemini's `Schema` (ai.google.dev, "Schema": the OpenAPI 3.0
/// subset `responseSchema` takes). Any other keyword is a 400 ("Unknown name
/// additionalProperties"), so it is left out: the answer is validated against it anyway.
const SCHEMA_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];

/// An object schema that names no properties (`json_object`'s `{"type": "object"}`).
pub fn is_bare_object(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
        && schema
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(|p| p.is_empty())
}

/// A JSON Schema as Gemini's `responseSchema`: its keywords kept, `type: [T, "null"]`
/// as `type: T, nullable: true`, `const` as a one-value `enum`. `None` when the schema
/// refers to definitions, which the subset cannot express.
pub fn response_schema(schema: &Value) -> Option<Value> {
    let Value::Object(map) = schema else {
        return Some(schema.clone());
    };
    // References have no form in the subset; nor has an object without properties
    // ("properties: should be non-empty for OBJECT type").
    if map.contains_key("$ref")
        || map.contains_key("$defs")
        || map.contains_key("definitions")
        || is_bare_object(schema)
    {
        return None;
    }
    let mut out = serde_json::Map::new();
    for (key, value) in map {
        match key.as_str() {
            "type" => match value {
                Value::Array(types) => {
                    let named: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
                    if named.len() != types.len() {
                        out.insert("nullable".into(), json!(true));
                    }
                    match named.as_slice() {
                        [] => None,
                        [one] => out.insert("type".into(), (*one).clone()),
                        // Several types: the subset has one per schema; anyOf says it.
                        _ => out.insert(
                            "anyOf".into(),
                            named.iter().map(|t| json!({"type": t})).collect(),
                        ),
                    };
                }
                _ => {
                    out.insert(key.clone(), value.clone());
                }
            },
            "const" => {
                out.insert("enum".into(), json!([value]));
            }
            "properties" => {
                let Value::Object(props) = value else {
                    continue;
                };
                let mut converted = serde_json::Map::new();
                for (name, sub) in props {
                    converted.insert(name.clone(), response_schema(sub)?);
                }
                out.insert(key.clone(), Value::Object(converted));
            }
            "items" => {
                out.insert(key.clone(), response_schema(value)?);
            }
            "anyOf" | "oneOf" => {
                let Value::Array(subs) = value else {
                    continue;
                };
                let converted: Option<Vec<Value>> = subs.iter().map(response_schema).collect();
                out.insert("anyOf".into(), Value::Array(converted?));
            }
            k if SCHEMA_KEYWORDS.contains(&k) => {
                out.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    Some(Value::Object(out))
}
