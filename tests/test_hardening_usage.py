"""Counts and costs from outside are checked before they are billed, and a malformed reply is a counted
error of its episode, never the end of the rollout: the API policy, the simulated user, the `llm` tool,
the synthesis stages and `orchlib eval`, each against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchlib.env import Environment
from orchlib.cards import Price, ToolCard
from orchlib.engines.openai import OpenAIPolicy
from orchlib.rollout import RolloutConfig, rollout
from orchlib.tasks import Task
from orchlib.tools import Toolbox, build_tool
from orchlib.tools.function import FunctionTool
from orchlib.tools.llm import MAX_RESPONSE_BYTES

PRICE_IN, PRICE_OUT = 2.0, 8.0  # USD per million tokens
GOOD = (100, 10)                # the usage of every well-formed reply
GOOD_USD = (100 * PRICE_IN + 10 * PRICE_OUT) / 1e6

TASK = Task(id="t1", prompt="What is 4*25?", answer="100", checker="numeric")


def oracle(question: str) -> str:
    """Answers any question.

    Args:
        question: the question
    """
    return "100"


def toolbox() -> Toolbox:
    return Toolbox([FunctionTool.from_function(oracle, final=True)])


def completion(content="100", usage=GOOD, **message) -> bytes:
    """A chat completion as a server sends it; `usage` a (prompt, completion) pair or any raw value.
    NaN is written as the bare `NaN` Python's json writes (and reads back)."""
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content, **message},
                         "finish_reason": "stop"}]}
    if usage is not None:
        body["usage"] = ({"prompt_tokens": usage[0], "completion_tokens": usage[1]} if isinstance(usage, tuple)
                         else usage)
    return json.dumps(body).encode()


@pytest.fixture
def endpoint():
    """`start(answer) -> base URL`: a chat-completions server answering each request body with the
    bytes `answer(body)` returns."""
    state: dict = {}
    servers: list[ThreadingHTTPServer] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            payload = state["answer"](body)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            try:
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: as it should
                pass

        def log_message(self, *args):
            pass

    def start(answer) -> str:
        state["answer"] = answer
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}/v1"

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def bad_then_good(bad: bytes):
    """`bad`, then a good answer, then `bad` again, ...: with one episode in flight at a time, each
    episode's first request gets `bad` and its second (the same messages: a failed turn adds none) the
    answer."""
    count = iter(range(10**6))
    lock = threading.Lock()

    def answer(body):
        with lock:
            n = next(count)
        return bad if n % 2 == 0 else completion()

    return answer


def policy(url: str, max_in_flight: int = 1) -> OpenAIPolicy:
    return OpenAIPolicy(base_url=url, model="m", price=Price(per_m_input=PRICE_IN, per_m_output=PRICE_OUT),
                        max_retries=0, max_in_flight=max_in_flight)


# ---------------------------------------------------------------------------------------------- the API policy
MALFORMED = {
    "negative count": (completion(usage=(-5_000_000, 10)), "prompt_tokens = -5000000, not a token count"),
    "1e30 tokens": (completion(usage=(100, 1e30)), "completion_tokens = 1e+30, not a token count"),
    "NaN count": (completion(usage=(float("nan"), 10)), "prompt_tokens = nan, not a token count"),
    "fractional count": (completion(usage=(100.5, 10)), "prompt_tokens = 100.5, not a token count"),
    "usage a string": (completion(usage="lots"), "usage is str 'lots', not an object"),
    "usage NaN": (completion(usage=float("nan")), "usage is float 'nan', not an object"),
    "usage a list": (completion(usage=[100, 10]), "usage is list '[100, 10]', not an object"),
    "tool_calls a number": (completion(tool_calls=5), "tool_calls is int '5', not a list"),
    "content an object": (completion(content={"text": "100"}), "content is dict \"{'text': '100'}\", not text"),
    "choice a number": (b'{"choices": [5]}', "choices[0] is not an object"),
    "not UTF-8": (b'{"choices": "\xff"}', "unexpected response"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_reply_is_the_episodes_counted_error_and_every_episode_comes_back(endpoint, case):
    bad, problem = MALFORMED[case]
    url = endpoint(bad_then_good(bad))
    trajs = rollout(Environment(train=[TASK, TASK.model_copy(update={"id": "t2"})], tools=toolbox()), policy(url),
                    config=RolloutConfig(), group_size=3)
    assert len(trajs) == 6  # none lost
    for t in trajs:
        assert t.errors == {"tool_failure": 1} and t.final_answer == "100" and t.outcome == 1.0
        assert problem in t.turns[0].observations[0].error
        # only the good turn is billed: the malformed usage is never priced
        assert t.meta["tokens_in"] == 100 and t.meta["tokens_out"] == 10
        assert t.cost_usd == pytest.approx(GOOD_USD)


def test_a_response_body_over_the_cap_is_refused_and_the_episode_goes_on(endpoint):
    huge = completion(content="x" * (20 * 10**6))  # 20 MB
    assert len(huge) > MAX_RESPONSE_BYTES
    url = endpoint(bad_then_good(huge))
    [t] = rollout(Environment(train=[TASK], tools=toolbox()), policy(url), config=RolloutConfig())
    assert t.errors == {"tool_failure": 1} and t.final_answer == "100"
    assert "is over 10 MiB; refused unread" in t.turns[0].observations[0].error


def test_a_body_just_under_the_cap_is_read(endpoint):
    filler = "x" * (MAX_RESPONSE_BYTES - 1000)
    url = endpoint(lambda body: completion(content=filler))
    [t] = rollout(Environment(train=[TASK], tools=toolbox()), policy(url), config=RolloutConfig())
    assert t.errors == {} and t.final_answer == filler


def test_an_engine_that_raises_is_counted_for_its_episode_only():
    from orchlib.engines.openai import ChatReply

    class Flaky:  # an API-style engine of one's own, raising on the first turn of each episode of t1
        name, max_in_flight = "flaky", 4

        def start(self, system, user, tools):
            return [{"role": "system", "content": system}, {"role": "user", "content": user}]

        def session(self):
            import contextlib

            return contextlib.nullcontext()

        def __init__(self):
            self.failed: set[int] = set()  # the episodes (their message lists) that failed once

        async def chat(self, messages, tools, session):
            await asyncio.sleep(0)
            if "4*25" in messages[1]["content"] and id(messages) not in self.failed:
                self.failed.add(id(messages))
                raise KeyError("choices")
            return ChatReply(text="100", content="100", message={"role": "assistant", "content": "100"})

    other = Task(id="t2", prompt="What is 50*2?", answer="100", checker="numeric")
    trajs = rollout(Environment(train=[TASK, other], tools=toolbox()), Flaky(), config=RolloutConfig(), group_size=2)
    assert [t.errors for t in trajs] == [{"tool_failure": 1}] * 2 + [{}] * 2
    assert trajs[0].turns[0].observations[0].error == "flaky: KeyError: 'choices'"
    assert all(t.final_answer == "100" for t in trajs)


# ---------------------------------------------------------------------------------------------- the `llm` tool
def test_an_llm_tools_usage_of_1e30_is_an_error_not_a_bill(endpoint):
    url = endpoint(lambda body: completion("hi", usage=(1e30, 1)))
    card = ToolCard(name="big", kind="llm", description="a model", price=Price(per_m_input=1.0),
                    parameters={"type": "object", "properties": {"prompt": {"type": "string"}}},
                    backend={"client": "openai", "base_url": url, "model": "m", "max_retries": 0})
    obs = build_tool(card).call_sync({"prompt": "hi"})
    assert obs.error_kind == "tool_failure" and "prompt_tokens = 1e+30, not a token count" in obs.error
    assert obs.cost_usd == 0.0


# ---------------------------------------------------------------------------------------------- simulated user
USER_RULES = "You are a user talking"


def with_user(url: str) -> Task:
    return Task(id="t1", prompt="What is 4*25?", answer="100", checker="numeric",
                user={"kind": "simulated", "base_url": url, "model": "sim", "instructions": "x"})


USER_MALFORMED = {
    "negative count": (completion("ok", usage=(-50, 10)), "prompt_tokens = -50"),
    "usage a string": (completion("ok", usage="lots"), "usage is str"),
    "usage NaN": (completion("ok", usage=float("nan")), "usage is float"),
    "tool_calls a number": (completion("ok", tool_calls=5), "tool_calls is int"),
    "content an object": (completion({"text": "ok"}), "content is dict"),
}


@pytest.mark.parametrize("case", sorted(USER_MALFORMED))
def test_a_malformed_user_reply_is_a_counted_user_failure(endpoint, case):
    bad, problem = USER_MALFORMED[case]

    def answer(body):  # the policy greets; the user's model (its rules in the system message) misbehaves
        return bad if body["messages"][0]["content"].startswith(USER_RULES) else completion("How can I help?")

    url = endpoint(answer)
    trajs = rollout(Environment(train=[with_user(url)], tools=toolbox()), policy(url), config=RolloutConfig(),
                    group_size=3)
    assert len(trajs) == 3
    for t in trajs:
        assert t.errors == {"user_failure": 1} and t.finish_reason == "user_stop"
        assert problem in t.turns[0].user.error
        assert t.user_cost_usd == 0.0


def test_a_user_of_ones_own_that_raises_is_a_counted_user_failure(endpoint):
    class Broken:
        async def reply(self, messages):
            raise ValueError("no reply today")

    url = endpoint(lambda body: completion("How can I help?"))
    task = TASK.model_copy(update={"user": lambda task: Broken()})
    [t] = rollout(Environment(train=[task], tools=toolbox()), policy(url), config=RolloutConfig())
    assert t.errors == {"user_failure": 1} and t.turns[0].user.error == "ValueError: no reply today"


# ---------------------------------------------------------------------------------------------- synthesis
def stage_llm(url, tmp_path):
    from orchlib.synth import SynthConfig
    from orchlib.synth.llm import StageLLM

    config = SynthConfig(domain="a library", price={"per_m_input": 1.0, "per_m_output": 1.0},
                         llm={"model": "writer", "base_url": url, "max_retries": 0})
    return StageLLM(config, tmp_path)


@pytest.mark.parametrize("usage, problem", [("lots", "usage is str 'lots'"), ({"prompt_tokens": -7}, "= -7"),
                                            ({"completion_tokens": 1e30}, "= 1e+30")])
def test_a_synthesis_reply_with_bad_usage_is_a_stage_error_and_not_counted(endpoint, tmp_path, usage, problem):
    from orchlib.synth.llm import SynthError

    llm = stage_llm(endpoint(lambda body: completion('{"a": 1}', usage=usage)), tmp_path)
    with pytest.raises(SynthError, match=f"^stage domain: writer: .*{re.escape(problem)}"):
        llm.ask("domain", "system", "user")
    assert llm.usage.tokens_in == 0 and llm.usage.cost_usd == 0.0
    assert not (tmp_path / "domain.json").exists()  # not cached: a rerun asks again


@pytest.mark.parametrize("text, problem", [
    ("{not json", "domain.json:1: not a stage cache file"),
    ("[1, 2]", "domain.json:1: expected an object"),
    ('{"prompt_sha256": "x", "reply": "{}", "tokens_in": -5, "tokens_out": 1}', "tokens_in: -5 is not a token count"),
    ('{"prompt_sha256": "x", "reply": "{}", "tokens_in": "12", "tokens_out": 1}', "tokens_in: expected a whole number"),
    ('{"prompt_sha256": "x", "reply": {}, "tokens_in": 1, "tokens_out": 1}', "reply: expected text"),
])
def test_a_corrupt_stage_cache_names_the_file_and_field(tmp_path, text, problem):
    from orchlib.synth.llm import SynthCacheError

    (tmp_path / "domain.json").write_text(text)
    llm = stage_llm("http://127.0.0.1:9/v1", tmp_path)  # never asked: the cache is read first
    with pytest.raises(SynthCacheError, match=problem):
        llm.ask("domain", "system", "user")


# ---------------------------------------------------------------------------------------------- orchlib eval
def test_eval_against_a_policy_sending_bad_usage_counts_the_errors_and_finishes(endpoint, tmp_path, capsys):
    from orchlib.cli import main
    from orchlib.tasks import save_tasks

    url = endpoint(bad_then_good(completion(usage="lots")))
    tasks = tmp_path / "tasks.jsonl"
    save_tasks([Task(id=f"q{i}", prompt="What is 4*25?", answer="100", checker="numeric") for i in range(3)], tasks)
    assert main(["eval", "--policy", "none", "--policy-endpoint", url, "--model", "m", "--tasks", str(tasks),
                 "--max-in-flight", "1", "--out", str(tmp_path / "out")]) == 0
    metrics = json.loads((tmp_path / "out" / "m" / "metrics.json").read_text())["metrics"]["overall"]
    assert metrics["n"] == 3 and metrics["accuracy"] == 1.0
    lines = (tmp_path / "out" / "m" / "trajectories.jsonl").read_text().splitlines()
    assert [json.loads(line)["errors"] for line in lines] == [{"tool_failure": 1}] * 3


def test_synth_against_a_writer_sending_a_string_usage_is_one_line(endpoint, tmp_path, capsys):
    from orchlib.cli import main

    url = endpoint(lambda body: completion('{"a": 1}', usage="lots"))
    assert main(["synth", "--domain", "a library", "--base-url", url, "--model", "writer", "--out", str(tmp_path),
                 "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "orchlib synth: stage domain: writer: the response's usage is str 'lots', not an object"
