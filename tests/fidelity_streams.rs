//! Streams through `poolctl serve` (spec/fidelity.md §1, §2, §3 and §5): the usage an
//! upstream reports before its first token is in Anthropic's `message_start`; reasoning
//! an Anthropic client cannot be shown is named as dropped and is no visible token; a
//! same-wire stream forwards every upstream event, its last one included; and the usage
//! is asked of a same-wire OpenAI stream only where a token bucket is settled with it.
//! The built binary runs in front of wiremock upstreams that stream exact bytes. No
//! test sleeps.

use serde_json::{json, Value};
use std::path::PathBuf;
use wiremock::MockServer;

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/recording.rs"]
mod recording;
use gateway::{data_lines, header, send, Gateway};
use recording::{received, sse_upstream};

const KEY_VAR: &str = "POOLCTL_STREAMS_TEST_KEY";
const UPSTREAM_KEY: &str = "sk-upstream-STREAMS-3b9a";

/// `poolctl serve` with `providers` (name, wire, upstream), the tier `high` of
/// `routes` in order, and `extra` top-level YAML (`limits:`).
async fn serve(
    providers: &[(&str, &str, &MockServer)],
    routes: &[&str],
    extra: &str,
) -> (tempfile::TempDir, Gateway) {
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = String::from("providers:\n");
    for (name, wire, server) in providers {
        let base = match *wire {
            "openai" => format!("{}/v1", server.uri()),
            _ => server.uri(),
        };
        yaml.push_str(&format!(
            "  {name}:\n    wire: {wire}\n    base_url: {base}\n    api_key_env: {KEY_VAR}\n"
        ));
    }
    yaml.push_str("tiers:\n  high:\n");
    for r in routes {
        yaml.push_str(&format!("    - {r}\n"));
    }
    yaml.push_str(extra);
    let cfg: PathBuf = dir.path().join("pool.yaml");
    std::fs::write(&cfg, yaml).unwrap();
    let gw = gateway::start(&cfg, &[], &[(KEY_VAR, UPSTREAM_KEY)]).await;
    (dir, gw)
}

/// The one event of type `kind` (the last one, when there are several).
fn event<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    events
        .iter()
        .rev()
        .find(|e| e["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {events:?}"))
}

/// The bodies the upstream received, as text.
async fn sent(server: &MockServer) -> Vec<String> {
    received(server)
        .await
        .iter()
        .map(|r| String::from_utf8(r.body.clone()).unwrap())
        .collect()
}

const ANTHROPIC_CLIENT: &str =
    r#"{"model":"high","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

const GEMINI_USAGE_FIRST: &str = concat!(
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Bon\"}]},\"index\":0}],",
    "\"usageMetadata\":{\"promptTokenCount\":20,\"cachedContentTokenCount\":8,\"candidatesTokenCount\":1},\"modelVersion\":\"gemini-x-001\"}\n\n",
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"jour\"}]},\"finishReason\":\"STOP\",\"index\":0}],",
    "\"usageMetadata\":{\"promptTokenCount\":20,\"cachedContentTokenCount\":8,\"candidatesTokenCount\":6},\"modelVersion\":\"gemini-x-001\"}\n\n",
);

/// Guards the audit's §2 finding: an Anthropic client streaming from a Gemini route got
/// `message_start.usage.input_tokens: 0` although the first chunk, which carries the
/// first token, reported the prompt (20, 8 of them cached). The usage reaches the
/// encoder before that chunk's text; the last `message_delta` still has it whole.
#[tokio::test]
async fn message_start_states_the_input_a_gemini_upstream_reported_with_its_first_token() {
    let gem = sse_upstream(
        "/v1beta/models/gemini-x:streamGenerateContent",
        GEMINI_USAGE_FIRST,
    )
    .await;
    let (_dir, gw) = serve(&[("gem", "gemini", &gem)], &["gem/gemini-x"], "").await;
    let r = send(&gw, "/v1/messages", ANTHROPIC_CLIENT, &[]).await;
    assert_eq!(r.status(), 200);
    let events = data_lines(&r.text().await.unwrap());
    let start = event(&events, "message_start");
    assert_eq!(start["message"]["model"], "gemini-x-001");
    let usage = &start["message"]["usage"];
    assert_eq!(
        usage["input_tokens"], 12,
        "prompt less the cached part: {usage}"
    );
    assert_eq!(usage["cache_read_input_tokens"], 8, "{usage}");
    let end = event(&events, "message_delta");
    assert_eq!(
        end["usage"],
        json!({"input_tokens": 12, "cache_read_input_tokens": 8, "output_tokens": 6})
    );
    let text: String = events
        .iter()
        .filter_map(|e| e["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "Bonjour");
}

const OPENAI_USAGE_FIRST: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-x-2025\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}],",
    "\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":1,\"total_tokens\":21}}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-x-2025\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],",
    "\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":2,\"total_tokens\":22}}\n\n",
    "data: [DONE]\n\n",
);

/// The same for an OpenAI-wire upstream that reports its usage on every chunk.
#[tokio::test]
async fn message_start_states_the_input_an_openai_upstream_reported_with_its_first_token() {
    let oai = sse_upstream("/v1/chat/completions", OPENAI_USAGE_FIRST).await;
    let (_dir, gw) = serve(&[("oai", "openai", &oai)], &["oai/gpt-x"], "").await;
    let r = send(&gw, "/v1/messages", ANTHROPIC_CLIENT, &[]).await;
    assert_eq!(r.status(), 200);
    let events = data_lines(&r.text().await.unwrap());
    let start = event(&events, "message_start");
    assert_eq!(start["message"]["usage"]["input_tokens"], 20, "{start}");
    let end = event(&events, "message_delta");
    assert_eq!(end["usage"]["input_tokens"], 20);
    assert_eq!(end["usage"]["output_tokens"], 2);
}

const OPENAI_REASONING: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"deepseek-x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"I thought.\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"deepseek-x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"deepseek-x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"deepseek-x\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
    "data: [DONE]\n\n",
);

/// Guards the audit's §2/§3 finding: a stream from an OpenAI-wire route to an
/// Anthropic client dropped `delta.reasoning_content` (no signed thinking block can
/// hold it) without naming it. It is named, as the whole answer names it: the header
/// (it came before the headers went), the log line and the metric.
#[tokio::test]
async fn streamed_reasoning_an_anthropic_client_cannot_be_shown_is_named_as_dropped() {
    let oai = sse_upstream("/v1/chat/completions", OPENAI_REASONING).await;
    let (_dir, gw) = serve(&[("oai", "openai", &oai)], &["oai/deepseek-x"], "").await;
    let r = send(&gw, "/v1/messages", ANTHROPIC_CLIENT, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "reasoning_content");
    let body = r.text().await.unwrap();
    assert!(!body.contains("I thought."), "{body}");
    let events = data_lines(&body);
    let text: String = events
        .iter()
        .filter_map(|e| e["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "Hi");
    let counted = gw
        .metric("poolctl_dropped_params_total{param=\"reasoning_content\",wire=\"openai\"}")
        .await;
    assert_eq!(counted, 1.0);
    // An OpenAI client is shown it: nothing is dropped.
    let r = send(
        &gw,
        "/v1/chat/completions",
        r#"{"model":"high","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
        &[],
    )
    .await;
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "");
    let chunks = data_lines(&r.text().await.unwrap());
    let reasoning: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(reasoning, "I thought.");
    let (_, stderr) = gw.stop().await;
    let line = stderr
        .lines()
        .find(|l| l.contains("request") && l.contains("/v1/messages"))
        .expect("the request's log line");
    assert!(line.contains("dropped=\"reasoning_content\""), "{line}");
}

/// Reasoning, then the stream breaks before any text or finish.
const OPENAI_REASONING_THEN_BROKEN: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"deepseek-x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"Hmm.\"},\"finish_reason\":null}]}\n\n";

const OPENAI_PLAIN: &str = concat!(
    "data: {\"id\":\"c2\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-y\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Backup.\"},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
);

/// §5: "a visible token is any delta the client would receive". Reasoning an Anthropic
/// client is not shown is none: it neither commits the stream to its route nor sends
/// the headers, so a route that breaks after it is fallen back from, and the backup's
/// answer is whole (the failed route's reasoning is not named: it did not serve). An
/// OpenAI client, shown the reasoning, is committed by it: the break ends its stream.
#[tokio::test]
async fn reasoning_an_anthropic_client_is_not_shown_is_no_visible_token() {
    let first = sse_upstream("/v1/chat/completions", OPENAI_REASONING_THEN_BROKEN).await;
    let backup = sse_upstream("/v1/chat/completions", OPENAI_PLAIN).await;
    let (_dir, gw) = serve(
        &[("ds", "openai", &first), ("bk", "openai", &backup)],
        &["ds/deepseek-x", "bk/gpt-y"],
        "",
    )
    .await;
    let r = send(&gw, "/v1/messages", ANTHROPIC_CLIENT, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "bk/gpt-y");
    assert_eq!(header(&r, "x-poolctl-attempts"), "2");
    assert_eq!(header(&r, "x-poolctl-dropped-params"), "");
    let events = data_lines(&r.text().await.unwrap());
    assert_eq!(event(&events, "message_start")["message"]["model"], "gpt-y");
    let text: String = events
        .iter()
        .filter_map(|e| e["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "Backup.");
    assert_eq!(
        event(&events, "message_delta")["delta"]["stop_reason"],
        "end_turn"
    );

    assert_eq!(sent(&first).await.len(), 1);

    // The same pool, fresh (the failed route now cools), for an OpenAI client.
    let first = sse_upstream("/v1/chat/completions", OPENAI_REASONING_THEN_BROKEN).await;
    let backup = sse_upstream("/v1/chat/completions", OPENAI_PLAIN).await;
    let (_dir, gw) = serve(
        &[("ds", "openai", &first), ("bk", "openai", &backup)],
        &["ds/deepseek-x", "bk/gpt-y"],
        "",
    )
    .await;
    let r = send(
        &gw,
        "/v1/chat/completions",
        r#"{"model":"high","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
        &[],
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "ds/deepseek-x");
    let body = r.text().await.unwrap();
    assert!(body.contains("Hmm."), "{body}");
    assert!(body.contains("stream_interrupted"), "{body}");
    assert!(!body.contains("Backup."), "{body}");
    assert!(sent(&backup).await.is_empty(), "committed: no fallback");
}

const ANTHROPIC_SSE_BEDROCK_STOP: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_b1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x-1\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\",\"amazon-bedrock-invocationMetrics\":{\"inputTokenCount\":9,\"outputTokenCount\":2}}\n\n",
);

/// Guards the audit's §1 finding: the reader stopped at the finish with its usage
/// (`message_delta`), so the upstream's `message_stop` never reached the client and the
/// gateway wrote its own, losing the fields on it. Every event passes as it came, the
/// last one included; only the outcome comment follows.
#[tokio::test]
async fn a_same_wire_anthropic_stream_ends_with_the_upstreams_own_message_stop() {
    let ant = sse_upstream("/v1/messages", ANTHROPIC_SSE_BEDROCK_STOP).await;
    let (_dir, gw) = serve(&[("ant", "anthropic", &ant)], &["ant/claude-x"], "").await;
    let r = send(&gw, "/v1/messages", ANTHROPIC_CLIENT, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.text().await.unwrap(),
        format!("{ANTHROPIC_SSE_BEDROCK_STOP}: poolctl outcome=success attempts=1\n\n")
    );
}

const OPENAI_WITH_USAGE_CHUNK: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-x-2025\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-x-2025\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-x-2025\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\n",
    "data: [DONE]\n\n",
);

/// Guards the audit's §1 finding: every same-wire OpenAI stream was sent
/// `stream_options.include_usage: true`, and a client's explicit `false` was rewritten,
/// though the router settles only a token bucket with the usage. Without one (no
/// limits, or only `rpm`) the body goes as the client wrote it, and the stream comes
/// back whole, a usage chunk the upstream sent unasked included.
#[tokio::test]
async fn a_same_wire_openai_stream_without_a_token_bucket_is_sent_as_the_client_wrote_it() {
    let oai = sse_upstream("/v1/chat/completions", OPENAI_WITH_USAGE_CHUNK).await;
    let (_dir, gw) = serve(
        &[("oai", "openai", &oai)],
        &["oai/gpt-x"],
        "limits:\n  oai: { rpm: 1000 }\n",
    )
    .await;
    const PLAIN: &str =
        r#"{"model":"high","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    const NO_USAGE: &str = r#"{"model":"high","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"hi"}]}"#;
    for body in [PLAIN, NO_USAGE] {
        let r = send(&gw, "/v1/chat/completions", body, &[]).await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert_eq!(
            text,
            OPENAI_WITH_USAGE_CHUNK.replace(
                "data: [DONE]",
                ": poolctl outcome=success attempts=1\n\ndata: [DONE]"
            ),
        );
    }
    let bodies = sent(&oai).await;
    assert_eq!(
        bodies,
        [PLAIN, NO_USAGE].map(|b| b.replacen(r#""model":"high""#, r#""model":"gpt-x""#, 1))
    );
}

/// Where a token bucket covers the route (`tpm`, here the provider's), the router asks
/// for the usage it settles with, and the usage-only chunk the client did not ask for
/// does not reach it.
#[tokio::test]
async fn a_same_wire_openai_stream_on_a_token_bucket_asks_for_the_usage_and_hides_its_chunk() {
    let oai = sse_upstream("/v1/chat/completions", OPENAI_WITH_USAGE_CHUNK).await;
    let (_dir, gw) = serve(
        &[("oai", "openai", &oai)],
        &["oai/gpt-x"],
        "limits:\n  oai: { rpm: 1000, tpm: 1000000 }\n",
    )
    .await;
    const PLAIN: &str =
        r#"{"model":"high","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = send(&gw, "/v1/chat/completions", PLAIN, &[]).await;
    assert_eq!(r.status(), 200);
    let chunks = data_lines(&r.text().await.unwrap());
    assert_eq!(chunks.len(), 2, "{chunks:?}");
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "{chunks:?}"
    );
    let bodies = sent(&oai).await;
    let body: Value = serde_json::from_str(&bodies[0]).unwrap();
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

/// Two Gemini candidates streamed together (`candidateCount: 2`): chunks carry either
/// or both, each with its `index`; candidate 1 ends first, with a function call.
const GEMINI_TWO_CANDIDATES: &str = concat!(
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"On\"}]},\"index\":0},",
    "{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Tw\"}]},\"index\":1}],",
    "\"usageMetadata\":{\"promptTokenCount\":4,\"candidatesTokenCount\":2},\"modelVersion\":\"gemini-x-001\"}\n\n",
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"o.\"},",
    "{\"functionCall\":{\"name\":\"count\",\"args\":{\"to\":2}}}]},\"finishReason\":\"STOP\",\"index\":1}],",
    "\"usageMetadata\":{\"promptTokenCount\":4,\"candidatesTokenCount\":5},\"modelVersion\":\"gemini-x-001\"}\n\n",
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"e.\"}]},\"finishReason\":\"STOP\",\"index\":0}],",
    "\"usageMetadata\":{\"promptTokenCount\":4,\"candidatesTokenCount\":7},\"modelVersion\":\"gemini-x-001\"}\n\n",
);

/// What the chunks of choice `index` say: its text, its finish reasons, how many of its
/// chunks carry the role, and its tool-call deltas.
fn choice_of(chunks: &[Value], index: u64) -> (String, Vec<String>, usize, Vec<Value>) {
    let mine: Vec<&Value> = chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().into_iter().flatten())
        .filter(|c| c["index"] == index)
        .collect();
    let text = mine
        .iter()
        .filter_map(|c| c["delta"]["content"].as_str())
        .collect();
    let finishes = mine
        .iter()
        .filter_map(|c| c["finish_reason"].as_str().map(str::to_string))
        .collect();
    let roles = mine
        .iter()
        .filter(|c| c["delta"]["role"] == "assistant")
        .count();
    let calls = mine
        .iter()
        .filter_map(|c| c["delta"]["tool_calls"].as_array())
        .flatten()
        .cloned()
        .collect();
    (text, finishes, roles, calls)
}

/// Guards the gap left by issue 20's first pass: a streamed `n: 2` skipped a Gemini
/// route (`cannot carry: n`) because its candidates were not read apart. Each
/// candidate is now its own choice, by its `index`: never spliced into one text, each
/// with its role, its finish reason and its tool calls counted from 0.
#[tokio::test]
async fn a_streamed_n_2_from_gemini_reaches_an_openai_client_as_two_choices_never_spliced() {
    let gem = sse_upstream(
        "/v1beta/models/gemini-x:streamGenerateContent",
        GEMINI_TWO_CANDIDATES,
    )
    .await;
    let (_dir, gw) = serve(&[("gem", "gemini", &gem)], &["gem/gemini-x"], "").await;
    let body = r#"{"model":"high","n":2,"stream":true,"stream_options":{"include_usage":true},
        "messages":[{"role":"user","content":"Count."}],
        "tools":[{"type":"function","function":{"name":"count","parameters":{"type":"object"}}}]}"#;
    let r = send(&gw, "/v1/chat/completions", body, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "gem/gemini-x");
    let text = r.text().await.unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let chunks = data_lines(&text);

    let (first, finishes, roles, calls) = choice_of(&chunks, 0);
    assert_eq!(first, "One.");
    // Choice 1's call makes only choice 1's finish `tool_calls`.
    assert_eq!(finishes, ["stop"]);
    assert_eq!(roles, 1);
    assert!(calls.is_empty(), "{calls:?}");

    let (second, finishes, roles, calls) = choice_of(&chunks, 1);
    assert_eq!(second, "Two.");
    assert_eq!(finishes, ["tool_calls"]);
    assert_eq!(roles, 1);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["index"], 0, "a choice's calls count from 0");
    assert_eq!(calls[0]["function"]["name"], "count");
    assert_eq!(calls[0]["function"]["arguments"], r#"{"to":2}"#);

    // Nothing but choices 0 and 1; the usage once, in its own chunk, whole.
    let indices: Vec<&Value> = chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().into_iter().flatten())
        .map(|c| &c["index"])
        .collect();
    assert!(indices.iter().all(|i| **i == 0 || **i == 1), "{indices:?}");
    let usage: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["usage"].is_object())
        .map(|c| &c["usage"])
        .collect();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!(usage[0]["prompt_tokens"], 4);
    assert_eq!(usage[0]["completion_tokens"], 7);

    let asked: Value = serde_json::from_str(&sent(&gem).await[0]).unwrap();
    assert_eq!(asked["generationConfig"]["candidateCount"], 2);
}

/// A client with no `n` (Anthropic Messages) is given the first candidate alone when
/// a Gemini stream sends several: the others are never spliced into its text.
#[tokio::test]
async fn an_anthropic_client_is_given_the_first_gemini_candidate_alone() {
    let gem = sse_upstream(
        "/v1beta/models/gemini-x:streamGenerateContent",
        GEMINI_TWO_CANDIDATES,
    )
    .await;
    let (_dir, gw) = serve(&[("gem", "gemini", &gem)], &["gem/gemini-x"], "").await;
    let r = send(&gw, "/v1/messages", ANTHROPIC_CLIENT, &[]).await;
    assert_eq!(r.status(), 200);
    let events = data_lines(&r.text().await.unwrap());
    let text: String = events
        .iter()
        .filter_map(|e| e["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "One.");
    assert!(
        !events
            .iter()
            .any(|e| e["content_block"]["type"] == "tool_use"),
        "candidate 1's call is not the client's: {events:?}"
    );
    assert_eq!(
        event(&events, "message_delta")["delta"]["stop_reason"],
        "end_turn"
    );
}

/// Choice 0 finishes (with the usage Gemini sends on every chunk) before choice 1 has
/// shown up; then choice 1, its finish repeated, and a delta after that finish.
const GEMINI_LATE_CANDIDATE: &str = concat!(
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"A\"}]},\"finishReason\":\"STOP\"}],",
    "\"usageMetadata\":{\"promptTokenCount\":4,\"candidatesTokenCount\":1}}\n\n",
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"B\"}]},\"finishReason\":\"STOP\",\"index\":1}],",
    "\"usageMetadata\":{\"promptTokenCount\":4,\"candidatesTokenCount\":2}}\n\n",
    "data: {\"candidates\":[{\"finishReason\":\"STOP\",\"index\":1}]}\n\n",
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"late\"}]},\"index\":1}]}\n\n",
);

/// Guards review findings on the streamed `n`: the stream ended at choice 0's finish
/// (its usage made it look whole) before choice 1 ever came, and a repeated finish of
/// a finished choice went to the client each time. Every asked-for choice is waited
/// for; a finished choice says nothing more.
#[tokio::test]
async fn a_streamed_n_waits_for_every_choice_and_a_finished_choice_says_nothing_more() {
    let gem = sse_upstream(
        "/v1beta/models/gemini-x:streamGenerateContent",
        GEMINI_LATE_CANDIDATE,
    )
    .await;
    let (_dir, gw) = serve(&[("gem", "gemini", &gem)], &["gem/gemini-x"], "").await;
    let body =
        r#"{"model":"high","n":2,"stream":true,"messages":[{"role":"user","content":"Go."}]}"#;
    let r = send(&gw, "/v1/chat/completions", body, &[]).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let chunks = data_lines(&text);
    let (first, finishes, _, _) = choice_of(&chunks, 0);
    assert_eq!((first.as_str(), finishes), ("A", vec!["stop".to_string()]));
    let (second, finishes, roles, _) = choice_of(&chunks, 1);
    assert_eq!(second, "B", "{text}");
    assert_eq!(finishes, ["stop"], "one finish for choice 1: {text}");
    assert_eq!(roles, 1);
}

/// A route that fails before its first visible token, after naming choice 1 and
/// finishing it (a safety stop), then an error event.
const GEMINI_FAILS_AFTER_A_CHOICE: &str = concat!(
    "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"\"}]},\"index\":0},",
    "{\"finishReason\":\"SAFETY\",\"index\":1}]}\n\n",
    "data: {\"error\":{\"code\":503,\"message\":\"The model is overloaded.\",\"status\":\"UNAVAILABLE\"}}\n\n",
);

/// Guards a review finding: the events held before the first visible token were not
/// tied to their attempt, so a failed route's choice-1 finish (and the choice it named
/// last) reached the client ahead of the next route's answer, which was then written
/// under choice 1. Only the serving attempt's events are sent.
#[tokio::test]
async fn a_failed_routes_held_choice_events_never_reach_the_client() {
    let bad = sse_upstream(
        "/v1beta/models/gemini-x:streamGenerateContent",
        GEMINI_FAILS_AFTER_A_CHOICE,
    )
    .await;
    let good = sse_upstream(
        "/v1beta/models/gemini-x:streamGenerateContent",
        GEMINI_TWO_CANDIDATES,
    )
    .await;
    let (_dir, gw) = serve(
        &[("bad", "gemini", &bad), ("good", "gemini", &good)],
        &["bad/gemini-x", "good/gemini-x"],
        "",
    )
    .await;
    let body =
        r#"{"model":"high","n":2,"stream":true,"messages":[{"role":"user","content":"Count."}]}"#;
    let r = send(&gw, "/v1/chat/completions", body, &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-poolctl-served-by"), "good/gemini-x");
    let text = r.text().await.unwrap();
    let chunks = data_lines(&text);
    let (first, finishes, _, _) = choice_of(&chunks, 0);
    assert_eq!(first, "One.", "{text}");
    assert_eq!(finishes, ["stop"], "{text}");
    let (second, finishes, _, _) = choice_of(&chunks, 1);
    assert_eq!(second, "Two.", "{text}");
    assert_eq!(
        finishes,
        ["tool_calls"],
        "no content_filter from the failed route: {text}"
    );
}
