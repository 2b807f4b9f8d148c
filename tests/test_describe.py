"""Descriptions from evidence: statistics against known truths (the simulated experts' declared
accuracies), a describer model served over HTTP on 127.0.0.1, the YAML round trip, and failures that
leave the card file byte for byte as it was."""

from __future__ import annotations

import json
import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from orchlib.cards import ToolCard, load_card
from orchlib.cli import main
from orchlib.describe import DescribeError, DescriberError, describe, describe_file
from orchlib.describe_stats import Trial, newcombe, summarise, template_text, wilson
from orchlib.envs import make_suite
from orchlib.tasks import Task, save_tasks

REPO = Path(__file__).resolve().parents[1]
CARDS = REPO / "toolcards"


@pytest.fixture(scope="module")
def suite():
    return make_suite(0)


@pytest.fixture
def tasks_file(suite, tmp_path) -> Path:
    return save_tasks(suite.train, tmp_path / "tasks" / "train.jsonl")


def _copy(name: str, folder: Path) -> Path:
    return Path(shutil.copy(CARDS / f"{name}.yaml", folder / f"{name}.yaml"))


def _without(text: str, keys: set[str]) -> str:
    """The YAML text with the top-level blocks of `keys` removed (key line and its indented lines)."""
    out, skipping = [], False
    for line in text.splitlines():
        top = re.match(r"^([A-Za-z_][\w-]*):", line)
        if top or (line and not line[0].isspace()):
            skipping = bool(top) and top.group(1) in keys
        if not skipping:
            out.append(line)
    return "\n".join(out)


def _keys(text: str) -> list[str]:
    return re.findall(r"^([A-Za-z_][\w-]*):", text, flags=re.M)


# ---------------------------------------------------------------------------------------------- numbers
def test_newcombe_matches_the_papers_table():
    # Newcombe (1998), Stat. Med. 17:873-890, Table II, method 10, examples (a), (b), (d)-(g).
    for (sa, na, sb, nb), ref in [((56, 70, 48, 80), (0.0524, 0.3339)), ((9, 10, 3, 10), (0.1705, 0.8090)),
                                  ((5, 56, 0, 29), (-0.0381, 0.1926)), ((0, 10, 0, 20), (-0.1611, 0.2775)),
                                  ((10, 10, 0, 20), (0.6791, 1.0)), ((10, 10, 0, 10), (0.6075, 1.0))]:
        assert newcombe(sa, na, sb, nb) == pytest.approx(ref, abs=1e-4)
    lo, hi = newcombe(40, 40, 2, 40)  # a Wald interval would end past 1 here
    assert 0 < lo < 0.95 and hi <= 1.0
    with pytest.raises(ValueError, match="n_b=0"):
        newcombe(1, 2, 0, 0)


def test_wilson_matches_reference_values():
    # Reference values: Brown, Cai & DasGupta (2001) / any statistics table for the Wilson interval.
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(13, 13) == pytest.approx((13 / (13 + 1.959964**2), 1.0), abs=1e-6)
    assert wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson(3, 2)


def test_template_is_deterministic_text_from_the_statistics():
    trials = [Trial(f"a{i}", "arithmetic", i < 11, 7e-5, 1.2, None, "q", "a") for i in range(12)]
    trials += [Trial(f"l{i}", "lookup", i < 4, 7e-5, 1.2, None, "q", "a") for i in range(10)]
    stats = summarise("tool", trials, date="2025-01-01")
    assert template_text(stats) == ("Right on 92% of arithmetic (n=12, 95% CI 65–99%), 40% of lookup "
                                    "(n=10, 95% CI 17–69%); mean cost $0.00007, mean latency 1.2 s.")
    failing = trials[:2] + [Trial("x", "arithmetic", False, 0.0, 0.5, "boom", "q", "error: boom")]
    assert template_text(summarise("tool", failing)).endswith("errors on 33% of calls.")


# ---------------------------------------------------------------------------------------------- known truths
@pytest.mark.parametrize("name", ["specialist", "generalist"])
def test_simulated_experts_rates_cover_their_declared_accuracy(suite, name):
    card = load_card(CARDS / f"{name}.yaml")
    declared = card.backend["accuracy"]
    result = describe(card, suite.train, n=60, seed=0)
    stats = result.stats
    assert stats.n == 60 and stats.skipped == 0
    assert set(stats.categories) == {"arithmetic", "lookup", "hard"}  # the categories that offer the experts
    for cat, s in stats.categories.items():
        truth = declared.get(cat, declared["default"])
        assert s.n == 20 and s.error_rate == 0.0
        assert s.ci_low <= truth <= s.ci_high, (cat, truth, s)
        assert s.mean_latency_s == pytest.approx(card.latency.seconds, rel=card.latency.jitter)
    block = result.card.auto_description
    assert block["n"] == 60 and block["method"] == "template"
    assert block["categories"]["hard"]["success_rate"] == pytest.approx(stats.categories["hard"].success_rate,
                                                                        abs=1e-4)


def test_function_tools_get_golden_arguments_and_skips_are_counted(suite):
    calc = describe(load_card(CARDS / "calculator.yaml"), suite.train, n=20)
    assert calc.stats.categories["arithmetic"].success_rate == 1.0
    assert calc.stats.overall.mean_cost_usd == 0.0 and "free" in calc.description

    shop_card = next(c for c in suite.cards if c.name == "shop_get_order")
    offered = [t for t in suite.train if "shop_get_order" in (t.tools or [])]
    with_args = [t for t in offered if any(c.name == "shop_get_order" for c in t.golden.calls)]
    result = describe(shop_card, suite.train, n=100)
    assert result.stats.skipped == len(offered) - len(with_args) > 0
    assert result.stats.n == len(with_args) and result.stats.overall.success_rate == 1.0


def test_a_look_up_before_a_write_is_not_judged_on_the_write(suite):
    # shop_search_products is the whole route of price/stock tasks but only the first step of
    # find_and_order ones, whose final state needs the order it does not place.
    search = next(c for c in suite.cards if c.name == "shop_search_products")
    first_step = {t.id for t in suite.train if t.meta.get("kind") == "find_and_order"}
    result = describe(search, suite.train, n=100)
    assert first_step and result.stats.skipped >= len(first_step)
    assert result.stats.categories["shop"].success_rate == 1.0


def test_a_policy_supplies_the_arguments(suite):
    wrong = describe(load_card(CARDS / "calculator.yaml"), suite.train, n=10,
                     policy=lambda task, card: {"expression": "1 + 1"})
    assert wrong.stats.overall.success_rate == 0.0
    with pytest.raises(DescribeError, match="none has arguments"):
        describe(load_card(CARDS / "calculator.yaml"), suite.train, policy=lambda task, card: None)


# ---------------------------------------------------------------------------------------------- describer over HTTP
@pytest.fixture
def server():
    """A ThreadingHTTPServer on 127.0.0.1 answering OpenAI chat completions. Yields a function
    `use(status, text) -> base_url` that sets the answer, and the list of request bodies."""
    state = {"status": 200, "text": ""}
    requests: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            requests.append({"path": self.path, "body": body})
            if state["status"] == 200:
                payload = {"id": "c", "object": "chat.completion", "model": body["model"],
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": state["text"]}}],
                           "usage": {"prompt_tokens": 400, "completion_tokens": 60, "total_tokens": 460}}
            else:
                payload = {"error": {"message": "server on fire"}}
            data = json.dumps(payload).encode()
            self.send_response(state["status"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def use(status: int, text: str = "") -> str:
        state.update(status=status, text=text)
        return f"http://127.0.0.1:{httpd.server_address[1]}/v1"

    yield use, requests
    httpd.shutdown()
    httpd.server_close()


def _describer(url: str) -> ToolCard:
    return ToolCard(name="writer", kind="llm", description="Writes tool descriptions.",
                    parameters={"type": "object", "properties": {"prompt": {"type": "string"}}},
                    backend={"base_url": url, "model": "writer-1", "max_retries": 1, "backoff_s": 0.0})


ANSWER = "Solves arithmetic reliably; rarely right on facts or on long word problems. Cheap, about 2 s."


def test_describer_reads_the_statistics_and_its_text_lands_in_the_card(server, tasks_file, tmp_path):
    use, requests = server
    url = use(200, f"  {ANSWER}\n")
    path = _copy("specialist", tmp_path)
    before = path.read_text(encoding="utf-8")
    old = load_card(path).description

    result = describe_file(path, tasks_file, n=30, describer=_describer(url))

    assert len(requests) == 1 and requests[0]["path"] == "/v1/chat/completions"
    prompt = requests[0]["body"]["messages"][-1]["content"]
    assert prompt == result.prompt
    for cat, s in result.stats.categories.items():
        row = next(line for line in prompt.splitlines() if line.startswith(cat + " "))
        assert row.split()[1:4] == [str(s.n), f"{100 * s.success_rate:.0f}%",
                                    f"{100 * s.ci_low:.0f}–{100 * s.ci_high:.0f}%"]
    assert "Current description: A small math specialist" in prompt and "[lookup]" in prompt  # text, examples

    card = load_card(path)
    assert card.description == ANSWER == result.description
    block = card.auto_description
    assert block["method"] == "describer writer" and block["task_source"] == str(tasks_file)
    assert block["history"][-1]["description"] == old and block["n"] == 30
    after = path.read_text(encoding="utf-8")
    assert after.startswith("# SIMULATED: not a real model.")
    assert _without(after, {"description", "auto_description"}) == _without(before, {"description"})


def test_a_failing_describer_leaves_the_card_file_unchanged(server, tasks_file, tmp_path):
    use, requests = server
    url = use(500)
    path = _copy("specialist", tmp_path)
    before = path.read_bytes()
    with pytest.raises(DescriberError, match="gave up after 2 attempts"):
        describe_file(path, tasks_file, n=10, describer=_describer(url))
    assert len(requests) == 2  # the first try and one retry
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["specialist.yaml", "tasks"]  # no temporary left

    with pytest.raises(DescribeError, match="must be an llm card"):
        describe_file(path, tasks_file, describer=load_card(CARDS / "generalist.yaml"))
    with pytest.raises(DescribeError, match="none of the"):
        describe_file(path, [Task(id="x", prompt="2 + 2?", tools=["calculator"])], n=10)
    assert path.read_bytes() == before


# ---------------------------------------------------------------------------------------------- round trip
def test_template_round_trip_keeps_comments_and_order_and_does_not_stack(tasks_file, tmp_path):
    path = _copy("specialist", tmp_path)  # simulated: declared latency, so the text is reproducible
    before = path.read_text(encoding="utf-8")
    original = load_card(path)

    first = describe_file(path, tasks_file, n=12)
    text1 = path.read_text(encoding="utf-8")
    assert _without(text1, {"description", "auto_description"}) == _without(before, {"description"})
    assert _keys(text1) == _keys(before) + ["auto_description"]
    assert first.description == original.description.strip() + "\n" + template_text(first.stats)
    assert load_card(path) == first.card

    second = describe_file(path, tasks_file, n=12)
    assert second.description == first.description  # deterministic; the numbers are not stacked
    history = load_card(path).auto_description["history"]
    assert [h["description"] for h in history] == [original.description, first.description]

    # A hand edit of the generated text becomes the tool's own text for the next round.
    card = load_card(path)
    edited = path.read_text(encoding="utf-8").replace(card.description.splitlines()[0], "Exact arithmetic.", 1)
    path.write_text(edited, encoding="utf-8")
    third = describe_file(path, tasks_file, n=12)
    assert third.description.splitlines()[0] == "Exact arithmetic."
    assert third.card.auto_description["base"].startswith("Exact arithmetic.")


def test_inline_comments_survive(tasks_file, tmp_path):
    path = _copy("python", tmp_path)  # comments after values inside `backend:`
    before = path.read_text(encoding="utf-8")
    describe_file(path, tasks_file, n=3)
    after = path.read_text(encoding="utf-8")
    assert "timeout_s: 10      # wall clock, then the whole process group is killed" in after
    assert _without(after, {"description", "auto_description"}) == _without(before, {"description"})
    assert load_card(path).auto_description["categories"]["arithmetic"]["n"] == 3


# ---------------------------------------------------------------------------------------------- command
def test_cli_describe_writes_the_card_and_rejects_bad_input(tasks_file, tmp_path, capsys):
    path = _copy("specialist", tmp_path)
    assert main(["cards", "describe", str(path), "--tasks", str(tasks_file), "--n", "9", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "tried on 9 task(s)" in out and f"wrote {path}" in out
    assert load_card(path).auto_description["seed"] == 1

    before = path.read_bytes()
    misspelt = tmp_path / "misspelt.jsonl"
    misspelt.write_text(tasks_file.read_text(encoding="utf-8").replace('"checker":"numeric"', '"checker":"numerc"', 1),
                        encoding="utf-8")
    not_utf8 = tmp_path / "latin1.jsonl"
    not_utf8.write_bytes(tasks_file.read_bytes().replace(b"What", b"Wh\xe9t", 1))
    for argv, problem in [(["--tasks", str(tmp_path / "missing.jsonl")], "No such file"),
                          (["--tasks", str(misspelt)], "misspelt.jsonl:1: checker: unknown checker 'numerc'"),
                          (["--tasks", str(not_utf8)], "latin1.jsonl:1: not UTF-8"),
                          (["--tasks", str(tasks_file), "--n", "0"], "n must be at least 1"),
                          (["--tasks", str(tasks_file), "--describer", str(CARDS / "generalist.yaml")], "llm card")]:
        assert main(["cards", "describe", str(path), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and problem in err and "unchanged" in err
        assert path.read_bytes() == before
