"""An API model as the orchestrator, against a real HTTP server on 127.0.0.1 that plays the model:
scripted tool calls per turn, usage fields, text <tool_call>s, 500s/429s, a hang, arguments that are
not JSON; accounting checked against hand-computed values; many episodes in flight."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchlib.env import Environment
from orchlib.cards import Price, ToolCard, save_card
from orchlib.engines.openai import APIPolicyConfig, OpenAIPolicy
from orchlib.evaluate import evaluate
from orchlib.rollout import RolloutConfig, rollout
from orchlib.tasks import PROFILES, Task
from orchlib.tools import Toolbox
from orchlib.tools.function import FunctionTool
from orchlib.trajectory import read_jsonl

PRICE_IN, PRICE_OUT = 2.0, 8.0    # USD per million tokens, the policy's card
CALL_FEE = 0.01                   # each tool call's price


async def add(a: int, b: int) -> str:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    await asyncio.sleep(0.05)
    return str(a + b)


async def mul(a: int, b: int) -> str:
    """Multiply two integers, slowly.

    Args:
        a: first factor
        b: second factor
    """
    await asyncio.sleep(0.15)
    return str(a * b)


def oracle(question: str) -> str:
    """Answers any question; its answer ends the episode.

    Args:
        question: the question
    """
    return "42"


def toolbox() -> Toolbox:
    fee = Price(per_call=CALL_FEE)
    return Toolbox([FunctionTool.from_function(add, price=fee), FunctionTool.from_function(mul, price=fee),
                    FunctionTool.from_function(oracle, final=True)])


TASK = Task(id="t1", prompt="What is (2+3)*(4*5)?", answer="100", checker="numeric", category="arith",
            preference=PROFILES["thrifty"])


# ---------------------------------------------------------------------------------------------- the fake model
def call(name: str, args, call_id: str = "") -> dict:
    """A `tool_calls` entry; `args` a dict (encoded as OpenAI does) or a raw string."""
    return {"id": call_id or f"id_{name}", "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}


def reply(content: str | None = None, calls: list | None = None, usage: tuple[int, int] | None = (100, 10),
          finish: str = "stop") -> tuple[int, dict, dict]:
    msg: dict = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = calls
    body: dict = {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": msg,
                                                                      "finish_reason": finish}]}
    if usage:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                         "total_tokens": sum(usage)}
    return 200, body, {}


class Model:
    """What the server answers: `respond(body) -> (status, body, headers)` or "hang"; every request is
    kept, and the largest number of requests in flight at once."""

    def __init__(self, respond, delay: float = 0.0):
        self.respond, self.delay = respond, delay
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.active = self.peak = 0

    @staticmethod
    def turn(body: dict) -> int:
        """Which turn of its episode a request is: the assistant messages it already holds."""
        return sum(m["role"] == "assistant" for m in body["messages"])


class Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: more simultaneous connects than that lose their SYN
    # and wait a second for its retransmission, which would be the fake's delay, not orchlib's.
    request_queue_size = 256


@pytest.fixture
def serve():
    state: dict = {}
    servers = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers

        def do_POST(self):  # noqa: N802
            model: Model = state["model"]
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with model.lock:
                model.requests.append(body)
                model.headers.append({k.lower(): v for k, v in self.headers.items()})
                model.active += 1
                model.peak = max(model.peak, model.active)
            try:
                time.sleep(model.delay)
                step = model.respond(body)
                if step == "hang":
                    model.release.wait(10)
                    return
                status, out, headers = step
                payload = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)
            finally:
                with model.lock:
                    model.active -= 1

        def log_message(self, *args):
            pass

    def start(model: Model) -> str:
        state["model"] = model
        if not servers:
            httpd = Server(("127.0.0.1", 0), Handler)
            httpd.daemon_threads = True
            threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
            servers.append(httpd)
        return f"http://127.0.0.1:{servers[0].server_address[1]}/v1"

    yield start
    if "model" in state:
        state["model"].release.set()
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def policy(url: str, **kw) -> OpenAIPolicy:
    kw.setdefault("price", Price(per_m_input=PRICE_IN, per_m_output=PRICE_OUT))
    return OpenAIPolicy(base_url=url, model="fake-gpt", backoff_s=0.01, **kw)


# ---------------------------------------------------------------------------------------------- episodes
def test_multi_turn_episode_with_several_tools_is_priced_and_timed(serve):
    usages = [(120, 15), (200, 20), (260, 5)]

    def respond(body):
        turn = Model.turn(body)
        script = [reply(None, [call("add", {"a": 2, "b": 3}), call("mul", {"a": 4, "b": 5})]),
                  reply("Now multiply.", [call("mul", {"a": 5, "b": 20}, "third")]),
                  reply("The answer is 100.")]
        status, out, headers = script[turn]
        out["usage"] = {"prompt_tokens": usages[turn][0], "completion_tokens": usages[turn][1]}
        return status, out, headers

    model = Model(respond, delay=0.1)
    box = toolbox()
    [t] = rollout(Environment(train=[TASK], tools=box), policy(serve(model)), config=RolloutConfig(max_turns=5))

    assert t.finish_reason == "answer" and t.final_answer == "The answer is 100." and t.outcome == 1.0
    assert t.calls == {"add": 1, "mul": 2} and t.errors == {}
    assert [len(turn.calls) for turn in t.turns] == [2, 1, 0]
    assert [o.content for o in t.turns[0].observations] == ["5", "20"]
    # not trainable: no token ids, the policy's own tokens in meta
    assert t.ids == [] and t.mask == [] and t.num_tokens == 0
    assert t.meta == {"trainable": False, "policy": "fake-gpt", "requests": 3, "tokens_in": 580, "tokens_out": 40}
    assert [turn.tokens_out for turn in t.turns] == [15, 20, 5]
    # money: each turn's usage priced by the policy's card, plus USD 0.01 per tool call (hand-computed)
    own = [(120 * 2 + 15 * 8) / 1e6, (200 * 2 + 20 * 8) / 1e6, (260 * 2 + 5 * 8) / 1e6]  # 3.6e-4, 5.6e-4, 5.6e-4
    assert [turn.cost_usd for turn in t.turns] == pytest.approx([own[0] + 0.02, own[1] + 0.01, own[2]])
    assert t.cost_usd == pytest.approx(0.03148)
    # time: generation is the request's wall time (the server sleeps 0.1 s); the two calls overlap
    for turn in t.turns:
        assert 0.1 <= turn.gen_latency_s < 1.0
        assert turn.latency_s == pytest.approx(turn.gen_latency_s + max((o.latency_s for o in turn.observations),
                                                                        default=0.0))
    assert 0.15 <= t.turns[0].latency_s - t.turns[0].gen_latency_s < 0.15 + 0.15  # mul's 0.15 s, not 0.05 + 0.15
    assert t.latency_s == pytest.approx(sum(turn.latency_s for turn in t.turns))

    # what the server read: the cards' OpenAI export as `tools`, P in the system message, then the
    # conversation with tool messages answering each call id
    first, second, third = model.requests
    assert first["model"] == "fake-gpt" and first["tools"] == box.schemas()
    assert PROFILES["thrifty"].render() in first["messages"][0]["content"]
    assert first["messages"][1] == {"role": "user", "content": TASK.prompt}
    assert [(m["role"], m.get("tool_call_id"), m["content"]) for m in second["messages"][2:]] == [
        ("assistant", None, None), ("tool", "id_add", "5"), ("tool", "id_mul", "20")]
    assert second["messages"][2]["tool_calls"][1]["function"]["name"] == "mul"
    assert third["messages"][-1] == {"role": "tool", "tool_call_id": "third", "content": "100"}


def test_a_final_tool_ends_the_episode_and_the_group_runs_concurrently(serve):
    model = Model(lambda body: reply(None, [call("oracle", {"question": "?"})]), delay=0.2)
    start = time.perf_counter()
    out = rollout(Environment(train=[TASK], tools=toolbox()), policy(serve(model)), config=RolloutConfig(),
                  group_size=8)
    took = time.perf_counter() - start
    assert [t.finish_reason for t in out] == ["final_tool"] * 8 and [t.group_index for t in out] == list(range(8))
    assert all(t.final_answer == "42" and t.outcome == 0.0 for t in out)  # 42 is not 100
    assert model.peak == 8 and took < 8 * 0.2 / 2  # serial would take 1.6 s


def test_episodes_in_flight_are_bounded(serve):
    model = Model(lambda body: reply("100"), delay=0.05)
    tasks = [TASK.model_copy(update={"id": f"t{i}"}) for i in range(12)]
    out = rollout(Environment(train=tasks, tools=toolbox()), policy(serve(model), max_in_flight=3),
                  config=RolloutConfig(), group_size=2)
    assert len(out) == 24 and all(t.outcome == 1.0 for t in out)
    assert [t.task_id for t in out[:4]] == ["t0", "t0", "t1", "t1"]  # task-major, as a local policy's
    assert model.peak == 3


def test_text_tool_calls_are_read_when_the_server_writes_them(serve):
    def respond(body):
        if Model.turn(body) == 0:
            return reply('Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 40, "b": 60}}\n</tool_call>')
        return reply("100")

    model = Model(respond)
    [t] = rollout(Environment(train=[TASK], tools=toolbox()), policy(serve(model)), config=RolloutConfig())
    assert t.calls == {"add": 1} and t.outcome == 1.0 and t.errors == {}
    assert t.turns[0].text.startswith("Let me add.\n<tool_call>")
    # no call ids to answer: the results go back as <tool_response> blocks in a user message
    assert model.requests[1]["messages"][-1] == {"role": "user",
                                                 "content": "<tool_response>\n100\n</tool_response>"}


def test_text_mode_lists_the_tools_in_the_system_message(serve):
    model = Model(lambda body: reply("100"))
    box = toolbox()
    rollout(Environment(train=[TASK], tools=box), policy(serve(model), tool_calling="text"), config=RolloutConfig())
    [body] = model.requests
    assert "tools" not in body
    system = body["messages"][0]["content"]
    assert all(json.dumps(s, ensure_ascii=False) in system for s in box.schemas())


def test_malformed_arguments_are_counted_and_the_model_reads_why(serve):
    def respond(body):
        turn = Model.turn(body)
        if turn == 0:
            return reply(None, [call("add", '{"a": 2, "b": '), call("mul", {"a": 4, "b": 25})])
        if turn == 1:
            return reply("<tool_call>{not json}</tool_call>")
        return reply("100")

    model = Model(respond)
    [t] = rollout(Environment(train=[TASK], tools=toolbox()), policy(serve(model)), config=RolloutConfig(max_turns=5))
    assert t.errors == {"malformed_call": 2} and t.calls == {"mul": 1} and t.outcome == 1.0
    bad, good = t.turns[0].observations
    assert bad.error_kind == "malformed_call" and "not valid JSON" in bad.error and good.content == "100"
    # the model is told, on the call's own id
    told = model.requests[1]["messages"][3]
    assert told["role"] == "tool" and told["tool_call_id"] == "id_add" and "not valid JSON" in told["content"]
    assert "malformed tool call" in model.requests[2]["messages"][-1]["content"]
    assert t.turns[0].cost_usd == pytest.approx((100 * 2 + 10 * 8) / 1e6 + CALL_FEE)  # the bad call ran nothing


def test_retries_then_a_counted_failure_then_the_episode_goes_on(serve):
    steps = [(429, {"error": "slow down"}, {"Retry-After": "0"}), (500, {"error": "boom"}, {}),
             (503, {"error": "down"}, {}),  # max_retries=2: the third try fails the turn
             reply("100")]
    model = Model(lambda body: steps.pop(0))
    [t] = rollout(Environment(train=[TASK], tools=toolbox()), policy(serve(model), max_retries=2),
                  config=RolloutConfig(max_turns=3))
    assert len(model.requests) == 4
    assert t.errors == {"tool_failure": 1} and t.finish_reason == "answer" and t.outcome == 1.0
    failed, answered = t.turns
    [obs] = failed.observations
    assert obs.tool == "" and "gave up after 3 attempts" in obs.error and "HTTP 503" in obs.error
    assert failed.cost_usd == 0.0 and failed.tokens_out == 0 and failed.latency_s == failed.gen_latency_s
    assert answered.cost_usd == pytest.approx((100 * 2 + 10 * 8) / 1e6)
    assert t.meta["requests"] == 2 and t.meta["tokens_in"] == 100
    # the failed turn left nothing in the conversation: the retry of the turn sends the same messages
    assert model.requests[3]["messages"] == model.requests[0]["messages"]


def test_retried_statuses_cost_nothing_when_a_reply_follows(serve):
    steps = [(429, {"error": "slow down"}, {"Retry-After": "0"}), (500, {"error": "boom"}, {}), reply("100")]
    model = Model(lambda body: steps.pop(0))
    [t] = rollout(Environment(train=[TASK], tools=toolbox()), policy(serve(model), max_retries=2),
                  config=RolloutConfig())
    assert len(model.requests) == 3 and t.errors == {} and t.num_turns == 1 and t.outcome == 1.0


def test_a_hung_request_is_a_counted_timeout(serve):
    steps = ["hang", reply("100")]
    model = Model(lambda body: steps.pop(0))
    [t] = rollout(Environment(train=[TASK], tools=toolbox()), policy(serve(model), timeout_s=0.3, max_retries=0),
                  config=RolloutConfig())
    assert t.errors == {"timeout": 1} and t.outcome == 1.0
    assert t.turns[0].observations[0].error_kind == "timeout"
    assert 0.3 <= t.turns[0].gen_latency_s < 2.0


def test_an_unreadable_reply_is_a_counted_failure(serve):
    steps = [(200, {"choices": []}, {}), (200, {"choices": [{"message": "hi"}]}, {}),
             (200, {"choices": [{"message": {"role": "assistant", "content": [{"type": "text", "text": "10"},
                                                                               {"type": "text", "text": "0"}]}}]}, {})]
    model = Model(lambda body: steps.pop(0))
    [t] = rollout(Environment(train=[TASK], tools=toolbox()), policy(serve(model)), config=RolloutConfig())
    assert t.errors == {"tool_failure": 2} and t.final_answer == "100" and t.outcome == 1.0
    assert "unexpected response" in t.turns[0].observations[0].error


def test_usage_missing_is_estimated_and_still_priced(serve):
    model = Model(lambda body: reply("The answer is 100.", usage=None))
    [t] = rollout(Environment(train=[TASK], tools=toolbox()), policy(serve(model)), config=RolloutConfig())
    assert t.meta["tokens_in"] > 10 and t.meta["tokens_out"] > 0
    assert t.cost_usd == pytest.approx((t.meta["tokens_in"] * PRICE_IN + t.meta["tokens_out"] * PRICE_OUT) / 1e6)


def test_length_cut_and_max_turns(serve):
    model = Model(lambda body: reply("The answer is", finish="length"))
    [t] = rollout(Environment(train=[TASK], tools=toolbox()), policy(serve(model)), config=RolloutConfig())
    assert t.finish_reason == "length"
    model = Model(lambda body: reply(None, [call("add", {"a": 1, "b": 1})]))
    [t] = rollout(Environment(train=[TASK], tools=toolbox()), policy(serve(model)), config=RolloutConfig(max_turns=2))
    assert t.finish_reason == "max_turns" and t.num_turns == 2 and t.calls == {"add": 2}


def test_preference_placement(serve):
    model = Model(lambda body: reply("100"))
    url = serve(model)
    rollout(Environment(train=[TASK], tools=toolbox()), policy(url), config=RolloutConfig(preference_at="user"))
    user = model.requests[-1]["messages"][1]["content"]
    assert user == TASK.prompt + "\n\n" + PROFILES["thrifty"].render()
    with pytest.raises(ValueError, match="assistant"):
        rollout(Environment(train=[TASK], tools=toolbox()), policy(url),
                config=RolloutConfig(preference_at="assistant"))


# ---------------------------------------------------------------------------------------------- downstream
def test_evaluate_viz_and_widgets_take_api_trajectories(serve, tmp_path):
    from orchlib import viz
    from orchlib.widgets import trajectory_html

    steps = {0: reply(None, [call("add", {"a": 2, "b": "x"})]), 1: reply("100")}
    model = Model(lambda body: steps[Model.turn(body)])
    tasks = [TASK, TASK.model_copy(update={"id": "t2"})]
    report = evaluate(policy(serve(model)), Environment(test=tasks, tools=toolbox()), name="gpt")
    s = report.metrics["overall"]
    assert s["n"] == 2 and s["accuracy"] == 1.0 and s["calls_per_task"] == 1.0
    assert s["errors"]["by_kind"] == {"schema_violation": 2} and s["errors"]["by_tool"] == {"add": 2}
    assert s["cost_usd"] == pytest.approx(2 * (100 * 2 + 10 * 8) / 1e6)  # a rejected call is not charged
    report.save(tmp_path / "gpt")
    again = read_jsonl(tmp_path / "gpt" / "trajectories.jsonl")
    assert again == report.trajectories and again[0].meta["trainable"] is False
    assert len(viz.timeline(again[0]).data) >= 1
    assert viz.tool_distribution(again).data
    assert "add" in trajectory_html(again[0])


# ---------------------------------------------------------------------------------------------- configuration
def test_config_needs_an_endpoint_or_a_card(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="base_url and model"):
        APIPolicyConfig(model="m")
    with pytest.raises(ValueError, match="not both"):
        APIPolicyConfig(card="x.yaml", model="m")
    with pytest.raises(ValueError, match="extra"):
        APIPolicyConfig(base_url="http://x/v1", model="m", temprature=0)
    card = ToolCard(name="gpt", kind="llm", description="GPT as a policy",
                    backend={"client": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "gpt-x",
                             "api_key_env": "ORCHLIB_TEST_KEY", "temperature": 0.5},
                    price=Price(per_m_input=1.25, per_m_output=10))
    path = save_card(card, tmp_path / "gpt.yaml")
    monkeypatch.delenv("ORCHLIB_TEST_KEY", raising=False)
    with pytest.raises(ValueError, match="ORCHLIB_TEST_KEY"):
        OpenAIPolicy.from_card(path)
    monkeypatch.setenv("ORCHLIB_TEST_KEY", "sk-test")
    p = OpenAIPolicy.from_card(path, temperature=0.0, name="gpt-5")
    assert p.name == "gpt-5" and p.price == card.price and p.settings.model == "gpt-x"
    assert p.settings.temperature == 0.0  # the config overrides the card's backend
    fn = save_card(ToolCard.from_function(oracle), tmp_path / "oracle.yaml")
    with pytest.raises(ValueError, match="needs an `llm` card"):
        OpenAIPolicy.from_card(fn)


def test_the_request_carries_the_key_from_the_environment_and_the_settings(serve, monkeypatch):
    monkeypatch.setenv("ORCHLIB_TEST_KEY", "sk-secret")
    model = Model(lambda body: reply("100"))
    p = policy(serve(model), api_key_env="ORCHLIB_TEST_KEY", temperature=0.0, max_tokens=64,
               extra_body={"reasoning_effort": "low"})
    rollout(Environment(train=[TASK], tools=toolbox()), p, config=RolloutConfig())
    [body], [headers] = model.requests, model.headers
    assert headers["authorization"] == "Bearer sk-secret"
    assert body["temperature"] == 0.0 and body["max_tokens"] == 64 and body["reasoning_effort"] == "low"


# ---------------------------------------------------------------------------------------------- orchlib eval
def test_eval_compares_api_policies_in_one_table_graded_by_the_judge(serve, tmp_path, capsys):
    from orchlib.cli import main
    from orchlib.tasks import save_tasks

    def respond(body):
        if body["messages"][0]["role"] != "system":  # the judge: its prompt is a single user message
            said = body["messages"][-1]["content"].split("[response]: ")[1].split("\n")[0]
            return reply("GRADE: CORRECT" if said == "100" else "GRADE: INCORRECT", usage=(300, 10))
        return reply("100" if body["model"] == "good" else "7")

    model = Model(respond)
    url = serve(model)
    tasks = tmp_path / "tasks.jsonl"
    save_tasks([Task(id=f"q{i}", prompt="What is 4*25?", answer="100", checker="judge") for i in range(3)], tasks)
    config = tmp_path / "eval.yaml"
    config.write_text(f"""policies:
  - name: good
    api: {{base_url: "{url}", model: good, price: {{per_m_input: 2, per_m_output: 8}}}}
  - name: bad
    api: {{base_url: "{url}", model: bad, tool_calling: text}}
tasks: {tasks}
judge: {{base_url: "{url}", model: grader, price: {{per_m_input: 1}}}}
out: {tmp_path / "out"}
""")
    assert main(["eval", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("good ", "bad "))}
    assert rows["good"][1:3] == ["3", "1.000"] and rows["bad"][1:3] == ["3", "0.000"]
    assert rows["good"][3] == f"{(100 * 2 + 10 * 8) / 1e6:.5f}" and rows["bad"][3] == "0.00000"
    # one grade per distinct (question, answer, reference): two requests for six episodes
    assert "judge grader: 6 grades (4 from cache, 2 requests), 0 errors, $0.0006" in out
    assert read_jsonl(tmp_path / "out" / "good" / "trajectories.jsonl")[0].meta["trainable"] is False
    assert (tmp_path / "out" / "judge_cache.json").is_file()

    # the same with flags, and the cache of the first run answers every grade
    before = len(model.requests)
    assert main(["eval", "--policy", "none", "--policy-endpoint", url, "--model", "good", "--tasks", str(tasks),
                 "--judge-endpoint", url, "--judge-model", "grader", "--out", str(tmp_path / "out")]) == 0
    assert "judge grader: 3 grades (3 from cache, 0 requests)" in capsys.readouterr().out
    assert len(model.requests) == before + 3  # the policy's three episodes only


def test_eval_rejects_half_an_endpoint_and_bad_files(tmp_path, capsys):
    from orchlib.cli import main

    assert main(["eval", "--policy-endpoint", "http://127.0.0.1:9/v1"]) == 2
    assert "--policy-endpoint and --model go together" in capsys.readouterr().err
    bad = tmp_path / "eval.yaml"
    bad.write_text("policies:\n  - name: x\n    api: {model: m}\n")
    assert main(["eval", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3:" in err and "base_url and model" in err
    bad.write_text("policies:\n  - name: x\n    local: tiny\n    api: {base_url: 'http://x/v1', model: m}\n")
    assert main(["eval", "--config", str(bad)]) == 2
    assert "exactly one of local or api" in capsys.readouterr().err


def test_the_example_eval_file_is_valid():
    from pathlib import Path

    from orchlib.commands.eval import EvalFileConfig
    from orchlib.configfile import load_config

    cfg = load_config(Path(__file__).parents[1] / "examples" / "eval_api.yaml", EvalFileConfig)
    assert [p.name for p in cfg.policies] == ["trained", "gpt-5", "qwen3-8b"]
    assert cfg.policies[1].api.card and cfg.judge.model == "gpt-5-mini"


def test_a_dotted_tool_name_goes_out_as_openai_allows_and_comes_back_as_the_card_names(serve):
    def respond(body):
        sent = [t["function"]["name"] for t in body["tools"]]
        assert all("." not in n for n in sent), sent  # OpenAI refuses dots in function names
        if Model.turn(body) == 0:
            return reply(None, [call("math_add", {"a": 2, "b": 3})])
        return reply("The answer is 5.")

    model = Model(respond)
    box = Toolbox([FunctionTool.from_function(add, name="math.add"), FunctionTool.from_function(mul)])
    task = TASK.model_copy(update={"prompt": "What is 2+3?", "answer": "5"})
    [t] = rollout(Environment(train=[task], tools=box), policy(serve(model)), config=RolloutConfig(max_turns=3))
    assert t.errors == {} and t.calls == {"math.add": 1} and t.outcome == 1.0
    assert t.turns[0].observations[0].content == "5"
    assert sorted(f["function"]["name"] for f in model.requests[0]["tools"]) == ["math_add", "mul"]
