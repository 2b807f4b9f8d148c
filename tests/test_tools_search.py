"""Local BM25 search: the shipped corpus answers look-up questions, scores match the Lucene BM25
formula computed by hand, other corpus layouts load, bad input is a clear error."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import pytest

from orchlib.cards import CardError, ToolCard, load_card
from orchlib.tools import build_tool
from orchlib.tools.search import Corpus, load_corpus

CARD = load_card(Path(__file__).resolve().parents[1] / "toolcards" / "search.yaml")
SHIPPED = Path(str(resources.files("orchlib").joinpath("data/search_corpus/facts.jsonl")))


def search_card(corpus: str, **backend) -> ToolCard:
    return CARD.model_copy(update={"backend": {"corpus": corpus, **backend}})


def test_shipped_corpus_is_well_formed():
    docs = [json.loads(line) for line in SHIPPED.read_text().splitlines()]
    assert 100 <= len(docs) <= 200
    assert len({d["id"] for d in docs}) == len(docs)
    for d in docs:
        assert set(d) == {"id", "topic", "title", "text", "facts", "qa"}
        for qa in d["qa"]:  # every answer is stated in the document's own text
            assert qa["answer"] in d["text"], (d["id"], qa)
    topics = {d["topic"] for d in docs}
    assert topics == {"element", "country", "planet", "unit"}


@pytest.mark.parametrize("query, title, answer", [
    ("What is the atomic number of neon?", "Neon", "atomic number 10"),
    ("capital of Australia", "Australia", "Canberra"),
    ("Which planet is fourth from the Sun?", "Mars", "fourth planet"),
    ("How many feet are in one mile?", "Mile", "5280 feet"),
    ("chemical symbol of gold", "Gold", "symbol Au"),
])
def test_shipped_search_finds_the_fact(query, title, answer):
    obs = build_tool(CARD).call_sync({"query": query})
    first = obs.content.splitlines()[0]
    assert first.startswith(f"[1] {title}: ") and answer in first
    assert obs.error is None and obs.cost_usd == 0 and len(obs.content.splitlines()) == 3


def test_every_shipped_question_finds_its_document_in_the_top_three():
    corpus = Corpus(load_corpus(SHIPPED))
    misses = [(d["id"], qa["question"]) for d in corpus.docs for qa in d["qa"]
              if d["id"] not in [hit["id"] for hit, _ in corpus.search(qa["question"], 3)]]
    assert misses == []


def test_scores_match_lucene_bm25_by_hand():
    docs = [{"id": "a", "title": "", "text": "neon glows red neon"},
            {"id": "b", "title": "", "text": "argon is inert"},
            {"id": "c", "title": "", "text": "red planet mars"}]
    k1, b = 1.5, 0.75
    corpus = Corpus(docs, k1=k1, b=b)
    lengths = {"a": 4, "b": 2, "c": 3}  # "is" is an English stop word and is dropped
    avgdl = sum(lengths.values()) / 3

    def term(tf: int, df: int, dl: int) -> float:  # Lucene: idf × tf / (tf + k1 (1 - b + b dl/avgdl))
        idf = math.log(1 + (3 - df + 0.5) / (df + 0.5))
        return idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))

    hits = {d["id"]: s for d, s in corpus.search("red neon", k=3)}
    assert hits["a"] == pytest.approx(term(2, 1, 4) + term(1, 2, 4), rel=1e-5)
    assert hits["c"] == pytest.approx(term(1, 2, 3), rel=1e-5)
    assert "b" not in hits  # no shared word: left out rather than listed with score 0


def test_folder_of_text_and_jsonl_files(tmp_path):
    (tmp_path / "volcanoes.txt").write_text("Mount Etna is an active volcano on Sicily.")
    (tmp_path / "more.jsonl").write_text(json.dumps({"title": "Rivers", "text": "The Nile flows north."}) + "\n\n")
    (tmp_path / "README.md").write_text("not a document")
    tool = build_tool(search_card(str(tmp_path), top_k=5))
    assert tool.call_sync({"query": "Etna volcano"}).content == (
        "[1] volcanoes: Mount Etna is an active volcano on Sicily.")
    assert tool.call_sync({"query": "nile"}).content == "[1] Rivers: The Nile flows north."
    assert tool.call_sync({"query": "zzzz qqqq"}).content == "No documents match 'zzzz qqqq'."
    assert [d["id"] for d in load_corpus(tmp_path)] == ["more-1", "volcanoes"]


def test_relative_corpus_path_is_relative_to_the_card(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("saturn has rings")
    (tmp_path / "s.yaml").write_text("name: s\nkind: search\ndescription: d\nparameters:\n  type: object\n"
                                     "  properties: {query: {type: string}}\nbackend:\n  corpus: docs\n")
    assert "saturn has rings" in build_tool(load_card(tmp_path / "s.yaml")).call_sync({"query": "rings"}).content


def test_bad_corpus_and_queries(tmp_path):
    with pytest.raises(CardError, match="backend.corpus: no such file or folder"):
        build_tool(search_card(str(tmp_path / "missing")))
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"title": "no text"}\n')
    obs = build_tool(search_card(str(tmp_path / "bad.jsonl"))).call_sync({"query": "ok"})
    assert obs.error_kind == "tool_failure"
    assert f"{tmp_path / 'bad.jsonl'}:2: a document needs a string 'text'" in obs.error
    empty = build_tool(CARD).call_sync({"query": "  "})
    assert empty.error_kind == "tool_failure" and "non-empty query" in empty.error
    assert build_tool(CARD).call_sync({"q": "neon"}).error_kind == "schema_violation"
