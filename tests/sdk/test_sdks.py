#!/usr/bin/env python3
"""The official `openai` and `anthropic` Python SDKs against `poolctl mock`.

Starts `poolctl mock tests/sdk/scenario.yaml --listen 127.0.0.1:0`, reads the pool
config it prints for the providers' base URLs, and points each SDK at its mock: a
success body must parse, a stream must deliver the whole text, a 429 must raise the
SDK's rate-limit error and a 529 Anthropic's overloaded error. This proves the mocks
speak the real wire formats. Both clients run with max_retries=0 - the router is the
only retry layer - and the scenario's second reply on every error route is a success,
so an SDK retry would show up as a missing exception.

Then the gateway: two more mocks (tests/sdk/gateway.yaml, gateway-embed.yaml) behind
`poolctl serve`, and both SDKs with their default retries ON: chat, a stream with
usage, tools, embeddings, Anthropic messages and a messages stream, and a 429 when
every route is rate limited that raises RateLimitError after exactly one request (the
gateway's `x-should-retry: false` keeps the SDK from stacking retries on the router's).

Plain Python, no pytest. Prints one line per check, then `N passed, M failed`; exits
non-zero when any check failed.

    POOLCTL_BIN=target/release/poolctl python tests/sdk/test_sdks.py
"""

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import anthropic
import openai

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIO = os.path.join(ROOT, "tests", "sdk", "scenario.yaml")
GATEWAY_SCENARIO = os.path.join(ROOT, "tests", "sdk", "gateway.yaml")
GATEWAY_EMBED_SCENARIO = os.path.join(ROOT, "tests", "sdk", "gateway-embed.yaml")
POOLCTL = os.path.abspath(os.environ.get("POOLCTL_BIN", os.path.join(ROOT, "target", "release", "poolctl")))
KEY = "mock-key-anything"
TIMEOUT_S = 10.0
STARTUP_S = 20.0
PROMPT = [{"role": "user", "content": "Say hello."}]

class Tally:
    """The checks of one suite, run one by one: an exception or a failed assert is a
    failure, reported with its line, and never stops the run. Every suite ends with
    `N passed, M failed`."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, fn):
        try:
            detail = fn()
        except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the run
            self.failed += 1
            print(f"FAIL {name}: {type(e).__module__}.{type(e).__name__}: {e}")
            traceback.print_exc(limit=4, file=sys.stdout)
            return
        self.passed += 1
        print(f"ok   {name}" + (f" ({detail})" if detail else ""))

    def report(self):
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


tally = Tally()
check = tally.check


def expect_raise(exc_type, fn):
    """Calls fn and returns the exception, which must be exactly an `exc_type`."""
    try:
        got = fn()
    except exc_type as e:
        return e
    raise AssertionError(f"expected {exc_type.__module__}.{exc_type.__name__}, got a success: {got!r}")


def start_mock(scenario=SCENARIO, want=("openai", "claude")):
    """Starts the mock, returns (process, stderr file, {provider: base_url})."""
    if not os.access(POOLCTL, os.X_OK):
        sys.exit(f"poolctl binary not found at {POOLCTL} (build it, or set POOLCTL_BIN)")
    errf = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        [POOLCTL, "mock", scenario, "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=errf,
        text=True,
        cwd=ROOT,
    )
    lines = queue.Queue()

    def reader():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=reader, daemon=True).start()

    # The providers section comes before `tiers:`, so stop reading there.
    urls, current, deadline = {}, None, time.monotonic() + STARTUP_S
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            line = None
        if line is None or line.startswith("tiers:"):
            break
        if line.startswith("  ") and not line.startswith("    ") and line.rstrip().endswith(":"):
            current = line.strip()[:-1]
        elif line.strip().startswith("base_url:") and current:
            urls[current] = line.split(":", 1)[1].strip()
    if any(p not in urls for p in want):
        proc.kill()
        proc.wait()
        errf.seek(0)
        sys.exit(f"poolctl mock printed no usable config (got {urls}); exit {proc.returncode}; stderr:\n{errf.read()}")
    return proc, errf, urls


def openai_checks(base_url):
    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=TIMEOUT_S)

    def chat_parses():
        r = client.chat.completions.create(model="gpt-ok", messages=PROMPT)
        assert r.object == "chat.completion", r.object
        assert r.model == "gpt-ok", r.model
        assert r.choices[0].message.role == "assistant", r.choices[0].message.role
        assert r.choices[0].message.content == "hello from mock", r.choices[0].message.content
        assert r.choices[0].finish_reason == "stop", r.choices[0].finish_reason
        u = r.usage
        assert u is not None, "no usage"
        assert u.prompt_tokens > 0 and u.completion_tokens > 0, u
        assert u.total_tokens == u.prompt_tokens + u.completion_tokens, u
        return f"content={r.choices[0].message.content!r} usage={u.prompt_tokens}+{u.completion_tokens}"

    def chat_429_raises():
        e = expect_raise(
            openai.RateLimitError,
            lambda: client.chat.completions.create(model="gpt-429", messages=PROMPT),
        )
        assert e.status_code == 429, e.status_code
        assert e.code == "rate_limit_exceeded", e.code
        assert e.response.headers.get("retry-after") == "1", e.response.headers.get("retry-after")
        assert "Rate limit reached" in e.message, e.message
        return f"{type(e).__name__} status={e.status_code} code={e.code} retry-after=1"

    def stream(model, want, usage):
        def run():
            extra = {"stream_options": {"include_usage": True}} if usage else {}
            text, finish, last_usage, chunks = "", None, None, 0
            for chunk in client.chat.completions.create(model=model, messages=PROMPT, stream=True, **extra):
                chunks += 1
                assert chunk.object == "chat.completion.chunk", chunk.object
                if chunk.usage is not None:
                    last_usage = chunk.usage
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    finish = choice.finish_reason or finish
            assert text == want, f"streamed {text!r}, want {want!r}"
            assert finish == "stop", finish
            if usage:
                assert last_usage is not None and last_usage.completion_tokens > 0, last_usage
            return f"{chunks} chunks, text={text!r}"

        return run

    def bad_model_400():
        e = expect_raise(
            openai.BadRequestError,
            lambda: client.chat.completions.create(model="not-in-scenario", messages=PROMPT),
        )
        assert e.status_code == 400, e.status_code
        assert "mock: bad request: no route" in str(e.body) and "not-in-scenario" in str(e.body), e.body
        return "the mock validates what the SDK sends"

    check("openai: chat.completions.create parses (content, usage)", chat_parses)
    check("openai: 429 raises openai.RateLimitError", chat_429_raises)
    check("openai: stream=True on an `ok` reply delivers the text", stream("gpt-stream", "streamed hello from mock", False))
    check("openai: stream=True on a `stream:` reply, with include_usage", stream("gpt-stream-chunks", "Hello, world", True))
    check("openai: unknown model is the mock's 400 (openai.BadRequestError)", bad_model_400)


def anthropic_checks(base_url):
    client = anthropic.Anthropic(base_url=base_url, api_key=KEY, max_retries=0, timeout=TIMEOUT_S)
    # The SDK raises OverloadedError for 529 since 0.47 (exported at the top level only
    # later); before that, InternalServerError (any 5xx). .ci/run installs >= 0.47.
    overloaded = (
        getattr(anthropic, "OverloadedError", None)
        or getattr(anthropic._exceptions, "OverloadedError", None)
        or anthropic.InternalServerError
    )

    def create_parses():
        m = client.messages.create(model="claude-ok", max_tokens=16, messages=PROMPT)
        assert m.type == "message" and m.role == "assistant", (m.type, m.role)
        assert m.model == "claude-ok", m.model
        assert m.content[0].type == "text", m.content[0].type
        assert m.content[0].text == "hello from mock", m.content[0].text
        assert m.stop_reason == "end_turn", m.stop_reason
        assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0, m.usage
        return f"text={m.content[0].text!r} usage={m.usage.input_tokens}+{m.usage.output_tokens}"

    def create_429_raises():
        e = expect_raise(
            anthropic.RateLimitError,
            lambda: client.messages.create(model="claude-429", max_tokens=16, messages=PROMPT),
        )
        assert e.status_code == 429, e.status_code
        assert e.body["error"]["type"] == "rate_limit_error", e.body
        assert e.response.headers.get("retry-after") == "1", e.response.headers.get("retry-after")
        return f"{type(e).__name__} status={e.status_code}"

    def create_529_raises():
        e = expect_raise(
            overloaded,
            lambda: client.messages.create(model="claude-529", max_tokens=16, messages=PROMPT),
        )
        assert e.status_code == 529, e.status_code
        assert e.body["error"]["type"] == "overloaded_error", e.body
        return f"{type(e).__name__} status={e.status_code}"

    def stream_helper():
        with client.messages.stream(model="claude-stream", max_tokens=16, messages=PROMPT) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        assert text == "streamed hello from mock", text
        assert final.content[0].text == text, final.content
        assert final.stop_reason == "end_turn", final.stop_reason
        assert final.usage.output_tokens > 0, final.usage
        return f"text={text!r} stop_reason={final.stop_reason}"

    def stream_raw_events():
        text, types = "", []
        for ev in client.messages.create(model="claude-stream-chunks", max_tokens=16, messages=PROMPT, stream=True):
            types.append(ev.type)
            if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                text += ev.delta.text
        assert text == "Hello, world", text
        assert types[0] == "message_start" and types[-1] == "message_stop", types
        return f"{len(types)} events, text={text!r}"

    def bad_model_400():
        e = expect_raise(
            anthropic.BadRequestError,
            lambda: client.messages.create(model="not-in-scenario", max_tokens=16, messages=PROMPT),
        )
        assert e.status_code == 400, e.status_code
        assert "mock: bad request: no route" in str(e.body) and "not-in-scenario" in str(e.body), e.body
        return "the mock validates what the SDK sends"

    check("anthropic: messages.create parses (text, usage)", create_parses)
    check("anthropic: 429 raises anthropic.RateLimitError", create_429_raises)
    check(f"anthropic: 529 raises anthropic.{overloaded.__name__}", create_529_raises)
    check("anthropic: messages.stream on an `ok` reply delivers the text", stream_helper)
    check("anthropic: create(stream=True) on a `stream:` reply", stream_raw_events)
    check("anthropic: unknown model is the mock's 400 (anthropic.BadRequestError)", bad_model_400)


def stop(proc):
    """SIGTERM, then the exit code (killed after 10 s)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def start_gateway(chat_urls, embed_urls, workdir):
    """Writes a pool config over the two mocks and starts `poolctl serve` on it.
    Returns (process, stderr file, base URL)."""
    config = os.path.join(workdir, "pool.yaml")
    with open(config, "w") as f:
        f.write(
            "providers:\n"
            f"  gw: {{ wire: openai, base_url: {chat_urls['gw']}, api_key_env: POOLCTL_MOCK_KEY }}\n"
            f"  cl: {{ wire: anthropic, base_url: {chat_urls['cl']}, api_key_env: POOLCTL_MOCK_KEY }}\n"
            f"  emb: {{ wire: openai, base_url: {embed_urls['emb']}, api_key_env: POOLCTL_MOCK_KEY }}\n"
            "tiers:\n"
            "  chat: [gw/chat-ok]\n"
            "  stream: [gw/stream]\n"
            "  tools: [gw/tool]\n"
            "  tool-stream: [gw/tool-stream]\n"
            "  limited: [gw/limited-a, gw/limited-b]\n"
            "  claude: [cl/msg-ok]\n"
            "  claude-stream: [cl/msg-stream]\n"
            "  embed:\n"
            "    - { route: emb/text-embed, path: embed }\n"
            "  shed: [gw/shed-model]\n"
            # 2 requests a minute at 0.9 headroom: one is admitted (the mock does not
            # serve this model: a request error), the next is shed until the refill.
            "limits:\n"
            "  gw/shed-model: { rpm: 2 }\n"
        )
    return launch_serve(config, workdir, {"POOLCTL_MOCK_KEY": KEY})


def launch_serve(config, workdir, env_extra):
    """Starts `poolctl serve --config CONFIG` on a free loopback port, with `env_extra`
    set and no inherited POOLCTL_SERVE_TOKEN, once it prints its address.
    Returns (process, stderr file, base URL)."""
    errf = tempfile.TemporaryFile(mode="w+")
    env = dict(os.environ, **env_extra)
    env.pop("POOLCTL_SERVE_TOKEN", None)
    proc = subprocess.Popen(
        [POOLCTL, "serve", "--config", config, "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=errf, text=True, cwd=workdir, env=env,
    )
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout] and None, daemon=True).start()
    try:
        line = lines.get(timeout=STARTUP_S)
    except queue.Empty:
        line = ""
    if "listening on http://" not in line:
        proc.kill()
        proc.wait()
        errf.seek(0)
        sys.exit(f"poolctl serve did not start (printed {line!r}); stderr:\n{errf.read()}")
    return proc, errf, line.strip().rsplit(" ", 1)[1]


def metric(base, series):
    """The value of one /metrics series, 0 when absent."""
    import urllib.request

    with urllib.request.urlopen(base + "/metrics", timeout=TIMEOUT_S) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def gateway_checks(base):
    """The official SDKs, default retries ON, against `poolctl serve`."""
    oa = openai.OpenAI(base_url=base + "/v1", api_key="client-key-never-forwarded", timeout=TIMEOUT_S)
    an = anthropic.Anthropic(base_url=base, api_key="client-key-never-forwarded", timeout=TIMEOUT_S)

    def chat():
        raw = oa.chat.completions.with_raw_response.create(model="chat", messages=PROMPT)
        r = raw.parse()
        assert r.choices[0].message.content == "hello through the gateway", r.choices[0].message.content
        assert r.model == "chat-ok", r.model
        assert r.choices[0].finish_reason == "stop", r.choices[0].finish_reason
        assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0, r.usage
        assert raw.headers.get("x-poolctl-served-by") == "gw/chat-ok", raw.headers
        assert raw.headers.get("x-poolctl-outcome") == "success", raw.headers
        assert raw.headers.get("x-poolctl-attempts") == "1", raw.headers
        return f"content={r.choices[0].message.content!r} served-by=gw/chat-ok"

    def stream():
        text, finish, usage, models = "", None, None, set()
        for chunk in oa.chat.completions.create(
            model="stream", messages=PROMPT, stream=True, stream_options={"include_usage": True}
        ):
            models.add(chunk.model)
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
        assert text == "Hello, gateway", text
        assert finish == "stop", finish
        assert models == {"stream"}, models
        assert usage is not None and usage.completion_tokens > 0, usage
        return f"text={text!r} usage={usage.prompt_tokens}+{usage.completion_tokens}"

    def tools():
        r = oa.chat.completions.create(
            model="tools",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[{"type": "function", "function": {
                "name": "get_weather", "description": "Current weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
            tool_choice="auto",
        )
        calls = r.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "get_weather", r.choices[0].message
        assert calls[0].function.arguments == '{"city":"Paris"}', calls[0].function.arguments
        assert r.choices[0].finish_reason == "tool_calls", r.choices[0].finish_reason
        return f"tool_call={calls[0].function.name}({calls[0].function.arguments})"

    def tools_stream():
        name, args, finish = None, "", None
        for chunk in oa.chat.completions.create(
            model="tool-stream",
            messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
            stream=True,
        ):
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or []:
                    name = call.function.name or name
                    args += call.function.arguments or ""
                finish = choice.finish_reason or finish
        assert name == "get_weather" and args == '{"city":"Oslo"}', (name, args)
        assert finish == "tool_calls", finish
        return f"streamed tool_call={name}({args})"

    def embedding():
        r = oa.embeddings.create(model="embed", input=["first text", "second text"])
        assert len(r.data) == 2, r.data
        assert all(len(d.embedding) > 0 and isinstance(d.embedding[0], float) for d in r.data), r.data
        return f"{len(r.data)} vectors of {len(r.data[0].embedding)} (SDK default base64 decoded)"

    def rate_limited():
        before = metric(base, 'poolctl_requests_total{workflow="limited",outcome="failed"}')
        e = expect_raise(
            openai.RateLimitError,
            lambda: oa.chat.completions.create(model="limited", messages=PROMPT),
        )
        after = metric(base, 'poolctl_requests_total{workflow="limited",outcome="failed"}')
        assert e.status_code == 429, e.status_code
        assert e.response.headers.get("x-should-retry") == "false", e.response.headers
        assert int(e.response.headers.get("retry-after")) > 3000, e.response.headers
        assert e.body["type"] == "capacity" and e.code == "capacity", e.body
        assert after - before == 1, f"the SDK sent {after - before} requests, not exactly one"
        return f"RateLimitError after exactly 1 request, retry-after={e.response.headers.get('retry-after')}"

    def shed():
        # The first takes the bucket's one admission (the mock refuses the model).
        expect_raise(
            openai.APIStatusError,
            lambda: oa.chat.completions.create(model="shed", messages=PROMPT),
        )
        before = metric(base, 'poolctl_requests_total{workflow="shed",outcome="shed"}')
        e = expect_raise(
            openai.RateLimitError,
            lambda: oa.chat.completions.create(model="shed", messages=PROMPT),
        )
        after = metric(base, 'poolctl_requests_total{workflow="shed",outcome="shed"}')
        assert e.status_code == 429, e.status_code
        assert e.response.headers.get("x-should-retry") == "false", e.response.headers
        assert after - before == 1, f"the SDK sent {after - before} requests, not exactly one"
        shed_total = metric(base, 'poolctl_shed_total{priority="interactive",route="gw/shed-model"}')
        assert shed_total == after, (shed_total, after)
        return f"RateLimitError after exactly 1 request, retry-after={e.response.headers.get('retry-after')}"

    def messages():
        m = an.messages.create(model="claude", max_tokens=32, messages=PROMPT)
        assert m.type == "message" and m.content[0].text == "hello from claude through the gateway", m
        assert m.model == "msg-ok", m.model
        assert m.stop_reason == "end_turn", m.stop_reason
        assert m.usage.output_tokens > 0, m.usage
        return f"text={m.content[0].text!r}"

    def messages_stream():
        with an.messages.stream(model="claude-stream", max_tokens=32, messages=PROMPT) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        assert text == "Hello, claude", text
        assert final.stop_reason == "end_turn", final.stop_reason
        assert final.model == "msg-stream", final.model
        return f"text={text!r}"

    def messages_unknown_model():
        e = expect_raise(anthropic.NotFoundError, lambda: an.messages.create(model="claude-strem", max_tokens=8, messages=PROMPT))
        assert e.body["type"] == "error" and "claude-stream" in e.body["error"]["message"], e.body
        return "404 in Anthropic's error shape, naming the nearest"

    check("gateway/openai: chat.completions through serve (headers, model, usage)", chat)
    check("gateway/openai: stream with include_usage", stream)
    check("gateway/openai: tools pass through, tool call comes back", tools)
    check("gateway/openai: a streamed tool call arrives as tool-call deltas", tools_stream)
    check("gateway/openai: embeddings (SDK default base64)", embedding)
    check("gateway/openai: every route rate limited -> RateLimitError after ONE request", rate_limited)
    check("gateway/openai: admission sheds -> RateLimitError after ONE request", shed)
    check("gateway/anthropic: messages.create through serve", messages)
    check("gateway/anthropic: messages.stream through serve", messages_stream)
    check("gateway/anthropic: unknown model -> NotFoundError naming the nearest", messages_unknown_model)


def main():
    print(f"openai {openai.__version__}, anthropic {anthropic.__version__}, poolctl {POOLCTL}")
    proc, errf, urls = start_mock()
    try:
        openai_checks(urls["openai"])
        anthropic_checks(urls["claude"])
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()

    def clean_stop():
        assert code == 0, f"exit status {code}"
        return "SIGTERM, exit 0"

    check("poolctl mock: stops cleanly on SIGTERM", clean_stop)

    chat_mock, chat_err, chat_urls = start_mock(GATEWAY_SCENARIO, ("gw", "cl"))
    embed_mock, embed_err, embed_urls = start_mock(GATEWAY_EMBED_SCENARIO, ("emb",))
    workdir = tempfile.mkdtemp(prefix="poolctl-sdk-")
    gateway, gateway_err = None, None
    try:
        gateway, gateway_err, base = start_gateway(chat_urls, embed_urls, workdir)
        gateway_checks(base)
    finally:
        gateway_code = stop(gateway) if gateway else None
        stop(chat_mock)
        stop(embed_mock)

    def gateway_clean_stop():
        assert gateway_code == 0, f"exit status {gateway_code}"
        gateway_err.seek(0)
        log = gateway_err.read()
        assert "client-key-never-forwarded" not in log and KEY not in log, "a key reached the log"
        return "SIGTERM, drained, exit 0; no key in the log"

    check("poolctl serve: stops cleanly on SIGTERM", gateway_clean_stop)
    if tally.failed and gateway_err:
        gateway_err.seek(0)
        print("--- poolctl serve stderr (last 40 lines) ---")
        print("".join(gateway_err.readlines()[-40:]), end="")
        print("---")
    if tally.failed:
        errf.seek(0)
        print("--- poolctl mock stderr ---")
        print(errf.read(), end="")
        print("---")
    return tally.report()


if __name__ == "__main__":
    sys.exit(main())
