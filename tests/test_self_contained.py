"""The repository stands alone: nothing in it reads a path outside its own root, and every data file
copied from elsewhere keeps its licence notice beside it.

A user who clones the repository has only the repository; a test, example, notebook, benchmark or
library module that reaches for a folder beside the checkout works on one machine and fails on theirs.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".ipynb", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".json", ".sh", ""}

# Ways a file names a place outside the checkout: a relative climb out of the root, a sibling folder of
# the root, or an absolute path of the machine it was written on.
LEAVING = [
    (re.compile(r"\.\./\.\./"), "a relative path that climbs two folders up"),
    (re.compile(r"\.\./shared\b"), "the folder beside the checkout"),
    (re.compile(r"""\.parent\s*/\s*["']shared["']"""), "the folder beside the checkout"),
    (re.compile(r"""(?:REPO|ROOT|HERE)\.parent\b(?!s)"""), "the folder that holds the checkout"),
    (re.compile(r"/work/"), "an absolute path of one machine"),
    (re.compile(r"/home/\w+/"), "an absolute path of one machine"),
]


# Files that write such paths on purpose, and why that reads nothing outside the repository.
ALLOWED = {
    "tests/test_sandbox_adversarial.py": "attack code that climbs out of the sandbox's folder; it runs inside "
                                         "the sandbox, which must refuse it",
    "benchmarks/bench_fuzz.py": "hostile values a fuzzed run config holds as text; reading a config opens no path",
}


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.split("\n")
    return [REPO / p for p in out if p and (REPO / p).is_file()]


def _text_files() -> list[Path]:
    return [p for p in _tracked() if p.suffix in TEXT_SUFFIXES and p.stat().st_size < 2_000_000
            and "data" not in p.relative_to(REPO).parts[:-1]]


def _parents_depth_ok(path: Path, text: str) -> list[str]:
    """`Path(__file__).resolve().parents[N]` may climb at most to the repository root."""
    depth = len(path.relative_to(REPO).parts) - 1  # folders between the root and the file: parents[depth] is the root
    bad = []
    for m in re.finditer(r"__file__\)\.resolve\(\)\.parents\[(\d+)\]", text):
        if int(m.group(1)) > depth:
            bad.append(f"parents[{m.group(1)}] climbs above the root from {depth} folder(s) deep")
    return bad


def test_the_scan_sees_the_sources():
    files = {p.relative_to(REPO).as_posix() for p in _text_files()}
    for expected in ["orchlib/__init__.py", "tests/conftest.py", "Makefile", "README.md", "benchmarks/bench_demo.py"]:
        assert expected in files
    assert any(f.startswith("notebooks/") and f.endswith(".ipynb") for f in files)


@pytest.mark.parametrize("line, reason", [
    ('DATA = Path(__file__).parent / "shared" / "data"', "the folder beside the checkout"),
    ("open('../shared/data/x.csv')", "the folder beside the checkout"),
    ("p = '/work/main/orchlib'", "an absolute path of one machine"),
    ("x = ROOT.parent / 'elsewhere'", "the folder that holds the checkout"),
])
def test_the_scan_catches_each_kind_of_escape(line, reason):
    assert [why for pattern, why in LEAVING if pattern.search(line)] == [reason]


def test_the_depth_check_catches_a_climb_above_the_root():
    deep = REPO / "tests" / "x.py"
    assert _parents_depth_ok(deep, "Path(__file__).resolve().parents[1]") == []
    assert _parents_depth_ok(deep, "Path(__file__).resolve().parents[2]") != []


def test_nothing_reads_a_path_outside_the_repository():
    me = Path(__file__).resolve()
    found = []
    for path in _text_files():
        if path == me or path.relative_to(REPO).as_posix() in ALLOWED:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            for pattern, why in LEAVING:
                if pattern.search(line):
                    found.append(f"{path.relative_to(REPO)}:{lineno}: {why}: {line.strip()[:100]}")
        found += [f"{path.relative_to(REPO)}: {b}" for b in _parents_depth_ok(path, text)]
    assert found == []


def test_every_copied_data_folder_keeps_its_licence():
    """Each folder of data under orchlib/data and tests/data has a README saying where it came from, and
    a LICENSE (or a *_LICENSE beside it) unless its README says it was written for orchlib."""
    roots = [REPO / "orchlib" / "data", REPO / "tests" / "data"]
    folders = [d for root in roots if root.is_dir() for d in root.iterdir() if d.is_dir()
               and d.name != "__pycache__"]
    assert folders
    for d in folders:
        assert (d / "README.md").is_file(), f"{d.relative_to(REPO)} does not say where it came from"
        own = "Written for orchlib" in (d / "README.md").read_text(encoding="utf-8")
        has_licence = (d / "LICENSE").is_file() or (d.parent / f"{d.name}_LICENSE").is_file()
        assert has_licence or own, f"{d.relative_to(REPO)} has no licence notice"
