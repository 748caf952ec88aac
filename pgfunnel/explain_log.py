"""Explain a logged search: why a traced search (``search_id``) did or did not return a
chunk, answered from its trace and, for a chunk it did not log, from a replay."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np
import psycopg
from psycopg import sql

from pgfunnel.db import tuple_rows
from pgfunnel.defaults import DEPTH_MOST, OVERFETCH_MOST
from pgfunnel.errors import ConfigError, NotFoundError, shown, translate
from pgfunnel.explain import (
    _IN_POOL,
    HIDDEN_OR_MISSING,
    Explanation,
    _explain_rows,
    _explanation,
    is_document_target,
    resolve_target,
)
from pgfunnel.search import Funnel, SearchParams
from pgfunnel.versions import (
    LOGGED_EMBEDDING_RECORDED,
    LOGGED_PARAMS,
    LOGGED_SEARCH_PARAMS,
    LOGGED_TEXT_SEARCHED,
    guessed_said,
    replay_config,
)

_INT64 = 2**63 - 1

# the search parameters its config records (by the rule versions compare --last replays a
# logged search by: weights it chose are chosen again, an eval's k is not its own), whether
# it had a query embedding (NULL: its row does not record it) and whether its text was
# searched
_LOG_SQL = sql.SQL(
    "select sl.id, c.name, sl.index_version_id, sl.config, {params}, sl.query_text, "
    "sl.principals, sl.tenant, sl.at, {embedding}, {searched}, sl.notes "
    "from pgfunnel.search_log sl "
    "join pgfunnel.collection c on c.id = sl.collection_id where sl.id = %s "
    # the search_log policy's rule, applied without row-level security too, where the
    # principals given are the reader's word: a search whose principals are not all the
    # reader's could have found chunks the reader may not see
    "and sl.principals operator(pg_catalog.<@) %s::text[] "
    "and (sl.tenant is null or sl.tenant operator(pg_catalog.=) %s::text)").format(
        params=sql.SQL(LOGGED_PARAMS), embedding=sql.SQL(LOGGED_EMBEDDING_RECORDED),
        searched=sql.SQL(LOGGED_TEXT_SEARCHED))
# a chunk deleted since keeps its trace row (no foreign key): no document to name then
_TRACE_SQL = ("select t.chunk_id, t.lexical_rank, t.lexical_score, t.dense_rank, "
              "t.dense_score, t.fused_rank, t.fused_score, t.rerank_rank, t.rerank_score, "
              "t.final_rank, t.dropped, ch.document_id, d.citekey, ch.ordinal "
              "from pgfunnel.search_trace t left join pgfunnel.chunk ch on ch.id = t.chunk_id "
              "left join pgfunnel.document d on d.id = ch.document_id "
              "where t.search_id = %s "
              # a chunk the reader may no longer see (its readers changed since) is left
              # out, as search_trace's policy leaves it out under row-level security
              "and (d.id is null or ((d.is_public or d.readers operator(pg_catalog.&&) "
              "%s::text[]) and (d.tenant is null or d.tenant operator(pg_catalog.=) %s::text)))")


class _Traced(NamedTuple):
    chunk_id: int
    lexical_rank: int | None
    lexical_score: float | None
    dense_rank: int | None
    dense_score: float | None
    fused_rank: int
    fused_score: float
    rerank_rank: int | None
    rerank_score: float | None
    final_rank: int | None
    dropped: str | None
    document_id: int | None
    citekey: str | None
    ordinal: int | None


class _Logged(NamedTuple):
    search_id: int
    collection: str
    version_id: int
    config: dict[str, Any]
    query_text: str | None
    params: SearchParams
    reranked: bool
    rerank_depth: int | None
    #: the candidates in the order the cap and the cut saw them (reranked, then the tail)
    pool: list[_Traced]
    #: whether the search had a query vector, as its log row's notes record it; None for
    #: a row written before they did (or by a caller of final() that did not say)
    query_embedding: bool | None
    #: whether its query_text was given to the lexical leg: not when its notes say so
    #: (query_text_searched false: `pgfunnel eval` with a dense-only configuration logs the
    #: judged text), nor for such an eval logged before they did (its config's legs)
    text_searched: bool = True
    #: the search parameters it is explained with (:func:`pgfunnel.versions.replay_config`)
    #: and those of them its log does not record, defaults standing in for them: a guess
    replayed_with: dict[str, Any] | None = None
    config_guessed: tuple[str, ...] = ()
    #: the depth each leg read (None: it did not run), as the log row's notes record it;
    #: where they do not (a row logged before they did, or by a caller of final() that
    #: did not say), the depth given, the one a search keeps, else None
    lexical_depth: int | None = None
    dense_depth: int | None = None


def _checked_search_id(search_id: Any) -> int:
    if isinstance(search_id, bool) or not isinstance(search_id, (int, np.integer)) \
            or not 1 <= int(search_id) <= _INT64:
        raise ConfigError("search_id", "must be a traced search's id (a positive integer, "
                          f"SearchResponse.search_id), got {shown(search_id)}")
    return int(search_id)


def _read_log(funnel: Funnel, conn: psycopg.Connection[Any], search_id: int,
              reader: SearchParams, targets: Sequence[str]
              ) -> tuple[_Logged, dict[str, int | None]]:
    """The logged search and, for each target that names one chunk, its id: read as the
    reader (under row-level security the policies read its settings)."""
    ids: dict[str, int | None] = {}
    with funnel._transaction(conn, reader), tuple_rows(conn):
        row = conn.execute(_LOG_SQL, (list(LOGGED_SEARCH_PARAMS), search_id,
                                      list(reader.principals), reader.tenant)).fetchone()
        traced = [_Traced(*r) for r in conn.execute(
            _TRACE_SQL, (search_id, list(reader.principals), reader.tenant)).fetchall()] \
            if row is not None else []
        if row is not None:
            for target in targets:
                if not is_document_target(target):
                    ids[target] = resolve_target(conn, target, str(row[1]))
    if row is None:
        # under row-level security a search the reader may not read is not there for it
        raise NotFoundError(f"search {search_id} is not in the search log: no traced search "
                            "has that id (or it is not readable with these principals and "
                            "tenant); a search is logged only with trace=True (search "
                            "--trace)", parameter="search_id")
    _, collection, version_id, config, logged, query_text, principals, tenant, at, \
        had_vector, searched, notes = row
    if collection != reader.collection:
        raise ConfigError("search_id", f"search {search_id} searched collection "
                          f"{collection!r}, not {reader.collection!r}: explain it with that "
                          "collection (-c)")
    config = dict(config or {})
    as_of = _as_of(config.get("as_of"), at)
    # as versions compare --last replays it: with fixed weights, a search that chose its
    # own for the query was explained as another search, and an eval's with the pool's
    # length as its k
    replay = replay_config(dict(logged or {}), {})
    try:
        p = SearchParams.build(collection=collection, principals=tuple(principals or ()),
                               tenant=tenant, as_of=as_of, **replay.config)
    except ConfigError as exc:
        raise ConfigError("search_id", f"search {search_id}'s logged config cannot be "
                          f"replayed: {exc}") from exc
    if "k" in replay.guessed or "judged_query" in (notes or {}):
        # an eval's trace ranks its whole pool (its log's k is the pool's length): below
        # the k it is explained with (the k the eval scored at, or a guess in a log that
        # does not keep it), a candidate the trace lists as returned was not one of the
        # results eval scored, and read "returned at rank 11" where eval had lost it
        traced = [t._replace(final_rank=None, dropped="below k")
                  if t.final_rank is not None and t.final_rank > p.k else t for t in traced]
    reranked = bool(config.get("rerank")) and traced and any(
        t.rerank_rank is not None for t in traced)
    if reranked:
        # the reranked head in its order, then the tail it did not score in fused order
        pool = sorted(traced, key=lambda t: (t.rerank_rank is None,
                                             t.rerank_rank or 0, t.fused_rank))
    else:
        pool = sorted(traced, key=lambda t: t.fused_rank)
    depth = config.get("rerank_depth")
    return _Logged(search_id, collection, int(version_id), config, query_text, p,
                   bool(reranked), depth if isinstance(depth, int) else None, pool,
                   had_vector, bool(searched), replay.config,
                   tuple(replay.guessed), *_depths_used(notes, p)), ids


def _depths_used(notes: Any, p: SearchParams) -> tuple[int | None, int | None]:
    """The depth each leg of a logged search read, from its notes; a row that does not
    record them has the depths given (a search keeps a depth it is given), else None."""
    notes = notes if isinstance(notes, dict) else {}
    if "lexical_depth_used" not in notes:
        return p.lexical_depth, p.dense_depth
    lexical, dense = notes.get("lexical_depth_used"), notes.get("dense_depth_used")
    return (lexical if isinstance(lexical, int) else None,
            dense if isinstance(dense, int) else None)


def _as_of(logged: Any, at: dt.datetime) -> dt.datetime:
    """The time the logged search searched as of: the config's ``as_of``, or (NULL: the
    search's own time) the time it was logged."""
    from pgfunnel.versions import _logged_as_of

    parsed = _logged_as_of(None if logged is None else str(logged))
    return at if parsed is None else parsed


def explain_logged(funnel: Funnel, search_id: Any, targets: Sequence[str],
                   **reader: Any) -> list[Explanation]:
    """Each target explained for the logged search ``search_id`` (see
    :func:`pgfunnel.explain.explain_many`)."""
    sid = _checked_search_id(search_id)
    by_reader = funnel._params_for(reader)
    with funnel.connection() as conn:
        try:
            log, ids = _read_log(funnel, conn, sid, by_reader, targets)
        except psycopg.Error as exc:
            raise translate(exc) from exc
        answers = [_from_trace(log, target, ids.get(target)) for target in targets]
        missing = [t for t, a in zip(targets, answers, strict=True) if a is None]
        replayed = _replay(funnel, conn, log, missing) if missing else {}
        for target, e in replayed.items():
            if e.verdict == HIDDEN_OR_MISSING:
                _name_filters(funnel, conn, log, by_reader, target, e)
    return [a if a is not None else replayed[t] for t, a in zip(targets, answers, strict=True)]


def _from_trace(log: _Logged, target: str, cid: int | None) -> Explanation | None:
    """The trace's answer for ``target`` (``cid`` its chunk id, for one that names a
    chunk): a chunk among the logged candidates (for a document, the one of its chunks
    that got furthest); None when none of them is."""
    if is_document_target(target):
        mine = [t for t in log.pool if t.citekey == target]
    else:
        mine = [t for t in log.pool if t.chunk_id == cid]
    if not mine:
        return None
    chunk = min(mine, key=lambda t: (t.final_rank if t.final_rank is not None else _INT64,
                                     log.pool.index(t)))
    verdict, reason = _traced_reason(log, chunk)
    if len(mine) > 1:
        reason = (f"the furthest of the {len(mine)} chunks of {target!r} among its "
                  f"candidates ({target}#{chunk.ordinal}, chunk id {chunk.chunk_id}): "
                  f"{reason}")
    transforms = log.config.get("transforms")
    # a trace's answer reads a guessed parameter only where the cap or the cut says it
    said_guess = {("capped", "per_source_cap"), ("cut at k", "k")} & {
        (verdict, n) for n in log.config_guessed}
    return Explanation(
        target=target, chunk_id=chunk.chunk_id, verdict=verdict,
        lexical_rank=chunk.lexical_rank, lexical_score=chunk.lexical_score,
        lexical_exact_score=None, lexical_depth=log.lexical_depth,
        dense_rank=chunk.dense_rank, dense_score=chunk.dense_score, dense_exact_score=None,
        dense_depth=log.dense_depth, fused_rank=chunk.fused_rank,
        fused_score=chunk.fused_score, pool_size=len(log.pool),
        final_rank=chunk.final_rank, citekey=chunk.citekey, reason=reason,
        transforms=list(transforms) if isinstance(transforms, list) else [],
        reranked=log.reranked, rerank_rank=chunk.rerank_rank,
        rerank_score=chunk.rerank_score, search_id=log.search_id, searched=log.query_text,
        search_config=log.replayed_with, config_guessed=list(log.config_guessed),
        notices=[_guessed_notice(log)] if said_guess else [],
        # the pool is in the order the cap met it (reranked, or fused)
        capped_chunks=[{"ordinal": t.ordinal, "chunk_id": t.chunk_id,
                        "fused_rank": t.fused_rank} for t in mine
                       if t.dropped == "cap" and t.ordinal is not None]
        if is_document_target(target) else [])


def _traced_reason(log: _Logged, chunk: _Traced) -> tuple[str, str]:
    """The verdict and the sentence for a logged candidate, from the trace alone."""
    p, pool = log.params, log.pool
    pos = pool.index(chunk)
    if not log.reranked:
        how = f"fused rank {chunk.fused_rank} of the {len(pool)} candidates"
    elif chunk.rerank_rank is None:
        depth = sum(1 for t in pool if t.rerank_rank is not None)
        how = (f"not reranked: fused rank {chunk.fused_rank} is below the rerank depth "
               f"{depth} of the {len(pool)} candidates, so it came after them, at {pos + 1}")
    else:
        how = (f"reranked to {chunk.rerank_rank} (score {chunk.rerank_score:.4g}) from fused "
               f"rank {chunk.fused_rank} of the {len(pool)} candidates")
    legs = (f"lexical rank {_rank(chunk.lexical_rank)}, dense rank {_rank(chunk.dense_rank)}")
    said = f"search {log.search_id} logged it: "
    after = " after the rerank" if log.reranked else ""
    if chunk.dropped is None and chunk.final_rank is not None:
        return "returned", f"{said}returned at rank {chunk.final_rank} ({how}; {legs})"
    if chunk.dropped == "cap":
        ahead = sum(1 for t in pool[:pos] if t.document_id == chunk.document_id
                    and chunk.document_id is not None)
        of = "its document" if chunk.citekey is None else repr(chunk.citekey)
        keeps = "the best chunk" if p.per_source_cap == 1 \
            else f"the best {p.per_source_cap} chunks"
        return "capped", (f"{said}capped ({how}; {legs}): "
                          f"{'1 chunk' if ahead == 1 else f'{ahead} chunks'} of {of} "
                          f"ranked above it{after} and per_source_cap {p.per_source_cap} "
                          f"kept only {keeps} per source")
    # the chunks the cap kept above it, as the live explain counts them: those returned
    # alone said 10 of a chunk the live explain of the same search put 17 below
    kept_above = sum(1 for t in pool[:pos] if t.dropped != "cap")
    before = "1 chunk came" if kept_above == 1 else f"{kept_above} chunks came"
    return "cut at k", (f"{said}cut at k ({how}; {legs}): not capped, but {before} before "
                        f"it after {'the rerank and ' if log.reranked else ''}the per-source "
                        f"cap and k was {p.k}")


_FILTERS_SQL = (
    "select d.citekey, d.is_public or d.readers operator(pg_catalog.&&) %(principals)s, "
    "d.tenant is null or d.tenant = %(tenant)s, "
    "%(language)s::text is null or d.language = %(language)s, "
    "(d.valid_from is null or d.valid_from <= %(as_of)s) "
    "and (d.valid_to is null or d.valid_to > %(as_of)s), "
    "%(metadata_filter)s::jsonb is null or d.metadata @> %(metadata_filter)s::jsonb "
    "from pgfunnel.document d join pgfunnel.collection c on c.id = d.collection_id "
    "where c.name = %(collection)s and (d.citekey = %(citekey)s or d.id = (select "
    "ch.document_id from pgfunnel.chunk ch where ch.id = %(chunk_id)s)) "
    # only a document the reader reading the log may see (the policy's rule, without
    # row-level security too): one it may not is a document that does not exist
    "and (d.is_public or d.readers operator(pg_catalog.&&) %(reader_principals)s::text[]) "
    "and (d.tenant is null or d.tenant = %(reader_tenant)s::text)")


def _name_filters(funnel: Funnel, conn: psycopg.Connection[Any], log: _Logged,
                  reader: SearchParams, target: str, e: Explanation) -> None:
    """For a target the replay found hidden or missing that the reader reading the log
    can see: which of the logged search's filters hid it. One the reader cannot see
    either keeps the answer of a chunk that does not exist."""
    p = log.params
    args = p.sql_args()
    args.update(as_of=p.as_of, citekey=target if is_document_target(target) else None,
                chunk_id=None, reader_principals=list(reader.principals),
                reader_tenant=reader.tenant)
    if not is_document_target(target):
        with funnel._transaction(conn, reader), tuple_rows(conn):
            args["chunk_id"] = resolve_target(conn, target, log.collection)
    if args["citekey"] is None and args["chunk_id"] is None:
        return
    try:
        with funnel._transaction(conn, reader), tuple_rows(conn):
            row = conn.execute(_FILTERS_SQL, args).fetchone()
    except psycopg.Error as exc:
        raise translate(exc) from exc
    if row is None:
        return
    citekey, *passed = row
    names = ("principals", "tenant", "language", "as_of", "metadata filter")
    failed = [n for n, ok in zip(names, passed, strict=True) if not ok]
    if not failed:
        return
    e.citekey = str(citekey)
    shown_as = {"principals": f"principals {list(p.principals)}",
                "tenant": f"tenant {p.tenant!r}", "language": f"language {p.language!r}",
                "as_of": f"as_of {p.as_of}",
                "metadata filter": f"metadata filter {dict(p.metadata_filter or {})}"}
    e.reason = (f"{_not_logged(log)}: "
                f"document {citekey!r} is hidden from its reader by its "
                + ", ".join(shown_as[n] for n in failed))


def _not_logged(log: _Logged) -> str:
    """What a target the trace does not hold is said to be, with the logged candidates
    whose chunks are gone (a document deleted or edited and re-ingested since gets new
    chunk ids): the target may have been one of them."""
    gone = sum(1 for t in log.pool if t.document_id is None)
    since = (f" ({gone} of them deleted or re-ingested since, which the log cannot name)"
             if gone else "")
    return f"not among the {len(log.pool)} candidates search {log.search_id} logged{since}"


def _rank(rank: int | None) -> str:
    return "-" if rank is None else str(rank)


def _replay(funnel: Funnel, conn: psycopg.Connection[Any], log: _Logged,
            targets: Sequence[str]) -> dict[str, Explanation]:
    """The targets the log does not hold, followed by the SQL explain for the logged text,
    parameters and reader, on the logged version (pinned) where that can be done."""
    if log.query_text is None:
        raise ConfigError("search_id", f"search {log.search_id} searched with a query vector "
                          "alone, which the log does not keep: of its chunks only its "
                          f"{len(log.pool)} candidates can be explained, and "
                          f"{', '.join(map(repr, targets))} "
                          f"{'is' if len(targets) == 1 else 'are'} not among them")
    embedded: dict[str, tuple[np.ndarray | None, list[str]]] = {}
    for attempt in range(_REPLAY_TRIES):
        notices: list[str] = []
        version_id, model, pin = _replay_version(conn, log, notices)
        # embedded before the transaction: a model's first load takes seconds, which a pin
        # would hold the versions' rows locked for
        if model not in embedded:
            embedding_notices: list[str] = []
            embedded[model] = (_embedded(funnel, log, model, embedding_notices),
                               embedding_notices)
        vector, embedding_notices = embedded[model]
        notices.extend(embedding_notices)
        top_level = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        try:
            with conn.transaction(force_rollback=True):
                if top_level:
                    conn.execute("set transaction isolation level repeatable read")
                with _pinned(conn, pin):
                    # a search whose text the lexical leg did not get is replayed so
                    found, _ = _explain_rows(funnel, log.query_text if log.text_searched
                                             else None, vector, log.params,
                                             targets, notices, False, on=conn)
            break
        except psycopg.errors.SerializationFailure as exc:
            # an activation (or an ingest) committed the versions' rows the pin waited
            # for: read the versions again and replay once more
            if attempt + 1 >= _REPLAY_TRIES or not top_level:
                raise translate(exc) from exc
        except psycopg.Error as exc:
            raise translate(exc) from exc
    out: dict[str, Explanation] = {}
    transforms = log.config.get("transforms")
    for target, (rows, ordinals) in zip(targets, found, strict=True):
        e = _explanation(target, rows, ordinals, None, funnel, log.params, list(notices), [])
        e.search_id, e.replayed_on, e.searched = log.search_id, version_id, log.query_text
        e.transforms = list(transforms) if isinstance(transforms, list) else []
        e.reranked = log.reranked
        e.search_config, e.config_guessed = log.replayed_with, list(log.config_guessed)
        if log.config_guessed:
            e.notices.append(_guessed_notice(log))
        said = (f"{_not_logged(log)}; "
                f"its query replayed on index version {version_id}")
        e.reason = _logged_advice(e.reason)
        if e.verdict in _IN_POOL:
            # the replay reached the pool the logged search did not: the data changed
            e.reason = (f"{said} now reaches its pool (the collection or the index changed "
                        f"since the search), without the reranker: {e.reason}")
        else:
            e.reason = f"{said}: {e.reason}"
        out[target] = e
    return out


#: the SQL explain's advice, which asks for options of the explain call, and what a
#: replay says instead: a logged search's explain takes none of them (its own are used),
#: so the advice is what another search would need, and how to try one
_TRY = " (explain its text without search_id to try one)"
_ADVICE = (
    ("raise lexical_depth/dense_depth or rephrase the query",
     "a search with a deeper lexical_depth/dense_depth, or other words, could reach it" + _TRY),
    ("raise lexical_depth or rephrase the query",
     "a search with a deeper lexical_depth, or other words, could reach it" + _TRY),
    ("raise dense_depth or rephrase the query",
     "a search with a deeper dense_depth, or other words, could reach it" + _TRY),
    (f"rephrase the query (a leg reads at most {DEPTH_MOST} rows, and the legs that could "
     "reach it read that many)",
     f"only a search with other words could reach it (a leg reads at most {DEPTH_MOST} "
     "rows, and the legs that could reach it read that many)"),
    ("give the lexical leg a weight above 0",
     "a search that gives the lexical leg a weight above 0 could reach it" + _TRY),
    ("raise overfetch", "a search with a larger overfetch could reach it" + _TRY),
    (f"overfetch is at its most ({OVERFETCH_MOST}), so raise k",
     f"overfetch was at its most ({OVERFETCH_MOST}): a search with a larger k could reach it"
     + _TRY),
    ("no depth reaches it: the query needs one of its words, or an embedding for the dense "
     "leg",
     "no depth reaches it: a search needs one of its words, or a query embedding for the "
     "dense leg"),
)


def _logged_advice(reason: str) -> str:
    """``reason`` (the SQL explain's, for the replay) with its closing advice said as
    what another search would need: the logged search's explain takes no option."""
    for asked, said in _ADVICE:
        if reason.endswith(asked):
            return reason[:-len(asked)] + said
    return reason


#: the notice of a replay that runs the lexical leg alone because the Funnel has no
#: embedder, in the library's words (the CLI says it as the --lexical-only flag it took)
NO_EMBEDDER = ("pgfunnel: this Funnel has no query embedder (embedder=None): the replay of "
               "search {search_id} runs the lexical leg alone")
#: the notice of a replay of a search whose log row does not record whether it had a
#: query vector (logged before pgfunnel recorded it), and whose trace shows no dense rank
NO_VECTOR_GUESSED = (
    "pgfunnel: search {search_id}'s log row does not record whether it had a query "
    "embedding (it was logged before pgfunnel recorded that); none of the candidates "
    "readable in its trace came from the dense leg, so the replay runs the lexical leg "
    "alone, a guess: a dense leg that found nothing visible looks the same")

#: the notice of a logged search explained with a default for a parameter its log does
#: not record, as `versions compare --last` says it
GUESSED = ("pgfunnel: search {search_id}'s log does not record its {names} (logged before "
           "pgfunnel recorded {it}; an eval's log did not keep the k it cut at), so it is "
           "explained with the default{s} ({defaults}), a guess")


def _guessed_notice(log: _Logged) -> str:
    names = list(log.config_guessed)
    return GUESSED.format(search_id=log.search_id, names=", ".join(names),
                          it="it" if len(names) == 1 else "them",
                          s="" if len(names) == 1 else "s",
                          defaults=guessed_said(names, log.replayed_with or {}))


#: replays of one logged search, when a concurrent activation made the pin fail
_REPLAY_TRIES = 3


@contextmanager
def _pinned(conn: psycopg.Connection[Any], pin: tuple[int, int] | None) -> Iterator[None]:
    from pgfunnel.versions import pinned

    if pin is None:
        yield
        return
    with pinned(conn, *pin):
        yield


def _replay_version(conn: psycopg.Connection[Any], log: _Logged,
                    notices: list[str]) -> tuple[int, str, tuple[int, int] | None]:
    """The version a replay reads, its embedding model, and (collection id, version id)
    to pin when that is not the active one: the logged version while it exists and this
    role may pin it (as versions compare does), else the active one, with a notice."""
    try:
        with tuple_rows(conn):
            rows = conn.execute(
                "select v.id, v.state, v.embedding_model, v.collection_id, "
                "pg_catalog.has_table_privilege('pgfunnel.index_version', 'UPDATE') "
                "from pgfunnel.index_version v join pgfunnel.collection c "
                "on c.id = v.collection_id where c.name = %s and (v.id = %s or v.state = "
                "'active')", (log.collection, log.version_id)).fetchall()
    except psycopg.Error as exc:
        raise translate(exc) from exc
    logged = next((r for r in rows if r[0] == log.version_id), None)
    active = next((r for r in rows if r[1] == "active"), None)
    if logged is not None and logged[1] == "active":
        return int(logged[0]), str(logged[2]), None
    if logged is not None and logged[1] != "building" and logged[4]:
        return int(logged[0]), str(logged[2]), (int(logged[3]), int(logged[0]))
    if active is None:
        raise NotFoundError(f"collection {log.collection!r} has no active index version "
                            f"to replay search {log.search_id} on", parameter="collection")
    if logged is None:
        why = "was dropped"
    elif logged[1] == "building":
        why = "is building"
    else:
        why = ("cannot be made active for the replay by this role (it needs UPDATE on "
               "pgfunnel.index_version, as versions compare does)")
    notices.append(f"pgfunnel: index version {log.version_id}, which search "
                   f"{log.search_id} read, {why}: replayed on the active version "
                   f"{active[0]}")
    return int(active[0]), str(active[2]), None


def _embedded(funnel: Funnel, log: _Logged, model: str,
              notices: list[str]) -> np.ndarray | None:
    """The logged text embedded with the replayed version's model (the Funnel's own
    embedder when it is that model); None for a Funnel without one, with a notice."""
    text, p = log.query_text, log.params
    if text is None or not text.strip() or (p.weights is not None and p.weights[1] == 0):
        return None
    if log.query_embedding is False:
        return None
    if not log.text_searched:
        # its vector was all it searched with (eval does not log a search with neither):
        # replayed without one, the replay would search nothing
        return _dense_only_vector(funnel, log, model, text)
    if log.query_embedding is None and all(t.dense_rank is None for t in log.pool):
        # a log row that does not say: no candidate came from the dense leg, which returns
        # its nearest visible rows whenever it runs, so it most likely ran without a query
        # vector; but a dense leg whose rows were all filtered out, or a trace the reader
        # may not read, looks the same, so the replay says it guessed
        notices.append(NO_VECTOR_GUESSED.format(search_id=log.search_id))
        return None
    if funnel._embedder_spec is None:
        notices.append(NO_EMBEDDER.format(search_id=log.search_id))
        return None
    from pgfunnel.embedder import Embedder

    own = funnel._embedder
    use = own if own is not None and own.model_name == model else Embedder(model)
    return use.embed_query(text)


#: the refusal of a replay of a search whose text the lexical leg did not get, by a
#: Funnel without a query embedder, in the library's words (the CLI says --lexical-only)
DENSE_ONLY_NO_EMBEDDER = (
    "search {search_id} searched with its query embedding alone (pgfunnel eval with a "
    "dense-only configuration logs the judged text, which its lexical leg did not get), "
    "so its replay embeds the text, and this Funnel has no query embedder (embedder=None): "
    "explain it with one")


def _dense_only_vector(funnel: Funnel, log: _Logged, model: str, text: str) -> np.ndarray:
    from pgfunnel.embedder import Embedder
    from pgfunnel.errors import ModelLoadError

    if funnel._embedder_spec is None:
        raise ConfigError("search_id", DENSE_ONLY_NO_EMBEDDER.format(search_id=log.search_id))
    own = funnel._embedder
    try:
        use = own if own is not None and own.model_name == model else Embedder(model)
        return use.embed_query(text)
    except ModelLoadError as exc:
        # said here: the advice to replay the lexical leg alone fits no dense-only search
        raise ConfigError("search_id", f"search {log.search_id} searched with its query "
                          "embedding alone, so its replay embeds the text with the model of "
                          f"the version it replays on, and {exc}") from exc


__all__ = ["explain_logged"]
