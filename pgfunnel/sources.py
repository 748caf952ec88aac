"""Reading documents from files, and cutting them into chunks.

Formats: ``.md`` (sections by heading), ``.rst`` (reStructuredText: sections by title,
markup read as rendered; see :mod:`pgfunnel.rst_text`), ``.txt`` (paragraphs, or read as
reStructuredText when it is that), ``.html`` (the main content, sections by heading; see
:mod:`pgfunnel.html_text`), ``.jsonl`` (one document
per line: citekey, title, text, and optionally metadata, tenant, readers, language,
valid_from, valid_to).
"""

from __future__ import annotations

import codecs
import datetime as dt
import fnmatch
import gzip
import hashlib
import io
import json
import numbers
import os
import re
import tomllib
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

from pgfunnel.asciidoc_text import asciidoc_to_text
from pgfunnel.errors import (
    JSON_ERRORS,
    ConfigError,
    InvalidDocumentError,
    json_problem,
    loads_unique,
    read_file_bytes,
    text_problem,
    warn_at_caller,
)
from pgfunnel.html_text import html_page
from pgfunnel.markdown_lines import FENCE_OPEN, HEADING_MARK, INDENT
from pgfunnel.rst_text import (
    _CODE,
    _SILENT,
    _VERSION_WORDS,
    _role_text,
    looks_like_rst,
    rst_to_text,
)

SUPPORTED_SUFFIXES = (".md", ".markdown", ".mdx", ".rst", ".rest", ".adoc", ".asciidoc", ".txt",
                      ".html", ".htm", ".ipynb", ".jsonl")
# a file of a supported format compressed with gzip (README.md.gz) is read as that
# format: Debian compresses every document over a few kilobytes in /usr/share/doc, so
# zstd's README.md.gz and pip's contributing.rst.gz were "files of other types"
COMPRESSED_SUFFIX = ".gz"
# the most a gzip-compressed file is read to, decompressed (1 GiB), unless a read is given
# another (``max_expanded_bytes``; `pgfunnel ingest --max-expanded-mib`). An uncompressed
# file is read whole, as large as it is on disk; a few megabytes of gzip can expand to
# gigabytes of one repeated byte, which filled memory before anything was said
MAX_EXPANDED_BYTES = 1 << 30
DEFAULT_CHUNK_WORDS = 200
# what the embedder reads for a chunk, recorded per index version (params.embed_input);
# versions made before it was recorded read the chunk text alone
EMBED_WITH_SECTION_PATH = "section"
EMBED_WITH_TITLE = "title"
EMBED_TEXT_ALONE = "text"
EMBED_INPUTS = (EMBED_WITH_SECTION_PATH, EMBED_WITH_TITLE, EMBED_TEXT_ALONE)
DEFAULT_EMBED_INPUT = EMBED_WITH_TITLE
# what BM25 indexes for a chunk, recorded per index version (params.lexical_input);
# versions made before it was recorded index the chunk text alone
# ("title2": the title counts twice, a BM25F title weight of 2; versions made before it
# count it once, "title"; "title2_term2", the default since, counts a term heading twice
# as well)
LEXICAL_TERM_TWICE = "title2_term2"
LEXICAL_TITLE_TWICE = "title2"
LEXICAL_WITH_TITLE = "title"
LEXICAL_TEXT_ALONE = "text"
LEXICAL_INPUTS = (LEXICAL_TERM_TWICE, LEXICAL_TITLE_TWICE, LEXICAL_WITH_TITLE,
                  LEXICAL_TEXT_ALONE)
DEFAULT_LEXICAL_INPUT = LEXICAL_TERM_TWICE
# The heading level of a term: a section that describes one named thing, an API object
# under its signature or a glossary entry under its term. The HTML reader writes these
# (Sphinx's <dt> terms) at the lowest level, which prose sections rarely reach (a
# Markdown heading written at level 6 counts as one); such a chunk's heading is the
# thing's name, and a "title2_term2" version counts it twice
TERM_HEADING_LEVEL = 6


# part of a document's content hash: raised when the same text comes out as other chunks,
# or its chunks carry more, so that the next ingest rewrites documents stored before
# (2: chunks keep their section path; 3: their line breaks and indentation; 4: code and
# tables are cut between lines, a fenced block cut between chunks is fenced in each, and
# blank lines between paragraphs are kept; 5: a blank line under the heading; 6: a piece
# of a list item loses the item's indentation, cuts move off block markers, and a quote
# is cut between its lines and stays quoted; 7: a heading that starts like a list item, a
# quote or another block, `1. Install`, has its marker escaped, and a raw HTML block is
# cut between its lines; 8: each Chinese or Japanese character counts as a word, so text
# in those scripts, written without spaces, is cut to size too; 9: each character
# cluster of Thai, Lao, Khmer or Burmese counts as a word, for the same reason, and a cut
# falls between clusters, never between a letter and its marks; 10: a section's heading is
# cut to HEADING_REPEAT_WORDS words above its later chunks and to chunk_words above its
# first, with an ellipsis; 11: chunks keep their heading's level, for a term's heading,
# which BM25 counts twice; 12: a heading's closing run of `#`, `## Install ##`, is not
# part of its text; 13: a heading indented by up to three spaces, `  ## Install`, is a
# heading, and reStructuredText's indented text, a note's content, loses its indentation,
# which made it code; 14: a line of reStructuredText or AsciiDoc text that starts with
# three backticks or tildes opens no code block, nor does HTML's, which starts no
# heading with `# ` either, and their nested list items are written nested; 15: such a
# line is stored as written, without the backslash that kept it from opening a block,
# as a line starting with `#` already was; 16: a bare reStructuredText hyperlink
# reference, `Python_` or `Python__`, is stored as its word, `Python`, as a `text`_ one
# already was, a backslash escape, `app\_engine`, as its character, and AsciiDoc
# emphasis, `_word_`, as its words). Unchanged chunks keep their vectors
# (ChunkRecord.vector_key ignores whitespace).
CHUNKING_VERSION = 16
# a document's content hash starts with the chunking version it was chunked by, so that
# `pgfunnel doctor` and ingest can tell documents stored by an older pgfunnel apart (the
# pattern reads the same in Python and in Postgres' regular expressions); a hash without
# the mark is from version 6 or before, which did not record it
CHUNKING_MARK = r"^c([0-9]+):"
UNMARKED_CHUNKING = 6
# how this version's hashes start
CHUNKING_PREFIX = f"c{CHUNKING_VERSION}:"


def chunking_version(content_hash: str) -> int:
    """The chunking version a stored document content hash was made under
    (``UNMARKED_CHUNKING`` for a hash from before the version was recorded)."""
    m = re.match(CHUNKING_MARK, content_hash)
    return int(m.group(1)) if m else UNMARKED_CHUNKING


@dataclass
class DocumentRecord:
    citekey: str
    text: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    tenant: str | None = None
    readers: list[str] = field(default_factory=list)
    language: str | None = None
    valid_from: dt.datetime | None = None
    valid_to: dt.datetime | None = None

    def content_hash(self, chunk_words: int = DEFAULT_CHUNK_WORDS,
                     chunking: int = CHUNKING_VERSION) -> str:
        """What decides whether a stored document must be written again: its fields, the
        chunking version and the chunk size it is cut to. The size counts only when it is
        not the default, so documents chunked at the default keep the hashes they had
        before the size was part of it. ``chunking`` gives the hash an older version
        (from 7, the first to mark it) made of the same fields."""
        fields: list[Any] = [chunking, self.title, self.text, self.metadata,
                             self.tenant, sorted(self.readers), self.language,
                             _iso(self.valid_from), _iso(self.valid_to)]
        if chunk_words != DEFAULT_CHUNK_WORDS:
            fields.append({"chunk_words": chunk_words})
        payload = json.dumps(fields, sort_keys=True, ensure_ascii=False)
        return f"c{chunking}:" + hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class ChunkRecord:
    ordinal: int
    heading: str
    text: str
    token_count: int
    # the headings the chunk's section sits under, outermost first, joined by " > "
    section_path: str = ""
    # the level of the chunk's heading (1 - 6; 0 without one): TERM_HEADING_LEVEL for a
    # term's section
    heading_level: int = 0

    def content_hash(self) -> str:
        # the path is part of what a chunk's vector was embedded from; a chunk with none
        # hashes as it did before paths were kept
        payload = self.text if not self.section_path else f"{self.text}\x00{self.section_path}"
        return hashlib.sha256(payload.encode()).hexdigest()

    def vector_key(self, title: str, embed_input: str) -> str:
        """The key of the stored vector this chunk of a document titled ``title`` can
        reuse under an index version embedding ``embed_input``: ``vector_key``."""
        return vector_key(title, self.text, embed_input, self.section_path)


def vector_key(title: str, text: str, embed_input: str, section_path: str = "") -> str:
    """The key a chunk's vector is stored and reused under: the hash of what the
    embedder reads for it (``embedding_input``) with its whitespace collapsed.

    Whitespace is left out because the models pgfunnel ships with and defaults to
    (BERT-style WordPiece tokenizers, as all-MiniLM-L6-v2 and ms-marco-MiniLM use) read any
    run of spaces, tabs and line breaks as one separator, so the same words give the same
    vector; chunks stored single-spaced before line breaks were kept reuse their vectors.
    ``pgfunnel reindex`` embeds every chunk anew, for a model that reads whitespace."""
    read = embedding_input(title, text, embed_input, section_path)
    return hashlib.sha256(" ".join(read.split()).encode()).hexdigest()


def as_utc(value: dt.datetime) -> dt.datetime:
    """A datetime without a time zone read as UTC, as a JSONL record's ``valid_from`` is
    read (``_parse_time``); one with a zone as it is. Sent naive, Postgres read it in the
    session's ``TimeZone``, so where that was not UTC a document's validity (or a search's
    ``as_of``) given in Python was hours off the same time given in a JSONL file."""
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def _iso(value: dt.datetime | None) -> str | None:
    # naive read as UTC here too: a record's hash is that of the time it is stored as (one
    # stored before, in the session's zone, is written again at its next ingest)
    return None if value is None else as_utc(value).isoformat()


def _parse_time(value: Any, name: str, where: str) -> dt.datetime | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidDocumentError(f"{where}: {name} must be an ISO 8601 string")
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidDocumentError(f"{where}: {name} {value!r} is not ISO 8601") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


#: Postgres refuses a time zone offset of 16 hours or more ("time zone displacement out
#: of range"); Python's and ISO 8601's go to 23:59
MAX_UTC_OFFSET = dt.timedelta(hours=16)

#: the most UTF-8 bytes of a citekey, tenant, language or reader: each is a key of a
#: document index (btree or GIN), whose entries Postgres limits to about 2.7 kB; a longer
#: one failed the whole batch with the index's error, naming neither document nor field
MAX_KEY_BYTES = 1000


def _check_text(value: str, name: str, where: str) -> None:
    if (problem := text_problem(value)) is not None:
        raise InvalidDocumentError(f"{where}: {name} {problem}")


#: a NUL in JSON text as json.dumps writes it (\u0000; a backslash typed before it is
#: escaped in turn), which Postgres' jsonb cannot hold
JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def non_string_key(value: Mapping[str, Any], name: str, verb: str) -> str | None:
    """What is wrong with the first key that is not a string (``{1: 1}``) in ``value``,
    at any depth, or None: json.dumps writes it as the string ``"1"`` without a word (a
    metadata filter then matched documents with the key ``"1"``; a document's metadata
    was stored with it). JSON object keys are strings: the caller says which one is
    meant. ``verb`` says what json.dumps's output is for ("sent", "stored"). (Called once
    json.dumps took ``value``: every key is a str, int, float, bool or None, and the
    nesting is not too deep to walk.)"""
    todo: list[tuple[str, Any]] = [("", value)]
    while todo:
        where, item = todo.pop(0)
        if isinstance(item, Mapping):
            for key, inner in item.items():
                if not isinstance(key, str):
                    as_json = next(iter(json.loads(json.dumps({key: None}))))
                    at = f" in {name}{where}" if where else ""
                    return (f"has the key {key!r} ({type(key).__name__}){at}; JSON object "
                            f"keys are strings, and it would be {verb} as {as_json!r}: "
                            f"pass {as_json!r} if that is the key meant")
                todo.append((f"{where}[{key!r}]", inner))
        elif isinstance(item, (list, tuple)):
            todo.extend((f"{where}[{i}]", inner) for i, inner in enumerate(item))
    return None


def _check_metadata(metadata: Mapping[str, Any], where: str) -> None:
    """Metadata as Postgres' jsonb takes it: JSON types only, finite numbers, no NUL."""
    try:
        as_json = json.dumps(metadata, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        # a date, a set, a NaN: jsonb has no such value
        raise InvalidDocumentError(f"{where}: 'metadata' is not JSON ({exc})") from None
    except RecursionError:
        raise InvalidDocumentError(f"{where}: 'metadata' is nested too deeply") from None
    # json escapes NUL as \u0000; a backslash typed before it is escaped (\\) in turn
    if JSON_NUL.search(as_json):
        raise InvalidDocumentError(f"{where}: 'metadata' contains a NUL character, which "
                                   "Postgres' jsonb cannot hold")
    _check_text(as_json, "'metadata'", where)
    if (problem := non_string_key(metadata, "metadata", "stored")) is not None:
        raise InvalidDocumentError(f"{where}: 'metadata' {problem}")


def check_record(rec: DocumentRecord, where: str) -> None:
    """The checks every record passes before it is written, however it was made (a JSONL
    line, a file, or a DocumentRecord built in Python); errors name the place and field."""
    # what a JSONL line is told (record_from_dict): the type first, then emptiness
    for name in ("citekey", "text"):
        value = getattr(rec, name)
        if value is not None and not isinstance(value, str):
            raise InvalidDocumentError(f"{where}: '{name}' must be a string, got "
                                       f"{type(value).__name__} {value!r:.40}")
        if value is not None:
            # text that is not valid Unicode (a lone surrogate) is said to be that, not empty
            _check_text(value, name, where)
    if not isinstance(rec.citekey, str) or not rec.citekey.strip():
        raise InvalidDocumentError(f"{where}: missing or empty 'citekey'")
    if rec.citekey != rec.citekey.strip():
        # JSONL lines and files give it stripped: ' a1 ' would be another document than
        # 'a1', which no re-ingest of that source would replace
        raise InvalidDocumentError(f"{where}: 'citekey' {rec.citekey!r} has leading or "
                                   "trailing whitespace")
    if not isinstance(rec.text, str) or not any(
            ch.isprintable() and not ch.isspace() for ch in rec.text):
        # whitespace, or only invisible characters (zero-width spaces, controls): nothing
        # a search could match or a reader could see
        raise InvalidDocumentError(f"{where}: missing or empty 'text'")
    if not isinstance(rec.title, str):
        raise InvalidDocumentError(f"{where}: 'title' must be a string")
    if not isinstance(rec.metadata, Mapping):
        raise InvalidDocumentError(f"{where}: 'metadata' must be an object (a mapping)")
    _check_metadata(rec.metadata, where)
    if not isinstance(rec.readers, (list, tuple)) or \
            not all(isinstance(r, str) and r for r in rec.readers):
        raise InvalidDocumentError(f"{where}: 'readers' must be a list of non-empty strings")
    for name in ("tenant", "language"):
        value = getattr(rec, name)
        # "" would be a tenant (or language) of its own that no search asks for
        if value is not None and (not isinstance(value, str) or not value):
            raise InvalidDocumentError(f"{where}: '{name}' must be a non-empty string or null")
    # ' alice ' is a reader no search for alice matches: the document was ingested without
    # a word and then hidden from everyone (as a citekey, it is refused, not stripped:
    # which name was meant is the writer's to say)
    for name, value in (*(("readers", r) for r in rec.readers),
                        ("tenant", rec.tenant or ""), ("language", rec.language or "")):
        if value != value.strip():
            raise InvalidDocumentError(
                f"{where}: {'a reader' if name == 'readers' else repr(name)} {value!r} has "
                "leading or trailing whitespace, which no search's principal (or filter) "
                "would match")
    for name in ("valid_from", "valid_to"):
        if getattr(rec, name) is not None and not isinstance(getattr(rec, name), dt.datetime):
            raise InvalidDocumentError(f"{where}: '{name}' must be a datetime or null")
        offset = None if getattr(rec, name) is None else getattr(rec, name).utcoffset()
        if offset is not None and abs(offset) >= MAX_UTC_OFFSET:
            # ISO 8601 and Python take offsets to +-23:59; Postgres refused the batch with
            # "time zone displacement out of range", naming neither document nor field
            raise InvalidDocumentError(
                f"{where}: '{name}' {getattr(rec, name).isoformat()} has a time zone offset "
                "beyond what Postgres takes (less than 16 hours either way)")
    # one without a time zone is UTC (as_utc), so a naive and an aware one order
    if rec.valid_from and rec.valid_to and as_utc(rec.valid_to) <= as_utc(rec.valid_from):
        raise InvalidDocumentError(f"{where}: valid_to must be after valid_from")
    for name, value in (("citekey", rec.citekey), ("title", rec.title),
                        ("tenant", rec.tenant or ""), ("language", rec.language or ""),
                        *(("readers", r) for r in rec.readers)):
        if name != "citekey":  # the citekey's text was checked first, with the text's
            _check_text(value, name, where)
        if name != "title" and (size := len(value.encode("utf-8"))) > MAX_KEY_BYTES:
            raise InvalidDocumentError(
                f"{where}: {name} is {size:,} bytes long; the limit is {MAX_KEY_BYTES:,} (it "
                f"is a key of a document index): {value[:40]!r}...")


def _or_default(value: Any, default: Any) -> Any:
    return default if value is None else value


def record_from_dict(obj: Any, where: str) -> DocumentRecord:
    """Validate one JSON object into a DocumentRecord; errors name the place and field."""
    if not isinstance(obj, dict):
        raise InvalidDocumentError(f"{where}: expected a JSON object")
    citekey = obj.get("citekey")
    if citekey is None and isinstance(obj.get("_id"), str | int) \
            and not isinstance(obj.get("_id"), bool):
        # a BEIR corpus line ({"_id": ..., "title": ..., "text": ...}) as it comes
        citekey = str(obj["_id"])
    if citekey is not None and not isinstance(citekey, str):
        raise InvalidDocumentError(f"{where}: 'citekey' must be a string, got "
                                   f"{type(citekey).__name__} {citekey!r}")
    if not isinstance(citekey, str) or not citekey.strip():
        raise InvalidDocumentError(f"{where}: missing or empty 'citekey'")
    text = obj.get("text")
    title = obj.get("title")
    if isinstance(text, str) and not text.strip() and isinstance(title, str) and title.strip():
        # a document that is only its title (BEIR corpora have them: a paper without an
        # abstract, "text": "") is searched by its title rather than refused; a line with
        # no "text" at all is still an error (its text may sit under another name)
        text = title
    if text is not None and not isinstance(text, str):
        # as every other field of the wrong type is named (`"text": 5`)
        raise InvalidDocumentError(f"{where}: 'text' must be a string, got "
                                   f"{type(text).__name__} (citekey {citekey!r})")
    if not isinstance(text, str) or not text.strip():
        raise InvalidDocumentError(f"{where}: missing or empty 'text' (citekey {citekey!r})")
    # the field checks are check_record's, below. Only null (or no key) takes a field's
    # default: `"readers": ""` (or false, 0, {}) is a mistake, and taken as "no readers"
    # it made the document public
    rec = DocumentRecord(
        citekey=citekey.strip(),
        text=text,
        title="" if title is None else title,
        metadata=_or_default(obj.get("metadata"), {}),
        tenant=obj.get("tenant"),
        readers=_or_default(obj.get("readers"), []),
        language=obj.get("language"),
        valid_from=_parse_time(obj.get("valid_from"), "valid_from", where),
        valid_to=_parse_time(obj.get("valid_to"), "valid_to", where),
    )
    check_record(rec, where)
    return rec


#: what a Sphinx HTML build generates besides its pages: the sources again (as .txt),
#: highlighted source code, the indexes and the search page. Ingested, every page came
#: twice, and source listings took a sixth of the top-10 slots on Celery's docs
#: (nDCG@10 0.023 lower)
SPHINX_GENERATED = ("_sources", "_modules", "_static", "genindex*.html", "py-modindex.html",
                    "np-modindex.html", "search.html")
#: generated at the build's root only: the "Page Not Found" page of sphinx-notfound-page
#: (common on hosted docs; on Werkzeug's it reached a top 10). A page of that name deeper
#: down is the author's own
SPHINX_GENERATED_AT_ROOT = ("404.html",)


#: what javadoc generates besides its class and package pages: the member index (one page,
#: or a page per letter), the lists of every class and package, the class hierarchy and
#: javadoc's own help page. ``index-all.html`` repeats each member's first sentence under
#: its name (35 of argparse4j's 943 chunks, every method name several times over), and
#: ``help-doc.html`` is the same "How This API Document Is Organized" on every site
JAVADOC_GENERATED = ("index-all.html", "index-files", "allclasses*.html",
                     "allpackages-index.html", "overview-tree.html", "package-tree.html",
                     "overview-frame.html", "package-frame.html", "help-doc.html")


def _is_javadoc_build(folder: Path) -> bool:
    """A javadoc build's root: the list of its packages (``element-list`` since Java 11,
    ``package-list`` before) beside an ``index.html`` that javadoc generated."""
    return (((folder / "element-list").is_file() or (folder / "package-list").is_file())
            and _holds_marker(folder / "index.html", b"Generated by javadoc"))


def _is_module_index(page: Path, build: Path) -> bool:
    """A domain index Sphinx generated at the build's root under a name of the project's
    choosing (Buildbot's bb-cfg.html, bb-step.html, ..., py-apiindex.html): a table of
    links with no text of its own, which ranked for every name it lists."""
    return (page.parent == build and page.suffix.lower() in (".html", ".htm")
            and _holds_marker(page, b"modindextable"))


# the first line of the Hoogle database Haddock writes beside a package's pages
# (split.txt): every declaration and its comment again, as Haskell source
_HOOGLE_MARK = b"-- Hoogle documentation, generated by Haddock"


def _generated_file(path: Path) -> str | None:
    """What a documentation generator other than Sphinx writes beside its pages that is
    not a page, or None: Haddock's Hoogle database (35 of the 79 chunks of Debian's
    ``libghc-split-doc``, each declaration and comment of the pages again), MkDocs' page
    for a missing page (``404.html`` beside its ``sitemap.xml``: "404 - Not found", a
    strong match for any query about something not found, as Sphinx's was on
    Werkzeug's docs)."""
    suffix = path.suffix.lower()
    if suffix == ".txt":
        try:
            with path.open("rb") as handle:
                head = handle.read(len(_HOOGLE_MARK) + 3)
        except OSError:
            return None
        return "Haddock's Hoogle database" if \
            head.removeprefix(b"\xef\xbb\xbf").startswith(_HOOGLE_MARK) else None
    if path.name.lower() == "404.html" and (path.parent / "sitemap.xml").is_file() and \
            _holds_marker(path, b'content="mkdocs'):
        return "MkDocs' page for a missing page"
    return None


def _is_sphinx_build(folder: Path) -> bool:
    """A Sphinx HTML build's root: its inventory and search index lie there, or (as in
    distribution packages that strip both, Debian's BIND manual) its general index page
    is Sphinx's index table, or, where the index is split by letter (``html_split_index``:
    Debian's MIT Kerberos manual, genindex-A.html, ...), Sphinx's list of those letters."""
    if (folder / "objects.inv").is_file() and (folder / "searchindex.js").is_file():
        return True
    return _holds_marker(folder / "genindex.html", b"genindextable", b"genindex-jumpbox")


def _holds_marker(page: Path, *markers: bytes) -> bool:
    """Whether a page's first 256 KiB hold one of ``markers``: Sphinx's index tables open
    early."""
    try:
        with page.open("rb") as handle:
            head = handle.read(256 * 1024)
    except OSError:
        return False
    return any(marker in head for marker in markers)


def _excluded(relative: Path, exclude: Sequence[str]) -> bool:
    """Hidden paths, and paths a pattern matches whole (``*`` crosses folders) or in one
    of their parts (``_sources`` leaves out every folder of that name)."""
    parts = relative.parts
    if any(part.startswith(".") for part in parts):
        return True
    whole = relative.as_posix()
    return any(fnmatch.fnmatchcase(whole, pattern)
               or any(fnmatch.fnmatchcase(part, pattern) for part in parts)
               for pattern in exclude)


def check_encoding(encoding: str | None) -> str | None:
    """``encoding``, the codec files that are not UTF-8 are read in (``--encoding``), if
    Python knows it as a text encoding; None stays None. Anything else is a
    :class:`ConfigError` naming ``encoding``."""
    if encoding is None:
        return None
    if not isinstance(encoding, str):
        raise ConfigError("encoding", f"must be the name of an encoding (cp1252, latin-1, "
                                      f"shift_jis, ...) or None, got {type(encoding).__name__}")
    try:
        b"\n".decode(encoding)
    except LookupError:
        # an unknown name, or a codec that is not a text encoding (base64, rot13)
        raise ConfigError("encoding", f"{encoding!r} is not a text encoding Python knows "
                                      "(cp1252, latin-1, shift_jis, ...)") from None
    except (UnicodeError, ValueError):
        pass  # a text encoding a lone line break is too short for (utf-16)
    return encoding


def check_expanded_limit(max_expanded_bytes: int | None) -> int:
    """The most a gzip-compressed file is read to, decompressed: ``max_expanded_bytes``
    when given (a whole number of at least 1), else MAX_EXPANDED_BYTES. Anything else is a
    :class:`ConfigError` naming ``max_expanded_bytes``."""
    if max_expanded_bytes is None:
        return MAX_EXPANDED_BYTES
    if isinstance(max_expanded_bytes, bool) \
            or not isinstance(max_expanded_bytes, numbers.Integral) \
            or max_expanded_bytes < 1:
        raise ConfigError("max_expanded_bytes", "must be a whole number of bytes of at least "
                                                f"1, or None for the default "
                                                f"({_byte_size(MAX_EXPANDED_BYTES)}), got "
                                                f"{max_expanded_bytes!r}")
    return int(max_expanded_bytes)


def read_path(path: Path, root: Path | None = None,
              exclude: Sequence[str] = (), *,
              encoding: str | None = None,
              max_expanded_bytes: int | None = None) -> Iterator[DocumentRecord]:
    """Documents from one file, or every supported file under a folder.

    A file's citekey is its path relative to ``root`` without the suffix; without a
    ``root``, relative to the folder given, and a file given alone is its stem. Give
    the corpus folder as ``root`` to re-ingest one file of it under the same citekey.
    In a folder, hidden files and folders (.git, editor backups) are skipped, and so is
    every path that one of the ``exclude`` glob patterns matches, relative to the folder.
    A file in a folder that holds no text (empty, or an HTML page with no content, such
    as a redirect) is skipped with an :class:`EmptyFileWarning`; given by itself, it is
    an error.

    A file is read as UTF-8 (a UTF-8 or UTF-16 byte order mark says which; an HTML page
    may declare its charset); one that is not valid UTF-8 is an error, or, given an
    ``encoding`` (any text codec Python knows: ``"cp1252"``, ``"latin-1"``), read in it.
    A gzip-compressed file is read up to ``max_expanded_bytes`` decompressed (default
    MAX_EXPANDED_BYTES, 1 GiB), and is an error past it.
    """
    check_encoding(encoding)
    limit = check_expanded_limit(max_expanded_bytes)
    for _, rec in _read_path_records(path, root, exclude, encoding, limit):
        yield rec


def _left_out_of_build(files: list[Path], left: list[Path], build: str, what: str
                       ) -> list[Path]:
    """``files`` without the generated ones a documentation build holds (``left``), with a
    note that counts the pages among them (``build``: which build, ``what``: what they
    are, and how to index one anyway)."""
    pages = sum(1 for p in left if format_suffix(p) in SUPPORTED_SUFFIXES)
    if pages:
        warn_at_caller(OtherFilesWarning(f"{build}; left out its {pages:,} generated pages "
                                         + what), OtherFilesWarning)
    left_out = set(left)
    return [p for p in files if p not in left_out]


def _read_path_records(path: Path, root: Path | None, exclude: Sequence[str],
                       encoding: str | None = None, max_expanded: int | None = None
                       ) -> Iterator[tuple[Path, DocumentRecord]]:
    """read_path's records, each with the file it came from."""
    if path.is_dir():
        base = root if root is not None else path
        dangling: list[Path] = []
        special: list[Path] = []
        files = sorted(p for p in _files_under(path, dangling, special)
                       if not _excluded(p.relative_to(path), exclude))
        # said, as other files left out are: a link whose target is gone was dropped
        # without a word, and a folder of them looked like an empty one
        for unread, noun, why in (
                (dangling, "broken symbolic link", "the target does not exist, or the link "
                 "loops"),
                (special, "special file", "a pipe, socket or device, or a link to one")):
            names = sorted(p.relative_to(path).as_posix() for p in unread
                           if not _excluded(p.relative_to(path), exclude))
            if names:
                named = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
                warn_at_caller(OtherFilesWarning(
                    f"{path}: left out {len(names):,} {noun}{'s' if len(names) != 1 else ''} "
                    f"({why}): {named}"), OtherFilesWarning)
        # the folder itself, or any folder under it, may be a Sphinx build's root
        builds = sorted({p.parent for p in files
                         if p.name in ("objects.inv", "genindex.html")
                         and _is_sphinx_build(p.parent)})
        for build in builds:
            left = [p for p in files if p.is_relative_to(build)
                    and (_excluded(p.relative_to(build), SPHINX_GENERATED)
                         or p.relative_to(build).as_posix() in SPHINX_GENERATED_AT_ROOT
                         or _is_module_index(p, build))]
            files = _left_out_of_build(
                files, left, f"{build}: a Sphinx build", "(_sources: each page's source again, "
                "_modules: highlighted source code, genindex, py-modindex and other domain "
                "indexes, search, a 404 page); ingest such a folder by itself to index it")
        javadoc = sorted({p.parent for p in files
                          if p.name in ("element-list", "package-list")
                          and _is_javadoc_build(p.parent)})
        for build in javadoc:
            left = [p for p in files if p.is_relative_to(build)
                    and _excluded(p.relative_to(build), JAVADOC_GENERATED)]
            files = _left_out_of_build(
                files, left, f"{build}: a javadoc build", "(index-all and index-files: every "
                "member's first sentence again, the class and package lists, the class "
                "hierarchy, javadoc's help page); ingest such a file by itself to index it")
        generated = {p: kind for p in files if (kind := _generated_file(p)) is not None}
        if generated:
            named = ", ".join(f"{p.relative_to(path).as_posix()} ({kind})"
                              for p, kind in list(generated.items())[:5])
            warn_at_caller(OtherFilesWarning(
                f"{path}: left out {len(generated):,} file{'s' if len(generated) != 1 else ''} "
                f"a documentation generator writes beside its pages: {named}"
                f"{', ...' if len(generated) > 5 else ''}; give such a file by itself to "
                "index it"), OtherFilesWarning)
            files = [p for p in files if p not in generated]
        readable = [(p, _citekey(p, base)) for p in files
                    if format_suffix(p) in SUPPORTED_SUFFIXES]
        _refuse_shared_citekeys(readable, path)
        for child, citekey in readable:
            for rec in _read_file(child, citekey, in_folder=True, encoding=encoding,
                                  max_expanded=max_expanded):
                yield child, rec
        # said, not silently skipped: a docs folder in a format pgfunnel does not read
        # (.tex, say) would otherwise look like an empty one
        others = Counter(p.suffix.lower() or "(no suffix)" for p in files
                         if format_suffix(p) not in SUPPORTED_SUFFIXES)
        if others:
            kinds = ", ".join(f"{suffix} {n:,}" for suffix, n in others.most_common(6))
            more = ", ..." if len(others) > 6 else ""
            total = sum(others.values())
            warn_at_caller(OtherFilesWarning(
                f"{path}: left out {total:,} file{'s' if total != 1 else ''} of other types "
                f"({kinds}{more}); pgfunnel reads {', '.join(SUPPORTED_SUFFIXES)}, "
                f"and those compressed with gzip ({SUPPORTED_SUFFIXES[0]}"
                f"{COMPRESSED_SUFFIX}, ...)"),
                OtherFilesWarning)
        return
    citekey = _citekey(path, root) if root is not None else _uncompressed(path).stem
    for rec in _read_file(path, citekey, in_folder=False, encoding=encoding,
                          max_expanded=max_expanded):
        yield path, rec


def _files_under(folder: Path, dangling: list[Path] | None = None,
                 special: list[Path] | None = None) -> list[Path]:
    """The files under ``folder``, at the paths they have there. A symbolic link to a
    folder outside it is read as a folder at the link's place (Debian's documentation
    packages link theirs: borgbackup-doc/html -> ../borgbackup/html; not followed, the
    package held "nothing to ingest", and a linked folder in a tree was left out without a
    word); a link to a folder inside it is not (that folder is read at its own place), nor
    is one back to a folder above (a loop), nor one to a folder read already, or inside
    one, or inside the target of another link beside it.
    Hidden folders are not walked: every path in them is left out. Symbolic links whose
    target does not exist (or that loop) are not files: they are added to ``dangling`` when
    given, and pipes, sockets and devices to ``special``."""
    root = folder.resolve()
    walked = {root}
    files: list[Path] = []
    def unreadable(exc: OSError) -> None:
        # a subfolder that cannot be listed was left out without a word (os.walk's
        # default), though a file that cannot be read stops the ingest
        raise InvalidDocumentError(f"{exc.filename}: cannot list this folder "
                                   f"({exc.strerror or exc}); fix its permissions, or "
                                   "ingest the folders beside it") from None

    for top, dirs, names in os.walk(folder, followlinks=True, onerror=unreadable):
        here = Path(top)
        real = here.resolve()
        kept = []
        links = {name: (here / name).resolve() for name in dirs
                 if not name.startswith(".") and (here / name).is_symlink()}
        for name in sorted(dirs):
            if name.startswith("."):
                continue
            target = links.get(name)
            if target is not None:
                # not a folder read already or inside one (Debian's python3-pytest links
                # html and rst, which is html/_sources), nor one another link here holds
                if any(target.is_relative_to(done) for done in walked) \
                        or real.is_relative_to(target) or not target.is_dir() \
                        or any(target != other and target.is_relative_to(other)
                               for other in links.values()):
                    continue
                walked.add(target)
            kept.append(name)
        dirs[:] = kept
        for name in names:
            path = here / name
            if path.is_file():
                files.append(path)
            elif not path.exists():  # a link whose target is gone, or that loops
                if dangling is not None and path.is_symlink():
                    dangling.append(path)
            elif special is not None and not path.is_dir():
                # pipes, sockets and devices (or links to them): never read, and said
                special.append(path)
    return files


def _quoted(argument: str) -> str:
    """``argument`` in single quotes for a shell, as the --exclude a message suggests: a
    pattern's ``*`` must reach pgfunnel unexpanded, and a file name holding ``'`` gave a
    command the shell could not read (``--exclude 'it's.jsonl'``)."""
    return "'" + argument.replace("'", "'\"'\"'") + "'"


def _refuse_shared_citekeys(files: Sequence[tuple[Path, str]], folder: Path) -> None:
    """Two files (with their citekeys) that differ only in their suffix (a generator's
    ``fs.md`` beside its ``fs.html``) would be one citekey: said before anything is read,
    with the way out, for every such pair at once (Node.js's docs ship each of their 60
    API pages twice, and one pair per run was 60 runs)."""
    first: dict[str, Path] = {}
    clashes: list[tuple[Path, Path, str]] = []
    for path, key in files:
        if format_suffix(path) == ".jsonl":
            continue  # its lines carry their own citekeys
        if key in first:
            clashes.append((first[key], path, key))
        else:
            first[key] = path
    if not clashes:
        return
    earlier, later, key = clashes[0]
    said = f"{earlier} and {later} would both be citekey {key!r}"
    if len(clashes) == 1:
        # the one file, as --exclude matches it (relative to the folder): a pattern
        # such as '*.rst' would leave out every other .rst file too
        raise InvalidDocumentError(f"{said}: leave one out, e.g. --exclude "
                                   f"{_quoted(later.relative_to(folder).as_posix())}")
    suffixes = Counter(p.suffix for _, p, _ in clashes)
    suffix = suffixes.most_common(1)[0][0]
    twins = [p.relative_to(folder) for _, p, _ in clashes if p.suffix == suffix]
    parents = {p.parent.as_posix() for p in twins}
    pattern = (f"{parents.pop()}/*{suffix}" if len(parents) == 1 and "." not in parents
               else f"*{suffix}")
    caught = sum(1 for p, _ in files
                 if fnmatch.fnmatchcase(p.relative_to(folder).as_posix(), pattern))
    others = caught - len(twins)
    also = (f"; it also leaves out {others:,} {'file' if others == 1 else 'files'} "
            "without a twin" if others > 0 else "")
    raise InvalidDocumentError(
        f"{said}, and {len(clashes) - 1:,} more "
        f"{'pair of files shares' if len(clashes) == 2 else 'pairs of files share'} a citekey "
        f"({len(twins):,} of them a {suffix} beside another format): leave one kind out, "
        f"e.g. --exclude {_quoted(pattern)}{also}")


def format_suffix(path: Path) -> str:
    """The suffix that says how ``path`` is read, in lower case: its own, or for a file of
    a supported format compressed with gzip (``README.md.gz``) the one under ``.gz``."""
    suffix = path.suffix.lower()
    if suffix == COMPRESSED_SUFFIX:
        inner = Path(path.stem).suffix.lower()
        if inner in SUPPORTED_SUFFIXES:
            return inner
    return suffix


def _uncompressed(path: Path) -> Path:
    """``path`` as named before gzip compressed it (``README.md.gz`` -> ``README.md``), or
    ``path`` itself: what its citekey and a title taken from its name are made of."""
    if path.suffix.lower() == COMPRESSED_SUFFIX and format_suffix(path) != COMPRESSED_SUFFIX:
        return path.with_suffix("")
    return path


def path_without_suffix(path: Path) -> str:
    """``path`` as a citekey is made of it: without its format's suffix (both of
    ``README.md.gz``), in forward slashes."""
    return _uncompressed(path).with_suffix("").as_posix()


def _citekey(path: Path, root: Path) -> str:
    """``path`` relative to ``root``, without its suffix. Read as written first: a file
    in the folder that is a symbolic link to one elsewhere is the document at its own
    place (resolved, it was "not inside the root folder" and stopped the ingest, and a
    link to a file beside it took that file's citekey); then with links resolved, for a
    root given through a link of its own."""
    if format_suffix(path) == ".jsonl":
        return path.stem  # its lines carry their own citekeys
    if root.exists() and not root.is_dir():
        # the file itself given as its root made a citekey of '.': a ValueError traceback
        raise InvalidDocumentError(f"{root}: not a folder (--root): give the folder whose "
                                   "paths are the citekeys, such as the one holding "
                                   f"{path.name}")
    for inside, folder in ((Path(os.path.abspath(path)), Path(os.path.abspath(root))),
                           (path.resolve(), root.resolve())):
        if inside.is_relative_to(folder):
            return path_without_suffix(inside.relative_to(folder))
    raise InvalidDocumentError(f"{path}: not inside the root folder {root} (--root): a "
                               "file's citekey is its path from there")


# the encoding an HTML page declares in its first bytes: <meta charset>, the http-equiv
# form, or an XML declaration (older manuals: ISO-8859-1, windows-1252)
_HTML_CHARSET = re.compile(
    rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)"""
    rb"""|<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._:-]+)""", re.IGNORECASE)


def _c1_as_is(exc: UnicodeError) -> tuple[str, int]:
    """WHATWG's windows-1252 maps the five bytes Python's cp1252 leaves undefined (0x81,
    0x8d, 0x8f, 0x90, 0x9d) to the C1 controls of the same number."""
    if not isinstance(exc, UnicodeDecodeError):  # pragma: no cover - registered for decoding
        raise exc
    return "".join(chr(b) for b in exc.object[exc.start:exc.end]), exc.end


_WHATWG_C1 = "pgfunnel-whatwg-c1"
codecs.register_error(_WHATWG_C1, _c1_as_is)


def _declared_html_encoding(m: re.Match[bytes]) -> str | None:
    """The Python codec of the charset an HTML file declares (``m``, a match of
    _HTML_CHARSET), or None: a name Python does not know is ignored, and so is one of
    its codecs that is not a text encoding (`<meta charset="base64">` ended the ingest
    in a LookupError traceback)."""
    name = (m.group(1) or m.group(2)).decode("ascii")
    try:
        info = codecs.lookup(name)
    except LookupError:
        return None
    if not getattr(info, "_is_text_encoding", True):
        return None
    codec = info.name
    # browsers read a page labelled latin-1 or ascii as windows-1252 (WHATWG Encoding),
    # whose 0x80 - 0x9f are the curly quotes and dashes such pages hold
    return "cp1252" if codec in ("iso8859-1", "ascii") else codec


# a byte order mark, the codec that reads the file it opens (and drops the mark), the
# name it is said by, and the --encoding names that agree with it. UTF-32-LE's mark
# opens with UTF-16-LE's: looked for first (read as UTF-16, such a file was refused for
# the NUL bytes that were half of each character)
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32", "UTF-32 (little-endian)", ("utf-32", "utf-32-le")),
         (codecs.BOM_UTF32_BE, "utf-32", "UTF-32 (big-endian)", ("utf-32", "utf-32-be")),
         (codecs.BOM_UTF8, "utf-8-sig", "UTF-8", ("utf-8", "utf-8-sig")),
         (codecs.BOM_UTF16_LE, "utf-16", "UTF-16 (little-endian)", ("utf-16", "utf-16-le")),
         (codecs.BOM_UTF16_BE, "utf-16", "UTF-16 (big-endian)", ("utf-16", "utf-16-be")))

# what a charset declared in a page's <meta> or XML declaration cannot mean when the page
# is not UTF-8: the UTF-8 it failed to be (utf-8-sig is UTF-8 too), or a UTF-16 or UTF-32,
# whose declaration could not have been read as ASCII as it was (browsers read such a
# label as UTF-8, WHATWG's prescan)
_SAYS_NOTHING = re.compile(r"utf-(?:8|16|32)(?:-sig|-le|-be)?$")


# what 8-bit text read two bytes at a time turns into: CJK ideographs and syllables,
# Yi, private use; unassigned code points are counted apart (unicodedata)
_WIDE_MOJIBAKE = ((0x2E80, 0x9FFF), (0xA000, 0xA4CF), (0xAC00, 0xD7AF), (0xE000, 0xFAFF))


def _misread_as_wide(data: bytes, text: str, encoding: str) -> bool:
    """Whether ``text``, ``data`` decoded in a UTF-16 or UTF-32 ``encoding`` given by the
    user, is another encoding's bytes read two (four) at a time: decoding such bytes as
    UTF-16 rarely fails, and stored CJK-looking mojibake without a word. Such text holds
    no NUL byte (any ASCII character in UTF-16, a space or a line break, has one) and
    reads as mostly CJK or unassigned code points."""
    import unicodedata

    if not codecs.lookup(encoding).name.startswith(("utf-16", "utf-32")) or b"\x00" in data:
        return False
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return False
    odd = sum(1 for c in chars if any(lo <= ord(c) <= hi for lo, hi in _WIDE_MOJIBAKE)
              or unicodedata.category(c) == "Cn")
    return odd * 2 > len(chars)


def _decoded(path: Path, data: bytes, not_utf8: UnicodeDecodeError, encoding: str | None,
             html: bool) -> str:
    """The text of a file that is not valid UTF-8 (``not_utf8`` says where): by its byte
    order mark, which ``encoding`` (--encoding) must agree with when given; else by the
    charset an HTML page declares, when the bytes fit it; else in ``encoding``; else an
    HTML page that declares nothing as browsers read it (windows-1252, with a warning).
    Anything else is an InvalidDocumentError naming the file and what it was read as."""
    given = codecs.lookup(encoding).name if encoding is not None else None
    for mark, codec, said, agreeing in _BOMS:
        if not data.startswith(mark):
            continue
        if codec == "utf-8-sig":
            # (what follows the mark is not UTF-8: the read as UTF-8 failed)
            other = (f"; a file whose mark says UTF-8 is not read in the {encoding} given "
                     "(--encoding)" if given is not None and given not in agreeing else "")
            raise InvalidDocumentError(
                f"{path}: starts with a UTF-8 byte order mark but is not UTF-8 (byte "
                f"{not_utf8.start}: {not_utf8.reason}){other}; take the mark off if the "
                "rest is in another encoding, convert it to UTF-8, or leave it out with "
                "--exclude") from not_utf8
        if given is not None and given not in agreeing:
            # the user named the encoding and the file says another: neither is taken on
            # trust (read in the one given, the mark came out as two or three letters of
            # mojibake; by the mark, the encoding given was passed over without a word)
            raise InvalidDocumentError(
                f"{path}: starts with a {said} byte order mark, but --encoding {encoding} "
                f"was given; ingest it by itself with --encoding {agreeing[0]} (or without "
                "--encoding), convert it, or leave it out with --exclude")
        try:
            return data.decode(codec)
        except UnicodeDecodeError as exc:
            # a byte order mark says what it is whatever a page declares (WHATWG): no
            # other reading is tried for a file that says so and is not
            base = said.split(" ")[0]
            raise InvalidDocumentError(f"{path}: starts with a {base} byte order mark but "
                                       f"is not {base} (byte {exc.start}: {exc.reason}); "
                                       "convert it to UTF-8, or leave it out with "
                                       "--exclude") from exc
    declared = _HTML_CHARSET.search(data[:4096]) if html else None
    page_encoding = _declared_html_encoding(declared) if declared else None
    impossible = None
    if page_encoding is not None and _SAYS_NOTHING.match(page_encoding):
        # bytes that are valid UTF-8 were read as UTF-8 whatever the label says (a
        # mislabelled page is the commoner mistake); a UTF-16 label on an ASCII page
        # read as UTF-16 stored the page as CJK mojibake without a word
        impossible = None if page_encoding.startswith("utf-8") else page_encoding
        page_encoding = None
    if page_encoding is not None:
        try:
            return data.decode(page_encoding)
        except UnicodeDecodeError as exc:
            if encoding is None:
                raise InvalidDocumentError(
                    f"{path}: not valid UTF-8, nor the {page_encoding} it declares (byte "
                    f"{exc.start}: {exc.reason}); give the encoding it is in (--encoding "
                    "NAME), convert it to UTF-8, or leave it out with --exclude") from exc
            # a declaration the bytes do not fit is wrong: the encoding given decides
    if encoding is not None:
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError as exc:
            raise InvalidDocumentError(
                f"{path}: not valid UTF-8, nor the {encoding} given (--encoding) (byte "
                f"{exc.start}: {exc.reason}); give the encoding it is in, or leave it "
                "out with --exclude") from exc
        if _misread_as_wide(data, text, encoding):
            raise InvalidDocumentError(
                f"{path}: not valid UTF-8, nor the {encoding} given (--encoding): read as "
                f"{encoding} it comes out as CJK or unassigned characters (mojibake), and "
                f"it has no NUL byte, which {encoding} text holds beside every ASCII "
                "character (a space, a line break); give the encoding it is in "
                "(--encoding cp1252, say), or leave it out with --exclude")
        return text
    if html and declared is None:
        # what a browser shows for a page that declares no charset (WHATWG's fallback
        # in Western locales); refused, it stopped the ingest of a whole manual
        # (libxslt's) at one page with a name in Latin-1
        warn_at_caller(GuessedEncodingWarning(
            f"{path}: declares no charset and is not UTF-8 (byte {not_utf8.start}); read as "
            "windows-1252, as browsers read it (--encoding names another)"),
            GuessedEncodingWarning)
        return data.decode("cp1252", errors=_WHATWG_C1)
    label = (f", and cannot be the {impossible} it declares (its <meta> reads as ASCII, "
             "which UTF-16 and UTF-32 do not)" if impossible else "")
    if b"\x00" in data:
        # text in an 8-bit encoding holds no NUL byte: the cp1252 advice sent the owner of
        # an image or a program saved as .txt to an --encoding that read it as mojibake
        # or failed again on the NUL
        raise InvalidDocumentError(
            f"{path}: not valid UTF-8 (byte {not_utf8.start}: {not_utf8.reason}){label}, "
            "and it holds NUL bytes, as binary files (an image, an archive, a program) do "
            "and no 8-bit text does; leave it out with --exclude, or if it is text in "
            "UTF-16 or UTF-32 without a byte order mark, give that (--encoding utf-16-le, "
            "say)") from not_utf8
    raise InvalidDocumentError(
        f"{path}: not valid UTF-8 (byte {not_utf8.start}: {not_utf8.reason}){label}; give the "
        "encoding it is in (--encoding cp1252, say: windows-1252, the Latin-1 of older "
        "docs), convert it to UTF-8, or leave it out with --exclude") from not_utf8


def _gunzipped(path: Path, data: bytes, limit: int | None = None) -> bytes:
    """``data``, the gzip-compressed file ``path``'s bytes, decompressed: every member of
    it, as gzip -d reads them, up to ``limit`` (default MAX_EXPANDED_BYTES); an
    InvalidDocumentError naming the file past that, or where it is not gzip."""
    if limit is None:
        limit = MAX_EXPANDED_BYTES
    out = io.BytesIO()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            # a piece at a time: one read(limit + 1) had Python reserve the whole 1 GiB
            # buffer for every file, however small, a MemoryError under ulimit -v. One
            # byte past the limit says it is past, and no more is held
            while out.tell() <= limit and \
                    (piece := stream.read(min(_GUNZIP_PIECE, limit + 1 - out.tell()))):
                out.write(piece)
    except (OSError, EOFError, zlib.error) as exc:
        raise InvalidDocumentError(
            f"{path}: cannot be read as gzip-compressed ({exc}); fix or decompress it, "
            "or leave it out with --exclude") from None
    if out.tell() > limit:
        raise InvalidDocumentError(
            f"{path}: expands past {_byte_size(limit)} decompressed, the most pgfunnel reads "
            "of a gzip-compressed file; give a larger limit (--max-expanded-mib N, in MiB; "
            "max_expanded_bytes in Python: the file is held in memory as it expands), "
            "decompress it (gunzip -k) to read it as it is, or leave it out with --exclude")
    return out.getvalue()


#: how much of a compressed file's expanded text _gunzipped reads at a time
_GUNZIP_PIECE = 1 << 20


def _byte_size(n: int) -> str:
    """``n`` bytes as a person writes it: 1 GiB, 64 KiB, 1,500 bytes."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift:,} {unit}"
    return f"{n:,} bytes"


def _read_file(path: Path, citekey: str, in_folder: bool,
               encoding: str | None = None,
               max_expanded: int | None = None) -> Iterator[DocumentRecord]:
    """The documents of one file; a file that is not UTF-8, declares no charset and has
    no byte order mark is read in ``encoding`` when one is given (``--encoding``)."""
    if not path.exists():
        raise InvalidDocumentError(f"{path}: no such file or directory")
    suffix = format_suffix(path)
    if suffix not in SUPPORTED_SUFFIXES:
        # "unsupported file type ''" (use .md, ...)" left the owner of a README, NEWS or
        # README.Debian (plain text, as /usr/share/doc holds hundreds) to guess what to do
        what = (f"a file of type {path.suffix!r}, which pgfunnel does not read" if path.suffix
                else "no suffix, and the suffix is what says a file's format")
        # a compressed one keeps .gz last, where gzip's own suffix is read
        name, gz = ((path.stem, COMPRESSED_SUFFIX) if path.suffix.lower() == COMPRESSED_SUFFIX
                    else (path.name, ""))
        raise InvalidDocumentError(
            f"{path}: {what}; it reads {', '.join(SUPPORTED_SUFFIXES)}, and each of them "
            f"compressed with gzip ({SUPPORTED_SUFFIXES[0]}{COMPRESSED_SUFFIX}, ...): copy or "
            f"link it under a name that ends in its format's suffix ({name}.txt{gz} for "
            f"plain text, {name}.md{gz} for Markdown)")
    if suffix != ".jsonl" and (size := len(citekey.encode("utf-8"))) > MAX_KEY_BYTES:
        # said before the file is read, with what to do: "citekey is 1,445 bytes long; the
        # limit is 1,000" named the file's citekey, which its owner never typed
        raise InvalidDocumentError(
            f"{path}: its citekey, the file's path from the folder given, is {size:,} bytes "
            f"long; the limit is {MAX_KEY_BYTES:,} (it is a key of a document index): give "
            "the file or a folder on its path a shorter name, or leave it out with --exclude")
    try:
        data = read_file_bytes(path)
    except OSError as exc:
        raise InvalidDocumentError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if path.suffix.lower() == COMPRESSED_SUFFIX:
        data = _gunzipped(path, data, max_expanded)
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raw = _decoded(path, data, exc, encoding, html=suffix in (".html", ".htm"))
    else:
        if encoding is not None and "\x00" in raw and not data.startswith(codecs.BOM_UTF8):
            # UTF-16 or UTF-32 written without a byte order mark: its ASCII letters are
            # valid UTF-8 with a NUL beside each, which no UTF-8 text holds. Read in the
            # encoding given (--encoding utf-16-le); were they kept, the NULs refused it
            with suppress(UnicodeDecodeError):
                raw = data.decode(encoding)
    raw = raw.removeprefix("\ufeff")
    if suffix != ".jsonl":
        # line ends as Path.read_text and browsers read them: a markdown file saved on
        # Windows kept its front matter as text (`---\r\n` opened none), a heading of its
        # own, and its first heading for title
        raw = raw.replace("\r\n", "\n").replace("\r", "\n")
    if suffix == ".jsonl":
        first_line: dict[str, int] = {}
        # lines end at \n (and \r\n) only: str.splitlines() also splits at U+2028, U+2029
        # and U+0085, which JSON strings may hold unescaped (ensure_ascii=False), and cut
        # such a record in two
        for lineno, line in enumerate(raw.replace("\r\n", "\n").split("\n"), start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = loads_unique(line)
            except JSON_ERRORS as exc:
                raise InvalidDocumentError(f"{where}: not valid JSON ({json_problem(exc)})") \
                    from None
            if not first_line and isinstance(obj, dict) and \
                    not {"citekey", "_id", "text"} & obj.keys():
                # a file of other data in a docs folder (events, a dataset's labels) was
                # "missing or empty 'citekey'", as if one line lacked a field. Its first
                # line only: past a document, the file is documents, and one line that
                # lacks both fields is told so (to --exclude the file would lose them all)
                keys = ", ".join(repr(k) for k in list(obj)[:5]) + (", ..." if len(obj) > 5
                                                                   else "")
                raise InvalidDocumentError(
                    f"{where}: not a document: the line has no 'citekey' and no 'text' "
                    f"(its keys: {keys or 'none'}); a .jsonl file is read as one document "
                    "per line, a JSON object with 'citekey' and 'text' (docs/cli.md, "
                    f"ingest); leave out a file of other data with --exclude "
                    f"{_quoted(path.name)}")
            record = record_from_dict(obj, where)
            # the ingest refuses a citekey given twice too, but can no longer say where
            if (first := first_line.setdefault(record.citekey, lineno)) != lineno:
                raise InvalidDocumentError(f"{where}: citekey {record.citekey!r} is already "
                                           f"on line {first}")
            yield record
        return
    named = _uncompressed(path)
    if suffix == ".txt" and (inner := Path(named.stem).suffix.lower()) in _SOURCE_COPY_SUFFIXES:
        # Sphinx's copy of a page's source (_sources/guide.rst.txt, intro.md.txt) is read
        # in the format its name gives, and named without it: as plain text its reST
        # targets, roles and directives (and MyST's fences) were text, and a page without
        # an underlined title was named "glossary.rst"
        suffix, named = inner, Path(named.stem)
    if suffix in (".html", ".htm"):
        page = html_page(raw)
        if in_folder and page.is_link_list():
            # its names stay findable in the pages it lists; given by itself, it is read
            shares = f"{page.link_share:.0%} of its words"
            if not page.is_mostly_links():
                # an index whose entries are a link and a few words (Doxygen's members)
                shares += (f"; {page.entries:,} entries of a link and a few words, "
                           f"{page.entry_share:.0%} of its words")
            warn_at_caller(EmptyFileWarning(
                f"{path}: a page of links ({page.links:,} links, {shares}), an index or "
                "table of contents, skipped"), EmptyFileWarning)
            return
        if in_folder and page.is_source_listing():
            warn_at_caller(EmptyFileWarning(
                f"{path}: a source listing (code and nothing else, {page.code_share:.0%} of "
                "its words), skipped"), EmptyFileWarning)
            return
        title, text = page.title or _title_from_file_name(named), page.text
    elif suffix in (".rst", ".rest") or (suffix == ".txt" and looks_like_rst(raw)):
        title, text = rst_to_text(raw)
        title = title or _title_from_file_name(named)
    elif suffix in (".adoc", ".asciidoc"):
        title, text = asciidoc_to_text(raw)
        title = title or _title_from_file_name(named)
    elif suffix == ".txt":
        first_heading, text = _underlined_headings(raw)
        title = first_heading or _title_from_file_name(named)
    else:
        if suffix == ".ipynb":
            raw = _notebook_to_markdown(raw, path)
        fields, text = _front_matter(raw)
        if suffix == ".mdx":
            text = _mdx_to_markdown(text)
        elif _MYST_HINT.search(text):
            text = _myst_to_markdown(text)
        text = _unrendered_removed(text)
        text = _setext_to_atx(text)
        title = (fields.get("title") or _first_h1(text)
                 or _title_from_file_name(named))
    if not text.strip():
        if not in_folder:
            # a file of front matter or comments only is not empty: it shows nothing
            what = ("the page has no main text" if suffix in (".html", ".htm")
                    else "it is empty" if not raw.strip()
                    else "it holds only what its page does not show: front matter, "
                         "comments, metadata or other markup")
            raise InvalidDocumentError(f"{path}: no text to ingest ({what})")
        warn_at_caller(EmptyFileWarning(f"{path}: no text, skipped"), EmptyFileWarning)
        return
    yield record_from_dict({"citekey": citekey, "title": title, "text": text}, str(path))


# the formats whose files Sphinx copies into _sources with ".txt" added
_SOURCE_COPY_SUFFIXES = (".md", ".markdown", ".mdx", ".rst", ".rest", ".adoc", ".asciidoc",
                         ".ipynb")


def _notebook_to_markdown(raw: str, path: Path) -> str:
    """A Jupyter notebook as markdown: its markdown cells as written, its code cells as
    fenced blocks in the notebook's language, its outputs left out (they are what running
    the code printed, often long, and not the page's prose)."""
    try:
        notebook = json.loads(raw)
    except JSON_ERRORS as exc:
        raise InvalidDocumentError(f"{path}: not a valid notebook ({json_problem(exc)})") \
            from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise InvalidDocumentError(f"{path}: not a valid notebook (no list of cells)")
    metadata = notebook.get("metadata") or {}
    language = ""
    if isinstance(metadata, dict):
        for key in ("language_info", "kernelspec"):
            info = metadata.get(key)
            if isinstance(info, dict) and isinstance(info.get("language") or info.get("name"),
                                                     str):
                language = str(info.get("language") or info.get("name"))
                break
    parts: list[str] = []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict):
            continue
        source = cell.get("source", "")
        # nbformat: a string, or a list of strings (None joined as "None" or raised a
        # TypeError from str.join)
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            text = "".join(source)
        elif isinstance(source, str):
            text = source
        else:
            what = ("a list holding other things than strings" if isinstance(source, list)
                    else type(source).__name__)
            raise InvalidDocumentError(
                f"{path}: not a valid notebook (cell {number}: its source is {what}, not a "
                "string or a list of strings)")
        if not text.strip():
            continue
        if cell.get("cell_type") == "markdown":
            parts.append(text)
        elif cell.get("cell_type") == "code":
            parts.append("\n".join(_fenced(language, text.rstrip().split("\n"))))
    return "\n\n".join(parts)


def _fenced(info: str, lines: list[str]) -> list[str]:
    """Code lines as a fenced block, its fence longer than any run of backticks in them
    (so a fence inside the code does not end the block)."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{info}", *lines, fence]


def _title_from_file_name(path: Path) -> str:
    """The title of a page that names none: its file name, words apart."""
    return path.stem.replace("_", " ").replace("-", " ")


class EmptyFileWarning(UserWarning):
    """A file found in a folder held no text of its own (empty, a redirect, or an HTML
    page of links: an index or table of contents) and was left out."""


class GuessedEncodingWarning(UserWarning):
    """An HTML page declared no charset and was not UTF-8: it was read as windows-1252."""


class OtherFilesWarning(UserWarning):
    """A folder held files of types pgfunnel does not read; they were left out."""


def read_paths(paths: Iterable[Path], exclude: Sequence[str] = (),
               root: Path | None = None, *, origins: dict[str, Path] | None = None,
               encoding: str | None = None,
               max_expanded_bytes: int | None = None) -> Iterator[DocumentRecord]:
    """The documents of several files and folders (read_path each). A path given twice is
    read once, and so is a file given beside a folder that holds it, when both give it
    one citekey; two sources of one citekey (a JSONL line and a file, two folders read
    without a common root) are an error naming both, before the second is ingested.
    ``origins``, given empty, is filled with each citekey's file. ``encoding``: the
    encoding files that are not UTF-8 are read in (read_path), checked before any is, as
    ``max_expanded_bytes`` is (read_path)."""
    check_encoding(encoding)
    limit = check_expanded_limit(max_expanded_bytes)
    read: set[Path] = set()
    origin: dict[str, Path] = {} if origins is None else origins
    for p in paths:
        try:
            resolved = Path(p).resolve()
        except (RuntimeError, OSError) as exc:
            # Python 3.11 and 3.12 raise RuntimeError for a symbolic link loop
            raise InvalidDocumentError(f"{p}: cannot read it ({exc})") from None
        if resolved in read:
            continue
        read.add(resolved)
        for source, rec in _read_path_records(Path(p), root, exclude, encoding, limit):
            first = origin.setdefault(rec.citekey, source)
            if first is not source and _same_file(first, source):
                # `ingest docs docs/setup.md`: the file's document, read again (it came
                # twice to the batches, which stopped at "citekey 'setup' appears twice
                # in this ingest" after writing those before it)
                continue
            if first != source:
                # --root makes a file's citekey its path, but a JSONL line names its own
                root_helps = ".jsonl" not in (format_suffix(first), format_suffix(source))
                raise InvalidDocumentError(
                    f"{first} and {source} both give citekey {rec.citekey!r}: ingest them "
                    "into separate collections, "
                    + ("give --root so that files' citekeys are their paths, "
                       if root_helps else "change the citekey of the JSONL line, ")
                    + "or leave one out")
            yield rec


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (as written, or through links)."""
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


# a closing run of `#` (`## Install ##`) is not part of the heading (CommonMark)
_HEADING = re.compile(rf"^{INDENT}({HEADING_MARK})\s+(.*?\S)(?:\s+#+)?\s*$")
# a backtick fence's info string holds no backtick: "```foo``` at the start of a line" is
# inline code (CommonMark). Their parts are markdown_lines', whose escape matches them
_FENCE = re.compile(rf"^{INDENT}({FENCE_OPEN})")
# a line that is nothing but a fence run: a block's closing line
_FENCE_ONLY = re.compile(r"^[ \t]*(?:`{3,}|~{3,})[ \t]*$")
# a YAML block at the top of a markdown file (Jekyll, Hugo, Docusaurus, MkDocs)
_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.S)
_TOML_FRONT_MATTER = re.compile(r"\A\ufeff?\+\+\+[ \t]*\n(.*?\n)?\+\+\+[ \t]*(?:\n|\Z)", re.S)


def _front_matter(raw: str) -> tuple[dict[str, str], str]:
    """The top-level ``key: value`` fields of a markdown file's front matter (YAML between
    ``---`` lines, or Hugo's TOML between ``+++`` lines), and the text after it (the block
    itself is not content)."""
    if m := _TOML_FRONT_MATTER.match(raw):
        try:
            table = tomllib.loads(m.group(1) or "")
        except tomllib.TOMLDecodeError:
            table = {}
        return ({key.lower(): value.strip() for key, value in table.items()
                 if isinstance(value, str)}, raw[m.end():])
    m = _FRONT_MATTER.match(raw)
    if not m:
        return {}, raw
    fields: dict[str, str] = {}
    key = ""
    for line in (m.group(1) or "").splitlines():
        if key and (line[:1].isspace() or not line.strip()):
            # a value that goes on over indented lines: a block scalar (`title: >`) or a
            # plain one written over two lines; it was `>`, or its first line only
            fields[key] = " ".join(f"{fields[key]} {line}".split())
            continue
        key = ""
        name, sep, value = line.partition(":")
        if sep and name.strip() and not line[:1].isspace() and not line.startswith("-"):
            value = value.strip()
            if re.fullmatch(r"[>|][+-]?[0-9]?", value):
                key, value = name.strip().lower(), ""
            elif value[:1] == "'" and value[-1:] == "'" and len(value) > 1:
                value = value[1:-1].replace("''", "'")
            elif value[:1] == '"' and value[-1:] == '"' and len(value) > 1:
                value = value[1:-1].replace('\\"', '"')
            elif value and value[:1] not in "[{&*!":
                key = name.strip().lower()
            fields[name.strip().lower()] = value.strip()
    return fields, raw[m.end():]


def _lines_outside_code(text: str) -> Iterator[tuple[str, bool]]:
    """Each line, and whether it is markdown (not inside a fenced code block)."""
    if "```" not in text and "~~~" not in text:
        # no fence can open (FENCE_OPEN is three backticks or tildes): every line is
        # markdown, without a pattern matched per line
        for line in text.splitlines():
            yield line, True
        return
    fence = ""
    for line in text.splitlines():
        m = _FENCE.match(line)
        if not fence:
            if m:
                fence = m.group(1)
            yield line, not fence
        else:
            if m and _closes_fence(line, fence):
                fence = ""
            yield line, False


def _closes_fence(line: str, fence: str) -> bool:
    """Whether ``line`` closes a block opened by ``fence`` (a run of backticks, tildes or
    colons): the same character, at least as many, nothing else."""
    closing = line.strip()
    return closing[:1] == fence[0] and set(closing) == {fence[0]} and len(closing) >= len(fence)


_SETEXT = re.compile(r"^ {0,3}(={2,}|-{2,})[ \t]*$")
# lines that cannot be (the end of) a setext heading's paragraph
_NOT_PARAGRAPH = re.compile(r"^(?: {0,3}(?:[-*+>|]|\d+[.)])(?:\s|$)| {4,}| {0,3}#|\s*$)")


def _setext_to_atx(text: str) -> str:
    """Markdown's underlined headings (``Title`` over ``=====`` or ``-----``, as many
    READMEs write them) as ``#`` headings, which is what the chunker reads: the
    paragraph directly above the underline is the heading, as in CommonMark."""
    out: list[str] = []
    paragraph_start: int | None = None  # index in out of the open paragraph's first line
    for line, is_markdown in _lines_outside_code(text):
        m = _SETEXT.match(line) if is_markdown else None
        if m and paragraph_start is not None:
            heading = " ".join(part.strip() for part in out[paragraph_start:])
            del out[paragraph_start:]
            out.append(("# " if m.group(1)[0] == "=" else "## ") + heading)
            paragraph_start = None
            continue
        if not is_markdown or _NOT_PARAGRAPH.match(line):
            paragraph_start = None
        elif paragraph_start is None:
            paragraph_start = len(out)
        out.append(line)
    return "\n".join(out)


# a plain-text heading's underline (or overline): one punctuation character, three or more
_TEXT_ADORNMENT = re.compile(r"^([=\-~^*#+])\1{2,}[ \t]*$")


def _underlined_headings(text: str) -> tuple[str | None, str]:
    """Plain text's underlined headings (a line alone over ``=====``, ``-----``, ``~~~~``...,
    optionally also overlined, as release notes, specs and READMEs write them) as ``#``
    headings, so that they start sections and no rule of punctuation is indexed. Levels
    follow the order in which the underline styles first appear, as in reStructuredText.
    Returns the first heading when the text opens with it (the document's title) and the
    text. A rule under a paragraph of several lines is left alone: in plain text that is a
    separator more often than a heading."""
    lines = text.removeprefix("\ufeff").splitlines()
    out: list[str] = []
    styles: list[str] = []
    title: str | None = None
    seen_text = False
    i = 0
    while i < len(lines):
        line = lines[i]
        under = _TEXT_ADORNMENT.match(lines[i + 1]) if i + 1 < len(lines) else None
        stripped = line.strip()
        alone = not out or not out[-1].strip() or (
            _TEXT_ADORNMENT.match(out[-1]) is not None and (len(out) < 2 or not out[-2].strip()))
        if under and stripped and not line[:1].isspace() and alone \
                and not _TEXT_ADORNMENT.match(line) \
                and len(lines[i + 1].strip()) >= min(len(stripped), 3 + len(stripped) // 2):
            style = under.group(1)
            if out and _TEXT_ADORNMENT.match(out[-1]):
                style = "over" + style
                out.pop()
            if style not in styles:
                styles.append(style)
            out.append("#" * min(styles.index(style) + 1, 6) + " " + stripped)
            if not seen_text:
                title = stripped
            seen_text = True
            i += 2
            continue
        if stripped and not _TEXT_ADORNMENT.match(line):
            seen_text = True
        out.append(line)
        i += 1
    return title, "\n".join(out)


# a reference link's definition ("[docs]: https://... "title""), which the page never
# shows (a footnote's "[^1]: text" is shown)
_LINK_DEFINITION = re.compile(
    r"""^ {0,3}\[(?!\^)[^\]]+\]:\s*\S+(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*$""")


_CODE_SPAN = re.compile(r"(`+).+?\1")
# attribute lists (MkDocs attr_list, kramdown, Hugo, Docusaurus): a heading's trailing
# "{#install}" or "{: .note }" names its anchor or style, and a line of one alone
# styles the block before it; neither is shown
_HEADING_ATTRIBUTES = re.compile(r"\s*\{\s*[#.:][^{}]*\}\s*$")
_ATTRIBUTE_LINE = re.compile(r"^ {0,3}\{:[^{}]*\}\s*$")
# MkDocs Material (Python-Markdown extensions): an admonition's opening line
# ('!!! note "Title"', '??? tip' when collapsible) and a content tab's ('=== "Linux"')
# show their title only; a snippet line ('--8<-- "file.md"') pulls in another file
_BLOCK_TITLE = re.compile(r'^\s*(?:(?:!!!|\?\?\?\+?)\s+[\w-]+(?:\s+[\w-]+)*\s*(?:"(.*)")?'
                          r'|===\+?\s+"(.*)")\s*$')
_SNIPPET = re.compile(r"""^\s*-{2,}8<-{2,}\s*(?:"[^"]*"|'[^']*')?\s*$""")


def _comment_start(line: str) -> int:
    """Where an HTML comment opens in a line of markdown, -1 if nowhere: ``<!--`` inside
    a code span (`` `<!--` ``, in a page about HTML) is text."""
    spans = [m.span() for m in _CODE_SPAN.finditer(line)]
    start = line.find("<!--")
    while start >= 0 and any(a <= start < b for a, b in spans):
        start = line.find("<!--", start + 1)
    return start


def _unrendered_removed(text: str) -> str:
    """Markdown without what its rendered page does not show: HTML comments (TODOs,
    linter switches), reference link definitions, whose URLs would be indexed as words
    and take up the embedder's window, attribute lists (``## Install {#install}``) and
    snippet lines; an admonition's or a tab's opening line becomes its title.
    As CommonMark reads them, a comment that opens a line runs until ``-->``, over
    lines; one inside a line is a comment only when it closes on that line, else its
    ``<!--`` is text."""
    out: list[str] = []
    in_comment = False
    for line, is_markdown in _lines_outside_code(text):
        if in_comment:
            end = line.find("-->")
            if end < 0:
                out.append("")
                continue
            in_comment = False
            line = line[end + 3:]
        elif not is_markdown:
            out.append(line)
            continue
        kept = ""
        rest = line
        while (start := _comment_start(rest)) >= 0:
            end = rest.find("-->", start + 4)
            if end < 0:
                if not (kept + rest[:start]).strip():
                    in_comment = True  # a comment block: the lines up to its end go
                    rest = rest[:start]
                break
            kept += rest[:start]
            rest = rest[end + 3:]
        kept += rest
        if kept.strip() and (_LINK_DEFINITION.match(kept) or _ATTRIBUTE_LINE.match(kept)
                             or _SNIPPET.match(kept)):
            kept = ""
        elif _HEADING.match(kept):
            kept = _HEADING_ATTRIBUTES.sub("", kept)
        elif m := _BLOCK_TITLE.match(kept):
            kept = m.group(1) or m.group(2) or ""
        out.append(kept if kept.strip() or not line.strip() else "")
    return "\n".join(out)


# MyST, the markdown of Sphinx projects (Jupyter Book, Black): directives in fences named
# in braces ("```{note}", ":::{warning}"), roles ("{func}`os.path.join`") and targets
# ("(install)="). Read as the rendered page reads: a directive that shows no text
# (toctree, include, image...) goes, a code directive stays code, an admonition keeps its
# argument (a title) and content without its fences and options, and a role keeps its
# text. A fence named in braces that MyST does not know as text ("```{r}" in R Markdown,
# "```{python}" in Quarto) stays a code block.
_MYST_HINT = re.compile(r"^ {0,3}(?:`{3,}|:{3,})\{[A-Za-z]|\{[A-Za-z][\w:+.-]*\}`", re.M)
_MYST_FENCE = re.compile(r"^( {0,3})(`{3,}|:{3,})\{([A-Za-z][\w:+.-]*)\}\s*(.*?)\s*$")
_MYST_ROLE = re.compile(r"\{[A-Za-z][\w:+.-]*\}`([^`]+)`")
# a target's label may hold spaces: `(SSL Certificate Verification)=` (pip's docs)
_MYST_TARGET = re.compile(r"^ {0,3}\((?=[^()\n]*\S)[^()\n]+\)=\s*$")
_MYST_OPTION = re.compile(r"^\s*:[\w-]+:(?:\s|$)")
_MYST_TEXT_DIRECTIVES = frozenset({
    "note", "warning", "tip", "important", "hint", "caution", "attention", "danger",
    "error", "seealso", "admonition", "rubric", "topic", "sidebar", "glossary", "epigraph",
    "pull-quote", "highlights", "dropdown", "tab-set", "tab-item", "card", "grid",
    "grid-item", "grid-item-card", "only", "centered", "hlist", "list-table", "table",
    "div", "container", "margin", "deprecated", "versionadded", "versionchanged",
    "versionremoved", "todo", "compound", "line-block", "parsed-literal",
})  # fmt: skip


#: directives nested deeper than this are kept as their lines (a note in a tab in a
#: dropdown is 3): each level is a call, and 1,000 of them stopped ingest with a
#: RecursionError (10,000 took 900 MB first)
_MYST_MAX_DEPTH = 50


def _myst_to_markdown(text: str, depth: int = 0) -> str:
    """Markdown of a MyST file, see above; a directive's content is read the same way,
    so a note inside a tab is still text."""
    if depth > _MYST_MAX_DEPTH:
        return text
    lines = text.splitlines()
    out: list[str] = []
    fence = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if fence:
            if _closes_fence(line, fence):
                fence = ""
            out.append(line)
            continue
        m = _MYST_FENCE.match(line)
        if m is None:
            plain = _FENCE.match(line)
            if plain:
                fence = plain.group(1)
                out.append(line)
            elif not _MYST_TARGET.match(line):
                out.append(_MYST_ROLE.sub(_role_text, line))
            continue
        marker, name, argument = m.group(2), m.group(3), m.group(4)
        body: list[str] = []
        while i < len(lines):
            i += 1
            if _closes_fence(lines[i - 1], marker):
                break
            body.append(lines[i - 1])
        # its options: a YAML block between --- lines, or :name: value lines
        if body and body[0].strip() == "---":
            end = next((j for j in range(1, len(body)) if body[j].strip() == "---"), 0)
            body = body[end + 1:]
        while body and _MYST_OPTION.match(body[0]):
            body.pop(0)
        short = name.rsplit(":", 1)[-1]
        if short in _SILENT or name in _SILENT:
            continue
        if short in _CODE or short not in _MYST_TEXT_DIRECTIVES:
            out += _fenced(argument if short in _CODE else name, body)
            continue
        heading = f"{_VERSION_WORDS[short]} {argument}." if short in _VERSION_WORDS \
            else argument
        out += ["", heading] if heading else [""]
        out += [_myst_to_markdown("\n".join(body), depth + 1), ""]
    return "\n".join(out)


# MDX (Docusaurus, Nextra, Starlight): import/export statements, which run to the next
# blank line; lines made only of JSX tags (<Tabs>, <TabItem value="x">, </Tabs>, <Foo />);
# JSX comments; Docusaurus admonitions (:::tip, :::note Title, :::note[Title], :::)
_MDX_ESM = re.compile(r"^(?:import|export)\s")
_MDX_TAG_LINE = re.compile(r"^\s*(?:</?[A-Za-z][\w.:-]*(?:\s[^<>]*)?/?>\s*)+$")
_MDX_COMMENT = re.compile(r"\{/\*.*?\*/\}")
# a component's opening tag whose attributes go on over the next lines (`<Tabs` over
# `  defaultValue="apple"`, `  values={[...]}>`)
_MDX_TAG_OPENS = re.compile(r"^\s*<[A-Za-z][\w.:-]*(?:\s[^<>]*)?$")
# the most lines one tag or comment is looked for over
_MDX_SPAN_LINES = 100
_ADMONITION = re.compile(r"^ {0,3}:{3,}\s*(?:[A-Za-z][\w-]*)?\s*(?:\[(.*)\]|(.*?))\s*$")


def _mdx_to_markdown(text: str) -> str:
    """The markdown of an MDX file: its imports, exports and component markup out of the
    text; code blocks, and the text inside components and admonitions, kept (a tab's or
    a callout's content is the page's content)."""
    out: list[str] = []
    in_statement = False
    lines = list(_lines_outside_code(text))
    skip_to = 0
    for i, (line, is_markdown) in enumerate(lines):
        if i < skip_to:
            continue
        if not is_markdown:
            out.append(line)
            continue
        if in_statement:
            in_statement = bool(line.strip())
            if not in_statement:
                out.append("")
            continue
        if _MDX_ESM.match(line):
            in_statement = True
            continue
        line = _MDX_COMMENT.sub("", line)
        if end := _mdx_span_end(lines, i, line):
            # a comment or a component's tag over several lines: its attributes and
            # remarks were indexed as the page's text
            out.append("")
            skip_to = end
            continue
        if m := _ADMONITION.match(line):
            # the admonition's title, if any, is a line of its text
            out.append((m.group(1) or m.group(2) or "").strip())
        elif _MDX_TAG_LINE.match(line):
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def _mdx_span_end(lines: list[tuple[str, bool]], start: int, line: str) -> int:
    """Where a JSX comment (``{/*`` ... ``*/}``) or a component's tag (``<Image`` ...
    ``/>``) that opens on line ``start`` (read as ``line``) and ends on a later one ends:
    the index after its last line, or 0 when it is no such thing (a blank line, code or
    text after the closing ``>`` before its end: left as written)."""
    comment = line.strip().startswith("{/*")
    if not comment and not _MDX_TAG_OPENS.match(line):
        return 0
    said = [line]
    for j in range(start + 1, min(len(lines), start + _MDX_SPAN_LINES)):
        following, is_markdown = lines[j]
        if not is_markdown or not following.strip():
            return 0
        said.append(following)
        if comment and following.rstrip().endswith("*/}"):
            return j + 1
        if not comment and following.rstrip().endswith(">"):
            return j + 1 if _MDX_TAG_LINE.match(" ".join(s.strip() for s in said)) else 0
    return 0


def _first_h1(text: str) -> str:
    for line, is_markdown in _lines_outside_code(text):
        m = _HEADING.match(line) if is_markdown else None
        if m and len(m.group(1)) == 1:
            return m.group(2).strip()
    return ""


_ESCAPED_HASH = re.compile(rf"^({INDENT})\\#")
# a line of text that the reST, AsciiDoc and HTML readers escaped lest it open a code
# fence (markdown_lines.text_line): `\```python`, `\~~~`
_ESCAPED_FENCE = re.compile(rf"^({INDENT})\\(?={FENCE_OPEN})")


def _escaped_fences_shown(text: str) -> str:
    """A chunk's text with each escaped fence line outside its code blocks (``\\```x``)
    shown as written (````` ```x `````), as a ``\\#`` line is (``_sections``): the
    escape kept the chunker from opening a code block there, and is no part of the
    document. Lines inside a fenced block are code, kept as they are."""
    if "\\`" not in text and "\\~" not in text:
        return text
    lines = text.split("\n")
    fence = ""
    for i, line in enumerate(lines):
        m = _FENCE.match(line)
        if fence:
            if m and _closes_fence(line, fence):
                fence = ""
        elif m:
            fence = m.group(1)
        else:
            lines[i] = _ESCAPED_FENCE.sub(r"\1", line, count=1)
    return "\n".join(lines)


def _sections(text: str) -> list[tuple[str, str, tuple[str, ...], int]]:
    """(heading, body, enclosing headings, heading level) of each section; markdown
    headings start sections (a ``#`` line inside a fenced code block is code, not a
    heading). The enclosing headings are those of higher level above the section,
    outermost first; the text above the first heading is a section of level 0."""
    sections: list[tuple[str, list[str], tuple[str, ...], int]] = [("", [], (), 0)]
    open_headings: list[tuple[int, str]] = []
    for line, is_markdown in _lines_outside_code(text):
        # the substring tests skip a regular expression call on most lines (neither
        # pattern can match without its `#`; those calls were about a sixth of chunking's
        # time on the pydocs corpus)
        m = _HEADING.match(line) if is_markdown and "#" in line else None
        if m:
            level = len(m.group(1))
            while open_headings and open_headings[-1][0] >= level:
                open_headings.pop()
            heading = m.group(2).strip()
            sections.append((heading, [], tuple(h for _, h in open_headings), level))
            open_headings.append((level, heading))
        else:
            # `\#` opening a line is a `#` that is not a heading (CommonMark; the reST and
            # AsciiDoc readers write a text line's `#` so): the chunk holds the `#` as read
            sections[-1][1].append(_ESCAPED_HASH.sub(r"\1#", line, count=1)
                                   if is_markdown and "\\#" in line else line)
    # blank lines at either end go, the first line's indentation stays (a section may
    # open with an indented code block)
    return [(h, _trim_blank_lines(b), path, level) for h, b, path, level in sections
            if h or "\n".join(b).strip()]


def _trim_blank_lines(lines: list[str]) -> str:
    """Lines joined, less blank lines at either end; the first line keeps its indentation
    (a section may open with an indented code block)."""
    first = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    last = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()), -1)
    return "\n".join(lines[first:last + 1]).rstrip()


_BLOCK_SPLIT = re.compile(r"\n[ \t]*\n")


def _prose_blocks(blocks: list[str], short: bool = False) -> list[str | None]:
    """``_prose_block(block, short)`` of each block of a document, None too for every
    block inside a fenced code block: a paragraph of code after a blank line is code, and
    dropping it (with its closing fence) left the rest of the page as code."""
    keys: list[str | None] = []
    fence = ""
    for block in blocks:
        in_code = bool(fence) or any(_FENCE.match(line) for line in block.split("\n"))
        keys.append(None if in_code else _prose_block(block, short))
        fence = _fence_after(block, fence)[1]
    return keys


def _prose_block(block: str, short: bool = False) -> str | None:
    """A paragraph as the repeated-block check compares it (whitespace collapsed), or None
    for what it leaves alone: headings, code and short lines (or, ``short``, the short
    lines only: under six words)."""
    stripped = block.strip()
    if (not stripped or stripped.startswith(("#", "```", "~~~"))
            or block.startswith(("    ", "\t"))):
        return None
    words = stripped.split()
    return " ".join(words) if (len(words) < 6) == short else None


def _boilerplate_labels(blocks: list[str], dropped: list[bool],
                        short_keys: list[str | None], repeated_short: set[str]) -> list[bool]:
    """Which short lines go with the boilerplate around them: a line under six words found
    on as many documents as the boilerplate (``See also``, ``Help with configuring:``, a
    one-link item), when the next block that is neither blank nor such a line is dropped
    boilerplate, or when nothing but such lines follows it to the document's end and
    dropped boilerplate comes before it. Kept, they were all that was left of a site's help
    box at the foot of every page. A short line that introduces the page's own text
    (``Example:`` before its code) is followed by that text, and stays."""
    label = [key is not None and key in repeated_short for key in short_keys]
    solid = [bool(block.strip()) and not is_label for block, is_label in zip(blocks, label,
                                                                               strict=True)]
    # the nearest solid block after and before each block, in one pass each (a page of
    # a thousand short lines in a row stays linear)
    after: list[int | None] = [None] * len(blocks)
    nearest: int | None = None
    for i in range(len(blocks) - 1, -1, -1):
        after[i] = nearest
        if solid[i]:
            nearest = i
    goes = [False] * len(blocks)
    nearest = None
    for i in range(len(blocks)):
        if label[i]:
            following = after[i]
            goes[i] = (dropped[following] if following is not None
                       else nearest is not None and dropped[nearest])
        if solid[i]:
            nearest = i
    return goes


def drop_repeated_blocks(records: Sequence[DocumentRecord], *, min_documents: int = 10,
                         share: float = 0.5) -> tuple[list[DocumentRecord], list[str]]:
    """Leave out paragraphs that recur word for word on at least ``share`` of the documents
    (and on ``min_documents`` or more): a site's banner, cookie notice or "you are reading
    an old version" box that the page's main content holds. Kept, it is the first chunk's
    text on every page, and a search for its words returned the same paragraph once per
    page (Celery's docs: one banner on 347 of 348 pages). Headings and code are never
    dropped, nor blocks under six words except the boilerplate's own short lines
    (``_boilerplate_labels``), and a document that holds nothing but repeated
    paragraphs (and headings) keeps them. Returns the
    records (changed ones replaced) and one note per paragraph left out."""
    if len(records) < min_documents:
        return list(records), []
    # counted by hash, so a large corpus is not held a second time as a set of its
    # paragraphs; the few that recur are then named by text
    seen: Counter[int] = Counter()
    for rec in records:
        seen.update({hash(b) for b in _prose_blocks(_BLOCK_SPLIT.split(rec.text)) if b})
    bar = max(min_documents, share * len(records))
    hot = {h for h, n in seen.items() if n >= bar}
    if not hot:
        return list(records), []
    counts: Counter[str] = Counter()
    short_counts: Counter[str] = Counter()
    for rec in records:
        blocks = _BLOCK_SPLIT.split(rec.text)
        counts.update({b for b in _prose_blocks(blocks) if b and hash(b) in hot})
        short_counts.update({b for b in _prose_blocks(blocks, short=True) if b})
    repeated = {b for b, n in counts.items() if n >= bar}
    if not repeated:
        return list(records), []
    repeated_short = {b for b, n in short_counts.items() if n >= bar}
    labels: Counter[str] = Counter()
    out: list[DocumentRecord] = []
    for rec in records:
        blocks = _BLOCK_SPLIT.split(rec.text)
        dropped = [key is not None and key in repeated for key in _prose_blocks(blocks)]
        if repeated_short and any(dropped):
            short_keys = _prose_blocks(blocks, short=True)
            for i, goes in enumerate(_boilerplate_labels(blocks, dropped, short_keys,
                                                         repeated_short)):
                if goes:
                    dropped[i] = True
                    labels[str(short_keys[i])] += 1
        kept = [b for b, gone in zip(blocks, dropped, strict=True) if not gone]
        # a document made of nothing but repeated paragraphs (and headings) keeps them:
        # no document is emptied of its text
        if len(kept) == len(blocks) or all(not b.strip() or b.strip().startswith("#")
                                           for b in kept):
            out.append(rec)
            continue
        out.append(replace(rec, text="\n\n".join(b.strip("\n") for b in kept if b.strip())))
    notes = [f"left out a paragraph found on {counts[b]:,} of {len(records):,} documents "
             f"(site boilerplate): {b[:70]!r}{'...' if len(b) > 70 else ''}"
             for b in sorted(repeated, key=lambda b: -counts[b])]
    if labels:
        named = ", ".join(repr(b) for b, _ in labels.most_common(5))
        notes.append(f"left out {len(labels):,} short line{'s' if len(labels) != 1 else ''} "
                     "found on as many documents, beside that boilerplate: " + named
                     + (", ..." if len(labels) > 5 else ""))
    return out, notes


# what parts a site's name from a page's own in a title: "json-c: json_object.h File
# Reference" (Doxygen), "Namespace (argparse4j 0.4.4 API)" (javadoc), "Intro | Site"
_TITLE_PREFIX = re.compile(r"^(.+?:\s+)(?=\S)")
_TITLE_SUFFIX = re.compile(r"(?<=\S)(\s+(?:[|—–·]\s+.+|-\s+.+|\([^()]+\)))$")


def drop_common_title_parts(records: Sequence[DocumentRecord], *, min_documents: int = 10,
                            share: float = 0.9) -> tuple[list[DocumentRecord], list[str]]:
    """Take the site's name off the titles of documents ingested together: a part before
    ``: ``, or after a separator (`` | ``, `` — ``, `` - ``) or in parentheses at the end,
    that ``min_documents`` titles or more share, and ``share`` or more of the titles that
    have a part of that kind there. A title heads each chunk of its document, for the
    embedder and, counted twice, for BM25. Doxygen names every page "json-c: ..." (32 of
    libjson-c-doc's 33 titles), javadoc each class "Namespace (argparse4j 0.4.4-SNAPSHOT
    API)" (51 titles; its other pages are titled by their heading), where no such part
    begins or ends more than 2 of the Python documentation's 498 titles, nor more than
    1 of rsyslog's 316. A part of the pages' own stays when others are as common: YARD's
    "Class: " begins 30 of Mocha's 45 titles with a part before ``: ``, "Module: " 11.
    Returns the records (changed ones replaced) and a note per part taken off."""
    parts: list[tuple[str, Counter[str], str]] = []
    for pattern, where in ((_TITLE_PREFIX, "begin"), (_TITLE_SUFFIX, "end")):
        found = Counter(m.group(1) for r in records if (m := pattern.search(r.title)))
        for part, n in found.most_common(1):
            if n >= max(min_documents, share * found.total()):
                parts.append((part, found, where))
    if not parts:
        return list(records), []
    out: list[DocumentRecord] = []
    for rec in records:
        title = rec.title
        for part, _, where in parts:
            if where == "begin" and title.startswith(part) and len(title) > len(part):
                title = title[len(part):]
            elif where == "end" and title.endswith(part) and len(title) > len(part):
                title = title[:-len(part)]
        out.append(replace(rec, title=title) if title != rec.title else rec)
    notes = [f"took {part!r} off the {found[part]:,} titles of {len(records):,} documents "
             f"that {where} with it (the site's name)" for part, found, where in parts]
    return out, notes


def drop_copied_pages(records: Sequence[DocumentRecord]
                      ) -> tuple[list[DocumentRecord], list[str]]:
    """Leave out a document whose text is another's in the same folder, word for word: a
    generator's second copy of a page (YARD writes the README's page twice, as
    ``file.README.html`` and as ``index.html``: 32 of Mocha's 446 chunks were a copy, and
    each search for its words returned both). The first in the order given stays. Copies
    in different folders stay: a page unchanged between two versions of a manual
    ingested together belongs to each. So do copies that differ in who may read them or
    where they apply (tenant, readers, language, validity, metadata): one policy text
    written once per tenant in a JSONL file is each tenant's document, and leaving out
    the second hid it from that tenant. Returns the records kept and one note per
    document left out."""
    first: dict[tuple[str, int], list[DocumentRecord]] = {}
    kept: list[DocumentRecord] = []
    notes: list[str] = []
    for rec in records:
        key = (rec.citekey.rpartition("/")[0], hash(rec.text))
        same = next((other for other in first.get(key, ()) if other.text == rec.text
                     and _scope(other) == _scope(rec)), None)
        if same is None:
            first.setdefault(key, []).append(rec)
            kept.append(rec)
        else:
            notes.append(f"left out {rec.citekey!r}: the same text as {same.citekey!r} in "
                         "its folder, a copy of that page")
    return kept, notes


def _scope(rec: DocumentRecord) -> tuple[Any, ...]:
    """Who may read a document and where it applies: copies that differ here are not."""
    return (rec.tenant, sorted(rec.readers), rec.language,
            *(None if t is None else as_utc(t) for t in (rec.valid_from, rec.valid_to)),
            json.dumps(rec.metadata, sort_keys=True, default=str))


# a paragraph on more documents than this is a site's refrain, not a page copied into a
# gathering one; left out of the count, it keeps the check linear in the corpus
_GATHERED_COPIES = 16


def drop_gathering_pages(records: Sequence[DocumentRecord], *, min_documents: int = 5,
                         share: float = 0.9, min_paragraphs: int = 20
                         ) -> tuple[list[DocumentRecord], list[str]]:
    """Leave out documents that gather others whole: a manual's single-page or print
    edition beside its pages (Sphinx's singlehtml, Buildbot's ``full.html``). Its chunks
    repeat every page's and, with the manual's own title above each, took a top-3 slot in
    584 of 600 queries on Buildbot's docs.

    A document of ``min_paragraphs`` paragraphs or more is one when ``share`` of them are
    found word for word in documents under half its size, and at least ``min_documents``
    of those have ``share`` of their own paragraphs in it. So what it held stays findable
    in the pages it gathered, and two copies of one manual (a versioned tree ingested
    twice) do not count as gathering each other. Returns the records kept and one note
    per document left out."""
    # by hash, so a large corpus is not held a second time as sets of its paragraphs
    keys = [{hash(k) for k in _prose_blocks(_BLOCK_SPLIT.split(rec.text)) if k}
            for rec in records]
    owners: dict[int, list[int]] = {}
    for i, own in enumerate(keys):
        for key in own:
            owners.setdefault(key, []).append(i)
    smaller_share: dict[int, float] = {}
    for i, own in enumerate(keys):
        if len(own) < min_paragraphs:
            continue
        in_smaller = sum(1 for key in own if len(owners[key]) <= _GATHERED_COPIES
                         and any(2 * len(keys[j]) <= len(own) for j in owners[key]))
        if in_smaller >= share * len(own):
            smaller_share[i] = in_smaller / len(own)
    if not smaller_share:
        return list(records), []
    gathered: Counter[int] = Counter()
    for own in keys:
        if len(own) < 3:
            continue
        held: Counter[int] = Counter()
        for key in own:
            if len(owners[key]) <= _GATHERED_COPIES:
                held.update(i for i in owners[key]
                            if i in smaller_share and 2 * len(own) <= len(keys[i]))
        gathered.update(i for i, n in held.items() if n >= share * len(own))
    dropped = sorted(i for i, n in gathered.items() if n >= min_documents)
    notes = [f"left out {records[i].citekey!r}: it gathers {gathered[i]:,} other documents "
             f"whole ({smaller_share[i]:.0%} of its paragraphs are theirs), as a "
             "single-page or print edition does, and ranked above each of them; ingest it "
             "by itself to index it" for i in dropped]
    left_out = set(dropped)
    return [rec for i, rec in enumerate(records) if i not in left_out], notes


_PATH_PART_WORDS = 12


def embedding_input(title: str, chunk_text: str, embed_input: str = DEFAULT_EMBED_INPUT,
                    section_path: str = "") -> str:
    """The text the embedder reads for one chunk of a document titled ``title``.

    ``"title"`` (the default) puts the title on a line above the chunk, unless the
    chunk's first line is the title already: a chunk from the middle of a page otherwise
    does not say what the page is about, and a question names the page's subject more
    often than the section's wording (pydocs, dense leg alone: nDCG@10 0.493 -> 0.531 on
    dev). ``"section"`` writes that line as a path: the title, then the headings the
    chunk's section sits under (``section_path``, outermost first, those equal to the
    title left out; each cut at its first ``(``, so a signature reads as its name, and to
    12 words), so that an option documented under
    several commands reads differently under each. With no such heading it is the same
    text as ``"title"``. It is not the default: it raised the dense leg on two
    documentation sets and lowered it on two (docs/tuning.md). ``"text"`` is the chunk
    alone. What BM25 indexes is ``lexical_input``'s. Compute vectors you pass to
    ``Ingester.ingest(vectors=...)`` from this text too, with the version's input, or
    searches and stored vectors will not have been embedded alike.
    """
    if embed_input not in EMBED_INPUTS:
        raise ValueError(f"embed_input must be one of {', '.join(EMBED_INPUTS)}, "
                         f"not {embed_input!r}")
    title = " ".join(title.split())
    if embed_input == EMBED_TEXT_ALONE:
        return chunk_text
    above = []
    if embed_input == EMBED_WITH_SECTION_PATH:
        for part in section_path.split(" > "):
            # an API object's signature names it before its parameters, which would
            # outweigh a short chunk below it
            part = " ".join(part.split("(", 1)[0].split()[:_PATH_PART_WORDS])
            if part and part != title and part not in above:
                above.append(part)
    if above:
        return " > ".join([title, *above] if title else above) + "\n" + chunk_text
    if not title:
        return chunk_text
    first_line = chunk_text.split("\n", 1)[0].lstrip("#")
    if " ".join(first_line.split()) == title:
        return chunk_text
    return f"{title}\n{chunk_text}"


def lexical_input(title: str, chunk_text: str, lexical_input: str = DEFAULT_LEXICAL_INPUT,
                  heading_level: int = 0) -> str:
    """The text BM25 indexes for one chunk of a document titled ``title``, whose heading
    (its first line) is of ``heading_level`` (``ChunkRecord.heading_level``).

    ``"title2_term2"`` (the default) is ``"title2"`` with a term's heading
    (``TERM_HEADING_LEVEL``: an API object's signature, a glossary term) on one more line
    above the chunk: its words count twice too, so the chunk that describes
    ``register_profile`` under its signature outranks the release notes' entries that
    mention it in passing, which BM25's length normalisation favoured (short) and the
    dense model places near it; prose headings stay once, or a release note's section
    headed ``tornado.auth`` would outrank the module's page (docs/tuning.md). The heading
    is the one the chunk shows (cut above a long section's later chunks).
    ``"title2"`` puts the title on two lines above the chunk, or on one when
    the chunk opens with it already: the title's words count twice, a title weight of 2 as
    in BM25F. A chunk from the middle of a page does not name the page's subject, and
    queries often do (``module tornado.ioloop``, which BM25 gave to release notes whose
    short sections are headed ``tornado.ioloop``, not to the module's page); counted twice,
    the title outweighs a name that a section of another page mentions in passing
    (docs/tuning.md). ``"title"`` puts it above the chunk once, as the embedder reads it
    (``embedding_input(..., "title")``), as versions made before ``"title2"`` index it.
    ``"text"`` is the chunk alone, as versions made before the title was indexed do.
    """
    check_lexical_input(lexical_input)
    if lexical_input == LEXICAL_TEXT_ALONE:
        return chunk_text
    once = embedding_input(title, chunk_text, EMBED_WITH_TITLE)
    title = " ".join(title.split())
    if lexical_input == LEXICAL_TERM_TWICE and heading_level == TERM_HEADING_LEVEL:
        heading = " ".join(chunk_text.split("\n", 1)[0].split())
        if heading and heading != title:
            once = f"{heading}\n{once}"
    if lexical_input in (LEXICAL_TERM_TWICE, LEXICAL_TITLE_TWICE) and title:
        return f"{title}\n{once}"
    return once


def _refuse_unknown(parameter: str, value: str, known: tuple[str, ...]) -> None:
    if value not in known:
        raise ConfigError(parameter, f"unknown {value!r} (known: {', '.join(known)})")


def check_lexical_input(lexical_input: str) -> None:
    """Refuse a lexical input that is none of ``LEXICAL_INPUTS`` (ConfigError)."""
    _refuse_unknown("lexical_input", lexical_input, LEXICAL_INPUTS)


def version_lexical_input(params: dict[str, Any]) -> str:
    """The lexical input an index version's ``params`` record (text alone when none)."""
    return str(params.get("lexical_input", LEXICAL_TEXT_ALONE))


def check_embed_input(embed_input: str) -> None:
    """Refuse an embedding input that is none of ``EMBED_INPUTS`` (ConfigError)."""
    _refuse_unknown("embed_input", embed_input, EMBED_INPUTS)


def version_embed_input(params: dict[str, Any]) -> str:
    """The embedding input an index version's ``params`` record (text alone when none)."""
    return str(params.get("embed_input", EMBED_TEXT_ALONE))


def chunk_text(text: str, chunk_words: int = DEFAULT_CHUNK_WORDS) -> list[ChunkRecord]:
    """Cut a document into chunks of about ``chunk_words`` words along its sections.

    A section longer than the target is split at paragraph boundaries, a paragraph of
    prose longer than the target at word boundaries (a list between its items, an item
    longer than the target between its words), and a block of code (fenced, or indented
    four spaces) or a table longer than the target between its lines. The
    section heading is kept at the top of each of its chunks, over a blank line, so a
    chunk reads on its own: whole (up to ``chunk_words`` words) above the section's first
    chunk, and cut to ``HEADING_REPEAT_WORDS`` words and an ellipsis above the later
    ones, so that a long API signature does not fill what the embedder reads of every
    chunk of its section (``ChunkRecord.heading`` keeps it whole). The headings of
    higher level above it are the chunk's
    ``section_path`` (outermost first), which a version embedding ``"section"`` reads too
    (``embedding_input``). A heading
    without text of its own is a chunk by itself: moving it above the next section
    was measured and lost (docs/tuning.md), since such a short chunk is a strong BM25
    match for a query that names the section.

    A chunk's text is the document's text as written: line breaks, the blank lines
    between paragraphs (up to two in a row) and the indentation of code stay (trailing
    spaces go, and a run of more than 64 spaces or tabs is cut to 64), so a result shows
    code as code. A fenced block cut between chunks is closed at the end of one and
    opened again at the top of the next, at its indentation. A chunk that starts inside
    a list item whose content is indented four columns or more (``*   item``, a nested
    item), or with a fenced block of an item, has the item's indentation taken off its
    lines (else an item's second paragraph would render as code); under a narrower item
    (``- ``) a block indented four spaces stays as written, since converters write code
    so after a list. A cut between words moves back off a word that would open a block
    at the top of a chunk (``-``, ``1.``, ``#``).
    """
    if chunk_words < 20:
        raise ValueError("chunk_words must be at least 20")
    chunks: list[ChunkRecord] = []
    for heading, body, path, level in _sections(text):
        # a piece is the text of one chunk below its heading, as (paragraph or slice of
        # one, blank lines above it) pairs
        pieces: list[list[tuple[str, int]]] = [[]]
        # whether a piece starts inside a paragraph, with a slice of it other than the first
        mid_paragraph = [False]
        filled = 0
        fence = ""  # the fence run of the code block open above this paragraph
        for para, blank_lines in _paragraphs(body):
            # str.split and the \S+ pattern break at the same characters (str.isspace)
            n_words = count_words(para)
            # a block's closing fence stays with its code: alone at the top of the next
            # chunk it would be reopened as an empty block
            if filled + n_words > chunk_words and filled and not _FENCE_ONLY.match(para):
                pieces.append([])
                mid_paragraph.append(False)
                filled = 0
            if n_words <= chunk_words:
                pieces[-1].append((para, blank_lines))
                filled += n_words
            else:
                by_line = bool(fence) or _lines_stay_whole(para)
                parts = (_line_slices if by_line else _prose_slices)(para, chunk_words)
                if by_line and (header := _table_header(para)):
                    # rows without their header and delimiter row are not a table to a
                    # renderer, only lines of pipes; repeated after the words are counted
                    parts[1:] = [f"{header}\n{part}" for part in parts[1:]]
                for part in parts[:-1]:
                    pieces[-1].append((part, blank_lines))
                    pieces.append([])
                    mid_paragraph.append(True)
                pieces[-1].append((parts[-1], blank_lines))
                filled = count_words(parts[-1])
            fence = _fence_after(para, fence)[1]
        bodies = ["".join(("\n" * (1 + blank) if i else "") + part
                          for i, (part, blank) in enumerate(piece)) for piece in pieces]
        bodies = _fences_closed_per_piece(_list_indentation_removed(bodies, mid_paragraph))
        # the section's first chunk holds its heading whole, up to a chunk's worth of words;
        # the copy above each later chunk is cut shorter (a Sphinx signature, or an
        # attribute's value written out, can run to thousands of words)
        first_top = _heading_line(_heading_cut(heading, chunk_words))
        repeated_top = _heading_line(_heading_cut(heading, HEADING_REPEAT_WORDS))
        for k, body_text in enumerate(bodies):
            if not body_text and not heading:
                continue
            top = repeated_top if k else first_top
            # a blank line below the heading: on the next line a renderer would join it to
            # the paragraph, and to code indented four spaces (as the HTML and reST
            # readers write code), making both one paragraph of prose
            # a text line's escaped fence is shown as written (the words are the same);
            # a heading's escape (`\````, _heading_line) stays, or it would open a block
            shown = _escaped_fences_shown(body_text)
            full = f"{top}\n\n{shown}" if top and shown else top or shown
            chunks.append(ChunkRecord(len(chunks), heading, full, count_words(full),
                                      " > ".join(path), level if heading else 0))
    return chunks


# Han, Hiragana and Katakana (full and half width): scripts written without spaces
# between words, whose characters each count as a word (the SQL analyzer's v4 pairs read
# the same ranges, sql/010_analyzer.sql, after folding half width to full). Written as
# escapes, which Python's and Postgres' regular expressions both read, so that doctor
# can send them to a database of any encoding.
CJK_CHAR_RANGES = (r"\u3040-\u30fa\u30fc-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
                   r"\uff66-\uff9f\U00020000-\U0003134f")
# Hangul syllables, conjoining jamo (with extensions A and B) and compatibility jamo, which
# the v5 analyzers read as pairs (sql/010_analyzer.sql). Korean is written with spaces, so
# the chunker counts its words as any other; doctor reads these to find Korean terms.
HANGUL_CHAR_RANGES = r"\uac00-\ud7a3\u1100-\u11ff\ua960-\ua97f\ud7b0-\ud7ff\u3131-\u318e"
# Thai, Lao, Myanmar (with Extended-A and -B) and Khmer (with its symbols): written
# without spaces between words too, but a letter carries vowel signs and tone marks
# written as characters of their own, so a word of the chunker's is a character cluster:
# a letter and the marks after it
_CLUSTER_SCRIPTS = (r"\u0e00-\u0e7f\u0e80-\u0eff\u1000-\u109f\ua9e0-\ua9ff\uaa60-\uaa7f"
                    r"\u1780-\u17ff\u19e0-\u19ff")
# the combining marks (general category Mn or Mc) of those blocks as of Unicode 15.1,
# written out rather than read from unicodedata, whose version follows Python's: chunks
# and content hashes must not change with the Python that ingests (U+0ECE, Lao yamakkan,
# is a mark from Unicode 15.0, unassigned in Python 3.11's 14.0). A test checks the list.
_CLUSTER_MARKS = (r"\u0e31\u0e34-\u0e3a\u0e47-\u0e4e"  # Thai
                  r"\u0eb1\u0eb4-\u0ebc\u0ec8-\u0ece"  # Lao
                  r"\u102b-\u103e\u1056-\u1059\u105e-\u1060\u1062-\u1064\u1067-\u106d"
                  r"\u1071-\u1074\u1082-\u108d\u108f\u109a-\u109d\ua9e5\uaa7b-\uaa7d"  # Myanmar
                  r"\u17b4-\u17d3\u17dd")  # Khmer
# a consonant stacked below the one before it: Myanmar's virama or Khmer's coeng and the
# character after it, unless that is a mark (a mark after a virama is a mark like others)
_STACKED = f"[\\u1039\\u17d2](?![{_CLUSTER_MARKS}])[{_CLUSTER_SCRIPTS}]"
# what a cluster holds after its first character: marks, stacked consonants, and a
# zero-width space, non-joiner or joiner (they mark word breaks or shape the cluster, and
# are no word of their own)
_CLUSTER_TAIL = f"{_STACKED}|[{_CLUSTER_MARKS}\\u200b-\\u200d]"
# text that counts other than by its spaces
_UNSPACED = re.compile(f"[{CJK_CHAR_RANGES}{_CLUSTER_SCRIPTS}]")
# a word: one Chinese or Japanese character, a cluster of those scripts, or a run of
# other characters up to whitespace (for text without those scripts, what str.split
# gives: both break at str.isspace). Marks and stacked consonants never open a word: after
# a run of other characters, which has no letter of theirs to carry them, they stay in it.
_WORD = re.compile(f"[{CJK_CHAR_RANGES}]"
                   f"|(?:{_STACKED}|[{_CLUSTER_SCRIPTS}])(?:{_CLUSTER_TAIL})*"
                   f"|(?:[^\\s{CJK_CHAR_RANGES}{_CLUSTER_SCRIPTS}]+|{_CLUSTER_TAIL})+")


#: the most words of a section's heading repeated above its second and later chunks (its
#: first chunk holds up to ``chunk_words`` of them): the heading says which section a
#: chunk continues, and a long one (an API signature with its parameters) repeated whole
#: filled the embedder's 256 word pieces and counted for BM25 in every chunk of the
#: section (docs/tuning.md). Prose headings of the judged sets run to 19 words.
HEADING_REPEAT_WORDS = 24
# what a cut heading ends with
_HEADING_CUT_MARK = " \u2026"


def _heading_cut(heading: str, words: int) -> str:
    """``heading`` cut to its first ``words`` words (as ``count_words`` counts them), with
    an ellipsis after the cut."""
    for n, m in enumerate(_WORD.finditer(heading), 1):
        if n == words:
            rest = heading[m.end():]
            return heading if not rest.strip() else heading[:m.end()] + _HEADING_CUT_MARK
    return heading


def count_words(text: str) -> int:
    """The words of ``text`` as chunk sizes count them: whitespace-separated, each
    Chinese or Japanese character one, and each character cluster of Thai, Lao, Khmer or
    Burmese one, a letter with its vowel signs and tone marks (a paragraph of those
    scripts has no spaces to count)."""
    spaced = text.isascii() or _UNSPACED.search(text) is None
    if len(text) > _COUNT_IN_PLACE:
        # counted without a list of the words, which for a megabytes-long paragraph
        # weighs ten times the text
        return sum(1 for _ in (_NONSPACE_RUN if spaced else _WORD).finditer(text))
    return len(text.split()) if spaced else len(_WORD.findall(text))


# texts longer than this (characters) have their words counted as they are read
_COUNT_IN_PLACE = 1 << 20
_NONSPACE_RUN = re.compile(r"\S+")

# what a heading's text can start with that, alone on a chunk's first line, a Markdown
# renderer reads as another block: a list item (`1. Install`, `- Notes`), a heading, a
# quote, a rule or a code fence (an HTML block: _HTML_BLOCK)
_HEADING_OPENS_BLOCK = re.compile(
    r"(?:[-*+]|#{1,6}|\d{1,9}[.)])(?:[ \t]|$)|>|[-*_](?:[ \t]*[-*_]){2,}[ \t]*$|`{3}|~{3}")


def _heading_line(heading: str) -> str:
    """A section heading as a chunk's first line: its text, with a leading block marker
    escaped (`1\\. Install`, `\\- Notes`), so that it renders as the line of text it is
    rather than as a one-item list. The analyzer reads both alike; ``heading`` keeps the
    text unescaped."""
    if not (_HEADING_OPENS_BLOCK.match(heading) or _HTML_BLOCK.match(heading)):
        return heading
    # CommonMark escapes ASCII punctuation only: a number's marker is the `.` or `)`
    at = len(heading) - len(heading.lstrip("0123456789"))
    return f"{heading[:at]}\\{heading[at:]}"


def _fence_after(text: str, fence: str, opener: str = "") -> tuple[str, str]:
    """The (opening line, fence run) of the fenced block still open after ``text``'s
    lines, given the one open before them (``""`` for none)."""
    if "```" not in text and "~~~" not in text:
        # no line opens or closes a fence: as it was, without a pattern per line
        return opener, fence
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if not fence:
            if m:
                # with its indentation, which the closing line added at a cut repeats
                opener, fence = line.rstrip(), m.group(1)
        elif m and _closes_fence(line, fence):
            opener = fence = ""
    return opener, fence


# the start of a raw HTML block, as CommonMark reads one (its kinds 1, 2 and 6): a
# comment, or a block-level tag such as a README's <table>, <details> or <p align=...>
_HTML_BLOCK = re.compile(
    r" {0,3}(?:<!--|</?(?:address|article|aside|blockquote|body|caption|center|col|colgroup"
    r"|dd|details|dialog|dir|div|dl|dt|fieldset|figcaption|figure|footer|form|h[1-6]|head"
    r"|header|hr|html|iframe|legend|li|main|menu|nav|ol|optgroup|option|p|pre|script"
    r"|section|style|summary|table|tbody|td|textarea|tfoot|th|thead|tr|ul)(?:[\s/>]|$))",
    re.IGNORECASE)


def _lines_stay_whole(para: str) -> bool:
    """Whether a paragraph is cut between its lines rather than its words: it holds a
    fence line, every line is indented by four spaces or a tab (code, as the HTML and
    reST readers write it), every line is a row of a table (cells parted by ``|``,
    with or without pipes at either end, as the HTML reader writes a table's rows), or it
    is a raw HTML block (a cut between words left a row or a tag in two)."""
    lines = para.split("\n")
    return any(_FENCE.match(line) for line in lines) or \
        all(line.startswith(("    ", "\t")) for line in lines) or \
        all("|" in line for line in lines) or bool(_HTML_BLOCK.match(lines[0]))


_TABLE_DELIMITER = re.compile(r"^\s*\|?(?:\s*:?-+:?\s*\|)+\s*(?::?-+:?\s*)?$")


def _table_header(para: str) -> str | None:
    """A markdown table's header row and delimiter row (``| a | b |`` over
    ``|---|---|``, or ``a | b`` over ``--- | ---``), or None for a paragraph that is not
    such a table."""
    lines = para.split("\n", 2)
    if len(lines) == 3 and "|" in lines[0] and _TABLE_DELIMITER.match(lines[1]):
        return f"{lines[0]}\n{lines[1]}"
    return None


def _fences_closed_per_piece(bodies: list[str]) -> list[str]:
    """The pieces of a section, with a fenced code block cut between two pieces closed at
    the end of the first and opened again, with its info string, at the top of the next.

    Otherwise the second chunk opens with bare code and ends with the block's closing
    fence, which a markdown renderer reads as an opening one: its code renders as prose
    and what follows as code. The fence lines are added after the words are counted, so
    boundaries do not move. A block the document leaves unclosed stays unclosed in its
    last chunk, and no fence is open before a section's first piece (``_sections``)."""
    out: list[str] = []
    opener = fence = ""
    last = max((i for i, body in enumerate(bodies) if body), default=-1)
    for i, body in enumerate(bodies):
        if not body:
            out.append(body)
            continue
        reopened = opener
        opener, fence = _fence_after(body, fence, opener)
        if reopened:
            body = f"{reopened}\n{body}"
        if fence and i != last:
            # at the opener's indentation: at column 0 a closing line under a list item
            # would end the item and open a second, empty block
            body = f"{body}\n{opener[:len(opener) - len(opener.lstrip())]}{fence}"
        out.append(body)
    return out


# a list item's marker and the spaces after it: its content starts where they end
_LIST_MARKER = re.compile(r"^( *)(?:[-*+]|\d{1,9}[.)])( +|$)")


# a line that may open a list item (_LIST_MARKER) or a fence (_FENCE): a superset of
# both, which only decides whether _list_indentation_removed reads a section's lines
_MAY_OPEN_ITEM_OR_FENCE = re.compile(r"^ *(?:[-*+]|\d|```|~~~)", re.M)


def _spaces_before(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _list_indentation_removed(bodies: list[str], mid_paragraph: list[bool]) -> list[str]:
    """The pieces of a section, each that starts inside a list item with the indentation
    of the item it starts in taken off its lines (where that is four columns or more, or
    the piece starts with a fenced block), as far as the items holding each line reach:
    a line further left loses only its own holder's indentation, one at the margin none.

    Cut out of its item, a nested item or an item's second paragraph indented four
    spaces or more would start the chunk as a code block. Indentation is all this
    changes, so boundaries and vectors (``vector_key``) stay; code indented within an
    item keeps the four spaces that make it code, and a fenced block cut between two
    pieces loses the same indentation in both, so its fences still pair up.
    ``mid_paragraph`` tells which pieces start inside a paragraph (their first line
    goes on from the piece before)."""
    if not any(map(_MAY_OPEN_ITEM_OR_FENCE.search, bodies)):
        # no line opens a list item or a fence, so no item holds a line and nothing is
        # taken off: most sections of documentation, read without a pattern per line
        return list(bodies)
    out: list[str] = []
    columns: list[int] = []  # content columns of the list items open, outermost first
    fence = ""  # the fenced block open, and the indentation taken off its opening line
    fence_take = 0
    for body, goes_on in zip(bodies, mid_paragraph, strict=True):
        lines = body.split("\n")
        take: int | None = fence_take if fence else None
        # the words of a paragraph cut between them go on at the margin: that paragraph's
        # other lines can stay as they are (no indentation makes them code)
        lazy = goes_on and not fence and not _spaces_before(lines[0])
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            indent = _spaces_before(line)
            if fence:
                if _closes_fence(line, fence):
                    fence = ""
            else:
                paragraph_start = not goes_on if i == 0 else not lines[i - 1].strip()
                lazy = lazy and not (i and paragraph_start)
                columns[:], holder = _open_items(columns, line, paragraph_start)
                # a fence is indented less than four spaces past the item that holds it
                opens_fence = _FENCE.match(line[min(holder, indent):])
                if take is None:
                    # under an item whose content starts four columns in or more
                    # ("*   item", a nested item) its indentation is what holds the block
                    # in the item; under a narrower one ("- ", "1. ") a block indented
                    # four spaces may as well be code that a converter indented (the
                    # HTML and RST readers write code so after a list), and it stays
                    # code; a fence says what it is
                    take = holder if holder >= 4 or opens_fence else 0
                elif take and indent < take:
                    # a paragraph or an item left of the item that held the piece's
                    # start: that item has ended (at the margin, the list), and what is
                    # taken is no more than the item now holding the line, so nested
                    # items below keep their depth under it
                    take = min(take, holder)
                if opens_fence:
                    fence, fence_take = opens_fence.group(1), take
            if take and not lazy:
                lines[i] = line[min(take, indent):]
        out.append("\n".join(lines))
    return out


def _open_items(columns: list[int], line: str, paragraph_start: bool) -> tuple[list[int], int]:
    """The content columns of the list items open after ``line``, given those open
    before it, and the column of the innermost item that holds the line (0 for none).

    A paragraph, or an item marker, less indented than an item's content ends that
    item; a marker indented less than four spaces past the item that holds it starts
    an item (further in, it is code)."""
    indent = _spaces_before(line)
    marker = _LIST_MARKER.match(line)
    held = list(columns)
    if paragraph_start or marker:
        while held and held[-1] > indent:
            held.pop()
    holder = held[-1] if held else 0
    if marker and indent - holder < 4:
        gap = len(marker.group(2))
        # more than four spaces after the marker: the content is code, one space in
        held.append(marker.end() - (gap - 1 if gap > 4 or not gap else 0))
    return held, holder


# a run of spaces or tabs longer than this is cut to this length: indentation and
# aligned columns stay, while a document padded with megabytes of blanks does not come
# back padded in every search result
_MAX_BLANK_RUN = 64
_LONG_BLANK_RUN = re.compile(rf"[^\S\n]{{{_MAX_BLANK_RUN + 1},}}")
# blank lines kept in a row between two paragraphs: two, as between Python functions
_MAX_BLANK_LINES = 2
_PARAGRAPH_BREAK = re.compile(r"(\n\s*\n)")


def _paragraphs(body: str) -> list[tuple[str, int]]:
    """A section's paragraphs (split at blank lines), each with its lines' indentation
    and without trailing spaces, and the number of blank lines above it (at most two)."""
    # Long runs cut and trailing spaces dropped in the whole section at once, not in a
    # call per paragraph: the same text, since neither spans a line break, and of the
    # blank lines between paragraphs only their line breaks are read
    body = _LONG_BLANK_RUN.sub(lambda run: run.group()[:_MAX_BLANK_RUN], body)
    body = "\n".join([line.rstrip() for line in body.split("\n")])
    paragraphs = []
    blank = 0
    for i, part in enumerate(_PARAGRAPH_BREAK.split(body)):
        if i % 2:
            blank += part.count("\n") - 1
        elif part.strip():
            paragraphs.append((part, min(blank, _MAX_BLANK_LINES)))
            blank = 0
    return paragraphs


# a word that, first on a line, opens a block of its own: a list item, a heading, a
# quote, a rule or a code fence
_OPENS_BLOCK = re.compile(r"[-*+#]|#{2,6}|\d{1,9}[.)]|>.*|[-*_]{3,}|(?:`{3,}|~{3,}).*")


def _word_slices(para: str, chunk_words: int) -> list[str]:
    """A paragraph cut every ``chunk_words`` words, with the whitespace between the words
    of a slice as written; the first slice keeps its first line's indentation.

    A cut before a word that would open a block at the top of a chunk (``-``, ``>=``,
    ``1.``: a list, a quote) moves back a word or a few, so the next slice reads as
    the prose it was."""
    # words are read as they come and only the current slice's spans are held: a list of
    # every word's span held a megabyte paragraph's size forty times over
    slices: list[str] = []
    window: list[tuple[int, int]] = []
    slice_start = 0  # the first slice keeps the indentation before its first word
    for word in _WORD.finditer(para):
        window.append(word.span())
        if len(window) <= chunk_words:
            continue
        # the nearest word at or before the cut, back to half a chunk, that opens no block
        cut = next((back for back in range(chunk_words, chunk_words // 2 - 1, -1)
                    if not _OPENS_BLOCK.fullmatch(para, *window[back])), chunk_words)
        slices.append(para[slice_start:window[cut - 1][1]])
        window = window[cut:]
        slice_start = window[0][0]
    if window:
        slices.append(para[slice_start:window[-1][1]])
    return slices


def _line_slices(code: str, chunk_words: int) -> list[str]:
    """A block of code or a table cut between lines into slices of at most
    ``chunk_words`` words, each line whole with its indentation; a line longer than that
    is cut between its words, going on from the lines before it (``_packed``)."""
    return _packed(code.split("\n"), chunk_words)


# a line that starts an item of a markdown (or plain-text) list, at any depth
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+\S", re.M)


def _prose_slices(para: str, chunk_words: int) -> list[str]:
    """A paragraph of prose cut into slices of at most ``chunk_words`` words: between the
    items of a list it holds (a changelog, a list of options), so each item stays whole
    in one chunk and no chunk ends on the next item's bare marker; between words where it
    is not a list, or within an item longer than that."""
    lines = para.split("\n")
    if all(_QUOTE_MARKS.match(line) for line in lines):
        return _quote_slices(lines, chunk_words)
    starts = [m.start() for m in _LIST_ITEM.finditer(para) if m.start() > 0]
    if not starts:
        return _word_slices(para, chunk_words)
    bounds = [0, *starts, len(para) + 1]
    return _packed([para[a:b - 1] for a, b in pairwise(bounds)], chunk_words)


# the ">" marks that open a line of a block quote, nested ones too
_QUOTE_MARKS = re.compile(r" {0,3}>(?: {0,4}>)* ?")


def _quote_slices(lines: list[str], chunk_words: int) -> list[str]:
    """A block quote cut between its lines where they fit, each slice marked as quoted:
    a line cut between words goes on in the next slice under its own ``>`` marks, which
    it would otherwise lose, leaving the chunk's first line outside the quote."""
    slices = _packed(lines, chunk_words)
    for i in range(1, len(slices)):
        if not _QUOTE_MARKS.match(slices[i]):
            marks = _QUOTE_MARKS.match(slices[i - 1].rsplit("\n", 1)[-1])
            slices[i] = f"{marks.group() if marks else '> '}{slices[i]}"
    return slices


def _packed(units: list[str], chunk_words: int) -> list[str]:
    """Consecutive units (lines, list items) joined by line breaks into slices of at most
    ``chunk_words`` words, each unit whole; a unit longer than a slice is cut between
    words, from the end of the slice before. A closing fence never starts a slice (it
    stays with its code)."""
    slices: list[str] = []
    taken: list[str] = []
    filled = 0
    for unit in units:
        n_words = count_words(unit)
        if n_words > chunk_words:
            if taken and chunk_words - filled < max(4, chunk_words // 10):
                # too little room left for more than the unit's marker and a word or two
                slices.append("\n".join(taken))
                taken, filled = [], 0
            # cut between words, going on from the units taken: an item's introduction
            # stays with its first words rather than making a chunk of a few words
            *whole, rest = _word_slices("\n".join([*taken, unit]), chunk_words)
            slices.extend(whole)
            taken, filled = [rest], count_words(rest)
            continue
        if filled + n_words > chunk_words and taken and not _FENCE_ONLY.match(unit):
            slices.append("\n".join(taken))
            taken, filled = [], 0
        taken.append(unit)
        filled += n_words
    if taken:
        slices.append("\n".join(taken))
    return slices
