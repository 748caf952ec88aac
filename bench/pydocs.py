#!/usr/bin/env python3
"""Dev benchmark built from the Python 3.11 documentation (Debian package ``python3.11-doc``).

Corpus: one document per HTML page of the docs, converted to markdown-ish plain text with
``## Heading`` lines at section boundaries. Queries: entries of the documentation's general
index (genindex); an entry's relevant documents are the distinct pages it links to. The docs'
authors chose those links, so the ground truth does not depend on any retrieval method.

Usage::

    python bench/pydocs.py build --out bench/data/pydocs [--max-pages N]

API for later subcommands: :func:`build`, :func:`load_corpus`, :func:`load_queries`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

DOC_PACKAGE = "python3.11-doc"
DOC_ROOT_CANDIDATES: tuple[Path, ...] = (
    Path("/usr/share/doc/python3.11/html"),
    Path("/usr/share/doc/python3.11-doc/html"),
    Path("/usr/share/doc/python3/html"),
)

SLICES: tuple[str, ...] = ("identifier", "keyword", "subentry", "question")
MIN_WORDS = 30
MAX_LINKED_PAGES = 8
CHUNK_WORDS = 200

# Pages that are navigation, not content (tables of contents, indexes, search).
_SKIP_PAGE_NAMES = {"index.html", "contents.html", "search.html", "py-modindex.html"}
_SKIP_PAGE_PREFIXES = ("genindex", "_")

_TITLE_SUFFIX = re.compile(r"\s+[—-]\s+Python\s+[\w.+-]*\s*documentation\s*$")
_DECORATION = re.compile(r"^(?P<name>.*?)\s+\((?P<deco>[^()]*)\)$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_KEYWORD = re.compile(r"^[A-Za-z][A-Za-z0-9'-]*(?: [A-Za-z0-9'-]+)*$")
# GetoptError, DOMException, IOError: API names, not words
_CAMEL = re.compile(r"[a-z][A-Z]|[A-Z]{2,}[a-z]")
_LINK_NUMBER = re.compile(r",?\s*\[\d+\]")
_WS = re.compile(r"\s+")

QUESTION_TEMPLATES: tuple[str, ...] = (
    "what is {x}",
    "how do I use {x}",
    "how does {x} work in python",
    "explain {x}",
)


def log(msg: str) -> None:
    print(msg, flush=True)


# --------------------------------------------------------------------------- docs location


def find_docs_root(candidates: Iterable[Path] | None = None) -> Path | None:
    """Return the first candidate directory that holds the HTML docs (has genindex pages)."""
    for root in DOC_ROOT_CANDIDATES if candidates is None else candidates:
        if (root / "genindex-all.html").is_file() or any(root.glob("genindex-*.html")):
            return root
    return None


def ensure_docs(explicit: Path | None = None) -> Path:
    """Find the docs; install the Debian package when missing and running as root.

    Exits with a message naming the package when the docs cannot be found or installed.
    """
    if explicit is not None:
        if find_docs_root([explicit]) is None:
            raise SystemExit(f"no Python HTML docs (genindex-*.html) under {explicit}")
        return explicit
    root = find_docs_root()
    if root is not None:
        return root
    is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    if not is_root or shutil.which("apt-get") is None:
        raise SystemExit(
            f"Python HTML docs not found (looked in {', '.join(map(str, DOC_ROOT_CANDIDATES))}).\n"
            f"Install the Debian package: sudo apt-get install -y {DOC_PACKAGE}\n"
            "or pass --docs DIR pointing at an html/ directory of the Python docs."
        )
    cmd = ["apt-get", "install", "-y", DOC_PACKAGE]
    log(f"docs not found; running: {' '.join(cmd)}")
    if subprocess.run(cmd, check=False).returncode != 0:
        log("install failed; running: apt-get update, then retrying the install")
        subprocess.run(["apt-get", "update"], check=False)
        if subprocess.run(cmd, check=False).returncode != 0:
            raise SystemExit(f"apt-get install {DOC_PACKAGE} failed; install it by hand")
    root = find_docs_root()
    if root is None:
        raise SystemExit(
            f"{DOC_PACKAGE} is installed but its HTML is missing; check for a path-exclude of "
            "/usr/share/doc in /etc/dpkg/dpkg.cfg.d/ (minimal images drop docs)"
        )
    return root


# --------------------------------------------------------------------------- page parser

_BLOCK_TAGS = {
    "p", "div", "section", "dl", "dt", "dd", "ul", "ol", "table", "tr", "blockquote",
    "h4", "h5", "h6", "figure", "figcaption", "caption", "hr", "br", "li", "pre",
}  # fmt: skip
_HEADING_TAGS = {"h1", "h2", "h3"}
_DROP_TAGS = {"script", "style", "nav", "form", "button", "input", "noscript"}
_VOID_TAGS = {"br", "hr", "img", "input", "meta", "link", "wbr", "col", "area", "source"}


def _classes(attrs: list[tuple[str, str | None]]) -> set[str]:
    for key, value in attrs:
        if key == "class" and value:
            return set(value.split())
    return set()


class PageParser(HTMLParser):
    """Extract title and main body text from a Sphinx HTML page.

    Only the ``div.body`` (role=main) is kept: the navigation bars, sidebars and footer of the
    page live outside it. ``h1``-``h3`` become ``## Heading`` lines, list items ``- item``,
    ``pre`` blocks are indented by four spaces (so code lines never look like headings), and
    Sphinx permalink anchors (``a.headerlink``, the pilcrow) are dropped.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self._in_title = False
        self._body_depth = 0  # >0 while inside div.body; counts nested divs
        self._drop_depth = 0  # >0 while inside a dropped element (inside the body)
        self._drop_stack: list[str] = []
        self._pre = 0
        self._pre_buf: list[str] = []
        self._bullet = False
        self._heading: list[str] | None = None
        self._parts: list[str] = []

    # -- helpers
    def _emit(self, text: str) -> None:
        if self._heading is not None:
            self._heading.append(text)
        else:
            self._parts.append(text)

    def _newline(self) -> None:
        # a bullet just opened ("<li><p>text") keeps its text on the bullet's line
        if self._heading is None and not self._bullet:
            self._parts.append("\n")

    # -- HTMLParser hooks
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
            return
        if self._body_depth == 0:
            attr = dict(attrs)
            if tag == "div" and ("body" in _classes(attrs) or attr.get("role") == "main"):
                self._body_depth = 1
            return
        if tag == "div":
            self._body_depth += 1
        if self._drop_depth:
            if tag not in _VOID_TAGS:
                self._drop_stack.append(tag)
                self._drop_depth += 1
            return
        cls = _classes(attrs)
        if tag in _DROP_TAGS or (tag == "a" and "headerlink" in cls):
            if tag not in _VOID_TAGS:
                self._drop_stack.append(tag)
                self._drop_depth = 1
            return
        if tag in _HEADING_TAGS:
            self._newline()
            self._heading = []
        elif tag == "pre":
            self._pre += 1
            if self._pre == 1:
                self._pre_buf = []
        elif tag == "li":
            self._bullet = False
            self._newline()
            self._emit("- ")
            self._bullet = True
        elif tag in _BLOCK_TAGS:
            self._newline()
        elif tag in ("td", "th"):
            self._emit(" | ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._body_depth and not self._drop_depth and tag in ("br", "hr"):
            self._newline()

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            return
        if self._body_depth == 0:
            return
        if self._drop_depth:
            if tag in self._drop_stack:
                # pop up to and including the matching tag (tolerates unclosed children)
                while self._drop_stack:
                    self._drop_depth -= 1
                    if self._drop_stack.pop() == tag:
                        break
                self._drop_depth = len(self._drop_stack)
            if tag == "div":
                self._body_depth -= 1
            return
        if tag == "div":
            self._body_depth -= 1
            if self._body_depth == 0:
                return
        if tag in _HEADING_TAGS and self._heading is not None:
            text = _WS.sub(" ", "".join(self._heading)).strip()
            self._heading = None
            if text:
                self._parts.append(f"\n## {text}\n")
        elif tag == "pre" and self._pre:
            self._pre -= 1
            if self._pre == 0:
                code = "".join(self._pre_buf).strip("\n")
                indented = "\n".join(
                    "    " + line if line.strip() else "" for line in code.split("\n")
                )
                self._parts.append(f"\n{indented}\n")
                self._bullet = False
        elif tag in _BLOCK_TAGS:
            self._newline()

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
            return
        if self._body_depth == 0 or self._drop_depth:
            return
        if self._pre and self._heading is None:
            self._pre_buf.append(data)
            return
        if self._bullet and data.strip():
            self._bullet = False
        self._emit(_WS.sub(" ", data))

    # -- result
    def text(self) -> str:
        lines: list[str] = []
        for raw in "".join(self._parts).split("\n"):
            line = raw.rstrip() if raw.startswith("    ") else raw.strip()
            if line.strip() in ("", "-", "|"):
                line = ""
            if line == "" and (not lines or lines[-1] == ""):
                continue
            lines.append(line)
        while lines and lines[-1] == "":
            lines.pop()
        return "\n".join(lines)


def clean_title(title: str) -> str:
    title = _WS.sub(" ", title).strip()
    return _TITLE_SUFFIX.sub("", title).strip()


def parse_page(html: str) -> tuple[str, str]:
    """Return ``(title, text)`` of one Sphinx page."""
    parser = PageParser()
    parser.feed(html)
    parser.close()
    return clean_title(parser.title), parser.text()


def word_count(text: str) -> int:
    return sum(1 for w in text.split() if w != "##")


def estimate_chunks(text: str, chunk_words: int = CHUNK_WORDS) -> int:
    """Chunks if split at ``## `` headings, then into pieces of ``chunk_words`` words."""
    total = 0
    for section in re.split(r"(?m)^## ", text):
        n = len(section.split())
        if n:
            total += math.ceil(n / chunk_words)
    return total


def iter_page_paths(root: Path) -> Iterator[Path]:
    """Content pages under the docs root, sorted, navigation/index pages excluded."""
    for path in sorted(root.rglob("*.html")):
        rel = path.relative_to(root)
        if any(part.startswith("_") for part in rel.parts[:-1]):
            continue
        if rel.name in _SKIP_PAGE_NAMES or rel.name.startswith(_SKIP_PAGE_PREFIXES):
            continue
        yield path


def citekey_for(rel: str) -> str:
    return rel[: -len(".html")] if rel.endswith(".html") else rel


def section_for(citekey: str) -> str:
    return citekey.split("/", 1)[0]


# --------------------------------------------------------------------------- genindex parser


@dataclass
class IndexEntry:
    """One entry of the general index: display name, linked pages, second-level entries."""

    name: str
    links: list[str] = field(default_factory=list)  # hrefs as written (page.html#anchor)
    subs: list[IndexEntry] = field(default_factory=list)


def _entry_name(parts: list[str]) -> str:
    return _WS.sub(" ", _LINK_NUMBER.sub("", "".join(parts))).strip()


class _IndexTableParser(HTMLParser):
    """Hands a genindex layout's parser (``_start``/``_end``) only the tags inside
    ``table.indextable``; the entries it finds go to ``entries``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.entries: list[IndexEntry] = []
        self._table_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            if self._table_depth or "indextable" in _classes(attrs):
                self._table_depth += 1
        elif self._table_depth:
            self._start(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._table_depth:
            self._table_depth -= 1
        elif self._table_depth:
            self._end(tag)

    def _start(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        raise NotImplementedError

    def _end(self, tag: str) -> None:
        raise NotImplementedError


class GenindexParser(_IndexTableParser):
    """Parse Sphinx ``genindex`` pages (``table.indextable`` of nested ``ul``/``li``)."""

    def __init__(self) -> None:
        super().__init__()
        self._ul_depth = 0
        self._stack: list[tuple[IndexEntry, list[str], int]] = []  # entry, text parts, ul depth

    def _start(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "ul":
            self._ul_depth += 1
        elif tag == "li":
            entry = IndexEntry(name="")
            if self._ul_depth >= 2 and self._stack:
                self._stack[-1][0].subs.append(entry)
            elif self._ul_depth == 1:
                self.entries.append(entry)
            self._stack.append((entry, [], self._ul_depth))
        elif tag == "a" and self._stack and self._stack[-1][2] == self._ul_depth:
            href = dict(attrs).get("href")
            if href:
                self._stack[-1][0].links.append(href)

    def _end(self, tag: str) -> None:
        if tag == "ul":
            self._ul_depth -= 1
        elif tag == "li" and self._stack:
            entry, parts, _ = self._stack.pop()
            entry.name = _entry_name(parts)

    def handle_data(self, data: str) -> None:
        if self._table_depth and self._stack and self._stack[-1][2] == self._ul_depth:
            self._stack[-1][1].append(data)


class DlGenindexParser(_IndexTableParser):
    """The older genindex layout (``table.indextable`` of ``dl``/``dt``/``dd``, as
    SQLAlchemy's theme writes it): a first-level ``dt`` is an entry, a ``dt`` of a nested
    ``dl`` a sub-entry of the entry before it."""

    def __init__(self) -> None:
        super().__init__()
        self._dl_depth = 0
        self._current: IndexEntry | None = None
        self._parts: list[str] = []
        self._top: IndexEntry | None = None

    def _start(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "dl":
            self._dl_depth += 1
        elif tag == "dt":
            entry = IndexEntry(name="")
            if self._dl_depth == 1:
                self.entries.append(entry)
                self._top = entry
            elif self._dl_depth >= 2 and self._top is not None:
                self._top.subs.append(entry)
            self._current, self._parts = entry, []
        elif tag == "a" and self._current is not None:
            href = dict(attrs).get("href")
            if href:
                self._current.links.append(href)

    def _end(self, tag: str) -> None:
        if tag == "dl":
            self._dl_depth -= 1
        elif tag == "dt" and self._current is not None:
            self._current.name = _entry_name(self._parts)
            self._current = None

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self._parts.append(data)


def parse_genindex(html: str) -> list[IndexEntry]:
    """Index entries of a Sphinx genindex page, in either layout (``ul``/``li``, or the
    older ``dl``/``dt``)."""
    parser = GenindexParser()
    parser.feed(html)
    parser.close()
    if parser.entries:
        return parser.entries
    dl = DlGenindexParser()
    dl.feed(html)
    dl.close()
    # each letter's table closes with an empty <dt></dt>
    return [e for e in dl.entries if e.name or e.subs]


def genindex_files(root: Path) -> list[Path]:
    """``genindex-all.html`` when present, else the per-letter ``genindex-*.html`` pages."""
    all_page = root / "genindex-all.html"
    if all_page.is_file():
        return [all_page]
    return sorted(p for p in root.glob("genindex-*.html"))


def split_decoration(name: str) -> tuple[str, str | None]:
    """``"dumps() (in module json)"`` -> ``("dumps()", "in module json")``."""
    m = _DECORATION.match(name)
    if m and m.group("name"):
        return m.group("name").strip(), m.group("deco").strip()
    return name.strip(), None


def is_decoration_only(name: str) -> bool:
    """Sub-entries like ``(in module pickle)``: the parent name in another namespace."""
    name = name.strip()
    return name.startswith("(") and name.endswith(")")


def identifier_query(name: str) -> str | None:
    """The identifier a user would type, or None when the entry is not an API name.

    ``"dumps() (in module json)"`` -> ``"dumps"`` (the decoration is dropped, nothing is
    added); ``"os.path.join()"`` -> ``"os.path.join"``; ``"GetoptError"`` -> itself
    (camelCase); ``"decorator"`` -> None (a plain word: keyword slice).
    """
    base, deco = split_decoration(name)
    had_call = base.endswith("()")
    if had_call:
        base = base[:-2].strip()
    if not _IDENTIFIER.match(base):
        return None
    if had_call or deco is not None or "." in base or "_" in base or _CAMEL.search(base):
        return base
    return None


def keyword_query(name: str) -> str | None:
    """A plain top-level word or phrase (no decoration, no call parens), else None."""
    base, deco = split_decoration(name)
    if deco is not None or "()" in base or "_" in base or "." in base:
        return None
    return base if len(base) > 1 and _KEYWORD.match(base) else None


def subentry_parent(name: str) -> str | None:
    """Parent text used as the prefix of a sub-entry query (decoration and parens stripped)."""
    base, _ = split_decoration(name)
    if base.endswith("()"):
        base = base[:-2].strip()
    return base if any(c.isalpha() for c in base) else None


def pages_of(links: Iterable[str], corpus_keys: set[str]) -> list[str]:
    """Distinct corpus citekeys linked by ``links`` (first-seen order)."""
    out: list[str] = []
    for href in links:
        page = href.split("#", 1)[0]
        if not page or "://" in page:
            continue
        key = citekey_for(page.lstrip("./"))
        if key in corpus_keys and key not in out:
            out.append(key)
    return out


def stable_hash(text: str) -> int:
    return int(hashlib.sha1(text.encode("utf-8")).hexdigest()[:12], 16)


def make_query_id(slice_name: str, query: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", query.lower()).strip("-")[:48] or "q"
    return f"{slice_name}-{slug}-{hashlib.sha1(query.encode('utf-8')).hexdigest()[:6]}"


def assign_split(query_id: str) -> str:
    """Deterministic 50/50 dev/test split from a hash of the query id."""
    return "dev" if stable_hash(query_id) % 2 == 0 else "test"


def wrap_question(term: str, templates: tuple[str, ...] = QUESTION_TEMPLATES) -> str:
    """Wrap a keyword as a question; the template is chosen by a stable hash of the term."""
    template = templates[stable_hash(term) % len(templates)]
    return template.format(x=term)


def candidates_from_index(
    entries: Iterable[IndexEntry], corpus_keys: set[str]
) -> dict[str, dict[str, list[str]]]:
    """Map slice -> query text -> relevant citekeys (before size filter and sampling).

    Entries whose query text is the same (case-insensitive) are merged: "default" as an
    attribute in several modules is one query whose relevant pages are all of them.
    ``question`` is filled later from ``keyword``.
    """
    out: dict[str, dict[str, list[str]]] = {"identifier": {}, "keyword": {}, "subentry": {}}
    display: dict[tuple[str, str], str] = {}

    def add(slice_name: str, query: str, pages: list[str]) -> None:
        key = (slice_name, query.lower())
        shown = display.setdefault(key, query)
        bucket = out[slice_name].setdefault(shown, [])
        bucket.extend(p for p in pages if p not in bucket)

    entries = list(entries)
    # A plain entry ("NameError", "Warning") whose text is also an API name elsewhere in the
    # index joins that identifier query instead of forming a keyword query of its own.
    api_names = {q.lower() for q in map(identifier_query, (e.name for e in entries)) if q}
    # Environment variables (PYTHONPATH, LANG) are typed like identifiers, too.
    for e in entries:
        if split_decoration(e.name)[0].lower() == "environment variable":
            api_names.update(sub.name.strip().lower() for sub in e.subs)
    for entry in entries:
        own_links = list(entry.links)
        real_subs: list[IndexEntry] = []
        for sub in entry.subs:
            if is_decoration_only(sub.name):
                own_links.extend(sub.links)  # same name, another namespace
            else:
                real_subs.append(sub)
        pages = pages_of(own_links, corpus_keys)
        ident = identifier_query(entry.name)
        if ident is None and entry.name.strip().lower() in api_names:
            ident = entry.name.strip()
        if ident is not None:
            add("identifier", ident, pages)
        else:
            kw = keyword_query(entry.name)
            if kw is not None:
                add("keyword", kw, pages)
        parent = subentry_parent(entry.name)
        if parent is None:
            continue
        for sub in real_subs:
            sub_name = _WS.sub(" ", sub.name).strip()
            if not sub_name:
                continue
            add("subentry", f"{parent} {sub_name}", pages_of(sub.links, corpus_keys))
    return out


def _usable(pages: list[str]) -> bool:
    return 0 < len(pages) <= MAX_LINKED_PAGES


def _sample(items: list[str], n: int, seed: int, slice_name: str) -> list[str]:
    items = sorted(items)
    if len(items) <= n:
        return items
    return sorted(random.Random(f"{seed}:{slice_name}").sample(items, n))


def build_queries(
    entries: Iterable[IndexEntry], corpus_keys: set[str], per_slice: int = 150, seed: int = 0,
    templates: tuple[str, ...] = QUESTION_TEMPLATES
) -> list[dict[str, object]]:
    """Judged queries for all slices from parsed index entries."""
    entries = list(entries)
    if not entries:
        # a benchmark of zero queries would "pass" every comparison
        raise SystemExit("the general index gave no entries: is genindex.html a Sphinx "
                         "index (table.indextable of ul/li or dl/dt)?")
    cands = candidates_from_index(entries, corpus_keys)
    usable = {s: {q: p for q, p in c.items() if _usable(p)} for s, c in cands.items()}
    chosen: dict[str, list[str]] = {}
    for s in ("identifier", "keyword", "subentry"):
        chosen[s] = _sample(list(usable[s]), per_slice, seed, s)
    # Questions wrap keyword entries not already used by the keyword slice (when there are
    # enough), so the same judgment does not sit in both slices under two ids.
    taken = set(chosen["keyword"])
    rest = [q for q in usable["keyword"] if q not in taken]
    pool = rest if len(rest) >= per_slice else list(usable["keyword"])
    chosen["question"] = _sample(pool, per_slice, seed, "question")

    queries: list[dict[str, object]] = []
    for s in SLICES:
        source = usable["keyword"] if s == "question" else usable[s]
        for term in chosen[s]:
            text = wrap_question(term, templates) if s == "question" else term
            qid = make_query_id(s, text)
            queries.append(
                {
                    "query_id": qid,
                    "query": text,
                    "slice": s,
                    "relevant": {page: 1 for page in sorted(source[term])},
                    "history": [],
                    "split": assign_split(qid),
                }
            )
    return queries


UNDERSCORED_SLICES: tuple[str, ...] = ("dunder", "dunder-qualified", "private", "trailing")


def underscored_slice(query: str) -> str | None:
    """The slice of an identifier query holding a name opened or closed by underscores
    (what analyzer ``english_v8`` keeps whole), else None.

    ``__init__`` -> ``dunder``; ``object.__getattr__``, ``__future__.annotations`` ->
    ``dunder-qualified``;
    ``_thread``, ``sys._getframe``, ``_thread.start_new_thread``, ``_fields_`` ->
    ``private``; a name only closed by them (``operator.and_``, ``check__all__``) ->
    ``trailing``.
    """
    parts = query.split(".")
    if not any(p.strip("_") and (p.startswith("_") or p.endswith("_")) for p in parts):
        return None
    if any(len(p) > 4 and p.startswith("__") and p.endswith("__") for p in parts):
        return "dunder" if len(parts) == 1 else "dunder-qualified"
    return "private" if any(p.startswith("_") for p in parts) else "trailing"


def underscored_queries(entries: Iterable[IndexEntry],
                        corpus_keys: set[str]) -> list[dict[str, object]]:
    """Every identifier query of the index that holds a name opened or closed by
    underscores, judged as the benchmark judges (the pages its entries link to, at most
    ``MAX_LINKED_PAGES``), sliced by :func:`underscored_slice`; not sampled."""
    cands = candidates_from_index(entries, corpus_keys)["identifier"]
    queries: list[dict[str, object]] = []
    for query in sorted(cands):
        slice_name = underscored_slice(query)
        if slice_name is None or not _usable(cands[query]):
            continue
        qid = make_query_id(slice_name, query)
        queries.append({"query_id": qid, "query": query, "slice": slice_name,
                        "relevant": {page: 1 for page in sorted(cands[query])},
                        "history": [], "split": assign_split(qid)})
    return queries


# --------------------------------------------------------------------------- build


def build_corpus(
    root: Path, max_pages: int | None = None, seed: int = 0,
    parse: Callable[[str], tuple[str, str]] = parse_page
) -> list[dict[str, object]]:
    paths = list(iter_page_paths(root))
    if max_pages is not None and max_pages < len(paths):
        paths = sorted(random.Random(f"{seed}:pages").sample(paths, max_pages))
    docs: list[dict[str, object]] = []
    skipped = 0
    for i, path in enumerate(paths, 1):
        rel = path.relative_to(root).as_posix()
        title, text = parse(path.read_text(encoding="utf-8", errors="replace"))
        if word_count(text) < MIN_WORDS:
            skipped += 1
        else:
            citekey = citekey_for(rel)
            docs.append(
                {
                    "citekey": citekey,
                    "title": title or citekey,
                    "text": text,
                    "metadata": {"section": section_for(citekey)},
                    "tenant": None,
                    "readers": [],
                    "language": "en",
                }
            )
        if i % 100 == 0 or i == len(paths):
            log(
                f"  pages {i}/{len(paths)} parsed "
                f"({len(docs)} kept, {skipped} under {MIN_WORDS} words)"
            )
    return docs


def write_jsonl(path: Path, rows: Iterable[dict[str, object]]) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def _read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_corpus(path: Path | str) -> list[dict[str, Any]]:
    """Documents of ``corpus.jsonl`` (pgfunnel ingest format)."""
    return _read_jsonl(path)


def load_queries(path: Path | str) -> list[dict[str, Any]]:
    """Judged queries of ``queries.jsonl``."""
    return _read_jsonl(path)


def build(
    out_dir: Path,
    max_pages: int | None = None,
    per_slice: int = 150,
    seed: int = 0,
    docs_root: Path | None = None,
    underscored_out: Path | None = None,
) -> dict[str, int]:
    """Write ``corpus.jsonl`` and ``queries.jsonl`` under ``out_dir``; return counts.
    With ``underscored_out``, also write there every query :func:`underscored_queries`
    finds (judged on the same corpus)."""
    root = ensure_docs(docs_root)
    log(f"docs: {root}")
    out_dir.mkdir(parents=True, exist_ok=True)
    docs = build_corpus(root, max_pages=max_pages, seed=seed)
    keys = {str(d["citekey"]) for d in docs}

    entries: list[IndexEntry] = []
    for page in genindex_files(root):
        entries.extend(parse_genindex(page.read_text(encoding="utf-8", errors="replace")))
    log(f"index: {len(entries)} top-level entries from {len(genindex_files(root))} page(s)")
    queries = build_queries(entries, keys, per_slice=per_slice, seed=seed)

    write_jsonl(out_dir / "corpus.jsonl", docs)
    write_jsonl(out_dir / "queries.jsonl", queries)
    underscored: list[dict[str, object]] = []
    if underscored_out is not None:
        underscored = underscored_queries(entries, keys)
        write_jsonl(underscored_out, underscored)
        log(f"wrote {underscored_out}")

    counts: dict[str, int] = {
        "docs": len(docs),
        "chunks_estimate": sum(estimate_chunks(str(d["text"])) for d in docs),
        "words": sum(word_count(str(d["text"])) for d in docs),
        "index_entries": len(entries),
        "queries": len(queries),
    }
    for s in SLICES:
        counts[f"queries_{s}"] = sum(1 for q in queries if q["slice"] == s)
    for split in ("dev", "test"):
        counts[f"queries_{split}"] = sum(1 for q in queries if q["split"] == split)
    if underscored_out is not None:
        for s in UNDERSCORED_SLICES:
            counts[f"underscored_{s}"] = sum(1 for q in underscored if q["slice"] == s)
    sections: dict[str, int] = {}
    for d in docs:
        sec = section_for(str(d["citekey"]))
        sections[sec] = sections.get(sec, 0) + 1
    for sec, n in sorted(sections.items()):
        counts[f"docs_{sec}"] = n
    return counts


# --------------------------------------------------------------------------- run

VECTORS_FILE = "vectors.npz"


def corpus_records(path: Path) -> list[Any]:
    """The corpus as pgfunnel DocumentRecords (validated like `pgfunnel ingest` does)."""
    from pgfunnel.sources import record_from_dict

    return [record_from_dict(obj, f"{path}: document {i + 1}")
            for i, obj in enumerate(load_corpus(path))]


def cached_vectors(records: list[Any], cache: Path, embedder: Any,
                   chunk_words: int = CHUNK_WORDS) -> tuple[dict[str, Any], float, int]:
    """Per-citekey chunk vectors, embedding only chunks whose input is not cached.

    Each chunk is embedded as pgfunnel's own ingest would embed it (``embedding_input``:
    the page title above the chunk). The cache is
    an ``.npz`` of ``hashes`` (sha256 of that input) and ``vectors``, so a rerun on the
    same corpus embeds nothing.
    Returns (vectors by citekey, seconds spent embedding, chunks embedded).
    """
    import time

    import numpy as np

    from pgfunnel.sources import chunk_text, embedding_input

    known: dict[str, Any] = {}
    if cache.exists():
        data = np.load(cache)
        if int(data["vectors"].shape[1]) == embedder.dimensions:
            known = dict(zip((str(h) for h in data["hashes"]), data["vectors"], strict=True))
    # (hash, text) of each chunk's embedding input, per citekey
    inputs = {r.citekey: [(hashlib.sha256(text.encode()).hexdigest(), text)
                          for ch in chunk_text(r.text, chunk_words)
                          for text in (embedding_input(r.title, ch.text,
                                                       section_path=ch.section_path),)]
              for r in records}
    todo = {h: text for pairs in inputs.values() for h, text in pairs if h not in known}
    seconds = 0.0
    if todo:
        log(f"embedding {len(todo)} chunks ({len(known)} cached) with {embedder.model_name}")
        t0 = time.perf_counter()
        done = [0]

        def tick(n: int) -> None:
            done[0] += n
            if done[0] % 640 < n:
                log(f"  embedded {done[0]}/{len(todo)}")

        items = list(todo.items())
        step = 512
        for start in range(0, len(items), step):
            part = items[start:start + step]
            vecs = embedder.embed([t for _, t in part], progress=tick)
            known.update(zip((h for h, _ in part), vecs, strict=True))
            # saved after every slice, so an interrupted run resumes where it stopped
            cache.parent.mkdir(parents=True, exist_ok=True)
            hashes = sorted(known)
            np.savez(cache, hashes=np.array(hashes),
                     vectors=np.stack([known[h] for h in hashes]).astype(np.float32))
        seconds = time.perf_counter() - t0
    out = {ck: np.stack([known[h] for h, _ in pairs]) for ck, pairs in inputs.items() if pairs}
    return out, seconds, len(todo)


RUN_CONFIGS: dict[str, dict[str, Any]] = {
    # one leg alone, as the eval presets run it (pgfunnel.eval.harness.LEXICAL_ONLY /
    # DENSE_ONLY): the other leg does not run, so its hits cannot fill the list; rank
    # fusion keeps the leg's own order
    "lexical": {"legs": "lexical", "fusion": "rrf", "weights": [1, 0]},
    "dense": {"legs": "dense", "fusion": "rrf", "weights": [0, 1]},
    "rrf": {"fusion": "rrf"},
    "minmax": {"fusion": "minmax"},
    "zscore": {"fusion": "zscore"},
    "rrf, no cap": {"fusion": "rrf", "per_source_cap": 1000},
    "minmax, no cap": {"fusion": "minmax", "per_source_cap": 1000},
    "zscore, no cap": {"fusion": "zscore", "per_source_cap": 1000},
}
PEER = "supabase-hybrid"
NO_CAP = RUN_CONFIGS["minmax, no cap"]["per_source_cap"]
# what summary_table says of each row it may hold, in the table's order
SUMMARY_LEGEND: tuple[tuple[str, str], ...] = (
    ("lexical", "lexical, dense: each leg alone"),
    ("minmax", "minmax: pgfunnel's default (min-max fusion, weights chosen by query)"),
    (PEER, f"{PEER}: the Supabase-style hybrid_search (bench/peers.py)"),
)


def _peer_runs(conn: Any, queries: list[Any], embedder: Any, k: int) -> dict[str, list[str]]:
    """The Supabase-style hybrid_search peer's rankings, collapsed to citekeys."""
    import peers

    from pgfunnel.eval.metrics import collapse_to_documents

    out: dict[str, list[str]] = {}
    for q in queries:
        rows = peers.hybrid_search(conn, q.query, embedder.embed_query(q.query), k)
        out[q.query_id] = collapse_to_documents([f"{c}#{o}" for c, o in rows])
    return out


def run(data_dir: Path, out_dir: Path, dsn: str | None = None, collection: str = "pydocs",
        k: int = 10) -> str:
    """Ingest the corpus (cached vectors), evaluate every configuration and the peer on
    the dev and the test split; write {collection}_{split}.{json,md} and
    {collection}_slices_{split}.png to ``out_dir``; return markdown."""
    import sys as _sys

    _sys.path.insert(0, str(Path(__file__).resolve().parent))
    import peers

    from pgfunnel.db import connect
    from pgfunnel.embedder import Embedder
    from pgfunnel.eval.harness import EvalConfig, Harness
    from pgfunnel.eval.qrels import load_queries as load_judged
    from pgfunnel.eval.qrels import select_split
    from pgfunnel.eval.report import build_report, plot_slices, to_markdown, write_json
    from pgfunnel.ingest import Ingester

    for needed in ("corpus.jsonl", "queries.jsonl"):
        if not (data_dir / needed).is_file():
            raise SystemExit(f"{data_dir / needed} not found: build the benchmark first: "
                             f"python bench/{collection}.py build --out {data_dir}")
    embedder = Embedder()
    records = corpus_records(data_dir / "corpus.jsonl")
    vectors, embed_s, n_embedded = cached_vectors(records, data_dir / VECTORS_FILE, embedder)
    log(f"vectors: {n_embedded} embedded in {embed_s:.0f}s, the rest from the cache")
    from pgfunnel.schema import init as init_schema

    init_schema(dsn)
    with connect(dsn, autocommit=True) as conn:
        stats = Ingester(conn, collection, embedder=embedder).ingest(records, vectors=vectors)
        log(f"ingest: {stats.chunks_written} chunks written, {stats.documents_unchanged} "
            f"documents unchanged, db {stats.db_seconds:.1f}s")
        log(f"peer table: {peers.build_peer(conn, collection)} rows")
        judged = load_judged(data_dir / "queries.jsonl")
        configs = [EvalConfig.from_dict(n, c) for n, c in RUN_CONFIGS.items()]
        out_dir.mkdir(parents=True, exist_ok=True)
        parts: list[str] = []
        for split in ("dev", "test"):
            result = Harness(conn, collection, k=k, embedder=embedder,
                             progress=lambda n, d, t: log(f"  {n} {d}/{t}") if d % 100 == 0
                             else None).run(judged, configs, split=split)
            selected = select_split(judged, split)
            rankings = {name: {qid: r.final for qid, r in by_q.items()}
                        for name, by_q in result.runs.items()}
            rankings[PEER] = _peer_runs(conn, selected, embedder, k)
            # a single-leg configuration has no pool for the leg it does not run
            pools = {name: {st: {qid: r.stages.get(st, []) for qid, r in by_q.items()}
                            for st in ("lexical", "dense", "fused", "capped")
                            if any(st in r.stages for r in by_q.values())}
                     for name, by_q in result.runs.items()}
            report = build_report(rankings, selected, k=k, baseline=PEER, pools=pools,
                                  metadata={"corpus": str(data_dir), "split": split})
            report.split = split
            write_json(report, out_dir / f"{collection}_{split}.json")
            md = to_markdown(report)
            (out_dir / f"{collection}_{split}.md").write_text(md, encoding="utf-8")
            plot_slices(report, out_dir / f"{collection}_slices_{split}.png")
            parts.append(summary_table(report, split, collection))
    return "\n".join(parts)


def summary_table(report: Any, split: str, name: str = "pydocs") -> str:
    """One row per configuration: nDCG@k per slice, recall@k and fused-pool recall (all)."""
    k = report.k
    slices = report.slices
    lines = [f"### {name}, {split} split (nDCG@{k} per slice)", "",
             "| configuration | " + " | ".join(slices) + f" | recall@{k} all | pool recall "
             "fused all | pool recall capped all |",
             "|---|" + "---:|" * (len(slices) + 3)]
    def cell(value: float | None) -> str:
        # what a configuration does not have (the Supabase-style peer has no funnel
        # stages, so no pool recall) is '–', as in the eval report, not 'nan'
        return "–" if value is None else f"{value:.3f}"

    for config_name, res in report.configs.items():
        cells = [cell(res.aggregates.get(s, {}).get(f"ndcg@{k}")) for s in slices]
        pr = res.pool_recall
        cells.append(cell(res.aggregates["all"].get(f"recall@{k}")))
        cells.append(cell(pr.get("fused", {}).get("all")))
        cells.append(cell(pr.get("capped", {}).get("all")))
        lines.append(f"| {config_name} | " + " | ".join(cells) + " |")
    # the rows' names are RUN_CONFIGS' and the peer's: say which one the README's
    # "default" is, and which way the figures go, without bench/README.md at hand
    names = set(report.configs)
    said = [text for name, text in SUMMARY_LEGEND if name in names]
    if any(name.endswith(", no cap") for name in names):
        said.append(f"', no cap': the same with per_source_cap {NO_CAP}")
    said.append("every figure: higher is better")
    lines += ["", "; ".join(said) + "."]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- CLI


def bench_parser(name: str, description: str,
                 docs: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command line of a docs benchmark (``build`` and ``run``), and its ``build``
    subparser for options of that benchmark's own."""
    parser = argparse.ArgumentParser(prog=name, description=description)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build corpus.jsonl and queries.jsonl from the docs")
    # --help showed no defaults: the folders a first run reads and writes were guesswork
    b.add_argument("--out", type=Path, default=Path(f"bench/data/{name}"),
                   help="folder for corpus.jsonl and queries.jsonl (default: %(default)s)")
    b.add_argument("--per-slice", type=int, default=150,
                   help="max queries per slice (default: %(default)s)")
    b.add_argument("--seed", type=int, default=0,
                   help="sampling seed (default: %(default)s)")
    b.add_argument("--docs", type=Path, default=None, help=f"html/ dir of {docs}")
    r = sub.add_parser("run", help=f"ingest into collection '{name}' and evaluate every "
                                   "configuration and the Supabase-style peer")
    r.add_argument("--data", type=Path, default=Path(f"bench/data/{name}"),
                   help="the folder build wrote, where the vectors are cached too "
                        "(default: %(default)s)")
    r.add_argument("--out", type=Path, default=Path("bench/out"),
                   help=f"folder for {name}_{{dev,test}}.{{md,json}} and "
                        f"{name}_slices_{{dev,test}}.png (default: %(default)s)")
    r.add_argument("--dsn", default=None,
                   help="Postgres to use (default: PGFUNNEL_DSN, else the embedded one)")
    r.add_argument("--k", type=int, default=10, help="cutoff (default: %(default)s)")
    return parser, b


def docs_root_with(index_page: str, explicit: Path | None, default: Path, package: str,
                   what: str) -> Path:
    """The docs folder (``explicit``, else ``default``) if it holds ``index_page``; else
    exit naming the Debian package that provides it."""
    root = explicit or default
    if not (root / index_page).is_file():
        raise SystemExit(f"{what} not found under {root}; install them with: "
                         f"sudo apt-get install -y {package} (or pass --docs DIR)")
    return root


def write_benchmark(out_dir: Path, docs: list[dict[str, object]], entries: list[IndexEntry],
                    queries: list[dict[str, object]]) -> dict[str, int]:
    """Write a docs benchmark's ``corpus.jsonl`` and ``queries.jsonl``; return its counts
    (for the benchmarks built on this one: pgdocs, djangodocs)."""
    log(f"index: {len(entries)} top-level entries")
    write_jsonl(out_dir / "corpus.jsonl", docs)
    write_jsonl(out_dir / "queries.jsonl", queries)
    counts = {"docs": len(docs), "index_entries": len(entries), "queries": len(queries),
              "chunks_estimate": sum(estimate_chunks(str(d["text"])) for d in docs)}
    for s in SLICES:
        counts[f"queries_{s}"] = sum(1 for q in queries if q["slice"] == s)
    return counts


def docs_bench_main(name: str, description: str, docs: str,
                    build_fn: Callable[[Path, int, int, Path | None], dict[str, int]],
                    argv: list[str] | None = None) -> int:
    """``build`` / ``run`` for a benchmark built on this one; its collection is ``name``."""
    parser, _ = bench_parser(name, description, docs)
    args = parser.parse_args(argv)
    if args.command == "run":
        print(run(args.data, args.out, dsn=args.dsn, collection=name, k=args.k))
        return 0
    for key, value in build_fn(args.out, args.per_slice, args.seed, args.docs).items():
        log(f"  {key:<24} {value}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser, b = bench_parser("pydocs", __doc__.split("\n\n")[0], "the Python docs")
    b.add_argument("--max-pages", type=int, default=None, help="sample this many pages")
    b.add_argument("--underscored-queries", type=Path, default=None, metavar="OUT.jsonl",
                   help="also write every identifier query holding a name opened or closed "
                        "by underscores (__init__, sys._getframe), not sampled, in slices "
                        "dunder, dunder-qualified, private, trailing")
    args = parser.parse_args(argv)
    if args.command == "run":
        print(run(args.data, args.out, dsn=args.dsn, k=args.k))
        return 0
    if args.command == "build":
        counts = build(
            args.out,
            max_pages=args.max_pages,
            per_slice=args.per_slice,
            seed=args.seed,
            docs_root=args.docs,
            underscored_out=args.underscored_queries,
        )
        log(f"wrote {args.out / 'corpus.jsonl'} and {args.out / 'queries.jsonl'}")
        for key, value in counts.items():
            log(f"  {key:<24} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
