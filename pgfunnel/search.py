"""The search API: embed, candidate query, optional rerank in Python, final query.

>>> funnel = Funnel("postgresql://...", collection="default")
>>> response = funnel.search("refund monthly plan", k=5, principals=["alice"])
>>> [r.citekey for r in response.results]

With ``rerank`` off the answer is exactly ``funnel_search``'s (one round trip). With
it on, the candidate pool is fetched (one round trip), the reranker reorders the
first ``rerank_depth`` candidates, and the final query applies the per-citekey cap
and the cut to k (a second round trip): rerank happens before the cap.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import math
import numbers
import os
import shlex
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pgfunnel import defaults as sql_defaults
from pgfunnel.db import (
    connect,
    own_transaction,
    require_schema,
    resolve_dsn,
    try_register_vector,
    tuple_rows,
)
from pgfunnel.embedder import Embedder, check_vector
from pgfunnel.errors import (
    ConfigError,
    ConnectionFailedError,
    InvalidInputError,
    InvalidVectorError,
    MissingIdentityError,
    PgfunnelError,
    RerankError,
    SchemaMissingError,
    SchemaOutdatedError,
    SchemaOutdatedWarning,
    SearchNoticeWarning,
    SearchTimeoutError,
    check_sql_text,
    shown,
    string_list,
    text_problem,
    translate,
    warn_at_caller,
)
from pgfunnel.rerank import check_gate_margin, reranker_name
from pgfunnel.security import schema_access_named, with_schema_access_hint
from pgfunnel.sources import JSON_NUL, as_utc, non_string_key

MAX_QUERY_CHARS = sql_defaults.QUERY_CHARS_MOST


class _ErrorAlreadyRaised(logging.Filter):
    """psycopg logs "error ignored terminating <Pipeline ...>: pipeline aborted" when a
    statement inside a pipeline fails (a search runs in one), and "...: the connection is
    lost" when the server ends the connection during one: the failure itself is raised
    (psycopg logs this line only while another exception leaves the block), so this line,
    which Python's last-resort handler prints to stderr when nothing configured logging,
    only looks like a second problem above the real one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != "error ignored terminating %r: %s":
            return True
        message = record.getMessage()
        return not ("pipeline aborted" in message or "the connection is lost" in message)


logging.getLogger("psycopg").addFilter(_ErrorAlreadyRaised())


_INT_PARAMS = frozenset({"k", "overfetch", "per_source_cap", "ef_search"})
_OPTIONAL_INT_PARAMS = frozenset({"lexical_depth", "dense_depth", "statement_timeout_ms"})
_FLOAT_PARAMS = frozenset({"rrf_k", "k1", "b"})
_STR_PARAMS = frozenset({"collection", "fusion"})
_OPTIONAL_STR_PARAMS = frozenset({"tenant", "language"})


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _is_rerank_score(value: Any) -> bool:
    """A score a caller's own reranker may hand final(): any real number (a model's numpy
    float, a Fraction, a Decimal read from a database or a JSON parsed with
    ``parse_float=Decimal``, which was refused as "must be a number"), sent as a float;
    not a bool (True is no score) nor a complex number."""
    return isinstance(value, (numbers.Real, Decimal)) and not isinstance(value, (bool, np.bool_))


def _as_float(name: str, value: Any) -> float:
    """A number as a float; an integer past double precision is a ConfigError naming the
    parameter (float() raised a raw OverflowError, and its repr can be too long to print)."""
    try:
        return float(value)
    except OverflowError:
        raise ConfigError(name, "must be a number within double precision (about 1.8e308), "
                                f"got {shown(int(value))}") from None
    except ValueError:
        # a signalling NaN Decimal, which float() refuses: no score either
        return math.nan


#: the range of the SQL functions' integer arguments
_INT32 = (-2_147_483_648, 2_147_483_647)


def _checked(name: str, value: Any) -> Any:
    """A value of the wrong type would reach Postgres as an argument no function takes
    (a float k), which reads as a missing schema; name the parameter instead. Numpy
    numbers become Python ones (psycopg does not adapt them)."""
    if name in _INT_PARAMS or (name in _OPTIONAL_INT_PARAMS and value is not None):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise ConfigError(name, "must be an integer, got "
                                    f"{type(value).__name__} {shown(value)}")
        if not _INT32[0] <= int(value) <= _INT32[1] and name != "statement_timeout_ms":
            # psycopg would send it as a bigint, and the call would match no function
            # (the timeout's own check, in build, says more)
            big = int(value)
            raise ConfigError(name, f"must be at most {_INT32[1]:,} (a 32-bit integer), got "
                                    + (f"{big:,}" if big.bit_length() <= 64 else shown(big)))
        return int(value)
    if name in _FLOAT_PARAMS:
        if not _is_number(value):
            raise ConfigError(name, f"must be a number, got {type(value).__name__} {shown(value)}")
        return _as_float(name, value)
    if name in _STR_PARAMS or (name in _OPTIONAL_STR_PARAMS and value is not None):
        if not isinstance(value, str):
            what = "a string" if name in _STR_PARAMS else "a string or None"
            raise ConfigError(name, f"must be {what}, got {type(value).__name__} {shown(value)}")
        if value == "" and name in _OPTIONAL_STR_PARAMS:
            # ingest refuses "" for a tenant or language: no document has it, so nothing
            # would match
            raise ConfigError(name, "must be a non-empty string or None, got ''")
        if name in _OPTIONAL_STR_PARAMS and value != value.strip():
            # nor one with whitespace at either end, which ingest refuses too
            raise ConfigError(name, f"must not begin or end with whitespace, got {shown(value)}")
        check_sql_text(name, value)
    elif name == "trace" and not isinstance(value, bool):
        raise ConfigError(name, f"must be True or False, got {shown(value)}")
    return value


def _check_plan_params(p: Any) -> None:
    if not isinstance(p, SearchParams):
        raise ConfigError("p", "must be a SearchParams (SearchParams.build(**params)), got "
                               f"{type(p).__name__}")


def _check_ordered(ordered: Any, *, reranked: bool = False) -> list[Candidate]:
    """final()'s pool: candidates, as candidates() returns them (a list of ids, or None,
    raised an AttributeError or a TypeError). With ``reranked``, each candidate's
    ``rerank_score`` too, which a caller's own rerank sets: see :func:`_check_rerank_scores`."""
    if isinstance(ordered, (str, bytes, Mapping)) or not isinstance(ordered, Iterable):
        raise ConfigError("ordered", "must be a list of Candidate (what candidates() "
                                     f"returns), got {type(ordered).__name__}")
    items = list(ordered)
    bad = next((c for c in items if not isinstance(c, _Ranked)), None)
    if bad is not None:
        raise ConfigError("ordered", "must be a list of Candidate (what candidates() "
                                     f"returns), got {type(bad).__name__} "
                                     f"{shown(bad, 40)} in it")
    if reranked:
        _check_rerank_scores(items)
    return items


def _candidate_named(c: _Ranked) -> str:
    return f"chunk {c.chunk_id}, {c.citekey}#{c.ordinal}"


def _check_rerank_scores(items: Sequence[_Ranked]) -> None:
    """The ``rerank_score`` of each candidate a reranked final() is given, named by its
    place in ``ordered`` and its chunk: a string failed in the driver ("cannot dump lists
    of mixed types", naming no candidate), NaN in SQL ("rerank_scores: must not contain
    NaN", naming none either), and a candidate left unscored above a scored one gave the
    scored ones rerank ranks that skipped it (the SQL ranks a scored candidate by its place
    in ``ordered``), where the rerank scores a head of the pool and leaves the tail after
    it, as ``rerank_pool`` does."""
    unscored: int | None = None
    for i, c in enumerate(items):
        score = getattr(c, "rerank_score", None)
        if score is None:
            if unscored is None:
                unscored = i
            continue
        name = f"ordered[{i}].rerank_score"
        if not _is_rerank_score(score):
            raise ConfigError(name, f"must be a number or None ({_candidate_named(c)}), got "
                                    f"{type(score).__name__} {shown(score, 60)}")
        value = _as_float(name, score)
        if not math.isfinite(value):
            # a Decimal or Fraction as given: Decimal('1E+400') is no "inf" in the caller's code
            given = value if isinstance(score, (float, np.floating)) else shown(score, 60)
            raise ConfigError(name, f"must be a finite number or None ({_candidate_named(c)}),"
                                    f" got {given}")
        if unscored is not None:
            raise ConfigError(
                name, f"is set ({_candidate_named(c)}) below ordered[{unscored}] "
                f"({_candidate_named(items[unscored])}), whose rerank_score is None: with "
                "reranked=True the candidates your reranker scored come first, in its "
                "order, and those it did not score after them (as rerank_pool leaves them); "
                "score that candidate too, or move it below the scored ones")


def _check_json_mapping(name: str, value: Any) -> None:
    """``metadata_filter``, ``notes`` and ``log_notes``: None or a mapping jsonb can hold,
    as ``Jsonb(dict(value))`` sends it (a set raised a raw TypeError, a structure nested
    too deeply a RecursionError, NaN "invalid input syntax for type json", a NUL
    "unsupported Unicode escape sequence", none of them naming the argument). jsonb holds
    no NUL and no lone surrogate; no document's metadata has one (ingest refuses them), so
    a filter with one could match nothing."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise ConfigError(name, f"must be a mapping (a JSON object) or None, got "
                                f"{type(value).__name__}")
    try:
        as_json = json.dumps(dict(value), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(name, f"is not JSON ({exc})") from None
    except RecursionError:
        raise ConfigError(name, "is nested too deeply") from None
    check_sql_text(name, as_json)
    if JSON_NUL.search(as_json):
        raise ConfigError(name, "contains a NUL character (\\u0000), which jsonb cannot "
                                f"hold: {shown(value)}")
    if name == "metadata_filter" and (
            problem := non_string_key(value, name, "sent")) is not None:
        # json.dumps sends {1: 1} as {"1": 1} without a word: a filter on the key "1"
        raise ConfigError(name, problem)


#: the largest statement_timeout Postgres takes (milliseconds, a 32-bit integer)
_MAX_TIMEOUT_MS = 2_147_483_647


def check_principals(value: Any) -> tuple[str, ...]:
    """The reader's principals as a tuple of strings, or a ConfigError naming what is
    wrong. Any iterable is read once (a generator used up by a first check would leave a
    reader with no principals: public documents only, silently)."""
    if value is None:
        raise MissingIdentityError("must not be None; pass [] for public documents only")
    if isinstance(value, (str, bytes)):
        raise ConfigError("principals", "must be a list of strings, not one string")
    if isinstance(value, Mapping):
        # iterated, a mapping gives its keys: {"user": "alice"} would search as "user"
        raise ConfigError("principals", "must be a list of strings, got a "
                          f"{type(value).__name__} (pass its values or keys as a list)")
    try:
        items = list(value)
    except TypeError:
        raise ConfigError("principals", "must be a list of strings, got "
                          f"{type(value).__name__}") from None
    if any(x is None for x in items):
        # a caller's missing identity, not a principal named "None"
        raise MissingIdentityError(f"must not contain None, got {shown(items)}")
    if any(x == "" for x in items):
        raise ConfigError("principals", f"must not contain an empty string, got {shown(items)}")
    if not all(isinstance(x, str) for x in items):
        # str() would turn b"alice" into "b'alice'", a principal no document names
        raise ConfigError("principals", f"must hold only strings, got {shown(items)}")
    if any(x != x.strip() for x in items):
        # nor ' alice ': ingest refuses such a reader, so it would match nothing
        raise ConfigError("principals", "must not begin or end with whitespace, got "
                          f"{shown(items)}")
    for item in items:
        check_sql_text("principals", item)
    return tuple(items)


@dataclass(frozen=True)
class SearchParams:
    """Every knob of one search; the defaults are the SQL functions' (pgfunnel.defaults)."""

    k: int = sql_defaults.K
    collection: str = sql_defaults.COLLECTION
    #: any sequence of names but a string (a list as documented); kept as a tuple
    principals: Sequence[str] = ()
    tenant: str | None = None
    language: str | None = None
    as_of: Any = None
    metadata_filter: Mapping[str, Any] | None = None
    fusion: str = sql_defaults.FUSION
    rrf_k: float = sql_defaults.RRF_K
    #: None: the search chooses (:data:`pgfunnel.defaults.AUTOMATIC_WEIGHTS`): `default`;
    #: under min-max, `identifier` for a query that is one identifier
    #: (``pgfunnel._default_weights``) or whose best lexical match holds its rarest word,
    #: a number and 0.3 or more of its idf, and `dense_leads` when the best lexical
    #: match holds under 0.4 of the query's idf or lacks its rarest word, one of 0.4 or
    #: more of its idf (``pgfunnel._pool``; docs/tuning.md)
    #: two numbers, a list, tuple or 1-D numpy array as documented; kept as a tuple of
    #: floats (the annotation is what the constructor and dataclasses.replace take)
    weights: Sequence[float] | npt.NDArray[Any] | None = None
    lexical_depth: int | None = None
    dense_depth: int | None = None
    overfetch: int = sql_defaults.OVERFETCH
    per_source_cap: int = sql_defaults.PER_SOURCE_CAP
    ef_search: int = sql_defaults.EF_SEARCH
    k1: float = sql_defaults.K1
    b: float = sql_defaults.B
    trace: bool = False
    statement_timeout_ms: int | None = None

    @classmethod
    def build(cls, **kwargs: Any) -> SearchParams:
        """The parameters from keyword arguments; an unknown name is a ConfigError (the
        constructor's TypeError would not name it as one), and the values are checked
        as the constructor checks them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(unknown[0], "unknown search parameter (known: "
                              f"{', '.join(sorted(known))})")
        return cls(**kwargs)

    def __post_init__(self) -> None:
        # every way to make one is checked alike: build(), the constructor (candidates()
        # and final() take a SearchParams; principals="alice" was searched as the
        # principals a, l, i, c, e) and dataclasses.replace
        kwargs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        kwargs["principals"] = check_principals(kwargs["principals"])
        coll = kwargs["collection"]
        if isinstance(coll, str) and not coll.strip():
            # said as ingest says it: "collection '' does not exist (run `pgfunnel ingest`
            # into it first)" sent the user to an ingest that refuses the name
            raise ConfigError("collection", f"must be a non-empty name, got {coll!r}")
        _check_json_mapping("metadata_filter", kwargs.get("metadata_filter"))
        as_of = kwargs.get("as_of")
        if as_of is not None and not isinstance(as_of, (dt.datetime, dt.date)):
            raise ConfigError("as_of", f"must be a datetime or None, got "
                                       f"{type(as_of).__name__} {shown(as_of)}")
        if isinstance(as_of, dt.datetime):
            # without a time zone it is UTC, as ingest reads a record's valid_from: sent
            # naive, Postgres read it in the session's TimeZone, hours off where that
            # was not UTC
            kwargs["as_of"] = as_utc(as_of)
        elif isinstance(as_of, dt.date):
            kwargs["as_of"] = dt.datetime.combine(as_of, dt.time(), tzinfo=dt.UTC)
        if kwargs.get("weights") is not None:
            w = kwargs["weights"]
            if isinstance(w, np.ndarray) and w.ndim == 1:
                # np.array([1.0, 0.5]) is no Sequence, and was refused as "must be two
                # numbers"; numpy numbers are taken everywhere else
                w = list(w)
            if isinstance(w, (str, bytes)) or not isinstance(w, Sequence) or \
                    not all(_is_number(x) for x in w):
                raise ConfigError("weights",
                                  f"must be two numbers [lexical, dense], got {shown(w)}")
            if len(w) != 2:
                # funnel_search refused [1, 2, 3] too, but in SQL's words ({1,2,3}), and a
                # caller of candidates()/final() learned it only at the database
                count = f"{len(w)} number{'' if len(w) == 1 else 's'}"
                raise ConfigError("weights", "must be two numbers [lexical, dense], got "
                                             f"{count}: {shown(kwargs['weights'])}")
            kwargs["weights"] = tuple(_as_float("weights", x) for x in w)
        kwargs = {name: _checked(name, value) for name, value in kwargs.items()}
        timeout = kwargs["statement_timeout_ms"]
        if timeout is not None and not 1 <= timeout <= _MAX_TIMEOUT_MS:
            # Postgres' own refusal of a larger one read as a garbled ConfigError
            raise ConfigError("statement_timeout_ms", "must be a positive number of "
                              f"milliseconds up to {_MAX_TIMEOUT_MS}, got {shown(timeout)}")
        for name, value in kwargs.items():
            object.__setattr__(self, name, value)  # frozen: the checked, normalised values

    def sql_args(self) -> dict[str, Any]:
        """Arguments shared by candidates() and funnel_search()."""
        return {
            "k": self.k, "collection": self.collection, "principals": list(self.principals),
            "tenant": self.tenant, "language": self.language,
            "metadata_filter": Jsonb(dict(self.metadata_filter))
            if self.metadata_filter is not None else None,
            "fusion": self.fusion, "rrf_k": self.rrf_k,
            "weights": None if self.weights is None else list(self.weights),
            "lexical_depth": self.lexical_depth, "dense_depth": self.dense_depth,
            "overfetch": self.overfetch, "per_source_cap": self.per_source_cap,
            "ef_search": self.ef_search, "k1": self.k1, "b": self.b,
        }

    def config(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("principals")
        d.pop("tenant")
        d["as_of"] = None if self.as_of is None else str(self.as_of)
        return d


@dataclass
class _Ranked:
    """A chunk with its rank and score in each stage up to fusion."""

    chunk_id: int
    citekey: str
    title: str
    heading: str
    text: str
    ordinal: int
    metadata: dict[str, Any]
    lexical_rank: int | None
    lexical_score: float | None
    dense_rank: int | None
    dense_score: float | None
    fused_rank: int
    fused_score: float


@dataclass
class Candidate(_Ranked):
    """A member of the candidate pool (what ``candidates()`` returns)."""

    document_id: int = 0
    rerank_rank: int | None = None
    rerank_score: float | None = None
    #: the headings the chunk's section sits under, outermost first, " > "-joined
    section_path: str = ""


class CandidatePool(list[Candidate]):
    """What :meth:`Funnel.candidates` returns: the pool, a list of :class:`Candidate`, in
    fused order, and ``fusion``, how the pool was fused (the weights the search chose
    or was given, the rule that chose them and the legs that ran), as
    ``SearchResponse.fusion`` says it for ``Funnel.search``; None on an older release's
    functions, which do not say it. ``index_version_id``: the collection's active index
    version, read in the pool's transaction (what ``final(index_version_id=...)`` takes
    for a trace), as ``SearchResponse.index_version_id`` says it. ``notices``: what the
    search said of the query (words not searched, an empty query), as
    ``SearchResponse.notices`` holds it; each is also raised as a
    :class:`SearchNoticeWarning`."""

    fusion: FusionUsed | None
    index_version_id: int | None
    notices: list[str]

    def __init__(self, candidates: Iterable[Candidate] = (), *,
                 fusion: FusionUsed | None = None,
                 index_version_id: int | None = None,
                 notices: Iterable[str] = ()) -> None:
        super().__init__(candidates)
        self.fusion = fusion
        self.index_version_id = index_version_id
        self.notices = list(notices)


@dataclass
class Result(_Ranked):
    """A returned chunk (what ``final()`` and ``funnel_search`` return)."""

    rerank_rank: int | None
    rerank_score: float | None
    final_rank: int
    search_id: int | None = None
    #: the headings the chunk's section sits under, outermost first, " > "-joined
    section_path: str = ""
    #: the id of the chunk's document (``pgfunnel.document.id``), as a Candidate has it:
    #: a link to an application's own row without a query of its own. None only where a
    #: plain search found a chunk written in the moment it ran: funnel_search (volatile)
    #: reads a snapshot later than its statement's, which the lookup reads, so a chunk
    #: committed between the two is found without its row; one deleted between them is
    #: not found at all, or found with its row still in the older snapshot
    document_id: int | None = None

    @property
    def item_key(self) -> str:
        """The chunk's evaluation key, ``citekey#ordinal``."""
        return f"{self.citekey}#{self.ordinal}"


@dataclass(frozen=True)
class FusionUsed:
    """How a search fused its legs, as the database ran it (``pgfunnel._pool`` says it in
    the search's transaction): ``fusion`` the method (``minmax``, ``rrf``, ``zscore``), or
    ``none`` when one leg alone ran; ``legs`` those that ran; ``rrf_k`` under RRF, else
    None; ``weights`` the pair ``(lexical, dense)`` used, None for one leg; and
    ``weights_rule`` the rule that chose them (``default``, ``identifier``,
    ``dense_leads``: ``pgfunnel._automatic_weights()``), None for weights given."""

    fusion: str
    legs: tuple[str, ...]
    rrf_k: float | None
    weights: tuple[float, float] | None
    weights_rule: str | None
    #: the pair the database reported even for one leg, which a traced search logs in its
    #: config (funnel_search and Funnel.search do): final(fusion_used=...) logs it too, so
    #: one search has one config hash whichever route ran it. Not part of the public value
    _weights_logged: tuple[float, float] | None = field(default=None, repr=False,
                                                        compare=False)
    #: the depth each leg read (:class:`PoolUsed`), which final(fusion_used=...)
    #: logs as Funnel.search logs it. Not part of the public value
    _depths_logged: dict[str, int | None] = field(default_factory=dict, repr=False,
                                                  compare=False)

    def as_dict(self) -> dict[str, Any]:
        """As JSON reads it (``pgfunnel search --json``'s ``fusion``)."""
        return {"fusion": self.fusion, "legs": list(self.legs), "rrf_k": self.rrf_k,
                "weights": None if self.weights is None else list(self.weights),
                "weights_rule": self.weights_rule}


@dataclass
class SearchResponse:
    query: str | None
    results: list[Result]
    pool: list[Candidate] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    reranked: bool = False
    rerank_skipped_reason: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    search_id: int | None = None
    #: query transformations applied (rewrite, follow-up, multi-query, decomposition),
    #: each a dict with its reason; also stored in search_log.config["transforms"] when traced
    transforms: list[dict[str, Any]] = field(default_factory=list)
    #: the id of the collection's active index version (``pgfunnel.index_version.id``), read
    #: in the search's transaction: the version a reranked search and every search of a
    #: merged plan read; a plain search reads it in a statement of its own, so a switch
    #: committing between the two can make it name the new version
    index_version_id: int | None = None
    #: the fusion, legs and weights the search ran (None from an older release's functions,
    #: before `pgfunnel migrate`, and for a merged plan's several searches)
    fusion: FusionUsed | None = None


_RESULT_COLUMNS = sql.SQL(
    "chunk_id, citekey, title, heading, text, ordinal, metadata, lexical_rank, "
    "lexical_score, dense_rank, dense_score, fused_rank, fused_score, "
    "rerank_rank, rerank_score, final_rank, search_id, section_path")
_CANDIDATE_COLUMNS = sql.SQL(
    "chunk_id, citekey, title, heading, text, ordinal, metadata, lexical_rank, "
    "lexical_score, dense_rank, dense_score, fused_rank, fused_score, "
    "document_id, section_path")
_ARG_NAMES = ("k", "collection", "principals", "tenant", "language", "metadata_filter", "fusion",
              "rrf_k", "weights", "lexical_depth", "dense_depth", "overfetch", "per_source_cap",
              "ef_search", "k1", "b")


def _named_args(names: Sequence[str]) -> sql.Composable:
    return sql.SQL(", ").join(sql.SQL("{} => {}").format(sql.Identifier(n), sql.Placeholder(n))
                              for n in names)


# composed once, as text: every search sends the same statement, prepared, and composing
# it again per search would cost each one the quoting.
# A plain search's document_id, which funnel_search's rows do not carry (its columns are
# the documented ones): looked up by the chunk's primary key, one index probe a row (a
# join could plan as a hash over every chunk), in the search's own statement. Measured on
# 10 rows: about 0.016 ms a search for the owner, about 0.12 ms for a reader under RLS,
# whose chunk policy probes the document and its visibility for each row; a
# funnel_search column would cost neither, but needs a migration. final()'s rows take it
# from the pool they were given instead (_results_of_final): each Candidate carries it,
# so that route pays nothing for it
_RESULT_DOCUMENT_ID = sql.SQL(
    "(select ch.document_id from pgfunnel.chunk ch where ch.id = f.chunk_id)")
_FUNNEL_SQL = sql.SQL(
    "select {cols}, {document_id} from pgfunnel.funnel_search("
    "query_text => %(query_text)s, query_embedding => %(query_embedding)b, "
    "as_of => coalesce(%(as_of)s, now()), trace => %(trace)s, {args}) f").format(
        cols=_RESULT_COLUMNS, args=_named_args(_ARG_NAMES),
        document_id=_RESULT_DOCUMENT_ID).as_string()
_CANDIDATES_SQL = sql.SQL(
    "select {cols} from pgfunnel.candidates("
    "query_text => %(query_text)s, query_embedding => %(query_embedding)b, "
    "as_of => coalesce(%(as_of)s, now()), {args})").format(
        cols=_CANDIDATE_COLUMNS, args=_named_args(_ARG_NAMES)).as_string()
_FINAL_SQL = sql.SQL(
    "select {cols} from pgfunnel.final("
    "chunk_ids => %(chunk_ids)s, fused_ranks => %(fused_ranks)s, "
    "fused_scores => %(fused_scores)s, lexical_ranks => %(lexical_ranks)s, "
    "lexical_scores => %(lexical_scores)s, dense_ranks => %(dense_ranks)s, "
    "dense_scores => %(dense_scores)s, rerank_scores => %(rerank_scores)s, "
    "k => %(k)s, collection => %(collection)s, principals => %(principals)s, "
    "tenant => %(tenant)s, language => %(language)s, "
    "as_of => coalesce(%(as_of)s, now()), metadata_filter => %(metadata_filter)s, "
    "per_source_cap => %(per_source_cap)s, trace => %(trace)s, "
    "query_text => %(query_text)s, config => %(config)s, "
    "index_version_id => %(index_version_id)s, log_notes => %(log_notes)s)").format(
        cols=_RESULT_COLUMNS).as_string()


#: the documents of the chunks final() was given without one (hand-built candidates)
_CHUNK_DOCUMENTS_SQL = ("select id, document_id from pgfunnel.chunk "
                        "where id = any(%s::bigint[])")


def _results_of_final(rows: Iterable[Sequence[Any]], ordered: Sequence[_Ranked],
                      looked_up: Mapping[int, int] | None = None) -> list[Result]:
    """final()'s rows as Results, each with the document_id of its candidate in
    ``ordered`` (final returns only chunks it was given). A candidate built by hand
    without one holds the default 0, which is no document's id: its result takes the
    one ``looked_up`` holds for its chunk (final() reads them), else None."""
    documents = {c.chunk_id: getattr(c, "document_id", 0) for c in ordered}
    looked_up = looked_up or {}
    results = []
    for row in rows:
        result = Result(*row)
        result.document_id = (documents.get(result.chunk_id)
                              or looked_up.get(result.chunk_id) or None)
        results.append(result)
    return results


#: the id of the session's last traced search (``pgfunnel.last_search_id()``), read without
#: the function so that a database whose functions predate it answers NULL, not an error
_LAST_SEARCH_ID_SQL = ("select nullif(pg_catalog.current_setting('pgfunnel.last_search_id', "
                       "true), '')::bigint")


#: what ``pgfunnel._pool`` ran (its weights, their rule, the legs), which it sets for the
#: search's transaction; NULL on an older release's functions, which set nothing
FUSION_USED_SQL = ("select nullif(pg_catalog.current_setting('pgfunnel.fusion_used', "
                   "true), '')::jsonb")


#: candidates()'s pool with the id of the collection's active index version, in one
#: statement: pgfunnel.candidates is stable, so it reads the statement's snapshot, and the
#: version is the one the pool was drawn from. Read in a statement after it, in a
#: read-committed transaction, a switch committing in between named the next version.
#: An empty pool is one row of NULLs beside the version
_CANDIDATES_WITH_VERSION_SQL = sql.SQL(
    "select {cols}, active.id from (select (select iv.id from pgfunnel.index_version iv "
    "join pgfunnel.collection ic on ic.id = iv.collection_id "
    "where ic.name = %(collection)s and iv.state = 'active') as id) active "
    "left join lateral pgfunnel.candidates("
    "query_text => %(query_text)s, query_embedding => %(query_embedding)b, "
    "as_of => coalesce(%(as_of)s, now()), {args}) c on true "
    "order by c.fused_rank").format(
        cols=sql.SQL(", ").join(sql.Identifier("c", n.strip())
                                for n in _CANDIDATE_COLUMNS.as_string().split(",")),
        args=_named_args(_ARG_NAMES)).as_string()


class PoolUsed(NamedTuple):
    """What ``pgfunnel._pool`` says a search ran, from the row of :data:`FUSION_USED_SQL`:
    the weights ``(lexical, dense)``, the rule that chose them (None for weights given),
    the legs that ran, and the depth each leg read as a traced search logs it in its
    ``search_log.notes`` (``lexical_depth_used``, ``dense_depth_used``; None for a leg
    that did not run): a default depth follows the pool as it widens, so the config's
    depths (those given, null) do not tell it, and ``explain --search-id`` shows it.
    ``depths`` is empty where the functions did not say (an older release's)."""

    weights: tuple[float, float]
    weights_rule: str | None
    legs: tuple[str, ...]
    depths: dict[str, int | None]


def fusion_used_of(row: Any) -> PoolUsed | None:
    """What a search ran (:class:`PoolUsed`), from the row of :data:`FUSION_USED_SQL`;
    None when the functions did not say."""
    if row is None or not isinstance(row[0], Mapping):
        return None
    used = row[0]
    lexical, dense = (float(w) for w in used["weights"])
    legs = tuple(leg for leg in ("lexical", "dense") if used.get(leg))
    depths: dict[str, int | None] = {} if "lexical_depth" not in used else {
        f"{leg}_depth_used": None if used[f"{leg}_depth"] is None else int(used[f"{leg}_depth"])
        for leg in ("lexical", "dense")}
    return PoolUsed((lexical, dense), used.get("weights_rule"), legs, depths)


def pool_used_notes(used: PoolUsed | None,
                    weights_given: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a search reranked in Python logs of its pool, as funnel_search logs it: the
    config's ``weights`` (the pair the pool used) and the log notes' ``weights_given``,
    so that a replay of a search that let them be chosen chooses again (LOGGED_PARAMS; a
    config with the weights as given held null for chosen ones, and did not say which
    pair ran), and the depth each leg read (:class:`PoolUsed`). Both empty when the
    functions did not say what they used."""
    if used is None:
        return {}, {}
    return {"weights": list(used.weights)}, {"weights_given": weights_given, **used.depths}


def _fusion_of(used: PoolUsed | None, p: SearchParams) -> FusionUsed | None:
    if used is None:
        return None
    if len(used.legs) < 2:
        # one leg alone fuses nothing: neither a method nor weights applied
        return FusionUsed("none", used.legs, None, None, None, used.weights, used.depths)
    return FusionUsed(p.fusion, used.legs, p.rrf_k if p.fusion == "rrf" else None,
                      used.weights, used.weights_rule, used.weights, used.depths)


def _search_id(conn: psycopg.Connection[Any], results: Sequence[Result],
               trace: bool) -> int | None:
    """A search's id: its rows carry it, and a traced search that found nothing has none
    to carry it, so only then is it read from the session (in the search's transaction,
    before anything else can search on the connection)."""
    if results:
        return results[0].search_id
    if not trace:
        return None
    row = conn.execute(_LAST_SEARCH_ID_SQL, prepare=True).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def rerank_head(pool_size: int, rerank_depth: int | None, p: SearchParams) -> int:
    """How many candidates, from the top of the pool, the reranker scores.

    ``rerank_depth`` when given; otherwise the pool as asked for, k x overfetch. A pool
    that the search widened because the per-source cap could not fill k from it (up to
    16x, see docs/sql.md) keeps its extra tail in fused order: it is there for the cap,
    and scoring it would multiply the rerank cost of those searches."""
    limit = p.k * p.overfetch if rerank_depth is None else rerank_depth
    return min(limit, pool_size)


def rerank_pool(reranker: Any, query: str, pool: list[Candidate], depth: int) -> list[Candidate]:
    """The pool with its first ``depth`` candidates scored by ``reranker`` and put in its
    order (``rerank_score`` and ``rerank_rank`` set), the unscored tail in fused order.
    A custom reranker's output is checked as a whole before any candidate is touched:
    one row per candidate, each corpus_id once, finite scores."""
    from pgfunnel.rerank import checked_ranking

    head = pool[:depth]
    try:
        output = reranker.rank(query, [c.text for c in head])
    except PgfunnelError:
        raise
    except Exception as exc:
        # the model's own failure (out of GPU memory, a tokenizer error) as the library's
        # error, so that an application catching PgfunnelError can fall back to the search
        # without rerank; the original stays as the cause
        raise RerankError(f"the reranker failed on {len(head)} candidates: "
                          f"{type(exc).__name__}: {exc}") from exc
    ranked = checked_ranking(output, len(head))
    for pos, (corpus_id, score) in enumerate(ranked, start=1):
        head[corpus_id].rerank_score = score
        head[corpus_id].rerank_rank = pos
    return [head[corpus_id] for corpus_id, _ in ranked] + pool[depth:]


def refuse_unused_rrf_k(given: Mapping[str, Any], fusion: str) -> None:
    """``rrf_k`` given for a search that fuses by another method, which has no constant:
    a ConfigError, as the CLI's ``--rrf-k`` is, rather than a value read by nothing."""
    if "rrf_k" in given and fusion != "rrf":
        raise ConfigError("rrf_k", f"applies only with fusion 'rrf' (this search fuses by "
                                   f"{fusion!r}, which has no constant)")


def query_text_problem(query: str) -> str | None:
    """What keeps ``query`` from being searched, as a clause ("is 20,000 characters long;
    ..."), or None: over MAX_QUERY_CHARS, or text Postgres cannot hold. The search says it
    of ``query_text``; the query files of eval and ``versions compare`` say it with the
    line, before any search runs."""
    if len(query) > MAX_QUERY_CHARS:
        return (f"is {len(query):,} characters long; a search takes at most "
                f"{MAX_QUERY_CHARS:,}")
    return text_problem(query)


def check_query_text(query: str | None) -> str | None:
    """Reject text Postgres cannot hold or that is absurdly long, before any SQL runs."""
    if query is None:
        return None
    if not isinstance(query, str):
        raise InvalidInputError(f"query_text: must be a string, got {type(query).__name__}")
    if (problem := query_text_problem(query)) is not None:
        raise InvalidInputError(f"query_text: {problem}")
    return query


def check_history_text(history: Any) -> list[str]:
    """``history=`` as a list of turns, each one text Postgres can hold: a turn with a NUL
    byte or a lone surrogate is refused as the query is (``history[1]: contains a NUL
    byte, ...``), naming the turn, as the CLI's ``--history`` and an eval file's history
    refuse it; it was taken, and the follow-up hook read it."""
    turns = string_list(history, "history")
    for i, turn in enumerate(turns):
        if (problem := text_problem(turn)) is not None:
            raise InvalidInputError(f"history[{i}]: {problem}")
    return turns


#: a Funnel's own arguments, which a search does not take per call
FUNNEL_SETTINGS: tuple[str, ...] = ("reranker", "rerank_depth", "rerank_gate_margin",
                                    "embedder", "rewriter", "followup")


def check_rerank_depth(rerank_depth: Any) -> int | None:
    """A Funnel's ``rerank_depth``: None, or an integer of at least 1 (a numpy one is
    taken, as search parameters take one), else a ConfigError naming it."""
    if rerank_depth is not None and (isinstance(rerank_depth, bool)
                                     or not isinstance(rerank_depth, (int, np.integer))
                                     or rerank_depth < 1):
        raise ConfigError("rerank_depth", f"must be an integer of at least 1, got "
                                          f"{shown(rerank_depth)}")
    return None if rerank_depth is None else int(rerank_depth)


def _check_source(source: Any) -> Any:
    """A Funnel's ``source`` as given, if it is one it can use: None, a DSN (a string or a
    SQLAlchemy URL), a psycopg Connection or a (synchronous) connection pool. Anything
    else failed only at the first search, with a TypeError from deep in the DSN parsing."""
    if isinstance(source, str):
        resolve_dsn(source)  # an empty DSN or one libpq cannot take, said now
        return source
    if (source is None or isinstance(source, psycopg.Connection)
            or hasattr(source, "render_as_string")):
        return source
    if isinstance(source, type):
        # psycopg.Connection itself has a `connection` attribute, as pools do
        raise ConfigError("source", f"got the class {source.__module__}.{source.__qualname__}"
                          ", not an instance: give a DSN, an open psycopg Connection or a "
                          "psycopg_pool.ConnectionPool")
    kind = f"{type(source).__module__}.{type(source).__qualname__}"
    from psycopg_pool import AsyncConnectionPool

    if isinstance(source, (psycopg.AsyncConnection, AsyncConnectionPool)):
        raise ConfigError("source", f"a Funnel is synchronous, got {kind}: give it a DSN, "
                          "a psycopg Connection or a psycopg_pool.ConnectionPool (run it "
                          "in a worker thread from async code)")
    sqlalchemy = type(source).__module__.partition(".")[0] == "sqlalchemy"
    if hasattr(source, "connection") and not sqlalchemy:
        return source  # a pool: psycopg_pool.ConnectionPool or one shaped like it
    hint = ""
    if sqlalchemy or hasattr(source, "raw_connection"):
        # a SQLAlchemy Connection, Session or raw connection has a `connection` too, and
        # was taken for a pool: the first search failed with "TypeError: 'Connection'
        # object is not callable" (or an AttributeError from a Session's connection)
        what = "engine" if hasattr(source, "raw_connection") else "connection or session"
        hint = (f": for a SQLAlchemy {what}, run pgfunnel.sqla.funnel_search_tvf in its "
                "sessions, or give the Funnel the engine's DSN (or the psycopg connection "
                "under a raw connection, its .dbapi_connection)")
    raise ConfigError("source", "must be a DSN, a psycopg Connection or a "
                      f"psycopg_pool.ConnectionPool, got {kind}{hint}")


def _session_statement_timeout(conn: psycopg.Connection[Any]) -> str | None:
    """The connection's statement_timeout as Postgres shows it (``20ms``), read after a
    search it cancelled; None where it cannot be read (the connection is gone)."""
    try:
        with own_transaction(conn):
            row = conn.execute("select pg_catalog.current_setting('statement_timeout')"
                               ).fetchone()
    except psycopg.Error:
        return None
    return None if row is None else str(row[0])


class Funnel:
    """Search one collection: candidate query, optional rerank, final query.

    ``source`` is a psycopg connection, a psycopg_pool ConnectionPool, or a DSN
    (None: PGFUNNEL_DSN, then the embedded server). ``embedder`` embeds query text
    ("auto": the active index version's model, loaded on first use; None: text only).
    ``reranker`` is a :class:`pgfunnel.rerank.Reranker` or None.
    """

    def __init__(self, source: Any = None, collection: str = sql_defaults.COLLECTION, *,
                 embedder: Embedder | str | os.PathLike[str] | None = "auto",
                 reranker: Any = None,
                 rerank_depth: int | None = None, rerank_gate_margin: float | None = None,
                 rewriter: Any = None, followup: Any = None,
                 **defaults: Any) -> None:
        self._source = _check_source(source)
        self._own_conn: psycopg.Connection[Any] | None = None
        # one connection serves one search at a time: a search is a transaction, and two
        # threads interleaving theirs on one connection nest them or leave one open
        self._one_connection = threading.RLock()
        # whether the schema's revision was compared with this package's (first search)
        self._schema_checked = False
        # (revision, this release's head) when the schema is older: set with the check
        self._schema_behind: tuple[str, str] | None = None
        self.collection = collection
        if (embedder is not None and not isinstance(embedder, (str, os.PathLike, Embedder))) \
                or (isinstance(embedder, str) and not embedder.strip()):
            # anything else was read as a model id at the first search: embedder=5 failed
            # there as "embedding_model='5' could not be loaded", an object as its repr
            raise ConfigError("embedder", "must be 'auto', None (text only), a "
                              "pgfunnel.embedder.Embedder, or a model id or local path; got "
                              f"{type(embedder).__name__} {embedder!r}")
        self._embedder_spec = embedder
        self._embedder: Embedder | None = embedder if isinstance(embedder, Embedder) else None
        self._loading = threading.Lock()
        # models this Funnel loaded and set aside for another collection's (embedder
        # "auto"), by name: one Funnel alternating between collections built with two
        # models loaded each again at every switch (about 0.5 s on a CPU)
        self._set_aside: dict[str, Embedder] = {}
        if reranker is not None and not callable(getattr(reranker, "rank", None)):
            # a model id or path given here instead of a loaded model failed only at the
            # first search, with "AttributeError: 'str' object has no attribute 'rank'"
            hint = (f": to load a model, pass reranker=pgfunnel.rerank.Reranker({reranker!r})"
                    if isinstance(reranker, (str, os.PathLike)) else "")
            raise ConfigError("reranker", "must be an object with rank(query, documents), "
                              f"such as pgfunnel.rerank.Reranker, or None; got "
                              f"{type(reranker).__name__}{hint}")
        if isinstance(reranker, type):
            # the class itself (Reranker without parentheses) has a rank attribute too: it
            # failed only at the first search, with a TypeError about a missing argument
            raise ConfigError("reranker", f"must be a reranker object, got the class "
                              f"{reranker.__name__} itself: make one first, e.g. "
                              f"reranker={reranker.__name__}(...)")
        self.reranker = reranker
        self.rerank_depth = check_rerank_depth(rerank_depth)
        self.rerank_gate_margin = check_gate_margin(rerank_gate_margin, "rerank_gate_margin")
        if reranker is None:
            # as the CLI refuses --rerank-depth without --rerank: a setting that changes
            # nothing looks like a rerank that is not there
            for name, value in (("rerank_depth", rerank_depth),
                                ("rerank_gate_margin", rerank_gate_margin)):
                if value is not None:
                    raise ConfigError(name, "applies only with a reranker; give the Funnel "
                                            "reranker=... as well")
        # opt-in query hooks (pgfunnel.transform): a GuardedRewriter or any callable
        # str -> str (guarded with the collection's protected terms), and a
        # FollowupResolver used when search() is given ``history``. Checked here: the
        # wrong kind of object failed only at a search with history, as an AttributeError
        from pgfunnel.transform import GuardedRewriter

        # an object with a rewrite() method of its own was let in here and refused at the
        # first search ("rewriter: must be callable"): only a GuardedRewriter is used as
        # given, anything else is called as str -> str inside one
        if rewriter is not None and not callable(rewriter) and not isinstance(
                rewriter, GuardedRewriter):
            raise ConfigError("rewriter", "must be a GuardedRewriter, a callable str -> str, "
                              f"or None; got {type(rewriter).__name__}")
        if followup is not None and not callable(getattr(followup, "resolve", None)):
            raise ConfigError("followup", "must be an object with resolve(history, query), "
                              "such as pgfunnel.transform.FollowupResolver, or None; got "
                              f"{type(followup).__name__}")
        self.rewriter = rewriter
        self.followup = followup
        self._closed = False
        self.defaults = SearchParams.build(collection=collection, **defaults)
        refuse_unused_rrf_k(defaults, self.defaults.fusion)

    # -- connections ---------------------------------------------------------------
    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        if self._closed:
            # a search after close() (or its with block) opened a connection that nothing
            # would close again
            raise ConnectionFailedError("this Funnel was closed (close() or the end of its "
                                        "with block); make a new one")
        src = self._source
        if src is not None and hasattr(src, "connection") and not isinstance(src, str) \
                and not isinstance(src, psycopg.Connection):
            # a pool: a connection per thread, nothing to serialise
            try:
                pooled = src.connection()
                conn = pooled.__enter__()
            except psycopg.Error as exc:  # an exhausted pool, a server gone
                raise translate(exc) from exc
            try:
                try_register_vector(conn)  # once per connection
                with tuple_rows(conn), schema_access_named(conn):
                    yield conn
            except BaseException as exc:
                if not pooled.__exit__(type(exc), exc, exc.__traceback__):
                    raise
            else:
                pooled.__exit__(None, None, None)
            return
        with self._one_connection:
            if isinstance(src, psycopg.Connection):
                if src.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                    # every statement would fail with "current transaction is aborted",
                    # and psycopg logged a second error about the savepoint it could not
                    # roll back (two lines on stderr) above the one raised
                    raise PgfunnelError(
                        "the connection's transaction is aborted (an earlier statement in "
                        "it failed): roll it back (conn.rollback(), or leave its "
                        "transaction block) before searching on it")
                # the application's connection: the vector type is needed to send a query
                # embedding, and pgfunnel.db.connect is not the only way to open one
                try_register_vector(src)
                with tuple_rows(src), schema_access_named(src):
                    yield src
                return
            if self._own_conn is None or self._own_conn.closed:
                # autocommit: each search runs in its own explicit transaction; without
                # it an implicit outer transaction would swallow (and finally roll back)
                # the trace
                self._own_conn = connect(src, autocommit=True)
            with tuple_rows(self._own_conn), schema_access_named(self._own_conn):
                yield self._own_conn

    def close(self) -> None:
        """Close the connection the Funnel opened from a DSN (an application's own
        connection or pool stays open); the Funnel searches no more."""
        self._closed = True
        if self._own_conn is not None:
            self._own_conn.close()

    def __enter__(self) -> Funnel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _warn_if_schema_outdated(self, conn: psycopg.Connection[Any]) -> None:
        """After the package is upgraded, searches run the older release's functions until
        `pgfunnel migrate`: said once per Funnel, at its first search (one catalog read),
        before the search, which may fail on what the older functions lack."""
        from pgfunnel.schema import OTHER_FUNCTIONS, schema_status

        try:
            with own_transaction(conn):
                behind, other_functions = schema_status(conn)
        except psycopg.Error:
            # an aborted transaction, say: the search itself will say what is wrong
            return
        self._schema_checked = True
        self._schema_behind = behind
        if behind is not None:
            warn_at_caller(SchemaOutdatedWarning(
                f"the pgfunnel schema is at revision {behind[0]}, older than this "
                f"pgfunnel's {behind[1]}: searches run the older release's functions; "
                "run `pgfunnel migrate`"))
        elif other_functions:
            warn_at_caller(SchemaOutdatedWarning(
                f"{OTHER_FUNCTIONS}: searches run them; run `pgfunnel migrate`"))

    # -- embedding -----------------------------------------------------------------
    def _active_dimensions(self, conn: psycopg.Connection[Any], collection: str) -> tuple[str, int]:
        try:
            # embedder_for() takes the caller's connection, whatever its row factory
            with tuple_rows(conn), own_transaction(conn):
                row = conn.execute(
                    "select v.embedding_model, v.dimensions from pgfunnel.index_version v "
                    "join pgfunnel.collection c on c.id = v.collection_id "
                    "where c.name = %s and v.state = 'active'", (collection,)).fetchone()
        except psycopg.Error as exc:
            # before `pgfunnel init` this is the first statement to find no schema
            raise translate(exc) from exc
        if row is None:
            from pgfunnel.errors import NotFoundError
            from pgfunnel.ingest import require_collection

            with tuple_rows(conn), own_transaction(conn):
                # one that does not exist is told as such, naming those that do
                require_collection(conn, collection)
            raise NotFoundError(
                f"collection {shown(collection)} has no active index version (pgfunnel "
                f"versions list -c {shlex.quote(collection)} shows them; pgfunnel "
                "versions activate N switches to one)", parameter="collection")
        return str(row[0]), int(row[1])

    def _check_params(self, conn: psycopg.Connection[Any], query: str | None,
                      p: SearchParams) -> None:
        """The search's parameter values, checked by the function the search checks them
        with (``pgfunnel._check_funnel_params``); loading the model looks the collection
        up next."""
        args = p.sql_args()
        try:
            with own_transaction(conn):
                conn.execute(
                    "select pgfunnel._check_funnel_params(%(query_text)s, %(k)s, "
                    "%(principals)s, %(overfetch)s, %(per_source_cap)s, %(metadata_filter)s, "
                    "%(fusion)s, %(rrf_k)s, %(weights)s, %(lexical_depth)s, %(dense_depth)s, "
                    "%(ef_search)s, %(k1)s, %(b)s, coalesce(%(as_of)s, now()))",
                    {**args, "query_text": query, "as_of": p.as_of})
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.errors.UndefinedFunction) and \
                    self._schema_behind is not None:
                # an older release's schema, from before this check: the search checks
                # the values itself, if its functions take the call (else: run migrate)
                return
            raise translate(exc) from exc

    def _check_trace_writable(self, conn: psycopg.Connection[Any]) -> None:
        """A TraceReadOnlyError when this connection's transaction is read-only (a hot
        standby, default_transaction_read_only, the application's own read-only
        transaction): a trace is written to search_log (``pgfunnel._check_trace_writable``,
        which traced searches also run in SQL)."""
        try:
            with own_transaction(conn):
                # the reader's settings come with the search: the read-only check alone
                conn.execute("select pgfunnel._check_trace_writable(null, null)")
        except psycopg.Error as exc:
            raise translate(exc) from exc

    def _params_for(self, params: Mapping[str, Any]) -> SearchParams:
        """One search's parameters: this Funnel's defaults with ``params`` over them,
        checked; ``rrf_k`` given for a fusion other than rrf is refused."""
        for name in FUNNEL_SETTINGS:
            if name in params:
                # docs/tuning.md's `rerank_depth=20`, given to search(), was "unknown
                # search parameter (known: as_of, b, ...)", as if there were no such thing
                raise ConfigError(name, f"a setting of the Funnel, not of one search: "
                                        f"Funnel(..., {name}=...)"
                                  + (", with reranker=..." if name.startswith("rerank_")
                                     else ""))
        p = SearchParams.build(**{**{f.name: getattr(self.defaults, f.name)
                                     for f in dataclasses.fields(SearchParams)}, **params})
        refuse_unused_rrf_k(params, p.fusion)
        return p

    def check(self, query: str | None, **params: Any) -> None:
        """The search's query text and parameter values checked as ``search`` checks them,
        and its collection looked up, without searching: a ConfigError (NotFoundError for
        an unknown collection) before anything slow, such as loading a cross-encoder or
        a query embedder."""
        p = self._params_for(params)
        checked = check_query_text(query)
        with self.connection() as conn:
            self._active_dimensions(conn, p.collection)
            self._check_params(conn, checked, p)
            if p.trace:
                self._check_trace_writable(conn)

    def active_model(self, collection: str | None = None) -> tuple[str, int]:
        """(embedding model, dimensions) of the collection's active index version: what a
        query vector passed to ``funnel_search`` must be embedded with."""
        with self.connection() as conn:
            return self._active_dimensions(conn, collection or self.collection)

    def embedder_for(self, conn: psycopg.Connection[Any], collection: str) -> Embedder | None:
        """The query embedder, loaded on first use; threads arriving meanwhile wait for
        that one load instead of each loading the model."""
        if self._embedder_spec is None:
            return None
        if self._embedder is None:
            with self._loading:
                if self._embedder is None:
                    model, _ = self._active_dimensions(conn, collection)
                    spec = self._embedder_spec
                    # a model given as embedder= is named so when it does not load; "auto"
                    # loads the collection's own, its embedding_model
                    self._embedder = Embedder(model) if spec == "auto" else \
                        Embedder(str(spec), setting="embedder")
        return self._embedder

    def _replace_embedder(self, used: Embedder, model: str) -> bool:
        """The query embedder for ``model`` in place of ``used``; whether a model was
        loaded for it (False: one set aside before, or another thread's)."""
        with self._loading:
            if self._embedder is not used:
                return False
            self._set_aside[used.model_name] = used
            kept = self._set_aside.pop(model, None)
            self._embedder = kept if kept is not None else Embedder(model)
            return kept is None

    def _follow_model_change(self, conn: psycopg.Connection[Any], collection: str,
                             used: Embedder) -> str | None:
        """After the active index version refused a query vector's dimensions: the model
        it now has when that changed and ``embedder="auto"`` can follow it, None when it
        was refused for another reason; an error naming the model the Funnel should have
        when it cannot follow."""
        model, dims = self._active_dimensions(conn, collection)
        if model == used.model_name:
            return None
        if self._embedder_spec == "auto":
            return model
        raise InvalidVectorError(
            f"this Funnel embeds queries with {used.model_name!r}, but the active index "
            f"version of {collection!r} was built with {model!r} ({dims} dimensions); create "
            "the Funnel with that model, or embedder='auto'", parameter="query_embedding")

    # -- search ----------------------------------------------------------------------
    def search(self, query: str | None, *, query_embedding: Any = None,
               rerank: bool | None = None, history: Sequence[str] | None = None,
               **params: Any) -> SearchResponse:
        """One search. ``rerank`` defaults to on when a reranker was given.

        ``history`` (earlier turns, oldest first) lets the ``followup`` hook complete a
        follow-up question; the ``rewriter`` hook runs after it. Both are recorded in
        ``SearchResponse.transforms`` (and the trace).
        """
        return self._search(query, query_embedding=query_embedding, rerank=rerank,
                            history=history, transforms=[], **params)

    def search_multi(self, phrasings: Sequence[str], **kwargs: Any) -> SearchResponse:
        """Several phrasings of one need, each searched, merged with RRF (then capped)."""
        from pgfunnel.query_plans import search_multi

        return search_multi(self, phrasings, **kwargs)

    def search_decomposed(self, query: str, **kwargs: Any) -> SearchResponse:
        """A multi-intent query split on visible structure, parts merged round-robin."""
        from pgfunnel.query_plans import search_decomposed

        return search_decomposed(self, query, **kwargs)

    @contextmanager
    def _one_snapshot(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection in one repeatable-read transaction, for the searches of one plan
        (search_multi's phrasings, a decomposed query's parts): a version switch that
        commits between two of them must not give one merged answer from two versions.
        Inside the application's own transaction, that transaction is the scope."""
        with self.connection() as conn:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                yield conn
                return
            try:
                with conn.transaction():
                    conn.execute("set transaction isolation level repeatable read")
                    yield conn
            except psycopg.Error as exc:
                raise translate(exc) from exc

    def _search(self, query: str | None, **kwargs: Any) -> SearchResponse:
        try:
            return self._search_once(query, **kwargs)
        except PgfunnelError as exc:
            cause = exc.__cause__
            if self._schema_behind is not None and isinstance(cause, psycopg.Error) \
                    and cause.sqlstate in ("42883", "42703"):
                # a function or column of this release that an older release's functions
                # lack: what fixes it is the migrate, not the call's arguments
                raise SchemaOutdatedError(*self._schema_behind) from cause
            raise

    def _search_once(self, query: str | None, *, query_embedding: Any = None,
                     rerank: bool | None = None, history: Sequence[str] | None = None,
                     transforms: list[dict[str, Any]],
                     plan_conn: psycopg.Connection[Any] | None = None,
                     exact_version: bool = False,
                     **params: Any) -> SearchResponse:
        p = self._params_for(params)
        query = check_query_text(query)
        if history is not None:
            history = check_history_text(history)
        if query_embedding is not None:
            # NaN, Inf, zero and malformed vectors fail here, before any SQL runs; the
            # dimension is checked against the active index version below
            check_vector(query_embedding)
        if rerank is not None and not isinstance(rerank, (bool, np.bool_)):
            # "no" is a true value: it asked for a rerank
            raise ConfigError("rerank", f"must be True, False or None, got {shown(rerank)}")
        use_rerank = (self.reranker is not None) if rerank is None else bool(rerank)
        if use_rerank and self.reranker is None:
            raise ConfigError("rerank", "rerank requested but this Funnel has no reranker")
        if query is None and query_embedding is None:
            # as funnel_search(NULL, NULL) is; with an embedder too, which has no text to
            # embed (an empty string is a query, and answers empty with a warning)
            raise ConfigError("query_text", "give query text or a query embedding "
                                            "(both are None)")
        timings: dict[str, float] = {}
        notices: list[str] = []
        with nullcontext(plan_conn) if plan_conn is not None else self.connection() as conn:
            if not self._schema_checked:
                self._warn_if_schema_outdated(conn)
            if p.trace:
                # on a read replica the trace's insert would fail only after the model
                # loaded, embedded and reranked, and the pool was read
                self._check_trace_writable(conn)
            hooks = query is not None and (history is not None or self.rewriter is not None)
            if query_embedding is None and query is not None and \
                    (hooks or self._embedder_spec is not None):
                # the search checks its values too, but only after the hooks have run and
                # the query is embedded (and the model loaded, seconds on a CPU, at the
                # first search): a bad one is told before those. At every search: the
                # round trip (0.09 - 0.10 ms on the embedded server) is about 1% of
                # embedding the query on a CPU (9.4 ms); remembering the values that
                # passed changed a search's median time by under 2%, within the noise
                self._check_params(conn, query, p)
            if hooks and query is not None:
                from pgfunnel.query_plans import apply_query_hooks

                query = apply_query_hooks(self, conn, query, history, transforms,
                                          p.collection)
            t0 = time.perf_counter()
            vector: np.ndarray | None = None
            emb: Embedder | None = None
            if query_embedding is not None:
                # its dimensions are checked by the search itself, against the version
                # it reads: no lookup here
                vector = check_vector(query_embedding)
            elif query is not None and query.strip() and not _dense_weight_zero(p):
                loading = self._embedder is None
                emb = self.embedder_for(conn, p.collection)
                if emb is not None:
                    if loading:
                        # the first search of a Funnel loads the model (seconds): timed
                        # apart from the query's embedding
                        t_load = time.perf_counter()
                        timings["model_load"] = (t_load - t0) * 1000
                        t0 = t_load
                    vector = emb.embed_query(query)
            timings["embed"] = (time.perf_counter() - t0) * 1000
            if vector is not None:
                _require_vector_type(conn)
            if vector is None and (query is None or not query.strip()):
                # nothing to search with: the search runs all the same, so that its
                # parameters and collection are checked as for any query, and answers
                # empty with the analyzer's warning that the query is empty
                query = query or ""
            handler = _NoticeCollector(notices)
            conn.add_notice_handler(handler)
            seen: dict[str, Any] = {}
            try:
                try:
                    response = self._run(conn, query, vector, p, timings, use_rerank,
                                         transforms, seen, exact_version)
                    active = seen.get("model")
                    new_model = active if emb is not None and self._embedder_spec == "auto" \
                        and active not in (None, emb.model_name) else None
                except InvalidVectorError:
                    new_model = None if emb is None else \
                        self._follow_model_change(conn, p.collection, emb)
                    if new_model is None:
                        raise
                if new_model is not None and emb is not None and query is not None:
                    # another version, built with another model, went live since the
                    # model was loaded (a refused dimension, or the same dimension and
                    # vectors that mean nothing to it): once more with its model
                    t_load = time.perf_counter()
                    if self._replace_embedder(emb, str(new_model)):
                        timings["model_load"] = timings.get("model_load", 0.0) \
                            + (time.perf_counter() - t_load) * 1000
                    notices.clear()
                    reloaded = self.embedder_for(conn, p.collection)
                    assert reloaded is not None
                    vector = reloaded.embed_query(query)
                    seen = {}
                    response = self._run(conn, query, vector, p, timings, use_rerank,
                                         transforms, seen, exact_version)
            finally:
                conn.remove_notice_handler(handler)
        response.notices = notices
        response.transforms = transforms
        response.index_version_id = seen.get("version_id")
        for note in notices:
            warn_at_caller(SearchNoticeWarning(note), SearchNoticeWarning)
        return response

    def _run(self, conn: psycopg.Connection[Any], query: str | None, vector: np.ndarray | None,
             p: SearchParams, timings: dict[str, float], use_rerank: bool,
             transforms: list[dict[str, Any]], seen: dict[str, Any],
             exact_version: bool = False) -> SearchResponse:
        if use_rerank:
            return self._search_reranked(conn, query, vector, p, timings,
                                         transforms=transforms, seen=seen)
        if transforms and p.trace:
            # final(candidates()) is funnel_search by definition; two steps let the
            # transformations go into the trace's config
            return self._search_reranked(conn, query, vector, p, timings,
                                         transforms=transforms, use_model=False, seen=seen)
        return self._search_plain(conn, query, vector, p, timings, seen,
                                  exact_version=exact_version)

    @contextmanager
    def _transaction(self, conn: psycopg.Connection[Any], p: SearchParams,
                     seen: dict[str, Any] | None = None, *,
                     one_snapshot: bool = False) -> Iterator[None]:
        """The search's transaction, with the reader's settings. ``seen`` receives the
        embedding model and the id of the collection's active version (``seen["model"]``,
        ``seen["version_id"]``), read in the same statement as the settings;
        ``one_snapshot`` makes every statement of the transaction read one snapshot
        (repeatable read), so that version is the one the search reads.

        The body should execute its statements and fetch their cursors after the block:
        a fetch inside it syncs the pipeline there, a round trip more before COMMIT."""
        top_level = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        try:
            # pipelined: BEGIN, the settings, the search and COMMIT go out together, one
            # round trip to the server instead of four; results are read once it is over
            with conn.pipeline(), conn.transaction():
                if one_snapshot and top_level:
                    conn.execute("set transaction isolation level repeatable read")
                # transaction-local: a pooled connection carries nothing to the next
                # request; without statement_timeout_ms the session's own timeout stands
                settings = conn.execute(
                    "select set_config('pgfunnel.principals', %s, true), "
                    "set_config('pgfunnel.tenant', coalesce(%s, ''), true), "
                    "set_config('statement_timeout', "
                    "coalesce(%s, pg_catalog.current_setting('statement_timeout')), true), "
                    "v.embedding_model, v.id "
                    "from (select 1) one left join (pgfunnel.index_version v "
                    "join pgfunnel.collection c on c.id = v.collection_id "
                    "and c.name = %s) on v.state = 'active'",
                    (json.dumps(list(p.principals)), p.tenant,
                     None if p.statement_timeout_ms is None else str(p.statement_timeout_ms),
                     p.collection),
                    prepare=True)
                yield
            if seen is not None:
                row = settings.fetchone()
                seen["model"], seen["version_id"] = (row[3], row[4]) if row else (None, None)
        except psycopg.Error as exc:
            raise _limit_named(translate(exc), p, conn) from exc

    def _base_args(self, query: str | None, vector: np.ndarray | None,
                   p: SearchParams) -> dict[str, Any]:
        args = p.sql_args()
        args.update(query_text=query, query_embedding=vector, as_of=p.as_of)
        return args

    def _search_plain(self, conn: psycopg.Connection[Any], query: str | None,
                      vector: np.ndarray | None, p: SearchParams,
                      timings: dict[str, float],
                      seen: dict[str, Any] | None = None, *,
                      exact_version: bool = False) -> SearchResponse:
        """``exact_version``: the version ``seen`` names is the one the search read (one
        snapshot for the settings and the search), as a plan that compares its searches'
        versions needs; otherwise a switch committing between the two statements of the
        transaction can make it name the next one."""
        args = self._base_args(query, vector, p)
        args["trace"] = p.trace
        t0 = time.perf_counter()
        with self._transaction(conn, p, seen, one_snapshot=exact_version):
            cursor = conn.execute(_FUNNEL_SQL, args, prepare=True)
            # pipelined with the search: no round trip of its own
            used = conn.execute(FUSION_USED_SQL, prepare=True)
            results = [Result(*r) for r in cursor]
            search_id = _search_id(conn, results, p.trace)
        timings["funnel_search"] = (time.perf_counter() - t0) * 1000
        return SearchResponse(query, results, search_id=search_id, timings_ms=timings,
                              fusion=_fusion_of(fusion_used_of(used.fetchone()), p))

    def candidates(self, conn: psycopg.Connection[Any], query: str | None,
                   vector: np.ndarray | None, p: SearchParams) -> CandidatePool:
        """The candidate pool (``pgfunnel.candidates``) in fused order, on ``conn`` in the
        caller's transaction, with ``fusion``, the weights it was fused with, and
        ``index_version_id``, the collection's active version, as ``Funnel.search``
        reports them (``SearchResponse.fusion``, ``SearchResponse.index_version_id``)."""
        # checked as search() checks them: a NaN vector was sent as a double precision[]
        # ("arguments: function pgfunnel.candidates(...) does not exist"), a NUL in the
        # query raised the driver's message, a dict for p an AttributeError
        _check_plan_params(p)
        query = check_query_text(query)
        if vector is not None:
            vector = check_vector(vector)
            # the caller's connection, which no search may have used yet: without
            # pgvector's types the vector failed as "cannot adapt type 'ndarray' using
            # placeholder '%b'"
            _require_vector_type(conn)
        idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        notices: list[str] = []
        # the analyzer's notices (query words not searched), which search() reports: on
        # the caller's connection they went to psycopg's logger, unseen
        handler = _NoticeCollector(notices)
        conn.add_notice_handler(handler)
        try:
            # the weights the pool used are a transaction-local setting of the search's:
            # read in its transaction, which on an autocommit connection outside one is a
            # transaction of the two statements (the setting was gone by the second).
            # Pipelined: no round trip of its own
            with tuple_rows(conn), \
                    conn.transaction() if conn.autocommit and idle else nullcontext():
                with conn.pipeline(), _time_limit(conn, p):
                    cursor = conn.execute(_CANDIDATES_WITH_VERSION_SQL,
                                          self._base_args(query, vector, p), prepare=True)
                    used = conn.execute(FUSION_USED_SQL, prepare=True)
                rows = cursor.fetchall()
                fusion = _fusion_of(fusion_used_of(used.fetchone()), p)
                version_id = None if not rows or rows[0][-1] is None else int(rows[0][-1])
                rows = [row[:-1] for row in rows if row[0] is not None]
        except psycopg.Error as exc:
            # a public method: its errors are pgfunnel's, as search()'s are
            raise with_schema_access_hint(conn, _limit_named(translate(exc), p, conn)) from exc
        finally:
            conn.remove_notice_handler(handler)
        for note in notices:
            warn_at_caller(SearchNoticeWarning(note), SearchNoticeWarning)
        return CandidatePool(self._pool_from_rows(rows), fusion=fusion,
                             index_version_id=version_id, notices=notices)

    def _execute_candidates(self, conn: psycopg.Connection[Any], query: str | None,
                            vector: np.ndarray | None,
                            p: SearchParams) -> psycopg.Cursor[Any]:
        return conn.execute(_CANDIDATES_SQL, self._base_args(query, vector, p), prepare=True)

    @staticmethod
    def _pool_from_rows(rows: Sequence[Any]) -> list[Candidate]:
        pool = []
        for row in rows:
            # section_path comes after the dataclass's rerank fields, which the pool lacks
            candidate = Candidate(*row[:-1])
            candidate.section_path = row[-1]
            pool.append(candidate)
        return pool

    def final(self, conn: psycopg.Connection[Any], query: str | None, ordered: Sequence[Candidate],
              p: SearchParams, *, reranked: bool, notes: Mapping[str, Any] | None = None,
              index_version_id: int | None = None,
              log_notes: Mapping[str, Any] | None = None,
              fusion_used: FusionUsed | None = None) -> list[Result]:
        """The pool in its final order, capped and cut to k (``pgfunnel.final``); a trace
        names ``index_version_id``, the version the pool was read from (default: the
        active one now). ``notes`` join the traced search's config (and so its config
        hash); ``log_notes`` go into its ``search_log.notes``, outside the config.
        ``fusion_used``, the pool's ``CandidatePool.fusion``: a trace logs the weights
        the pool was fused with and whether they were given, as ``Funnel.search``'s
        trace does (without it, the config's ``weights`` are ``p.weights``, null where
        the search chose them)."""
        _check_plan_params(p)
        query = check_query_text(query)
        if not isinstance(reranked, (bool, np.bool_)):
            # "no" is a true value: the trace would log a rerank that never ran
            raise ConfigError("reranked", f"must be True or False, got {shown(reranked)}")
        ordered = _check_ordered(ordered, reranked=bool(reranked))
        for name, value in (("notes", notes), ("log_notes", log_notes)):
            _check_json_mapping(name, value)
        if fusion_used is not None and not isinstance(fusion_used, FusionUsed):
            raise ConfigError("fusion_used", "must be the pool's CandidatePool.fusion (a "
                              f"FusionUsed) or None, got {shown(fusion_used)}")
        if fusion_used is not None:
            # the pair that ran, not the pair asked for (null when the search chose it),
            # logged as Funnel.search logs it: a one-leg pool's fusion shows no weights,
            # but the database's pair for it is what the other routes' configs hold
            ran = fusion_used._weights_logged or fusion_used.weights
            weights_note: dict[str, Any] = {} if ran is None else {"weights": list(ran)}
            notes = {**(notes or {}), **weights_note} or None
            log_notes = {**(log_notes or {}), "weights_given": p.weights is not None,
                         **fusion_used._depths_logged}
        if index_version_id is not None and (
                isinstance(index_version_id, bool)
                or not isinstance(index_version_id, (int, np.integer))
                or not _INT32[0] <= int(index_version_id) <= _INT32[1]):
            raise ConfigError("index_version_id", "must be an index version's id (a 32-bit "
                              f"integer) or None, got {shown(index_version_id)}")
        # a time limit is set for the call's own transaction on an autocommit connection
        # outside one: set in a statement of its own, it would have lasted for that alone
        own = p.statement_timeout_ms is not None and conn.autocommit and \
            conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        try:
            # candidates built by hand without a document_id (the default 0): theirs are
            # read from the chunks, in the same round trip; a pool from candidates() has
            # every one, so its final() reads nothing more (under RLS each chunk read pays
            # the chunk policy)
            # (a chunk_id of another type is final()'s to refuse, as it did)
            unknown = list(dict.fromkeys(
                int(c.chunk_id) for c in ordered if not getattr(c, "document_id", None)
                and isinstance(c.chunk_id, (int, np.integer))
                and not isinstance(c.chunk_id, bool)))
            with tuple_rows(conn), conn.transaction() if own else nullcontext():
                with conn.pipeline(), _time_limit(conn, p):
                    cursor = self._execute_final(
                        conn, query, ordered, p, reranked=reranked, notes=notes,
                        index_version_id=index_version_id, log_notes=log_notes)
                    looked = conn.execute(_CHUNK_DOCUMENTS_SQL, (unknown,),
                                          prepare=True) if unknown else None
                rows = cursor.fetchall()
                found = dict(looked.fetchall()) if looked is not None else {}
                return _results_of_final(rows, ordered, found)
        except psycopg.Error as exc:
            raise with_schema_access_hint(conn, _limit_named(translate(exc), p, conn)) from exc

    def _final_args(self, query: str | None, ordered: Sequence[Candidate], p: SearchParams, *,
                    reranked: bool, notes: Mapping[str, Any] | None = None,
                    index_version_id: int | None = None,
                    log_notes: Mapping[str, Any] | None = None) -> dict[str, Any]:
        config = p.config()
        config.update(rerank=reranked, rerank_depth=self.rerank_depth,
                      rerank_model=reranker_name(self.reranker), **(notes or {}))
        return {
            "chunk_ids": [c.chunk_id for c in ordered],
            "fused_ranks": [c.fused_rank for c in ordered],
            "fused_scores": [c.fused_score for c in ordered],
            "lexical_ranks": [c.lexical_rank for c in ordered],
            "lexical_scores": [c.lexical_score for c in ordered],
            "dense_ranks": [c.dense_rank for c in ordered],
            "dense_scores": [c.dense_score for c in ordered],
            # float(): a model's numpy float32 beside a Python float was "cannot dump
            # lists of mixed types" (final() checked them: numbers or None)
            "rerank_scores": [None if c.rerank_score is None else float(c.rerank_score)
                              for c in ordered] if reranked else None,
            "k": p.k, "collection": p.collection, "principals": list(p.principals),
            "tenant": p.tenant, "language": p.language, "as_of": p.as_of,
            "metadata_filter": Jsonb(dict(p.metadata_filter))
            if p.metadata_filter is not None else None,
            "per_source_cap": p.per_source_cap, "trace": p.trace, "query_text": query,
            # int(): the check lets a numpy integer through, which psycopg sends as a
            # bigint, and no pgfunnel.final takes one ("function ... does not exist")
            "config": Jsonb(config),
            "index_version_id": None if index_version_id is None else int(index_version_id),
            "log_notes": Jsonb(dict(log_notes)) if log_notes is not None else None,
        }

    def _execute_final(self, conn: psycopg.Connection[Any], query: str | None,
                       ordered: Sequence[Candidate], p: SearchParams, *, reranked: bool,
                       notes: Mapping[str, Any] | None = None,
                       index_version_id: int | None = None,
                       log_notes: Mapping[str, Any] | None = None) -> psycopg.Cursor[Any]:
        return conn.execute(_FINAL_SQL, self._final_args(
            query, ordered, p, reranked=reranked, notes=notes,
            index_version_id=index_version_id, log_notes=log_notes), prepare=True)

    def _search_reranked(self, conn: psycopg.Connection[Any], query: str | None,
                         vector: np.ndarray | None, p: SearchParams,
                         timings: dict[str, float], *,
                         transforms: Sequence[Mapping[str, Any]] = (),
                         use_model: bool = True,
                         seen: dict[str, Any] | None = None) -> SearchResponse:
        from pgfunnel.rerank import should_skip

        t0 = time.perf_counter()
        seen = {} if seen is None else seen
        with self._transaction(conn, p, seen, one_snapshot=True):
            cursor = self._execute_candidates(conn, query, vector, p)
            used_cursor = conn.execute(FUSION_USED_SQL, prepare=True)
        pool = self._pool_from_rows(cursor.fetchall())
        used = fusion_used_of(used_cursor.fetchone())
        t1 = time.perf_counter()
        timings["candidates"] = (t1 - t0) * 1000
        depth = rerank_head(len(pool), self.rerank_depth, p)
        skipped: str | None = None
        if not use_model:
            skipped = "rerank off"
        elif not pool:
            skipped = "no candidates"
        elif query is None or not query.strip():
            skipped = "no query text to rerank against"
        elif should_skip([c.fused_score for c in pool], self.rerank_gate_margin):
            skipped = f"gate: top fused score leads by >= {self.rerank_gate_margin}"
        ordered = list(pool)
        if skipped is None and query is not None:  # no text is a reason to skip, above
            ordered = rerank_pool(self.reranker, query, pool, depth)
        t2 = time.perf_counter()
        if skipped is None:
            # a skipped rerank has no time of its own (rerank_skipped_reason says why)
            timings["rerank"] = (t2 - t1) * 1000
        with self._transaction(conn, p):
            notes: dict[str, Any] = {"rerank_skipped": skipped} if skipped and use_model else {}
            if transforms:
                notes["transforms"] = list(transforms)
            # whether it had a query vector, for a replay of the logged search: its trace
            # cannot tell when the dense leg found nothing (funnel_search records it too)
            log_notes: dict[str, Any] = {"query_embedding": vector is not None}
            weights_note, used_log = pool_used_notes(used, p.weights is not None)
            notes.update(weights_note)
            log_notes.update(used_log)
            cursor = self._execute_final(conn, query, ordered, p, reranked=skipped is None,
                                         notes=notes or None,
                                         index_version_id=seen.get("version_id"),
                                         log_notes=log_notes)
            results = _results_of_final(cursor.fetchall(), ordered)
            search_id = _search_id(conn, results, p.trace)
        timings["final"] = (time.perf_counter() - t2) * 1000
        return SearchResponse(query, results, pool=ordered, reranked=skipped is None,
                              rerank_skipped_reason=skipped if use_model else None,
                              search_id=search_id,
                              timings_ms=timings, fusion=_fusion_of(used, p))


#: ``statement_timeout_ms`` for the statements of a candidates() or final() call on the
#: caller's connection, and the caller's own limit put back after them: saved in a
#: setting of the transaction, so that all of it is pipelined with the call
_SET_LIMIT_SQL = ("select pg_catalog.set_config('pgfunnel.statement_timeout_before', "
                  "pg_catalog.current_setting('statement_timeout'), true), "
                  "pg_catalog.set_config('statement_timeout', %s, true)")
_RESTORE_LIMIT_SQL = ("select pg_catalog.set_config('statement_timeout', pg_catalog."
                      "current_setting('pgfunnel.statement_timeout_before'), true)")


@contextmanager
def _time_limit(conn: psycopg.Connection[Any], p: SearchParams) -> Iterator[None]:
    """``p.statement_timeout_ms`` over the block's statements, in the transaction they run
    in (the caller's, or the call's own); the caller's own limit is put back after them.
    When one fails in the server the transaction is aborted (or its savepoint rolled
    back), and its rollback puts the limit back; when the driver refuses one before
    sending it, the limit is put back here. Nothing is sent without a limit."""
    if p.statement_timeout_ms is None:
        yield
        return
    conn.execute(_SET_LIMIT_SQL, (str(p.statement_timeout_ms),), prepare=True)
    try:
        yield
    except Exception as exc:
        # a statement the server refused aborted the transaction, whose rollback puts the
        # limit back (a statement queued after it would not run); one the driver refused
        # before sending it (a rerank_score psycopg cannot adapt) left the caller's
        # transaction going, under this call's limit
        if not (isinstance(exc, psycopg.Error) and exc.sqlstate is not None):
            conn.execute(_RESTORE_LIMIT_SQL, prepare=True)
        raise
    conn.execute(_RESTORE_LIMIT_SQL, prepare=True)


def _limit_named(error: PgfunnelError, p: SearchParams,
                 conn: psycopg.Connection[Any]) -> PgfunnelError:
    """A statement timeout said with the limit that made it: ``p.statement_timeout_ms``
    (the CLI's --timeout-ms) or else the session's own (a role's, the database's or the
    server's). Postgres only says "canceling statement due to statement timeout", which
    named neither; search(), candidates() and final() all say it this one way."""
    # not for another cancel (pg_cancel_backend: "due to user request"), which no limit made
    if not isinstance(error, SearchTimeoutError) or "statement timeout" not in str(error):
        return error
    if p.statement_timeout_ms is not None:
        named = SearchTimeoutError(
            f"the search ran past its time limit (statement_timeout_ms = "
            f"{p.statement_timeout_ms} ms; --timeout-ms in the CLI) "
            f"and was cancelled ({error})")
    else:
        limit = _session_statement_timeout(conn)
        named = SearchTimeoutError(
            f"the search ran past this session's statement_timeout"
            f"{f' of {limit}' if limit else ''} (set for the session, its role, the "
            "database or the server) and was cancelled "
            f"({error}): give the search a limit of its own with statement_timeout_ms "
            "(--timeout-ms in the CLI), or raise that setting")
    named.__cause__ = error.__cause__
    return named


def _require_vector_type(conn: psycopg.Connection[Any]) -> None:
    """pgvector's types registered on ``conn`` (once per connection), to send a query
    vector as; a ConfigError naming ``search_path`` when the extension lives in a schema
    the connection's search_path leaves out, a SchemaMissingError when it is missing."""
    if try_register_vector(conn):
        return
    # no vector type to send the query vector as: the extension is missing, or it lives
    # in a schema this connection's search_path leaves out
    from pgfunnel.schema import vector_path_problem

    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    problem = vector_path_problem(conn)
    if problem is not None:
        if idle and not conn.autocommit:
            # the transaction the lookup opened; an application's own is left to it
            conn.rollback()
        raise ConfigError("search_path", problem)
    require_schema(conn)
    raise SchemaMissingError("the vector extension is missing from this "
                             "database: run `pgfunnel init`")


def _dense_weight_zero(p: SearchParams) -> bool:
    """Whether the search gives the dense leg weight 0, so that it does not run (_pool)
    and the query needs no embedding."""
    return p.weights is not None and len(p.weights) == 2 and p.weights[1] == 0


class _NoticeCollector:
    def __init__(self, sink: list[str]) -> None:
        self.sink = sink

    def __call__(self, diag: psycopg.errors.Diagnostic) -> None:
        msg = diag.message_primary or ""
        if msg.startswith("pgfunnel:"):
            self.sink.append(msg)


__all__ = ["Funnel", "SearchParams", "SearchResponse", "Result", "Candidate", "CandidatePool",
           "FusionUsed", "PgfunnelError"]
