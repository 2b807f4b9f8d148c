"""`mcp` tools: a tool of a Model Context Protocol server, over stdio or streamable HTTP.

    backend:
      command: npx                      # stdio: the program that runs the server, and its args
      args: [-y, "@modelcontextprotocol/server-everything"]
      tool: echo                        # the tool's name on the server (default: the card's name)

or `url: http://127.0.0.1:8000/mcp` for a server already running. `mcp_cards(command=..., args=...)`
lists every tool of a server as cards at once (`orchlib cards import --mcp-command ...` writes them).

Every card that names the same server (command, args, env, cwd, or url) shares one session: the first
call starts the server, later calls reuse it, and a server that died is started again on the next
call. The session lives on an event loop in its own daemon thread, so calls work from any loop
(`asyncio.run`, Jupyter's, a worker thread's) and run concurrently; `close_servers()` (also run at
exit) ends them. The official `mcp` SDK does the protocol; it is imported when a server is first used.

Results: text blocks are joined with newlines; images, audio and resource links are shown as a short
`[image image/png, 1234 bytes]` line; with no content, the structured result is shown as JSON. A
result with `isError` and any protocol error (unknown tool, bad arguments, the server exiting) is a
`tool_failure` observation, and so is a stdio message over 8 MiB or nested over 128 levels deep
(`mcp_transport.py`: refused before it is parsed, and the session closed); `timeout_s` bounds a call
(`timeout`). The price is the card's: per call, per second, and per million tokens of the arguments and
the result (estimated with `approx_tokens`).
The latency is measured, or with `declared_latency: true` the card's declared one (reproducible runs).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import json
import os
import threading
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchlib.cards import ToolCard
from orchlib.tools.base import Tool, ToolContext, ToolError, approx_tokens, resolve_path
from orchlib.trajectory import Observation

# JSON-RPC error code the SDK gives calls whose connection closed (mcp_types.jsonrpc; -32000 in mcp 1.x too)
CONNECTION_CLOSED = -32000
# What a server may hand over: a result's content blocks and text, and tools/list's tools and pages. A
# server is a program of someone else's; past these it is an error observation, not memory or minutes.
MAX_BLOCKS = 1000
MAX_RESULT_CHARS = 4_000_000
MAX_TOOLS = 2000
MAX_PAGES = 200
RESET_WAIT_S = 5.0  # how long a reset lets the session it ends close politely before cancelling it

__all__ = ["MCPSettings", "MCPTool", "MCPConnection", "mcp_cards", "list_server_tools", "close_servers"]


class MCPSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    command: str | None = Field(None, description="stdio: the program that runs the server (e.g. python, npx, uvx)")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments")
    env: dict[str, str] = Field(default_factory=dict, description="stdio: variables set for the server, besides "
                                "the SDK's safe defaults (PATH, HOME, ...)")
    pass_env: list[str] = Field(default_factory=list, description="stdio: names of host variables passed on "
                                "(API keys stay out of the card)")
    cwd: str | None = Field(None, description="stdio: working folder; relative to the card's file")
    url: str | None = Field(None, pattern=r"^https?://", description="streamable HTTP endpoint, e.g. "
                            "http://127.0.0.1:8000/mcp")
    headers_env: dict[str, str] = Field(default_factory=dict, description="http: header name -> name of the "
                                        "host variable holding its value (e.g. Authorization: MCP_TOKEN)")
    tool: str | None = Field(None, min_length=1, description="the tool's name on the server (default: the card's)")
    timeout_s: float | None = Field(None, gt=0, description="bound on one call, under the toolbox's own timeout")
    connect_timeout_s: float = Field(30.0, gt=0, description="bound on starting the server and its handshake "
                                     "(a server run by npx or uvx may download first)")
    declared_latency: bool = Field(False, description="report the card's declared latency instead of the "
                                   "measured one, so runs are reproducible; the call still runs")

    @model_validator(mode="after")
    def _one_transport(self) -> MCPSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (a stdio server) or url (streamable HTTP), not both or neither")
        if self.url is not None and (self.args or self.env or self.pass_env or self.cwd):
            raise ValueError("args, env, pass_env and cwd are for a stdio server (command), not url")
        return self


class MCPTool(Tool):
    kind = "mcp"
    Settings = MCPSettings

    def __init__(self, card: ToolCard):
        super().__init__(card)
        # A stand-in of the measured time: Tool.__call__ reports the card's draw and bounds it by the timeout.
        self.measured = not self.settings.declared_latency  # type: ignore[misc]
        cwd = self.settings.cwd
        self._cwd = str(resolve_path(cwd, card)) if cwd is not None else None

    @property
    def remote_name(self) -> str:
        return self.settings.tool or self.card.name

    @property
    def connection(self) -> MCPConnection:
        return connection_for(self.settings, self._cwd)

    async def _run(self, arguments: dict[str, Any], context: ToolContext) -> Observation:
        timeout = self.settings.timeout_s
        connection = self.connection
        try:
            # A call given up on (this timeout, or the toolbox's) is cancelled on the connection's loop too,
            # where a request already sent ends its session (MCPConnection.call)
            result = await asyncio.wait_for(connection.call(self.remote_name, arguments), timeout)
        except asyncio.TimeoutError:
            if timeout is None:
                raise
            raise ToolError(f"{self.name} did not answer within {timeout:g} s (backend.timeout_s)", "timeout") from None
        try:
            text = result_text(result)
        except ToolError as e:
            raise ToolError(f"{self.name} on MCP server {connection.label}: {e}") from None
        tokens_in, tokens_out = approx_tokens(json.dumps(arguments, ensure_ascii=False)), approx_tokens(text)
        if result.get("isError"):
            raise ToolError(f"{self.name} failed: {text or 'the server reported an error'}",
                            tokens_in=tokens_in, tokens_out=tokens_out)
        return Observation(content=text, tokens_in=tokens_in, tokens_out=tokens_out)


def result_text(result: dict[str, Any]) -> str:
    """What the orchestrator reads of a `CallToolResult` (as a wire dict). Over MAX_BLOCKS content
    blocks or MAX_RESULT_CHARS characters: ToolError."""
    blocks = result.get("content") or []
    if len(blocks) > MAX_BLOCKS:
        raise ToolError(f"the result has {len(blocks):,} content blocks, over the {MAX_BLOCKS:,} accepted")
    parts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(block.get("text", ""))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.get('mimeType', '')}, {len(block.get('data', '')) * 3 // 4} bytes]")
        elif kind == "resource":
            res = block.get("resource") or {}
            parts.append(res["text"] if "text" in res else f"[resource {res.get('uri', '')}]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.get('uri', '')}]")
        else:
            parts.append(f"[{kind}]")
    if not parts and result.get("structuredContent") is not None:
        parts.append(json.dumps(result["structuredContent"], ensure_ascii=False))
    size = sum(len(p) for p in parts)
    if size > MAX_RESULT_CHARS:
        raise ToolError(f"the result holds {size:,} characters, over the {MAX_RESULT_CHARS:,} accepted")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------- sessions
class MCPConnection:
    """One session with one MCP server, run on an event loop in a daemon thread of its own. Methods
    are safe to call from any thread or event loop; the server starts on first use."""

    def __init__(self, settings: MCPSettings, cwd: str | None = None):
        self.settings, self.cwd = settings, cwd
        self.label = settings.url or " ".join([settings.command or "", *settings.args]).strip()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="orchlib-mcp", daemon=True)
        self._thread.start()
        self._client: Any = None
        self._serving: asyncio.Task | None = None
        self._stop: asyncio.Event | None = None
        self._ready: asyncio.Future | None = None  # the newest session's: set once it is up (or failed)
        self._start_lock: asyncio.Lock | None = None
        self._closed = False
        self.starts = 0  # how many times the server was started (a restart after it died counts)

    def __repr__(self) -> str:
        return f"MCPConnection({self.label!r}, {'open' if self._client is not None else 'idle'})"

    # ---- from any loop or thread
    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tool's `CallToolResult` as a wire dict (`content`, `isError`, `structuredContent`). When it is
        cancelled (a timeout), a request that already went out ends its session (`_give_up`)."""
        return await self._request(lambda sent: self._call(name, arguments, sent))

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool of the server (all pages), as wire dicts (`name`, `description`, `inputSchema`)."""
        return await self._request(self._list)

    def list_tools_sync(self, timeout_s: float | None = None) -> list[dict[str, Any]]:
        sent: list[Any] = []
        future = self._submit(self._list(sent))
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            self._give_up(future, sent)
            raise ToolError(f"MCP server {self.label}: tools/list did not answer within {timeout_s:g} s") from None

    def reset(self) -> None:
        """End the current session, or the one starting (the server is stopped and its reader with it); the
        next call starts a fresh one."""
        if not self._closed:
            asyncio.run_coroutine_threadsafe(self._reset(), self._loop)

    def close(self, timeout_s: float = 10.0) -> None:
        """End the session (the server is told, then stopped) and the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._submit(self._shutdown(), closing=True).result(timeout_s + 1)
        except concurrent.futures.TimeoutError:
            pass  # the server is killed with the process; the thread is a daemon
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)

    async def _request(self, make: Any) -> Any:
        """`make(sent)`'s coroutine run on the connection's loop, awaited from the caller's; cancelled, it is
        given up on (`_give_up`)."""
        sent: list[Any] = []
        future = self._submit(make(sent))
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            self._give_up(future, sent)
            raise

    def _give_up(self, future: concurrent.futures.Future, sent: list[Any]) -> None:
        """A request its caller gave up on: cancelled and, if it went out (`sent` holds the session's client),
        its session ended, for the server may still answer it into the next call's read. Queued on the loop
        in the caller's order, so it runs before any call the caller makes next; a request given up on
        before it went out (its server still starting) leaves the session be."""
        future.cancel()
        self._loop.call_soon_threadsafe(lambda: sent and self._drop(sent[0]))

    def _submit(self, coro: Any, closing: bool = False) -> concurrent.futures.Future:
        if self._closed and not closing:
            coro.close()
            raise ToolError(f"MCP server {self.label}: the connection was closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    # ---- on the connection's own loop
    async def _call(self, name: str, arguments: dict[str, Any], sent: list[Any]) -> dict[str, Any]:
        client = await self._ensure()
        sent.append(client)
        try:
            result = await client.call_tool(name, arguments)
        except Exception as e:
            self._drop_if_gone(client, e)
            raise ToolError(f"{name} on MCP server {self.label}: {_describe(e)}") from None
        return result.model_dump(by_alias=True, exclude_none=True, mode="json")

    async def _list(self, sent: list[Any]) -> list[dict[str, Any]]:
        client = await self._ensure()
        sent.append(client)
        tools: list[dict[str, Any]] = []
        cursor, seen = None, set()
        where = f"MCP server {self.label}: tools/list"
        try:
            for _ in range(MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                if len(tools) + len(page.tools) > MAX_TOOLS:
                    raise ToolError(f"{where}: tools: more than {MAX_TOOLS:,} tools (this page alone has "
                                    f"{len(page.tools):,})")
                tools += [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in page.tools]
                cursor = getattr(page, "next_cursor", None) or getattr(page, "nextCursor", None)
                if not cursor:
                    return tools
                if cursor in seen:
                    raise ToolError(f"{where}: nextCursor: {str(cursor)[:80]!r} was given before (the pages "
                                    "would never end)")
                seen.add(cursor)
        except ToolError:
            raise
        except Exception as e:
            self._drop_if_gone(client, e)
            raise ToolError(f"{where} failed: {_describe(e)}") from None
        raise ToolError(f"{where}: nextCursor: still a next page after {MAX_PAGES} pages")

    async def _ensure(self) -> Any:
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            live = (self._serving is not None and not self._serving.done()
                    and self._stop is not None and not self._stop.is_set())
            if self._client is not None and live:
                return self._client
            if live and self._ready is not None and not self._ready.done():
                ready = self._ready  # still starting (the call that started it gave up): wait for it
            else:
                if self._stop is not None:
                    self._stop.set()  # a session being dropped, or a starting one a reset ended: let it end
                self._client = None
                ready = self._ready = self._loop.create_future()
                self._stop = asyncio.Event()
                self._serving = asyncio.create_task(self._serve(ready, self._stop))
                self.starts += 1
            try:
                return await asyncio.wait_for(asyncio.shield(ready), self.settings.connect_timeout_s)
            except asyncio.TimeoutError:
                self._serving.cancel()
                raise ToolError(f"MCP server {self.label} did not start within {self.settings.connect_timeout_s:g} s "
                                "(backend.connect_timeout_s)") from None
            except ToolError:
                raise
            except Exception as e:
                raise ToolError(f"MCP server {self.label} could not start: {_describe(e)}") from None

    def _drop_if_gone(self, client: Any, e: Exception) -> None:
        """After a failed request: a closed connection (the server exited, or the transport refused what
        it sent) or a failure below the protocol means the next call starts the server again."""
        if getattr(e, "code", None) == CONNECTION_CLOSED or not hasattr(e, "code"):
            self._drop(client)

    def _drop(self, client: Any) -> None:
        """Forget a session whose server is gone; its task winds down on its own. (`_client` is only ever
        the newest session's, so `_stop` is its stop.)"""
        if self._client is client:
            self._client = None
            if self._stop is not None:
                self._stop.set()

    async def _serve(self, ready: asyncio.Future, stop: asyncio.Event) -> None:
        """Holds the SDK's client open until `stop`: anyio's task groups must be entered and left by
        the same task, so one task owns the session and the calls run beside it."""
        client = None
        try:
            async with self._open_client() as client:
                # Only the newest session is the connection's: one ended before it was up (a reset, or a
                # newer start) must not come back as the current one, nor, on its way out, end the newer.
                if not stop.is_set():
                    self._client = client
                ready.set_result(client)
                await stop.wait()
        except BaseException as e:  # the server exited, or never started: the next call starts it again
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else RuntimeError(_describe(e)))
            if not isinstance(e, Exception):
                raise
        finally:
            if client is not None and self._client is client:
                self._client = None

    def _open_client(self) -> Any:
        try:
            import mcp
        except ImportError:
            raise ToolError("the mcp backend needs the `mcp` package: pip install 'orchlib[mcp]'") from None
        s = self.settings
        if s.url is not None:
            if not s.headers_env:
                return mcp.Client(s.url)
            from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

            headers = {h: os.environ.get(var, "") for h, var in s.headers_env.items()}
            return mcp.Client(streamable_http_client(s.url, http_client=create_mcp_http_client(headers=headers)))
        from orchlib.tools.mcp_transport import capped_stdio_client

        env = {**{k: os.environ[k] for k in s.pass_env if k in os.environ}, **s.env}
        # orchlib's own stdio transport: the SDK's reads a line of any size and depth (see mcp_transport.py)
        return mcp.Client(capped_stdio_client(mcp.StdioServerParameters(command=s.command, args=list(s.args),
                                                                        env=env or None, cwd=self.cwd)))

    async def _reset(self) -> None:
        # End the session current when the reset was asked for, even one still starting: only its own stop
        # is set and only it is cancelled, never a later session that calls made after the reset may
        # already be using.
        serving, stop = self._serving, self._stop
        if self._client is not None:
            self._drop(self._client)
        if stop is not None:
            stop.set()
        if serving is not None and not serving.done():
            try:
                await asyncio.wait_for(asyncio.shield(serving), RESET_WAIT_S)
            except (asyncio.TimeoutError, Exception):
                serving.cancel()

    async def _shutdown(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._serving is not None and not self._serving.done():
            try:
                await asyncio.wait_for(self._serving, 10)
            except (asyncio.TimeoutError, Exception):  # it is ending either way; nothing left to report to
                self._serving.cancel()


def _describe(e: BaseException) -> str:
    """One line for an error, the leaves of an exception group included (anyio raises groups)."""
    leaves = list(getattr(e, "exceptions", None) or [])
    if leaves:
        return "; ".join(_describe(x) for x in leaves)
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


_CONNECTIONS: dict[str, MCPConnection] = {}
_CONNECTIONS_LOCK = threading.Lock()


def connection_for(settings: MCPSettings, cwd: str | None = None) -> MCPConnection:
    """The shared session for a server (the same command, args, env, cwd or url)."""
    key = json.dumps([settings.model_dump(include={"command", "args", "env", "pass_env", "url", "headers_env"}),
                      cwd], sort_keys=True)
    with _CONNECTIONS_LOCK:
        conn = _CONNECTIONS.get(key)
        if conn is None or conn._closed:
            conn = _CONNECTIONS[key] = MCPConnection(settings, cwd)
        return conn


def close_servers() -> None:
    """End every MCP session this process started (run at exit too)."""
    with _CONNECTIONS_LOCK:
        conns = list(_CONNECTIONS.values())
        _CONNECTIONS.clear()
    for conn in conns:
        conn.close()


atexit.register(close_servers)


# ---------------------------------------------------------------------------------------------- import
def list_server_tools(**server: Any) -> list[dict[str, Any]]:
    """The tools/list of a server named by MCPSettings fields (`command=`, `args=`, or `url=`)."""
    settings = MCPSettings.model_validate(server)
    cwd = str(Path(settings.cwd).resolve()) if settings.cwd else None
    return connection_for(settings, cwd).list_tools_sync(settings.connect_timeout_s + 30)


def mcp_cards(*, names: Iterable[str] | None = None, card_fields: dict[str, Any] | None = None,
              **server: Any) -> list[ToolCard]:
    """One `mcp` card for each tool of a server (or those in `names`), its schema as the server lists it
    (normalised, `card.normalized` says how). `server`: MCPSettings fields, e.g.
    `mcp_cards(command="python", args=["weather.py"], card_fields={"price": {"per_call": 0.001}})`."""
    settings = MCPSettings.model_validate(server)
    tools = list_server_tools(**server)
    wanted = set(names) if names is not None else None
    if wanted is not None:
        missing = sorted(wanted - {t["name"] for t in tools})
        if missing:
            raise ValueError(f"MCP server has no tool(s) {missing} (it has: {', '.join(t['name'] for t in tools)})")
    backend = settings.model_dump(exclude_defaults=True)
    return [ToolCard.from_mcp(t, kind="mcp", backend=backend, **(card_fields or {}))
            for t in tools if wanted is None or t["name"] in wanted]
