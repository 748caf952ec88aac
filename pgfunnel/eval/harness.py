"""The evaluation harness: run configurations against a collection and build the report.

A configuration is a name and a dict of :class:`pgfunnel.search.SearchParams` fields
(``fusion``, ``weights``, ``rrf_k``, ``lexical_depth``, ``dense_depth``, ``overfetch``,
``per_source_cap``, ...) plus these harness keys:

- ``rerank`` (bool), ``rerank_model`` (str), ``rerank_depth`` (int): rerank the fused pool
  with a cross-encoder before the cap, as :meth:`Funnel.search` does;
- ``followup`` (bool, default true): a query with a ``history`` is first made stand-alone
  by :class:`pgfunnel.transform.FollowupResolver`;
- ``decompose`` (bool, default false): split multi-part questions with
  :func:`pgfunnel.transform.decompose`, search each part and merge the parts' results as
  :meth:`Funnel.search_decomposed` does (their chunks interleaved with
  :func:`pgfunnel.transform.round_robin_merge`, the per-source cap applied again, the
  first k chunks kept);
- ``qualifiers`` (list of str): words such as plan names that qualify a topic rather
  than being one, passed to the follow-up resolver and to decomposition;
- ``legs`` (``"both"``, the default, ``"lexical"`` or ``"dense"``): which legs run. With
  one leg the search gets no query embedding (lexical) or no query text (dense), as
  ``funnel_search`` does with a NULL argument, so the other leg contributes nothing. A
  zero weight also keeps its leg from running (docs/sql.md, Fusion), but the query is
  still embedded (or analysed), so a query that leaves the other leg nothing to search
  is an error naming ``weights``.

Per query the harness records the final ranking and the pool of every stage:

``lexical`` / ``dense``
    each leg at its own depth (``lexical_depth`` / ``dense_depth``, default
    ``min(max(k × overfetch, 40), 10000)``, as the search's), in leg order; a
    configuration has no pool for a leg it does not run (``legs``, or a weight of 0).
    ``candidates()`` only returns the fused pool, so the legs are read from one extra
    ``candidates()`` call with ``overfetch`` large enough that the pool is the whole
    union of both legs (RRF, weights 1:1, so every chunk of either leg scores above
    zero and is kept); a row with
    ``lexical_rank`` set is in the lexical leg, one with ``dense_rank`` set in the dense
    leg. No SQL is added for evaluation. That call is shared by configurations whose
    legs are the same (same depths, filters, BM25 and HNSW settings).
``fused``
    the configuration's candidate pool (``k × overfetch``, or wider where the search
    widened it for the per-source cap), in fused order.
``reranked``
    the pool after the reranker (only for configurations with ``rerank``).
``capped``
    the pool after the per-citekey cap, before the cut to k (``final()`` with
    k = pool size); its first k items are the final results.

With document-level judgments every ranking and pool is collapsed to citekeys
(:func:`~pgfunnel.eval.metrics.collapse_to_documents`); with chunk-level judgments
items are ``citekey#ordinal``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shlex
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from pgfunnel.db import require_schema, rows_by_position
from pgfunnel.defaults import COLLECTION, DEPTH_MOST, K_MOST, K, default_depth
from pgfunnel.errors import (
    JSON_ERRORS,
    ConfigError,
    InvalidInputError,
    NotFoundError,
    json_problem,
    text_problem,
    translate,
)
from pgfunnel.eval.metrics import collapse_to_documents, pool_recall_curve
from pgfunnel.eval.qrels import (
    JudgedQuery,
    Split,
    chunk_key,
    citekey_of,
    judging_level,
    over_limit_history,
    select_split,
)
from pgfunnel.eval.report import EvalReport, build_report
from pgfunnel.rerank import check_gate_margin
from pgfunnel.search import (
    FUSION_USED_SQL,
    Candidate,
    Funnel,
    SearchParams,
    _results_of_final,
    fusion_used_of,
    pool_used_notes,
    refuse_unused_rrf_k,
    rerank_head,
    rerank_pool,
)

#: harness keys a configuration may carry besides the search parameters
HARNESS_KEYS: frozenset[str] = frozenset(
    {"rerank", "rerank_model", "rerank_depth", "rerank_gate_margin", "followup", "decompose",
     "qualifiers", "legs"})

#: search parameters the harness sets for every configuration (the run's collection,
#: reader, tracing and cutoff), refused in one
HARNESS_SET: tuple[str, ...] = ("collection", "principals", "tenant", "trace", "k")

#: values of the ``legs`` harness key
LEGS: tuple[str, ...] = ("both", "lexical", "dense")

#: the deepest a leg reads (funnel_search refuses a lexical_depth or dense_depth above it,
#: and caps its default there)
MAX_LEG_DEPTH = DEPTH_MOST

#: stage names, in funnel order
STAGES: tuple[str, ...] = ("lexical", "dense", "fused", "reranked", "capped")

#: named sets of configurations for ``pgfunnel eval --preset``
# A single leg alone: the other leg does not run (no query embedding, or no query text),
# so none of its hits can fill the list when the leg has fewer chunks than k. (A zero
# weight alone let them in, at fused score 0, ordered by chunk id.) Rank fusion keeps the
# leg's own order: 1 / (rrf_k + rank) never ties.
LEXICAL_ONLY: dict[str, Any] = {"legs": "lexical", "fusion": "rrf", "weights": [1, 0]}
DENSE_ONLY: dict[str, Any] = {"legs": "dense", "fusion": "rrf", "weights": [0, 1]}

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "default": {"default": {}},
    "lexical": {"lexical": LEXICAL_ONLY},
    "dense": {"dense": DENSE_ONLY},
    # the default (min-max fusion) first: it is the baseline the others are compared
    # with and the configuration --floors gates
    "all-fusions": {
        "default": {},
        "lexical": LEXICAL_ONLY,
        "dense": DENSE_ONLY,
        "rrf": {"fusion": "rrf"},
        "zscore": {"fusion": "zscore"},
    },
}

ProgressFn = Callable[[str, int, int], None]


@dataclass(frozen=True)
class EvalConfig:
    """One named configuration: search parameters plus the harness keys."""

    name: str
    search: dict[str, Any]
    rerank: bool = False
    rerank_model: str | None = None
    rerank_depth: int | None = None
    rerank_gate_margin: float | None = None
    followup: bool = True
    decompose: bool = False
    qualifiers: tuple[str, ...] = ()
    legs: str = "both"

    @property
    def runs_lexical(self) -> bool:
        return self.legs != "dense"

    @property
    def runs_dense(self) -> bool:
        return self.legs != "lexical"

    def _weighted(self, leg: int) -> bool:
        """Whether the configuration's ``weights`` leave leg 0 (lexical) or 1 (dense) a
        weight above 0: a leg of weight 0 is not run (docs/sql.md, Fusion)."""
        weights = SearchParams.build(**self.search).weights
        return weights is None or weights[leg] != 0

    def stages(self) -> tuple[str, ...]:
        """The stages this configuration has, in funnel order: a leg it leaves out
        (``legs``) or weighs 0 has none, since nothing of it reaches the pool."""
        lexical = self.runs_lexical and self._weighted(0)
        dense = self.runs_dense and self._weighted(1)
        return tuple(s for s in STAGES
                     if (s != "lexical" or lexical) and (s != "dense" or dense)
                     and (s != "reranked" or self.rerank))

    @classmethod
    def from_dict(cls, name: str, raw: Mapping[str, Any]) -> EvalConfig:
        """Validate a configuration dict; unknown keys are a ConfigError naming them."""
        if not isinstance(raw, Mapping):
            raise ConfigError("config", f"{name}: must be a JSON object of search parameters")
        search = {k: v for k, v in raw.items() if k not in HARNESS_KEYS}
        # the keys a configuration takes: SearchParams.build's list of "known" names held
        # the five the harness sets (refused just below) and none of the harness's own,
        # so {"leg": "lexical"} was told of 'k' and 'trace' and not of 'legs'
        taken = sorted(({f.name for f in dataclasses.fields(SearchParams)}
                        - set(HARNESS_SET)) | HARNESS_KEYS)
        unknown = sorted(set(search) - set(taken) - set(HARNESS_SET))
        if unknown:
            raise ConfigError("config", f"{name}: {unknown[0]}: unknown configuration key "
                              f"(known: {', '.join(taken)})")
        for key in HARNESS_SET:
            if key in search:
                raise ConfigError("config", f"{name}: {key!r} is set by the harness, not per "
                                  "configuration")
        try:
            refuse_unused_rrf_k(search, SearchParams.build(**search).fusion)
        except ConfigError as exc:
            raise ConfigError("config", f"{name}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError("config", f"{name}: {exc}") from None
        for key in ("lexical_depth", "dense_depth"):
            # the search's own bound, said before any search runs: past it the harness's
            # union of both legs was refused as "legs deeper than 100,000 together",
            # naming lexical_depth whichever leg was too deep
            given = search.get(key)
            if given is not None and given > MAX_LEG_DEPTH:
                raise ConfigError("config", f"{name}: {key}: must be between 1 and "
                                  f"{MAX_LEG_DEPTH}, got {given}")
        # JSON's own types, checked: bool("false") is True, so {"followup": "false"} kept
        # follow-up resolution on and {"rerank": "no"} turned the reranker on
        for key in ("rerank", "followup", "decompose"):
            if key in raw and not isinstance(raw[key], bool):
                raise ConfigError("config", f"{name}: {key!r} must be true or false, got "
                                  f"{raw[key]!r}")
        quals = raw.get("qualifiers", ())
        if not isinstance(quals, list | tuple) or not all(isinstance(q, str) for q in quals):
            raise ConfigError("config", f"{name}: 'qualifiers' must be a list of strings")
        depth = raw.get("rerank_depth")
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int)
                                  or depth < 1):
            raise ConfigError("config", f"{name}: 'rerank_depth' must be a positive integer")
        model = raw.get("rerank_model")
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise ConfigError("config", f"{name}: 'rerank_model' must be a model id or a "
                              f"local path (a string), got {model!r}")
        try:
            margin = check_gate_margin(raw.get("rerank_gate_margin"), "rerank_gate_margin")
        except ConfigError as exc:
            raise ConfigError("config", f"{name}: 'rerank_gate_margin' {exc.detail}") from None
        legs = raw.get("legs", "both")
        if legs not in LEGS:
            raise ConfigError("config", f"{name}: 'legs' must be one of {', '.join(LEGS)}, "
                              f"got {legs!r}")
        return cls(name=name, search=search, rerank=raw.get("rerank", False),
                   rerank_model=model, rerank_depth=depth, rerank_gate_margin=margin,
                   followup=raw.get("followup", True),
                   decompose=raw.get("decompose", False), qualifiers=tuple(quals),
                   legs=legs)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.search)
        d.update(rerank=self.rerank, followup=self.followup, decompose=self.decompose)
        if self.rerank:
            d.update(rerank_model=self.rerank_model, rerank_depth=self.rerank_depth,
                     rerank_gate_margin=self.rerank_gate_margin)
        if self.qualifiers:
            d["qualifiers"] = list(self.qualifiers)
        if self.legs != "both":
            # only when set: a two-leg configuration keeps the hash it always had
            d["legs"] = self.legs
        return d

    def ran_dict(self) -> dict[str, Any]:
        """:meth:`as_dict` as the report's metadata gives it: what ran. A configuration
        whose one leg alone runs (``legs``, or a weight of 0) fuses nothing, so its
        ``fusion``, ``weights`` and ``rrf_k`` are replaced by ``fusion``: ``"none (one
        leg: lexical)"``; the lexical and dense presets' ``rrf`` and ``[1, 0]`` read as a
        fusion that had run."""
        d = self.as_dict()
        stages = self.stages()
        ran = [leg for leg in ("lexical", "dense") if leg in stages]
        if len(ran) == 1:
            for key in ("fusion", "weights", "rrf_k"):
                d.pop(key, None)
            d = {"fusion": f"none (one leg: {ran[0]})", **d}
        return d

    def config_hash(self) -> str:
        text = json.dumps(self.as_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def parse_config_arg(arg: str) -> EvalConfig:
    """``NAME=JSON`` from the command line, e.g. ``minmax={"fusion": "minmax"}``."""
    name, sep, text = arg.partition("=")
    if not sep or not name.strip():
        raise ConfigError("config", f"expected NAME=JSON, got {arg!r}")
    try:
        raw = json.loads(text) if text.strip() else {}
    except JSON_ERRORS as exc:
        raise ConfigError("config", f"{name}: not valid JSON ({json_problem(exc)})") from None
    return EvalConfig.from_dict(name.strip(), raw)


def preset_configs(*presets: str) -> list[EvalConfig]:
    """The configurations of one or more presets, in order; a name two presets share
    (``--preset all-fusions --preset lexical``) is run once."""
    configs: dict[str, EvalConfig] = {}
    for at, preset in enumerate(presets):
        if preset not in PRESETS:
            raise ConfigError("preset", f"unknown preset {preset!r} (use {', '.join(PRESETS)})")
        if preset in presets[:at]:
            # run once, it would compare with nothing, which the repeat seemed to ask for
            raise ConfigError("preset", f"{preset!r} is given twice; to compare a "
                                        "configuration with itself, add a copy under a name "
                                        "of its own: --config same='{}'")
        for name, params in PRESETS[preset].items():
            configs.setdefault(name, EvalConfig.from_dict(name, params))
    return list(configs.values())


@dataclass
class QueryRun:
    """What one configuration did for one query."""

    text: str
    final: list[str]
    stages: dict[str, list[str]]
    top_score: float | None
    parts: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: each stage's chunk keys (``citekey#ordinal``) as ranked, before any collapse to
    #: documents: the pool-recall curves count depth in ranked chunks, as ``k`` and the
    #: leg depths do (empty: ``stages`` is read instead)
    chunk_stages: dict[str, list[str]] = field(default_factory=dict)
    #: for a configuration that reranks: whether the reranker ran (False: the rerank
    #: gate skipped it, or the pool was empty); None for one that does not rerank
    reranked: bool | None = None


@dataclass
class HarnessResult:
    report: EvalReport
    runs: dict[str, dict[str, QueryRun]]
    queries: list[JudgedQuery]
    curves: dict[str, list[tuple[int, float]]]
    #: judged items (grade >= 1) that name no document or chunk of the collection: they
    #: count as never found, which usually means the citekeys were written differently
    missing_items: list[str] = field(default_factory=list)
    #: missing items that are citekeys of the collection's documents, read as chunk keys
    citekeys_read_as_chunks: list[str] = field(default_factory=list)
    #: why each searched query's history is over the follow-up limit, where no
    #: configuration resolved follow-ups (so none read it): :func:`unread_history_message`
    unread_history: list[str] = field(default_factory=list)


class Harness:
    """Runs configurations over judged queries against one collection.

    ``source`` is what :class:`~pgfunnel.search.Funnel` takes (connection, pool or DSN).
    ``principals``/``tenant`` are the reader every search runs as (default: public only).
    """

    def __init__(self, source: Any, collection: str = COLLECTION, *, k: int = K,
                 principals: Sequence[str] = (), tenant: str | None = None,
                 embedder: Any = "auto", trace: bool = False,
                 progress: ProgressFn | None = None) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= K_MOST:
            raise ConfigError("k", f"must be an integer between 1 and {K_MOST}, got {k!r}")
        self.funnel = Funnel(source, collection, embedder=embedder)
        self.collection = collection
        self.k = k
        self.principals = tuple(principals)
        self.tenant = tenant
        self.trace = trace
        self.progress = progress
        self._vectors: dict[str, np.ndarray | None] = {}
        self._legs: dict[tuple[Any, ...], tuple[list[Candidate], list[Candidate]]] = {}
        self._rerankers: dict[str, Any] = {}
        # QueryRun.seconds is what the configuration's own search took: the work the run
        # does once and shares (loading a model, a query's embedding, each leg at its full
        # depth for the stage pools) is left out of whichever configuration met it first,
        # and a query's embedding is charged to every configuration that searches with it
        self._embed_seconds: dict[str, float] = {}
        self._shared_seconds = 0.0

    # -- pieces -----------------------------------------------------------------------
    def _vector(self, conn: psycopg.Connection[Any], text: str) -> np.ndarray | None:
        if text not in self._vectors:
            started = time.perf_counter()
            emb = self.funnel.embedder_for(conn, self.collection)  # loads the model once
            loaded = time.perf_counter()
            self._vectors[text] = emb.embed_query(text) if emb is not None and text.strip() \
                else None
            done = time.perf_counter()
            self._embed_seconds[text] = done - loaded
            self._shared_seconds += done - started
        return self._vectors[text]

    def _embed_ahead(self, conn: psycopg.Connection[Any], queries: Sequence[JudgedQuery],
                     configs: Sequence[EvalConfig]) -> None:
        """Embed every text a configuration with a dense leg will search with, in batches,
        before the first search. One at a time, the queries' embeddings were most of an
        eval's time: the help center's 97 took 5.4x as long as in one batch on two cores.
        Each text is charged its share of the batch's time."""
        from pgfunnel.transform import decompose

        texts: list[str] = []
        seen = set(self._vectors)
        for cfg in configs:
            if not cfg.runs_dense:
                continue
            for q in queries:
                text = standalone_query(q, cfg.qualifiers) if cfg.followup else q.query
                parts = decompose(text, qualifiers=cfg.qualifiers).parts if cfg.decompose \
                    else [text]
                for part in parts:
                    # a text the embedder refuses is left to its search, which says why
                    if part not in seen and part.strip() and text_problem(part) is None:
                        seen.add(part)
                        texts.append(part)
        if not texts:
            return
        started = time.perf_counter()
        emb = self.funnel.embedder_for(conn, self.collection)  # loads the model once
        loaded = time.perf_counter()
        if emb is not None:
            done = 0

            def embedded(n: int) -> None:
                # a large query set takes a while on a CPU: said, as the searches are
                nonlocal done
                done += n
                if self.progress is not None:
                    self.progress("queries (embedding)", done, len(texts))

            vectors = emb.embed(texts, progress=embedded)
            share = (time.perf_counter() - loaded) / len(texts)
            for text, vector in zip(texts, vectors, strict=True):
                self._vectors[text] = np.asarray(vector)
                self._embed_seconds[text] = share
        self._shared_seconds += time.perf_counter() - started

    def _reranker(self, cfg: EvalConfig) -> Any:
        from pgfunnel.rerank import DEFAULT_RERANK_MODEL, Reranker

        model = cfg.rerank_model or DEFAULT_RERANK_MODEL
        if model not in self._rerankers:
            started = time.perf_counter()
            self._rerankers[model] = Reranker(model)
            self._shared_seconds += time.perf_counter() - started
        return self._rerankers[model]

    def _params(self, cfg: EvalConfig) -> SearchParams:
        return SearchParams.build(**{**cfg.search, "k": self.k, "collection": self.collection,
                                     "principals": list(self.principals),
                                     "tenant": self.tenant, "trace": self.trace})

    def _legs_for(self, conn: psycopg.Connection[Any], text: str, query_text: str | None,
                  vector: np.ndarray | None, p: SearchParams
                  ) -> tuple[list[Candidate], list[Candidate]]:
        """Each leg at its full depth, from one candidates() call over their union.
        ``query_text`` / ``vector`` are what the configuration searches with (None: that
        leg does not run, and its list is empty); ``text`` is the query they came from."""
        lex_depth, den_depth = _depths_of_legs(p)
        key = (text, query_text is not None, vector is not None, lex_depth, den_depth, p.k1,
               p.b, p.ef_search, p.language,
               json.dumps(p.metadata_filter, sort_keys=True, default=str), str(p.as_of))
        if key not in self._legs:
            started = time.perf_counter()
            union = lex_depth + den_depth  # at most 20,000: a pool of 1,000 x 20
            k = min(K_MOST, union)
            overfetch = math.ceil(union / k)
            lp = SearchParams.build(**{**_fields(p), "k": k, "overfetch": overfetch,
                                       "fusion": "rrf", "weights": (1.0, 1.0),
                                       "lexical_depth": lex_depth, "dense_depth": den_depth})
            with self.funnel._transaction(conn, lp):
                cursor = self.funnel._execute_candidates(conn, query_text, vector, lp)
            rows = self.funnel._pool_from_rows(cursor.fetchall())
            lex = sorted((c for c in rows if c.lexical_rank is not None),
                         key=lambda c: c.lexical_rank or 0)
            den = sorted((c for c in rows if c.dense_rank is not None),
                         key=lambda c: c.dense_rank or 0)
            self._legs[key] = (lex, den)
            self._shared_seconds += time.perf_counter() - started
        return self._legs[key]

    def _search_one(self, conn: psycopg.Connection[Any], text: str, cfg: EvalConfig,
                    p: SearchParams, level: str, log: Mapping[str, str]
                    ) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]],
                               float | None, bool]:
        def chunks(items: Sequence[Any]) -> list[str]:
            return [f"{c.citekey}#{c.ordinal}" for c in items]

        def keys(items: Sequence[Any]) -> list[str]:
            ids = chunks(items)
            return collapse_to_documents(ids) if level == "document" else ids

        # a leg the configuration leaves out gets nothing to search with: no query text
        # (dense only) or no query embedding (lexical only), so it adds nothing to the pool
        query_text = text if cfg.runs_lexical and text.strip() else None
        vector = self._vector(conn, text) if cfg.runs_dense else None
        if query_text is None and vector is None:
            return [], {s: [] for s in cfg.stages()}, {s: [] for s in cfg.stages()}, None, \
                False
        lex, den = self._legs_for(conn, text, query_text, vector, p)
        with self.funnel._transaction(conn, p):
            cursor = self.funnel._execute_candidates(conn, query_text, vector, p)
            used_cursor = conn.execute(FUSION_USED_SQL, prepare=True)
        pool = self.funnel._pool_from_rows(cursor.fetchall())
        used = fusion_used_of(used_cursor.fetchone())
        ordered = list(pool)
        reranked = False
        if cfg.rerank and pool:
            from pgfunnel.rerank import should_skip

            if not should_skip([c.fused_score for c in pool], cfg.rerank_gate_margin):
                depth = rerank_head(len(pool), cfg.rerank_depth, p)
                ordered = rerank_pool(self._reranker(cfg), text, pool, depth)
                reranked = True
        capped: list[Any] = []
        if ordered:
            cp = dataclasses_replace(p, k=min(K_MOST, len(ordered)))
            # the judged query's id and this run of it go into a trace's log notes, so
            # stage_recall_in_db finds the searches of a resolved follow-up (other text)
            # and of every part of a decomposed query
            notes: dict[str, Any] | None = {"legs": cfg.legs} if cfg.legs != "both" else None
            # the judged text is logged as the query_text, but a dense-only configuration
            # gave the lexical leg none: said, so a replay (explain --search-id, versions
            # compare --last) searches it as it was searched
            # the final() logged ranks the whole pool (its config's k is the pool's
            # length): eval_k is the k the eval scored at, which a replay cuts at
            log_notes: dict[str, Any] = {**log, "query_embedding": vector is not None,
                                         "eval_k": self.k}
            if query_text is None:
                log_notes["query_text_searched"] = False
            # the weights the pool used and whether they were given, and the depth each
            # leg read, as a search's trace logs them (config.weights held null where the
            # search chose them)
            weights_note, used_log = pool_used_notes(used, p.weights is not None)
            notes = {**(notes or {}), **weights_note} or None
            log_notes.update(used_log)
            with self.funnel._transaction(conn, cp):
                cursor = self.funnel._execute_final(conn, text, ordered, cp,
                                                    reranked=reranked, notes=notes,
                                                    log_notes=log_notes)
            capped = _results_of_final(cursor.fetchall(), ordered)
        ranked = {"lexical": lex, "dense": den, "fused": pool, "reranked": ordered,
                  "capped": capped}
        stages = {s: keys(ranked[s]) for s in cfg.stages()}
        chunk_stages = {s: chunks(ranked[s]) for s in cfg.stages()}
        final = keys(capped[: self.k])
        # a one-leg configuration fuses with RRF, whose top score is the same for every
        # query: its leg's own top score (BM25, cosine) is what could tell queries apart
        top = None if not pool else pool[0].lexical_score if cfg.legs == "lexical" else \
            pool[0].dense_score if cfg.legs == "dense" else pool[0].fused_score
        return final, stages, chunk_stages, top, reranked

    def run_query(self, conn: psycopg.Connection[Any], q: JudgedQuery, cfg: EvalConfig,
                  level: str) -> QueryRun:
        from pgfunnel.query_plans import capped_first
        from pgfunnel.transform import decompose, round_robin_merge

        t0 = time.perf_counter()
        shared_before = self._shared_seconds
        text = standalone_query(q, cfg.qualifiers) if cfg.followup else q.query
        parts = [text]
        if cfg.decompose:
            parts = decompose(text, qualifiers=cfg.qualifiers).parts
        p = self._params(cfg)
        finals: list[list[str]] = []
        chunk_finals: list[list[str]] = []
        stages: dict[str, list[str]] = {}
        chunk_stages: dict[str, list[str]] = {}
        tops: list[float] = []
        reranked = False
        log = {"judged_query": q.query_id, "search_group": f"{uuid.uuid4()}",
               "config": cfg.name}
        for part in parts:
            final, part_stages, part_chunks, top, part_reranked = self._search_one(
                conn, part, cfg, p, level, log)
            reranked = reranked or part_reranked
            finals.append(final)
            chunk_finals.append(part_chunks.get("capped", [])[: self.k])
            if top is not None:
                tops.append(top)
            for into, got in ((stages, part_stages), (chunk_stages, part_chunks)):
                for stage, items in got.items():
                    # a decomposed query's stage pool is the union of its parts' pools
                    merged = into.setdefault(stage, [])
                    merged.extend(i for i in items if i not in merged)
        if len(finals) == 1:
            final = finals[0]
        else:
            # as search_decomposed merges: the parts' result chunks interleaved, the
            # per-source cap applied again and the list cut to k chunks, then read as
            # documents. Merging the parts' document lists instead scored k documents
            # (k chunks hold fewer) and none of the cap across parts.
            final = capped_first(round_robin_merge(chunk_finals), self.k,
                                 p.per_source_cap, citekey_of)
            if level == "document":
                final = collapse_to_documents(final)
        embedding = sum(self._embed_seconds.get(part, 0.0) for part in parts) \
            if cfg.runs_dense else 0.0
        seconds = time.perf_counter() - t0 - (self._shared_seconds - shared_before) + embedding
        return QueryRun(text=text, final=list(final[: self.k]), stages=stages,
                        top_score=max(tops) if tops else None,
                        parts=parts if len(parts) > 1 else [],
                        seconds=max(0.0, seconds), chunk_stages=chunk_stages,
                        reranked=reranked if cfg.rerank else None)

    # -- the whole run ------------------------------------------------------------------
    def run(self, queries: Sequence[JudgedQuery], configs: Sequence[EvalConfig], *,
            split: Split | None = None, baseline: str | None = None,
            n_resamples: int = 2000, seed: int = 0) -> HarnessResult:
        """Run every configuration over the (split's) queries and build the report."""
        if not configs:
            raise ConfigError("config", "give at least one configuration")
        names = [c.name for c in configs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError("config", f"configuration name {dupes[0]!r} is used twice")
        selected = list(queries) if split is None else select_split(queries, split)
        if not selected:
            raise InvalidInputError("no judged queries to evaluate"
                                    + (f" in the {split} split" if split else ""))
        level = judging_level(selected)
        unread_history = _unread_histories(selected, configs)
        runs: dict[str, dict[str, QueryRun]] = {c.name: {} for c in configs}
        total = len(selected) * len(configs)
        done = 0
        with self.funnel.connection() as conn:
            version = self._index_version(conn)
            configs = self._with_collection_qualifiers(conn, configs)
            selected, respelled, missing = self.with_citekey_spellings(conn, selected, level)
            # an item read as a chunk key that is a document's citekey (`repo#42`): the
            # warning says how it was read, or it looks like a wrong name
            citekeys_read_as_chunks = (sorted(self._present_items(conn, missing, "document"))
                                       if level == "chunk" else [])
            # every configuration's values, checked as its searches will check them, before
            # the queries are embedded: a bad rrf_k was told only after the embedding
            for cfg in configs:
                try:
                    self.funnel._check_params(conn, None, self._params(cfg))
                except ConfigError as exc:
                    if (named := _named_by_config(cfg, exc)) is None:
                        raise
                    raise named from exc
            self._embed_ahead(conn, selected, configs)
            for cfg in configs:
                for q in selected:
                    try:
                        runs[cfg.name][q.query_id] = self.run_query(conn, q, cfg, level)
                    except (psycopg.Error, ConfigError) as exc:
                        err = translate(exc)
                        named = _named_by_config(cfg, err)
                        if named is None and err is exc:
                            raise
                        raise (named or err) from exc
                    done += 1
                    if self.progress is not None:
                        self.progress(cfg.name, done, total)

        rankings = {name: {qid: r.final for qid, r in by_q.items()} for name, by_q in runs.items()}
        pools: dict[str, dict[str, dict[str, list[str]]]] = {}
        for name, by_q in runs.items():
            stage_pools: dict[str, dict[str, list[str]]] = {}
            for stage in STAGES:
                if any(stage in r.stages for r in by_q.values()):
                    stage_pools[stage] = {qid: r.stages.get(stage, []) for qid, r in by_q.items()}
            pools[name] = stage_pools
        metadata: dict[str, Any] = {
            "collection": self.collection,
            "index_version": version,
            # the hash is of the configuration as given, so it stays the one earlier
            # reports recorded; the rest says what ran
            "configs": {c.name: {"hash": c.config_hash(), **c.ran_dict()} for c in configs},
            "leg_depths": {c.name: _leg_depths(self._params(c), c) for c in configs},
            "pools": "lexical/dense: each leg at its depth; fused: k x overfetch; capped: "
                     "after the per-citekey cap, before the cut to k",
            "mean_seconds_per_query": {
                name: round(sum(r.seconds for r in by_q.values()) / max(1, len(by_q)), 4)
                for name, by_q in runs.items()},
            "no_answer_top_score": _noanswer_scores(runs, selected),
            "judged_items_not_in_collection": missing,
            "judged_items_respelled": respelled,
        }
        rerank = _rerank_counts(runs, configs)
        if rerank:
            # how often each reranking configuration's reranker ran: a gate's margin is
            # chosen on judged queries, and its scores alone did not say how often it fired
            metadata["rerank"] = rerank
        report = build_report(rankings, selected, k=self.k, baseline=baseline, pools=pools,
                              n_resamples=n_resamples, seed=seed, metadata=metadata)
        report.split = split
        curves = self._curves(runs, selected, level, self.k)
        if respelled:
            warnings.warn(respelled_items_message(respelled), stacklevel=2)
        if missing:
            warnings.warn(missing_items_message(missing, selected, self.collection,
                                                citekeys_read_as_chunks, self.principals),
                          stacklevel=2)
        if unread_history:
            warnings.warn(unread_history_message(unread_history), stacklevel=2)
        return HarnessResult(report=report, runs=runs, queries=selected, curves=curves,
                             missing_items=missing,
                             citekeys_read_as_chunks=citekeys_read_as_chunks,
                             unread_history=unread_history)

    def _with_collection_qualifiers(self, conn: psycopg.Connection[Any],
                                    configs: Sequence[EvalConfig]) -> list[EvalConfig]:
        """Configurations without qualifiers of their own take the collection's
        (``collection.settings`` ``qualifiers``), as a search with ``history`` and
        ``search_decomposed`` do: without them a follow-up was resolved, and a question
        decomposed, otherwise than the search being measured would."""
        if all(c.qualifiers for c in configs):
            return list(configs)
        from pgfunnel.query_plans import _terms, collection_settings

        words = tuple(_terms(collection_settings(conn, self.collection), "qualifiers"))
        return [c if c.qualifiers or not words else dataclasses.replace(c, qualifiers=words)
                for c in configs]

    def _curves(self, runs: Mapping[str, Mapping[str, QueryRun]],
                queries: Sequence[JudgedQuery], level: str = "chunk", k: int | None = None
                ) -> dict[str, list[tuple[int, float]]]:
        """Pool recall against depth: each leg (from the configuration that reads it
        deepest; none for a leg no configuration runs) and each configuration's capped
        list, each line up to the length of its own longest list.

        Depth counts ranked chunks (``QueryRun.chunk_stages``), as ``k`` and the leg
        depths do; judged per document, a document is found at depth d when one of its
        chunks is in the first d, so a configuration's line at depth k is its recall@k.
        (Counted in collapsed documents, that line read 1.000 at depth 10 where the
        table's recall@10 was 0.994: ten documents are more than ten chunks.)"""
        curves: dict[str, list[tuple[int, float]]] = {}
        if not runs:
            return curves
        # runs built without chunk_stages: their stages are the ranked items as judged
        by_chunk = any(r.chunk_stages for by_q in runs.values() for r in by_q.values())
        documents = by_chunk and level == "document"

        def ranked(r: QueryRun) -> dict[str, list[str]]:
            return r.chunk_stages if by_chunk else r.stages

        def depths(pools: Mapping[str, Sequence[str]]) -> list[int]:
            # up to the line's own longest list, which is its last point: a line drawn on
            # to the longest list of any line went flat where its own lists ended, as if
            # more depth had found nothing (a 40-deep leg beside a 100-deep one); without
            # that point a pool of 34 items ended the line at 20, hiding ranks 21-34; and
            # k, where recall@k is read
            longest = max(1, max((len(p) for p in pools.values()), default=1))
            return sorted({d for d in (1, 3, 5, 10, 20, 40, 80, 160, 320, 640, 1000)
                           if d <= longest} | {1, longest}
                          | ({k} if k is not None and k <= longest else set()))

        for leg in ("lexical", "dense"):
            ran = [{qid: ranked(r).get(leg, []) for qid, r in by_q.items()}
                   for by_q in runs.values() if any(leg in ranked(r) for r in by_q.values())]
            if not ran:
                continue
            # the configuration that reads the leg deepest (the first of equals): its
            # line shows the most of what depth buys
            pools = max(ran, key=lambda ps: max((len(p) for p in ps.values()), default=0))
            curves[f"{leg} leg"] = pool_recall_curve(pools, queries, depths(pools),
                                                     documents=documents)
        for name, by_q in runs.items():
            pools = {qid: ranked(r).get("capped", []) for qid, r in by_q.items()}
            curves[f"{name} (final order)"] = pool_recall_curve(pools, queries, depths(pools),
                                                               documents=documents)
        return curves

    def _present_items(self, conn: psycopg.Connection[Any], items: Sequence[str],
                       level: str) -> set[str]:
        """Those of ``items`` that a document (or chunk) of the collection has."""
        if not items:
            return set()
        key = ("d.citekey" if level == "document"
               else "d.citekey || '#' || ch.ordinal::text")
        # as the reader the searches run as: under row-level security the policies read
        # its settings, and without them every document is hidden; without it the
        # principals and tenant given are the reader (the searches' own rule), or a
        # document hidden from them counted as never found without being named
        reader = SearchParams.build(principals=self.principals, tenant=self.tenant)
        with self.funnel._transaction(conn, reader):
            return {r[0] for r in conn.execute(
                sql.SQL("select distinct {key} from pgfunnel.document d "
                        "join pgfunnel.collection c on c.id = d.collection_id "
                        "join pgfunnel.chunk ch on ch.document_id = d.id "
                        "where c.name = %s and {key} = any(%s) "
                        "and (d.is_public or d.readers operator(pg_catalog.&&) %s::text[]) "
                        "and (d.tenant is null or d.tenant operator(pg_catalog.=) %s::text)"
                        ).format(key=sql.SQL(key)),
                (self.collection, list(items), list(reader.principals), reader.tenant))}

    def _missing_items(self, conn: psycopg.Connection[Any], queries: Sequence[JudgedQuery],
                       level: str) -> list[str]:
        """The judged items (grade >= 1) that no document or chunk of the collection has."""
        items = sorted({item for q in queries for item in q.relevant_items})
        present = self._present_items(conn, items, level)
        return [item for item in items if item not in present]

    def with_citekey_spellings(self, conn: psycopg.Connection[Any],
                                queries: list[JudgedQuery], level: str
                                ) -> tuple[list[JudgedQuery], dict[str, str], list[str]]:
        """Judgments that name a document by its file (``guides/setup.md``,
        ``./guides/setup.md#2``) where the collection has the citekey ``pgfunnel ingest``
        gave it (the path without the suffix): those items renamed, the renaming, and the
        judged items still missing. An item the collection has as written is never
        renamed."""
        missing = self._missing_items(conn, queries, level)
        spellings = {item: citekey_of_file_name(item) for item in missing}
        spellings = {item: key for item, key in spellings.items() if key != item}
        present = self._present_items(conn, sorted(set(spellings.values())), level)
        renamed = {item: key for item, key in spellings.items() if key in present}
        if not renamed:
            return queries, {}, missing
        out = [dataclasses.replace(q, relevant=_renamed(q.relevant, renamed)) for q in queries]
        return out, renamed, [item for item in missing if item not in renamed]

    def _index_version(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        require_schema(conn)
        row = conn.execute(
            "select v.version, v.embedding_model, v.analyzer, v.chunk_count "
            "from pgfunnel.index_version v join pgfunnel.collection c on c.id = v.collection_id "
            "where c.name = %s and v.state = 'active'", (self.collection,)).fetchone()
        if row is None:
            # one that does not exist is told as a search tells it, naming those that do
            # (after `pgfunnel demo`, `eval -c handbook` said only "does not exist")
            from pgfunnel.ingest import require_collection

            require_collection(conn, self.collection)
            raise NotFoundError(
                f"collection {self.collection!r} has no active index version (pgfunnel "
                f"versions list -c {shlex.quote(self.collection)} shows them; pgfunnel "
                "versions activate N switches to one)", parameter="collection")
        return {"version": row[0], "embedding_model": row[1], "analyzer": row[2],
                "chunks": row[3]}


def _named_by_config(cfg: EvalConfig, err: BaseException) -> ConfigError | None:
    """``err``, raised by ``cfg``'s searches, as an error naming the configuration when it
    refused a value the configuration gave (else None)."""
    if isinstance(err, ConfigError) and err.parameter in cfg.search:
        return ConfigError("config", f"{cfg.name}: {err}")
    return None


def _renamed(relevant: Mapping[str, int], renamed: Mapping[str, str]) -> dict[str, int]:
    """A query's judgments with items renamed; two items renamed alike keep the higher
    grade."""
    out: dict[str, int] = {}
    for item, grade in relevant.items():
        key = renamed.get(item, item)
        out[key] = max(grade, out.get(key, grade))
    return out


def citekey_of_file_name(item: str) -> str:
    """The citekey ``pgfunnel ingest`` gives the file an item names (``./guides/setup.md``
    -> ``guides/setup``; ``guides\\setup.md#2`` -> ``guides/setup#2``), or the item as
    written when it names no file pgfunnel reads."""
    from pgfunnel.sources import SUPPORTED_SUFFIXES, format_suffix, path_without_suffix

    key = chunk_key(item)
    base, sep, ordinal = (key[0], "#", str(key[1])) if key is not None else (item, "", "")
    path = base.replace("\\", "/").removeprefix("./")
    # the rules ingest makes a citekey by, so the two cannot drift (README.md.gz -> README)
    if format_suffix(Path(path)) in SUPPORTED_SUFFIXES:
        path = path_without_suffix(Path(path))
    return path + sep + ordinal


def standalone_query(q: JudgedQuery, qualifiers: Sequence[str] = ()) -> str:
    """The text a judged query is searched as: a follow-up made stand-alone from its
    history by :class:`~pgfunnel.transform.FollowupResolver`, anything else as written."""
    if not q.history:
        return q.query
    from pgfunnel.transform import FollowupResolver

    return FollowupResolver(qualifiers=qualifiers).resolve(q.history, q.query).query


def _unread_histories(queries: Sequence[JudgedQuery],
                      configs: Sequence[EvalConfig]) -> list[str]:
    """Why each query's history is over the follow-up limit, when no configuration reads
    it; refused, before any search, when one does (it makes follow-ups stand-alone)."""
    problems = [m for q in queries if (m := over_limit_history(q)) is not None]
    resolving = [c.name for c in configs if c.followup]
    if problems and resolving:
        raise InvalidInputError(
            f"{problems[0]}; configuration {resolving[0]!r} makes follow-ups stand-alone "
            "from their history (one with \"followup\": false searches the query as "
            "written and does not read it)")
    return problems


def unread_history_message(problems: Sequence[str]) -> str:
    """The one note for the histories over the follow-up limit that no configuration
    read (:attr:`HarnessResult.unread_history`)."""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return (f"pgfunnel eval: {problems[0]}{more}; not read: no configuration resolves "
            "follow-ups (\"followup\": false), so each query was searched as written")


def respelled_items_message(respelled: Mapping[str, str]) -> str:
    examples = ", ".join(f"{a!r} -> {b!r}" for a, b in list(respelled.items())[:3])
    # one item: "1 judged items were written as file names" read as a slip
    said = ("judged item was written as a file name and matched to its citekey"
            if len(respelled) == 1 else
            "judged items were written as file names and matched to their citekeys")
    return (f"pgfunnel eval: {len(respelled)} {said} "
            f"({examples}{', ...' if len(respelled) > 3 else ''})")


def missing_items_message(missing: Sequence[str], queries: Sequence[JudgedQuery],
                          collection: str, citekeys_read_as_chunks: Sequence[str] = (),
                          principals: Sequence[str] = (), tool: str = "pgfunnel eval") -> str:
    judged = len({item for q in queries for item in q.relevant_items})
    examples = ", ".join(repr(m) for m in missing[:5]) + (", ..." if len(missing) > 5 else "")
    # the items are looked up as the searches' reader: one hidden from it is missing too,
    # and "not in collection" alone sent a reader off to check the spelling
    reader = (f"principals {', '.join(map(repr, principals))}" if principals
              else "no principals: public documents only")
    message = (f"{tool}: {len(missing)} of {judged} judged items are not in collection "
               f"{collection!r}, or are hidden from the searches' reader ({reader}) "
               f"({examples}); they count as never found. ")
    if citekeys_read_as_chunks:
        # `repo#42` names a document, but an id ending in `#` and digits is a chunk key
        first = citekeys_read_as_chunks[0]
        citekey, ordinal = chunk_key(first) or (first, 0)
        return message + (
            f"{len(citekeys_read_as_chunks)} of them are citekeys of documents in the "
            f"collection ({first!r}) but end in '#' and digits, so they were read as chunk "
            f"keys ({first!r}: chunk {ordinal} of {citekey!r}). Judge such a document's "
            f"chunks as {first + '#<ordinal>'!r}; a citekey ending in '#' and digits cannot "
            "be judged as a whole document (docs/evaluation.md, judging level)")
    return message + ("A file's citekey is its path relative to the folder ingested, "
                      "without the suffix (docs/cli.md)")


def _fields(p: SearchParams) -> dict[str, Any]:
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}


def dataclasses_replace(p: SearchParams, **changes: Any) -> SearchParams:
    return SearchParams.build(**{**_fields(p), **changes})


def _depths_of_legs(p: SearchParams) -> tuple[int, int]:
    """Each leg's depth as the search reads it: the depth given, else k x overfetch, at
    least 40 and at most 10,000 (funnel_search's default). Without the cap, k = 1000 with
    an overfetch of 11 asked the search for a lexical_depth of 11,000, which it refused,
    naming a parameter the configuration never set."""
    default = default_depth(p.k, p.overfetch)
    return p.lexical_depth or default, p.dense_depth or default


def _leg_depths(p: SearchParams, cfg: EvalConfig) -> dict[str, int]:
    """The depth of each leg the configuration runs, and the pool's."""
    lexical, dense = _depths_of_legs(p)
    depths = {"lexical": lexical, "dense": dense, "fused": p.k * p.overfetch}
    return {stage: d for stage, d in depths.items() if stage in cfg.stages()}


def _rerank_counts(runs: Mapping[str, Mapping[str, QueryRun]],
                   configs: Sequence[EvalConfig]) -> dict[str, dict[str, int]]:
    """Per configuration that reranks: its queries, those the reranker ran on, and those
    the rerank gate skipped (a query whose pool was empty is neither)."""
    out: dict[str, dict[str, int]] = {}
    for cfg in configs:
        if not cfg.rerank:
            continue
        by_q = runs.get(cfg.name, {})
        reranked = sum(1 for r in by_q.values() if r.reranked)
        gated = sum(1 for r in by_q.values() if r.reranked is False and r.stages.get("fused"))
        out[cfg.name] = {"queries": len(by_q), "reranked": reranked,
                         "skipped_by_gate": gated if cfg.rerank_gate_margin is not None else 0}
    return out


def _noanswer_scores(runs: Mapping[str, Mapping[str, QueryRun]],
                     queries: Sequence[JudgedQuery]) -> dict[str, dict[str, float | None]]:
    """Mean top score (fused, or the leg's own for a one-leg configuration) of no-answer
    vs answerable queries: can a threshold tell them apart? (None when a group is empty.)"""
    out: dict[str, dict[str, float | None]] = {}
    noanswer = {q.query_id for q in queries if q.is_noanswer}
    if not noanswer:
        return out
    for name, by_q in runs.items():
        na = [r.top_score for qid, r in by_q.items()
              if qid in noanswer and r.top_score is not None]
        ans = [r.top_score for qid, r in by_q.items()
               if qid not in noanswer and r.top_score is not None]
        out[name] = {"no_answer": round(sum(na) / len(na), 5) if na else None,
                     "answerable": round(sum(ans) / len(ans), 5) if ans else None}
    return out


# -- qrels inside the database -------------------------------------------------------------

@rows_by_position
def store_qrels(conn: psycopg.Connection[Any], collection: str,
                queries: Sequence[JudgedQuery],
                respelled: Mapping[str, str] | None = None) -> int:
    """Upsert judged queries into ``pgfunnel.qrel``; returns the number of (query, item) rows.
    ``respelled`` renames judged items as a run matched them (a file name to its citekey:
    the run's ``judged_items_respelled``), so the stage recall read in the database finds
    them; two items of one query renamed alike keep the higher grade."""
    from pgfunnel.ingest import require_collection

    coll = require_collection(conn, collection)
    rows = [(coll, q.query_id, item, q.query, q.slice, grade) for q in queries
            for item, grade in _renamed(q.relevant, respelled or {}).items()]
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("delete from pgfunnel.qrel where collection_id = %s and query_id = any(%s)",
                        (coll, [q.query_id for q in queries]))
            cur.executemany(
                "insert into pgfunnel.qrel (collection_id, query_id, item, query, slice, grade) "
                "values (%s, %s, %s, %s, %s, %s)", rows)
    except psycopg.Error as exc:
        raise translate(exc) from exc
    return len(rows)


# Stage recall from traced searches: for each judged query, the latest traced search the
# harness logged for its id (notes.judged_query), or else whose query text is the judged
# text (searches made outside the harness), with the other searches of the same run of it
# (notes.search_group: the parts of a decomposed query); a relevant item (citekey, or
# citekey#ordinal) is "in" a stage when one of its chunks is in one of those traces with
# that stage's rank; an item ending in '#' and digits is a chunk key only, as the run
# reads it (qrels.chunk_key), never a citekey (`tickets#42`). The trace holds the fused
# pool, so "lexical"/"dense" here mean "in the pool via that leg". A leg that none of a
# slice's searches ran (eval's `legs`, a weight of 0, no query vector, a dense-only
# search's unsearched text: the log row's config and notes) has no recall there (NULL),
# as the report gives it none: 0 would read as a leg that ran and lost everything.
_STAGE_RECALL_SQL = """
with judged as (
    select distinct query_id, query, slice from pgfunnel.qrel where collection_id = %(c)s
),
latest as (
    select distinct on (j.query_id) j.query_id, j.slice, l.id as search_id,
           l.notes ->> 'search_group' as search_group
      from judged j
      join pgfunnel.search_log l
        on l.collection_id = %(c)s
       and (l.notes ->> 'judged_query' = j.query_id
            or (l.query_text = j.query and not l.notes ? 'judged_query'
                and %(config)s::text is null))
       and (%(config)s::text is null or l.notes ->> 'config' = %(config)s::text)
     order by j.query_id, l.id desc
),
searches as (
    select s.query_id, s.slice, x.id as search_id,
           (x.notes -> 'query_text_searched' = 'false'::jsonb
            or x.config -> 'legs' = '"dense"'::jsonb
            or x.config -> 'weights' -> 0 = '0'::jsonb) is not true as lexical_ran,
           (x.notes -> 'query_embedding' = 'false'::jsonb
            or x.config -> 'legs' = '"lexical"'::jsonb
            or x.config -> 'weights' -> 1 = '0'::jsonb) is not true as dense_ran
      from latest s
      left join pgfunnel.search_log g
        on g.collection_id = %(c)s and g.notes ->> 'search_group' = s.search_group
      join pgfunnel.search_log x on x.id = coalesce(g.id, s.search_id)
),
hits as (
    select s.query_id, s.slice, r.item,
           case when bool_or(s.lexical_ran)
                then coalesce(bool_or(t.lexical_rank is not null), false) end as lexical,
           case when bool_or(s.dense_ran)
                then coalesce(bool_or(t.dense_rank is not null), false) end as dense,
           coalesce(bool_or(t.chunk_id is not null), false) as fused,
           coalesce(bool_or(t.dropped is distinct from 'cap'
                            and t.chunk_id is not null), false) as capped,
           coalesce(bool_or(t.final_rank is not null), false) as final
      from searches s
      join pgfunnel.qrel r on r.collection_id = %(c)s and r.query_id = s.query_id
                          and r.grade >= 1
      left join (pgfunnel.search_trace t
                 join pgfunnel.chunk ch on ch.id = t.chunk_id
                 join pgfunnel.document d on d.id = ch.document_id)
             on t.search_id = s.search_id
            and (r.item = d.citekey || '#' || ch.ordinal
                 or (r.item = d.citekey and r.item !~ '.#[0-9]+$'))
     group by s.query_id, s.slice, r.item
),
per_query as (
    select query_id, slice, avg(lexical::int) as lexical, avg(dense::int) as dense,
           avg(fused::int) as fused, avg(capped::int) as capped, avg(final::int) as final
      from hits group by query_id, slice
)
select slice, count(*), avg(lexical), avg(dense), avg(fused), avg(capped), avg(final)
  from per_query group by rollup (slice)
 order by slice nulls last
"""


@rows_by_position
def stage_recall_in_db(conn: psycopg.Connection[Any], collection: str,
                       config: str | None = None) -> dict[str, dict[str, float | None]]:
    """Per-slice (and ``all``) mean stage recall computed in Postgres from qrel and the
    search trace (run the searches with tracing on). Keys per slice: ``n_queries`` (the
    answerable judged queries it found a traced search for), ``lexical``, ``dense``,
    ``fused``, ``capped``, ``final``. A leg that none of the slice's searches ran (a
    ``legs`` or zero-weight configuration, a search without a query vector) is ``None``,
    as the report has no pool recall for it.

    Each judged query is read from its latest traced search, which after an eval run of
    several configurations is the last configuration's; ``config`` names the
    configuration whose searches to read instead (eval records the name in
    ``search_log.notes``; searches made outside eval have none). A ``config`` that no
    traced search of the collection names is a :class:`NotFoundError` naming those that
    are."""
    from pgfunnel.ingest import require_collection

    coll = require_collection(conn, collection)
    out: dict[str, dict[str, float | None]] = {}
    try:
        for slice_name, n, *vals in conn.execute(_STAGE_RECALL_SQL,
                                                 {"c": coll, "config": config}):
            if not n:
                # the grand total of nothing judged and searched yet: no recall to report
                continue
            out[slice_name if slice_name is not None else "all"] = {
                "n_queries": float(n),
                **{s: None if v is None else float(v)
                   for s, v in zip(("lexical", "dense", "fused", "capped", "final"), vals,
                                   strict=True)}}
        if config is not None and not out:
            # a name eval never traced here (a typo, a preset's name misremembered) read
            # as {}, as if no judged query had been searched yet
            traced = [str(r[0]) for r in conn.execute(
                "select distinct notes ->> 'config' from pgfunnel.search_log "
                "where collection_id = %s and notes ? 'config' order by 1 limit 11",
                (coll,))]
            if config not in traced:
                shown_names = ", ".join(repr(n) for n in traced[:10]) + \
                    (", ..." if len(traced) > 10 else "")
                raise NotFoundError(
                    f"no traced search of configuration {config!r} in collection "
                    f"{collection!r}; " + (f"eval traced {shown_names} there" if traced
                                           else "eval has traced none there (pgfunnel eval "
                                                "--trace records each search's "
                                                "configuration)"), parameter="config")
    except psycopg.Error as exc:
        raise translate(exc) from exc
    return out


__all__ = [
    "DENSE_ONLY",
    "HARNESS_KEYS",
    "LEGS",
    "LEXICAL_ONLY",
    "PRESETS",
    "STAGES",
    "EvalConfig",
    "Harness",
    "HarnessResult",
    "QueryRun",
    "parse_config_arg",
    "preset_configs",
    "stage_recall_in_db",
    "standalone_query",
    "store_qrels",
    "unread_history_message",
]
