"""Judged queries: loading, validation, the dev/test split and the judging level.

A judged-query file is JSON Lines, one query per line::

    {"query_id": "q17", "query": "refund a monthly plan", "slice": "paraphrase",
     "relevant": {"billing-faq#3": 2, "billing-faq#4": 1},
     "history": ["what plans are there?"], "split": "dev"}

``history``, ``split`` and ``query_id`` are optional; keys this module does not know are
ignored so that a file can carry notes for the people who judged it, unless one reads as
a misspelt field the line lacks (``Split``, ``histroy``), which is an error. ``relevant`` may
also be a list of item ids, each then of grade 1. A query without an id gets one made
from its text and history (``q-`` and 12 hex digits), so its dev/test split does not
move when lines are added or reordered. An item id is either a
document's citekey (document-level judging) or ``"<citekey>#<ordinal>"`` (chunk-level
judging); one file uses one level.

A grade is a non-negative integer. Items with grade 0 are judged *not* relevant (they
are kept so that a pooled judgment can say "seen, not relevant"). A query with no
item of grade >= 1 is a *no-answer* query: it has nothing to find, contributes to no
ranking metric, and is counted per slice as ``n_noanswer``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pgfunnel.errors import (
    JSON_ERRORS,
    ConfigError,
    InvalidInputError,
    json_problem,
    loads_unique,
    read_file_text,
    text_problem,
)

Split = Literal["dev", "test"]
JudgingLevel = Literal["document", "chunk"]

#: the name of the aggregate row over every slice; no slice may use it
ALL_SLICE = "all"

_SPLITS: tuple[str, ...] = ("dev", "test")

#: the largest grade: ``pgfunnel.qrel.grade`` is a Postgres integer (and trec_eval's a C long)
MAX_GRADE = 2_147_483_647


@dataclass(frozen=True)
class JudgedQuery:
    """One query with its judgments.

    ``relevant`` maps item id (citekey or ``citekey#ordinal``) to a graded relevance.
    ``split`` is the split the file assigns, or ``None`` to let :func:`split_of` decide
    by hash.
    """

    query_id: str
    query: str
    slice: str
    relevant: Mapping[str, int]
    history: tuple[str, ...] = ()
    split: Split | None = None
    #: the line of the file it came from (1-based), when loaded from a file
    line: int | None = field(default=None, compare=False)
    #: why ``history`` is over the follow-up resolver's limit (naming the line), or None:
    #: a search that resolves the follow-up refuses it, one that does not read the
    #: history (``"followup": false``) searches the query as written
    history_problem: str | None = field(default=None, compare=False)

    @property
    def relevant_items(self) -> frozenset[str]:
        """Item ids with grade >= 1: what a system is supposed to find."""
        return frozenset(item for item, grade in self.relevant.items() if grade >= 1)

    @property
    def is_noanswer(self) -> bool:
        """True when the query has no item of grade >= 1."""
        return not self.relevant_items


def derived_query_id(query: str, history: Sequence[str] = ()) -> str:
    """The id of a judged query whose file gives none: made from its text and history, so
    that it stays the same when lines are added or reordered."""
    digest = hashlib.sha256("\x00".join([query, *history]).encode()).hexdigest()
    return f"q-{digest[:12]}"


def over_limit_history(q: JudgedQuery) -> str | None:
    """Why ``q``'s history is over the follow-up resolver's limit (its line named, when
    it was read from a file), or None: a query built in Python is checked here."""
    if q.history_problem is not None or not q.history:
        return q.history_problem
    from pgfunnel.transform import check_history

    try:
        check_history(q.history)
    except InvalidInputError as exc:
        return f"query {q.query_id!r}: field {exc}"
    return None


def _where(line: int | None) -> str:
    return f"line {line}" if line is not None else "query"


def _check_text(value: str, name: str, where: str) -> None:
    """Text Postgres cannot hold (a NUL, a lone surrogate) is refused here, naming the line
    and the field; it failed later with the driver's error naming neither, or a traceback."""
    if (problem := text_problem(value)) is not None:
        raise InvalidInputError(f"{where}: field {name!r} {problem}")


#: the fields of a judged query's line; any other key is a note, ignored
FIELDS: tuple[str, ...] = ("query_id", "query", "slice", "relevant", "history", "split")


def _misspelt_field(key: str, obj: Mapping[str, Any]) -> str | None:
    """The field a key the format does not know was probably meant to be (``Split``,
    ``query-id``, ``histroy``), when the line lacks that field; else None (a note)."""
    norm = key.strip().lower().replace("-", "_").replace(" ", "_")
    absent = [f for f in FIELDS if f not in obj]
    if norm in absent:
        return norm
    close = difflib.get_close_matches(norm, absent, n=1, cutoff=0.8)
    return close[0] if close else None


def parse_query(obj: Any, line: int | None = None) -> JudgedQuery:
    """Validate one decoded JSON object and build a :class:`JudgedQuery`.

    Raises :class:`InvalidInputError` naming ``line`` (when given) and the field at fault;
    a history over the follow-up limit is not refused here but kept in ``history_problem``
    (a search that resolves the follow-up refuses it; one that does not never reads it).
    A key the format does not know is a note and is ignored, unless it reads as a
    misspelt field the line lacks (``Split``, ``histroy``): the field it meant would be
    silently unset (a follow-up searched without its history, a query hashed to the
    other split), so that is an error too.
    """
    where = _where(line)
    if not isinstance(obj, dict):
        raise InvalidInputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for key in obj:
        if key not in FIELDS and (meant := _misspelt_field(str(key), obj)) is not None:
            raise InvalidInputError(
                f"{where}: unknown field {key!r}; did you mean {meant!r}? (a key that is "
                "not a field is a note and is ignored: give a note a name of its own)")

    def text_field(name: str, *, allow_empty: bool) -> str:
        if name not in obj:
            raise InvalidInputError(f"{where}: missing required field {name!r}")
        value = obj[name]
        if not isinstance(value, str):
            raise InvalidInputError(
                f"{where}: field {name!r} must be a string, got {type(value).__name__}"
            )
        if not allow_empty and not value.strip():
            raise InvalidInputError(f"{where}: field {name!r} must not be empty")
        _check_text(value, name, where)
        return value

    if "query" not in obj and "_id" in obj and "text" in obj:
        # BEIR's queries.jsonl given without its qrels: "missing 'query'" alone did not say
        # which file the line belongs to
        raise InvalidInputError(
            f"{where}: missing required field 'query'; the line reads as BEIR's "
            "queries.jsonl ({\"_id\", \"text\"}): give its judgments with --qrels "
            "qrels/test.tsv (load_beir in Python)")
    # an empty query searches nothing and scored 0 without a word, where an empty slice
    # was refused
    query = text_field("query", allow_empty=False)
    from pgfunnel.search import query_text_problem

    if (problem := query_text_problem(query)) is not None:
        # said here, with its line, rather than by the search, which stopped the run
        # minutes in without naming the query
        raise InvalidInputError(f"{where}: field 'query' {problem}")
    slice_name = text_field("slice", allow_empty=False)
    if slice_name == ALL_SLICE:
        raise InvalidInputError(
            f"{where}: field 'slice' may not be {ALL_SLICE!r}; that name is reserved for "
            "the row over every slice"
        )

    if "relevant" not in obj:
        raise InvalidInputError(f"{where}: missing required field 'relevant'")
    raw_relevant = obj["relevant"]
    if isinstance(raw_relevant, list):
        # the relevant items without grades: each is relevant, grade 1
        for item in raw_relevant:
            if not isinstance(item, str):
                raise InvalidInputError(
                    f"{where}: field 'relevant' lists {item!r}; a list of relevant items "
                    "holds item ids (strings)"
                )
        raw_relevant = dict.fromkeys(raw_relevant, 1)
    if not isinstance(raw_relevant, dict):
        raise InvalidInputError(
            f"{where}: field 'relevant' must be an object mapping item id to grade or a "
            f"list of item ids, got {type(raw_relevant).__name__}"
        )
    relevant: dict[str, int] = {}
    for item, raw_grade in raw_relevant.items():
        if not isinstance(item, str) or not item.strip():
            raise InvalidInputError(f"{where}: field 'relevant' has an empty item id")
        _check_text(item, "relevant", where)
        grade = raw_grade
        if isinstance(grade, float) and grade.is_integer():
            grade = int(grade)  # 2.0 from a tool that writes every number as a float
        if isinstance(grade, bool) or not isinstance(grade, int) or grade < 0:
            raise InvalidInputError(
                f"{where}: field 'relevant' gives item {item!r} the grade {grade!r}; "
                "a grade must be a non-negative integer"
            )
        if grade > MAX_GRADE:
            # scored, it was a traceback from trec_eval after every search; stored
            # (--store-qrels), Postgres's "integer out of range" named no line
            raise InvalidInputError(
                f"{where}: field 'relevant' gives item {item!r} the grade {raw_grade!r}; "
                f"a grade is at most {MAX_GRADE:,}"
            )
        relevant[item] = grade

    history: tuple[str, ...] = ()
    history_problem: str | None = None
    if obj.get("history") is not None:
        raw_history = obj["history"]
        if not isinstance(raw_history, list) or not all(isinstance(h, str) for h in raw_history):
            raise InvalidInputError(f"{where}: field 'history' must be a list of strings")
        for turn in raw_history:
            _check_text(turn, "history", where)
        from pgfunnel.transform import check_history

        try:
            check_history(raw_history)
        except InvalidInputError as exc:
            # kept, with the line, until a search that resolves follow-ups is asked for
            # (refused before any search then): with followup off it is never read
            history_problem = f"{where}: field {exc}"
        history = tuple(raw_history)

    split: Split | None = None
    if obj.get("split") is not None:
        raw_split = obj["split"]
        if raw_split == "dev":
            split = "dev"
        elif raw_split == "test":
            split = "test"
        else:
            raise InvalidInputError(
                f"{where}: field 'split' must be 'dev' or 'test', got {raw_split!r}"
            )

    if obj.get("query_id") is None:
        query_id = derived_query_id(query, history)
    else:
        query_id = text_field("query_id", allow_empty=False)

    return JudgedQuery(
        query_id=query_id,
        query=query,
        slice=slice_name,
        relevant=relevant,
        history=history,
        split=split,
        line=line,
        history_problem=history_problem,
    )


def _json_lines(path: Path, what: str) -> Iterator[tuple[int, Any]]:
    """(line number, decoded value) of each non-blank line of a JSON Lines file; a file
    that cannot be read or a line that is not JSON is an error naming the file (and line)."""
    try:
        text = read_file_text(path)
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read {what}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path}: {what} are not valid UTF-8: {exc}") from exc
    # a byte-order mark, as Windows editors write one, is not part of the first line
    text = text.removeprefix("\ufeff")
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = loads_unique(raw)
        except JSON_ERRORS as exc:
            at = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            raise InvalidInputError(f"{path}: line {lineno}: invalid JSON{at}: "
                                    f"{json_problem(exc)}{_one_document(text, what)}") from None
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            raise InvalidInputError(f"{path}: line {lineno}: a JSON array of objects, not "
                                    f"one object: drop the brackets and {_ONE_A_LINE}")
        yield lineno, value


_ONE_A_LINE = "write each object whole on a line of its own (JSON Lines)"


def _one_document(text: str, what: str) -> str:
    """The hint for a line that is not JSON when the whole file is one JSON document (an
    array of queries, or an object pretty-printed over several lines): its first line
    alone read as "invalid JSON: Expecting value", which said nothing of the format."""
    try:
        whole = loads_unique(text)
    except JSON_ERRORS:
        return ""
    if isinstance(whole, list):
        return (f"; the file is one JSON array of {what} over several lines, not JSON Lines: "
                f"drop the brackets and {_ONE_A_LINE}")
    if isinstance(whole, dict):
        return f"; the file is one JSON object over several lines, not JSON Lines: {_ONE_A_LINE}"
    return ""


def load_queries(path: str | Path) -> list[JudgedQuery]:
    """Read a judged-query JSONL file; blank lines are skipped.

    Every problem is an :class:`InvalidInputError` that names the file, the 1-based
    line number and the field: invalid JSON, a missing or mistyped field, a bad grade,
    a duplicate ``query_id``.
    """
    p = Path(path)
    queries: list[JudgedQuery] = []
    first_line: dict[str, int] = {}
    for lineno, obj in _json_lines(p, "judged queries"):
        try:
            q = parse_query(obj, lineno)
        except InvalidInputError as exc:
            raise InvalidInputError(f"{p}: {exc}") from None
        if q.history_problem is not None:
            q = replace(q, history_problem=f"{p}: {q.history_problem}")
        if q.query_id in first_line and obj.get("query_id") is None:
            # the same text (and history) twice without ids: the later one is told apart
            # by its position among the repeats
            n = 2
            while f"{q.query_id}-{n}" in first_line:
                n += 1
            q = replace(q, query_id=f"{q.query_id}-{n}")
        if q.query_id in first_line:
            raise InvalidInputError(
                f"{p}: line {lineno}: duplicate query_id {q.query_id!r} "
                f"(first seen on line {first_line[q.query_id]})"
            )
        first_line[q.query_id] = lineno
        queries.append(q)
    if not queries:
        raise InvalidInputError(f"{p}: no judged queries in the file (it is empty or blank)")
    try:
        judging_level(queries)  # one level per file, every chunk key well formed
    except InvalidInputError as exc:
        raise InvalidInputError(f"{p}: {exc}") from None
    return queries


#: the slice of BEIR queries, which come without one
BEIR_SLICE = "queries"


def load_beir(queries_path: str | Path, qrels_path: str | Path) -> list[JudgedQuery]:
    """Judged queries in BEIR's layout: ``queries.jsonl`` (``{"_id", "text"}`` per line;
    a ``metadata.slice``, when a line has one, is its slice) and a qrels TSV (``query-id``,
    ``corpus-id``, ``score``, with or without that header). Only the queries the qrels
    judge are returned, in the order of the queries file; a grade is the score."""
    qp, rp = Path(queries_path), Path(qrels_path)
    judged: dict[str, dict[str, int]] = {}
    # where each (query, item) was judged, to name both lines of a conflict
    judged_on: dict[tuple[str, str], int] = {}
    try:
        rows = read_file_text(rp).removeprefix("\ufeff").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{rp}: cannot read qrels: {exc}") from exc
    for lineno, row in enumerate(rows, start=1):
        row = row.rstrip()  # a trailing tab made a fourth, empty field: read as TREC's
        fields = row.split("\t") if "\t" in row else row.split()
        if not row.strip() or (lineno == 1 and fields[0] in ("query-id", "query_id", "qid")):
            continue
        if len(fields) == 4:  # TREC's "qid 0 docid grade"
            fields = [fields[0], fields[2], fields[3]]
        if len(fields) != 3:
            raise InvalidInputError(f"{rp}: line {lineno}: expected query-id, corpus-id and "
                                    f"score, got {row!r}")
        try:
            score = float(fields[2])
        except ValueError:
            raise InvalidInputError(f"{rp}: line {lineno}: score {fields[2]!r} is not a "
                                    "number") from None
        # a grade is a whole number, as in the JSONL format: 0.7 was cut to 0 (judged not
        # relevant) without a word, and inf was a traceback
        if not score.is_integer():
            raise InvalidInputError(f"{rp}: line {lineno}: score {fields[2]!r} is not a whole "
                                    "number; a grade is a non-negative integer")
        grade = int(score)
        if grade < 0:
            raise InvalidInputError(f"{rp}: line {lineno}: score {grade} is negative")
        if grade > MAX_GRADE:
            raise InvalidInputError(f"{rp}: line {lineno}: score {fields[2]} is above the "
                                    f"largest grade, {MAX_GRADE:,}")
        for name, value in (("query-id", fields[0]), ("corpus-id", fields[1])):
            _check_text(value, name, f"{rp}: line {lineno}")
        item = judged.setdefault(fields[0], {})
        if fields[1] in item and item[fields[1]] != grade:
            # one of the two grades was taken without a word: which did the judges mean?
            raise InvalidInputError(
                f"{rp}: line {lineno}: query {fields[0]!r} judges {fields[1]!r} {grade}, "
                f"where line {judged_on[fields[0], fields[1]]} judged it {item[fields[1]]}")
        item[fields[1]] = grade
        judged_on.setdefault((fields[0], fields[1]), lineno)
    if not judged:
        raise InvalidInputError(f"{rp}: no judgments in the file (it is empty or only a header)")
    # one level per file, said with the qrels' own lines: judging_level named the lines of
    # the queries file, where no item is written, and no file
    seen: dict[bool, tuple[int, str, str]] = {}
    for (query_id, item_id), lineno in sorted(judged_on.items(), key=lambda kv: kv[1]):
        seen.setdefault(chunk_key(item_id) is not None, (lineno, query_id, item_id))
        if len(seen) == 2:
            chunk, doc = seen[True], seen[False]
            raise InvalidInputError(
                f"{rp}: the qrels mix chunk-level and document-level items: line {chunk[0]} "
                f"(query {chunk[1]!r}) judges chunk {chunk[2]!r}, line {doc[0]} (query "
                f"{doc[1]!r}) judges document {doc[2]!r}; one file judges at one level "
                "(docs/evaluation.md, judging level)")
    queries: list[JudgedQuery] = []
    first_line: dict[str, int] = {}
    for lineno, obj in _json_lines(qp, "queries"):
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str) \
                or not isinstance(obj.get("_id"), str | int):
            raise InvalidInputError(f"{qp}: line {lineno}: expected a BEIR query "
                                    '{"_id": ..., "text": ...}')
        query_id = str(obj["_id"])
        if query_id in first_line:
            # the later line was skipped without a word: which text do the qrels judge?
            raise InvalidInputError(f"{qp}: line {lineno}: duplicate _id {query_id!r} (first "
                                    f"seen on line {first_line[query_id]})")
        if query_id not in judged:
            continue
        first_line[query_id] = lineno
        metadata = obj.get("metadata")
        slice_name = metadata.get("slice") if isinstance(metadata, dict) else None
        if not isinstance(slice_name, str) or not slice_name.strip() or slice_name == ALL_SLICE:
            slice_name = BEIR_SLICE
        if not obj["text"].strip():
            # searched, it found nothing and scored 0 without a word (as the JSONL format
            # refuses an empty query)
            raise InvalidInputError(f"{qp}: line {lineno}: query {query_id!r} has empty text")
        for name, value in (("text", obj["text"]), ("metadata.slice", slice_name)):
            _check_text(value, name, f"{qp}: line {lineno}")
        queries.append(JudgedQuery(query_id, obj["text"], slice_name, judged.pop(query_id),
                                   line=lineno))
    if judged:
        some = ", ".join(repr(q) for q in list(judged)[:3])
        raise InvalidInputError(f"{rp}: {len(judged)} judged query ids are not in {qp} "
                                f"({some})")
    return queries


def split_of(query: str | JudgedQuery, test_fraction: float = 0.5, salt: str = "pgfunnel") -> Split:
    """The split a query belongs to: ``"dev"`` or ``"test"``.

    Given a :class:`JudgedQuery` whose file sets ``split``, that value wins. Otherwise
    the answer is a pure function of ``salt`` and the query id (SHA-256), so it is the
    same on every machine and run, and adding queries never moves existing ones.
    About ``test_fraction`` of the ids land in ``"test"``.
    """
    if (
        isinstance(test_fraction, bool)
        or not isinstance(test_fraction, int | float)
        or not 0.0 <= test_fraction <= 1.0
    ):
        raise ConfigError("test_fraction", f"must be between 0 and 1, got {test_fraction!r}")
    if isinstance(query, JudgedQuery):
        if query.split is not None:
            return query.split
        query_id = query.query_id
    else:
        query_id = query
    digest = hashlib.sha256(f"{salt}\x00{query_id}".encode()).digest()
    position = int.from_bytes(digest[:8], "big") / 2.0**64  # uniform in [0, 1)
    return "test" if position < test_fraction else "dev"


def select_split(
    queries: Iterable[JudgedQuery],
    split: Split,
    test_fraction: float = 0.5,
    salt: str = "pgfunnel",
) -> list[JudgedQuery]:
    """The queries that :func:`split_of` puts in ``split``, in their original order."""
    if split not in _SPLITS:
        raise ConfigError("split", f"must be 'dev' or 'test', got {split!r}")
    return [q for q in queries if split_of(q, test_fraction, salt) == split]


def chunk_key(item_id: str) -> tuple[str, int] | None:
    """``(citekey, ordinal)`` when ``item_id`` is a chunk key (``doc#3``), else None: a
    citekey may hold a ``#`` itself (``c#-intro``, ``faq#billing``), so only a final
    ``#`` followed by digits makes a chunk key."""
    citekey, sep, ordinal = item_id.rpartition("#")
    if sep and citekey and ordinal.isascii() and ordinal.isdigit():
        return citekey, int(ordinal)
    return None


def judging_level(queries: Sequence[JudgedQuery]) -> JudgingLevel:
    """``"chunk"`` if item ids are chunk keys (``citekey#ordinal``, :func:`chunk_key`),
    else ``"document"``.

    Mixing the two in one set is an :class:`InvalidInputError`. A set with no judged items
    at all is document-level.
    """
    chunk_seen: tuple[str, str] | None = None
    doc_seen: tuple[str, str] | None = None
    for q in queries:
        # a file's line says where to look; a made-up id (q-3f2a...) would not
        where = f"line {q.line} (query {q.query_id!r})" if q.line is not None \
            else f"query {q.query_id!r}"
        for item in q.relevant:
            if chunk_key(item) is not None:
                chunk_seen = chunk_seen or (where, item)
            else:
                doc_seen = doc_seen or (where, item)
            if chunk_seen and doc_seen:
                raise InvalidInputError(
                    "judged queries mix chunk-level and document-level items: "
                    f"{chunk_seen[0]} judges chunk {chunk_seen[1]!r}, "
                    f"{doc_seen[0]} judges document {doc_seen[1]!r}"
                )
    return "chunk" if chunk_seen else "document"


def citekey_of(item_id: str) -> str:
    """The document part of an item id (``"doc#3"`` → ``"doc"``; a citekey, ``c#-intro``
    included, is itself)."""
    key = chunk_key(item_id)
    return key[0] if key is not None else item_id
