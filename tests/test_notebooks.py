"""Every notebook in notebooks/ runs top to bottom, headless (nbclient), without a cell error, within
a few minutes; each is a tutorial over orchlib: markdown between short code cells, no functions or
classes of its own.

The kernel is this interpreter, through a kernelspec written to a temporary folder, so the notebooks
import the orchlib under test whatever kernels the machine has. Notebooks are kept without outputs;
the executed copies (with the checks below appended) are written to test-artifacts/notebooks/.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

import nbformat
import pytest
from conftest import REPO
from nbformat.v4 import new_code_cell

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
ARTIFACTS = REPO / "test-artifacts" / "notebooks"  # gitignored
CELL_TIMEOUT_S = 300  # the slowest cell, notebook 03's SFT warm start, takes ~1 min on 2 busy cores
NOTEBOOK_BUDGET_S = 300  # "runs top to bottom on CPU in a few minutes"; the slowest takes ~1 min here
MAX_CODE_LINES = 20  # short code cells: the longest are the import cells
MAX_CODE_RUN = 3  # code cells in a row before a markdown cell must say what the next concept is

# Run after a notebook's own cells, in its kernel: what the notebook claims to show, it must show.
CHECKS = {
    # 03 drives 12 sampled steps: whether the share of `right` rises in them is up to the draw (and so to
    # the CPU's rounding); what the notebook must show is that the buttons ran every step and reported it.
    "03_train_with_panel": """
share = [m.get("share/right", 0.0) for m in trainer.history[:12]]
assert len(share) == 12 and all(0.0 <= s <= 1.0 for s in share), share
assert trainer.step_count >= 13 and len(trainer.history) == trainer.step_count  # 12, the paused run, one more
assert real.policy == "smollm2" and real.env.world == "orchestra-read" and real.order_drills is not None
""",
    # 05 says the sweep reads P and covers more than any fixed routing, the planted price mistake is
    # caught, the bill adds up, and the typed conversation ends as typed and replays to the same end.
    "05_sweep_audit_user": """
assert len(result.points) == 12 and len({(p.cost_usd, p.accuracy) for p in result.points}) > 1
hv = result.hypervolumes()
assert all(hv[result.name] > hv[name] for name in references), hv
assert {f.card for f in audit.flagged} == {"gpt4_typo", "specialist"}, audit.flagged
assert [f.kind for f in audit.flagged if f.card == "gpt4_typo"] == ["off"]
assert bill.reconciles and not bill.warnings, bill.warnings
assert t.finish_reason == "user_stop" and t.outcome == 1.0
typed = [turn.user.text for turn in t.turns if turn.user]
assert typed == ["It is R1002: please cancel it.", "Yes, cancel it.", ""], typed
assert again.outcome == 1.0 and again.finish_reason == "user_stop"
""",
}


@pytest.fixture(scope="module")
def kernel_manager_factory(tmp_path_factory, policy_cache):
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    folder = tmp_path_factory.mktemp("kernels")
    spec = folder / "orchlib-test"
    spec.mkdir()
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "orchlib test", "language": "python",
        # the session's policy cache: the tiny policy is built once for all tests, not in the home folder
        "env": {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "ORCHLIB_CACHE": str(policy_cache)}}))
    ksm = KernelSpecManager(kernel_dirs=[str(folder)], ensure_native_kernel=False)
    return lambda: KernelManager(kernel_name="orchlib-test", kernel_spec_manager=ksm)


def test_notebooks_exist_and_are_committed_without_outputs():
    assert {"01_", "02_", "03_", "04_", "05_"} <= {p.name[:3] for p in NOTEBOOKS}
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), path.name
        assert any(c.cell_type == "markdown" for c in nb.cells)
        assert "import orchlib" in "".join(c.source for c in code) or "from orchlib" in "".join(c.source for c in code)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebooks_are_tutorials_over_the_library(path):
    """A markdown cell per concept, short code cells, and nothing of the library written again."""
    cells = nbformat.read(path, as_version=4).cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# "), "opens with a title"
    run = 0
    for i, c in enumerate(cells):
        run = run + 1 if c.cell_type == "code" else 0
        assert run <= MAX_CODE_RUN, f"cell {i}: {run} code cells without a markdown cell"
        if c.cell_type == "code":
            assert len(c.source.splitlines()) <= MAX_CODE_LINES, f"cell {i} is long"
            # a def or class in a tutorial is library logic living in the wrong place
            assert not re.search(r"^\s*(async\s+def|def|class)\s", c.source, re.M), f"cell {i} defines code"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_without_errors(path, kernel_manager_factory, tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    if path.stem in CHECKS:
        nb.cells.append(new_code_cell(CHECKS[path.stem].strip()))
    client = NotebookClient(nb, km=kernel_manager_factory(), timeout=CELL_TIMEOUT_S, allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    try:
        client.execute()  # raises CellExecutionError naming the cell on the first error
    finally:
        if client.km is not None and client.km.has_kernel:  # a kernel manager we passed in is ours to stop
            client.km.shutdown_kernel(now=True)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, ARTIFACTS / path.name)  # the executed copy, outputs and all, for reading
    seconds = time.perf_counter() - t0
    print(f"{path.name}: {seconds:.1f} s")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert seconds < NOTEBOOK_BUDGET_S, f"{path.name} took {seconds:.0f} s"
