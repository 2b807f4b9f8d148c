"""orchlib.synth end to end against a loopback server playing the writer model with canned replies:
a small library domain, good and deliberately bad tools and tasks, every refusal reason hit once."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchlib.env import Environment
from orchlib.chat import render_call
from orchlib.cli import main
from orchlib.models import build_tokenizer
from orchlib.rollout import RolloutConfig, rollout
from orchlib.synth import CodeRefused, SynthConfig, SynthError, check_source, synthesize
from orchlib.synth.dedup import jaccard, tokens
from orchlib.tasks import load_tasks
from orchlib.testing import ScriptedEngine
from orchlib.tools import Toolbox

OUTLINE = {"name": "library", "description": "A small public library: books, members and loans.",
           "entities": [{"name": "books", "fields": ["title", "author", "copies"]}],
           "operations": ["look a book up", "borrow", "return", "add copies"]}

_RECORD = {"type": "object"}
SCHEMA = {
    "type": "object", "required": ["books", "members", "loans"],
    "properties": {
        "books": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["title", "author", "copies"],
            "properties": {"title": {"type": "string"}, "author": {"type": "string"},
                           "copies": {"type": "integer", "minimum": 0}}}},
        "members": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["name", "loans"],
            "properties": {"name": {"type": "string"}, "loans": {"type": "array", "items": {"type": "string"}}}}},
        "loans": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["book_id", "member_id", "status"],
            "properties": {"book_id": {"type": "string"}, "member_id": {"type": "string"},
                           "status": {"enum": ["out", "returned"]}}}},
    },
}
RECORDS = {
    "books": {"B1": {"title": "Dune", "author": "Frank Herbert", "copies": 2},
              "B2": {"title": "Emma", "author": "Jane Austen", "copies": 0},
              "B3": {"title": "Beloved", "author": "Toni Morrison", "copies": 1}},
    "members": {"M1": {"name": "Ada Lovelace", "loans": ["L1"]}, "M2": {"name": "Alan Turing", "loans": []}},
    "loans": {"L1": {"book_id": "B2", "member_id": "M1", "status": "out"}},
}

GET_BOOK = '''
def get_book(env: dict, book_id: str) -> str:
    """A book's title, author and the copies on the shelf.

    Args:
        book_id: the book id, e.g. "B1".
    """
    if book_id not in env["books"]:
        raise ValueError(f"no book {book_id!r}")
    b = env["books"][book_id]
    return f"{book_id}: {b['title']} by {b['author']}, {b['copies']} copies available"
'''
BORROW = '''
from __future__ import annotations


def borrow_book(env: dict, member_id: str, book_id: str) -> str:
    """Lend a book on the shelf to a member.

    Args:
        member_id: the member id, e.g. "M1".
        book_id: the book id, e.g. "B1".
    """
    if member_id not in env["members"] or book_id not in env["books"]:
        raise ValueError("unknown member or book")
    if env["books"][book_id]["copies"] < 1:
        raise ValueError(f"no copy of {book_id} is on the shelf")
    loan_id = f"L{len(env['loans']) + 1}"
    env["books"][book_id]["copies"] -= 1
    env["loans"][loan_id] = {"book_id": book_id, "member_id": member_id, "status": "out"}
    env["members"][member_id]["loans"].append(loan_id)
    return f"loan {loan_id}: {book_id} lent to {member_id}"
'''
RETURN = '''
def return_book(env: dict, loan_id: str) -> str:
    """Take a lent book back.

    Args:
        loan_id: the loan id, e.g. "L1".
    """
    loan = env["loans"].get(loan_id)
    if loan is None or loan["status"] != "out":
        raise ValueError(f"loan {loan_id} is not out")
    loan["status"] = "returned"
    env["books"][loan["book_id"]]["copies"] += 1
    return f"loan {loan_id} returned"
'''
ADD = '''
import math


def add_copies(env: dict, book_id: str, n: int) -> str:
    """Put more copies of a book on the shelf.

    Args:
        book_id: the book id.
        n: how many copies.
    """
    env["books"][book_id]["copies"] += int(math.floor(n))  # no check on n: a negative n breaks the schema
    return f"{book_id} now has {env['books'][book_id]['copies']} copies"
'''
EXPORT = '''
import os


def export_catalog(env: dict) -> str:
    """Write the catalog to disk."""
    return os.getcwd()
'''
BROKEN = '''
def renew_loan(env: dict, loan_id: str) -> str
    """Renew a loan."""
    return loan_id
'''
TOOLS = {"tools": [{"name": "get_book", "writes": False, "code": GET_BOOK},
                   {"name": "borrow_book", "writes": True, "code": BORROW},
                   {"name": "return_book", "writes": True, "code": RETURN},
                   {"name": "add_copies", "writes": True, "code": ADD},
                   {"name": "export_catalog", "writes": False, "code": EXPORT},      # forbidden_code
                   {"name": "renew_loan", "writes": True, "code": BROKEN}]}         # does_not_load


def _t(prompt, golden, changes, required, answer, instructions=None, difficulty="easy"):
    return {"instructions": instructions or f"You are a library member. {prompt}", "prompt": prompt,
            "golden": [{"name": n, "arguments": a} for n, a in golden], "changes": changes,
            "required": required, "answer": answer, "difficulty": difficulty}


BORROW_CALLS = [("get_book", {"book_id": "B3"}), ("borrow_book", {"member_id": "M2", "book_id": "B3"})]
TASKS = {"tasks": [
    _t("How many copies of book B1 are on the shelf?", [("get_book", {"book_id": "B1"})], [], ["2"],
       "Dune has 2 copies on the shelf."),
    _t("I am member M2; please lend me book B3.", BORROW_CALLS, ["books.B3.copies", "loans"], ["L2"],
       "Beloved is yours: your loan is L2.", difficulty="medium"),
    _t("I am returning my loan L1.", [("return_book", {"loan_id": "L1"})], ["loans.L1.status", "books.B2.copies"],
       ["returned"], "Loan L1 is returned, thank you."),
    _t("Three new copies of B1 arrived; add them.", [("add_copies", {"book_id": "B1", "n": 3})],
       ["books.B1.copies"], ["5"], "Dune now has 5 copies.", difficulty="hard"),
    # deliberately bad, one per reason
    _t("How many copies of book B3 are on the shelf?", [("get_book", {"book_id": "B3"})], [], ["1"],
       "Beloved has 1 copy."),                                                              # duplicate_text
    _t("Alan Turing (M2) would like to take Beloved (B3) home.", BORROW_CALLS, ["books.B3.copies", "loans"],
       ["L2"], "Loan L2 is yours.", difficulty="medium"),                                  # duplicate_actions
    _t("Member M1 wants to borrow Emma (B2).", [("borrow_book", {"member_id": "M1", "book_id": "B2"})],
       ["books.B2.copies"], ["L2"], "Loan L2."),                                           # golden_fails
    _t("Has loan L1 come back yet?", [("get_book", {"book_id": "B2"})], ["loans.L1.status"], ["out"],
       "Not yet."),                                                                         # no_state_change
    _t("Who has Emma, by Jane Austen?", [("return_book", {"loan_id": "L1"})], [], ["returned"],
       "It is back."),                                                                      # undeclared_change
    _t("Five copies of Beloved (B3) were lost; take them off.", [("add_copies", {"book_id": "B3", "n": -5})],
       ["books.B3.copies"], ["-4"], "Done."),                                               # breaks_schema
    _t("What year was Beloved (B3) published?", [("get_book", {"book_id": "B3"})], [], ["1987"],
       "In 1987."),                                                                         # unsupported_output
    _t("Export the whole catalog for me.", [("export_catalog", {})], [], [], "Done."),      # malformed
]}

# Canned usage per stage (prompt, completion tokens) and the writer's price, to check the cost report.
USAGE = {"domain": (120, 80), "schema": (300, 450), "tools": (700, 1300), "tasks": (1500, 2600)}
PRICE = {"per_m_input": 1.25, "per_m_output": 10.0}
REPLIES = {"domain": json.dumps(OUTLINE), "schema": json.dumps({"schema": SCHEMA, "records": RECORDS}),
           "tools": json.dumps(TOOLS), "tasks": "```json\n" + json.dumps(TASKS, indent=1) + "\n```"}


@contextlib.contextmanager
def serve(replies: dict[str, str]):
    """The writer model on 127.0.0.1: answers each stage (named by its prompt) with its canned reply.
    Yields the base URL and the list of stages asked, in order."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            stage = body["messages"][-1]["content"].split("\n", 1)[0].removeprefix("STAGE: ")
            seen.append(stage)
            tin, tout = USAGE[stage]
            data = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": replies[stage]}}],
                               "usage": {"prompt_tokens": tin, "completion_tokens": tout}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def server():
    replies = dict(REPLIES)
    with serve(replies) as (url, seen):
        yield url, seen, replies


@pytest.fixture
def fresh_import(monkeypatch):
    """The domain package imported from this test's folder, not a copy another test left in sys.modules."""
    for name in [m for m in sys.modules if m == "synth_library" or m.startswith("synth_library.")]:
        monkeypatch.delitem(sys.modules, name)
    yield monkeypatch
    for name in [m for m in sys.modules if m == "synth_library" or m.startswith("synth_library.")]:
        del sys.modules[name]


def _config(url: str, **kw) -> SynthConfig:
    return SynthConfig(domain="a small public library", n_tools=6, n_tasks=12, price=PRICE,
                       llm={"model": "writer-1", "base_url": url, "max_retries": 0}, **kw)


def test_refusals_counted_by_reason(server, tmp_path):
    url, seen, _ = server
    path, report = synthesize(_config(url), tmp_path, progress=False)
    assert seen == ["domain", "schema", "tools", "tasks"]
    assert report.stages["domain"].kept == 1 and report.stages["schema"].kept == 1
    assert report.stages["tools"].kept == 4
    assert report.stages["tools"].refused == {"forbidden_code": 1, "does_not_load": 1}
    assert report.stages["tasks"].kept == 4
    assert report.stages["tasks"].refused == {r: 1 for r in (
        "duplicate_text", "duplicate_actions", "golden_fails", "no_state_change", "undeclared_change",
        "breaks_schema", "unsupported_output", "malformed")}
    assert "'os'" in report.stages["tools"].examples["forbidden_code"]
    assert sorted(p.name for p in (path / "cards").iterdir()) == [
        "add_copies.yaml", "borrow_book.yaml", "get_book.yaml", "return_book.yaml"]
    assert json.loads((path / "database.json").read_text()) == RECORDS
    assert json.loads((path / "report.json").read_text())["stages"]["tasks"]["kept"] == 4


def _replayed_outcomes(folder) -> tuple[list[float], list[float], list]:
    """Outcomes of the folder's tasks when a scripted policy makes the golden calls and answers, and when
    it only answers (no write), through the cards as the trainer loads them; and the first run's envs."""
    tasks = load_tasks(folder / "tasks.jsonl")
    box = Toolbox.load(folder / "cards")
    scripts = {t.id: [render_call(c) for c in t.golden.calls] + [t.golden.answer] for t in tasks}
    config = RolloutConfig(max_turns=6, max_new_tokens=96)
    trajs, envs = rollout(Environment(train=tasks, tools=box), ScriptedEngine(build_tokenizer(), scripts, tasks=tasks),
                          config=config, return_states=True)
    answer_only = {t.id: [t.golden.answer] for t in tasks}
    lazy = rollout(Environment(train=tasks, tools=box), ScriptedEngine(build_tokenizer(), answer_only, tasks=tasks),
                   config=config)
    return [t.outcome for t in trajs], [t.outcome for t in lazy], envs


def test_kept_tasks_load_and_score_one_when_golden_actions_are_replayed(server, tmp_path, fresh_import):
    url, _, _ = server
    path, _ = synthesize(_config(url), tmp_path, progress=False)
    fresh_import.syspath_prepend(str(tmp_path))
    assert [t.meta["difficulty"] for t in load_tasks(path / "tasks.jsonl")] == ["easy", "medium", "easy", "hard"]
    golden, lazy, envs = _replayed_outcomes(path)
    assert golden == [1.0] * 4
    assert envs[1]["loans"]["L2"] == {"book_id": "B3", "member_id": "M2", "status": "out"}
    # the checker is not a rubber stamp: the write tasks without their writes score 0
    assert lazy == [1.0, 0.0, 0.0, 0.0]


SHIPPED = Path(__file__).resolve().parents[1] / "orchlib" / "synth" / "library"


def test_the_shipped_library_is_what_the_pipeline_makes_of_the_canned_replies(server, tmp_path):
    url, _, _ = server
    path, _ = synthesize(_config(url, package="orchlib.synth.library"), tmp_path, progress=False)
    made = sorted(p.relative_to(path) for p in path.rglob("*") if p.is_file())
    shipped = sorted(p.relative_to(SHIPPED) for p in SHIPPED.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert made == shipped
    for rel in made:
        assert (path / rel).read_text() == (SHIPPED / rel).read_text(), f"{rel} differs: regenerate it (see below)"


def test_the_shipped_library_loads_and_scores_offline():
    golden, lazy, _ = _replayed_outcomes(SHIPPED)   # no sys.path change: it is a subpackage of orchlib
    assert golden == [1.0] * 4 and lazy == [1.0, 0.0, 0.0, 0.0]


def test_second_run_resumes_from_cache_without_requests(server, tmp_path):
    url, seen, replies = server
    _, first = synthesize(_config(url), tmp_path, progress=False)
    assert len(seen) == 4 and first.llm.requests == 4 and first.llm.cached == 0
    replies.clear()                                  # any request now would fail with a KeyError server-side
    _, second = synthesize(_config(url), tmp_path, progress=False)
    assert len(seen) == 4 and second.llm.requests == 0 and second.llm.cached == 4
    assert second.stages == first.stages
    assert second.llm.cost_usd == pytest.approx(first.llm.cost_usd) and second.llm.cost_usd_this_run == 0.0


def test_a_stopped_run_resumes_at_the_stage_it_stopped(server, tmp_path):
    url, seen, replies = server
    replies["tasks"] = "not json"
    with pytest.raises(SynthError, match="stage tasks: the reply is not JSON"):
        synthesize(_config(url), tmp_path, progress=False)
    assert not (tmp_path / "synth_library").exists()   # nothing half-written
    replies["tasks"] = REPLIES["tasks"]
    _, report = synthesize(_config(url), tmp_path, progress=False)
    assert seen == ["domain", "schema", "tools", "tasks", "tasks"]
    assert report.llm.requests == 1 and report.llm.cached == 3


def test_cost_report_is_the_price_of_the_canned_usage(server, tmp_path):
    url, _, _ = server
    _, report = synthesize(_config(url), tmp_path, progress=False)
    tin = 120 + 300 + 700 + 1500
    tout = 80 + 450 + 1300 + 2600
    assert (report.llm.tokens_in, report.llm.tokens_out) == (tin, tout)
    # 2620 * 1.25 / 1e6 + 4430 * 10 / 1e6 = 0.003275 + 0.0443
    assert report.llm.cost_usd == pytest.approx(0.047575, rel=1e-12)
    assert report.llm.cost_usd_this_run == pytest.approx(0.047575, rel=1e-12)
    assert "$0.047575" in report.table()


def test_seed_records_that_break_the_schema_stop_the_run(server, tmp_path):
    url, _, replies = server
    bad = json.loads(json.dumps(RECORDS))
    bad["books"]["B1"]["copies"] = -1
    replies["schema"] = json.dumps({"schema": SCHEMA, "records": bad})
    with pytest.raises(SynthError, match=r"seed records break the schema: books/B1/copies: -1 is less than"):
        synthesize(_config(url), tmp_path, progress=False)


@pytest.mark.parametrize("source, reason, words", [
    ("import os\n", "forbidden_code", "'os'"),
    ("from subprocess import run\n", "forbidden_code", "'subprocess'"),
    ("from . import x\n", "forbidden_code", "'.'"),
    ("def f(env: dict) -> str:\n    return open('x').read()\n", "forbidden_code", "'open'"),
    ("def f(env: dict) -> str:\n    return ().__class__\n", "forbidden_code", "'__class__'"),
    ("def f(env: dict) -> str\n    return ''\n", "does_not_load", "syntax error"),
])
def test_code_checks(source, reason, words):
    with pytest.raises(CodeRefused, match=words) as e:
        check_source(source, ["math"])
    assert e.value.reason == reason
    check_source("import math\nfrom collections import Counter\n", ["math", "collections"])  # allowed


def test_token_jaccard():
    a, b = tokens("Lend me book B3, please."), tokens("please lend me book B1")
    assert a == {"lend", "me", "book", "b3", "please"}
    assert jaccard(a, b) == pytest.approx(4 / 6)
    assert jaccard(a, a) == 1.0


def test_cli(server, tmp_path, capsys):
    url, _, _ = server
    code = main(["synth", "--domain", "a small public library", "--base-url", url, "--model", "writer-1",
                 "--out", str(tmp_path), "--price-in", "1.25", "--price-out", "10", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "\ntasks        4        8  breaks_schema 1," in out and "$0.047575" in out
    assert (tmp_path / "synth_library" / "tasks.jsonl").exists()



def test_cli_failures(server, tmp_path, capsys):
    url, _, replies = server
    args = ["synth", "--domain", "a small public library", "--base-url", url, "--model", "writer-1",
            "--out", str(tmp_path), "--no-progress"]
    assert main(args + ["--package", "1library"]) == 2
    assert "orchlib synth: --package: String should match pattern" in capsys.readouterr().err
    replies["tools"] = json.dumps({"tools": [TOOLS["tools"][4]]})       # only the tool importing os
    assert main(args) == 1
    assert "stage tools: every tool was refused: tool export_catalog:2: imports 'os'" in capsys.readouterr().err


def test_a_synthesis_that_keeps_no_task_is_an_error(server, tmp_path, capsys):
    url, _, replies = server
    replies["tasks"] = json.dumps({"tasks": []})
    with pytest.raises(SynthError, match="^stage tasks: no task was kept: the reply held no task$"):
        synthesize(_config(url), tmp_path / "api", progress=False)
    assert not (tmp_path / "api" / "synth_library").exists()
    args = ["synth", "--domain", "a small public library", "--base-url", url, "--model", "writer-1",
            "--out", str(tmp_path / "cli"), "--no-progress"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err == "orchlib synth: stage tasks: no task was kept: the reply held no task\n"

@pytest.mark.slow  # ~10 s on 2 busy cores: the tiny policy, one GRPO step
def test_the_trainer_takes_the_shipped_library_as_it_is(policy_cache):
    from orchlib.models import build_default_policy
    from orchlib.reward import Reward
    from orchlib.train import GRPOConfig, Trainer, golden_trajectories

    model, tok = build_default_policy("tiny", cache=policy_cache)
    tasks, box = load_tasks(SHIPPED / "tasks.jsonl"), Toolbox.load(SHIPPED / "cards")
    rcfg = RolloutConfig(max_turns=4, max_new_tokens=16, tool_schema="compact")
    # the warm start's data: each task's golden calls and answer, scored by the domain's checker
    assert [t.outcome for t in golden_trajectories(tasks, box, tok, rcfg)] == [1.0] * 4
    trainer = Trainer((model, tok), Environment(train=tasks, tools=box,
                                                reward=Reward.from_string("name: a\nreward: outcome")),
                      GRPOConfig(tasks_per_step=1, group_size=2, rollout=rcfg))
    report = trainer.step()
    assert len(report.trajectories) == 2 and 0.0 <= report.metrics["accuracy"] <= 1.0
    assert {t.task_id for t in report.trajectories} <= {t.id for t in tasks}

if __name__ == "__main__":
    # Regenerates the shipped domain orchlib/synth/library from the canned replies above:
    #   .venv/bin/python tests/test_synth.py
    import tempfile

    with serve(dict(REPLIES)) as (url, _), tempfile.TemporaryDirectory() as cache:
        where, report = synthesize(_config(url, package="orchlib.synth.library"), SHIPPED.parent, cache=cache)
    print(report.table())
    print(f"wrote {where}")
