"""A stdio transport for MCP servers that bounds what a server may send in one message.

A stdio server writes one JSON-RPC message per line. A server is someone else's program, so a line is
read as bytes with a cap (MAX_MESSAGE_BYTES) and its nesting is measured (MAX_MESSAGE_DEPTH) before it
is parsed. A message past either cap is refused: every request still waiting for an answer gets an
error that says what was too large or too deep, the server is stopped, and the session ends. It plugs
into the `mcp` SDK's `Client` as any transport does (`mcp.Client(capped_stdio_client(params))`): the
client reads `SessionMessage`s from one memory stream and writes them to another.

Without it, the SDK's reader joins a long line piece by piece (a 50 MB result took ~40 s of CPU), and
a line its parser rejects (nesting past its limit) reaches no request, which then waits out its timeout.
"""

from __future__ import annotations

import json
import re
import sys
from array import array
from contextlib import asynccontextmanager, suppress
from itertools import accumulate
from typing import Any, AsyncIterator, TextIO

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.shared.message import SessionMessage

# Sized for any result orchlib accepts (MAX_RESULT_CHARS in tools/mcp.py) in plain text, with room for
# its JSON; a tools/list page of MAX_TOOLS tools with long schemas fits too.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
# Below the SDK parser's own limit (its error would reach no request); a card's schema is capped at 64.
MAX_MESSAGE_DEPTH = 128
# The error code the SDK gives requests whose connection closed: the caller treats it as a session gone.
CONNECTION_CLOSED = types.CONNECTION_CLOSED
# A grace period for a server to exit after its stdin closes, as the MCP lifecycle asks, then a kill.
EXIT_GRACE_S = 2.0
KILL_GRACE_S = 2.0
CHUNK_BYTES = 1 << 16

__all__ = ["MAX_MESSAGE_BYTES", "MAX_MESSAGE_DEPTH", "MessageRefused", "capped_stdio_client", "read_lines",
           "too_deep"]


class MessageRefused(Exception):
    """A message from the server past a cap; the session cannot go on (the rest of the line is unread)."""


@asynccontextmanager
async def capped_stdio_client(server: StdioServerParameters, *, max_bytes: int = MAX_MESSAGE_BYTES,
                              max_depth: int = MAX_MESSAGE_DEPTH,
                              errlog: TextIO = sys.stderr) -> AsyncIterator[tuple[Any, Any]]:
    """Start `server` and yield (read stream, write stream) for `mcp.Client`; on exit stop the server:
    stdin closed, EXIT_GRACE_S to end, then its process group is killed."""
    process = await _spawn(server, errlog)
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    pending: set[Any] = set()  # ids of the client's requests not answered yet: those a refusal answers
    writer_done = anyio.Event()

    async def read_from_server() -> None:
        lines = read_lines(process.stdout, max_bytes)
        try:
            async with to_session:
                try:
                    async for line in lines:
                        depth = too_deep(line, max_depth)
                        if depth is not None:
                            raise MessageRefused(f"a message nested deeper than {max_depth} levels (at {depth})")
                        item = _parse(line)
                        if isinstance(item, SessionMessage) and isinstance(item.message, (types.JSONRPCResponse,
                                                                                          types.JSONRPCError)):
                            pending.discard(item.message.id)
                        await to_session.send(item)
                except MessageRefused as e:
                    # The server is still writing the rest; it has broken the framing, so no grace is owed.
                    await _kill_tree(process)
                    reason = f"the server sent {e}: refused, and the session closed"
                    for rid in sorted(pending, key=str):
                        error = types.ErrorData(code=CONNECTION_CLOSED, message=reason)
                        await to_session.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=rid, error=error)))
                    pending.clear()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session went away first: only the drain below is left
        finally:
            await lines.aclose()
        await _drain(process)

    async def write_to_server() -> None:
        try:
            async with from_session:
                async for session_message in from_session:
                    message = session_message.message
                    if isinstance(message, types.JSONRPCRequest):
                        pending.add(message.id)
                    elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
                        pending.discard((message.params or {}).get("requestId"))
                    data = message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode(server.encoding, server.encoding_error_handler))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server stopped reading: end the read side too, so no request waits on a dead pipe.
            await to_session.aclose()
        finally:
            writer_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_from_server)
        tg.start_soon(write_to_server)
        try:
            yield read_stream, write_stream
        finally:
            # Shielded, every wait bounded: a cancelled caller must not leave a live server behind.
            with anyio.CancelScope(shield=True):
                read_stream.close()  # the reader turns to draining, so a server blocked on stdout can exit
                write_stream.close()
                with anyio.move_on_after(0.5):
                    await writer_done.wait()
                await _stop(process)
                for stream in (read_stream, write_stream, to_session, from_session):
                    await stream.aclose()
            tg.cancel_scope.cancel()


async def read_lines(stream: Any, max_bytes: int) -> AsyncIterator[bytes]:
    """The non-blank lines of a byte stream, without their newline. A line past `max_bytes` raises
    MessageRefused as soon as it is, without reading the rest. Pieces are joined once per line."""
    parts: list[bytes] = []
    size = 0
    while True:
        try:
            chunk = await stream.receive(CHUNK_BYTES)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            return
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            size += end - start
            if size > max_bytes:
                raise MessageRefused(_too_large(max_bytes))
            parts.append(chunk[start:end])
            line = b"".join(parts)
            parts, size, start = [], 0, end + 1
            if line.strip():
                yield line
        size += len(chunk) - start
        if size > max_bytes:
            raise MessageRefused(_too_large(max_bytes))
        parts.append(chunk[start:])


def _too_large(max_bytes: int) -> str:
    return f"a message over {max_bytes / 2**20:g} MiB ({max_bytes:,} bytes) on one line"


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
_STEPS = bytes.maketrans(_BRACKETS, bytes([1, 255, 1, 255]))  # +1 to open, -1 (as a signed byte) to close
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]')


def too_deep(line: bytes, max_depth: int) -> str | None:
    """Where a JSON text first nests deeper than `max_depth` (a path such as `result.tools[0].inputSchema…`),
    or None. Brackets inside strings do not count. Linear in the line, in C but for the final walk."""
    if line.count(b"[") + line.count(b"{") <= max_depth:  # cannot be deeper (strings' brackets included)
        return None
    skeleton = _STRING.sub(b"", line).translate(None, _NOT_BRACKETS)
    if skeleton.count(b"[") + skeleton.count(b"{") <= max_depth:
        return None
    if max(accumulate(array("b", skeleton.translate(_STEPS)))) <= max_depth:
        return None
    return _path_to_depth(line, max_depth)


def _path_to_depth(line: bytes, max_depth: int, shown: int = 6) -> str:
    """The path of keys and indices down to the first container past `max_depth`, its first `shown`
    steps (the rest is more of the same, or says nothing a reader needs)."""
    frames: list[list[Any]] = []  # per open container: [is_array, the current key or index]
    last_string = b'""'
    for match in _TOKEN.finditer(line):
        token = match.group()
        if token[:1] == b'"':
            last_string = token
        elif token == b":" and frames:
            try:
                frames[-1][1] = json.loads(last_string)
            except ValueError:
                frames[-1][1] = "?"
        elif token == b"," and frames and frames[-1][0]:
            frames[-1][1] += 1
        elif token in (b"[", b"{"):
            frames.append([token == b"[", 0 if token == b"[" else None])
            if len(frames) > max_depth:
                break
        elif token in (b"]", b"}") and frames:
            frames.pop()
    steps = [f"[{label}]" if is_array else f".{label}" for is_array, label in frames[:-1]]
    path = "".join(steps[:shown]).lstrip(".") + ("…" if len(steps) > shown else "")
    return path or "the top level"


def _parse(line: bytes) -> SessionMessage | Exception:
    """One message; a line that is no JSON-RPC message goes to the session as an exception, as the SDK's
    own reader does (some servers print other things to stdout)."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as e:
        return e


async def _spawn(server: StdioServerParameters, errlog: TextIO) -> Any:
    env = get_default_environment() | (server.env or {})
    if sys.platform == "win32":  # the SDK's own helpers: the command's .cmd/.exe, and a job object to kill
        from mcp.os.win32.utilities import create_windows_process, get_windows_executable_command

        command = await anyio.to_thread.run_sync(get_windows_executable_command, server.command)
        return await create_windows_process(command, server.args, env, errlog, server.cwd)
    # A session of its own: the whole tree (an npx wrapper and its node) is killed as one group.
    return await anyio.open_process([server.command, *server.args], env=env, stderr=errlog, cwd=server.cwd,
                                    start_new_session=True)


async def _stop(process: Any) -> None:
    """Close stdin, give the server EXIT_GRACE_S to exit, then kill its process tree."""
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    with anyio.move_on_after(EXIT_GRACE_S):
        while process.returncode is None:
            await anyio.sleep(0.01)
    if process.returncode is None:
        await _kill_tree(process)
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()


async def _kill_tree(process: Any) -> None:
    if sys.platform == "win32":
        from mcp.os.win32.utilities import terminate_windows_process_tree

        await terminate_windows_process_tree(process)
    else:
        from mcp.os.posix.utilities import terminate_posix_process_tree

        await terminate_posix_process_tree(process, KILL_GRACE_S)
    with anyio.move_on_after(KILL_GRACE_S):  # let the event loop see the death
        while process.returncode is None:
            await anyio.sleep(0.01)


async def _drain(process: Any) -> None:
    """Read and drop what the server still writes, so a server blocked on a full pipe can exit."""
    with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        while True:
            await process.stdout.receive(CHUNK_BYTES)
