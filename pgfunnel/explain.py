"""Why a chunk did or did not come back for a query: the Python side of pgfunnel.explain()."""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from pgfunnel.db import tuple_rows
from pgfunnel.errors import (
    ConfigError,
    NotFoundError,
    check_sql_text,
    shown,
    translate,
)
from pgfunnel.search import (
    Funnel,
    SearchParams,
    SearchResponse,
    check_history_text,
    check_query_text,
    rerank_head,
)

_TARGET = re.compile(r"^(?P<citekey>.+)#(?P<ordinal>[0-9]+)$")
_ARGS = ("k", "collection", "principals", "tenant", "language", "metadata_filter", "fusion",
         "rrf_k", "weights", "lexical_depth", "dense_depth", "overfetch", "per_source_cap",
         "ef_search", "k1", "b")


@dataclass
class Explanation:
    target: str
    chunk_id: int | None
    verdict: str
    lexical_rank: int | None
    lexical_score: float | None
    lexical_exact_score: float | None
    lexical_depth: int | None
    dense_rank: int | None
    dense_score: float | None
    dense_exact_score: float | None
    dense_depth: int | None
    fused_rank: int | None
    fused_score: float | None
    pool_size: int
    final_rank: int | None
    citekey: str | None
    reason: str
    notices: list[str]
    #: the query transformations applied before the chunk was followed (the follow-up
    #: resolution of ``history``, the guarded rewrite), as :attr:`SearchResponse.transforms`
    #: holds them for a search: empty when neither ran
    transforms: list[dict[str, Any]] = field(default_factory=list)
    #: whether the search explained reranked its pool (a Funnel with a reranker, unless
    #: ``rerank=False`` or the rerank gate skipped the model): ``final_rank``, ``verdict``
    #: and ``reason`` then follow the reranked order through the cap and the cut
    reranked: bool = False
    #: the chunk's rank and score from the reranker; None when it was not reranked (not in
    #: the pool, below the Funnel's ``rerank_depth``, or no rerank ran)
    rerank_rank: int | None = None
    rerank_score: float | None = None
    #: the logged search explained (``search_id=``), None for a search explain ran itself
    search_id: int | None = None
    #: for a logged search: the index version the answer comes from, the one it read, or
    #: for a chunk it did not log among its candidates, the one its replay read (a notice
    #: says when that is not the logged one); None for the trace's own answer and for a
    #: search explain ran itself
    replayed_on: int | None = None
    #: for a logged search, the text it searched (its ``search_log.query_text``, after any
    #: follow-up resolution and rewrite); None otherwise
    searched: str | None = None
    #: for a logged search: the search parameters it is explained with, those its log
    #: records, by the rule `versions compare --last` replays it by (weights None: the
    #: search chose them for its query, and its replay chooses again); None otherwise
    search_config: dict[str, Any] | None = None
    #: for a logged search: those of them its log does not record (a row logged before
    #: pgfunnel recorded them; the k of a search `pgfunnel eval` logged, whose log holds
    #: the pool it cut, not its k), explained with their defaults: a guess a notice says
    config_guessed: list[str] = field(default_factory=list)
    #: for a document's ``CITEKEY``: each of its chunks the per-source cap dropped
    #: (``ordinal``, ``chunk_id``, ``fused_rank``), in the order the cap met them: the fused
    #: ranks a search skipped for that citekey, which no result shows. Empty for a target
    #: that names one chunk
    capped_chunks: list[dict[str, int]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: kept for code that imports it; explain() no longer gives it: on a Funnel with a
#: reranker it follows the reranked search (``rerank=False`` follows the search without)
RERANK_NOT_FOLLOWED = (
    "pgfunnel: explain follows the search without the reranker (fused order to the cap "
    "and the cut, as funnel.search(..., rerank=False))")

#: explain()'s verdict for a chunk that does not exist or that the caller cannot see
HIDDEN_OR_MISSING = "filtered out or does not exist"


def _is_chunk_id(target: str) -> bool:
    """ASCII digits only: str.isdigit() also holds for superscripts ('²'), which int()
    refuses, and for other scripts' digits."""
    return target.isascii() and target.isdigit()


def is_document_target(target: str) -> bool:
    """Neither a chunk id nor CITEKEY#ORDINAL: a document's citekey."""
    return not _is_chunk_id(target) and _TARGET.match(target) is None


def document_chunks(conn: psycopg.Connection[Any], citekey: str,
                    p: SearchParams) -> list[tuple[int, int]]:
    """The (chunk id, ordinal) of each chunk of a document that a search with ``p`` may
    see, in order. Filtered like the search (and by the row-level security policies, if
    on): a document hidden from the reader has no chunks here, exactly as one that does
    not exist."""
    with tuple_rows(conn):
        rows = conn.execute(
            "select ch.id, ch.ordinal from pgfunnel.chunk ch "
        "join pgfunnel.document d on d.id = ch.document_id "
            "join pgfunnel.collection c on c.id = d.collection_id "
            "where c.name = %s and d.citekey = %s and pgfunnel._document_visible(d, "
            "%s::text[], %s, %s, coalesce(%s, now()), %s::jsonb) order by ch.ordinal",
            (p.collection, citekey, list(p.principals), p.tenant, p.language, p.as_of,
             None if p.metadata_filter is None else Jsonb(p.metadata_filter))
        ).fetchall()
    return [(int(r[0]), int(r[1])) for r in rows]


def resolve_target(conn: psycopg.Connection[Any], target: str, collection: str) -> int | None:
    """A chunk id, or CITEKEY#ORDINAL (0-based) looked up in the collection.

    A citekey that does not resolve gives None: explain() then answers as for a chunk the
    caller cannot see, so this lookup tells nothing more than explain() itself would.
    """
    if _is_chunk_id(target):
        # past bigint no chunk can have it; sent as numeric, it matched no function
        return int(target) if int(target) < 2**63 else None
    m = _TARGET.match(target)
    if m is None:
        raise ConfigError("chunk", f"{target!r} is neither a chunk id nor CITEKEY#ORDINAL")
    with tuple_rows(conn):
        row = conn.execute(
            "select ch.id from pgfunnel.chunk ch "
            "join pgfunnel.document d on d.id = ch.document_id "
            "join pgfunnel.collection c on c.id = d.collection_id "
            "where c.name = %s and d.citekey = %s and ch.ordinal = %s",
            (collection, m["citekey"], int(m["ordinal"]))).fetchone()
    return None if row is None else int(row[0])


def explain(funnel: Funnel, query: str | None, target: str | int, *,
            query_embedding: Any = None, history: Sequence[str] | None = None,
            rerank: bool | None = None, search_id: int | None = None,
            **params: Any) -> Explanation:
    """Follow one chunk through the funnel for a query, with the funnel's search parameters.
    ``target`` is a chunk id (an int, as a result's ``chunk_id``, or its digits),
    ``CITEKEY#ORDINAL``, or a document's ``CITEKEY``: then each of its chunks the reader
    may see is followed and the one that got furthest is explained (returned first, then
    the best fused rank, then the best rank in a leg), the reason saying of how many.
    ``history`` and the Funnel's ``rewriter`` and ``followup`` hooks apply as in
    :meth:`Funnel.search`: the text they give is the one followed, and a notice names it
    beside the query as given.

    On a Funnel with a reranker (``rerank`` None, as for :meth:`Funnel.search`, or True)
    the search itself runs, reranker included (candidates, rerank, cap, cut), and a chunk
    of its pool is followed in the reranked order: ``rerank_rank`` and ``rerank_score``
    are the reranker's, ``final_rank``, ``verdict`` and ``reason`` what the cap and the cut
    did to that order. ``rerank=False`` follows the search without the reranker.
    :func:`explain_many` explains several targets from one search.

    ``search_id`` (with ``query`` None) explains a traced search that ran before, from
    its log: see :func:`explain_many`."""
    return explain_many(funnel, query, [target], query_embedding=query_embedding,
                        history=history, rerank=rerank, search_id=search_id, **params)[0]


def _checked_target(target: Any) -> str:
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        return str(int(target))
    if not isinstance(target, str):
        raise ConfigError("chunk", f"must be a chunk id or CITEKEY#ORDINAL, or a document's "
                                   f"CITEKEY, got "
                                   f"{type(target).__name__} {target!r}")
    if not target.strip():
        # no chunk id, and no citekey (ingest refuses a blank one): the answer "filtered
        # out or does not exist" could only hide the caller's mistake
        raise ConfigError("chunk", "must be a chunk id or CITEKEY#ORDINAL, or a document's "
                                   f"CITEKEY, got {target!r}")
    # a NUL or a lone surrogate: Postgres' own error named nothing
    check_sql_text("chunk", target)
    return target


def explain_many(funnel: Funnel, query: str | None, targets: Sequence[str | int], *,
                 query_embedding: Any = None, history: Sequence[str] | None = None,
                 rerank: bool | None = None, search_id: int | None = None,
                 **params: Any) -> list[Explanation]:
    """:func:`explain` for each of ``targets``, in order, from one search: the hooks
    resolve the text once, the query is embedded once, and on a reranking Funnel the
    search and its rerank run once for them all. The search and the explains read one
    snapshot (a repeatable-read transaction, or the application's own transaction on its
    connection), so a commit meanwhile (an ingest, a version switch) cannot make them
    disagree; that transaction stays open while the reranker scores the pool.

    ``search_id``, the id of a traced search (``SearchResponse.search_id``,
    ``pgfunnel.last_search_id()``), explains that search from its log instead: its trace
    rows give each candidate's ranks, rerank rank and score and why it was dropped; a
    target it did not log among its candidates is followed by a replay of the logged
    text with the logged parameters and reader, on the logged index version (the active
    one, with a notice, when that was dropped or cannot be pinned). ``query`` must be
    None then, and of the search parameters only ``principals`` and ``tenant`` are taken:
    the reader who reads the log (under row-level security it must be allowed to read
    that search's row); an unknown id, one that reader may not read, or one of another
    collection than the Funnel's is a NotFoundError or ConfigError."""
    if isinstance(targets, (str, bytes)) or not isinstance(targets, Sequence):
        raise ConfigError("chunk", f"targets must be a list of chunk ids, CITEKEY#ORDINAL "
                                   f"or citekeys, got {type(targets).__name__}")
    checked = [_checked_target(t) for t in targets]
    if not checked:
        raise ConfigError("chunk", "give at least one chunk to explain")
    if search_id is not None:
        from pgfunnel.explain_log import explain_logged

        extra = {name for name, value in (("query", query),
                                          ("query_embedding", query_embedding),
                                          ("history", history), ("rerank", rerank))
                 if value is not None} | (set(params) - {"principals", "tenant"})
        if extra:
            raise ConfigError(sorted(extra)[0], "the logged search is explained with its own "
                              "text and parameters: give search_id alone (principals and "
                              "tenant name the reader who reads the log)")
        return explain_logged(funnel, search_id, checked, **params)
    if rerank is not None and not isinstance(rerank, (bool, np.bool_)):
        raise ConfigError("rerank", f"must be True, False or None, got {shown(rerank)}")
    use_rerank = (funnel.reranker is not None) if rerank is None else bool(rerank)
    if use_rerank and funnel.reranker is None:
        raise ConfigError("rerank", "rerank requested but this Funnel has no reranker")
    p = funnel._params_for(params)
    query = check_query_text(query)
    if history is not None:
        history = check_history_text(history)
    notices: list[str] = []
    transforms: list[dict[str, Any]] = []
    with funnel.connection() as conn:
        if query is not None and (history is not None or funnel.rewriter is not None):
            # the text a search with this history, on this Funnel, searches, resolved once
            # for the explains and the search: explained as given, a follow-up or a
            # rewritten query was followed as text no search ran
            from pgfunnel.query_plans import apply_query_hooks

            given = query
            query = apply_query_hooks(funnel, conn, query, history, transforms,
                                      p.collection)
            if query != given:
                steps = "; ".join(f"{t['step']}: {t['reason']}" for t in transforms)
                notices.append(f"pgfunnel: explain follows the text the search searches, "
                               f"{query!r}, not the query as given, {given!r} ({steps})")
        vector: np.ndarray | None = None
        if query_embedding is not None:
            from pgfunnel.embedder import check_vector

            vector = check_vector(query_embedding)
        elif query is not None and query.strip():
            # embedded before the snapshot below: a model's first load takes seconds
            emb = funnel.embedder_for(conn, p.collection)
            if emb is not None:
                vector = emb.embed_query(query)
    found, response = _explain_rows(funnel, query, vector, p, checked, notices, use_rerank)
    if response is not None and not response.reranked:
        notices.append(f"pgfunnel: the search did not rerank "
                       f"({response.rerank_skipped_reason}): explained in fused order")
    return [_explanation(target, rows, ordinals, response, funnel, p, list(notices),
                         list(transforms))
            for target, (rows, ordinals) in zip(checked, found, strict=True)]


_COLUMNS = ("verdict", "lexical_rank", "lexical_score", "lexical_exact_score", "lexical_depth",
            "dense_rank", "dense_score", "dense_exact_score", "dense_depth", "fused_rank",
            "fused_score", "pool_size", "final_rank", "citekey", "reason")
_SELECTED = ("verdict, lexical_rank, lexical_score, lexical_exact_score, lexical_depth_used, "
             "dense_rank, dense_score, dense_exact_score, dense_depth_used, fused_rank, "
             "fused_score, pool_size, final_rank, citekey, reason")
_NAMED_ARGS = ("query_text => %(query_text)s, query_embedding => %(query_embedding)b, "
               "as_of => coalesce(%(as_of)s, now()), "
               + ", ".join(f"{n} => %({n})s" for n in _ARGS))
# every chunk of a target, from one run of the funnel: explain() per chunk of a document
# reran the search for each (about a second for a hundred chunks); explain() itself is
# this for one chunk, so a target of one chunk asks the same way
_EXPLAIN_CHUNKS_SQL = (f"select chunk_id, {_SELECTED} from pgfunnel._explain_chunks("
                       f"{_NAMED_ARGS}, chunk_ids => %(chunk_ids)s)")

_Found = tuple[list[tuple[int | None, dict[str, Any]]], dict[int, int]]


def _explain_rows(funnel: Funnel, query: str | None, vector: np.ndarray | None,
                  p: SearchParams, targets: Sequence[str], notices: list[str],
                  use_rerank: bool, on: psycopg.Connection[Any] | None = None
                  ) -> tuple[list[_Found], SearchResponse | None]:
    """The SQL explain's row for each chunk of each target and, with ``use_rerank``, the
    reranked search (Funnel.search's own pipeline, on the text and vector given: the hooks
    ran already; not traced, an explain writes nothing), all in one snapshot: a
    repeatable-read transaction of their own, or the transaction open on ``on``."""
    args = p.sql_args()
    args.update(query_text=query, query_embedding=vector, as_of=p.as_of)
    first_sql_notice = len(notices)

    def collect(diag: psycopg.errors.Diagnostic) -> None:
        if (diag.message_primary or "").startswith("pgfunnel:"):
            notices.append(diag.message_primary or "")

    found: list[_Found] = []
    response = None
    with funnel._one_snapshot() if on is None else nullcontext(on) as conn:
        conn.add_notice_handler(collect)
        try:
            # the reader's settings, as a search sets them: under row-level security the
            # policies read them, and without them every chunk is hidden
            with funnel._transaction(conn, p):
                for target in targets:
                    ordinals: dict[int, int] = {}
                    if is_document_target(target):
                        ordinals = dict(document_chunks(conn, target, p))
                        ids: list[int | None] = list(ordinals) or [None]
                    else:
                        ids = [resolve_target(conn, target, p.collection)]
                    # a document without chunks, or an id past bigint, is asked for as
                    # -1, which no chunk has: its row says missing or hidden
                    asked = [-1 if cid is None else cid for cid in ids]
                    args["chunk_ids"] = asked
                    with tuple_rows(conn):
                        got = {int(r[0]): r[1:] for r in
                               conn.execute(_EXPLAIN_CHUNKS_SQL, args).fetchall()}
                    missing = next((c for c in asked if c not in got), None)
                    if missing is not None:
                        _no_row(target, missing)
                    rows: list[tuple[int | None, dict[str, Any]]] = [
                        (cid, dict(zip(_COLUMNS, got[a], strict=True)))
                        for cid, a in zip(ids, asked, strict=True)]
                    # a notice per chunk would repeat the analyzer's one for the query
                    del notices[first_sql_notice + 1:]
                    found.append((rows, ordinals))
            if use_rerank:
                # the pool in the order the cap and the cut saw, read in the same snapshot;
                # its notices are the analyzer's, which the explains gave already
                import dataclasses

                said = len(notices)
                response = funnel._run(conn, query, vector,
                                       dataclasses.replace(p, trace=False), {}, True, [], {})
                del notices[said:]
        except psycopg.Error as exc:
            raise translate(exc) from exc
        finally:
            conn.remove_notice_handler(collect)
    return found, response


def _no_row(target: str, chunk_id: int | None) -> NoReturn:
    # every path of this release's pgfunnel.explain returns one row, a chunk that is
    # missing or hidden too: no argument the caller passed named nothing (parameter
    # None), the installed function is not the one this code was written against
    raise NotFoundError(
        f"pgfunnel.explain returned no row for chunk {target!r} (id {chunk_id}), where "
        "every path of it returns one: the function in the database is not this "
        "release's (pgfunnel migrate installs this release's functions)")


def _explanation(target: str, explained: list[tuple[int | None, dict[str, Any]]],
                 ordinals: dict[int, int], response: SearchResponse | None, funnel: Funnel,
                 p: SearchParams, notices: list[str],
                 transforms: list[dict[str, Any]]) -> Explanation:
    document = is_document_target(target)
    if response is not None and response.reranked:
        for cid, values in explained:
            _follow_rerank(cid, values, response, p, rerank_head(
                len(response.pool), funnel.rerank_depth, p))
    cid, values = min(explained, key=lambda e: _how_far(e[1]))
    if document and cid is not None and len(explained) > 1:
        # the ordinal is the name a reader can pass back (CITEKEY#ORDINAL); the id is
        # what search results show
        values["reason"] = (f"the furthest of the {len(explained)} chunks of {target!r} "
                            f"({target}#{ordinals[cid]}, chunk id {cid}): "
                            f"{values['reason']}")
    if (cid is None or not _is_chunk_id(target)) and values["verdict"] == HIDDEN_OR_MISSING:
        # Name the chunk as the caller wrote it and keep the id the lookup found to
        # ourselves: a citekey hidden from these principals must get exactly the answer
        # of one that does not exist (the lookup itself is not filtered by principals).
        # An id past bigint was asked for as -1, which the caller did not write.
        asked = cid if cid is not None else -1
        values["reason"] = values["reason"].replace(
            f"chunk {asked} ", f"document {target} " if document else f"chunk {target} ", 1)
        cid = None
    capped = sorted(((c, v) for c, v in explained if c is not None and v["verdict"] == "capped"),
                    key=lambda e: _how_far(e[1])) if document else []
    return Explanation(target=target, chunk_id=cid, notices=notices, transforms=transforms,
                       capped_chunks=[{"ordinal": ordinals[c], "chunk_id": c,
                                       "fused_rank": v["fused_rank"]} for c, v in capped],
                       **values)


_IN_POOL = ("returned", "capped", "cut at k")


def _follow_rerank(cid: int | None, values: dict[str, Any], response: SearchResponse,
                   p: SearchParams, depth: int) -> None:
    """``values`` (the SQL explain's row, fused order) for the reranked search's pool: a
    chunk outside the pool (in no leg, not in the pool, hidden) never met the reranker and
    keeps its answer; one in it gets its rerank rank and score, and the final rank,
    verdict and reason of the reranked order through the cap and the cut."""
    values["reranked"] = True
    if cid is None or values["verdict"] not in _IN_POOL:
        return
    ordered = response.pool
    pos = next((i for i, c in enumerate(ordered) if c.chunk_id == cid), None)
    if pos is None:  # pragma: no cover - one snapshot: the explain's pool is the search's
        return
    chunk = ordered[pos]
    values["rerank_rank"], values["rerank_score"] = chunk.rerank_rank, chunk.rerank_score
    fused = values["fused_rank"]
    if chunk.rerank_rank is None:
        how = (f"not reranked: fused rank {fused} is below the rerank depth {depth} (the "
               f"reranker scores the first {depth} of the pool of {len(ordered)}, "
               f"rerank_depth), so it comes after them, at {pos + 1}")
    else:
        how = (f"reranked to {chunk.rerank_rank} of {depth} (score "
               f"{chunk.rerank_score:.4g}) from fused rank {fused}")
    legs = (f"lexical rank {_shown_rank(values['lexical_rank'])}, "
            f"dense rank {_shown_rank(values['dense_rank'])}")
    returned = next((r for r in response.results if r.chunk_id == cid), None)
    values["final_rank"] = None if returned is None else returned.final_rank
    if returned is not None:
        values["verdict"] = "returned"
        values["reason"] = f"returned at rank {returned.final_rank} ({how}; {legs})"
        return
    ahead = sum(1 for c in ordered[:pos] if c.document_id == chunk.document_id)
    if ahead >= p.per_source_cap:
        values["verdict"] = "capped"
        keeps = "the best chunk" if p.per_source_cap == 1 \
            else f"the best {p.per_source_cap} chunks"
        values["reason"] = (f"{how}, but {'1 chunk' if ahead == 1 else f'{ahead} chunks'} "
                            f"of {chunk.citekey!r} {'ranks' if ahead == 1 else 'rank'} above "
                            f"it after the rerank and per_source_cap {p.per_source_cap} "
                            f"keeps only {keeps} per source")
        return
    # the chunks that stay above it once the cap has run on the reranked order
    per_doc: dict[int, int] = {}
    kept_above = 0
    for c in ordered[:pos]:
        per_doc[c.document_id] = per_doc.get(c.document_id, 0) + 1
        kept_above += per_doc[c.document_id] <= p.per_source_cap
    values["verdict"] = "cut at k"
    # "..., so it comes after them, at 21 and not capped" ran two clauses together
    joined = "; not capped" if chunk.rerank_rank is None else " and not capped"
    values["reason"] = (f"{how}{joined}, but "
                        f"{'1 chunk comes' if kept_above == 1 else f'{kept_above} chunks come'}"
                        f" before it after the rerank and the per-source cap and k is {p.k}")


def _shown_rank(rank: int | None) -> str:
    return "-" if rank is None else str(rank)


def _how_far(values: dict[str, Any]) -> tuple[float, float, float]:
    """Order of a document's chunks by how far each got: returned (by final rank), then in
    the pool (by fused rank), then by the better of its ranks in the legs."""
    missing = float("inf")
    legs = [r for r in (values["lexical_rank"], values["dense_rank"]) if r is not None]
    # a reranked chunk's place in the pool is its rerank rank: the reranked head comes
    # first, the tail it did not score keeps its fused order after it
    placed = values.get("rerank_rank") or values["fused_rank"]
    return (values["final_rank"] if values["final_rank"] is not None else missing,
            placed if placed is not None else missing,
            min(legs) if legs else missing)


__all__ = ["RERANK_NOT_FOLLOWED", "Explanation", "document_chunks", "explain", "explain_many",
           "is_document_target", "resolve_target"]
