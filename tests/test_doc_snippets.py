"""Every ```python block of the guide (docs/*.md) and the README runs, as a reader would run it.

A page's blocks run in order in one namespace, in a fresh folder holding copies of rewards/, toolcards/
and examples/ (a snippet that writes, writes there), with that folder on sys.path. A block whose first
line names a file (`# shipping.py`, `# cards/expert.yaml`) is also written to that file first, so a page
that builds a small project file by file runs as the reader would build it.

A block that cannot run here (it needs a network server, an API key or a hub download) says so in its
fence: ```python no-run: <why>. Such a block must still compile; there are few of them, each with its
reason. Dated notes (docs/notes/) are records, not guide pages, and are not run.
"""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]  # docs/notes/ is one level down: not a guide page
COPIED = ("rewards", "toolcards", "examples")  # what the snippets name relative to a checkout
NO_RUN = re.compile(r"no-run:\s*(\S.*)")
MAX_NO_RUN = 12  # exceptions stay few: a guide's examples are meant to be run
# a first line that names the file the block is (a path with an extension, no spaces)
FILE_LINE = re.compile(r"#\s+([\w./-]+\.(?:py|ya?ml|jsonl?))\s*$")
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)

# What a page's prose gives its blocks without a line of code (the output of a command it shows):
# run before the block that contains the key.
BEFORE = {
    # the shown `orchlib train --config train.yaml`, whose history the block reads
    ("your-own-tools-tasks-reward.md", 'open("runs/shipping/history.json")'):
        "from orchlib.cli import main as _main\nassert _main(['train', '--config', 'train.yaml']) == 0",
    # "a group" and "a task" of the page's prose: one task's 4 rollouts of the tiny policy
    ("rewards.md", "r(group, P=task.preference)"):
        "from orchlib import Reward as _R, TransformersEngine as _E, build_default_policy as _b, make_suite as _s\n"
        "from orchlib import RolloutConfig as _C, rollout as _roll\n"
        "_env = _s(seed=0).environment(_R('outcome'))\n"
        "group, task = (_roll(_env, _E(*_b('tiny')), config=_C(tool_schema='compact'), group_size=4,\n"
        "                     tasks=_env.test[:1]), _env.test[0])",
    # the task file the prose names (what tasks.md's `suite.save("tasks")` writes)
    ("describe.md", '"tasks/train.jsonl"'): "from orchlib import make_suite as _s\n_s(0).save('tasks')",
    # "the quickstart's checkpoint": a saved tiny policy stands in for it
    ("evaluating.md", 'load_policy("runs/toy/policy")'):
        "from orchlib import build_default_policy as _b\n_m, _t = _b('tiny')\n"
        "_m.save_pretrained('runs/toy/policy'); _t.save_pretrained('runs/toy/policy')",
    # "the compared policies' reports": the page's one report, and the same policy again under another name
    ("evaluating.md", "reward_across(reports"):
        "from orchlib.evaluate import compare\nreports = {'toy-trained': report, 'again': report}",
    # the domain the page's synthesis writes: the shipped one, which it rebuilds
    ("synth.md", '"domains/synth_library/tasks.jsonl"'):
        "import shutil as _sh, orchlib.synth.library as _lib\nfrom pathlib import Path as _P\n"
        "_sh.copytree(_P(_lib.__file__).parent, 'domains/synth_library')",
    # "a table of recorded outputs"
    ("tools.md", 'write_recording(df, "runs.jsonl")'):
        "df = [{'prompt': 'What is 6*7?', 'model': 'gpt-5/high', 'response': '42', 'grade': 1}]",
    # the page's world: tests/data/recorded_world/, and a tokenizer
    ("recorded-worlds.md", 'read_openai_jsonl("conversations.jsonl")'):
        "import shutil as _sh\nfrom orchlib.models import build_tokenizer\n"
        "_sh.copytree(_WORLD, '.', dirs_exist_ok=True)\ntokenizer = build_tokenizer()",
}
_WORLD = ROOT / "tests" / "data" / "recorded_world"


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # the fence's line, 1-based
    lang: str  # the fence's first word
    info: str  # the rest of the fence's info string
    code: str

    @property
    def file(self) -> str | None:
        first = self.code.splitlines()[0] if self.code.strip() else ""
        m = FILE_LINE.fullmatch(first.strip())
        return m.group(1) if m else None

    @property
    def no_run(self) -> str | None:
        m = NO_RUN.fullmatch(self.info.strip())
        return m.group(1).strip() if m else None

    def __str__(self) -> str:
        where = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{where}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of a page, with its language and info string."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        lang, _, info = m.group(1).strip().partition(" ")
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, lang, info, m.group(2)))
    return out


def fence_problems(page: Path) -> list[str]:
    """'page:line: why' for each Python block whose fence the runner would not read as meant."""
    bad = []
    starts = {b.line for b in blocks(page)}
    text = page.read_text(encoding="utf-8")
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("```py") and i not in starts:  # CommonMark: no backtick in a fence's info string
            bad.append(f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}:{i}: fence not read as one")
    for b in blocks(page):
        if b.lang in ("py", "python3", "pycon", "ipython"):
            bad.append(f"{b}: fence `{b.lang}`: write `python` (or `python no-run: why`)")
        elif b.lang == "python" and b.info and b.no_run is None:
            bad.append(f"{b}: fence info {b.info!r}: only `no-run: <why>` is understood")
    return bad


def run_page(page: Path, folder: Path) -> int:
    """Runs a page's Python blocks in order in one namespace, in `folder`; returns how many ran."""
    for name in COPIED:
        if (ROOT / name).exists() and not (folder / name).exists():
            shutil.copytree(ROOT / name, folder / name, symlinks=False)
    scope: dict = {"__name__": "__doc_snippet__", "_WORLD": _WORLD}
    ran = 0
    for b in blocks(page):
        if b.file and b.lang in ("python", "yaml", "json"):
            dest = folder / b.file
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(b.code, encoding="utf-8")
        if b.lang != "python" or b.no_run is not None:
            continue
        for (name, marker), code in BEFORE.items():
            if page.name == name and marker in b.code:
                exec(compile(code, f"{b} (before)", "exec"), scope)
        exec(compile(b.code, str(b), "exec"), scope)
        ran += 1
    return ran


def _python_blocks(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang == "python"]


@pytest.fixture
def page_folder(tmp_path, monkeypatch, policy_cache):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))  # the tiny policy built once for the session
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:  # a page's own modules (shipping.py) do not leak to the next
        if getattr(sys.modules[name], "__file__", None) and str(tmp_path) in sys.modules[name].__file__:
            del sys.modules[name]


RUNNABLE = [p for p in PAGES if any(b.no_run is None for b in _python_blocks(p))]


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_snippets_run(page, page_folder):
    assert run_page(page, page_folder) == sum(b.no_run is None for b in _python_blocks(page))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_fences_are_runnable_or_say_why_not(page):
    assert fence_problems(page) == []
    for b in _python_blocks(page):
        if b.no_run is not None:
            compile(b.code, str(b), "exec")  # not run, but still Python a reader can copy


def test_exceptions_are_few():
    skipped = [f"{b}: {b.no_run}" for p in PAGES for b in _python_blocks(p) if b.no_run is not None]
    assert len(skipped) <= MAX_NO_RUN, skipped


def test_the_runner_runs_blocks_in_order_writes_named_files_and_skips_only_what_says_why(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n```python\n# helper.py\nVALUE = 41\n```\n"
        "```yaml\n# conf/a.yaml\nk: 1\n```\n"
        "```python\nfrom helper import VALUE\nseen = VALUE + 1\nopen('out.txt', 'w').write(str(seen))\n```\n"
        "```python no-run: needs a server\nraise SystemExit('never run')\n```\n"
        "```bash\nexit 1\n```\n", encoding="utf-8")
    folder = tmp_path / "run"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    assert run_page(page, folder) == 2
    assert (folder / "out.txt").read_text() == "42"
    assert (folder / "conf" / "a.yaml").read_text() == "# conf/a.yaml\nk: 1\n"
    sys.modules.pop("helper", None)
    assert fence_problems(page) == []

    page.write_text("```python\nraise ValueError('snippet broke')\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="snippet broke"):
        run_page(page, folder)
    page.write_text("```py\nx = 1\n```\n```python skip\nx = 1\n```\n```python no-run:\nx = 1\n```\n"
                    "```python no-run: needs `a server`\nx = 1\n```\n", encoding="utf-8")
    assert fence_problems(page) == [f"{page}:10: fence not read as one",
                                    f"{page}:1: fence `py`: write `python` (or `python no-run: why`)",
                                    f"{page}:4: fence info 'skip': only `no-run: <why>` is understood",
                                    f"{page}:7: fence info 'no-run:': only `no-run: <why>` is understood"]
