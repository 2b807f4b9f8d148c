"""The LLM judge against a real HTTP server on 127.0.0.1 that plays the grader: verdicts read back,
cost from usage, the cache (in memory and on disk), errors counted and never silently 0."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchlib.env import Environment
from orchlib.cards import Price, ToolCard, save_card
from orchlib.judge import DEFAULT_JUDGE_PROMPT, Judge, JudgeConfig, read_verdict, set_judge, use_judge
from orchlib.tasks import Task

PRICE = {"per_m_input": 0.25, "per_m_output": 2.0}


class Grader:
    """Answers CORRECT when the prompt's response holds the reference, else INCORRECT; or follows
    `steps` (status, reply text) first."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.prompts: list[str] = []
        self.bodies: list[dict] = []

    def answer(self, body: dict) -> tuple[int, str]:
        prompt = body["messages"][-1]["content"]
        self.prompts.append(prompt)
        self.bodies.append(body)
        if self.steps:
            return self.steps.pop(0)
        response = prompt.split("[response]: ")[1].split("\n")[0]
        reference = prompt.split("[reference answer]: ")[1].split("\n")[0]
        return 200, "Matches.\nGRADE: CORRECT" if reference in response else "Differs.\nGRADE: INCORRECT"


class Server(ThreadingHTTPServer):
    request_queue_size = 256  # the default 5 drops simultaneous connects for a second


@pytest.fixture
def grader():
    state: dict = {}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, text = state["grader"].answer(body)
            out = ({"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}], "usage": {"prompt_tokens": 400, "completion_tokens": 20}}
                   if status == 200 else {"error": text})
            payload = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    httpd = Server(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def use(g: Grader) -> str:
        state["grader"] = g
        return f"http://127.0.0.1:{httpd.server_address[1]}/v1"

    yield use
    httpd.shutdown()
    httpd.server_close()


def judge(url: str, **kw) -> Judge:
    return Judge(base_url=url, model="grader", price=PRICE, **kw)


TASK = Task(id="q1", prompt="Capital of France?", answer="Paris", checker="judge")


def test_read_verdict():
    assert read_verdict("Fine.\nGRADE: CORRECT") == 1.0
    assert read_verdict("GRADE: INCORRECT") == 0.0
    assert read_verdict("grade: correct") == 1.0
    assert read_verdict("GRADE: CORRECT ... on reflection GRADE: **INCORRECT**") == 0.0  # the last one counts
    assert read_verdict("GRADE: 0.75") == 0.75 and read_verdict("GRADE: 1") == 1.0
    assert read_verdict("GRADE: 1.5") is None and read_verdict("CORRECT") is None and read_verdict("") is None


def test_grades_are_priced_and_cached(grader):
    g = Grader()
    j = judge(grader(g))
    right = j.grade("Capital of France?", "It is Paris.", "Paris")
    wrong = j.grade("Capital of France?", "Lyon", "Paris")
    assert (right.score, wrong.score) == (1.0, 0.0) and not right.cached and right.error is None
    assert right.cost_usd == pytest.approx((400 * 0.25 + 20 * 2.0) / 1e6) and right.tokens_in == 400
    again = j.grade("Capital of France?", "It is Paris.", "Paris")  # same triple: no request
    assert again.cached and again.score == 1.0 and len(g.prompts) == 2
    s = j.stats
    assert (s.grades, s.cache_hits, s.requests, s.errors) == (3, 1, 2, 0)
    assert s.cost_usd == pytest.approx(2 * (400 * 0.25 + 20 * 2.0) / 1e6)
    # the prompt shows the three parts where the template puts them
    assert g.prompts[0] == DEFAULT_JUDGE_PROMPT.format(question="Capital of France?", answer="It is Paris.",
                                                       reference="Paris")
    # a changed question is another key
    j.grade("Capital of France, in one word?", "It is Paris.", "Paris")
    assert len(g.prompts) == 3


def test_failures_are_counted_warned_and_not_cached(grader):
    g = Grader((500, "boom"), (200, "I think so."))  # a 500 (no retries here), then no GRADE line
    j = judge(grader(g), max_retries=0)
    with pytest.warns(UserWarning, match="scored 0; counted"):
        failed = j.grade("q", "a", "r")
    assert failed.score == 0.0 and "HTTP 500" in failed.error
    with pytest.warns(UserWarning, match="no 'GRADE"):
        unread = j.grade("q", "a", "r")
    assert unread.score == 0.0 and "I think so." in unread.error
    ok = j.grade("q", "a", "a")  # the server grades by its own rule again
    assert ok.error is None and ok.score == 1.0
    assert j.stats.errors == 2 and [e["error"] for e in j.errors] == [failed.error, unread.error]
    j.grade("q", "a", "r")  # not cached after the errors: asked again
    assert len(g.prompts) == 4


def test_the_judge_checker_scores_tasks_and_its_cost_stays_apart(grader):
    g = Grader()
    url = grader(g)
    with pytest.raises(ValueError, match="no judge is set"):
        TASK.score("Paris")
    j = judge(url)
    with use_judge(j):
        assert TASK.score("The capital is Paris.") == 1.0
        assert TASK.score("Marseille") == 0.0
        assert TASK.score(None) == 0.0  # no answer: nothing to grade, no request
    assert len(g.prompts) == 2 and j.stats.grades == 2
    with pytest.raises(ValueError, match="no judge is set"):
        TASK.score("Paris")
    # a task may name its own judge; judges named alike share one cache
    named = TASK.model_copy(update={"meta": {"judge": {"base_url": url, "model": "grader"}}})
    assert named.score("Paris!") == 1.0 and named.score("Paris!") == 1.0
    assert len(g.prompts) == 3
    with pytest.raises(ValueError, match="reference answer"):
        with use_judge(j):
            TASK.model_copy(update={"answer": None}).score("x")


def test_an_api_policy_graded_by_the_judge(grader):
    """End to end: episodes of a policy served over HTTP, scored by a judge over HTTP, concurrently;
    the episodes' cost is the policy's, the judge's is its own."""
    from orchlib.engines.openai import OpenAIPolicy
    from orchlib.rollout import RolloutConfig, rollout
    from orchlib.tools import Toolbox

    g = Grader()
    policy_turns = iter(range(1000))  # next() on a range iterator is atomic under the GIL

    def both(body):  # one server plays the policy (it has a system message) and the grader
        if body["messages"][0]["role"] == "system":
            return 200, "Paris" if next(policy_turns) % 2 else "Lyon"
        return Grader.answer(g, body)

    g.answer = both  # type: ignore[method-assign]
    url = grader(g)
    policy = OpenAIPolicy(base_url=url, model="policy", price=Price(per_m_input=1.0, per_m_output=4.0))
    j = judge(url)
    with use_judge(j):
        out = rollout(Environment(train=[TASK], tools=Toolbox([])), policy, config=RolloutConfig(), group_size=6)
    assert sorted(t.outcome for t in out) == [0.0] * 3 + [1.0] * 3
    assert all(t.cost_usd == pytest.approx((400 * 1.0 + 20 * 4.0) / 1e6) for t in out)  # no judge money here
    assert j.stats.requests == 2 and j.stats.cache_hits == 4  # two distinct answers among six
    assert j.stats.cost_usd == pytest.approx(2 * (400 * 0.25 + 20 * 2.0) / 1e6)


def test_a_custom_prompt_and_partial_credit(grader):
    g = Grader((200, "Half right. GRADE: 0.5"))
    j = judge(grader(g), prompt="Q: {question}\nGot: {answer}\nWant: {reference}\nEnd with GRADE: <0..1>")
    assert j.grade("q", "a", "r").score == 0.5
    assert g.prompts == ["Q: q\nGot: a\nWant: r\nEnd with GRADE: <0..1>"]
    with pytest.raises(ValueError, match="unknown field"):
        JudgeConfig(base_url="http://x/v1", model="m", prompt="{answer} {reference} {solution}")
    with pytest.raises(ValueError, match="must show"):
        JudgeConfig(base_url="http://x/v1", model="m", prompt="{question} {answer}")
    with pytest.raises(ValueError, match="literal brace"):
        JudgeConfig(base_url="http://x/v1", model="m", prompt="{answer} {reference} {")
    with pytest.raises(ValueError, match="base_url and model"):
        JudgeConfig(model="m")
    with pytest.raises(ValueError, match="either card or price, temperature, not both"):
        JudgeConfig(card="grader.yaml", temperature=0, price={"per_m_input": 1})


def test_the_cache_file_survives_the_judge_and_belongs_to_its_prompt(grader, tmp_path):
    g = Grader()
    url = grader(g)
    path = tmp_path / "judge.json"
    j = judge(url, cache=str(path))
    j.grade("q", "x Paris", "Paris")
    j.grade("q", "Lyon", "Paris")
    j.save_cache()
    again = judge(url, cache=str(path))
    assert again.grade("q", "x Paris", "Paris").cached and again.grade("q", "Lyon", "Paris").score == 0.0
    assert len(g.prompts) == 2
    other = judge(url, cache=str(path), prompt=DEFAULT_JUDGE_PROMPT + "\nBe strict.")
    assert not other.grade("q", "Lyon", "Paris").cached and len(g.prompts) == 3
    other.save_cache()  # both judges' grades are kept in the one file
    assert len(json.loads(path.read_text())) == 2
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not a judge cache"):
        judge(url, cache=str(path))


def test_a_card_judges(grader, tmp_path):
    g = Grader()
    url = grader(g)
    card = ToolCard(name="grader", kind="llm", description="a grader",
                    parameters={"type": "object", "properties": {"prompt": {"type": "string"}}},
                    backend={"client": "openai", "base_url": url, "model": "card-grader", "temperature": 0},
                    price=Price(**PRICE))
    j = Judge(card=str(save_card(card, tmp_path / "grader.yaml")))
    assert j.grade("q", "Paris", "Paris").score == 1.0
    assert g.bodies[0]["model"] == "card-grader" and g.bodies[0]["temperature"] == 0
    assert j.stats.cost_usd == pytest.approx((400 * 0.25 + 20 * 2.0) / 1e6)
    fn = ToolCard(name="f", kind="function", description="x", backend={"callable": "math:sqrt"})
    with pytest.raises(ValueError, match="needs an `llm` card"):
        Judge(card=str(save_card(fn, tmp_path / "f.yaml")))
    set_judge(j)  # installed for the process until removed
    try:
        assert TASK.score("Paris") == 1.0 and j.stats.requests == 2
    finally:
        set_judge(None)
