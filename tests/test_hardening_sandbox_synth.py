"""Code a writer model wrote runs only in the python sandbox: the routes around the syntax checks that
wrote a file from the library's own process, a written domain.py imported, and the tools still working."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from orchlib.synth import ALLOWED_IMPORTS, CodeRefused, check_source, load_source
from orchlib.synth.code import ToolCodeError, sandbox_settings
from orchlib.synth.write import DOMAIN_PY
from orchlib.tools.python import bwrap_works

ISOLATIONS = ["python", pytest.param("bwrap", marks=pytest.mark.skipif(not bwrap_works(),
                                                                      reason="bubblewrap cannot run here"))]

# Each passes check_source (no forbidden name, no dunder attribute, allowed imports only), yet reaches the
# file system through a module an allowed one holds. `{p}` is the marker file's path.
BYPASSES = {
    "typing.sys": "import typing\n\n\ndef f(env: dict) -> str:\n    typing.sys.modules['builtins'].open({p!r}, 'w')\n"
                  "    return 'ok'\n",
    "collections._sys": "import collections\n\n\ndef f(env: dict) -> str:\n"
                        "    collections._sys.modules['io'].open({p!r}, 'w')\n    return 'ok'\n",
    "re.enum.bltns.open": "import re\n\n\ndef f(env: dict) -> str:\n    re.enum.bltns.open({p!r}, 'w')\n"
                          "    return 'ok'\n",
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("name", list(BYPASSES))
def test_a_tool_that_gets_past_the_checks_writes_nothing_on_the_host(name, isolation, tmp_path):
    marker = tmp_path / "written-by-tool-code"
    source = BYPASSES[name].format(p=str(marker))
    check_source(source, ALLOWED_IMPORTS)  # the syntax checks let it through
    settings = sandbox_settings(ALLOWED_IMPORTS).model_copy(update={"isolation": isolation})
    module = load_source(source, "bypass", ALLOWED_IMPORTS, settings=settings)
    try:
        module.f({})
    except (PermissionError, FileNotFoundError, AttributeError, KeyError, TypeError, ToolCodeError):
        pass  # refused in the sandbox (python guards), or it lacks what it needs there
    assert not marker.exists()


def test_code_at_the_top_of_the_source_runs_only_in_the_sandbox(tmp_path):
    marker = tmp_path / "written-on-load"
    source = f"import typing\ntyping.sys.modules['builtins'].open({str(marker)!r}, 'w')\n\n\n" \
             "def f(env: dict) -> str:\n    return 'ok'\n"
    settings = sandbox_settings(ALLOWED_IMPORTS).model_copy(update={"isolation": "python"})
    with pytest.raises(CodeRefused, match="PermissionError: sandbox: writing outside the working directory") as e:
        load_source(source, "on_load", ALLOWED_IMPORTS, settings=settings)
    assert e.value.reason == "does_not_load" and not marker.exists()


def test_importing_a_written_domain_runs_no_tool_code_in_process(tmp_path, monkeypatch):
    marker = tmp_path / "written-on-import"
    package = tmp_path / "evil_domain"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "database.json").write_text(json.dumps({"n": 1}))
    (package / "tools.py").write_text(
        f"import typing\ntyping.sys.modules['builtins'].open({str(marker)!r}, 'w')\n\n\n"
        "def peek(env: dict) -> str:\n    \"\"\"The counter.\"\"\"\n    return str(env['n'])\n")
    (package / "domain.py").write_text(DOMAIN_PY.format(
        name="evil", all_names='"DOMAIN", "INITIAL", "peek"', allowed="".join(f"    {m!r},\n" for m in ALLOWED_IMPORTS),
        writes=[], tags=["evil"], tool_list="        peek,\n", assignments="peek = _TOOLS.peek"))
    monkeypatch.syspath_prepend(str(tmp_path))
    domain = importlib.import_module("evil_domain.domain")
    try:
        assert not marker.exists()  # the import read the tools' signatures; it ran none of their code
        assert domain.DOMAIN.cards()[0].name == "peek" and domain.DOMAIN.cards()[0].description == "The counter."
    finally:
        for name in ("evil_domain.domain", "evil_domain"):
            sys.modules.pop(name, None)


def test_tools_run_in_the_sandbox_and_change_the_callers_database():
    from orchlib.synth.library import domain

    env = {"books": {"B1": {"title": "T", "author": "A", "copies": 1}}, "members": {"M1": {"loans": []}}, "loans": {}}
    assert domain.borrow_book(env, "M1", book_id="B1") == "loan L1: B1 lent to M1"
    assert env == {"books": {"B1": {"title": "T", "author": "A", "copies": 0}}, "members": {"M1": {"loans": ["L1"]}},
                   "loans": {"L1": {"book_id": "B1", "member_id": "M1", "status": "out"}}}
    with pytest.raises(ValueError, match="^no copy of B1 is on the shelf$"):
        domain.borrow_book(env, "M1", "B1")
    with pytest.raises(KeyError) as e:
        domain.add_copies(env, "B9", 1)
    assert str(e.value) == "'B9'"
    assert env["books"]["B1"]["copies"] == 0  # a call that raised changes nothing


@pytest.mark.parametrize("hint, words", [
    ("os.PathLike", "the type hint 'os.PathLike' is not one a tool may use"),
    ("list[typing.sys]", "the type hint 'typing.sys' is not one"),
])
def test_a_type_hint_is_read_not_run(hint, words):
    source = f"import typing\n\n\ndef f(env: dict, x: {hint}) -> str:\n    return ''\n"
    with pytest.raises(CodeRefused, match=words):
        load_source(source, "hints", [*ALLOWED_IMPORTS, "os"], verify=False)


def test_signatures_come_from_the_syntax_tree():
    import inspect
    import typing

    source = ("from typing import Literal, Optional\n\n\ndef f(env: dict, a: int, b: 'list[str]' = ('x',), *, "
              "c: Optional[Literal['p', 'q']] = None, d: float | None = 1.5) -> str:\n"
              "    \"\"\"Doc.\"\"\"\n    return ''\n")
    fn = load_source(source, "sig", ALLOWED_IMPORTS, verify=False).f
    params = inspect.signature(fn).parameters
    assert list(params) == ["env", "a", "b", "c", "d"]
    assert typing.get_type_hints(fn) == {"env": dict, "a": int, "b": list[str],
                                         "c": typing.Optional[typing.Literal["p", "q"]], "d": typing.Optional[float]}
    assert params["b"].default == ("x",) and params["c"].kind is inspect.Parameter.KEYWORD_ONLY
    assert fn.__doc__ == "Doc." and fn.__module__ == "sig"
