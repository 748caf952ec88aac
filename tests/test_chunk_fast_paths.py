"""The chunker's and the posting builder's shortcuts give what the full reading gives.

Chunking skips work where a text cannot need it (no fence, no list item, no `#`), and
normalises a section's paragraphs in one pass; index_rows joins a term's postings in one
call. Each is checked here against the reading it stands in for, on random texts made
of the pieces those readings react to (fences, list markers, headings, escapes, runs of
blanks, Unicode spaces and digits).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgfunnel import ingest, sources

PIECES = ["a", "word", "b.c", " ", "  ", "\t", "\n", "\n", "\n\n", "\r", "\u2028", "\xa0",
          "\x0b", "#", "# ", "## H", "\\#", "`", "```", "~~~", "```py", "-", "- ", "* ",
          "+ ", "1. ", "12) ", "\u0663. ", "    ", " " * 70, "\t" * 66, "|a|b|", "|---|",
          ">", "\\```", "  - ", "    1. "]
texts = st.lists(st.sampled_from(PIECES), min_size=1, max_size=80).map("".join)


def _paragraphs_one_by_one(body: str) -> list[tuple[str, int]]:
    """_paragraphs as it read each paragraph on its own (before the whole-section pass)."""
    paragraphs = []
    blank = 0
    for i, part in enumerate(sources._PARAGRAPH_BREAK.split(body)):
        if i % 2:
            blank += part.count("\n") - 1
        elif part.strip():
            part = sources._LONG_BLANK_RUN.sub(
                lambda run: run.group()[:sources._MAX_BLANK_RUN], part)
            paragraphs.append(("\n".join(line.rstrip() for line in part.split("\n")),
                               min(blank, sources._MAX_BLANK_LINES)))
            blank = 0
    return paragraphs


@settings(max_examples=400, deadline=None)
@given(texts)
def test_a_sections_paragraphs_read_at_once_are_those_read_one_by_one(text: str) -> None:
    assert sources._paragraphs(text) == _paragraphs_one_by_one(text)


def test_paragraphs_read_at_once_keep_blank_runs_and_line_ends_as_before() -> None:
    # a long run at a line's end, inside a blank line and inside a paragraph; a carriage
    # return and a line separator before line breaks
    body = ("one" + " " * 70 + "\n" + "\t" * 66 + "\n" + "two  \r\n  x" + " " * 80 + "y\u2028\n"
            "\n \n\nthree")
    got = sources._paragraphs(body)
    assert got == _paragraphs_one_by_one(body)
    assert got == [("one", 0), ("two\n  x" + " " * 64 + "y", 1), ("three", 2)]


def _fence_after_line_by_line(text: str, fence: str, opener: str = "") -> tuple[str, str]:
    for line in text.split("\n"):
        m = sources._FENCE.match(line)
        if not fence:
            if m:
                opener, fence = line.rstrip(), m.group(1)
        elif m and sources._closes_fence(line, fence):
            opener = fence = ""
    return opener, fence


@settings(max_examples=300, deadline=None)
@given(texts, st.sampled_from(["", "```", "~~~~"]))
def test_fence_state_without_reading_fenceless_lines_is_the_same(text: str, fence: str) -> None:
    opener = "  ```" if fence else ""
    assert sources._fence_after(text, fence, opener) == _fence_after_line_by_line(
        text, fence, opener)
    whole = list(sources._lines_outside_code(text))
    assert [line for line, _ in whole] == text.splitlines()
    if "```" not in text and "~~~" not in text:
        assert all(markdown for _, markdown in whole)


@settings(max_examples=300, deadline=None)
@given(texts, st.sampled_from([20, 25, 40]))
def test_chunks_are_the_same_when_every_section_is_read_for_list_items(
        text: str, chunk_words: int) -> None:
    fast = sources.chunk_text(text, chunk_words)
    with pytest.MonkeyPatch.context() as mp:
        # a pattern that finds a line everywhere: every section takes the full reading
        mp.setattr(sources, "_MAY_OPEN_ITEM_OR_FENCE", re.compile(r"^", re.M))
        full = sources.chunk_text(text, chunk_words)
    assert fast == full


def test_list_items_and_fences_are_still_read_in_sections_that_hold_them() -> None:
    # a piece cut inside a nested item loses the item's indentation, and only where the
    # section holds an item or a fence does the shortcut let it through
    assert sources._MAY_OPEN_ITEM_OR_FENCE.search("text\n   \u0663. item")
    assert sources._MAY_OPEN_ITEM_OR_FENCE.search("text\n  ~~~")
    assert not sources._MAY_OPEN_ITEM_OR_FENCE.search("text\n    code()\n# heading")
    bodies = ["*   one\n\n    two words here", "    three more words"]
    assert sources._list_indentation_removed(bodies, [False, False]) == [
        "*   one\n\n    two words here", "three more words"]


class _Cached(ingest.TermAnalyzer):
    """A TermAnalyzer whose words' terms are given (no database)."""

    def __init__(self, cache: dict[str, tuple[str, ...]]) -> None:
        self.cache = cache
        self.analyzer = "english_v8"


@pytest.mark.parametrize("version_id", [None, 7])
def test_posting_rows_are_one_line_per_posting_in_term_then_chunk_order(
        version_id: int | None) -> None:
    cache = {"Refunds": ("refund",), "refund": ("refund",), "plan,": ("plan",),
             "o'k\\t": ("o'k\\t",), "x": (), "monthly-plan": ("monthly-plan", "monthly", "plan")}
    texts = ["Refunds refund plan, x", "monthly-plan o'k\\t", "x x", "plan, refund"]
    ids = [12, 10, 11, 13]
    rows = ingest.index_rows(_Cached(cache), ids, texts, version_id)
    stamp = ingest._VERSION_MARK if version_id is None else str(version_id)
    counts: dict[int, Counter[str]] = {
        cid: Counter(t for w in text.split() for t in cache[w])
        for cid, text in zip(ids, texts, strict=True)}
    expected: list[str] = []
    for term in sorted({t for c in counts.values() for t in c}):
        for cid in sorted(counts):
            if term in counts[cid]:
                expected.append(f"{stamp}\t{ingest._copy_text(term)}\t{cid}\t"
                                f"{counts[cid][term]}\t{sum(counts[cid].values())}\n")
    assert "".join(rows.postings) == "".join(expected)
    assert rows.terms.split("\n") == sorted({t for c in counts.values() for t in c})
    assert rows.dfs == ",".join(str(sum(t in c for c in counts.values()))
                                for t in rows.terms.split("\n"))
    assert rows.total_length == 9
    lexical: Any = "".join(rows.lexical)
    assert lexical.startswith(f"{stamp}\t12\t3\t'plan' 'refund'\n")
