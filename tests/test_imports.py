"""No import circles inside orchlib/, imports inside functions included: data flows one way.

The graph is read from the source with `ast` (every `import` and `from … import`, at any depth), so an
import hidden in a function counts as much as one at the top. Importing `orchlib.a.b` runs
`orchlib/a/__init__.py` first, so a module also depends on its sub-package's `__init__` (the root
package's lazy `__init__` excepted: it imports its three eager names only)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "orchlib"


def _module_name(path: Path, pkg: Path) -> str:
    parts = path.relative_to(pkg.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(pkg: Path) -> dict[str, Path]:
    return {_module_name(p, pkg): p for p in pkg.rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of `name` that is an orchlib module (`orchlib.tools.Toolbox` -> orchlib.tools)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in modules:
            return candidate
    return None


def import_graph(pkg: Path = PKG) -> dict[str, set[str]]:
    modules = _modules(pkg)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        targets: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets += [f"{base}.{a.name}" for a in node.names]  # a name may be a sub-module
        for target in targets:
            dep = _resolve(target, modules)
            if dep is None or dep == mod:
                continue
            graph[mod].add(dep)
            parts = dep.split(".")  # importing orchlib.a.b runs orchlib/a/__init__.py first
            for i in range(2, len(parts)):
                parent = ".".join(parts[:i])
                if parent != package and parent != mod:
                    graph[mod].add(parent)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle through each module that lies on one (breadth-first from the module)."""
    found: dict[frozenset[str], list[str]] = {}
    for start in sorted(graph):
        paths = {start: [start]}
        frontier = [start]
        while frontier:
            nxt = []
            for m in frontier:
                for d in sorted(graph[m]):
                    if d == start:
                        cyc = paths[m]
                        found.setdefault(frozenset(cyc), cyc + [start])
                        nxt = []
                        break
                    if d not in paths:
                        paths[d] = paths[m] + [d]
                        nxt.append(d)
                else:
                    continue
                break
            frontier = nxt
    return list(found.values())


def test_the_graph_reader_sees_every_kind_of_import(tmp_path):
    pkg = tmp_path / "orchlib"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from orchlib.sub.leaf import x\n")
    (pkg / "sub" / "leaf.py").write_text("x = 1\n")
    (pkg / "a.py").write_text("def f():\n    from orchlib import b\n    return b\n")  # inside a function
    (pkg / "b.py").write_text("import orchlib.sub.leaf\nfrom . import c\n")
    (pkg / "c.py").write_text("from orchlib.a import f\n")
    graph = import_graph(pkg)
    assert graph["orchlib.a"] == {"orchlib.b"}
    assert graph["orchlib.b"] == {"orchlib.sub.leaf", "orchlib.sub", "orchlib.c"}
    assert graph["orchlib.sub"] == {"orchlib.sub.leaf"}  # its own __init__ is not a dependency of itself
    assert cycles(graph) == [["orchlib.a", "orchlib.b", "orchlib.c", "orchlib.a"]]


def test_no_import_circles():
    found = cycles(import_graph())
    assert found == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_papers_training_path_reaches_no_experiment():
    """orchlib.train is the paper's path: the demo and its experiments plug in through `Hooks` from outside,
    so no module under it imports orchlib.experiments or orchlib.demo, directly or through another module."""
    graph = import_graph()
    train = sorted(m for m in graph if m == "orchlib.train" or m.startswith("orchlib.train."))
    via = {m: [m] for m in train}  # module reached -> one import chain from orchlib.train to it
    todo = list(train)
    while todo:
        m = todo.pop()
        for d in sorted(graph[m]):
            if d not in via:
                via[d] = via[m] + [d]
                todo.append(d)
    banned = ("orchlib.experiments", "orchlib.demo")
    found = [" -> ".join(chain) for m, chain in sorted(via.items())
             if any(m == b or m.startswith(b + ".") for b in banned)]
    assert "orchlib.train.run" in train and "orchlib.experiments.variants" in graph  # the graph sees both sides
    assert found == [], "orchlib.train reaches experimental code:\n" + "\n".join(found)
    assert cycles(graph) == []
