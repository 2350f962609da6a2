#!/usr/bin/env python3
"""OpenAI's Responses API through `poolctl serve`, with the official SDKs (issue 25).

A recording upstream (a loopback HTTP server in this process) speaks three wires and
keeps every request it receives: OpenAI chat completions (`/oai/v1/chat/completions`),
Anthropic messages (`/ant/v1/messages`) and OpenAI Responses (`/rsp/v1/responses`),
each streamed and not. Its answer depends on what it was sent: with tools and no tool
result yet, a `get_weather` function call; after a tool result, the weather as text;
when the user asks for JSON, a JSON object; otherwise a greeting naming its wire.
Under `/lim/` every wire answers 429.

`poolctl serve` runs in front of it; the official `openai` SDK with its DEFAULT
retries is the client, and every HTTP request it sends is counted (an httpx event
hook). Each check compares what the upstream received with what the SDK sent, field
by field, and what the SDK read with what the upstream answered:

- `client.responses.create`: plain text, a function tool (the call, then a second
  request with `function_call_output`), `text.format` json_schema, and an
  `input_image` data URL, against an OpenAI-chat route, an Anthropic route and a
  Responses-wire route (which gets the client's body with only `model` replaced);
- `client.responses.stream(...)` (text and a function call) on each route kind, and
  the raw `create(stream=True)` events;
- a two-turn conversation (`previous_response_id`) whose turns different providers
  serve (also after a streamed first turn): the second gets the whole first turn but
  not its instructions, a Responses-wire upstream never gets the id; retrieve,
  input_items, delete, `store: false`, and a deleted or unknown id that is a 404
  `previous_response_not_found` after exactly one request;
- every route rate limited, streamed and not: RateLimitError after exactly one request;
- the OpenAI Agents SDK (`openai-agents`, `Runner.run_sync`) running one agent with one
  tool, over the Responses-wire route and over the Anthropic route, each also with
  `auto_previous_response_id` (the id and only the tool's output sent to the gateway).

Plain Python, no pytest; prints one line per check, then `N passed, M failed`.

    POOLCTL_BIN=target/debug/poolctl target/sdk-venv/bin/python tests/sdk/test_responses.py
"""

import http.server
import json
import os
import sys
import tempfile
import threading
import traceback

# Before `agents` is imported: its tracing would post to OpenAI.
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

import openai  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_fidelity import PNG, sse  # noqa: E402 - one tiny PNG, Anthropic's SSE framing
from test_sdks import Tally, expect_raise, launch_serve, stop  # noqa: E402 - the one way the suites start serve and count

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POOLCTL = os.path.abspath(os.environ.get("POOLCTL_BIN", os.path.join(ROOT, "target", "debug", "poolctl")))
TIMEOUT_S = 10.0
UPSTREAM_KEY = "sk-responses-upstream-7c1e"
CLIENT_KEY = "client-key-never-forwarded"
IMAGE_URL = f"data:image/png;base64,{PNG}"
JSON_ASK = "Reply as JSON: the weather in Paris."
JSON_ANSWER = '{"city":"Paris","temp_c":21}'
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}},
    "required": ["city", "temp_c"],
    "additionalProperties": False,
}
TOOL = {
    "type": "function", "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False},
    "strict": True,
}

# What each wire answers, and what the SDK must read from it.
WIRES = {
    # kind: (tier, upstream path prefix, upstream model, greeting, usage in, usage out, call id)
    "chat": ("oa", "/oai/", "gpt-c-2025-01-01", "Bonjour from chat.", 21, 5, "call_chat_1"),
    "anthropic": ("an", "/ant/", "claude-c-20250101", "Bonjour from anthropic.", 13, 6, "toolu_ant_1"),
    "responses": ("rs", "/rsp/", "gpt-r-2025-01-01", "Bonjour from responses.", 17, 7, "call_rsp_1"),
}
ROUTE_MODEL = {"chat": "gpt-c", "anthropic": "claude-c", "responses": "gpt-r"}
UPSTREAM_RESPONSE_ID = "resp_upstream_0001"

tally = Tally()
check = tally.check


# --- reading what an upstream received ---------------------------------------------

def _text_of(content):
    """The text of a message's content on any wire: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    out = []
    for p in content or []:
        if not isinstance(p, dict):
            continue
        if isinstance(p.get("text"), str):
            out.append(p["text"])
        elif p.get("type") == "tool_result":
            out.append(_text_of(p.get("content")))
    return "".join(out)


def turns(path, body):
    """What an upstream received as (role, text) pairs, system first, in order."""
    if path.startswith("/rsp/") or path.startswith("/lim/rsp/"):
        got = [("system", body["instructions"])] if body.get("instructions") else []
        items = body.get("input")
        if isinstance(items, str):
            return got + [("user", items)]
        for item in items:
            kind = item.get("type", "message")
            if kind == "message":
                got.append((item.get("role"), _text_of(item.get("content"))))
            elif kind == "function_call":
                got.append(("call", f"{item['name']}({item['arguments']})"))
            elif kind == "function_call_output":
                got.append(("result", _text_of(item.get("output"))))
            else:
                got.append((kind, ""))
        return got
    if "/ant/" in path:
        got = []
        if body.get("system"):
            got.append(("system", _text_of(body["system"])))
        for m in body["messages"]:
            got.append((m["role"], _text_of(m["content"])))
        return got
    return [(m["role"], _text_of(m.get("content"))) for m in body["messages"]]


def has_tool_result(path, body):
    if "/rsp/" in path:
        items = body.get("input")
        return isinstance(items, list) and any(i.get("type") == "function_call_output" for i in items)
    if "/ant/" in path:
        return any(isinstance(m.get("content"), list) and any(b.get("type") == "tool_result" for b in m["content"])
                   for m in body["messages"])
    return any(m.get("role") == "tool" for m in body["messages"])


# --- what the upstream answers -----------------------------------------------------

def answer_kind(path, body):
    """`tool` (a get_weather call), `weather` (text after a tool result), `json`, or `hello`."""
    if has_tool_result(path, body):
        return "weather"
    if body.get("tools"):
        return "tool"
    if JSON_ASK in json.dumps(body):
        return "json"
    return "hello"


def answer_text(wire, kind):
    if kind == "weather":
        return f"{wire}: it is sunny in Paris."
    if kind == "json":
        return JSON_ANSWER
    return WIRES[wire][3]


def chat_answer(kind, stream, include_usage):
    _, _, model, _, pin, pout, call = WIRES["chat"]
    usage = {"prompt_tokens": pin, "completion_tokens": pout, "total_tokens": pin + pout}
    if not stream:
        if kind == "tool":
            msg = {"role": "assistant", "content": None, "tool_calls": [
                {"id": call, "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]}
            finish = "tool_calls"
        else:
            msg = {"role": "assistant", "content": answer_text("chat", kind), "refusal": None}
            finish = "stop"
        return "application/json", json.dumps({
            "id": "chatcmpl-r1", "object": "chat.completion", "created": 1700000000, "model": model,
            "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish}], "usage": usage})

    def chunk(delta, finish=None, with_usage=False, choices=True):
        c = {"id": "chatcmpl-r1", "object": "chat.completion.chunk", "created": 1700000000, "model": model,
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else []}
        if with_usage:
            c["usage"] = usage
        return "data: " + json.dumps(c) + "\n\n"

    if kind == "tool":
        out = chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": call, "type": "function",
                                                          "function": {"name": "get_weather", "arguments": ""}}]})
        out += chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]})
        out += chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]})
        out += chunk({}, finish="tool_calls")
    else:
        text = answer_text("chat", kind)
        half = len(text) // 2
        out = chunk({"role": "assistant", "content": text[:half]}) + chunk({"content": text[half:]})
        out += chunk({}, finish="stop")
    if include_usage:
        out += chunk(None, with_usage=True, choices=False)
    return "text/event-stream", out + "data: [DONE]\n\n"


def anthropic_answer(kind, stream):
    _, _, model, _, pin, pout, call = WIRES["anthropic"]
    if not stream:
        if kind == "tool":
            content = [{"type": "tool_use", "id": call, "name": "get_weather", "input": {"city": "Paris"}}]
            stop_reason = "tool_use"
        else:
            content = [{"type": "text", "text": answer_text("anthropic", kind)}]
            stop_reason = "end_turn"
        return "application/json", json.dumps({
            "id": "msg_ant_1", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": pin, "output_tokens": pout}})
    events = [{"type": "message_start", "message": {
        "id": "msg_ant_1", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": pin, "output_tokens": 1}}}]
    if kind == "tool":
        events += [
            {"type": "content_block_start", "index": 0,
             "content_block": {"type": "tool_use", "id": call, "name": "get_weather", "input": {}}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"city": "Par'}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": 'is"}'}},
            {"type": "content_block_stop", "index": 0},
        ]
        stop_reason = "tool_use"
    else:
        text = answer_text("anthropic", kind)
        half = len(text) // 2
        events += [
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[:half]}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[half:]}},
            {"type": "content_block_stop", "index": 0},
        ]
        stop_reason = "end_turn"
    events += [{"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": pout}},
               {"type": "message_stop"}]
    return "text/event-stream", sse(events)


def responses_item(kind):
    if kind == "tool":
        return {"id": "fc_up_1", "type": "function_call", "status": "completed", "call_id": WIRES["responses"][6],
                "name": "get_weather", "arguments": '{"city":"Paris"}'}
    return {"id": "msg_up_1", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": answer_text("responses", kind)}]}


def responses_object(body, status, output, usage):
    return {
        "id": UPSTREAM_RESPONSE_ID, "object": "response", "created_at": 1749761604, "status": status,
        "background": False, "error": None, "incomplete_details": None,
        "instructions": body.get("instructions"), "max_output_tokens": None, "max_tool_calls": None,
        "model": WIRES["responses"][2], "output": output, "parallel_tool_calls": True,
        "previous_response_id": None, "reasoning": {"effort": None, "summary": None},
        "service_tier": "default", "store": body.get("store", True), "temperature": 1.0,
        "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools", []), "top_logprobs": 0,
        "top_p": 1.0, "truncation": "disabled", "usage": usage, "user": None, "metadata": {},
        "x_upstream_extra": {"kept": True},
    }


def responses_answer(kind, stream, body):
    _, _, _, _, pin, pout, _ = WIRES["responses"]
    usage = {"input_tokens": pin, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": pout,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": pin + pout}
    item = responses_item(kind)
    if not stream:
        return "application/json", json.dumps(responses_object(body, "completed", [item], usage))
    events = []
    r0 = responses_object(body, "in_progress", [], None)
    events.append({"type": "response.created", "response": r0})
    events.append({"type": "response.in_progress", "response": r0})
    if kind == "tool":
        added = dict(item, status="in_progress", arguments="")
        events += [
            {"type": "response.output_item.added", "output_index": 0, "item": added},
            {"type": "response.function_call_arguments.delta", "item_id": "fc_up_1", "output_index": 0, "delta": '{"city":'},
            {"type": "response.function_call_arguments.delta", "item_id": "fc_up_1", "output_index": 0, "delta": '"Paris"}'},
            {"type": "response.function_call_arguments.done", "item_id": "fc_up_1", "output_index": 0,
             "arguments": item["arguments"]},
        ]
    else:
        text = item["content"][0]["text"]
        half = len(text) // 2
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
        where = {"item_id": "msg_up_1", "output_index": 0, "content_index": 0}
        events += [
            {"type": "response.output_item.added", "output_index": 0, "item": dict(item, status="in_progress", content=[])},
            dict(where, type="response.content_part.added", part=part),
            dict(where, type="response.output_text.delta", delta=text[:half], logprobs=[]),
            dict(where, type="response.output_text.delta", delta=text[half:], logprobs=[]),
            dict(where, type="response.output_text.done", text=text, logprobs=[]),
            dict(where, type="response.content_part.done", part=dict(part, text=text)),
        ]
    events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    events.append({"type": "response.completed", "response": responses_object(body, "completed", [item], usage)})
    out = ""
    for n, e in enumerate(events):
        e["sequence_number"] = n
        out += f"event: {e['type']}\ndata: {json.dumps(e)}\n\n"
    return "text/event-stream", out


def rate_limited(path):
    if path.startswith("/lim/ant/"):
        return {"type": "error", "error": {"type": "rate_limit_error", "message": "Number of requests has exceeded your rate limit."}}
    return {"error": {"message": "Rate limit reached for requests per min (RPM).", "type": "requests",
                      "param": None, "code": "rate_limit_exceeded"}}


class Upstream:
    """Records every request; answers by path, `stream` and what it was sent."""

    def __init__(self):
        self.requests = []
        self.lock = threading.Lock()
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, status, kind, text, headers=()):
                data = text.encode()
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                n = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(n))
                path = self.path
                with upstream.lock:
                    upstream.requests.append((path, {k.lower(): v for k, v in self.headers.items()}, body))
                if path.startswith("/lim/"):
                    return self.reply(429, "application/json", json.dumps(rate_limited(path)), [("retry-after", "3600")])
                stream = bool(body.get("stream"))
                kind = answer_kind(path, body)
                if path == "/oai/v1/chat/completions":
                    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                    ctype, text = chat_answer(kind, stream, include_usage)
                elif path == "/ant/v1/messages":
                    ctype, text = anthropic_answer(kind, stream)
                elif path == "/rsp/v1/responses":
                    ctype, text = responses_answer(kind, stream, body)
                else:
                    return self.reply(404, "application/json", json.dumps({"error": {"message": f"no such path {path}"}}))
                self.reply(200, ctype, text)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def since(self, mark):
        with self.lock:
            return self.requests[mark:]

    def mark(self):
        with self.lock:
            return len(self.requests)


def only(up, mark, prefix):
    got = up.since(mark)
    mine = [r for r in got if r[0].startswith(prefix)]
    assert len(mine) == 1 and len(got) == 1, f"expected one request, to {prefix}; got {[r[0] for r in got]}"
    return mine[0]


# --- the gateway -------------------------------------------------------------------

def start_gateway(port, workdir):
    config = os.path.join(workdir, "pool.yaml")
    u = f"http://127.0.0.1:{port}"
    key = "api_key_env: POOLCTL_RESPONSES_KEY"
    with open(config, "w") as f:
        f.write(
            "providers:\n"
            f"  oai: {{ wire: openai, base_url: '{u}/oai/v1', {key} }}\n"
            f"  ant: {{ wire: anthropic, base_url: '{u}/ant', {key} }}\n"
            f"  rsp: {{ wire: openai_responses, base_url: '{u}/rsp/v1', {key} }}\n"
            f"  limoai: {{ wire: openai, base_url: '{u}/lim/oai/v1', {key} }}\n"
            f"  limant: {{ wire: anthropic, base_url: '{u}/lim/ant', {key} }}\n"
            f"  limrsp: {{ wire: openai_responses, base_url: '{u}/lim/rsp/v1', {key} }}\n"
            "tiers:\n"
            "  oa: [oai/gpt-c]\n"
            "  an: [ant/claude-c]\n"
            "  rs: [rsp/gpt-r]\n"
            "  limited: [limoai/gpt-c, limant/claude-c, limrsp/gpt-r]\n"
            # Its own routes: the 429s' retry-after cools `limited`'s for an hour.
            "  limited-stream: [limoai/gpt-c2, limant/claude-c2, limrsp/gpt-r2]\n"
        )
    return launch_serve(config, workdir, {"POOLCTL_RESPONSES_KEY": UPSTREAM_KEY})


class Counted:
    """The SDK's HTTP requests, as it sent them (an httpx event hook)."""

    def __init__(self):
        self.sent = []

    def hook(self, request):
        try:
            body = json.loads(request.content) if request.content else None
        except ValueError:
            body = None
        self.sent.append((request.method, str(request.url), body))

    def mark(self):
        return len(self.sent)

    def since(self, mark):
        return self.sent[mark:]


def checks(up, base):
    counted = Counted()
    oa = openai.OpenAI(base_url=base + "/v1", api_key=CLIENT_KEY, timeout=TIMEOUT_S,
                       http_client=openai.DefaultHttpxClient(event_hooks={"request": [counted.hook]}))

    def client_body(mark):
        posts = [b for m, u, b in counted.since(mark) if m == "POST"]
        assert len(posts) == 1, f"the SDK sent {len(posts)} requests"
        return posts[0]

    def common(r, wire):
        assert r.id.startswith("resp_"), r.id
        assert r.id != UPSTREAM_RESPONSE_ID, "the client sees the upstream's id, not the gateway's"
        assert r.object == "response", r.object
        assert r.status == "completed", r.status
        _, _, _, _, pin, pout, _ = WIRES[wire]
        assert r.usage is not None, "no usage"
        assert (r.usage.input_tokens, r.usage.output_tokens) == (pin, pout), r.usage
        assert r.usage.total_tokens == pin + pout, r.usage

    # --- 1. responses.create on each route kind --------------------------------------

    def plain(wire):
        def run():
            tier, prefix, model, greeting, *_ = WIRES[wire]
            mark, cmark = up.mark(), counted.mark()
            r = oa.responses.create(model=tier, instructions="Be brief.", input="Say hello.",
                                    max_output_tokens=64, temperature=0.5)
            sent = client_body(cmark)
            path, headers, body = only(up, mark, prefix)
            assert r.output_text == greeting, r.output_text
            common(r, wire)
            assert r.model == model, r.model
            assert headers.get("authorization", headers.get("x-api-key", "")).endswith(UPSTREAM_KEY), headers
            if wire == "responses":
                assert body == dict(sent, model=ROUTE_MODEL[wire]), f"the upstream got {json.dumps(body)[:400]}"
                extra = r.model_extra or {}
                assert extra.get("x_upstream_extra") == {"kept": True}, extra
                return "the client's body with only model replaced; the answer's fields kept"
            assert turns(path, body) == [("system", "Be brief."), ("user", "Say hello.")], turns(path, body)
            assert body["temperature"] == 0.5, body
            if wire == "chat":
                assert body.get("max_completion_tokens", body.get("max_tokens")) == 64, body
                assert body.get("stream") in (None, False), body
            else:
                assert body["max_tokens"] == 64 and body["system"] in ("Be brief.", [{"type": "text", "text": "Be brief."}]), body
            return f"instructions as system, max tokens 64, output_text={r.output_text!r}"
        return run

    def function_tool(wire):
        def run():
            tier, prefix, model, _, _, _, call_id = WIRES[wire]
            mark, cmark = up.mark(), counted.mark()
            question = {"role": "user", "content": "What is the weather in Paris?"}
            r = oa.responses.create(model=tier, input=[question], tools=[TOOL])
            sent = client_body(cmark)
            path, _, body = only(up, mark, prefix)
            common(r, wire)
            calls = [o for o in r.output if o.type == "function_call"]
            assert len(calls) == 1 and len(r.output) == 1, r.output
            call = calls[0]
            assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}, call
            assert call.call_id == call_id, call.call_id
            if wire == "responses":
                assert body == dict(sent, model=ROUTE_MODEL[wire]), f"the upstream got {json.dumps(body)[:400]}"
            elif wire == "chat":
                assert body["tools"] == [{"type": "function", "function": {
                    "name": "get_weather", "description": TOOL["description"], "parameters": TOOL["parameters"],
                    "strict": True}}], body["tools"]
            else:
                t = body["tools"]
                assert len(t) == 1 and t[0]["name"] == "get_weather" and t[0]["input_schema"]["properties"] == {
                    "city": {"type": "string"}}, t
                assert t[0].get("description") == TOOL["description"], t

            # The second request: the call, and its output.
            mark, cmark = up.mark(), counted.mark()
            r2 = oa.responses.create(model=tier, tools=[TOOL], input=[
                question, *r.output,
                {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}])
            sent = client_body(cmark)
            path, _, body = only(up, mark, prefix)
            common(r2, wire)
            assert r2.output_text == f"{wire}: it is sunny in Paris.", r2.output_text
            if wire == "responses":
                assert body == dict(sent, model=ROUTE_MODEL[wire]), f"the upstream got {json.dumps(body)[:400]}"
                out = [i for i in body["input"] if i.get("type") == "function_call_output"]
                assert out == [{"type": "function_call_output", "call_id": call_id, "output": "Sunny, 21 C"}], out
            elif wire == "chat":
                msgs = body["messages"]
                assert msgs[0] == {"role": "user", "content": "What is the weather in Paris?"}, msgs
                assert msgs[1]["role"] == "assistant" and msgs[1]["tool_calls"][0]["id"] == call_id, msgs[1]
                assert msgs[1]["tool_calls"][0]["function"]["name"] == "get_weather", msgs[1]
                assert json.loads(msgs[1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}, msgs[1]
                assert msgs[2]["role"] == "tool" and msgs[2]["tool_call_id"] == call_id, msgs[2]
                assert _text_of(msgs[2]["content"]) == "Sunny, 21 C", msgs[2]
                assert len(msgs) == 3, msgs
            else:
                msgs = body["messages"]
                assert len(msgs) == 3, msgs
                assert msgs[0]["role"] == "user" and _text_of(msgs[0]["content"]) == "What is the weather in Paris?", msgs
                use = [b for b in msgs[1]["content"] if b["type"] == "tool_use"]
                assert msgs[1]["role"] == "assistant" and len(use) == 1, msgs[1]
                assert use[0]["id"] == call_id and use[0]["name"] == "get_weather" and use[0]["input"] == {"city": "Paris"}, use
                res = [b for b in msgs[2]["content"] if b["type"] == "tool_result"]
                assert msgs[2]["role"] == "user" and len(res) == 1 and res[0]["tool_use_id"] == call_id, msgs[2]
                assert _text_of(res[0]["content"]) == "Sunny, 21 C", res
            return f"call {call.call_id} get_weather({call.arguments}); then {r2.output_text!r}"
        return run

    def json_schema(wire):
        def run():
            tier, prefix, *_ = WIRES[wire]
            fmt = {"type": "json_schema", "name": "weather", "schema": WEATHER_SCHEMA, "strict": True}
            mark, cmark = up.mark(), counted.mark()
            r = oa.responses.create(model=tier, input=JSON_ASK, text={"format": fmt})
            sent = client_body(cmark)
            path, _, body = only(up, mark, prefix)
            common(r, wire)
            assert json.loads(r.output_text) == {"city": "Paris", "temp_c": 21}, r.output_text
            if wire == "responses":
                assert body == dict(sent, model=ROUTE_MODEL[wire]), f"the upstream got {json.dumps(body)[:400]}"
                return "text.format forwarded as sent"
            if wire == "chat":
                assert body["response_format"] == {"type": "json_schema", "json_schema": {
                    "name": "weather", "schema": WEATHER_SCHEMA, "strict": True}}, \
                    f"want the schema's name `weather` and strict: true kept; the upstream got {body.get('response_format')}"
                return "response_format json_schema (name, strict kept)"
            assert turns(path, body) == [("user", JSON_ASK)], turns(path, body)
            return "no native field: the answer validated against the schema"
        return run

    def image(wire):
        def run():
            tier, prefix, _, greeting, *_ = WIRES[wire]
            mark, cmark = up.mark(), counted.mark()
            r = oa.responses.create(model=tier, input=[{"role": "user", "content": [
                {"type": "input_text", "text": "What is in this image?"},
                {"type": "input_image", "image_url": IMAGE_URL, "detail": "auto"}]}])
            sent = client_body(cmark)
            path, _, body = only(up, mark, prefix)
            common(r, wire)
            assert r.output_text == greeting, r.output_text
            if wire == "responses":
                assert body == dict(sent, model=ROUTE_MODEL[wire]), f"the upstream got {json.dumps(body)[:400]}"
                return "input_image forwarded as sent"
            msgs = body["messages"]
            assert len(msgs) == 1 and msgs[0]["role"] == "user", msgs
            parts = msgs[0]["content"]
            if wire == "chat":
                assert parts[0] == {"type": "text", "text": "What is in this image?"}, parts
                assert parts[1]["type"] == "image_url" and parts[1]["image_url"]["url"] == IMAGE_URL, parts
                assert parts[1]["image_url"].get("detail", "auto") == "auto", parts
                assert len(parts) == 2, parts
                return "image_url with the data URL"
            assert parts == [{"type": "text", "text": "What is in this image?"},
                             {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}], parts
            return "a base64 image block"
        return run

    # --- 2. streams --------------------------------------------------------------------

    def stream_text(wire):
        def run():
            tier, prefix, model, greeting, *_ = WIRES[wire]
            mark, cmark = up.mark(), counted.mark()
            deltas = []
            with oa.responses.stream(model=tier, input="Say hello.") as s:
                for ev in s:
                    if ev.type == "response.output_text.delta":
                        deltas.append(ev.delta)
                final = s.get_final_response()
            sent = client_body(cmark)
            path, _, body = only(up, mark, prefix)
            assert body.get("stream") is True, body
            if wire == "responses":
                assert body == dict(sent, model=ROUTE_MODEL[wire]), f"the upstream got {json.dumps(body)[:400]}"
            assert "".join(deltas) == greeting and len(deltas) >= 1, deltas
            assert final.output_text == greeting, final.output_text
            common(final, wire)
            return f"{len(deltas)} deltas, final {final.output_text!r}, usage {final.usage.input_tokens}+{final.usage.output_tokens}"
        return run

    def stream_tool(wire):
        def run():
            tier, prefix, _, _, _, _, call_id = WIRES[wire]
            mark, cmark = up.mark(), counted.mark()
            arg_deltas, done_args = [], None
            with oa.responses.stream(model=tier, input="What is the weather in Paris?", tools=[TOOL]) as s:
                for ev in s:
                    if ev.type == "response.function_call_arguments.delta":
                        arg_deltas.append(ev.delta)
                    elif ev.type == "response.function_call_arguments.done":
                        done_args = ev.arguments
                final = s.get_final_response()
            sent = client_body(cmark)
            _, _, body = only(up, mark, prefix)
            if wire == "responses":
                assert body == dict(sent, model=ROUTE_MODEL[wire]), f"the upstream got {json.dumps(body)[:400]}"
            common(final, wire)
            calls = [o for o in final.output if o.type == "function_call"]
            assert len(calls) == 1, final.output
            assert calls[0].name == "get_weather" and calls[0].call_id == call_id, calls[0]
            assert json.loads(calls[0].arguments) == {"city": "Paris"}, calls[0].arguments
            assert json.loads("".join(arg_deltas)) == {"city": "Paris"}, arg_deltas
            assert done_args is not None and json.loads(done_args) == {"city": "Paris"}, done_args
            parsed = getattr(calls[0], "parsed_arguments", None)
            assert parsed in (None, {"city": "Paris"}), parsed
            return f"call {call_id} get_weather({calls[0].arguments}) from {len(arg_deltas)} deltas"
        return run

    def raw_stream(wire):
        def run():
            tier, _, _, greeting, *_ = WIRES[wire]
            events = list(oa.responses.create(model=tier, input="Say hello.", stream=True))
            types = [e.type for e in events]
            assert types[0] == "response.created" and types[-1] == "response.completed", types
            seqs = [e.sequence_number for e in events]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
            ids = {e.response.id for e in events if e.type in ("response.created", "response.in_progress", "response.completed")}
            assert len(ids) == 1 and next(iter(ids)).startswith("resp_") and UPSTREAM_RESPONSE_ID not in ids, ids
            for need in ("response.output_item.added", "response.content_part.added", "response.output_text.delta",
                         "response.output_text.done", "response.output_item.done"):
                assert need in types, (need, types)
            assert types.index("response.output_item.added") < types.index("response.content_part.added") \
                < types.index("response.output_text.delta"), types
            text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            assert text == greeting, text
            done = events[-1].response
            assert done.status == "completed" and done.output_text == greeting, done
            return f"{len(events)} events, sequence {seqs[0]}..{seqs[-1]}"
        return run

    # --- 3. conversations across providers -------------------------------------------

    convo = {}

    def two_turns(first, second):
        def run():
            t1, p1, _, greeting1, *_ = WIRES[first]
            t2, p2, _, greeting2, *_ = WIRES[second]
            who = f"My name is Ada ({first} then {second})."
            mark = up.mark()
            # Instructions are not carried over (OpenAI's rule): the second turn has none.
            r1 = oa.responses.create(model=t1, input=who, instructions="Turn one only.")
            path, _, body = only(up, mark, p1)
            assert turns(path, body) == [("system", "Turn one only."), ("user", who)], turns(path, body)
            assert r1.output_text == greeting1, r1.output_text
            mark, cmark = up.mark(), counted.mark()
            r2 = oa.responses.create(model=t2, previous_response_id=r1.id, input="What is my name?")
            sent = client_body(cmark)
            assert sent.get("previous_response_id") == r1.id, sent
            path, _, body = only(up, mark, p2)
            got = turns(path, body)
            want = [("user", who), ("assistant", greeting1), ("user", "What is my name?")]
            assert got == want, f"the second provider got {got}"
            if second == "responses":
                assert "previous_response_id" not in body, "the Responses upstream was sent previous_response_id"
                assert {k: v for k, v in body.items() if k != "input"} == {"model": ROUTE_MODEL[second]}, body
            assert r2.output_text == greeting2, r2.output_text
            assert r2.id.startswith("resp_") and r2.id != r1.id, (r1.id, r2.id)
            assert r2.previous_response_id == r1.id, r2.previous_response_id
            convo[(first, second)] = (r1, r2, who)
            return f"{first} {r1.id[:14]}... then {second}: {len(got)} turns arrived"
        return run

    def after_a_streamed_turn():
        # A streamed answer is kept too: its conversation continues on another provider.
        who = "My name is Bo (a streamed turn)."
        mark = up.mark()
        with oa.responses.stream(model="an", input=who) as s:
            first = s.get_final_response()
        only(up, mark, "/ant/")
        assert first.output_text == WIRES["anthropic"][3], first.output_text
        mark = up.mark()
        r2 = oa.responses.create(model="rs", previous_response_id=first.id, input="What is my name?")
        path, _, body = only(up, mark, "/rsp/")
        got = turns(path, body)
        want = [("user", who), ("assistant", WIRES["anthropic"][3]), ("user", "What is my name?")]
        assert got == want, f"the second provider got {got}"
        assert "previous_response_id" not in body, body
        assert r2.output_text == WIRES["responses"][3] and r2.previous_response_id == first.id, r2
        return f"streamed {first.id[:14]}... kept, continued on the responses route"

    def retrieve():
        r1, r2, _ = convo[("responses", "anthropic")]
        got = oa.responses.retrieve(r2.id)
        assert got.id == r2.id and got.status == "completed", got
        assert got.output_text == r2.output_text, got.output_text
        assert got.previous_response_id == r1.id, got.previous_response_id
        assert got.usage is not None and got.usage.input_tokens == r2.usage.input_tokens, got.usage
        first = oa.responses.retrieve(r1.id)
        assert first.id == r1.id and first.output_text == r1.output_text, first
        return f"{r2.id[:14]}... and {r1.id[:14]}... as created"

    def item_text(i):
        content = getattr(i, "content", None)
        if isinstance(content, str):
            return content
        return _text_of([c if isinstance(c, dict) else c.model_dump() for c in content or []])

    def input_items():
        r1, r2, who = convo[("responses", "anthropic")]
        asc = list(oa.responses.input_items.list(r2.id, order="asc"))
        flat = [(getattr(i, "role", None), item_text(i)) for i in asc]
        assert flat == [("user", who), ("assistant", r1.output_text), ("user", "What is my name?")], flat
        assert all(i.id for i in asc), [i.id for i in asc]
        desc = list(oa.responses.input_items.list(r2.id))
        assert [i.id for i in desc] == [i.id for i in reversed(asc)], "the default order is newest first"
        paged = list(oa.responses.input_items.list(r2.id, order="asc", limit=1))
        assert [i.id for i in paged] == [i.id for i in asc], "paging one at a time gives the same items"
        return f"{len(asc)} items: the first turn, its answer, the new input"

    def input_items_typed():
        # OpenAI lists each input message as a ResponseItem: `type`, `id`, `status`, and
        # `content` a list of parts, even when the input was a string; a typed client
        # (openai-node, openai-go) reads no other shape.
        _, r2, _ = convo[("responses", "anthropic")]
        raw = oa.responses.input_items.with_raw_response.list(r2.id, order="asc")
        data = json.loads(raw.text)["data"]
        users = [i for i in data if i.get("role") == "user"]
        assert len(users) == 2, data
        for i in users:
            assert i.get("type") == "message" and i.get("id"), i
            assert isinstance(i.get("content"), list) and all(
                p.get("type") == "input_text" for p in i["content"]), f"content not a list of input_text parts: {i}"
        return "input messages with input_text parts"

    def delete_then_continue():
        r1, r2, _ = convo[("chat", "responses")]
        assert oa.responses.delete(r2.id) is None
        expect_raise(openai.NotFoundError, lambda: oa.responses.retrieve(r2.id))
        mark, cmark = up.mark(), counted.mark()
        e = expect_raise(openai.NotFoundError,
                         lambda: oa.responses.create(model="rs", previous_response_id=r2.id, input="And now?"))
        sent = counted.since(cmark)
        assert len(sent) == 1, f"the SDK sent {len(sent)} requests, not exactly one"
        assert e.code == "previous_response_not_found", e.body
        assert e.response.headers.get("x-should-retry") == "false", dict(e.response.headers)
        assert up.since(mark) == [], "a request went upstream"
        # The first turn is still there: only the deleted one is gone.
        assert oa.responses.retrieve(r1.id).id == r1.id
        return f"404 {e.code} after exactly one request; nothing upstream"

    def unknown_id():
        mark, cmark = up.mark(), counted.mark()
        e = expect_raise(openai.NotFoundError,
                         lambda: oa.responses.create(model="an", previous_response_id="resp_never_was", input="hi"))
        sent = counted.since(cmark)
        assert len(sent) == 1, f"the SDK sent {len(sent)} requests, not exactly one"
        assert e.code == "previous_response_not_found", e.body
        assert e.param == "previous_response_id" or (e.body or {}).get("param") == "previous_response_id", e.body
        assert "resp_never_was" in e.message, e.message
        assert e.response.headers.get("x-should-retry") == "false", dict(e.response.headers)
        assert up.since(mark) == [], "a request went upstream"
        return f"{e.status_code} {e.code}, {len(sent)} request"

    def store_false():
        r = oa.responses.create(model="oa", input="Not to be kept.", store=False)
        assert r.output_text == WIRES["chat"][3] and r.store is False, (r.output_text, r.store)
        cmark = counted.mark()
        e = expect_raise(openai.NotFoundError,
                         lambda: oa.responses.create(model="oa", previous_response_id=r.id, input="And?"))
        assert len(counted.since(cmark)) == 1 and e.code == "previous_response_not_found", e.body
        expect_raise(openai.NotFoundError, lambda: oa.responses.retrieve(r.id))
        return "answered with store: false, and nothing kept"

    def never_the_id_upstream():
        leaked = [p for p, _, b in up.requests if "/rsp/" in p and "previous_response_id" in b]
        assert not leaked, f"{len(leaked)} Responses-wire requests carried previous_response_id"
        n = sum(1 for p, _, _ in up.requests if p.startswith("/rsp/"))
        return f"{n} Responses-wire requests, none with previous_response_id"

    # --- 4. every route rate limited -----------------------------------------------------

    def all_limited(stream):
        def run():
            mark, cmark = up.mark(), counted.mark()
            if stream:
                def call():
                    with oa.responses.stream(model="limited-stream", input="hi") as s:
                        return s.get_final_response()
            else:
                def call():
                    return oa.responses.create(model="limited", input="hi")
            e = expect_raise(openai.RateLimitError, call)
            sent = counted.since(cmark)
            assert len(sent) == 1, f"the SDK sent {len(sent)} requests, not exactly one"
            assert e.status_code == 429, e.status_code
            assert e.response.headers.get("x-should-retry") == "false", dict(e.response.headers)
            tried = sorted(p.split("/")[2] for p, _, _ in up.since(mark))
            assert tried == ["ant", "oai", "rsp"], tried
            return f"RateLimitError after exactly 1 request; the 3 routes each tried once, retry-after={e.response.headers.get('retry-after')}"
        return run

    # --- 5. the OpenAI Agents SDK --------------------------------------------------------

    def agents_run(wire, chained=False):
        """One agent, one tool, `Runner.run_sync`. `chained`: auto_previous_response_id,
        so the second request carries the id and only the tool's output, and the gateway
        re-sends the whole conversation."""
        def run():
            from agents import (Agent, Runner, function_tool, set_default_openai_client,
                                set_tracing_disabled)
            from importlib.metadata import version

            tier, prefix, _, _, _, _, call_id = WIRES[wire]
            ran, sent = [], []

            @function_tool
            def get_weather(city: str) -> str:
                """Current weather in a city."""
                ran.append(city)
                return f"Sunny in {city}, 21 C"

            async def hook(request):
                sent.append(json.loads(request.content) if request.content else None)

            set_tracing_disabled(True)
            client = openai.AsyncOpenAI(
                base_url=base + "/v1", api_key=CLIENT_KEY, timeout=TIMEOUT_S,
                http_client=openai.DefaultAsyncHttpxClient(event_hooks={"request": [hook]}))
            set_default_openai_client(client, use_for_tracing=False)
            agent = Agent(name="Weather", instructions="Be brief.", tools=[get_weather], model=tier)
            mark = up.mark()
            extra = {"auto_previous_response_id": True} if chained else {}
            result = Runner.run_sync(agent, "What is the weather in Paris?", max_turns=4, **extra)
            got = up.since(mark)
            assert [p for p, _, _ in got] == [got[0][0]] * 2 and got[0][0].startswith(prefix), [p for p, _, _ in got]
            assert len(sent) == 2, f"the Agents SDK sent {len(sent)} requests"
            assert ran == ["Paris"], ran
            if chained:
                assert sent[1].get("previous_response_id"), "the Agents SDK did not chain"
                assert [i.get("type") for i in sent[1]["input"]] == ["function_call_output"], sent[1]["input"]
            (_, _, first), (path, _, second) = got
            assert first["tools"] and not has_tool_result(path, first), first
            assert turns(path, first) == [("system", "Be brief."), ("user", "What is the weather in Paris?")], \
                turns(path, first)
            want = [("system", "Be brief."), ("user", "What is the weather in Paris?")]
            if wire == "responses":
                assert "previous_response_id" not in second, "the Responses upstream was sent previous_response_id"
                items = second["input"]
                outs = [i for i in items if i.get("type") == "function_call_output"]
                assert len(outs) == 1 and outs[0]["call_id"] == call_id, items
                assert _text_of(outs[0]["output"]) == "Sunny in Paris, 21 C", outs
                fcs = [i for i in items if i.get("type") == "function_call"]
                assert len(fcs) == 1 and fcs[0]["call_id"] == call_id and fcs[0]["name"] == "get_weather", fcs
                want += [("call", f"get_weather({fcs[0]['arguments']})"), ("result", "Sunny in Paris, 21 C")]
                assert turns(path, second) == want, turns(path, second)
            else:
                msgs = second["messages"]
                assert len(msgs) == 3 and [m["role"] for m in msgs] == ["user", "assistant", "user"], msgs
                assert _text_of(msgs[0]["content"]) == "What is the weather in Paris?", msgs[0]
                use = [b for b in msgs[1]["content"] if b.get("type") == "tool_use"]
                assert len(use) == 1 and use[0]["id"] == call_id and use[0]["input"] == {"city": "Paris"}, msgs[1]
                res = [b for b in msgs[2]["content"] if b.get("type") == "tool_result"]
                assert len(res) == 1 and res[0]["tool_use_id"] == call_id, msgs[2]
                assert _text_of(res[0]["content"]) == "Sunny in Paris, 21 C", res
            assert result.final_output == f"{wire}: it is sunny in Paris.", result.final_output
            how = "chained by id, " if chained else ""
            return f"openai-agents {version('openai-agents')}: {how}tool ran on Paris, final {result.final_output!r}"
        return run

    cases = []
    for wire in ("chat", "anthropic", "responses"):
        cases += [
            (f"create over a {wire} route: plain text", plain(wire)),
            (f"create over a {wire} route: function call, then function_call_output", function_tool(wire)),
            (f"create over a {wire} route: text.format json_schema", json_schema(wire)),
            (f"create over a {wire} route: input_image data URL", image(wire)),
        ]
    for wire in ("chat", "anthropic", "responses"):
        cases += [
            (f"responses.stream helper over a {wire} route: text", stream_text(wire)),
            (f"responses.stream helper over a {wire} route: function call", stream_tool(wire)),
            (f"create(stream=True) over a {wire} route: the raw events", raw_stream(wire)),
        ]
    cases += [
        ("previous_response_id: responses route, then anthropic route gets the whole first turn",
         two_turns("responses", "anthropic")),
        ("previous_response_id: chat route, then responses route gets the whole first turn, no id",
         two_turns("chat", "responses")),
        ("previous_response_id after a streamed turn (anthropic), continued on the responses route",
         after_a_streamed_turn),
        ("responses.retrieve: the stored responses", retrieve),
        ("responses.input_items.list: the whole conversation's input, both orders, paged", input_items),
        ("responses.input_items.list: input messages in OpenAI's item shape (content parts)", input_items_typed),
        ("responses.delete, then continuing it: NotFoundError previous_response_not_found after ONE request",
         delete_then_continue),
        ("an unknown previous_response_id: NotFoundError after ONE request", unknown_id),
        ("store: false: answered, not kept (continuing it is a 404)", store_false),
        ("every route rate limited: RateLimitError after ONE request", all_limited(False)),
        ("every route rate limited, streamed: RateLimitError after ONE request", all_limited(True)),
        ("openai-agents: one agent, one tool, over the responses route", agents_run("responses")),
        ("openai-agents: one agent, one tool, over the anthropic route", agents_run("anthropic")),
        ("openai-agents, auto_previous_response_id: the anthropic route gets the whole conversation",
         agents_run("anthropic", chained=True)),
        ("openai-agents, auto_previous_response_id: the responses route gets the whole input, no id",
         agents_run("responses", chained=True)),
        ("the Responses-wire upstream never received previous_response_id", never_the_id_upstream),
    ]
    for name, fn in cases:
        check(name, fn)


def main():
    print(f"openai {openai.__version__}, poolctl {POOLCTL}")
    if not os.access(POOLCTL, os.X_OK):
        sys.exit(f"poolctl binary not found at {POOLCTL} (build it, or set POOLCTL_BIN)")
    up = Upstream()
    workdir = tempfile.mkdtemp(prefix="poolctl-responses-")
    proc, errf, base = start_gateway(up.port, workdir)
    try:
        checks(up, base)
    finally:
        code = stop(proc)
        up.server.shutdown()
    errf.seek(0)
    log = errf.read()

    def clean_stop_no_leaks():
        assert code == 0, f"exit status {code}"
        assert UPSTREAM_KEY not in log and CLIENT_KEY not in log, "a key reached the log"
        for _, headers, _ in up.requests:
            assert CLIENT_KEY not in json.dumps(headers), "a client key reached the upstream"
        return f"SIGTERM, exit 0; {len(up.requests)} upstream requests, no client key"

    check("poolctl serve: stops cleanly; no key in the log, no client key upstream", clean_stop_no_leaks)
    if tally.failed:
        print("--- poolctl serve stderr (last 30 lines) ---")
        print("\n".join(log.splitlines()[-30:]))
        print("---")
    return tally.report()


if __name__ == "__main__":
    sys.exit(main())
