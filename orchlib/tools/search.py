"""`search` tools: BM25 retrieval over a local corpus (bm25s, Lucene's BM25 variant).

The corpus is a folder (or one file) of JSONL documents `{"id", "title", "text", ...}` and/or plain
`.txt` / `.md` files (one document each, titled by the file name). `orchlib:data/search_corpus` is the
corpus shipped with the library. The index is built on first use and shared by every tool that names
the same corpus; building the shipped corpus takes a few milliseconds.

Dense retrieval is not implemented: BM25 needs no model download, which keeps the default offline.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchlib.cards import ToolCard
from orchlib.tools.base import Tool, ToolContext, ToolError, resolve_path
from orchlib.trajectory import Observation

__all__ = ["SearchSettings", "SearchTool", "Corpus", "load_corpus"]

# Words of one character or more: bm25s' default (two or more) would drop "8" in "8 planets".
TOKEN_PATTERN = r"(?u)\b\w+\b"


class SearchSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    corpus: str = Field(description="folder or file of documents; 'orchlib:data/...' is inside the package")
    top_k: int = Field(3, gt=0, description="documents returned per query")
    max_chars: int = Field(600, gt=0, description="characters shown per document")
    argument: str = Field("query", description="which argument holds the query")
    k1: float = Field(1.5, gt=0, description="BM25 term-frequency saturation (Lucene's default)")
    b: float = Field(0.75, ge=0, le=1, description="BM25 length normalisation (Lucene's default)")


def load_corpus(path: Path) -> list[dict[str, Any]]:
    """Documents of a folder or file, in file then line order; a bad JSONL line names file and line."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    docs: list[dict[str, Any]] = []
    for f in files:
        if f.suffix == ".jsonl":
            for lineno, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{f}:{lineno}: not JSON: {e.msg}") from None
                if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
                    raise ValueError(f"{f}:{lineno}: a document needs a string 'text'")
                doc.setdefault("id", f"{f.stem}-{lineno}")
                doc.setdefault("title", "")
                docs.append(doc)
        elif f.suffix in (".txt", ".md") and f.name.lower() not in ("readme.md", "license.txt"):
            docs.append({"id": f.stem, "title": f.stem.replace("_", " "), "text": f.read_text(encoding="utf-8")})
    return docs


def _import_bm25s():
    """bm25s, on its numpy backend. Where numba is installed (the `vllm` extra brings it) bm25s imports it,
    and numba's llvmlite, at import time; with llvmlite loaded, vLLM's kernel registration fails in the
    same process ("'_lib_fn_wrapper' object has no attribute 'get'"). BM25 over a corpus of this size
    gains nothing from the JIT, so numba is hidden from bm25s's import (unless it is loaded already)."""
    import sys

    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    hide = "numba" not in sys.modules
    if hide:
        sys.modules["numba"] = None  # type: ignore[assignment]  # makes `import numba` raise ImportError
    try:
        import bm25s
    finally:
        if hide:
            del sys.modules["numba"]
    return bm25s


class Corpus:
    """Documents plus their BM25 index."""

    def __init__(self, docs: list[dict[str, Any]], k1: float = 1.5, b: float = 0.75):
        bm25s = _import_bm25s()
        if not docs:
            raise ValueError("the corpus has no documents")
        self.docs = docs
        self._bm25s = bm25s
        self.index = bm25s.BM25(k1=k1, b=b)
        self.index.index(self._tokens([f"{d.get('title', '')}\n{d['text']}" for d in docs]), show_progress=False)

    def _tokens(self, texts: list[str]) -> list[list[str]]:
        return self._bm25s.tokenize(texts, token_pattern=TOKEN_PATTERN, stopwords="en", return_ids=False,
                                    show_progress=False)

    def search(self, query: str, k: int = 3) -> list[tuple[dict[str, Any], float]]:
        """Best documents with their BM25 scores, best first; documents scoring 0 are left out."""
        k = min(k, len(self.docs))
        ids, scores = self.index.retrieve(self._tokens([query]), k=k, show_progress=False)
        return [(self.docs[int(i)], float(s)) for i, s in zip(ids[0], scores[0]) if s > 0]


_CACHE: dict[tuple[str, float, float, float], Corpus] = {}
_CACHE_LOCK = threading.Lock()


def _corpus_for(path: Path, k1: float, b: float) -> Corpus:
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    stamp = max(p.stat().st_mtime for p in files)  # rebuild when a file changed
    key = (str(path.resolve()), stamp, k1, b)
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = Corpus(load_corpus(path), k1=k1, b=b)
        return _CACHE[key]


class SearchTool(Tool):
    kind = "search"
    Settings = SearchSettings

    def __init__(self, card: ToolCard):
        super().__init__(card)
        self.path = resolve_path(self.settings.corpus, card)
        if not self.path.exists():
            raise card.error(("backend", "corpus"), f"no such file or folder: {self.path}")

    @property
    def corpus(self) -> Corpus:
        return _corpus_for(self.path, self.settings.k1, self.settings.b)

    async def _run(self, arguments: dict[str, Any], context: ToolContext) -> Observation:
        query = arguments.get(self.settings.argument)
        if not isinstance(query, str) or not query.strip():
            raise ToolError(f"argument {self.settings.argument!r} must be a non-empty query string")
        try:
            # In a thread: building the index on first use would otherwise stall the other calls.
            corpus = await asyncio.to_thread(lambda: self.corpus)
        except (OSError, ValueError) as e:
            raise ToolError(f"cannot read corpus {self.path}: {e}") from None
        hits = corpus.search(query, self.settings.top_k)
        if not hits:
            return Observation(content=f"No documents match {query!r}.")
        lines = []
        for rank, (doc, _score) in enumerate(hits, 1):
            text = " ".join(doc["text"].split())
            if len(text) > self.settings.max_chars:
                text = text[: self.settings.max_chars] + " …"
            title = f"{doc['title']}: " if doc.get("title") else ""
            lines.append(f"[{rank}] {title}{text}")
        return Observation(content="\n".join(lines))
