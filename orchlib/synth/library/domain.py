"""The library domain, made by orchlib.synth: DOMAIN over database.json and the tools of tools.py.

tools.py never runs in the importing process: orchlib.synth.code.load_source checks it as it was checked
when it was made (imports from _ALLOWED only), reads its functions' signatures off the syntax tree, and
runs each call in the python sandbox."""

import json
from pathlib import Path

from orchlib.envs.db import DBDomain
from orchlib.synth.code import load_source

__all__ = ["DOMAIN", "INITIAL", "add_copies", "borrow_book", "get_book", "return_book"]

_HERE = Path(__file__).parent
_ALLOWED = (
    'math',
    're',
    'datetime',
    'typing',
    'collections',
    'itertools',
    'functools',
    'decimal',
    'fractions',
    'string',
    'statistics',
    '__future__',
)
_TOOLS = load_source((_HERE / "tools.py").read_text(encoding="utf-8"), __name__.rsplit(".", 1)[0] + ".tools",
                     _ALLOWED, where=str(_HERE / "tools.py"), verify=False)
INITIAL = json.loads((_HERE / "database.json").read_text(encoding="utf-8"))
add_copies = _TOOLS.add_copies
borrow_book = _TOOLS.borrow_book
get_book = _TOOLS.get_book
return_book = _TOOLS.return_book

DOMAIN = DBDomain(
    'library',
    lambda task: INITIAL,
    [
        add_copies,
        borrow_book,
        get_book,
        return_book,
    ],
    write_tools=['add_copies', 'borrow_book', 'return_book'],
    tags=['library', 'local', 'free', 'synth'],
)
