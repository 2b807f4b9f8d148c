"""The demo's report on hand-made runs: the shares of calls per backend counted by hand, the figure that
draws them, and the page's order — what was learned first, then the checks, then the numbers as a table."""

from __future__ import annotations

import html
import re

from demo_report_inputs import AFTER, HOSTILE, ODD_POLICY, TITLE, WANT_SHARES, hand_made, run

from orchlib import viz
from orchlib.demo.html import report_html
from orchlib.demo.report import (backend_of, backend_shares, backend_shares_by_profile, objective_line, table_rows,
                                 table_text)


def configured(t, configuration: dict[str, str]):
    """`t` with a configuration (alias -> backend), set as a copy's attribute: the same whether or not
    Trajectory has the field."""
    return t.model_copy(update={"configuration": configuration})


def test_backend_shares_count_calls_by_tool_name_without_a_configuration():
    trajs = [run("a", "accuracy", {"generalist": 2, "mixtral": 1}), run("b", "accuracy", {"mixtral": 1}),
             run("c", "accuracy", {})]
    assert backend_shares(trajs) == {"generalist": 0.5, "mixtral": 0.5}
    assert backend_shares([]) == {} and backend_shares(trajs[2:]) == {}
    # with the known backends: each listed, sorted, and any other name counted as "unknown", last
    odd = run("d", "accuracy", {HOSTILE: 1, "calculat": 1, "mixtral": 2})
    assert backend_shares(trajs + [odd], known=("mixtral", "calculator", "generalist")) == {
        "calculator": 0.0, "generalist": 2 / 8, "mixtral": 4 / 8, "unknown": 2 / 8}
    assert list(backend_shares(trajs, known=("mixtral", "calculator", "generalist"))) == [
        "calculator", "generalist", "mixtral"]  # no "unknown" when every call named a known backend


def test_backend_shares_follow_the_trajectorys_configuration_from_alias_to_backend():
    a = configured(run("a", "accuracy", {"tool_1": 3, "tool_2": 1}), {"tool_1": "generalist", "tool_2": "mixtral"})
    b = configured(run("b", "accuracy", {"tool_1": 2, "tool_2": 2}), {"tool_1": "mixtral", "tool_2": "generalist"})
    assert backend_of(a, "tool_1") == "generalist" and backend_of(b, "tool_1") == "mixtral"
    # by backend: generalist 3 + 2, mixtral 1 + 2, of 8 calls; by alias it would be tool_1 5/8, tool_2 3/8
    assert backend_shares([a, b]) == {"generalist": 5 / 8, "mixtral": 3 / 8}
    # a name the configuration does not map is its own backend; a mapping to a non-name is ignored
    c = configured(run("c", "accuracy", {"calculator": 1, "tool_1": 1}), {"tool_1": 7})
    assert backend_shares([c], known=("calculator", "generalist")) == {"calculator": 0.5, "generalist": 0.0,
                                                                       "unknown": 0.5}
    # a mapping function given in its place
    assert backend_shares([a, b], backend=lambda t, name: name.upper()) == {"TOOL_1": 5 / 8, "TOOL_2": 3 / 8}


def test_backend_shares_by_profile_split_runs_by_the_preferences_name():
    trajs = [run("a", "accuracy", {"generalist": 1}), run("a", "thrifty", {"mixtral": 3}),
             run("b", "thrifty", {"generalist": 1})]
    assert backend_shares_by_profile(trajs, known=None) == {"accuracy": {"generalist": 1.0},
                                                            "thrifty": {"generalist": 0.25, "mixtral": 0.75}}
    assert backend_shares_by_profile(trajs, profiles=("balanced",)) == {"balanced": {}}


def test_summarize_demo_reports_the_shares_before_and_after_rl():
    metrics = hand_made()[0]
    assert metrics["backend_share"] == WANT_SHARES


def test_backend_share_figure_draws_one_bar_per_backend_profile_and_stage():
    fig = viz.backend_share_figure(WANT_SHARES, title=TITLE)
    assert fig.layout.barmode == "group" and fig.layout.title.text == TITLE
    assert [t.name for t in fig.data] == ["calculator", "generalist", "mixtral", "unknown"]
    x = (("accuracy", "accuracy", "thrifty", "thrifty"), ("before RL", "after RL", "before RL", "after RL"))
    assert all(t.type == "bar" and tuple(map(tuple, t.x)) == x for t in fig.data)  # profile, then stage
    heights = {t.name: t.y for t in fig.data}
    assert heights == {"calculator": (0.25, 0.25, 0.25, 0.25), "generalist": (0.25, 0.75, 0.5, 0.0),
                       "mixtral": (0.5, 0.0, 0.25, 0.5), "unknown": (0.0, 0.0, 0.0, 0.25)}
    # a profile with no runs under a stage is a gap, not a 0
    gap = viz.backend_share_figure({"before RL": {"accuracy": {"a": 1.0}}, "after RL": {"thrifty": {"a": 1.0}}})
    assert gap.data[0].y == (1.0, None, None, 1.0)


def _sections(page: str) -> list[str]:
    return re.findall(r"<section (?:id|class)='([a-z]+)'", page)


def test_the_report_leads_with_the_backend_shares_then_checks_then_the_numbers_table():
    metrics, after, baselines, history = hand_made()
    page = report_html(metrics, after, baselines, history)
    assert _sections(page) == ["learned", "checks", "numbers"] + ["training"] * 5
    learned = page[page.index("<section id='learned'>"):page.index("<section id='checks'>")]
    # the first figure, and the only one before the checks, is the backend share chart with plotly.js inlined
    assert page.index("plotly-graph-div") > page.index("<section id='learned'>")
    assert learned.count("plotly-graph-div") == 1 and TITLE in learned and "Plotly.newPlot" in learned
    assert page.count("plotly-graph-div") == 6
    checks = page[page.index("<section id='checks'>"):page.index("<section id='numbers'>")]
    assert re.findall(r"<li class='(pass|fail)'>([^<]+): <b>(PASS|FAIL)</b></li>", checks) == [
        ("pass", "well_formed_turns&gt;=0.95", "PASS"), ("fail", "arithmetic_copy&gt;=0.90", "FAIL"),
        ("fail", "thrifty_reward&gt;strongest", "FAIL"), ("pass", "accuracy&gt;cheapest", "PASS"),
        ("pass", "gsm8k_controllability&gt;=30", "PASS"), ("fail", "reward_last10&gt;first10", "FAIL")]
    numbers = page[page.index("<section id='numbers'>"):page.index("<section class='training'>")]
    assert "<pre>" not in page and numbers.count("<table>") == 1
    header, rows = table_rows(metrics)
    assert re.findall(r"<th>([^<]*)</th>", numbers) == header
    cells = [re.findall(r"<td>([^<]*)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", numbers)[1:]]
    assert len(cells) == len(rows) == 10
    # the orchestrator's thrifty row, by hand: 1/4 calculator, 1/2 mixtral, 1/4 a name no tool has
    assert cells[3] == ["orchestrator", "thrifty", "1.00", "0.00100", "1.00", "1.000", "0.25", "0.00", "0.50", "0.25"]
    # every text escaped: the policy's name in the table, and the model-written tool name nowhere as markup
    assert cells[8][0] == "r&amp;d &lt;i&gt;" and ODD_POLICY not in page
    assert HOSTILE in {n for calls in AFTER["thrifty"] for n in calls} and HOSTILE not in page and "<img" not in page
    # the text under the table is the printed table's, line for line (all but the checks and their caveats,
    # which the checks section shows)
    printed = table_text(metrics).splitlines()
    assert printed[0] == objective_line(metrics)  # first, printed and on the page: how GRPO trained
    assert page.index("<p id='objective'>") < page.index("<section id='learned'>")
    assert f"<p id='objective'>{html.escape(printed[0].capitalize())}.</p>" in page
    assert printed[3 + len(rows)].startswith("* ToolOrchestra") and printed[-3].startswith("checks: ")
    assert re.findall(r"<p>([^<]*)</p>", numbers) == [html.escape(line) for line in printed[3 + len(rows):-3]]
    assert re.findall(r"<p>([^<]*)</p>", checks) == [html.escape(line) for line in printed[-2:]]


def test_the_first_line_names_the_objective_field_by_field():
    from orchlib.demo.config import DEMO_GRPO, DemoConfig
    from orchlib.experiments.variants import VariantConfig

    std, mean_only = (DEMO_GRPO.model_copy(update={"advantage_scale": a}) for a in ("std", "none"))

    def line(**settings) -> str:
        return objective_line({"config": DemoConfig(**settings).model_dump()})

    paper = dict(variants=VariantConfig(), replay_coef=0.0)
    knobs = "(lr 0.0005, KL 0.03, 4 tasks x 8 rollouts a step, 60 steps)"
    assert line(**paper, grpo=std) == f"trained with the paper's GRPO, no variant {knobs}"
    # each departure named: a hook's field, the SFT replay, Dr. GRPO's mean-only advantages
    assert line(**paper, grpo=mean_only) == (
        "trained with a variant of the paper's GRPO, set in this run's DemoConfig: advantage_scale=none (mean-only "
        f"advantages, Dr. GRPO) {knobs}")
    assert line(variants=VariantConfig(kl_estimator="exact"), replay_coef=0.1, grpo=std) == (
        "trained with a variant of the paper's GRPO, set in this run's DemoConfig: kl_estimator=exact "
        f"(orchlib.experiments.variants); SFT replay x0.1 (replay_coef) {knobs}")
    # the demo's own default objective says why it is not the paper's
    default = objective_line({"config": DemoConfig().model_dump()})
    assert default.startswith("trained with a variant of the paper's GRPO, set in this run's DemoConfig: "
                              "category_quota={'gsm8k': 3, 'arithmetic': 1}; ")
    assert default.endswith("60 steps). Why: the demo's default, since with the paper's GRPO the tiny policy's "
                            "checks did not hold on every seed (docs/results.md)")
