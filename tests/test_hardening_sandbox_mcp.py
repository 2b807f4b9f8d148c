"""An MCP server that hands over too much: pages without end, too many tools, too many content blocks,
a 50 MB message, a schema 10,000 levels deep, a call that never answers. Each ends in a clear error
naming the server and the field, quickly."""

from __future__ import annotations

import re
import sys
import time

import pytest

pytest.importorskip("mcp")

from orchlib.cards import ToolCard  # noqa: E402
from orchlib.tools import build_tool  # noqa: E402
from orchlib.tools.base import ToolError  # noqa: E402
from orchlib.tools.mcp import MAX_BLOCKS, MAX_TOOLS, close_servers, list_server_tools  # noqa: E402
from orchlib.tools.mcp_transport import MAX_MESSAGE_DEPTH, too_deep  # noqa: E402

# A bare JSON-RPC server over stdio (no SDK), so that it can break the protocol's expectations at will.
SERVER = r'''
import json, os, sys, time
MODE = sys.argv[1]
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
def tool(n):
    return {"name": f"t{n}", "description": "d", "inputSchema": {"type": "object", "properties": {}}}
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": msg["params"]["protocolVersion"],
              "capabilities": {"tools": {}}, "serverInfo": {"name": "hostile", "version": "1"}}})
    elif method == "tools/list":
        cursor = (msg.get("params") or {}).get("cursor")
        if MODE == "endless":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [tool(0)], "nextCursor": "again"}})
        elif MODE == "deep":  # a schema nested 10,000 levels deep, written by hand (json.dumps would refuse)
            schema = '{"type": "object", "properties": {"a": ' + '{"b": ' * 10000 + '1' + '}' * 10000 + '}}'
            tools = '[{"name": "deep", "inputSchema": %s}]' % schema
            sys.stdout.write('{"jsonrpc": "2.0", "id": %s, "result": {"tools": %s}}\n' % (json.dumps(rid), tools))
            sys.stdout.flush()
        elif MODE == "many":
            page = int(cursor or 0)
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [tool(page * 1000 + i) for i in range(1000)],
                  "nextCursor": str(page + 1)}})
        else:
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [tool(0)]}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        if name == "blocks":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "x"}] * 20000}})
        elif name == "huge":  # 50 MB of text on one line
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "x" * 50_000_000}]}})
        elif name == "large":  # 3 MB of text: long, but under every cap
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "y" * 3_000_000}]}})
        elif name == "pid":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": str(os.getpid())}]}})
        elif name == "hang":
            time.sleep(60)
    else:
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
'''


@pytest.fixture
def server(tmp_path):
    path = tmp_path / "hostile_server.py"
    path.write_text(SERVER)
    yield lambda mode: {"command": sys.executable, "args": [str(path), mode], "connect_timeout_s": 20}
    close_servers()


def test_an_endless_next_cursor_is_an_error_naming_the_field(server):
    t0 = time.monotonic()
    with pytest.raises(ToolError, match=r"MCP server .*hostile_server.py endless: tools/list: nextCursor: 'again' "
                                        r"was given before"):
        list_server_tools(**server("endless"))
    assert time.monotonic() - t0 < 15


def test_too_many_tools_are_refused(server):
    with pytest.raises(ToolError, match=rf"tools/list: tools: more than {MAX_TOOLS:,} tools"):
        list_server_tools(**server("many"))


def _card(server_settings: dict, name: str, **backend) -> ToolCard:
    return ToolCard.model_validate({"name": name, "kind": "mcp", "description": "d",
                                    "parameters": {"type": "object", "properties": {}},
                                    "backend": {**server_settings, **backend}})


def test_too_many_content_blocks_are_an_error_observation(server):
    obs = build_tool(_card(server("calls"), "blocks")).call_sync({})
    assert obs.error_kind == "tool_failure"
    assert obs.error.endswith(f"the result has 20,000 content blocks, over the {MAX_BLOCKS:,} accepted")


def test_a_call_that_times_out_ends_its_session(server):
    settings = server("calls")
    first_pid = int(build_tool(_card(settings, "pid")).call_sync({}).content)
    hung = build_tool(_card(settings, "hang", timeout_s=0.5)).call_sync({})
    assert hung.error_kind == "timeout"
    deadline = time.monotonic() + 10
    while _alive(first_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(first_pid)  # the server (and the reader of its output) is gone
    second_pid = int(build_tool(_card(settings, "pid")).call_sync({}).content)
    assert second_pid != first_pid  # the next call started a fresh session


def test_a_50_mb_message_is_refused_at_once_and_its_server_stopped(server):
    settings = server("calls")
    first_pid = int(build_tool(_card(settings, "pid")).call_sync({}).content)
    t0 = time.monotonic()
    obs = build_tool(_card(settings, "huge", timeout_s=60)).call_sync({})
    assert time.monotonic() - t0 < 10  # the SDK's own reader took ~40 s to join the line
    assert obs.error_kind == "tool_failure"
    assert re.fullmatch(r"huge on MCP server .*hostile_server.py calls: MCPError: the server sent a message over "
                        r"8 MiB \(8,388,608 bytes\) on one line: refused, and the session closed", obs.error)
    deadline = time.monotonic() + 10
    while _alive(first_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(first_pid)
    assert int(build_tool(_card(settings, "pid")).call_sync({}).content) != first_pid  # a fresh session


def test_a_long_message_under_the_cap_arrives_whole(server):
    obs = build_tool(_card(server("calls"), "large", timeout_s=60)).call_sync({})
    assert obs.error is None and obs.content == "y" * 3_000_000


def test_a_schema_nested_10000_deep_is_refused_at_once_naming_the_tool(server):
    t0 = time.monotonic()
    with pytest.raises(ToolError, match=r"^MCP server .*hostile_server.py deep: tools/list failed: MCPError: the "
                                        rf"server sent a message nested deeper than {MAX_MESSAGE_DEPTH} levels \(at "
                                        r"result.tools\[0\].inputSchema.properties.a…\): refused, and the session "
                                        r"closed$"):
        list_server_tools(**server("deep"))
    assert time.monotonic() - t0 < 10  # was a bare timeout after 40 s


def test_nesting_is_measured_outside_strings_and_up_to_the_cap():
    assert too_deep(b"[" * 128 + b"]" * 128, 128) is None
    assert too_deep(b'{"a": "' + b"[{" * 500 + b'"}', 128) is None  # brackets in a string are text
    assert too_deep(rb'{"s": "a\"b\\", "x": ' + b"[" * 200, 128) == "x[0][0][0][0][0]…"  # escapes kept
    assert too_deep(b"[" + b"[]," * 5000 + b"[]]", 128) is None  # many containers, none deep
    assert too_deep(b'[1, {"k": [' + b"[" * 130, 128) == "[1].k[0][0][0][0]…"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
