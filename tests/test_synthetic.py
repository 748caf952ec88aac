"""The synthetic help center: determinism and the properties its labels rely on."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from pgfunnel.eval import synthetic
from pgfunnel.eval.synthetic import (
    PLANS,
    PROTECTED_QUALIFIERS,
    TOPICS,
    build_corpus,
    build_queries,
    write_files,
)

DATA = Path(synthetic.__file__).resolve().parent.parent / "data"
SLICES = ("identifier", "paraphrase", "exact", "followup", "twopart", "noanswer")
CODE = re.compile(r"\berr[\s-]?(\d{4})\b", re.IGNORECASE)
IDENT = re.compile(r"\b[a-z]+(?:_[a-z]+)*(?:\.[a-z]+(?:_[a-z]+)*)+\b|\b[a-z]+(?:_[a-z]+)+\b")


@pytest.fixture(scope="module")
def corpus() -> list[dict[str, Any]]:
    return build_corpus()


@pytest.fixture(scope="module")
def queries(corpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return build_queries(corpus)


def _text(doc: dict[str, Any]) -> str:
    return f"{doc['title']}\n{doc['text']}"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_builds_are_deterministic(corpus: list[dict[str, Any]]) -> None:
    assert build_corpus() == corpus
    assert build_queries(build_corpus()) == build_queries(corpus)


def test_seed_changes_numbers_not_structure() -> None:
    a, b = build_corpus(7), build_corpus(8)
    assert [d["citekey"] for d in a if d["metadata"]["kind"] != "error"] == [
        d["citekey"] for d in b if d["metadata"]["kind"] != "error"
    ]
    assert a != b


def test_shipped_files_equal_a_fresh_build(tmp_path: Path) -> None:
    corpus_path, queries_path = write_files(tmp_path)
    assert (DATA / synthetic.CORPUS_FILE).read_bytes() == corpus_path.read_bytes()
    assert (DATA / synthetic.QUERIES_FILE).read_bytes() == queries_path.read_bytes()


def test_record_shapes(corpus: list[dict[str, Any]], queries: list[dict[str, Any]]) -> None:
    for doc in corpus:
        assert set(doc) == {"citekey", "title", "text", "metadata", "tenant", "readers", "language"}
        assert doc["tenant"] is None and doc["readers"] == [] and doc["language"] == "en"
        meta = doc["metadata"]
        assert set(meta) == {"topic", "plan", "kind"}
        assert meta["topic"] in TOPICS
        assert meta["kind"] in {"policy", "error", "guide", "api"}
        assert (meta["plan"] in PLANS) if meta["kind"] == "policy" else meta["plan"] is None
    for q in queries:
        assert set(q) == {"query_id", "query", "slice", "relevant", "history"}
        assert all(isinstance(turn, str) for turn in q["history"])
        assert all(grade in (1, 2) for grade in q["relevant"].values())
    assert PROTECTED_QUALIFIERS == ("annual", "monthly", "enterprise", "trial")
    assert set(PLANS) == set(PROTECTED_QUALIFIERS)


def test_shape_of_the_corpus(corpus: list[dict[str, Any]]) -> None:
    kinds = Counter(d["metadata"]["kind"] for d in corpus)
    assert kinds["policy"] == len(TOPICS) * len(PLANS)
    assert len(TOPICS) >= 18
    assert kinds["error"] >= 12
    assert kinds["guide"] >= 5
    assert kinds["api"] >= 3
    for doc in corpus:
        words = len(doc["text"].split())
        headings = re.findall(r"^## ", doc["text"], re.MULTILINE)
        if doc["metadata"]["kind"] == "policy":
            assert 80 <= words <= 180, doc["citekey"]
            assert 0 <= len(headings) <= 2
        if doc["metadata"]["kind"] == "guide":
            assert 400 <= words <= 900, doc["citekey"]
            assert 4 <= len(headings) <= 8, doc["citekey"]


def test_citekeys_unique(corpus: list[dict[str, Any]], queries: list[dict[str, Any]]) -> None:
    keys = [d["citekey"] for d in corpus]
    assert len(keys) == len(set(keys))
    ids = [q["query_id"] for q in queries]
    assert len(ids) == len(set(ids))


def test_every_judged_citekey_exists(
    corpus: list[dict[str, Any]], queries: list[dict[str, Any]]
) -> None:
    keys = {d["citekey"] for d in corpus}
    for q in queries:
        assert set(q["relevant"]) <= keys, q["query_id"]


def test_synonyms_absent_from_every_document(corpus: list[dict[str, Any]]) -> None:
    for terms in TOPICS.values():
        for synonym in terms.synonyms:
            pattern = re.compile(rf"\b{re.escape(synonym)}", re.IGNORECASE)
            for doc in corpus:
                assert not pattern.search(_text(doc)), (synonym, doc["citekey"])


def test_topic_words_do_appear(corpus: list[dict[str, Any]]) -> None:
    for key, terms in TOPICS.items():
        for plan in PLANS:
            doc = next(d for d in corpus if d["citekey"] == f"{key}-{plan}")
            assert terms.word.lower() in _text(doc).lower(), doc["citekey"]


def test_identifier_queries_hit_exactly_their_document(
    corpus: list[dict[str, Any]], queries: list[dict[str, Any]]
) -> None:
    spellings: set[str] = set()
    for q in (x for x in queries if x["slice"] == "identifier"):
        assert len(q["relevant"]) == 1
        (target,) = q["relevant"]
        code = CODE.search(q["query"])
        if code:
            needle = f"ERR-{code.group(1)}"
            spellings.add(re.sub(r"\d", "9", code.group(0)))
        else:
            found = IDENT.search(q["query"])
            assert found, q["query"]
            needle = found.group(0)
        holders = [d["citekey"] for d in corpus if needle in _text(d)]
        assert holders == [target], (q["query"], holders)
    assert {"ERR-9999", "err 9999", "err9999"} <= spellings


def test_each_slice_is_big_enough(queries: list[dict[str, Any]]) -> None:
    counts = Counter(q["slice"] for q in queries)
    assert set(counts) == set(SLICES)
    for name in SLICES:
        assert counts[name] >= 12, name


def test_slice_specific_shapes(queries: list[dict[str, Any]]) -> None:
    all_synonyms = [s for t in TOPICS.values() for s in t.synonyms]
    for q in queries:
        text = q["query"].lower()
        if q["slice"] == "noanswer":
            assert q["relevant"] == {}
        elif q["slice"] == "twopart":
            assert len(q["relevant"]) == 2
        else:
            assert len(q["relevant"]) == 1
        if q["slice"] == "followup":
            assert q["history"]
            # the topic lives only in the history, never in the follow-up itself
            (target,) = q["relevant"]
            topic = target.rsplit("-", 1)[0]
            assert TOPICS[topic].word.lower() not in text
        else:
            assert q["history"] == []
        if q["slice"] == "paraphrase":
            assert any(s in text for s in all_synonyms), q["query"]
        if q["slice"] in {"paraphrase", "exact", "followup", "twopart"}:
            for key in q["relevant"]:
                assert key.rsplit("-", 1)[1] in text, q["query"]


def _drawn_number(topic: str, plan: str, text: str) -> int:
    """The one number the seed chose for this document, read at the template's slot."""
    template = synthetic._TOPIC_TEXT[topic].body
    filled = template.format(
        plan=plan, Plan=plan.capitalize(), a_plan=synthetic._article(plan), n="\x00"
    )
    pattern = r"(\d+)".join(re.escape(part) for part in filled.split("\x00"))
    found = re.fullmatch(pattern, text)
    assert found, (topic, plan)
    values = {int(v) for v in found.groups()}
    assert len(values) == 1
    return values.pop()


def test_plan_near_duplicates_differ_in_plan_and_number(corpus: list[dict[str, Any]]) -> None:
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for doc in corpus:
        if doc["metadata"]["kind"] == "policy":
            by_topic[doc["metadata"]["topic"]].append(doc)
    for topic, docs in by_topic.items():
        assert sorted(d["metadata"]["plan"] for d in docs) == sorted(PLANS)
        # masking the plan word and the numbers makes the four documents identical
        masked: set[str] = set()
        numbers: set[int] = set()
        for d in docs:
            plan = d["metadata"]["plan"]
            text = _text(d)
            assert plan in text.lower()
            for other in PLANS:
                if other != plan:
                    assert other not in text.lower(), (d["citekey"], other)
            body = re.sub(rf"\b(an?\s+)?{plan}\b", "PLAN", text, flags=re.IGNORECASE)
            masked.add(re.sub(r"\d+", "N", body))
            numbers.add(_drawn_number(topic, plan, d["text"]))
        assert len(masked) == 1, topic
        assert len(numbers) == len(PLANS), (topic, numbers)
