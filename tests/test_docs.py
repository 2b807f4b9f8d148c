"""The docs stay true to the code: the config reference is what the generator writes now, and every
relative link in the docs and the README points to a file (and heading) that exists."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_reference"] = module
    spec.loader.exec_module(module)
    return module


def test_reference_is_current():
    text = _generator().render()
    on_disk = (DOCS / "reference.md").read_text(encoding="utf-8")
    assert on_disk == text, "docs/reference.md is out of date: run `python docs/gen_reference.py`"


class _Inner(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    k: int = Field(3, ge=1, description="a count")


class _Sample(BaseModel):
    """A sample config.

    More text that is not the intro."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    mode: Literal["a", "b"] = Field("a", description="which | one")
    rate: float | None = Field(None, gt=0, lt=1, description="a share")
    names: list[str] = Field(default_factory=list, description="")
    inner: _Inner = Field(default_factory=_Inner, description="nested")
    need: str = Field(description="no default")


def test_generator_rows_on_a_known_config(monkeypatch):
    gen = _generator()
    monkeypatch.setattr(gen, "collect", lambda: [("Sample", [_Sample, _Inner])])
    lines = gen.render().splitlines()
    rows = [line for line in lines if line.startswith("| `")]
    assert rows == [
        "| `mode` | 'a' \\| 'b' | `'a'` | which \\| one |",
        "| `rate` | float \\| None (> 0, < 1) | `None` | a share |",
        "| `names` | list[str] | `[]` |  |",
        "| `inner` | [_Inner](#_inner) | `_Inner()` | nested |",
        "| `need` | str | required | no default |",
        "| `k` | int (>= 1) | `3` | a count |",
    ]
    assert "A sample config." in lines and "More text that is not the intro." not in lines
    assert gen.missing_descriptions() == ["_Sample.names"]


def test_reference_lists_every_exported_config():
    import orchlib

    text = (DOCS / "reference.md").read_text(encoding="utf-8")
    for name in orchlib._EXPORTS:
        obj = getattr(orchlib, name)
        if isinstance(obj, type) and issubclass(obj, BaseModel) and obj.model_config.get("frozen"):
            assert f"\n### {name}\n" in text, f"{name} is exported but missing from docs/reference.md"


# ------------------------------------------------------------------------------------------------ links
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    """'page:line: target (why)' for each relative link that points nowhere."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), page.read_text(encoding="utf-8"))
    bad = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for target in _LINK.findall(_CODE.sub("", line)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            where = f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}:{lineno}: {target}"
            if not dest.exists():
                bad.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                bad.append(f"{where} (no heading #{anchor})")
    return bad


PAGES = sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert broken_links(page) == []


def test_link_check_catches_a_broken_link(tmp_path):
    (tmp_path / "there.md").write_text("# A heading, with `code`\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md) [ok](there.md#a-heading-with-code) [web](https://example.com)\n"
                    "```\n[in code](nowhere.md)\n```\n"
                    "[gone](nowhere.md) and ![img](missing.png) and [bad](there.md#nope)\n", encoding="utf-8")
    assert broken_links(page) == [f"{page}:5: nowhere.md (no such file)", f"{page}:5: missing.png (no such file)",
                                  f"{page}:5: there.md#nope (no heading #nope)"]


# ------------------------------------------------------------------------------------- results and notes
NOTES = sorted((DOCS / "notes").glob("*.md"))
RESULTS = DOCS / "results.md"
GUIDE = [p for p in PAGES if p != RESULTS and p.parent != DOCS / "notes"]  # docs/*.md and the README
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def _targets(page: Path) -> set[Path]:
    """The files a page's relative links point to."""
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {(page.parent / t.partition("#")[0]).resolve() for line in text.splitlines()
            for t in _LINK.findall(_CODE.sub("", line)) if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I)}


def test_every_dated_note_is_linked_from_the_results_page():
    assert NOTES, "docs/notes/ holds the dated records"
    assert [n.name for n in NOTES if n.resolve() not in _targets(RESULTS)] == []


@pytest.mark.parametrize("page", GUIDE, ids=lambda p: str(p.relative_to(ROOT)))
def test_guide_pages_link_results_not_notes_and_carry_no_dates(page):
    """A guide page says how to use the library; what was measured, and when, is on docs/results.md."""
    notes = sorted(str(t.relative_to(DOCS)) for t in _targets(page) if t.parent == (DOCS / "notes").resolve())
    assert notes == [], f"{page.name} links dated notes: link docs/results.md instead"
    prose = _FENCE.sub("", page.read_text(encoding="utf-8"))  # a date inside an example file is the file's
    assert _DATE.findall(prose) == [], f"{page.name} carries dated results: move them to docs/results.md"


def test_no_code_cites_a_note():
    """Code states its reasons; it does not send a reader to a lab notebook."""
    cited = [f"{p.relative_to(ROOT)}:{i}" for folder in ("orchlib", "benchmarks", "examples")
             for p in sorted((ROOT / folder).rglob("*")) if p.suffix in (".py", ".yaml", ".yml", ".md")
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "docs/notes" in line]
    assert cited == []


def test_the_index_links_the_results_page():
    assert RESULTS.resolve() in _targets(DOCS / "index.md") and RESULTS.resolve() in _targets(ROOT / "README.md")
