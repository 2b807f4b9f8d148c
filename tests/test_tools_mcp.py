"""MCP tools against a real MCP server (tests/mcp_server_fixture.py, written with the official SDK and
started as a subprocess): its tools listed into cards, called through the toolbox and in a rollout,
its errors, timeouts and a crash of the server itself as observations, and streamable HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from orchlib.env import Environment
from orchlib.cards import CardError, ToolCard, load_card, save_card  # noqa: E402
from orchlib.chat import parse_tool_calls, render_assistant  # noqa: E402
from orchlib.cli import main  # noqa: E402
from orchlib.rollout import RolloutConfig, rollout  # noqa: E402
from orchlib.tasks import Task  # noqa: E402
from orchlib.testing import ScriptedEngine  # noqa: E402
from orchlib.toolnames import ToolNames  # noqa: E402
from orchlib.tools import Toolbox, build_tool  # noqa: E402
from orchlib.tools.mcp import close_servers, connection_for, mcp_cards  # noqa: E402
from orchlib.trajectory import ToolCall  # noqa: E402

SERVER = str(Path(__file__).with_name("mcp_server_fixture.py"))
STDIO = {"command": sys.executable, "args": [SERVER]}
NAMES = {"math.add", "Fetch_DNA", "fail", "crash", "nap", "count", "die"}


@pytest.fixture(scope="module")
def cards():
    """Every tool of one server process, shared by the module's tests (starting it costs ~2 CPU s)."""
    found = mcp_cards(**STDIO, card_fields={"price": {"per_call": 0.001}})
    yield {c.name: c for c in found}
    close_servers()


def test_server_tools_become_cards_with_their_schemas(cards, tmp_path):
    assert set(cards) == NAMES
    add = cards["math.add"]
    assert add.kind == "mcp" and add.backend == STDIO and add.description == "Add two integers."
    props = add.parameters["properties"]
    assert add.parameters["required"] == ["a", "b"] and {k: v["type"] for k, v in props.items()} == {
        "a": "integer", "b": "integer"}
    assert cards["Fetch_DNA"].parameters["properties"]["limit"]["default"] == 3
    # a card file of an MCP tool loads back equal, and builds without starting anything new
    path = save_card(add, tmp_path / "add.yaml")
    assert load_card(path) == add and build_tool(load_card(path)).remote_name == "math.add"
    # the OpenAI export maps the dotted name; a call written with it maps back
    names = ToolNames(cards, "openai")
    assert names.exported("math.add") == "math_add" and names.exported("Fetch_DNA") == "Fetch_DNA"
    assert add.to_openai(name=names.exported("math.add"))["function"]["name"] == "math_add"
    assert names.internal("math_add") == "math.add"


def test_calls_through_the_toolbox(cards):
    box = Toolbox.from_cards(cards.values())
    add, dna = box.call_many_sync([ToolCall(name="math.add", arguments={"a": 2, "b": 40}),
                                   ToolCall(name="Fetch_DNA", arguments={"gene": "BRCA1", "limit": 6})])
    assert (add.content, add.error, add.tool) == ("42", None, "math.add")
    assert dna.content == "ACGTAC (BRCA1)"
    assert add.cost_usd == pytest.approx(0.001) and add.latency_s > 0
    assert add.tokens_in > 0 and add.tokens_out == 1  # priced per token too when the card says so


def test_server_errors_and_timeouts_are_observations(cards):
    box = Toolbox.from_cards(cards.values())
    count = lambda: int(box.call_many_sync([ToolCall(name="count")])[0].content.split()[0])  # noqa: E731
    before = count()
    fail, crash, bad = box.call_many_sync([ToolCall(name="fail", arguments={"reason": "no fuel"}),
                                           ToolCall(name="crash"),
                                           ToolCall(name="math.add", arguments={"a": "two", "b": 1})])
    assert fail.error_kind == "tool_failure" and "refused: no fuel" in fail.error
    assert fail.content.startswith("error: ") and fail.cost_usd == pytest.approx(0.001)  # it ran: charged
    assert crash.error_kind == "tool_failure" and "Error executing tool crash" in crash.error
    assert "secret detail" not in crash.error  # the server keeps a crash's text
    assert bad.error_kind == "schema_violation" and bad.cost_usd == 0  # refused here, never sent
    assert count() == before + 1  # the same session after the server's errors; only count() reached it
    [slow] = box.call_many_sync([ToolCall(name="nap", arguments={"seconds": 30})], timeout_s=0.5)
    assert slow.error_kind == "timeout" and 0.5 <= slow.latency_s < 2
    capped = build_tool(cards["nap"].model_copy(update={"backend": {**STDIO, "timeout_s": 0.3}}))
    obs = capped.call_sync({"seconds": 30})
    assert obs.error_kind == "timeout" and "backend.timeout_s" in obs.error
    ghost = build_tool(cards["count"].model_copy(update={"name": "ghost", "backend": {**STDIO, "tool": "nope"}}))
    obs = ghost.call_sync({})
    assert obs.error_kind == "tool_failure" and "nope" in obs.error
    # a call that timed out ends its session (the server could still be sending): a fresh one counts from 1
    assert count() == 1


def test_a_rollout_calls_mcp_tools(cards, tiny_policy):
    _, tok = tiny_policy
    box = Toolbox.from_cards(cards.values())
    both = render_assistant("Two lookups.", [ToolCall(name="math.add", arguments={"a": 5, "b": 7}),
                                             ToolCall(name="Fetch_DNA", arguments={"gene": "TP53"})])
    fail = render_assistant("", [ToolCall(name="fail", arguments={"reason": "tired"})])
    engine = ScriptedEngine(tok, [both, fail, "12"])
    task = Task(id="m1", prompt="What is 5 + 7?", answer="12", checker="numeric", category="arithmetic")
    [traj] = rollout(Environment(train=[task], tools=box), engine, config=RolloutConfig(max_new_tokens=200,
                                                                                        max_turns=4))
    assert traj.finish_reason == "answer" and traj.outcome == 1.0
    assert traj.calls == {"math.add": 1, "Fetch_DNA": 1, "fail": 1}
    assert [o.content for o in traj.turns[0].observations] == ["12", "ACG (TP53)"]
    assert traj.errors == {"tool_failure": 1} and "refused: tired" in traj.turns[1].observations[0].content
    text = tok.decode(traj.ids, skip_special_tokens=False)
    assert '"name": "math.add"' in text  # listed and called under the server's own name
    assert parse_tool_calls(both)[1][0].name == "math.add"
    tool_costs = sum(o.cost_usd for t in traj.turns for o in t.observations)
    assert tool_costs == pytest.approx(3 * 0.001)


def test_declared_latency_and_a_server_that_dies_is_started_again(tmp_path):
    # A server of its own (env differs, so the session is not the module's).
    backend = {**STDIO, "env": {"ORCHLIB_TEST": "restart"}, "declared_latency": True}
    card = ToolCard(name="count", kind="mcp", description="count", backend=backend,
                    latency={"seconds": 2.5}, price={"per_second": 0.01})
    die = build_tool(ToolCard(name="die", kind="mcp", description="die", backend=backend))
    tool = build_tool(card)
    first = tool.call_sync({})
    assert first.latency_s == 2.5 and first.cost_usd == pytest.approx(0.025)  # the card's, not the clock's
    n, pid = first.content.split()
    assert n == "1"
    dead = die.call_sync({})
    assert dead.error_kind == "tool_failure" and "MCP server" in dead.error
    again = tool.call_sync({})
    assert again.error is None and again.content.split()[0] == "1" and again.content.split()[1] != pid
    assert tool.connection.starts == 2 and tool.connection is die.connection
    tool.connection.close()


def test_a_call_given_up_on_before_it_was_sent_leaves_the_session_be():
    # Timed out while its server was still starting: nothing reached the server, so nothing can come back
    # late, and the session that was starting serves the next calls.
    backend = {**STDIO, "env": {"ORCHLIB_TEST": "early"}}
    hasty = build_tool(ToolCard(name="count", kind="mcp", description="count",
                                backend={**backend, "timeout_s": 0.05}))  # far less than a server's start
    tool = build_tool(ToolCard(name="count", kind="mcp", description="count", backend=backend))
    conn = tool.connection
    try:
        assert hasty.call_sync({}).error_kind == "timeout"
        n1, pid1 = tool.call_sync({}).content.split()
        n2, pid2 = tool.call_sync({}).content.split()
        assert (n1, n2, pid2) == ("1", "2", pid1) and conn.starts == 1
    finally:
        conn.close()


def test_a_reset_ends_only_the_session_it_was_asked_for(monkeypatch):
    # A reset while the server is starting ends that session, and only it: a session started after it,
    # which later calls are using, must not be cancelled when the reset's grace period runs out (it was, and
    # a rollout's next call found "Connection closed"). The grace period is set longer than a server takes
    # to start, so the starting one comes up before it runs out.
    monkeypatch.setattr("orchlib.tools.mcp.RESET_WAIT_S", 4.0)
    backend = {**STDIO, "env": {"ORCHLIB_TEST": "reset"}}
    hasty = build_tool(ToolCard(name="count", kind="mcp", description="count",
                                backend={**backend, "timeout_s": 0.05}))
    tool = build_tool(ToolCard(name="count", kind="mcp", description="count", backend=backend))
    conn = tool.connection
    try:
        assert hasty.call_sync({}).error_kind == "timeout"  # the server is starting
        conn.reset()
        reset_at = time.monotonic()
        deadline = reset_at + 30  # until the session that was starting is up or already gone
        while conn._client is None and not conn._serving.done() and time.monotonic() < deadline:
            time.sleep(0.02)
        n1, pid1 = tool.call_sync({}).content.split()
        time.sleep(max(0.0, reset_at + 4.5 - time.monotonic()))  # past the reset's grace period
        n2, pid2 = tool.call_sync({}).content.split()
        assert (n1, n2, pid2) == ("1", "2", pid1)  # the same session went on counting
        assert conn.starts == 2  # the starting one was ended; one more was started
    finally:
        conn.close()


def test_bad_servers_and_settings():
    card = ToolCard(name="x", kind="mcp", description="d", backend={"command": "/nonexistent/mcp-server"})
    obs = build_tool(card).call_sync({})
    assert obs.error_kind == "tool_failure" and "could not start" in obs.error
    connection_for(build_tool(card).settings).close()
    for backend, problem in [({}, "either command"), ({"command": "x", "url": "http://127.0.0.1:1/mcp"}, "not both"),
                             ({"url": "http://h/mcp", "args": ["a"]}, "for a stdio server"),
                             ({"url": "ftp://h"}, "should match pattern")]:
        with pytest.raises(CardError, match=problem):
            build_tool(card.model_copy(update={"backend": backend}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_streamable_http_server_and_cli_import(tmp_path, capsys):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "http", "127.0.0.1", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 25
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the HTTP server did not start"
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        out = tmp_path / "cards"
        assert main(["cards", "import", "--mcp-url", url, "--out", str(out)]) == 0
        printed = capsys.readouterr().out
        assert "7 card(s)" in printed
        box = Toolbox.load(out)
        assert set(box.names) == NAMES and box["math.add"].card.backend == {"url": url}
        [obs] = box.call_many_sync([ToolCall(name="math.add", arguments={"a": 1, "b": 2})])
        assert obs.content == "3" and obs.error is None
        exported = json.loads(json.dumps(box["math.add"].card.to_mcp()))
        assert exported["name"] == "math.add" and exported["inputSchema"]["required"] == ["a", "b"]
    finally:
        close_servers()
        proc.terminate()
        proc.wait(10)
