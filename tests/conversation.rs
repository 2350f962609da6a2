//! The canonical conversation survives every wire: exact round trips through OpenAI,
//! through Anthropic up to `normalize`, through Gemini up to call ids; a session moved
//! across all three comes back the same; each rendering has the exact shape its API
//! expects; bad input is an error that names the field, never a panic.

use poolctl::core::conversation::*;
use poolctl::wire::anthropic::history::*;
use poolctl::wire::gemini::history::*;
use poolctl::wire::openai::history::*;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::HashMap;

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
    }
}

fn user(text: &str) -> Turn {
    Turn::user(text)
}

fn assistant(text: &str, tool_calls: Vec<ToolCall>) -> Turn {
    Turn::Assistant {
        text: text.into(),
        tool_calls,
    }
}

fn result(call_id: &str, name: &str, content: &str, is_error: bool) -> Turn {
    Turn::ToolResult {
        call_id: call_id.into(),
        name: name.into(),
        content: content.into(),
        is_error,
        parts: Vec::new(),
    }
}

/// System; user; assistant text with two parallel calls; their results, one an
/// error; assistant final text; user follow-up.
fn rich() -> Conversation {
    Conversation {
        system_parts: Vec::new(),
        system_at: Vec::new(),
        system: Some("You are terse.".into()),
        turns: vec![
            user("Weather in Paris and Rome? And the time in Tokyo."),
            assistant(
                "Checking.",
                vec![
                    call("call_Pa", "get_weather", json!({"city": "Paris"})),
                    call(
                        "call_Ro",
                        "get_weather",
                        json!({"city": "Rome", "units": "c", "days": [1, 2]}),
                    ),
                    call("toolu_Tk", "get_time", json!({"tz": "Asia/Tokyo"})),
                ],
            ),
            result("call_Pa", "get_weather", "18C sunny", false),
            result("call_Ro", "get_weather", "upstream timeout", true),
            result("toolu_Tk", "get_time", "{\"time\":\"09:00\"}", false),
            assistant("Paris: 18C, sunny. Rome failed. Tokyo: 09:00.", vec![]),
            user("Try Rome again?"),
        ],
    }
}

/// Call ids renamed `call_0`, `call_1`, ... in call order, results following their
/// calls: the ids Gemini's parser gives, so "equal modulo ids" is plain equality.
fn modulo_ids(c: &Conversation) -> Conversation {
    let mut renamed: HashMap<String, String> = HashMap::new();
    let mut out = c.clone();
    for turn in &mut out.turns {
        match turn {
            Turn::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    let id = format!("call_{}", renamed.len());
                    renamed.insert(call.id.clone(), id.clone());
                    call.id = id;
                }
            }
            Turn::ToolResult { call_id, .. } => {
                *call_id = renamed[call_id.as_str()].clone();
            }
            Turn::User { .. } => {}
        }
    }
    out
}

fn via_openai(c: &Conversation) -> Result<Conversation, CodecError> {
    from_openai_messages(&openai_messages(c))
}

fn via_anthropic(c: &Conversation) -> Result<Conversation, CodecError> {
    let (system, messages) = anthropic_request_parts(c);
    // Several system messages went as blocks; read back, they are one text again.
    let system = system.map(|s| match s {
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n\n"),
        other => other.as_str().unwrap_or_default().to_string(),
    });
    from_anthropic(system.as_deref(), &messages)
}

fn via_gemini(c: &Conversation) -> Result<Conversation, CodecError> {
    let (system, contents) = gemini_request_parts(c);
    from_gemini(system.as_ref(), &contents)
}

#[test]
fn rich_conversation_is_valid_and_already_normal() {
    let c = rich();
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(c.normalize(), c);
}

#[test]
fn round_trips_through_openai_exactly() {
    assert_eq!(via_openai(&rich()), Ok(rich()));
}

#[test]
fn round_trips_through_anthropic_exactly() {
    assert_eq!(via_anthropic(&rich()), Ok(rich()));
}

#[test]
fn round_trips_through_gemini_modulo_ids() {
    let back = via_gemini(&rich()).unwrap();
    assert_eq!(back, modulo_ids(&rich()));
    // Pairing survives: the error belongs to the second get_weather call (Rome).
    let Turn::Assistant { tool_calls, .. } = &back.turns[1] else {
        panic!("turn 1 is not an assistant turn")
    };
    assert_eq!(tool_calls[1].arguments["city"], "Rome");
    assert_eq!(
        back.turns[3],
        result(&tool_calls[1].id, "get_weather", "upstream timeout", true)
    );
}

#[test]
fn results_answered_out_of_order_keep_their_pairing_when_names_differ() {
    let mut c = rich();
    c.turns[2..5].rotate_right(1); // get_time answered first, weather still in call order
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(via_openai(&c), Ok(c.clone()));
    assert_eq!(via_anthropic(&c), Ok(c.clone()));
    assert_eq!(via_gemini(&c), Ok(modulo_ids(&c)));
}

#[test]
fn gemini_pairs_same_name_results_in_call_order() {
    // Documented loss: without ids, two get_weather results answered Rome first are
    // paired with the calls in call order, so Rome's error lands on Paris's call.
    let mut c = rich();
    c.turns.swap(2, 3);
    assert_eq!(via_openai(&c), Ok(c.clone()));
    assert_eq!(via_anthropic(&c), Ok(c.clone()));
    let back = via_gemini(&c).unwrap();
    assert_eq!(
        back.turns[2],
        result("call_0", "get_weather", "upstream timeout", true)
    );
    assert_eq!(
        back.turns[3],
        result("call_1", "get_weather", "18C sunny", false)
    );
}

#[test]
fn session_moves_across_all_three_providers() {
    let c = rich();
    let hop = via_openai(&c).and_then(|c| via_anthropic(&c));
    let hop = hop.and_then(|c| via_gemini(&c)).unwrap();
    assert_eq!(hop, modulo_ids(&c));
    // And back: Gemini's ids are ordinary ids to the others.
    let back = via_openai(&hop).and_then(|c| via_anthropic(&c));
    assert_eq!(back, Ok(modulo_ids(&c)));
}

fn small() -> Conversation {
    Conversation {
        system_parts: Vec::new(),
        system_at: Vec::new(),
        system: Some("S".into()),
        turns: vec![
            user("hi"),
            assistant(
                "",
                vec![call("c1", "f", json!({"a": 1})), call("c2", "g", json!({}))],
            ),
            result("c1", "f", "ok", false),
            result("c2", "g", "bad", true),
            user("thanks"),
        ],
    }
}

#[test]
fn openai_shape() {
    let expected = json!([
        {"role": "system", "content": "S"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "tool", "tool_call_id": "c2", "content": "[tool error] bad"},
        {"role": "user", "content": "thanks"},
    ]);
    assert_eq!(Value::Array(openai_messages(&small())), expected);
    // A text-only assistant turn keeps `content` and has no `tool_calls` key.
    let plain = Conversation {
        system_parts: Vec::new(),
        system_at: Vec::new(),
        system: None,
        turns: vec![assistant("", vec![]), assistant("yes", vec![])],
    };
    assert_eq!(
        openai_messages(&plain),
        vec![
            json!({"role": "assistant", "content": ""}),
            json!({"role": "assistant", "content": "yes"}),
        ]
    );
}

#[test]
fn anthropic_shape_merges_results_and_following_text_into_one_user_message() {
    let (system, messages) = anthropic_request_parts(&small());
    assert_eq!(system, Some(json!("S")));
    let expected = json!([
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}},
            {"type": "tool_use", "id": "c2", "name": "g", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "ok", "is_error": false},
            {"type": "tool_result", "tool_use_id": "c2", "content": "bad", "is_error": true},
            {"type": "text", "text": "thanks"},
        ]},
    ]);
    assert_eq!(Value::Array(messages), expected);
}

#[test]
fn gemini_shape_uses_user_and_model_roles() {
    let (system, contents) = gemini_request_parts(&small());
    assert_eq!(system, Some(json!({"parts": [{"text": "S"}]})));
    let expected = json!([
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [
            {"functionCall": {"name": "f", "args": {"a": 1}}},
            {"functionCall": {"name": "g", "args": {}}},
        ]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "f", "response": {"content": "ok"}}},
            {"functionResponse": {"name": "g", "response": {"error": "bad"}}},
            {"text": "thanks"},
        ]},
    ]);
    assert_eq!(Value::Array(contents), expected);
}

#[test]
fn tool_spec_shapes() {
    let tools = [ToolSpec {
        name: "f".into(),
        description: "does f".into(),
        parameters: json!({"type": "object", "properties": {"a": {"type": "integer"}}}),
        strict: false,
    }];
    let schema = tools[0].parameters.clone();
    assert_eq!(
        openai_tools(&tools),
        json!([{"type": "function", "function": {"name": "f", "description": "does f", "parameters": schema}}])
    );
    assert_eq!(
        anthropic_tools(&tools),
        json!([{"name": "f", "description": "does f", "input_schema": schema}])
    );
    assert_eq!(
        gemini_tools(&tools),
        json!([{"functionDeclarations": [{"name": "f", "description": "does f", "parameters": schema}]}])
    );
}

/// Guards Gemini's function declarations: `parameters` is its OpenAPI subset, which
/// answers 400 to `additionalProperties` (on every strict OpenAI tool) and to an OBJECT
/// without properties; a schema with references has no form there.
#[test]
fn gemini_tools_take_the_schema_subset_or_json_schema_whole() {
    let tool = |parameters: Value| ToolSpec {
        name: "f".into(),
        description: "does f".into(),
        parameters,
        strict: true,
    };
    let strict = json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}},
        "required": ["a"], "additionalProperties": false});
    let with_ref = json!({"type": "object", "$defs": {"A": {"type": "string"}},
        "properties": {"a": {"$ref": "#/$defs/A"}}});
    let tools = [
        tool(strict),
        tool(json!({"type": "object", "properties": {}})),
        tool(with_ref.clone()),
    ];
    assert_eq!(
        gemini_tools(&tools),
        json!([{"functionDeclarations": [
            {"name": "f", "description": "does f", "parameters": {"type": "object",
                "properties": {"a": {"type": "string", "nullable": true}}, "required": ["a"]}},
            {"name": "f", "description": "does f"},
            {"name": "f", "description": "does f", "parametersJsonSchema": with_ref},
        ]}])
    );
}

#[test]
fn reads_tool_calls_from_each_wires_answer() {
    let openai = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
        {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": ""}},
    ]});
    assert_eq!(
        openai_answer_tool_calls(&openai),
        Ok(vec![
            call("call_1", "f", json!({"a": 1})),
            call("call_2", "g", json!({}))
        ])
    );
    assert_eq!(
        openai_answer_tool_calls(&json!({"role": "assistant", "content": "hi"})),
        Ok(vec![])
    );
    let anthropic = json!([
        {"type": "thinking", "thinking": "...", "signature": "x"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
    ]);
    assert_eq!(
        anthropic_answer_tool_calls(&anthropic),
        Ok(vec![call("toolu_1", "f", json!({"a": 1}))])
    );
    let gemini = json!([
        {"text": "thinking it over", "thought": true},
        {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "sig"},
        {"functionCall": {"name": "g"}},
    ]);
    assert_eq!(
        gemini_answer_tool_calls(&gemini),
        Ok(vec![
            call("call_0", "f", json!({"a": 1})),
            call("call_1", "g", json!({}))
        ])
    );
}

#[test]
fn gemini_answer_ids_continue_the_history() {
    // A history held on Gemini, then a second answer with a call: its id must not
    // repeat call_0 and must be what re-parsing the whole history would give.
    let mut c = via_gemini(&small()).unwrap();
    let answer = json!([{"functionCall": {"name": "f", "args": {"a": 2}}}]);
    let calls = gemini_answer_tool_calls_after(&c, &answer).unwrap();
    assert_eq!(calls, vec![call("call_2", "f", json!({"a": 2}))]);
    c.turns.push(assistant("", calls));
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(via_gemini(&c), Ok(c.clone()));
    // An id another provider gave that looks like ours is skipped.
    let mixed = Conversation {
        system_parts: Vec::new(),
        system_at: Vec::new(),
        system: None,
        turns: vec![assistant("", vec![call("call_1", "f", json!({}))])],
    };
    let calls = gemini_answer_tool_calls_after(&mixed, &answer).unwrap();
    assert_eq!(calls[0].id, "call_2");
}

#[test]
fn pending_calls_at_the_end_round_trip() {
    let mut c = small();
    c.turns.push(assistant(
        "One more.",
        vec![call("c3", "f", json!({"a": 3}))],
    ));
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(via_openai(&c), Ok(c.clone()));
    assert_eq!(via_anthropic(&c), Ok(c.clone()));
    assert_eq!(via_gemini(&c), Ok(modulo_ids(&c)));
}

/// Guards fidelity.md §2 "a system or developer message after the first turn: kept in
/// place" on the OpenAI wire: a conversation read from chat messages (a scenario's
/// request, a Responses client's items) went to an OpenAI route with every system and
/// developer message folded into one leading `system`.
#[test]
fn system_and_developer_messages_reach_the_openai_wire_where_they_stood() {
    let sent = [
        json!({"role": "developer", "content": "Dev rules."}),
        json!({"role": "user", "content": "Hi"}),
        json!({"role": "assistant", "content": "Hello."}),
        json!({"role": "system", "content": [{"type": "text", "text": "Now"}, {"type": "text", "text": "in French."}]}),
        json!({"role": "user", "content": "Again"}),
        json!({"role": "developer", "content": "Be brief."}),
    ];
    let c = from_openai_messages(&sent).unwrap();
    assert_eq!(openai_messages(&c), sent.to_vec());
    // Anthropic and Gemini still get them all as the system prompt, in order.
    assert_eq!(
        c.system.as_deref(),
        Some("Dev rules.\n\nNow\n\nin French.\n\nBe brief.")
    );
    // A caller that sets `system` itself leaves the placement behind: one system first.
    let mut own = c.clone();
    own.system = Some("Mine.".into());
    assert_eq!(
        openai_messages(&own)[0],
        json!({"role": "system", "content": "Mine."})
    );
    assert_eq!(openai_messages(&own).len(), 4);
}

#[test]
fn reads_foreign_histories_that_the_renderers_never_produce() {
    let openai = [
        json!({"role": "developer", "content": "A"}),
        json!({"role": "system", "content": [{"type": "text", "text": "B"}]}),
        json!({"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}),
    ];
    assert_eq!(
        from_openai_messages(&openai),
        Ok(Conversation {
            // Each message kept apart too, for a wire whose system takes blocks, and
            // where it stood with its role, for the OpenAI wire.
            system_parts: vec!["A".into(), "B".into()],
            system_at: vec![
                SystemAt {
                    developer: true,
                    parts: vec!["A".into()],
                    before_turn: 0
                },
                SystemAt {
                    developer: false,
                    parts: vec!["B".into()],
                    before_turn: 0
                },
            ],
            system: Some("A\n\nB".into()),
            turns: vec![Turn::User {
                parts: vec![Part::text("x"), Part::text("y")]
            }]
        })
    );
    let anthropic = [
        json!({"role": "user", "content": "plain"}),
        json!({"role": "assistant", "content": "reply"}),
    ];
    assert_eq!(
        from_anthropic(None, &anthropic),
        Ok(Conversation {
            system_parts: Vec::new(),
            system_at: Vec::new(),
            system: None,
            turns: vec![user("plain"), assistant("reply", vec![])]
        })
    );
    // Gemini: no role means user; `function` role and an `output` response are accepted.
    let gemini = [
        json!({"parts": [{"text": "q"}]}),
        json!({"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]}),
        json!({"role": "function", "parts": [{"functionResponse": {"name": "f", "response": {"output": {"n": 1}}}}]}),
    ];
    assert_eq!(
        from_gemini(None, &gemini),
        Ok(Conversation {
            system_parts: Vec::new(),
            system_at: Vec::new(),
            system: None,
            turns: vec![
                user("q"),
                assistant("", vec![call("call_0", "f", json!({}))]),
                result("call_0", "f", "{\"n\":1}", false),
            ]
        })
    );
}

fn err<T: std::fmt::Debug>(r: Result<T, CodecError>) -> String {
    r.expect_err("expected an error").to_string()
}

/// Audio and a file by id have no canonical part: each is kept by its field name, so
/// the router can skip a route of another wire for it (or drop it under drop_params)
/// instead of refusing the whole conversation.
#[test]
fn openai_audio_and_file_ids_are_kept_as_omitted_parts_by_name() {
    let msgs = [json!({"role": "user", "content": [
        {"type": "text", "text": "hear"},
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        {"type": "file", "file": {"file_id": "f1"}}
    ]})];
    let c = from_openai_messages(&msgs).unwrap();
    assert_eq!(
        c.turns,
        vec![Turn::User {
            parts: vec![
                Part::text("hear"),
                Part::Omitted {
                    field: "input_audio".into()
                },
                Part::Omitted {
                    field: "file_id".into()
                },
            ]
        }]
    );
    // An Anthropic block the canonical form has no part for is kept by name too.
    let blocks = [json!({"role": "user", "content": [
        {"type": "text", "text": "cite"},
        {"type": "search_result", "source": "s", "title": "t", "content": []}
    ]})];
    let a = from_anthropic(None, &blocks).unwrap();
    assert_eq!(
        a.turns,
        vec![Turn::User {
            parts: vec![
                Part::text("cite"),
                Part::Omitted {
                    field: "search_result".into()
                }
            ]
        }]
    );
    // No codec renders them: a route called under drop_params gets the rest.
    let (_, sent) = anthropic_request_parts(&c);
    assert_eq!(
        sent,
        vec![json!({"role": "user", "content": [{"type": "text", "text": "hear"}]})]
    );
}

#[test]
fn bad_openai_input_names_the_field() {
    let bad_args = [
        json!({"role": "user", "content": "hi"}),
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}),
    ];
    let e = err(from_openai_messages(&bad_args));
    assert!(
        e.starts_with("messages[1].tool_calls[0].function.arguments is not valid JSON"),
        "{e}"
    );
    let array_args = json!({"tool_calls": [
        {"id": "c1", "function": {"name": "f", "arguments": "[1, 2]"}}]});
    assert_eq!(
        err(openai_answer_tool_calls(&array_args)),
        "message.tool_calls[0].function.arguments is not a JSON object"
    );
    let orphan = [json!({"role": "tool", "tool_call_id": "nope", "content": "x"})];
    assert_eq!(
        err(from_openai_messages(&orphan)),
        "messages[0].tool_call_id 'nope' matches no earlier assistant tool call"
    );

    let not_base64 = [json!({"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png,abc"}}]})];
    assert!(err(from_openai_messages(&not_base64)).contains("image_url.url is a data URL"));
    assert_eq!(
        err(from_openai_messages(&[json!({"content": "x"})])),
        "messages[0].role is missing or not a string"
    );
    assert_eq!(
        err(from_openai_messages(&[
            json!({"role": "function", "content": "x"})
        ])),
        "messages[0].role 'function' is not supported"
    );
}

#[test]
fn bad_anthropic_input_names_the_field() {
    let list_input = [json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "f", "input": [1]}]})];
    assert_eq!(
        err(from_anthropic(None, &list_input)),
        "messages[0].content[0].input is not a JSON object"
    );
    let orphan = [json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t9", "content": "x"}]})];
    assert_eq!(
        err(from_anthropic(None, &orphan)),
        "messages[0].content[0].tool_use_id 't9' matches no earlier tool_use block"
    );
    let image = [json!({"role": "user", "content": [{"type": "image", "source": {}}]})];
    assert_eq!(
        err(from_anthropic(None, &image)),
        "messages[0].content[0].source.type is missing or not a string"
    );
    let file = [json!({"role": "user", "content": [
        {"type": "image", "source": {"type": "file", "file_id": "f"}}]})];
    assert!(err(from_anthropic(None, &file)).contains("carried only by the Anthropic wire"));
    assert_eq!(
        err(anthropic_answer_tool_calls(&json!({"type": "text"}))),
        "content is not an array"
    );
}

#[test]
fn bad_gemini_input_names_the_field() {
    let string_args = [json!({"role": "model", "parts": [
        {"functionCall": {"name": "f", "args": "{\"a\":1}"}}]})];
    assert_eq!(
        err(from_gemini(None, &string_args)),
        "contents[0].parts[0].functionCall.args is not a JSON object"
    );
    let orphan = [json!({"role": "user", "parts": [
        {"functionResponse": {"name": "f", "response": {"content": "x"}}}]})];
    assert_eq!(
        err(from_gemini(None, &orphan)),
        "contents[0].parts[0].functionResponse.name 'f' answers no earlier unanswered functionCall"
    );
    let video = [json!({"role": "user", "parts": [{"videoMetadata": {}}]})];
    assert!(err(from_gemini(None, &video)).starts_with("contents[0].parts[0] is not a text"));
    let inline = [json!({"role": "user", "parts": [{"inlineData": {"data": ""}}]})];
    assert!(err(from_gemini(None, &inline)).contains("mime_type is missing"));
    assert_eq!(
        err(from_gemini(None, &[json!({"role": "system", "parts": []})])),
        "contents[0].role 'system' is not supported"
    );
    assert_eq!(
        err(gemini_answer_tool_calls(
            &json!([{"functionCall": {"args": {}}}])
        )),
        "parts[0].functionCall.name is missing or not a string"
    );
}

/// One user turn of every part kind, rendered by each wire field by field: OpenAI keeps
/// every part (a data URL for inline bytes, `detail`, the file name); Anthropic has a
/// block each, with no `detail`; Gemini takes inline bytes as `inline_data`.
#[test]
fn parts_every_wire_carries_and_what_it_drops() {
    let turn = Turn::User {
        parts: vec![
            Part::text("a"),
            Part::text("b"),
            Part::Image {
                source: Source::Url {
                    url: "https://x/y.png".into(),
                },
                detail: Some("low".into()),
            },
            Part::Image {
                source: Source::Base64 {
                    media_type: "image/png".into(),
                    data: "iVBO".into(),
                },
                detail: None,
            },
            Part::Document {
                source: Source::Base64 {
                    media_type: "application/pdf".into(),
                    data: "JVBE".into(),
                },
                filename: Some("r.pdf".into()),
            },
        ],
    };
    let c = Conversation {
        system_parts: Vec::new(),
        system_at: Vec::new(),
        system: None,
        turns: vec![turn],
    };
    assert_eq!(
        openai_messages(&c),
        vec![json!({"role": "user", "content": [
            {"type": "text", "text": "a"},
            {"type": "text", "text": "b"},
            {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "r.pdf"}}
        ]})]
    );
    assert_eq!(via_openai(&c), Ok(c.clone()));
    let (_, messages) = anthropic_request_parts(&c);
    assert_eq!(
        messages,
        vec![json!({"role": "user", "content": [
            {"type": "text", "text": "a"},
            {"type": "text", "text": "b"},
            {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}, "title": "r.pdf"}
        ]})]
    );
    let (_, contents) = gemini_request_parts(&c);
    assert_eq!(
        contents[0]["parts"][3],
        json!({"inline_data": {"mime_type": "image/png", "data": "iVBO"}})
    );
    assert_eq!(
        contents[0]["parts"][4],
        json!({"inline_data": {"mime_type": "application/pdf", "data": "JVBE"}})
    );
}

// --- properties ------------------------------------------------------------------------

/// Any text, and texts that look like OpenAI's in-band error marker.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => ".{0,12}",
        1 => Just(String::new()),
        1 => ".{0,4}".prop_map(|s| format!("{OPENAI_TOOL_ERROR_PREFIX}{s}")),
    ]
}

fn name() -> impl Strategy<Value = String> {
    "[a-z_]{1,8}"
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
        prop::collection::vec(any::<i32>(), 0..3).prop_map(Value::from),
    ]
}

fn arguments() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(name(), leaf(), 0..4)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// A content part: text, an image inline or by URL, an inline PDF. No `detail` and no
/// file name, which only some wires carry (see `parts_every_wire_carries_and_what_it_drops`).
fn part() -> impl Strategy<Value = Part> {
    let source = prop_oneof![
        "[a-z]{1,6}".prop_map(|u| Source::Url {
            url: format!("https://example.com/{u}.png")
        }),
        (
            prop::sample::select(vec!["image/png", "image/jpeg"]),
            "[A-Za-z0-9+/]{0,12}"
        )
            .prop_map(|(m, d)| Source::Base64 {
                media_type: m.to_string(),
                data: d
            }),
    ];
    prop_oneof![
        3 => text().prop_map(Part::text),
        1 => source.prop_map(|source| Part::Image { source, detail: None }),
        1 => "[A-Za-z0-9+/]{0,12}".prop_map(|d| Part::Document {
            source: Source::Base64 { media_type: "application/pdf".into(), data: d },
            filename: None
        }),
    ]
}

#[derive(Debug, Clone)]
enum Step {
    User(String),
    /// A user message of several parts.
    Parts(Vec<Part>),
    Say(String),
    /// An assistant turn with calls, then one result per call in the order `keys` sorts.
    Tools {
        text: String,
        calls: Vec<(String, Value)>,
        results: Vec<(String, bool, u8)>,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let tools = (
        text(),
        prop::collection::vec(
            (prop::sample::select(vec!["f", "g", "h_x"]), arguments()),
            1..4,
        ),
        prop::collection::vec((text(), any::<bool>(), any::<u8>()), 3),
    )
        .prop_map(|(text, calls, results)| Step::Tools {
            text,
            calls: calls.into_iter().map(|(n, a)| (n.to_string(), a)).collect(),
            results,
        });
    prop_oneof![
        text().prop_map(Step::User),
        prop::collection::vec(part(), 2..4).prop_map(Step::Parts),
        text().prop_map(Step::Say),
        tools
    ]
}

/// Valid conversations: results come right after their calls in a random order, except
/// that results of calls to the same function keep call order, which is all Gemini can
/// tell apart (see `gemini_pairs_same_name_results_in_call_order`). Adjacent assistant
/// turns (Say then Tools, empty Say) occur, so `normalize` is exercised; a final
/// assistant turn may leave its calls pending.
fn conversation() -> impl Strategy<Value = Conversation> {
    (
        prop::option::of(text()),
        prop::collection::vec(step(), 0..7),
        prop::option::of((text(), name(), arguments())),
    )
        .prop_map(|(system, steps, pending)| {
            let mut turns = Vec::new();
            let mut next = 0;
            for s in steps {
                match s {
                    Step::User(t) => turns.push(user(&t)),
                    Step::Parts(parts) => turns.push(Turn::User { parts }),
                    Step::Say(t) => turns.push(assistant(&t, vec![])),
                    Step::Tools {
                        text,
                        calls,
                        results,
                    } => {
                        let calls: Vec<ToolCall> = calls
                            .into_iter()
                            .map(|(n, a)| {
                                next += 1;
                                call(&format!("id{next}"), &n, a)
                            })
                            .collect();
                        let mut order: Vec<usize> = (0..calls.len()).collect();
                        order.sort_by_key(|&k| results[k].2);
                        // Same-name calls keep call order among the shuffled slots.
                        for name in ["f", "g", "h_x"] {
                            let slots: Vec<usize> = (0..order.len())
                                .filter(|&s| calls[order[s]].name == name)
                                .collect();
                            let mut same: Vec<usize> = slots.iter().map(|&s| order[s]).collect();
                            same.sort();
                            for (s, k) in slots.into_iter().zip(same) {
                                order[s] = k;
                            }
                        }
                        turns.push(assistant(&text, calls.clone()));
                        for k in order {
                            let (content, is_error, _) = &results[k];
                            turns.push(result(&calls[k].id, &calls[k].name, content, *is_error));
                        }
                    }
                }
            }
            if let Some((t, n, a)) = pending {
                turns.push(assistant(&t, vec![call("pending", &n, a)]));
            }
            Conversation {
                system,
                system_parts: Vec::new(),
                system_at: Vec::new(),
                turns,
            }
        })
}

/// Arbitrary JSON, to feed the parsers things no wire sends.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        prop::sample::select(vec![
            "user",
            "assistant",
            "model",
            "tool",
            "system",
            "text",
            "tool_use",
            "tool_result",
            "c1",
            "f",
            "{}",
            "",
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "role",
                    "content",
                    "tool_calls",
                    "id",
                    "type",
                    "function",
                    "name",
                    "arguments",
                    "tool_call_id",
                    "text",
                    "input",
                    "tool_use_id",
                    "is_error",
                    "parts",
                    "functionCall",
                    "functionResponse",
                    "args",
                    "response",
                    "error",
                ])
                .prop_map(str::to_string),
                inner,
                0..4,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn generated_conversations_are_valid(c in conversation()) {
        prop_assert_eq!(c.validate(), Ok(()));
        let n = c.normalize();
        prop_assert_eq!(n.validate(), Ok(()));
        prop_assert_eq!(n.normalize(), n);
    }

    #[test]
    fn openai_round_trip_is_exact(c in conversation()) {
        prop_assert_eq!(via_openai(&c), Ok(c));
    }

    #[test]
    fn anthropic_round_trip_is_exact_up_to_normalize(c in conversation()) {
        prop_assert_eq!(via_anthropic(&c), Ok(c.normalize()));
    }

    #[test]
    fn gemini_round_trip_is_exact_up_to_normalize_and_ids(c in conversation()) {
        prop_assert_eq!(via_gemini(&c), Ok(modulo_ids(&c.normalize())));
    }

    #[test]
    fn a_session_moved_across_providers_is_unchanged(c in conversation()) {
        let moved = via_openai(&c)
            .and_then(|c| via_anthropic(&c))
            .and_then(|c| via_gemini(&c))
            .and_then(|c| via_openai(&c));
        prop_assert_eq!(moved, Ok(modulo_ids(&c.normalize())));
    }

    #[test]
    fn parsers_never_panic(items in prop::collection::vec(any_json(), 0..4), one in any_json()) {
        let _ = from_openai_messages(&items);
        let _ = from_anthropic(Some("s"), &items);
        let _ = from_gemini(Some(&one), &items);
        let _ = openai_answer_tool_calls(&one);
        let _ = anthropic_answer_tool_calls(&one);
        let _ = gemini_answer_tool_calls(&one);
    }
}
