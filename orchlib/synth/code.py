"""Tool code an LLM wrote: checked as text, and run only inside the python sandbox.

The source is parsed with `ast` and refused when it imports a module outside the whitelist, names a
builtin that reaches outside the database (`open`, `eval`, `exec`, `__import__`, ...) or touches a
dunder attribute (`x.__class__`). Those checks keep honest mistakes out; they are not what stops code
written to escape (the attribute chains of `typing.sys`, a generator's frames, `str.format` fields get
through any such list). So the code never runs in the library's process: `load_source` reads each
top-level function's signature, type hints (from a whitelist of type names), literal defaults and
docstring off the syntax tree, and returns a module of stand-ins with those signatures. Calling a
stand-in runs the whole source and the function in the python sandbox (`orchlib.tools.python`: a
separate process with limits, an audit-hook guard, no network, bubblewrap where it works), with the
database sent in as JSON and sent back changed, then applied to the caller's dict in place. A call
costs a process start (tens of milliseconds).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import json
import types
import typing
from typing import Any, Sequence

from orchlib.tools.base import run_sync
from orchlib.tools.python import PythonSettings, run_code

__all__ = ["CodeRefused", "ToolCodeError", "check_source", "load_source", "sandbox_settings", "FORBIDDEN_NAMES"]

FORBIDDEN_NAMES = frozenset({"open", "eval", "exec", "compile", "__import__", "globals", "locals", "vars",
                             "getattr", "setattr", "delattr", "input", "breakpoint", "exit", "quit",
                             "memoryview", "help"})

# What a database may weigh on its way in and out of the sandbox (JSON text), and one call's time.
MAX_JSON_BYTES = 64 * 2**20
CALL_TIMEOUT_S = 10.0


class CodeRefused(ValueError):
    """Code that is not loaded; `reason` is the refusal's name in the report."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class ToolCodeError(RuntimeError):
    """A call the sandbox could not complete (a limit, a crash, a reply that is not what was asked)."""


def check_source(source: str, allowed_imports: Sequence[str], where: str = "<tool>") -> ast.Module:
    """The parsed module, or CodeRefused: `does_not_load` (a syntax error) or `forbidden_code`."""
    try:
        tree = ast.parse(source, filename=where)
    except SyntaxError as e:
        raise CodeRefused("does_not_load", f"{where}:{e.lineno}: syntax error: {e.msg}") from None
    except (RecursionError, MemoryError, ValueError) as e:  # nesting the parser cannot hold, NUL bytes
        raise CodeRefused("does_not_load", f"{where}: cannot be parsed: {type(e).__name__}") from None
    allowed = set(allowed_imports)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Import):
            bad = [a.name for a in node.names if a.name.split(".")[0] not in allowed]
        elif isinstance(node, ast.ImportFrom):
            bad = [node.module or "."] if node.level or (node.module or "").split(".")[0] not in allowed else []
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            raise CodeRefused("forbidden_code", f"{where}:{line}: uses {node.id!r}")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            raise CodeRefused("forbidden_code", f"{where}:{line}: touches the attribute {node.attr!r}")
        else:
            continue
        if bad:
            raise CodeRefused("forbidden_code", f"{where}:{line}: imports {bad[0]!r}, not one of "
                                                f"{', '.join(sorted(allowed))}")
    return tree


# ------------------------------------------------------------------------------------- reading the tree
# The type hints a tool parameter may carry, by the name the source uses (bare, or as typing.X / t.X).
_HINT_NAMES: dict[str, Any] = {
    "str": str, "int": int, "float": float, "bool": bool, "dict": dict, "list": list, "tuple": tuple,
    "set": set, "frozenset": frozenset, "None": type(None), "Any": typing.Any, "Optional": typing.Optional,
    "Union": typing.Union, "List": typing.List, "Dict": typing.Dict, "Tuple": typing.Tuple, "Set": typing.Set,
    "Literal": typing.Literal,
}


def _hint(node: ast.expr, where: str, depth: int = 0) -> Any:
    """The type a hint's syntax names, built from _HINT_NAMES only (nothing of the source is run)."""
    if depth > 20:
        raise CodeRefused("does_not_load", f"{where}: a type hint nested too deep")
    if isinstance(node, ast.Constant) and node.value is None:
        return type(None)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # "int", or a `from __future__` hint
        try:
            inner = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            raise CodeRefused("does_not_load", f"{where}: the type hint {node.value!r} does not parse") from None
        return _hint(inner, where, depth + 1)
    if isinstance(node, ast.Name) and node.id in _HINT_NAMES:
        return _HINT_NAMES[node.id]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr in _HINT_NAMES:
        return _HINT_NAMES[node.attr]  # typing.Optional, t.List
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return typing.Union[_hint(node.left, where, depth + 1), _hint(node.right, where, depth + 1)]
    if isinstance(node, ast.Subscript):
        base = _hint(node.value, where, depth + 1)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if base is typing.Literal:
            values = []
            for item in items:
                if not (isinstance(item, ast.Constant) and isinstance(item.value, (str, int, bool))):
                    raise CodeRefused("does_not_load", f"{where}: a Literal holds only strings, numbers, booleans")
                values.append(item.value)
            return typing.Literal[tuple(values)]
        args = tuple(... if isinstance(i, ast.Constant) and i.value is ... else _hint(i, where, depth + 1)
                     for i in items)
        try:
            return base[args if len(args) > 1 else args[0]]
        except TypeError as e:
            raise CodeRefused("does_not_load", f"{where}: type hint: {e}") from None
    shown = ast.unparse(node) if hasattr(ast, "unparse") else type(node).__name__
    raise CodeRefused("does_not_load", f"{where}: the type hint {shown!r} is not one a tool may use "
                                       f"({', '.join(sorted(_HINT_NAMES))}, and their [..] and | forms)")


def _signature(fn: ast.FunctionDef, where: str) -> inspect.Signature:
    a = fn.args
    if a.posonlyargs:
        raise CodeRefused("does_not_load", f"{where}: positional-only parameters (the tool is called by name)")
    params: list[inspect.Parameter] = []

    def param(arg: ast.arg, kind: Any, default: ast.expr | None) -> inspect.Parameter:
        annotation = _hint(arg.annotation, f"{where}: {arg.arg}") if arg.annotation is not None \
            else inspect.Parameter.empty
        value: Any = inspect.Parameter.empty
        if default is not None:
            try:
                value = ast.literal_eval(default)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                raise CodeRefused("does_not_load", f"{where}: the default of {arg.arg!r} is not a literal") from None
        return inspect.Parameter(arg.arg, kind, default=value, annotation=annotation)

    defaults = [None] * (len(a.args) - len(a.defaults)) + list(a.defaults)
    params += [param(p, inspect.Parameter.POSITIONAL_OR_KEYWORD, d) for p, d in zip(a.args, defaults)]
    if a.vararg is not None:
        params.append(inspect.Parameter(a.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    params += [param(p, inspect.Parameter.KEYWORD_ONLY, d) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg is not None:
        params.append(inspect.Parameter(a.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


# ------------------------------------------------------------------------------------- running it
def sandbox_settings(allowed_imports: Sequence[str]) -> PythonSettings:
    """The python sandbox's limits for tool code: the allowed modules preloaded (after the drop to the
    sandbox uid a private Python install can import nothing else), a database's worth of output."""
    preload = [m for m in dict.fromkeys([*allowed_imports, "json", "io"]) if m != "__future__"]
    return PythonSettings(preload=preload, timeout_s=CALL_TIMEOUT_S, max_output_chars=MAX_JSON_BYTES,
                          max_stream_bytes=MAX_JSON_BYTES + 2**20)


_MARK = "@@orchlib-tool-reply@@ "
# Runs inside the sandbox: the checked source in a namespace whose builtins leave the forbidden names
# out (as the checks assume), then one function of it. Print output of the tool's own is discarded.
_DRIVER = '''
import builtins, io, json, sys
P = json.loads(%r)
real_out, sys.stdout = sys.stdout, io.StringIO()
def imp(name, globals=None, locals=None, fromlist=(), level=0):
    if level or name.split(".")[0] not in P["allowed"]:
        raise ImportError(f"import of {name!r} is not allowed in tool code")
    return builtins.__import__(name, globals, locals, fromlist, level)
safe = {k: v for k, v in vars(builtins).items() if k not in P["forbidden"]}
safe["__import__"] = imp
ns = {"__builtins__": safe, "__name__": P["module"]}
def plain(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)
try:
    exec(compile(P["source"], P["where"], "exec"), ns)
except Exception as e:
    reply = {"load_error": f"{type(e).__name__}: {e}"}
else:
    if P["call"] is None:
        reply = {"functions": sorted(k for k, v in ns.items() if type(v) is type(imp))}
    else:
        try:
            value = ns[P["call"]](**P["arguments"])
            reply = {"result": plain(value), "state": P["arguments"].get(P["state"])}
        except Exception as e:
            reply = {"raised": type(e).__name__, "args": [plain(a) for a in e.args], "message": str(e)}
sys.stdout = real_out
real_out.write("\\n" + %r + json.dumps(reply) + "\\n")
real_out.flush()
'''


def _in_sandbox(payload: dict[str, Any], settings: PythonSettings) -> dict[str, Any]:
    text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    if len(text) > MAX_JSON_BYTES:
        raise ToolCodeError(f"the call's data is {len(text):,} bytes of JSON, over the {MAX_JSON_BYTES:,} allowed")
    obs = run_sync(run_code(_DRIVER % (text, _MARK), settings))
    reply_line = next((line for line in reversed(obs.content.splitlines()) if line.startswith(_MARK)), None)
    if reply_line is None:
        raise ToolCodeError(f"the tool's code did not finish in the sandbox: {obs.error or 'no reply'}")
    try:
        reply = json.loads(reply_line[len(_MARK):])
    except (ValueError, RecursionError) as e:
        raise ToolCodeError(f"the sandbox's reply is not JSON ({type(e).__name__})") from None
    if not isinstance(reply, dict):
        raise ToolCodeError("the sandbox's reply is not an object")
    return reply


def _raise(reply: dict[str, Any]) -> typing.NoReturn:
    """The tool's own exception again, when it is a builtin one (ValueError, KeyError, ...)."""
    name, args = reply.get("raised"), reply.get("args")
    kind = getattr(builtins, name, None) if isinstance(name, str) else None
    if isinstance(kind, type) and issubclass(kind, Exception) and isinstance(args, list):
        try:
            error = kind(*args)
        except Exception:  # a constructor that wants other arguments (UnicodeError and kin)
            error = None
        if error is not None:
            raise error
    raise ToolCodeError(f"{name}: {reply.get('message', '')}")


def _stand_in(name: str, signature: inspect.Signature, doc: str | None, module_name: str, source: str,
              allowed: Sequence[str], where: str, settings: PythonSettings) -> types.FunctionType:
    """A function with the tool's signature whose calls run the tool in the sandbox. The state
    parameter (`env`) is sent as JSON and the caller's object is updated in place with what comes back."""
    state = "env" if "env" in signature.parameters else None

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        given = arguments.get(state) if state else None
        reply = _in_sandbox({"source": source, "where": where, "module": module_name, "allowed": list(allowed),
                             "forbidden": sorted(FORBIDDEN_NAMES), "call": name, "arguments": arguments,
                             "state": state}, settings)
        if "load_error" in reply:
            raise ToolCodeError(f"{where}: {reply['load_error']}")
        if "raised" in reply:
            _raise(reply)
        if "result" not in reply:
            raise ToolCodeError(f"{where}: the sandbox's reply has no result")
        if state is not None:
            _update(given, reply.get("state"), name)
        return reply["result"]

    call.__name__ = call.__qualname__ = name
    call.__module__ = module_name
    call.__doc__ = doc
    call.__signature__ = signature  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()
                            if p.annotation is not inspect.Parameter.empty}
    return call  # type: ignore[return-value]


def _update(given: Any, new: Any, name: str) -> None:
    """Change the caller's database in place into what the tool left (the tools' contract)."""
    if isinstance(given, dict) and isinstance(new, dict):
        given.clear()
        given.update(new)
    elif isinstance(given, list) and isinstance(new, list):
        given[:] = new
    elif given != new:
        raise ToolCodeError(f"{name}: the database came back as {type(new).__name__}, not {type(given).__name__}")


def load_source(source: str, module_name: str, allowed_imports: Sequence[str], where: str = "<tool>", *,
                verify: bool = True, settings: PythonSettings | None = None) -> types.ModuleType:
    """A module named `module_name` whose attributes are the source's top-level functions as sandboxed
    stand-ins (see the module's docstring); nothing of the source runs in this process. With `verify`,
    the source is run once in the sandbox: an error there is CodeRefused("does_not_load") naming its
    type and message."""
    tree = check_source(source, allowed_imports, where)
    settings = settings or sandbox_settings(allowed_imports)
    module = types.ModuleType(module_name)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            module.__dict__[node.name] = _stand_in(node.name, _signature(node, f"{where}: {node.name}"),
                                                   ast.get_docstring(node), module_name, source,
                                                   tuple(allowed_imports), where, settings)
        elif isinstance(node, ast.AsyncFunctionDef):
            raise CodeRefused("does_not_load",
                              f"{where}:{node.lineno}: {node.name} is async; a tool is a plain function")
    if verify:
        try:
            reply = _in_sandbox({"source": source, "where": where, "module": module_name,
                                 "allowed": list(allowed_imports), "forbidden": sorted(FORBIDDEN_NAMES),
                                 "call": None, "arguments": {}, "state": None}, settings)
        except ToolCodeError as e:
            raise CodeRefused("does_not_load", f"{where}: {e}") from None
        if "load_error" in reply:
            raise CodeRefused("does_not_load", f"{where}: {reply['load_error']}")
        missing = sorted(set(n for n in module.__dict__ if not n.startswith("__")) - set(reply.get("functions", [])))
        if missing:
            raise CodeRefused("does_not_load", f"{where}: {missing[0]!r} is not a function once the code has run")
    return module
