"""Notebook 03 in a real JupyterLab, driven by headless Chromium (Playwright with the system chromium).

JupyterLab runs on 127.0.0.1 with a random token and its config, data and runtime folders in a
temporary directory; the kernel is this interpreter, installed there as the `python3` kernelspec.
The notebook is copied to a temporary root, so nothing in the checkout is written. The test runs all
cells, clicks Step twice and checks the step counter and the reward chart (points of its first trace,
read from plotly's own graph div) moved with it, moves a preference slider and checks the P the
kernel reports, takes one more step under that P, and saves screenshots to test-artifacts/.

Notebook 05 the same way: all cells run, then the screenshots are checked for what must be drawn — the
sweep's figure (one marker per P in the SVG, and a plot area that is not blank), the ledger's bars, the
audit's table with the planted mistake, the reward breakdown — and the user panel is used as a person
would: New conversation, a message typed into its text box, Send, and the message and the orchestrator's
next reply appear in the timeline.

The demo's report.html, built from hand-made runs by the demo's own `write_outputs` (no training), opened
from disk at 1280 px: its first chart is the share of calls per backend (its bars and their heights read
from plotly's graph div), the checks follow, the numbers are an HTML table no wider than the page, and no
model-written name becomes markup; screenshots go to the test's temporary folder.

Skipped only where /usr/bin/chromium is missing and `CI` is unset; with `CI` set it must run.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
NOTEBOOK = REPO / "notebooks" / "03_train_with_panel.ipynb"
NOTEBOOK_05 = REPO / "notebooks" / "05_sweep_audit_user.ipynb"
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
RUN_ALL_TIMEOUT_MS = 600_000  # the SFT warm start alone takes ~1 min on 2 busy cores
STEP_TIMEOUT_MS = 120_000
KERNEL_NAME = "orchlib (test)"

# Settings that keep JupyterLab quiet and deterministic: no news or update checks (offline), every
# cell kept in the DOM (no windowing) so prompts can be read, no autosave.
USER_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                         "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none",
                                                                   "autoStartDefaultKernel": True},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


def _require_browser():
    missing = [] if CHROMIUM.exists() else [str(CHROMIUM)]
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package")
    if not missing:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but {' and '.join(missing)} is missing (`make test` installs chromium)")
    pytest.skip(f"{' and '.join(missing)} missing (set CI to make this a failure)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def jupyterlab(tmp_path, policy_cache):
    """(base URL, token, server log path) of a JupyterLab serving temporary copies of notebooks 03 and 05."""
    _require_browser()
    dirs = {name: tmp_path / name for name in ("config", "data", "runtime", "root")}
    for d in dirs.values():
        d.mkdir()
    for notebook in (NOTEBOOK, NOTEBOOK_05):
        shutil.copy(notebook, dirs["root"] / notebook.name)
    for rel, value in USER_SETTINGS.items():
        path = dirs["config"] / "lab" / "user-settings" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(dirs["config"]), "JUPYTER_DATA_DIR": str(dirs["data"]),
           "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "JUPYTER_PREFER_ENV_PATH": "0"}
    # The kernel: this interpreter, as the `python3` spec of the temporary data folder (found first:
    # JUPYTER_PREFER_ENV_PATH=0 puts the user folders before the virtual environment's).
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--user", "--name", "python3",
                    "--display-name", KERNEL_NAME, "--env", "OMP_NUM_THREADS", "1",
                    "--env", "HF_HUB_OFFLINE", "1",
                    "--env", "ORCHLIB_CACHE", str(policy_cache)], env=env, check=True, capture_output=True)
    spec = json.loads((dirs["data"] / "kernels" / "python3" / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    token, port = secrets.token_hex(16), _free_port()
    log = tmp_path / "jupyterlab.log"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={dirs['root']}", "--ServerApp.port_retries=0",
           "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.extension_manager=readonly"]  # offline: no news, update or PyPI look-ups
    if os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"JupyterLab did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield base, token, log
    finally:
        proc.send_signal(signal.SIGTERM)  # the server shuts its kernels down on the way out
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group of the server we started, nothing else
            proc.wait(10)


READ_POINTS = """() => {
  const div = document.querySelector('.orchlib-reward-chart .js-plotly-plot');
  return div && div.data && div.data.length ? (div.data[0].x || []).length : -1;
}"""

PROMPTS = "() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent.trim())"


def _status(page) -> dict[str, str]:
    el = page.locator(".orchlib-status").first
    return {k: el.get_attribute(f"data-{k}") for k in ("step", "state", "points")}


def _wait_for_step(page, step: int) -> None:
    page.wait_for_function(
        """(n) => { const s = document.querySelector('.orchlib-status');
                    return s && +s.dataset.step === n && s.dataset.state !== 'running'; }""",
        arg=step, timeout=STEP_TIMEOUT_MS)


def test_notebook_03_panel_in_jupyterlab(jupyterlab, tmp_path):
    from playwright.sync_api import sync_playwright

    base, token, log = jupyterlab
    ARTIFACTS.mkdir(exist_ok=True)
    console: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1500, "height": 1100})
        try:
            page = browser.new_page()
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.goto(f"{base}/lab/tree/{NOTEBOOK.name}?token={token}", timeout=120_000)
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)
            deadline = time.time() + 120
            while KERNEL_NAME not in page.locator(".jp-KernelName").first.inner_text():  # our kernelspec
                if page.locator(".jp-Dialog .jp-mod-accept").count():  # a kernel chooser, should a setting not apply
                    page.locator(".jp-Dialog .jp-mod-accept").click()
                assert time.time() < deadline, "the notebook's kernel did not start"
                time.sleep(0.5)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)

            page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
            page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
            # Queued and running cells show [*]; Run All stops at a failing cell, leaving the rest [ ].
            page.wait_for_function(f"() => ({PROMPTS})().some(p => p.includes('*'))", timeout=60_000)
            page.wait_for_function(f"() => !({PROMPTS})().some(p => p.includes('*'))", timeout=RUN_ALL_TIMEOUT_MS)
            prompts = page.evaluate(PROMPTS)
            if not all(re.search(r"\[\d+\]", p) for p in prompts):
                failed = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
                pytest.fail(f"not every cell ran: {prompts}\n" + "\n".join(failed.all_inner_texts())[-3000:])

            panel = page.locator(".orchlib-trainer-panel").first
            panel.scroll_into_view_if_needed()
            before = _status(page)
            step0 = int(before["step"])
            assert step0 >= 5 and before["state"] != "running", before  # the notebook's own steps ran
            page.wait_for_function(f"() => ({READ_POINTS})() === {step0}", timeout=30_000)

            step_button = panel.locator("button.orchlib-step")
            assert step_button.inner_text().strip() == "Step"
            for k in (1, 2):
                step_button.click()
                _wait_for_step(page, step0 + k)
            page.wait_for_function(f"() => ({READ_POINTS})() === {step0 + 2}", timeout=30_000)
            assert page.evaluate(READ_POINTS) == step0 + 2  # the reward chart really gained two points
            assert _status(page)["points"] == str(step0 + 2)
            panel.screenshot(path=str(ARTIFACTS / "browser-03-panel-after-steps.png"))

            label = panel.locator(".orchlib-p")
            assert "own P" in label.inner_text()  # the notebook's last preference cell restored each task's P
            handle = panel.locator(".widget-slider", has_text="cost").locator(".noUi-handle").first
            handle.focus()
            for _ in range(4):
                handle.press("ArrowRight")  # 4 × 0.05
            page.wait_for_function("() => /Preference \\(panel\\).*cost=0\\.2\\b/.test("
                                   "document.querySelector('.orchlib-p').textContent)", timeout=30_000)
            step_button.click()  # the next step runs under the sliders' P
            _wait_for_step(page, step0 + 3)
            page.wait_for_function("() => /P: panel/.test(document.querySelector('.orchlib-trajectory').textContent)",
                                   timeout=30_000)

            panel.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "browser-03-jupyterlab.png"))
            panel.screenshot(path=str(ARTIFACTS / "browser-03-panel.png"))
        except Exception:
            if "page" in locals():
                page.screenshot(path=str(ARTIFACTS / "browser-03-failure.png"))
            print("\n".join(console[-40:]))
            print(log.read_text()[-4000:])
            raise
        finally:
            browser.close()
    assert (ARTIFACTS / "browser-03-panel.png").stat().st_size > 10_000


# ---------------------------------------------------------------------------------------------- notebook 05
def _run_all_cells(page, base: str, token: str, name: str) -> None:
    """Open notebook `name` in JupyterLab, wait for its kernel, run all cells and wait for every one."""
    page.goto(f"{base}/lab/tree/{name}?token={token}", timeout=120_000)
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)
    deadline = time.time() + 120
    while KERNEL_NAME not in page.locator(".jp-KernelName").first.inner_text():
        if page.locator(".jp-Dialog .jp-mod-accept").count():
            page.locator(".jp-Dialog .jp-mod-accept").click()
        assert time.time() < deadline, "the notebook's kernel did not start"
        time.sleep(0.5)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    page.wait_for_function(f"() => ({PROMPTS})().some(p => p.includes('*'))", timeout=60_000)
    page.wait_for_function(f"() => !({PROMPTS})().some(p => p.includes('*'))", timeout=RUN_ALL_TIMEOUT_MS)
    prompts = page.evaluate(PROMPTS)
    if not all(re.search(r"\[\d+\]", p) for p in prompts):
        failed = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        pytest.fail(f"not every cell ran: {prompts}\n" + "\n".join(failed.all_inner_texts())[-3000:])


# The index of the plotly figure whose first trace's name holds `text` (-1: none drawn).
FIGURE_INDEX = """(text) => [...document.querySelectorAll('.js-plotly-plot')]
  .findIndex(d => d.data && d.data.length && String(d.data[0].name || '').includes(text))"""


def _drawn(path: Path, min_colours: int = 12, min_ink: float = 0.01) -> tuple[int, float]:
    """(distinct colours, share of pixels that are not near-white) of a screenshot: a figure or panel
    that is really drawn has many colours and some ink; a blank or collapsed one has neither."""
    from PIL import Image

    img = Image.open(path).convert("RGB")
    raw = img.tobytes()
    pixels = [tuple(raw[i:i + 3]) for i in range(0, len(raw), 3)]
    colours = len(set(pixels))
    ink = sum(1 for r, g, b in pixels if min(r, g, b) < 235) / len(pixels)
    assert colours >= min_colours and ink >= min_ink, f"{path.name} looks blank: {colours} colours, ink {ink:.3f}"
    return colours, ink


def _figure(page, text: str, path: Path):
    index = page.evaluate(FIGURE_INDEX, text)
    assert index >= 0, f"no figure whose first trace is named like {text!r}"
    figure = page.locator(".js-plotly-plot").nth(index)
    figure.scroll_into_view_if_needed()
    figure.screenshot(path=str(path))
    return index


def test_notebook_05_figures_audit_and_user_panel_in_jupyterlab(jupyterlab, tmp_path):
    from playwright.sync_api import sync_playwright

    base, token, log = jupyterlab
    ARTIFACTS.mkdir(exist_ok=True)
    console: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1500, "height": 1100})
        try:
            page = browser.new_page()
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            _run_all_cells(page, base, token, NOTEBOOK_05.name)

            # the sweep: one marker per P, drawn in the SVG and on screen
            sweep = _figure(page, "one point per P", ARTIFACTS / "browser-05-sweep.png")
            markers = page.evaluate("""(i) => { const d = document.querySelectorAll('.js-plotly-plot')[i];
                return [d.data[0].x.length, d.querySelectorAll('.scatterlayer .trace')[0]
                        .querySelectorAll('path.point').length]; }""", sweep)
            assert markers == [12, 12], markers
            _drawn(ARTIFACTS / "browser-05-sweep.png")
            # the ledger's bars (first trace: the first token class with money in it)
            ledger = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].findIndex(
                d => d.layout && d.layout.title && String(d.layout.title.text || '').startsWith('Where the money'))""")
            assert ledger >= 0
            bars = page.locator(".js-plotly-plot").nth(ledger)
            bars.scroll_into_view_if_needed()
            bars.screenshot(path=str(ARTIFACTS / "browser-05-ledger.png"))
            assert bars.locator(".barlayer path").count() > 0
            _drawn(ARTIFACTS / "browser-05-ledger.png")

            # the audit's table caught the planted mistake
            outputs = "\n".join(page.locator(".jp-OutputArea-output").all_inner_texts())
            assert re.search(r"gpt4_typo\s+OFF\s+price\.per_m_input", outputs), outputs[-2000:]
            assert "the lines add up exactly" in outputs

            # the reward breakdown, in the playground
            box = page.locator(".orchlib-reward-breakdown").first
            box.scroll_into_view_if_needed()
            assert "share" in box.inner_text() and box.locator("li.orchlib-reward-warning").count() >= 1

            # the user panel: the notebook's conversation is over; start one and type into it
            panel = page.locator(".orchlib-user-panel").first
            panel.scroll_into_view_if_needed()
            status = panel.locator(".orchlib-user-status")
            assert status.get_attribute("data-state") == "done"
            assert "It is R1002: please cancel it." in panel.locator(".orchlib-user-timeline").inner_text()
            panel.locator("button.orchlib-user-restart").click()
            page.wait_for_function("""() => document.querySelector('.orchlib-user-panel .orchlib-user-status')
                .dataset.state === 'waiting'""", timeout=STEP_TIMEOUT_MS)
            box = panel.locator(".orchlib-user-text input")
            assert box.count() == 1 and box.is_visible()
            typed = "Typed in the browser: R1002 please"
            box.fill(typed)
            panel.locator("button.orchlib-user-send").click()
            page.wait_for_function("""(typed) => {
                const t = document.querySelector('.orchlib-user-panel .orchlib-user-timeline');
                const s = document.querySelector('.orchlib-user-panel .orchlib-user-status');
                return t && t.textContent.includes(typed) && s.dataset.state === 'waiting'
                       && t.textContent.includes('Shall I cancel it?'); }""", arg=typed, timeout=STEP_TIMEOUT_MS)
            said = panel.locator(".orchlib-user-event[data-who='you'] .orchlib-user-said").all_inner_texts()
            assert said == [typed], said
            assert panel.locator(".orchlib-user-event[data-who='tool']").count() == 1  # the look-up, with its cost
            panel.screenshot(path=str(ARTIFACTS / "browser-05-user-panel.png"))
            _drawn(ARTIFACTS / "browser-05-user-panel.png", min_colours=8, min_ink=0.005)
            panel.locator("button.orchlib-user-end").click()
            page.wait_for_function("""() => document.querySelector('.orchlib-user-panel .orchlib-user-status')
                .dataset.state === 'done'""", timeout=STEP_TIMEOUT_MS)
            page.screenshot(path=str(ARTIFACTS / "browser-05-jupyterlab.png"))
        except Exception:
            if "page" in locals():
                page.screenshot(path=str(ARTIFACTS / "browser-05-failure.png"))
            print("\n".join(console[-40:]))
            print(log.read_text()[-4000:])
            raise
        finally:
            browser.close()


# ---------------------------------------------------------------------------------------------- the demo's report
LEARNED = """() => {
  const divs = [...document.querySelectorAll('.js-plotly-plot')];
  const first = divs[0];
  return {n: divs.length, inLearned: !!first.closest('#learned'), title: first.layout.title.text,
          traces: first.data.map(t => ({name: t.name, x: t.x, y: t.y, type: t.type})),
          bars: first.querySelectorAll('.barlayer path').length};
}"""

LAYOUT = """() => {
  const wrap = document.querySelector('#numbers .numbers');
  const table = wrap.querySelector('table');
  return {sections: [...document.querySelectorAll('body > section')].map(s => s.id || s.className),
          checks: [...document.querySelectorAll('#checks li')].map(li => li.textContent),
          header: [...table.querySelectorAll('th')].map(th => th.textContent),
          rows: [...table.querySelectorAll('tbody tr')].map(tr => [...tr.cells].map(td => td.textContent)),
          wrap: [wrap.scrollWidth, wrap.clientWidth], table: table.getBoundingClientRect().right,
          page: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
          images: document.querySelectorAll('img').length};
}"""


def test_demo_report_leads_with_backend_shares_then_checks_then_a_table_that_fits(tmp_path):
    """The demo's report.html from hand-made runs (no training), written by the demo's own `write_outputs`,
    opened in Chromium at 1280 px: the first chart is the backend shares, drawn with their exact heights;
    the checks follow; the numbers are a table as wide as the page at most; no model-written name runs."""
    from demo_report_inputs import HOSTILE, ODD_POLICY, TITLE, WANT_SHARES, hand_made, mean_outcome
    from playwright.sync_api import sync_playwright

    from orchlib.demo.app import write_outputs
    from orchlib.demo.report import objective_line, table_rows

    _require_browser()
    metrics, after, baselines, history = hand_made()
    out = tmp_path / "demo"
    out.mkdir()
    write_outputs(out, metrics, after, baselines, history, mean_outcome)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    dialogs: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900})
        try:
            page = browser.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto((out / "report.html").as_uri(), timeout=60_000)
            page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= 6",
                                   timeout=60_000)
            learned = page.evaluate(LEARNED)
            assert learned["n"] == 6 and learned["inLearned"] and learned["title"] == TITLE
            stages, profiles = list(WANT_SHARES), ["accuracy", "thrifty"]
            want_x = [[p for p in profiles for _ in stages], [s for _ in profiles for s in stages]]
            backends = ["calculator", "generalist", "mixtral", "unknown"]
            assert [t["name"] for t in learned["traces"]] == backends
            for t in learned["traces"]:
                assert t["type"] == "bar" and t["x"] == want_x
                assert t["y"] == [WANT_SHARES[s][p].get(t["name"], 0.0) for p in profiles for s in stages]
            assert learned["bars"] == len(backends) * len(want_x[0])  # every bar drawn in the SVG

            layout = page.evaluate(LAYOUT)
            assert layout["sections"] == ["learned", "checks", "numbers"] + ["training"] * 5
            # above the chart, the objective GRPO trained with, as the printed table's first line says it
            objective = page.locator("#objective")
            assert objective.is_visible() and objective.inner_text() == objective_line(metrics).capitalize() + "."
            assert page.evaluate("() => document.querySelector('#objective').nextElementSibling.id") == "learned"
            assert layout["checks"] == [f"{k}: {'PASS' if v else 'FAIL'}" for k, v in metrics["checks"].items()]
            header, rows = table_rows(metrics)
            assert layout["header"] == header and layout["rows"] == rows  # escaped text reads back as written
            assert ODD_POLICY in [r[0] for r in layout["rows"]]
            wrap_scroll, wrap_client = layout["wrap"]
            assert wrap_scroll <= wrap_client, layout  # the table needs no scrolling of its own...
            assert layout["page"][0] <= layout["page"][1] and layout["table"] <= 1280, layout  # ...nor the page
            assert layout["images"] == 0 and dialogs == []  # HOSTILE, a tool name, stayed text
            assert HOSTILE not in page.content()

            page.screenshot(path=str(shots / "demo-report-top.png"))
            page.locator("#learned .js-plotly-plot").screenshot(path=str(shots / "demo-report-learned.png"))
            _drawn(shots / "demo-report-learned.png")
            page.locator("#numbers").screenshot(path=str(shots / "demo-report-numbers.png"))
            _drawn(shots / "demo-report-numbers.png", min_colours=4, min_ink=0.005)
        except Exception:
            if "page" in locals():
                page.screenshot(path=str(shots / "demo-report-failure.png"), full_page=True)
            raise
        finally:
            browser.close()
