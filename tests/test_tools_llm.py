"""LLM tools against a real HTTP server on 127.0.0.1 (OpenAI chat-completions protocol) and a real
local transformers model: usage priced by the card, retries with backoff, timeouts, task input."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchlib.cards import CardError, Price, ToolCard
from orchlib.tools import LLMTool, ToolContext, build_tool

PRICE = {"per_m_input": 1.25, "per_m_output": 10.0}  # gpt-5


class Script:
    """What the server answers, request by request: (status, body dict, headers) or "hang"."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.requests: list[dict] = []
        self.release = threading.Event()  # set at teardown so a hanging handler returns


def completion(text: str, prompt_tokens: int = 42, completion_tokens: int = 7, usage: bool = True) -> dict:
    body = {"id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}
    if usage:
        body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                         "total_tokens": prompt_tokens + completion_tokens}
    return body


@pytest.fixture
def server():
    """Start a ThreadingHTTPServer on a free port; yield a function that installs a script and returns
    the base URL."""
    state = {"script": Script()}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            script = state["script"]
            length = int(self.headers.get("Content-Length", 0))
            script.requests.append({"path": self.path, "headers": dict(self.headers),
                                    "body": json.loads(self.rfile.read(length)), "at": time.perf_counter()})
            step = script.steps.pop(0) if len(script.steps) > 1 else script.steps[0]
            if step == "hang":
                script.release.wait(10)
                return
            status, body, headers = step
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):  # keep test output clean
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()

    def use(script: Script) -> str:
        state["script"] = script
        return f"http://127.0.0.1:{httpd.server_address[1]}/v1"

    yield use
    state["script"].release.set()
    httpd.shutdown()
    httpd.server_close()


def card(base_url: str, **backend) -> ToolCard:
    return ToolCard(name="gpt5", kind="llm", description="a model",
                    parameters={"type": "object", "properties": {"prompt": {"type": "string"}},
                                "required": ["prompt"]},
                    backend={"client": "openai", "base_url": base_url, "model": "gpt-5",
                             "api_key_env": "TEST_LLM_KEY", "backoff_s": 0.05, **backend},
                    price=PRICE)


def test_answer_is_priced_from_usage_and_key_comes_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "sk-local-test")
    script = Script((200, completion("Paris.", 1000, 500), {}))
    tool = build_tool(card(server(script), system="Be brief.", max_tokens=64, temperature=0.0))
    obs = tool.call_sync({"prompt": "Capital of France?"})
    assert obs.error is None and obs.content == "Paris." and obs.tool == "gpt5"
    assert (obs.tokens_in, obs.tokens_out) == (1000, 500)
    assert obs.cost_usd == pytest.approx(0.00625)  # 1000 × 1.25e-6 + 500 × 10e-6
    [req] = script.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == "Bearer sk-local-test"
    assert req["body"] == {"model": "gpt-5", "max_tokens": 64, "temperature": 0.0, "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]}


def test_reasoning_and_cached_tokens_are_billed_at_the_price_tables_rates(server, monkeypatch):
    """A reasoning model's usage (OpenAI's shape: reasoning tokens inside completion_tokens, cached ones
    inside prompt_tokens) priced by a card whose price is the table's gpt-5 row."""
    from orchlib.prices import load_prices

    monkeypatch.setenv("TEST_LLM_KEY", "k")
    body = completion("42", 2000, 3000)
    body["usage"] |= {"completion_tokens_details": {"reasoning_tokens": 2800},
                      "prompt_tokens_details": {"cached_tokens": 1500}}
    script = Script((200, body, {}))
    tool = build_tool(card(server(script)).model_copy(update={"price": Price(table="gpt-5")}))
    obs = tool.call_sync({"prompt": "Think hard."})
    row = load_prices().row("gpt-5")
    assert (obs.tokens_in, obs.tokens_out, obs.tokens_reasoning, obs.tokens_cached) == (2000, 3000, 2800, 1500)
    want = (500 * row.input + 1500 * row.cached_input + 3000 * row.output) / 1e6  # reasoning billed as output
    assert obs.cost_usd == pytest.approx(want, rel=1e-12) and obs.cost_usd == pytest.approx(0.0308125)
    # A card that prices reasoning apart bills those 2,800 tokens at its rate instead
    cheap = Price(per_m_input=1.25, per_m_output=10.0, per_m_reasoning=2.0)
    obs = build_tool(card(server(Script((200, body, {})))).model_copy(update={"price": cheap})).call_sync(
        {"prompt": "Think hard."})
    assert obs.cost_usd == pytest.approx((2000 * 1.25 + 200 * 10.0 + 2800 * 2.0) / 1e6, rel=1e-12)


@pytest.mark.parametrize("usage, problem", [
    ({"prompt_tokens": -1, "completion_tokens": 2}, "prompt_tokens = -1"),
    ({"prompt_tokens": 3, "completion_tokens": "many"}, "completion_tokens = 'many'"),
    ({"prompt_tokens": 3, "completion_tokens": 2, "completion_tokens_details": {"reasoning_tokens": 1.5}},
     "reasoning_tokens = 1.5"),
])
def test_a_malformed_usage_is_a_failure_not_a_guessed_bill(server, monkeypatch, usage, problem):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    body = completion("x") | {"usage": usage}
    obs = build_tool(card(server(Script((200, body, {}))))).call_sync({"prompt": "hi"})
    assert obs.error_kind == "tool_failure" and problem in obs.error


def test_500_twice_then_success_with_backoff(server, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    script = Script((500, {"error": "boom"}, {}), (500, {"error": "boom"}, {}), (200, completion("ok"), {}))
    obs = build_tool(card(server(script))).call_sync({"prompt": "hi"})
    assert obs.error is None and obs.content == "ok"
    times = [r["at"] for r in script.requests]
    assert len(times) == 3
    assert times[1] - times[0] >= 0.05 and times[2] - times[1] >= 0.1  # 0.05 s, then doubled
    assert obs.latency_s >= 0.15


def test_429_honours_retry_after(server, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    script = Script((429, {"error": "slow down"}, {"Retry-After": "0.3"}), (200, completion("done"), {}))
    obs = build_tool(card(server(script))).call_sync({"prompt": "hi"})
    assert obs.content == "done"
    assert script.requests[1]["at"] - script.requests[0]["at"] >= 0.3


def test_gives_up_after_retries_and_reports_the_last_answer(server, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    script = Script((503, {"error": "overloaded"}, {}))
    obs = build_tool(card(server(script), max_retries=2)).call_sync({"prompt": "hi"})
    assert obs.error_kind == "tool_failure" and len(script.requests) == 3
    assert obs.error == 'gpt-5: gave up after 3 attempts; last: HTTP 503: {"error": "overloaded"}'


def test_client_errors_are_not_retried(server, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    script = Script((401, {"error": "bad key"}, {}))
    obs = build_tool(card(server(script))).call_sync({"prompt": "hi"})
    assert obs.error == 'gpt-5: HTTP 401: {"error": "bad key"}' and len(script.requests) == 1


def test_hanging_server_is_a_timeout_observation(server, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    script = Script("hang")
    t0 = time.perf_counter()
    obs = build_tool(card(server(script), timeout_s=0.3)).call_sync({"prompt": "hi"})
    assert obs.error_kind == "timeout" and "within 0.3 s" in obs.error
    assert time.perf_counter() - t0 < 2 and len(script.requests) == 1  # timeouts are not retried


def test_missing_key_and_unreachable_server(server, monkeypatch):
    monkeypatch.delenv("TEST_LLM_KEY", raising=False)
    script = Script((200, completion("never"), {}))
    obs = build_tool(card(server(script))).call_sync({"prompt": "hi"})
    assert obs.error == "environment variable TEST_LLM_KEY (the API key) is not set" and script.requests == []
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    closed = build_tool(card("http://127.0.0.1:9/v1", max_retries=1)).call_sync({"prompt": "hi"})
    assert closed.error_kind == "tool_failure" and "gave up after 2 attempts; last: ConnectError" in closed.error


def test_task_input_sends_the_task_and_what_tools_returned(server, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    script = Script((200, completion("18", usage=False), {}))
    c = card(server(script)).model_copy(update={"input": "task", "final": True,
                                                "parameters": {"type": "object", "properties": {}}})
    ctx = ToolContext(task_id="t", prompt="How much does Janet make?", messages=[
        {"role": "user", "content": "How much does Janet make?"},
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "tool", "name": "calculator", "content": "18"}])
    obs = build_tool(c).call_sync({}, ctx)
    assert obs.final and obs.content == "18"
    assert script.requests[0]["body"]["messages"] == [{"role": "user", "content": (
        "How much does Janet make?\n\nContext gathered so far:\n[calculator] 18")}]
    # no usage in the answer: tokens are estimated so the call is still priced
    assert obs.tokens_in > 0 and obs.tokens_out == 1 and obs.cost_usd > 0


def test_settings_are_checked_when_built():
    with pytest.raises(CardError, match="client openai needs base_url"):
        build_tool(ToolCard(name="x", kind="llm", description="d", backend={"model": "m"}))


def test_local_transformers_model(tiny_policy, tmp_path):
    model, tok = tiny_policy
    folder = tmp_path / "tiny"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    local = ToolCard(name="local", kind="llm", description="a local model",
                     parameters={"type": "object", "properties": {"prompt": {"type": "string"}}},
                     backend={"client": "transformers", "model": str(folder), "max_tokens": 8},
                     price={"per_m_input": 3.0, "per_m_output": 7.0})
    tool: LLMTool = build_tool(local)
    obs = tool.call_sync({"prompt": "What is 2+2?"})
    assert obs.error is None and isinstance(obs.content, str)
    expected_in = len(tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}],
                                              add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
    assert obs.tokens_in == expected_in and 1 <= obs.tokens_out <= 8
    assert obs.cost_usd == pytest.approx(obs.tokens_in * 3e-6 + obs.tokens_out * 7e-6)
    if obs.tokens_out == 8:  # random weights: it may stop early, but 8 sampled tokens decode to text
        assert obs.content.strip()
    again = tool.call_sync({"prompt": "What is 2+2?"})
    assert again.content == obs.content  # greedy: the same answer
