"""Notebook 03 in a real JupyterLab, driven by headless Chromium (Playwright with the system chromium).

JupyterLab runs on 127.0.0.1 with a random token and its config, data and runtime folders in a
temporary directory; the kernel is this interpreter, installed there as the `python3` kernelspec.
The notebook is copied to a temporary root, so nothing in the checkout is written. The test runs all
cells, clicks Step twice and checks the step counter and the reward chart (points of its first trace,
read from plotly's own graph div) moved with it, moves a preference slider and checks the P the
kernel reports, takes one more step under that P, and saves screenshots to test-artifacts/.

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
    """(base URL, token, server log path) of a JupyterLab serving a temporary copy of notebook 03."""
    _require_browser()
    dirs = {name: tmp_path / name for name in ("config", "data", "runtime", "root")}
    for d in dirs.values():
        d.mkdir()
    shutil.copy(NOTEBOOK, dirs["root"] / NOTEBOOK.name)
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
