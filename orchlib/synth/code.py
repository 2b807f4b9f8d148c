"""Loading tool code an LLM wrote, only after checks.

The source is parsed with `ast` and refused when it imports a module outside the whitelist, names a
builtin that reaches outside the database (`open`, `eval`, `exec`, `__import__`, ...) or touches a
dunder attribute (`x.__class__`, the usual way out of a restricted namespace); then it is run in a
fresh module namespace whose builtins leave those out. This keeps honest mistakes and lazy shortcuts
out of a training environment; it is not a sandbox against code written to escape (run the pipeline
where a bad tool could do no harm, as for any generated code).
"""

from __future__ import annotations

import ast
import builtins
import types
from typing import Any, Sequence

__all__ = ["CodeRefused", "check_source", "load_source", "FORBIDDEN_NAMES"]

FORBIDDEN_NAMES = frozenset({"open", "eval", "exec", "compile", "__import__", "globals", "locals", "vars",
                             "getattr", "setattr", "delattr", "input", "breakpoint", "exit", "quit",
                             "memoryview", "help"})


class CodeRefused(ValueError):
    """Code that is not loaded; `reason` is the refusal's name in the report."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def check_source(source: str, allowed_imports: Sequence[str], where: str = "<tool>") -> ast.Module:
    """The parsed module, or CodeRefused: `does_not_load` (a syntax error) or `forbidden_code`."""
    try:
        tree = ast.parse(source, filename=where)
    except SyntaxError as e:
        raise CodeRefused("does_not_load", f"{where}:{e.lineno}: syntax error: {e.msg}") from None
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


def _guarded_import(allowed: set[str]):
    def imp(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level or name.split(".")[0] not in allowed:  # the ast check refuses these first; belt and braces
            raise ImportError(f"import of {name!r} is not allowed in tool code")
        return builtins.__import__(name, globals, locals, fromlist, level)
    return imp


def load_source(source: str, module_name: str, allowed_imports: Sequence[str],
                where: str = "<tool>") -> types.ModuleType:
    """A fresh module named `module_name` holding the checked code, run with restricted builtins. An
    error while running it is CodeRefused("does_not_load") naming its type and message."""
    tree = check_source(source, allowed_imports, where)
    module = types.ModuleType(module_name)
    safe = {k: v for k, v in vars(builtins).items() if k not in FORBIDDEN_NAMES}
    safe["__import__"] = _guarded_import(set(allowed_imports))
    module.__dict__["__builtins__"] = safe
    try:
        exec(compile(tree, where, "exec"), module.__dict__)  # noqa: S102 (checked above)
    except Exception as e:  # any error the code raises on load is a refusal, reported with its message
        raise CodeRefused("does_not_load", f"{where}: {type(e).__name__}: {e}") from None
    return module
