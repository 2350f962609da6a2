#!/usr/bin/env python3
"""Fidelity through `poolctl serve` with the official SDKs (spec/fidelity.md).

A recording upstream (a loopback HTTP server in this process) speaks the OpenAI and
Anthropic wires and keeps every request it receives. `poolctl serve` runs in front of
it; the official `openai` and `anthropic` SDKs are the clients. Each check compares
what the upstream received with what the SDK sent, field by field, and what the SDK
read with what the upstream answered:

- same wire: the client's body arrives whole (every field, known or not) with only
  `model` replaced; the answer comes back whole (system_fingerprint, logprobs, every
  choice, usage details, thinking blocks, stop_sequence);
- cross wire: text parts, inline images, reasoning and usage are translated whole;
  `client.chat.completions.stream(...)` works over an Anthropic route whose answer
  has a text block before a tool call; what a route cannot carry skips it, or is a
  400 `unsupported_by_chain`, or is dropped and named in `x-poolctl-dropped-params`.

Plain Python, no pytest; prints one line per check, then `N passed, M failed`.

    POOLCTL_BIN=target/debug/poolctl python tests/sdk/test_fidelity.py
"""

import http.server
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import traceback

import anthropic
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_sdks import Tally, launch_serve  # noqa: E402 - the one way the suites start serve and count

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POOLCTL = os.path.abspath(os.environ.get("POOLCTL_BIN", os.path.join(ROOT, "target", "debug", "poolctl")))
TIMEOUT_S = 10.0
UPSTREAM_KEY = "sk-fidelity-upstream-3f9a"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="

tally = Tally()
check = tally.check


# --- the recording upstream --------------------------------------------------------

OPENAI_ANSWER = {
    "id": "chatcmpl-abc", "object": "chat.completion", "created": 1700000000,
    "model": "gpt-x-2025-01-01", "system_fingerprint": "fp_44709d6fcb", "service_tier": "default",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "{\"a\":1}", "refusal": None},
         "logprobs": {"content": [{"token": "{", "logprob": -0.01, "bytes": [123], "top_logprobs": []}], "refusal": None},
         "finish_reason": "stop"},
        {"index": 1, "message": {"role": "assistant", "content": "{\"a\":2}", "refusal": None},
         "logprobs": None, "finish_reason": "stop"},
    ],
    "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30,
              "prompt_tokens_details": {"cached_tokens": 8},
              "completion_tokens_details": {"reasoning_tokens": 4}},
}

ANTHROPIC_ANSWER = {
    "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-x-20250101",
    "content": [
        {"type": "thinking", "thinking": "The user wants a word.", "signature": "EqQBCgIYAhIM"},
        {"type": "text", "text": "Bonjour"},
    ],
    "stop_reason": "stop_sequence", "stop_sequence": "END",
    "usage": {"input_tokens": 5, "cache_creation_input_tokens": 2, "cache_read_input_tokens": 3,
              "output_tokens": 7},
}


def sse(events):
    """Anthropic-style SSE: `event:` and `data:` per event."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


ANTHROPIC_TOOL_STREAM = sse([
    {"type": "message_start", "message": {"id": "msg_2", "type": "message", "role": "assistant",
                                          "model": "claude-x-20250101", "content": [], "stop_reason": None,
                                          "stop_sequence": None,
                                          "usage": {"input_tokens": 12, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me check."}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1,
     "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}},
    {"type": "content_block_delta", "index": 1,
     "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Par"}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "is\"}"}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
     "usage": {"output_tokens": 9}},
    {"type": "message_stop"},
])


def openai_chunk(delta, finish=None, usage=None, choices=True):
    c = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1700000000,
         "model": "gpt-x-2025-01-01", "choices": []}
    if choices:
        c["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    if usage:
        c["usage"] = usage
    return "data: " + json.dumps(c) + "\n\n"


OPENAI_STREAM = (
    openai_chunk({"role": "assistant", "content": "Bon"})
    + openai_chunk({"content": "jour"}, finish="stop")
    + openai_chunk(None, usage={"prompt_tokens": 20, "completion_tokens": 2,
                                "prompt_tokens_details": {"cached_tokens": 8}}, choices=False)
    + "data: [DONE]\n\n"
)


class Upstream:
    """Records every request; answers by path and `stream`."""

    def __init__(self):
        self.requests = []
        self.lock = threading.Lock()
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                n = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(n)
                body = json.loads(raw)
                with upstream.lock:
                    upstream.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                stream = bool(body.get("stream"))
                if self.path.startswith("/oai/"):
                    text, kind = (OPENAI_STREAM, "text/event-stream") if stream else (json.dumps(OPENAI_ANSWER), "application/json")
                else:
                    text, kind = (ANTHROPIC_TOOL_STREAM, "text/event-stream") if stream else (json.dumps(ANTHROPIC_ANSWER), "application/json")
                data = text.encode()
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def since(self, mark):
        with self.lock:
            return self.requests[mark:]

    def mark(self):
        with self.lock:
            return len(self.requests)


# --- the gateway -------------------------------------------------------------------

def start_gateway(port, workdir):
    config = os.path.join(workdir, "pool.yaml")
    with open(config, "w") as f:
        f.write(
            "providers:\n"
            f"  oai: {{ wire: openai, base_url: 'http://127.0.0.1:{port}/oai/v1', api_key_env: POOLCTL_FIDELITY_KEY }}\n"
            f"  ant: {{ wire: anthropic, base_url: 'http://127.0.0.1:{port}/ant', api_key_env: POOLCTL_FIDELITY_KEY }}\n"
            "tiers:\n"
            "  oa: [oai/gpt-x]\n"
            "  an: [ant/claude-x]\n"
            "  mix: [ant/claude-x, oai/gpt-x]\n"
        )
    return launch_serve(config, workdir, {"POOLCTL_FIDELITY_KEY": UPSTREAM_KEY})


def only(up, mark, prefix):
    got = [r for r in up.since(mark) if r[0].startswith(prefix)]
    assert len(got) == 1, f"expected one request to {prefix}, got {len(got)}: {[r[0] for r in up.since(mark)]}"
    return got[0]


def checks(up, base):
    oa = openai.OpenAI(base_url=base + "/v1", api_key="client-key-never-forwarded", max_retries=0, timeout=TIMEOUT_S)
    an = anthropic.Anthropic(base_url=base, api_key="client-key-never-forwarded", max_retries=0, timeout=TIMEOUT_S)

    def openai_same_wire():
        sent = dict(
            messages=[
                {"role": "developer", "content": "Answer in JSON."},
                {"role": "user", "name": "ada", "content": [
                    {"type": "text", "text": "Describe"}, {"type": "text", "text": "this image."},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "low"}}]},
                {"role": "system", "content": "Be brief."},
            ],
            logprobs=True, top_logprobs=2, presence_penalty=0.5, frequency_penalty=0.25,
            logit_bias={"50256": -100}, reasoning_effort="low", parallel_tool_calls=False,
            tools=[{"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                "additionalProperties": False}}}],
            response_format={"type": "json_schema", "json_schema": {"name": "thing", "strict": True, "schema": {
                "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                "additionalProperties": False}}},
            max_completion_tokens=300, store=True, service_tier="default", n=2, seed=7,
            prediction={"type": "content", "content": "{}"}, metadata={"team": "a"}, user="u-1",
            modalities=["text"], stop=["END"], temperature=0.2, top_p=0.9,
        )
        mark = up.mark()
        r = oa.chat.completions.create(model="oa", extra_body={"x_future": {"keep": [1, 2.5]}}, **sent)
        _, headers, body = only(up, mark, "/oai/")
        want = dict(sent, model="gpt-x", x_future={"keep": [1, 2.5]})
        assert body == want, f"the upstream got {json.dumps(body)[:400]}"
        assert headers.get("authorization") == f"Bearer {UPSTREAM_KEY}"
        assert r.system_fingerprint == "fp_44709d6fcb" and r.service_tier == "default"
        assert len(r.choices) == 2 and r.choices[1].message.content == '{"a":2}'
        assert r.choices[0].logprobs.content[0].token == "{"
        assert r.usage.prompt_tokens_details.cached_tokens == 8
        assert r.usage.completion_tokens_details.reasoning_tokens == 4
        assert r.model == "gpt-x-2025-01-01"
        return f"{len(want)} fields forwarded, 2 choices back"

    def anthropic_same_wire():
        sent = dict(
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024},
            system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            messages=[{"role": "user", "content": [
                {"type": "text", "text": "One."},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}],
            metadata={"user_id": "u-1"}, stop_sequences=["END"],
        )
        mark = up.mark()
        # Sampling through extra_body: SDK versions in the pinned range differ on it.
        sampling = {"top_k": 5, "temperature": 1}
        m = an.messages.create(model="an", extra_headers={"anthropic-beta": "prompt-caching-2024-07-31"},
                               extra_body=sampling, **sent)
        _, headers, body = only(up, mark, "/ant/")
        assert body == dict(sent, model="claude-x", **sampling), f"the upstream got {json.dumps(body)[:400]}"
        assert headers.get("anthropic-beta") == "prompt-caching-2024-07-31"
        assert headers.get("x-api-key") == UPSTREAM_KEY
        assert m.content[0].type == "thinking" and m.content[0].signature == "EqQBCgIYAhIM"
        assert m.stop_reason == "stop_sequence" and m.stop_sequence == "END"
        assert m.usage.cache_creation_input_tokens == 2 and m.usage.cache_read_input_tokens == 3
        return "thinking, top_k, cache_control, anthropic-beta kept; thinking block signed"

    def openai_to_anthropic_image():
        mark = up.mark()
        raw = oa.chat.completions.with_raw_response.create(model="an", max_completion_tokens=100, messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in"}, {"type": "text", "text": "this image?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]}])
        r = raw.parse()
        _, _, body = only(up, mark, "/ant/")
        assert body["system"] == "Be brief."
        assert body["messages"] == [{"role": "user", "content": [
            {"type": "text", "text": "What is in"}, {"type": "text", "text": "this image?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}]
        assert body["max_tokens"] == 100
        msg = r.choices[0].message
        assert msg.content == "Bonjour" and r.choices[0].finish_reason == "stop"
        extra = msg.model_extra or {}
        assert extra.get("reasoning_content") == "The user wants a word.", extra
        assert r.usage.prompt_tokens == 10 and r.usage.prompt_tokens_details.cached_tokens == 3
        assert r.model == "claude-x-20250101"
        return "two text blocks and a base64 image block; thinking as reasoning_content"

    def stream_helper_over_anthropic():
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}]
        helper = getattr(oa.chat.completions, "stream", None) or oa.beta.chat.completions.stream
        with helper(model="an", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=tools) as s:
            for _ in s:
                pass
            final = s.get_final_completion()
        msg = final.choices[0].message
        assert msg.content == "Let me check.", msg
        assert len(msg.tool_calls) == 1
        assert msg.tool_calls[0].function.name == "get_weather"
        assert json.loads(msg.tool_calls[0].function.arguments) == {"city": "Paris"}
        assert final.choices[0].finish_reason == "tool_calls"
        assert final.model == "claude-x-20250101"
        return "text block then tool call: one call at index 0"

    def anthropic_to_openai():
        mark = up.mark()
        m = an.messages.create(model="oa", max_tokens=200, extra_body={"top_k": 5},
                               thinking={"type": "enabled", "budget_tokens": 3000},
                               messages=[{"role": "user", "content": [
                                   {"type": "text", "text": "One."}, {"type": "text", "text": "Two."},
                                   {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}])
        _, _, body = only(up, mark, "/oai/")
        assert body["messages"] == [{"role": "user", "content": [
            {"type": "text", "text": "One."}, {"type": "text", "text": "Two."},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]}], body["messages"]
        assert body["reasoning_effort"] == "high"
        assert body["max_completion_tokens"] == 200 and "max_tokens" not in body
        assert "top_k" not in body
        assert m.stop_reason == "end_turn"
        assert m.usage.input_tokens == 12 and m.usage.cache_read_input_tokens == 8
        assert m.usage.output_tokens == 10
        return "parts kept, budget 3000 → high, usage less the cache"

    def anthropic_stream_from_openai():
        mark = up.mark()
        with an.messages.stream(model="oa", max_tokens=50, messages=[{"role": "user", "content": "hi"}]) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        _, _, body = only(up, mark, "/oai/")
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert text == "Bonjour"
        assert final.model == "gpt-x-2025-01-01"
        assert final.usage.input_tokens == 12 and final.usage.cache_read_input_tokens == 8
        assert final.usage.output_tokens == 2 and final.stop_reason == "end_turn"
        return "the whole usage in the final message"

    def n_2_skips_anthropic():
        mark = up.mark()
        raw = oa.chat.completions.with_raw_response.create(
            model="mix", n=2, messages=[{"role": "user", "content": "hi"}])
        r = raw.parse()
        assert raw.headers.get("x-poolctl-served-by") == "oai/gpt-x"
        assert len(r.choices) == 2
        got = up.since(mark)
        assert [p for p, _, _ in got] == ["/oai/v1/chat/completions"], [p for p, _, _ in got]
        return "Anthropic never called; both choices"

    def unsupported_by_chain():
        mark = up.mark()
        try:
            oa.chat.completions.create(model="an", n=2, messages=[{"role": "user", "content": "hi"}])
        except openai.BadRequestError as e:
            assert e.code == "unsupported_by_chain", e.body
            assert "cannot carry: n" in str(e)
            assert up.since(mark) == []
            return "400 unsupported_by_chain, no upstream call"
        raise AssertionError("expected BadRequestError")

    def dropped_and_named():
        mark = up.mark()
        raw = oa.chat.completions.with_raw_response.create(
            model="an", seed=7, presence_penalty=0.5, messages=[{"role": "user", "content": "hi"}])
        raw.parse()
        named = sorted(raw.headers.get("x-poolctl-dropped-params", "").split(","))
        assert named == ["presence_penalty", "seed"], named
        _, _, body = only(up, mark, "/ant/")
        assert "seed" not in body and "presence_penalty" not in body
        return "x-poolctl-dropped-params: " + ",".join(named)

    for name, fn in [
        ("same wire, openai: the SDK's body whole, the answer whole", openai_same_wire),
        ("same wire, anthropic: the SDK's body and anthropic-beta, the answer whole", anthropic_same_wire),
        ("openai -> anthropic route: text parts, inline image, reasoning back", openai_to_anthropic_image),
        ("openai chat.completions.stream helper over an anthropic route", stream_helper_over_anthropic),
        ("anthropic -> openai route: parts, reasoning, usage", anthropic_to_openai),
        ("anthropic messages.stream from an openai route: the whole usage", anthropic_stream_from_openai),
        ("n: 2 on [anthropic, openai] is served by openai", n_2_skips_anthropic),
        ("n: 2 with only an anthropic route: 400 unsupported_by_chain", unsupported_by_chain),
        ("advisory fields dropped and named", dropped_and_named),
    ]:
        check(name, fn)


def main():
    print(f"openai {openai.__version__}, anthropic {anthropic.__version__}, poolctl {POOLCTL}")
    if not os.access(POOLCTL, os.X_OK):
        sys.exit(f"poolctl binary not found at {POOLCTL} (build it, or set POOLCTL_BIN)")
    up = Upstream()
    workdir = tempfile.mkdtemp(prefix="poolctl-fidelity-")
    proc, errf, base = start_gateway(up.port, workdir)
    try:
        checks(up, base)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        up.server.shutdown()
    errf.seek(0)
    log = errf.read()

    def no_key_leaks():
        assert UPSTREAM_KEY not in log and "client-key-never-forwarded" not in log
        for _, headers, _ in up.requests:
            assert "client-key-never-forwarded" not in json.dumps(headers), "a client key reached the upstream"
        return f"{len(up.requests)} upstream requests, no client key"

    check("no key in the log; no client key upstream", no_key_leaks)
    if tally.failed:
        print("--- poolctl serve stderr (last 30 lines) ---")
        print("\n".join(log.splitlines()[-30:]))
        print("---")
    return tally.report()


if __name__ == "__main__":
    sys.exit(main())
