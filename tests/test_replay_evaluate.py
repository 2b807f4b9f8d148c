"""Evaluating many tasks x many replay tools with the four baselines: orchlib's figures against an
independent numpy computation over the recording (accuracy, cost with reasoning billed as output,
latency, oracle, frontier, PGR, AIQ), and the fast route runner against the plain rollout."""

from __future__ import annotations

import csv
import random
from pathlib import Path

import numpy as np
import pytest

from orchlib.env import Environment
from orchlib.baselines import RouteEngine, TokenizeMemo, make_baselines, route_stats, routes, try_routes
from orchlib.evaluate import EVAL_ROLLOUT, aiq, evaluate, frontier, pgr
from orchlib.rollout import rollout
from orchlib.tasks import Task
from orchlib.tools import Toolbox
from orchlib.tools.replay import replay_cards, write_recording

REPO = Path(__file__).resolve().parents[1]
ROUTELLM = REPO / "orchlib" / "data" / "routellm" / "gsm8k_responses.csv"
# The policy's own tokens cost nothing and take no time here: every figure is the tools' alone.
CONFIG = EVAL_ROLLOUT.model_copy(update={"policy_price_in": 0.0, "policy_price_out": 0.0,
                                         "policy_seconds_per_token": 0.0, "tool_timeout_s": 600.0})
MODELS = {"big/think": (2.0, 8.0, 800, 0.7), "big/plain": (2.0, 8.0, 0, 0.55), "mid": (0.5, 1.5, 0, 0.4),
          "small": (0.1, 0.2, 0, 0.25), "tiny": (0.05, 0.05, 0, 0.1)}  # USD/M in, out; reasoning; accuracy
N_TASKS = 40


@pytest.fixture(scope="module")
def tokenizer():
    from orchlib.models import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    rng = random.Random(7)
    questions = [f"Problem {i}: " + " ".join(rng.choice(["add", "seven", "boxes", "left", "each"]) for _ in range(12))
                 for i in range(N_TASKS)]
    rows = []
    for model, (_, _, reasoning, acc) in MODELS.items():
        for q in questions:
            right, empty = rng.random() < acc, rng.random() < 0.05
            rows.append({"prompt": q, "model": model, "response": "" if empty else f"answer {rng.randint(0, 9)}",
                         "grade": rng.choice(["1", 1, "true", 1.0]) if right else rng.choice(["0", 0, "false"]),
                         "input_tokens": rng.randint(10, 60), "output_tokens": 0 if empty else rng.randint(1, 300),
                         "reasoning_tokens": int(reasoning * rng.uniform(0.5, 1.5)),
                         "latency_s": round(rng.uniform(0.5, 30.0), 2)})
    path = write_recording(rows, tmp_path_factory.mktemp("rec") / "rec.jsonl")
    prices = {m: {"per_m_input": p[0], "per_m_output": p[1]} for m, p in MODELS.items()}
    box = Toolbox.from_cards(replay_cards(path, prices=prices))
    tasks = [Task(id=f"q{i}", prompt=q, answer="x", checker="recorded", category="c") for i, q in enumerate(questions)]
    return rows, questions, box, tasks


def _reference(rows, questions):
    """(task × model) arrays straight from the rows, with numpy; names as replay_cards makes them."""
    names = sorted(m.replace("/", "_") for m in MODELS)
    T, M = len(questions), len(names)
    grade, cost, lat = np.zeros((T, M)), np.zeros((T, M)), np.zeros((T, M))
    for r in rows:
        i, j = questions.index(r["prompt"]), names.index(r["model"].replace("/", "_"))
        p_in, p_out = MODELS[r["model"]][:2]
        grade[i, j] = 0.0 if not r["response"] else float(str(r["grade"]).lower() in ("1", "1.0", "true"))
        cost[i, j] = (r["input_tokens"] * p_in + (r["output_tokens"] + r["reasoning_tokens"]) * p_out) / 1e6
        lat[i, j] = r["latency_s"]
    return names, grade, cost, lat


def test_routes_and_baselines_agree_with_numpy(setup, tokenizer):
    rows, questions, box, tasks = setup
    names, grade, cost, lat = _reference(rows, questions)
    trials = try_routes(tasks, box, tokenizer, CONFIG)
    stats = route_stats(trials)["c"]
    for j, name in enumerate(names):
        s = stats[name]
        assert s["accuracy"] == pytest.approx(grade[:, j].mean(), abs=1e-12)
        assert s["cost_usd"] == pytest.approx(cost[:, j].mean(), rel=1e-9)
        assert s["latency_s"] == pytest.approx(lat[:, j].mean(), rel=1e-9)
    engines = make_baselines(tasks, box, tokenizer, trials=trials, config=CONFIG)
    reports = {n: evaluate(e, Environment(test=tasks, tools=box), config=CONFIG).metrics["overall"] for n,
               e in engines.items()}
    acc, mean_cost = grade.mean(0), cost.mean(0)
    strongest = min(range(len(names)), key=lambda j: (-acc[j], mean_cost[j], names[j]))
    cheapest = min(range(len(names)), key=lambda j: (mean_cost[j], -acc[j], names[j]))
    by_name = np.arange(len(names))[None, :].repeat(len(tasks), 0)
    wrong = grade.max(1, keepdims=True) - grade
    rank = np.lexsort((by_name, lat, cost, wrong), axis=1)[:, 0]  # the oracle: right first, then cheaper, faster
    pick = {"strongest": np.full(len(tasks), strongest), "cheapest": np.full(len(tasks), cheapest), "oracle": rank,
            "random": np.array([names.index(random.Random(f"0:{t.id}").choice(names)) for t in tasks])}
    rows_ = np.arange(len(tasks))
    for name, chosen in pick.items():
        got = reports[name]
        assert got["accuracy"] == pytest.approx(grade[rows_, chosen].mean(), abs=1e-12), name
        assert got["cost_usd"] == pytest.approx(cost[rows_, chosen].mean(), rel=1e-9), name
        assert got["latency_s"] == pytest.approx(lat[rows_, chosen].mean(), rel=1e-9), name
    assert reports["oracle"]["accuracy"] == pytest.approx(grade.max(1).mean(), abs=1e-12)
    # The frontier by brute force over pairs, and PGR and AIQ from the numpy means.
    pts = {n: (mean_cost[j], acc[j]) for j, n in enumerate(names)}
    dominated = {a for a in pts for b in pts if pts[b][0] <= pts[a][0] and pts[b][1] >= pts[a][1] and pts[b] != pts[a]}
    got = frontier({k: (v["cost_usd"], v["accuracy"]) for k, v in stats.items()})
    assert sorted(got) == sorted(set(pts) - dominated)
    assert pgr(reports["oracle"]["accuracy"], acc[cheapest], acc[strongest]) == pytest.approx(
        (grade.max(1).mean() - acc[cheapest]) / (acc[strongest] - acc[cheapest]), rel=1e-9)
    grid = np.linspace(mean_cost.min(), mean_cost.max(), 100_001)
    hull = _upper_hull_values(mean_cost, acc, grid)
    assert aiq(pts) == pytest.approx(np.trapezoid(hull, grid) / (grid[-1] - grid[0]), rel=1e-5)


def _upper_hull_values(x, y, grid):
    """The best accuracy reachable at each cost by mixing two routes (spending more may not help): the
    maximum over all pairs of their chord, and over single points, of the flat line to their right."""
    best = np.full(grid.shape, -np.inf)
    for i in range(len(x)):
        best = np.where(grid >= x[i], np.maximum(best, y[i]), best)
        for j in range(len(x)):
            if x[i] < x[j]:
                inside = (grid >= x[i]) & (grid <= x[j])
                chord = y[i] + (y[j] - y[i]) * (grid - x[i]) / (x[j] - x[i])
                best = np.where(inside, np.maximum(best, chord), best)
    return best


def test_the_route_runner_gives_what_the_plain_rollout_gives(setup, tokenizer):
    """TokenizeMemo and the streamed runner change nothing: every route, run alone through `rollout` with
    the bare tokenizer, has the same outcome, cost and latency, and the same token ids."""
    _, _, box, tasks = setup
    tasks = tasks[:12]
    trials = try_routes(tasks, box, tokenizer, CONFIG)
    task_routes = {t.id: routes(t, box.cards) for t in tasks}
    for label in list(task_routes[tasks[0].id])[:3]:
        plain = rollout(Environment(train=tasks, tools=box), RouteEngine(tokenizer, tasks,
                                                                         {t.id: label for t in tasks}, task_routes),
                        config=CONFIG, seed=0)
        memo = rollout(Environment(train=tasks, tools=box), RouteEngine(trials.tokenizer, tasks,
                                                                        {t.id: label for t in tasks}, task_routes),
                       config=CONFIG, seed=0)
        for t, a, b in zip(tasks, plain, memo):
            r = trials.results[t.id][label]
            assert (r.outcome, r.cost_usd, r.latency_s) == (a.outcome, a.cost_usd, a.latency_s)
            assert a.ids == b.ids and a.mask == b.mask and a.turns == b.turns


@pytest.mark.parametrize("p_at", ["system", "user"])
def test_the_route_runner_finds_its_task_when_the_price_order_line_closes_the_user_turn(setup, tokenizer, p_at):
    """The runner finds a task by its words in the user turn, which the order line (and the kind's line,
    `show_kind`) may now follow."""
    _, _, box, tasks = setup
    tasks = tasks[:6]
    task_routes = {t.id: routes(t, box.cards) for t in tasks}
    label = list(task_routes[tasks[0].id])[1]
    compact = CONFIG.model_copy(update={"tool_schema": "compact", "price_order": True, "preference_at": p_at})
    runs = {}
    for at, kind in (("system", False), ("user", False), ("user", True)):
        config = compact.model_copy(update={"price_order_at": at, "show_kind": kind})
        runs[at, kind] = rollout(Environment(train=tasks, tools=box),
                                 RouteEngine(tokenizer, tasks, {t.id: label for t in tasks}, task_routes,
                                             config=config), config=config, seed=0)
        assert all("From the cheapest per call" in tokenizer.decode(t.ids) for t in runs[at, kind])
        assert all(("Kind of question: " in tokenizer.decode(t.ids)) == kind for t in runs[at, kind])
    for t, a, b, k in zip(tasks, runs["system", False], runs["user", False], runs["user", True]):
        assert [c.name for turn in b.turns for c in turn.calls][:1] == [label] == \
            [c.name for turn in a.turns for c in turn.calls][:1] == [c.name for turn in k.turns for c in turn.calls][:1]
        r = try_routes([t], box, tokenizer, CONFIG).results[t.id][label]
        assert (a.outcome, a.cost_usd) == (b.outcome, b.cost_usd) == (k.outcome, k.cost_usd) == (r.outcome, r.cost_usd)


def test_each_prompt_is_rendered_and_tokenised_once(setup, tokenizer):
    _, _, box, tasks = setup

    class Spy:
        def __init__(self, tok):
            self.tok, self.rendered, self.encoded = tok, 0, 0

        def __getattr__(self, name):
            return getattr(self.tok, name)

        def apply_chat_template(self, *a, **kw):
            self.rendered += 1
            return self.tok.apply_chat_template(*a, **kw)

        def encode(self, text, **kw):
            self.encoded += len(text) > 1000  # the prompts; the calls a route writes are short
            return self.tok.encode(text, **kw)

    spy = Spy(tokenizer)
    trials = try_routes(tasks, box, spy, CONFIG)
    engines = make_baselines(tasks, box, spy, trials=trials, config=CONFIG)
    for engine in engines.values():
        evaluate(engine, Environment(test=tasks, tools=box), config=CONFIG)
    assert isinstance(trials.tokenizer, TokenizeMemo) and all(e.tokenizer is trials.tokenizer for e in engines.values())
    # 5 routes + 4 baselines: each prompt rendered and encoded at most once (orchlib's own template is put
    # together without the tokenizer, and the system turn, the same for every task, is encoded once)
    assert spy.rendered <= len(tasks) and spy.encoded <= len(tasks)


@pytest.mark.parametrize("update", [{}, {"preference_at": "user"}, {"preference_at": "system_end"},
                                    {"preference_at": "assistant"}, {"show_preference": False},
                                    {"tool_schema": "compact"}])
def test_the_memo_renders_encodes_and_decodes_as_the_tokenizer_does(setup, tokenizer, update):
    """Text, ids and decoded text of every prompt are the tokenizer's own, on prompts that hold added
    tokens' text, non-ASCII text and JSON, under every place P can be rendered."""
    from orchlib.prompting import render_prompt, tool_schemas
    from orchlib.tasks import Preference

    _, _, box, tasks = setup
    config = CONFIG.model_copy(update=update)
    odd = ["Café ☕ — 3 × 4 = ?", "Say <|im_end|> then <tool_call>{\"name\": \"x\"}</tool_call> twice",
           "  spaced\n\n  lines  ", "<|im_start|>user\nnested?", "数字 12345 and émoji 🙂"]
    tasks = tasks[:3] + [Task(id=f"o{i}", prompt=p, answer="x", preference=Preference(name="thrifty"))
                         for i, p in enumerate(odd)]
    memo = TokenizeMemo(tokenizer)
    for task in tasks:
        schemas = tool_schemas(box, task, config.tool_schema)
        text = render_prompt(task, schemas, memo, config)
        assert text == render_prompt(task, schemas, tokenizer, config)
        ids = memo.encode(text, add_special_tokens=False)
        assert ids == tokenizer.encode(text, add_special_tokens=False)
        assert memo.encode(text, add_special_tokens=False) == ids  # again, from the memo
        assert memo.decode(ids) == tokenizer.decode(ids, skip_special_tokens=False)
    assert memo._split is not None and memo._decode_by_pieces  # the piece-wise path was the one checked


def test_the_memo_encodes_whole_where_pieces_would_not_be_exact(tokenizer):
    """A tokenizer whose added token eats the spaces beside it: the text cannot be cut at that token,
    so the memo encodes prompts whole (and still gives the tokenizer's ids)."""
    import copy

    from tokenizers import AddedToken

    tok = copy.deepcopy(tokenizer)
    tok.add_tokens([AddedToken("<mark>", lstrip=True, rstrip=True)])
    memo = TokenizeMemo(tok)
    assert memo._split is None
    text = memo.apply_chat_template([{"role": "user", "content": "a  <mark>  b"}], tokenize=False,
                                    add_generation_prompt=True)
    assert memo.encode(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False)


def test_routellm_recording_accuracy_and_oracle(tokenizer):
    """The shipped RouteLLM cards on the first 60 GSM8K questions: each route's accuracy is its graded
    column, the oracle's is the share some model got right (counted from the CSV)."""
    from orchlib.cards import load_cards

    with ROUTELLM.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:60]
    box = Toolbox.from_cards(load_cards([REPO / "toolcards" / "gpt4.yaml", REPO / "toolcards" / "mixtral.yaml"]))
    tasks = [Task(id=f"g{i}", prompt=r["prompt"], answer="x", checker="recorded", category="gsm8k")
             for i, r in enumerate(rows)]
    trials = try_routes(tasks, box, tokenizer, CONFIG)
    stats = route_stats(trials)["gsm8k"]
    gpt4 = np.array([r["gpt-4-1106-preview"] == "True" for r in rows], dtype=float)
    mixtral = np.array([r["mistralai/Mixtral-8x7B-Instruct-v0.1"] == "True" for r in rows], dtype=float)
    assert stats["gpt4"]["accuracy"] == pytest.approx(gpt4.mean()) and stats["mixtral"]["accuracy"] == pytest.approx(
        mixtral.mean())
    oracle = make_baselines(tasks, box, tokenizer, names=["oracle"], trials=trials, config=CONFIG)["oracle"]
    report = evaluate(oracle, Environment(test=tasks, tools=box), config=CONFIG).metrics["overall"]
    assert report["accuracy"] == pytest.approx(np.maximum(gpt4, mixtral).mean())
    assert report["calls"]["mixtral"]["count"] == int(((mixtral == 1) | (gpt4 == 0)).sum())  # cheaper when it is right


def test_stand_in_calls_awaited_in_turn_give_what_concurrent_calls_give(setup, tokenizer, monkeypatch):
    """The rollout's fast path (calls that only stand-ins answer, awaited one after another without a
    task each) against the general path (every call a task, through Toolbox.call_many), on turns with
    several calls, an unknown tool, arguments a card does not list and a timeout."""
    import importlib

    from orchlib.engines.scripted import ScriptedEngine

    rollout_module = importlib.import_module("orchlib.rollout")  # the package exports a function of that name

    _, _, box, tasks = setup
    call = '<tool_call>\n{{"name": "{}", "arguments": {}}}\n</tool_call>'
    script = ["\n".join([call.format("mid", "{}"), call.format("nope", "{}"), call.format("small", '{"x": 1}')]),
              call.format("big_think", "{}")]
    config = CONFIG.model_copy(update={"tool_timeout_s": 20.0})  # some recorded latencies are over it

    def run():
        return rollout(Environment(train=tasks[:12], tools=box), ScriptedEngine(tokenizer, script), config=config,
                       seed=0)

    fast = run()
    monkeypatch.setattr(rollout_module, "_stand_ins_only", lambda calls, toolbox: False)
    general = run()
    assert [t.model_dump() for t in fast] == [t.model_dump() for t in general]
    kinds = {k for t in fast for k in t.errors}
    assert {"unknown_tool", "timeout"} <= kinds  # the cases were met
    assert {t.finish_reason for t in fast} >= {"final_tool"}


def test_a_trajectory_begun_without_validation_equals_a_validated_one():
    from orchlib.trajectory import Trajectory

    begun = Trajectory.begin("t", 2, "p", "c", {"name": "default"}, [5, 6, 7])
    made = Trajectory(task_id="t", group_index=2, prompt="p", category="c", preference={"name": "default"},
                      ids=[5, 6, 7], mask=[0, 0, 0], logprobs=[0.0, 0.0, 0.0], prompt_len=3)
    assert begun == made and begun.model_dump_json() == made.model_dump_json()
    assert begun.model_fields_set == set(Trajectory.model_fields)  # every field given: none looked up
    assert Trajectory.model_validate(begun.model_dump()) == begun


def test_evaluate_in_batches_streamed_to_a_file_gives_the_same_report(setup, tokenizer, tmp_path):
    """Batches of 7 tasks, trajectories written as they come: the same metrics and rewards as one
    rollout kept in memory, and the file holds exactly the trajectories the plain run returns."""
    from orchlib.evaluate import reward_across
    from orchlib.trajectory import read_jsonl

    _, _, box, tasks = setup
    trials = try_routes(tasks, box, tokenizer, CONFIG)
    engine = make_baselines(tasks, box, tokenizer, names=["random"], trials=trials, config=CONFIG)["random"]

    def reward(group, P=None):  # any function of the group: cost and outcome, per trajectory
        return np.array([t.outcome - 100 * t.cost_usd for t in group])

    plain = evaluate(engine, Environment(test=tasks, tools=box), reward=reward, config=CONFIG)
    path = tmp_path / "runs" / "random.jsonl"
    streamed = evaluate(engine, Environment(test=tasks, tools=box), reward=reward, config=CONFIG, batch_size=7,
                        trajectories_to=path)
    assert streamed.metrics == plain.metrics and streamed.rewards == plain.rewards
    assert streamed.trajectories == [] and streamed.trajectories_path == path
    assert read_jsonl(path) == plain.trajectories
    assert not [p for p in path.parent.iterdir() if p.name != path.name]  # no temporary file left
    batched = evaluate(engine, Environment(test=tasks, tools=box), config=CONFIG, batch_size=7)  # in memory, in batches
    assert batched.trajectories == plain.trajectories
    saved = streamed.save(tmp_path / "report")
    assert read_jsonl(saved / "trajectories.jsonl") == plain.trajectories
    with pytest.raises(ValueError, match="needs the trajectories in memory"):
        reward_across({"a": plain, "b": streamed}, reward)
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        evaluate(engine, Environment(test=tasks, tools=box), config=CONFIG, batch_size=0)


def test_a_failed_streamed_evaluation_leaves_no_file(setup, tokenizer, tmp_path):
    _, _, box, tasks = setup

    def broken(group, P=None):
        raise RuntimeError("reward failed")

    engine = make_baselines(tasks, box, tokenizer, names=["cheapest"], config=CONFIG)["cheapest"]
    with pytest.raises(RuntimeError, match="reward failed"):
        evaluate(engine, Environment(test=tasks, tools=box), reward=broken, config=CONFIG, batch_size=5,
                 trajectories_to=tmp_path / "t.jsonl")
    assert list(tmp_path.iterdir()) == []
