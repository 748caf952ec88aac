"""Query transformations wired into :class:`pgfunnel.search.Funnel` (all opt-in).

* :func:`apply_query_hooks` -- the ``followup`` and ``rewriter`` hooks of ``Funnel.search``.
* :func:`search_multi` -- several phrasings of one need, merged with RRF.
* :func:`search_decomposed` -- a multi-intent query split into parts, merged round-robin.

Each step appends a record (what it did and why) to ``SearchResponse.transforms``; with
``trace=True`` the same records are stored in ``search_log.config["transforms"]`` of
every search the step ran. The merges re-apply the per-source cap, because each
sub-search is capped on its own and their union could otherwise hold more chunks of
one source than ``per_source_cap``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from pgfunnel.db import own_transaction, rows_by_position
from pgfunnel.errors import ConfigError, InvalidInputError, string_list, translate
from pgfunnel.transform import (
    FollowupResolver,
    GuardedRewriter,
    check_rrf_constant,
    decompose,
    multi_query,
    round_robin_merge,
    rrf_merge,
)

if TYPE_CHECKING:
    from pgfunnel.search import Funnel, Result, SearchResponse

__all__ = ["apply_query_hooks", "collection_settings", "search_decomposed", "search_multi"]

DEFAULT_REWRITE_TIMEOUT_S = 2.0


@rows_by_position
def collection_settings(conn: psycopg.Connection[Any], collection: str) -> dict[str, Any]:
    """``collection.settings`` (jsonb); ``protected_terms`` and ``qualifiers`` are read here.

    In a transaction of its own, as every lookup of a search is: on an application's
    connection without autocommit the statement began one that nothing committed, the
    search's transaction became a savepoint inside it, and the reader's transaction-local
    identity (what row-level security reads) outlived the search on that connection,
    with its trace never committed."""
    try:
        with own_transaction(conn):
            row = conn.execute("select settings from pgfunnel.collection where name = %s",
                               (collection,)).fetchone()
    except psycopg.Error as exc:
        # the first statement of a search with a rewriter or history: before `pgfunnel
        # init` it is the one that finds no schema
        raise translate(exc) from exc
    return dict(row[0]) if row and row[0] else {}


def _terms(settings: dict[str, Any], key: str) -> list[str]:
    value = settings.get(key) or []
    if not isinstance(value, list):
        raise ConfigError(key, f"collection setting must be a list of words, got {value!r}")
    return [str(v) for v in value]


def apply_query_hooks(funnel: Funnel, conn: psycopg.Connection[Any], query: str,
                      history: Sequence[str] | None, transforms: list[dict[str, Any]],
                      collection: str) -> str:
    """Follow-up resolution (when ``history`` is given), then the guarded rewrite, with
    the settings of ``collection``, the one searched."""
    settings: dict[str, Any] | None = None

    def coll_settings() -> dict[str, Any]:
        nonlocal settings
        if settings is None:
            settings = collection_settings(conn, collection)
        return settings

    if history is not None:
        resolver = funnel.followup
        if resolver is None:
            # passing history is the opt-in; the deterministic resolver is the default
            resolver = FollowupResolver(qualifiers=_terms(coll_settings(), "qualifiers"))
        res = resolver.resolve(list(history), query)
        if not isinstance(getattr(res, "query", None), str):
            # a resolve() that returned the text itself (or None) failed as a raw
            # AttributeError, or searched None
            raise ConfigError("followup", "resolve(history, query) must return a Resolution "
                                          "(its query a str), got "
                                          f"{type(res).__name__}")
        transforms.append({"step": "followup",
                           "original": getattr(res, "original", query), "query": res.query,
                           "carried_terms": list(getattr(res, "carried_terms", None) or ()),
                           "reason": str(getattr(res, "reason", ""))})
        query = res.query
    if funnel.rewriter is not None:
        guard = funnel.rewriter
        if not isinstance(guard, GuardedRewriter):
            # a bare callable (e.g. an LLM client) is always guarded: protected tokens
            # plus the collection's plan/qualifier words must survive the rewrite
            s = coll_settings()
            guard = GuardedRewriter(guard, timeout_s=DEFAULT_REWRITE_TIMEOUT_S,
                                    protected_terms=_terms(s, "protected_terms")
                                    + _terms(s, "qualifiers"))
        r = guard.rewrite(query)
        transforms.append({"step": "rewrite", "original": r.original, "query": r.query,
                           "used_rewrite": r.used_rewrite, "reason": r.reason,
                           "proposed": r.proposed, "protected": list(r.protected),
                           "missing": list(r.missing), "elapsed_s": round(r.elapsed_s, 4)})
        query = r.query
    return query


_Item = TypeVar("_Item")


def capped_first(items: Sequence[_Item], k: int, cap: int,
                 source: Callable[[_Item], str]) -> list[_Item]:
    """The first ``k`` of ``items`` in their order, at most ``cap`` from each ``source``
    (its citekey): the per-source cap and cut of merged lists, as ``final()`` applies
    them to one pool."""
    per_source: dict[str, int] = {}
    out: list[_Item] = []
    for item in items:
        key = source(item)
        if per_source.get(key, 0) >= cap:
            continue
        per_source[key] = per_source.get(key, 0) + 1
        out.append(item)
        if len(out) == k:
            break
    return out


def _cap_and_cut(results: Sequence[Result], k: int, cap: int) -> list[Result]:
    kept = capped_first(results, k, cap, lambda r: r.citekey)
    return [dataclasses.replace(r, final_rank=rank) for rank, r in enumerate(kept, 1)]


def _combine(funnel: Funnel, query: str, responses: list[SearchResponse],
             merged: list[Result], record: dict[str, Any]) -> SearchResponse:
    from pgfunnel.search import SearchResponse

    timings: dict[str, float] = {}
    for resp in responses:
        for key, ms in resp.timings_ms.items():
            timings[key] = timings.get(key, 0.0) + ms
    record["search_ids"] = [resp.search_id for resp in responses]
    record["merged"] = [r.chunk_id for r in merged]
    notices = [n for resp in responses for n in resp.notices]
    # each phrasing's (or part's) own follow-up and rewrite records, with its index: the
    # first one's alone were kept, and how the others were resolved or rewritten was lost
    transforms = [{**t, "part": i} for i, resp in enumerate(responses)
                  for t in resp.transforms if t.get("step") != record["step"]]
    return SearchResponse(query, merged, notices=list(dict.fromkeys(notices)),
                          reranked=bool(responses) and all(r.reranked for r in responses),
                          timings_ms=timings, transforms=[*transforms, record],
                          index_version_id=responses[0].index_version_id if responses
                          else None)


#: How many times a plan's searches run before they are run in one transaction instead.
PLAN_ATTEMPTS = 3


def _check_texts(texts: Sequence[str], name: Callable[[int], str]) -> None:
    """Each of a plan's texts checked as a search checks its query text (length, NUL, a
    lone surrogate), before the first of them is searched: each search commits its own
    trace, so a text refused at the second part left the first part's search_log and
    search_trace rows behind an error (and a lone surrogate was refused as "invalid input
    syntax for type json", the plan's record of it, naming nothing)."""
    from pgfunnel.search import query_text_problem

    for i, text in enumerate(texts):
        if (problem := query_text_problem(text)) is not None:
            raise InvalidInputError(f"{name(i)}: {problem}")


def _search_parts(funnel: Funnel, texts: Sequence[str], record: dict[str, Any],
                  params: dict[str, Any]) -> list[SearchResponse]:
    """Each of a plan's texts searched on its own, all of them from one index version.

    A merged answer must not mix two versions. Each search runs in its own short
    transaction and says which version it read; when a version switch committed between
    them, the plan runs again. One repeatable-read transaction around them all would give
    the same guarantee, but it would stay open while the model embeds and reranks each
    text (seconds on a CPU, and the first search of a Funnel loads the model), which a
    role's idle_in_transaction_session_timeout ends and which holds back vacuum. Only a
    plan that keeps meeting switches falls back to it.
    """
    for attempt in range(PLAN_ATTEMPTS):
        responses = [funnel._search(text, transforms=[{**record, "part": i}],
                                    exact_version=True, **params)
                     for i, text in enumerate(texts)]
        if len({resp.index_version_id for resp in responses}) <= 1:
            if attempt:
                record["version_switches"] = attempt
            return responses
    record["version_switches"] = PLAN_ATTEMPTS
    with funnel._one_snapshot() as conn:
        return [funnel._search(text, transforms=[{**record, "part": i}], plan_conn=conn,
                               exact_version=True, **params)
                for i, text in enumerate(texts)]


def _k_and_cap(funnel: Funnel, params: dict[str, Any]) -> tuple[int, int]:
    from pgfunnel.search import SearchParams

    # the checks of a search, before any of the plan's searches runs
    p = SearchParams.build(**{"k": funnel.defaults.k,
                              "per_source_cap": funnel.defaults.per_source_cap,
                              **{name: params[name] for name in ("k", "per_source_cap")
                                 if name in params}})
    if p.k < 1:
        raise ConfigError("k", f"must be at least 1, got {p.k}")
    return p.k, p.per_source_cap


def search_multi(funnel: Funnel, phrasings: Sequence[str], *, merge_rrf_k: int = 60,
                 max_queries: int | None = None, **params: Any) -> SearchResponse:
    """Search each phrasing of one need and merge the result lists with RRF.

    Each phrasing is a full search (rerank included, if on), with ``params`` (its
    ``rrf_k`` too: ``merge_rrf_k`` is the merge's own constant). All of them read one
    snapshot, so one index version. The merged list is capped per source and cut to
    ``k``; each Result keeps the per-stage ranks of the phrasing it was first found by,
    and ``final_rank`` is its place in the merged list.
    """
    # checked before any phrasing is searched, under its own name (rrf_k is the searches'
    # constant, also accepted here)
    merge_rrf_k = check_rrf_constant("merge_rrf_k", merge_rrf_k)
    given = string_list(phrasings, "phrasings")
    _check_texts(given, lambda i: f"phrasings[{i}]")
    mq = multi_query(given, max_queries=max_queries)
    if not mq.queries:
        raise InvalidInputError("phrasings: no usable phrasing (all empty or duplicates)")
    k, cap = _k_and_cap(funnel, params)
    record: dict[str, Any] = {"step": "multi_query", "queries": mq.queries,
                              "dropped": list(mq.dropped), "reason": mq.reason,
                              "merge": "rrf", "merge_rrf_k": merge_rrf_k}
    responses = _search_parts(funnel, mq.queries, record, params)
    by_id: dict[int, Result] = {}
    for resp in responses:
        for r in resp.results:
            by_id.setdefault(r.chunk_id, r)
    fused = rrf_merge([[r.chunk_id for r in resp.results] for resp in responses], k=merge_rrf_k)
    merged = _cap_and_cut([by_id[cid] for cid, _ in fused], k, cap)
    # the text the first phrasing was searched as (resolved from history, rewritten), as
    # search()'s query is: the phrasing as given was said to be the text searched
    first = responses[0].query if responses and responses[0].query is not None \
        else mq.queries[0]
    return _combine(funnel, first, responses, merged, record)


def search_decomposed(funnel: Funnel, query: str, *, max_parts: int = 3,
                      qualifiers: Sequence[str] | None = None, **params: Any) -> SearchResponse:
    """Split ``query`` where its structure shows several needs; merge the parts round-robin.

    ``qualifiers`` (plan names and the like) default to the collection setting
    ``qualifiers``. A query that is not split is searched as is (and says so in its
    transform record). Round-robin, not RRF: each part keeps its share of the first k.
    """
    if not isinstance(query, str):
        raise InvalidInputError(f"query: must be a string, got {type(query).__name__}")
    from pgfunnel.search import check_query_text

    # before the split, which took seconds over a megabyte only to be refused part by part
    check_query_text(query)
    if qualifiers is not None:
        # one string would be read character by character
        qualifiers = string_list(qualifiers, "qualifiers")
    if qualifiers is None:
        searched = params.get("collection", funnel.defaults.collection)
        with funnel.connection() as conn:
            qualifiers = _terms(collection_settings(conn, searched), "qualifiers")
    d = decompose(query, max_parts, qualifiers=qualifiers)
    # a merged tail joins its questions with " and ", and can outgrow the query
    _check_texts(d.parts, lambda i: f"query_text (part {i + 1} of {len(d.parts)} after "
                                    f"decomposing it)")
    k, cap = _k_and_cap(funnel, params)
    record: dict[str, Any] = {"step": "decompose", "parts": list(d.parts), "reason": d.reason,
                              "merge": "round_robin", "max_parts": max_parts}
    responses = _search_parts(funnel, d.parts, record, params)
    by_id: dict[int, Result] = {}
    for resp in responses:
        for r in resp.results:
            by_id.setdefault(r.chunk_id, r)
    order = round_robin_merge([[r.chunk_id for r in resp.results] for resp in responses])
    merged = _cap_and_cut([by_id[cid] for cid in order], k, cap)
    return _combine(funnel, query, responses, merged, record)
