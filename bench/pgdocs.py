#!/usr/bin/env python3
"""Second dev benchmark, from the PostgreSQL 15 documentation (Debian ``postgresql-doc-15``).

Built like ``bench/pydocs.py`` so the two can check each other: pages are the documents
(DocBook HTML, navigation header and footer dropped), and the book's index
(``bookindex.html``) gives the queries, each judged relevant to the pages its entry
links to. Slices as in pydocs: identifier (names with ``_``, ``.`` or camelCase, such as
``pg_stat_activity``), keyword (plain words and phrases), sub-entry ("parent child") and
keyword wrapped as a question. Nothing of this corpus was used to choose pgfunnel's
defaults; it is a check that they carry over to another product's documentation.

    python bench/pgdocs.py build [--out bench/data/pgdocs]
    python bench/pgdocs.py run [--data bench/data/pgdocs] [--out bench/out]
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pydocs  # noqa: E402
from pydocs import IndexEntry, _classes  # noqa: E402

DOC_PACKAGE = "postgresql-doc-15"
DOC_ROOT = Path("/usr/share/doc/postgresql-doc-15/html")
_NAVIGATION = {"navheader", "navfooter"}


class DocBookPageParser(pydocs.PageParser):
    """pydocs' page parser, with the content taken from the first top-level ``div`` that
    is not DocBook's navigation header or footer (DocBook pages have no ``div.body``)."""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._body_depth == 0 and tag == "div" and not (_NAVIGATION & _classes(attrs)):
            self._body_depth = 1
            return
        super().handle_starttag(tag, attrs)


class BookIndexParser(HTMLParser):
    """``bookindex.html``: ``<dt>name, <a href>section</a>, ...</dt>`` entries, with
    sub-entries in a nested ``<dd><dl>``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.entries: list[IndexEntry] = []
        self._dl_depth = 0
        self._entry: IndexEntry | None = None
        self._name: list[str] = []
        self._in_link = False
        self._named = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "dl":
            self._dl_depth += 1
        elif tag == "dt" and self._dl_depth in (1, 2):
            self._entry = IndexEntry(name="")
            if self._dl_depth == 1:
                self.entries.append(self._entry)
            elif self.entries:
                self.entries[-1].subs.append(self._entry)
            self._name = []
            self._named = False
        elif tag == "a" and self._entry is not None:
            href = dict(attrs).get("href")
            if href and "indexterm" in _classes(attrs):
                self._entry.links.append(href)
            self._named = True  # the name is the text before the first link
            self._in_link = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "dl":
            self._dl_depth -= 1
        elif tag == "a":
            self._in_link = False
        elif tag == "dt" and self._entry is not None:
            self._entry.name = " ".join("".join(self._name).split()).rstrip(", ").strip()
            self._entry = None

    def handle_data(self, data: str) -> None:
        if self._entry is not None and not self._named and not self._in_link:
            self._name.append(data)


def parse_bookindex(html: str) -> list[IndexEntry]:
    parser = BookIndexParser()
    parser.feed(html)
    parser.close()
    return parser.entries


def ensure_docs(explicit: Path | None) -> Path:
    return pydocs.docs_root_with("bookindex.html", explicit, DOC_ROOT, DOC_PACKAGE,
                                 "PostgreSQL HTML docs")


def build(out_dir: Path, per_slice: int = 150, seed: int = 0,
          docs_root: Path | None = None) -> dict[str, int]:
    """Write ``corpus.jsonl`` and ``queries.jsonl`` under ``out_dir``; return counts."""
    root = ensure_docs(docs_root)
    out_dir.mkdir(parents=True, exist_ok=True)

    def parse_docbook(html: str) -> tuple[str, str]:
        parser = DocBookPageParser()
        parser.feed(html)
        parser.close()
        return pydocs.clean_title(parser.title), parser.text()

    docs = [d for d in pydocs.build_corpus(root, seed=seed, parse=parse_docbook)
            if d["citekey"] != "bookindex"]
    keys = {str(d["citekey"]) for d in docs}
    entries = parse_bookindex((root / "bookindex.html").read_text(encoding="utf-8"))
    # the question templates name the product
    templates = tuple(t.replace("in python", "in postgres") for t in pydocs.QUESTION_TEMPLATES)
    queries = pydocs.build_queries(entries, keys, per_slice=per_slice, seed=seed,
                                   templates=templates)
    for d in docs:
        d["metadata"] = {"section": str(d["citekey"]).split("-", 1)[0]}
    return pydocs.write_benchmark(out_dir, docs, entries, queries)


def main(argv: list[str] | None = None) -> int:
    return pydocs.docs_bench_main("pgdocs", __doc__.split("\n\n")[0], "the PostgreSQL docs", build,
                                  argv)


if __name__ == "__main__":
    sys.exit(main())
