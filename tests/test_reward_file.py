"""Reward files: loading, `FILE:LINE: field: problem` errors, and the `orchlib reward` command."""

from pathlib import Path

import numpy as np
import pytest

from orchlib.cli import main
from orchlib.reward import Reward, RewardFileError, RewardSyntaxError
from orchlib.tasks import PROFILES, Preference

REWARDS = Path(__file__).resolve().parents[1] / "rewards"


@pytest.mark.parametrize("path", sorted(REWARDS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_files_load_and_evaluate(path):
    reward = Reward.load(path)
    assert reward.name == path.stem and reward.doc and reward.latex()
    out = reward([{"outcome": 1, "cost": 0.01, "latency": 1.0, "calls": {}},
                  {"outcome": 0, "cost": 0.02, "latency": 2.0, "calls": {}}])
    assert out.shape == (2,) and np.isfinite(out).all()


def test_at_least_four_rewards_ship():
    assert {"toolorchestra", "outcome", "cost_penalty", "budget"} <= {p.stem for p in REWARDS.glob("*.yaml")}


def test_from_string_file_and_one_line():
    text = "name: demo\ndoc: d\npreference: thrifty\nterms:\n  pay: -P.cost * cost\nreward: outcome + pay\n"
    r = Reward.from_string(text)
    assert (r.name, r.doc, r.preference) == ("demo", "d", PROFILES["thrifty"])
    assert list(r.terms) == ["pay"]
    np.testing.assert_allclose(r([{"outcome": 1, "cost": 0.5}]), [0.5])
    inline = Reward.from_string("outcome - 0.1 * cost")
    assert inline.name == "inline" and inline.preference == Preference()
    np.testing.assert_allclose(inline([{"outcome": 1, "cost": 2.0}]), [0.8])
    with pytest.raises(RewardSyntaxError):
        Reward.from_string("outcome.__class__")


def error_of(text):
    with pytest.raises(RewardFileError) as e:
        Reward.from_string(text, path="r.yaml")
    return str(e.value)


def test_file_errors_name_file_line_field():
    assert error_of("name: x\nreward: where(outcome, 1)\n") == \
        "r.yaml:2: reward: where() takes 3 arguments, got 2 (at 1:1 of the expression)"
    assert error_of("name: x\nterms:\n  a: cost\n  b: |\n    a +\n    x.__class__\nreward: a + b\n") == \
        ("r.yaml:6: terms.b: names starting with _ are not allowed (got `x.__class__`) "
         "(at 2:1 of the expression)")
    assert error_of("name: x\npreference:\n  cost: abc\nreward: outcome\n").startswith(
        "r.yaml:3: preference.cost: Input should be a valid number")
    assert error_of("name: x\nrewrd: outcome\n") == "r.yaml:2: rewrd: Extra inputs are not permitted"
    assert error_of("name: x\ndoc: y\n") == "r.yaml:1: reward: Field required"
    assert error_of("name: x\nreward: a\nreward: b\n").startswith("r.yaml:3: yaml: found duplicate key")
    assert error_of("name: x\nreward: [1\n").startswith("r.yaml:2: yaml:")  # where the unclosed [ opens
    assert error_of("name: x\nterms:\n  cost: 1\nreward: 1\n") == \
        "r.yaml:3: terms.cost: `cost` is reserved and cannot name a term"
    assert error_of("name: x\npreference: lavish\nreward: 1\n").startswith(
        "r.yaml:2: preference: unknown profile `lavish`")
    assert error_of("- a\n- b\n") == "r.yaml:1: file: a reward file must be a mapping with at least `name` and `reward`"


def test_cli_show(capsys):
    assert main(["reward", "show", str(REWARDS / "toolorchestra.yaml")]) == 0
    out = capsys.readouterr().out
    for expected in ("name        toolorchestra", "term        thrift = P.cost * minmax(-cost)",
                     r"latex       \begin{cases}", "symbols     P.cost, P.latency", "default P   Preference"):
        assert expected in out


def test_cli_check(capsys):
    assert main(["reward", "check", str(REWARDS / "toolorchestra.yaml")]) == 0
    out = capsys.readouterr().out
    assert "rollout 2: reward 0.0000" in out and out.rstrip().endswith("ok")


def test_cli_check_bad_file_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nreward: open('x')\n")
    assert main(["reward", "check", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{bad}:2: reward: calling `open` is not allowed" in err
    assert main(["reward", "show", str(tmp_path / "missing.yaml")]) == 2


def test_file_that_is_not_utf8_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: café\nreward: outcome\n".encode("latin-1"))
    with pytest.raises(RewardFileError) as e:
        Reward.load(bad)
    assert str(e.value) == f"{bad}:1: file: not UTF-8 text (byte 0xe9 at offset 9)"
    assert main(["reward", "check", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == f"orchlib reward: {e.value}"


def test_cli_check_non_finite_exits_1(tmp_path, capsys):
    bad = tmp_path / "inf.yaml"
    bad.write_text("name: inf\nreward: 1 / (outcome - 1)\n")
    assert main(["reward", "check", str(bad)]) == 1
    assert "FAILED" in capsys.readouterr().out
