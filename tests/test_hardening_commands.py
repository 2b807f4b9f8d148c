"""Commands check their output location before a long run, and turn mistakes into one line, exit 2."""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import shutil
import signal
import tempfile
import types
from pathlib import Path

import pytest
from conftest import REPO

from orchlib.cli import main


@pytest.fixture
def no_long_runs(monkeypatch):
    """The demo and training themselves must not start: each test is about what comes before them."""
    import orchlib.demo
    import orchlib.train.run

    def started(*args, **kwargs):
        raise AssertionError("the long run started before its output location was checked")

    monkeypatch.setattr(orchlib.demo, "run_demo", started)
    monkeypatch.setattr(orchlib.train.run, "run_training", started)


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_demo_out_naming_a_file(tmp_path, capsys, no_long_runs):
    (tmp_path / "f").write_text("x")
    assert main(["demo", "--out", str(tmp_path / "f")]) == 2
    assert one_line(capsys) == f"orchlib demo: --out {tmp_path / 'f'}: is a file, not a folder"


def test_demo_out_under_a_file(tmp_path, capsys, no_long_runs):
    (tmp_path / "f").write_text("x")
    assert main(["demo", "--out", str(tmp_path / "f" / "sub" / "out")]) == 2
    assert one_line(capsys) == (f"orchlib demo: --out {tmp_path / 'f' / 'sub' / 'out'}: is under "
                                f"{tmp_path / 'f'}, which is a file, not a folder")


def _as_unprivileged(fn) -> tuple[int, str]:
    """Run `fn() -> (code, text)` in a forked child without root's override of permission bits."""
    import orchlib.atomic  # noqa: F401  (imported while the interpreter's files are readable)
    import orchlib.commands._output  # noqa: F401
    from orchlib.cli import build_parser

    build_parser()  # imports every command module now, before the uid drop
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 99
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            code, text = fn()
            os.write(write, text.encode())
            status = code
        except BaseException:
            import traceback

            os.write(write, traceback.format_exc().encode())
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), text


@pytest.fixture
def open_tmp():
    """A folder every uid may enter (pytest's tmp_path sits under a folder only its owner may enter)."""
    path = Path(tempfile.mkdtemp(prefix="orchlib-test-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def test_demo_out_on_a_read_only_folder_fails_before_the_run(open_tmp, no_long_runs):
    ro = open_tmp / "results"
    ro.mkdir()
    os.chmod(ro, 0o555)  # root may still write there; the check runs as an unprivileged uid

    def demo():
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["demo", "--out", str(ro), "--quiet"])
        return code, err.getvalue()

    code, text = _as_unprivileged(demo)
    assert code == 2, text
    assert text.strip() == f"orchlib demo: --out {ro}: cannot write there (Permission denied)"
    assert list(ro.iterdir()) == []


def write_config(tmp_path, **fields) -> str:
    path = tmp_path / "run.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in fields.items()))
    return str(path)


def test_train_with_a_model_that_is_not_cached_offline_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = write_config(tmp_path, policy="no-such-org/no-such-model", steps=1, out=str(tmp_path / "run"))
    assert main(["train", "--config", config]) == 2
    err = one_line(capsys)
    assert err.startswith(f"orchlib train: {config}: ") and "no-such-org/no-such-model" in err


def test_train_out_naming_a_file_is_refused_before_training(tmp_path, capsys, monkeypatch, no_long_runs):
    monkeypatch.chdir(REPO)
    (tmp_path / "f").write_text("x")
    config = write_config(tmp_path, steps=1, out=str(tmp_path / "f"))
    assert main(["train", "--config", config]) == 2
    assert one_line(capsys) == f"orchlib train: {config}: out: {tmp_path / 'f'}: is a file, not a folder"


def test_an_output_folder_that_cannot_be_entered_is_one_line(open_tmp, no_long_runs):
    closed = open_tmp / "closed"
    closed.mkdir(mode=0o700)

    def demo():
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            return main(["demo", "--out", str(closed / "sub"), "--quiet"]), err.getvalue()

    code, text = _as_unprivileged(demo)
    assert code == 2, text
    assert text.strip() == f"orchlib demo: --out {closed / 'sub'}: cannot write there (Permission denied)"


def test_history_json_is_never_half_written(open_tmp, monkeypatch):
    """A write that fails midway (here: past RLIMIT_FSIZE, as on a full disk) leaves the old file whole."""
    import orchlib.train.run

    monkeypatch.chdir(REPO)
    out = open_tmp / "run"
    out.mkdir()
    (out / "history.json").write_text('[{"step": 1}]')
    history = [{"step": float(i), "reward": 0.5, "accuracy": 1.0} for i in range(200)]
    monkeypatch.setattr(orchlib.train.run, "run_training",
                        lambda cfg, progress=True, trust_code=False: types.SimpleNamespace(history=history,
                                                                                            step_count=200))
    config = write_config(open_tmp, steps=1, out=str(out))

    def train():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
        try:
            return main(["train", "--config", config]), ""
        except OSError as e:
            return 1, str(e)

    os.chmod(out, 0o777)
    os.chmod(out / "history.json", 0o666)
    code, text = _as_unprivileged(train)
    assert code == 1 and "too large" in text.lower()
    assert json.loads((out / "history.json").read_text()) == [{"step": 1}]
    assert sorted(p.name for p in out.iterdir()) == ["history.json"]


def test_python_dash_m_gives_the_same_one_line_errors(tmp_path):
    """`python -m orchlib.cli` runs cli.py as __main__: its UsageError must still be the one caught."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "orchlib.cli", "reward", "show", str(tmp_path / "missing.yaml")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"orchlib reward: {tmp_path / 'missing.yaml'}:0: file: cannot read "
                                   "(No such file or directory)")


def test_a_reward_expression_error_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("x")
    assert main(["reward", "check", str(bad)]) == 2
    assert one_line(capsys).startswith(f"orchlib reward: {bad}: reward: unknown name `x`")


def test_eval_out_naming_a_file_is_refused_before_anything_loads(tmp_path, capsys, monkeypatch):
    import importlib

    def started(*args, **kwargs):
        raise AssertionError("the evaluation started before its output location was checked")

    monkeypatch.setattr(importlib.import_module("orchlib.evaluate"), "evaluate", started)
    (tmp_path / "f").write_text("x")
    assert main(["eval", "--out", str(tmp_path / "f")]) == 2
    assert one_line(capsys) == f"orchlib eval: --out {tmp_path / 'f'}: is a file, not a folder"


# ---------------------------------------------------------------------------------------------- train
def test_train_negative_steps_is_refused_before_training(tmp_path, capsys, monkeypatch, no_long_runs):
    monkeypatch.chdir(REPO)
    config = write_config(tmp_path, steps=1, out=str(tmp_path / "run"))
    assert main(["train", "--config", config, "--steps", "-1"]) == 2
    assert one_line(capsys) == "orchlib train: --steps: -1 is negative; give the number of GRPO steps (0 or more)"


def test_train_on_a_damaged_checkpoint_names_the_file_and_leaves_the_folder(tmp_path, capsys, monkeypatch,
                                                                             policy_cache):
    from orchlib.train.checkpoint import commit, temporary_sibling

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))
    ckpt = tmp_path / "run" / "checkpoint"
    tmp = temporary_sibling(ckpt, "1")
    (tmp / "trainer_state.json").write_text('{"step": 4}')
    commit(tmp, ckpt)
    (ckpt / "trainer_state.json").write_text('{"step": 0}')  # same size, other bytes
    config = write_config(tmp_path, steps=0, warm_start="null", out=str(tmp_path / "run"))
    assert main(["train", "--config", config]) == 2
    assert one_line(capsys) == (f"orchlib train: {ckpt / 'trainer_state.json'}: its SHA-256 differs from the one "
                                "saved (changed after saving) (not resumed; move the folder away to start again)")
    assert (ckpt / "trainer_state.json").read_text() == '{"step": 0}'
    assert sorted(p.name for p in ckpt.parent.iterdir()) == ["checkpoint"]


# ---------------------------------------------------------------------------------------------- eval
@pytest.fixture
def no_evaluation(monkeypatch):
    import importlib

    def started(*args, **kwargs):
        raise AssertionError("the evaluation started on bad input")

    monkeypatch.setattr(importlib.import_module("orchlib.evaluate"), "evaluate", started)
    monkeypatch.chdir(REPO)


ENDPOINT = "http://127.0.0.1:9/v1"  # never asked: every case fails before the first request


@pytest.mark.parametrize("flags, expected", [
    (["--policy", "none"], "--policy none: no policy left to evaluate; add --policy-endpoint URL --model NAME, "
                           "or give --policy a model ('tiny', a folder, a checkpoint or a hub id)"),
    (["--policy", "none", "--policy-endpoint", "ftp://127.0.0.1/v1", "--model", "m"],
     "--policy-endpoint: 'ftp://127.0.0.1/v1' is not an http:// or https:// URL"),
    (["--policy", "none", "--policy-endpoint", "file:///etc/passwd", "--model", "m"],
     "--policy-endpoint: 'file:///etc/passwd' is not an http:// or https:// URL"),
    (["--policy", "none", "--policy-endpoint", ENDPOINT, "--model", "m", "--judge-endpoint", "ftp://h/v1",
      "--judge-model", "j"], "--judge-endpoint: 'ftp://h/v1' is not an http:// or https:// URL"),
    (["--policy", "none", "--policy-endpoint", ENDPOINT, "--model", "m", "--price-in", "inf"],
     "--price-in: Input should be a finite number"),
    (["--policy", "none", "--policy-endpoint", ENDPOINT, "--model", "m", "--max-in-flight", "0"],
     "--max-in-flight: Input should be greater than or equal to 1"),
])
def test_eval_flags_name_the_flag(tmp_path, capsys, no_evaluation, flags, expected):
    assert main(["eval", *flags, "--out", str(tmp_path / "out")]) == 2
    assert one_line(capsys) == f"orchlib eval: {expected}"


def test_eval_config_with_an_ftp_endpoint_names_file_line_and_field(tmp_path, capsys, no_evaluation):
    config = tmp_path / "eval.yaml"
    config.write_text("policies:\n  - name: x\n    api: {base_url: 'ftp://h/v1', model: m}\n")
    assert main(["eval", "--config", str(config)]) == 2
    err = one_line(capsys)
    assert err.startswith(f"orchlib eval: {config}:3: ") and "base_url" in err and "not an http://" in err


def judge_fingerprint() -> str:
    from orchlib.judge import Judge

    return Judge(base_url=ENDPOINT, model="j").fingerprint


def row(**change):
    fields = dict(q="q", a="a", r="r", score=1.0, reply="GRADE: CORRECT", cost=0.001, t_in=10, t_out=2)
    fields.update(change)
    return list(fields.values())


@pytest.mark.parametrize("cache, expected", [
    (lambda fp: "{not json", ":1: not a judge cache: Expecting property name"),
    (lambda fp: b"\xff\xfe", ": not a judge cache: not UTF-8 text (byte 0)"),
    (lambda fp: "[]", ":1: not a judge cache: expected an object of judges"),
    (lambda fp: {fp: []}, ": {fp}: expected an object whose grades are a list"),
    (lambda fp: {fp: {"grades": [row(), row(score=float("nan"))]}},
     ": {fp}.grades[1]: score: expected a number from 0 to 1, got nan"),
    (lambda fp: {fp: {"grades": [row(cost=-51.0)]}}, ": {fp}.grades[0]: cost: expected a number from 0 to 10000, "
                                                    "got -51.0"),
    (lambda fp: {fp: {"grades": [row(cost=1e30)]}}, ": {fp}.grades[0]: cost: expected a number from 0 to 10000, "
                                                   "got 1e+30"),
    (lambda fp: {fp: {"grades": [row(t_in="5")]}}, ": {fp}.grades[0]: tokens_in: expected a whole number"),
    (lambda fp: {fp: {"grades": [row(q={"a": 1})]}}, ": {fp}.grades[0]: question: expected text, got dict"),
    (lambda fp: {fp: {"grades": [row()[:5]]}}, ": {fp}.grades[0]: expected [question, answer, reference"),
])
def test_eval_on_a_corrupt_judge_cache_is_one_line_naming_file_and_field(tmp_path, capsys, no_evaluation,
                                                                          cache, expected):
    fp = judge_fingerprint()
    out = tmp_path / "out"
    out.mkdir()
    content = cache(fp)
    target = out / "judge_cache.json"
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content if isinstance(content, str) else json.dumps(content))
    assert main(["eval", "--policy", "none", "--policy-endpoint", ENDPOINT, "--model", "m",
                 "--judge-endpoint", ENDPOINT, "--judge-model", "j", "--out", str(out)]) == 2
    assert one_line(capsys).startswith(f"orchlib eval: {target}{expected.format(fp=fp)}")


# ---------------------------------------------------------------------------------------------- cards import
TOOL = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}


def test_cards_import_out_under_a_file_or_in_proc_is_one_line(tmp_path, capsys):
    defs = tmp_path / "tools.json"
    defs.write_text(json.dumps([TOOL]))
    (tmp_path / "f").write_text("x")
    assert main(["cards", "import", str(defs), "--out", str(tmp_path / "f" / "cards")]) == 2
    assert one_line(capsys) == (f"orchlib cards: --out {tmp_path / 'f' / 'cards'}: is under {tmp_path / 'f'}, "
                                "which is a file, not a folder")
    assert main(["cards", "import", str(defs), "--out", "/proc/orchlib-cards"]) == 2
    assert one_line(capsys).startswith("orchlib cards: --out /proc/orchlib-cards: cannot write there (")
    assert not os.path.exists("/proc/orchlib-cards")


def test_cards_import_of_deeply_nested_json_names_file_and_line(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 5000 + "]" * 5000)
    assert main(["cards", "import", str(deep), "--out", str(tmp_path / "out")]) == 2
    assert one_line(capsys) == f"orchlib cards: {deep}:1: nested more than 100 levels deep"
    schema: dict = {"type": "object"}
    for _ in range(150):
        schema = {"type": "object", "properties": {"x": schema}}
    tool = {"type": "function", "function": {"name": "g", "parameters": schema}}
    lines = tmp_path / "tools.jsonl"
    lines.write_text(json.dumps(TOOL) + "\n" + json.dumps(tool) + "\n")
    assert main(["cards", "import", str(lines), "--out", str(tmp_path / "out")]) == 2
    assert one_line(capsys) == f"orchlib cards: {lines}:2: nested more than 100 levels deep"
    pretty = tmp_path / "pretty.json"
    # one key per line: line 5 opens level 3 ("parameters"), then each schema opens two levels in three
    # lines ("properties" on the 2nd, "x" on the 3rd), so level 101 opens on line 8 + 3 * (101 - 5) / 2
    pretty.write_text(json.dumps(tool, indent=1))
    assert main(["cards", "import", str(pretty), "--out", str(tmp_path / "out")]) == 2
    assert one_line(capsys) == f"orchlib cards: {pretty}:152: nested more than 100 levels deep"
    assert not (tmp_path / "out").exists()  # nothing written, not even the folder


# ---------------------------------------------------------------------------------------------- synth
SYNTH = ["synth", "--domain", "a small public library", "--model", "writer-1", "--no-progress"]


def test_synth_on_a_corrupt_stage_cache_names_the_file(tmp_path, capsys):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "domain.json").write_text('{"prompt_sha256": "x", "reply": "{}", "tokens_in": -5, "tokens_out": 1}')
    assert main([*SYNTH, "--base-url", ENDPOINT, "--out", str(tmp_path / "out"), "--cache", str(cache)]) == 2
    assert one_line(capsys) == (f"orchlib synth: {cache / 'domain.json'}: tokens_in: -5 is not a token count "
                                "(0 to 100,000,000)")
    (cache / "domain.json").write_text("{")
    assert main([*SYNTH, "--base-url", ENDPOINT, "--out", str(tmp_path / "out"), "--cache", str(cache)]) == 2
    assert one_line(capsys).startswith(f"orchlib synth: {cache / 'domain.json'}:1: not a stage cache file")


def test_synth_with_an_ftp_endpoint_names_the_flag(tmp_path, capsys):
    assert main([*SYNTH, "--base-url", "ftp://h/v1", "--out", str(tmp_path / "out")]) == 2
    assert one_line(capsys) == "orchlib synth: --base-url: 'ftp://h/v1' is not an http:// or https:// URL"
