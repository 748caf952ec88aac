"""Per-query retrieval metrics, pool recall, per-slice means, paired bootstrap, floors.

Everything here is pure Python over ranked lists of item ids; nothing touches the
database. The harness runs the searches and hands the rankings in.

Metric names are lower-case with the cutoff: ``ndcg@10``, ``recall@10``, ``mrr@10``
(reciprocal rank of the first relevant item within the top 10) and ``all_found@10``
(1.0 when every relevant item is in the top 10, else 0.0). nDCG, recall and RR are
computed by ir-measures (trec_eval definitions: linear gain = the grade, log2
discount, ideal ranking from the judgments); only ``all_found`` is a set check here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import ir_measures
import numpy as np

from pgfunnel.errors import (
    JSON_ERRORS,
    ConfigError,
    InvalidInputError,
    PgfunnelError,
    json_problem,
    read_file_text,
)
from pgfunnel.eval.qrels import ALL_SLICE, JudgedQuery, citekey_of, split_of

#: count keys in every row that :func:`aggregate` returns
N_QUERIES = "n_queries"
N_NOANSWER = "n_noanswer"
COUNT_KEYS: tuple[str, ...] = (N_QUERIES, N_NOANSWER)


def metric_names(k: int) -> tuple[str, str, str, str]:
    """The four names :func:`score_run` uses at cutoff ``k``, in report order."""
    return (f"ndcg@{k}", f"recall@{k}", f"mrr@{k}", f"all_found@{k}")


def _check_k(k: int, name: str = "k") -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(name, f"must be a positive integer, got {k!r}")


def _check_ranking(query_id: str, ranking: Sequence[str]) -> None:
    if isinstance(ranking, str):
        raise InvalidInputError(
            f"run for query {query_id!r} must be a sequence of item ids, not a string"
        )
    seen: set[str] = set()
    for item in ranking:
        if item in seen:
            raise InvalidInputError(
                f"run for query {query_id!r} lists item {item!r} more than once"
            )
        seen.add(item)


def collapse_to_documents(ranking: Sequence[str]) -> list[str]:
    """Map a ranking of chunk keys to citekeys, keeping each document's best position.

    Use it when judging is per document but the system returns chunks.
    """
    out: list[str] = []
    seen: set[str] = set()
    for item in ranking:
        key = citekey_of(item)
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def score_run(
    run: Mapping[str, Sequence[str]],
    queries: Sequence[JudgedQuery],
    k: int = 10,
) -> dict[str, dict[str, float]]:
    """Per-query ``ndcg@k``, ``recall@k``, ``mrr@k`` and ``all_found@k``.

    ``run`` maps query id to its ranked item ids, best first. The result has one entry
    per query that has something to find; no-answer queries are left out (they are
    counted by :func:`aggregate`). A judged query that the run lacks, or whose list is
    empty, scores 0 on everything. Run entries for unknown query ids are ignored. An
    item listed twice for one query is an :class:`InvalidInputError`.
    """
    _check_k(k)
    ndcg_name, recall_name, mrr_name, found_name = metric_names(k)
    measures = {
        ir_measures.nDCG @ k: ndcg_name,
        ir_measures.R @ k: recall_name,
        ir_measures.RR @ k: mrr_name,
    }
    by_text = {str(m): name for m, name in measures.items()}

    qrels: dict[str, dict[str, int]] = {}
    scored: dict[str, dict[str, float]] = {}
    result: dict[str, dict[str, float]] = {}
    for q in queries:
        if q.is_noanswer:
            continue
        if q.query_id in result:
            raise InvalidInputError(f"query {q.query_id!r} appears twice in the judged set")
        ranking = run.get(q.query_id, ())
        _check_ranking(q.query_id, ranking)
        top = list(ranking[:k])
        found = q.relevant_items.issubset(top)
        result[q.query_id] = {
            ndcg_name: 0.0,
            recall_name: 0.0,
            mrr_name: 0.0,
            found_name: 1.0 if found else 0.0,
        }
        if not top:
            continue
        qrels[q.query_id] = dict(q.relevant)
        # strictly descending scores reproduce the given order; ties cannot reorder it
        scored[q.query_id] = {item: float(len(top) - i) for i, item in enumerate(top)}

    if qrels:
        computed: set[str] = set()
        for m in ir_measures.iter_calc(list(measures), qrels, scored):
            name = by_text[str(m.measure)]
            result[str(m.query_id)][name] = float(m.value)
            computed.add(str(m.query_id))
        missing = set(qrels) - computed
        if missing:
            raise PgfunnelError(
                f"ir-measures returned no values for {len(missing)} judged queries "
                f"(e.g. {sorted(missing)[0]!r})"
            )
    return result


def pool_recall(
    pools: Mapping[str, Sequence[str]],
    queries: Sequence[JudgedQuery],
    depth: int | None = None,
    *,
    documents: bool = False,
) -> dict[str, float]:
    """Per-query ``|R ∩ pool| / |R|``: the share of relevant items a stage kept.

    This is the ceiling for every later stage: an item not in the pool cannot be
    ranked back in. Pass the pool of one stage (a leg at its depth, the fused pool,
    the reranked pool, the capped list); ``depth`` truncates each pool first. With
    ``documents``, the pools hold chunk keys and the judgments citekeys: each pool is
    cut at ``depth`` chunks and then mapped to citekeys, so a document counts as found
    at depth d when one of its chunks is in the first d. Only queries with something
    to find get a value; a missing pool counts as empty.
    """
    if depth is not None:
        _check_k(depth, "depth")
    out: dict[str, float] = {}
    for q in queries:
        relevant = q.relevant_items
        if not relevant:
            continue
        pool = pools.get(q.query_id, ())
        if isinstance(pool, str):
            raise InvalidInputError(
                f"pool for query {q.query_id!r} must be a sequence of item ids, not a string"
            )
        if depth is not None:
            pool = pool[:depth]
        found = {citekey_of(item) for item in pool} if documents else set(pool)
        out[q.query_id] = len(relevant & found) / len(relevant)
    return out


def pool_recall_curve(
    pools: Mapping[str, Sequence[str]],
    queries: Sequence[JudgedQuery],
    depths: Sequence[int],
    *,
    documents: bool = False,
) -> list[tuple[int, float]]:
    """Mean pool recall over answerable queries at each depth: points for a plot.
    ``documents``: as for :func:`pool_recall` (depth in chunks, judged per document).
    Without an answerable query there are no points: a mean of nothing is not 0 (the
    chart drew such lines flat at 0, as if every pool had missed)."""
    points: list[tuple[int, float]] = []
    for d in depths:
        per_query = pool_recall(pools, queries, depth=d, documents=documents)
        if not per_query:
            return []
        points.append((d, sum(per_query.values()) / len(per_query)))
    return points


def _group_of(q: JudgedQuery, by: str) -> str:
    if by == "slice":
        return q.slice
    if by == "split":
        return split_of(q)
    raise ConfigError("by", f"must be 'slice' or 'split', got {by!r}")


def aggregate(
    per_query: Mapping[str, Mapping[str, float]],
    queries: Sequence[JudgedQuery],
    by: str = "slice",
) -> dict[str, dict[str, float]]:
    """Mean of every metric per slice (or per split), plus an ``"all"`` row.

    Each row holds ``n_queries`` (judged queries in the group, no-answer ones
    included), ``n_noanswer``, and for each metric found in ``per_query`` the mean over
    the group's queries that have it. A metric no query of a group has is absent from
    that row (never NaN). Queries are weighted equally, so the ``"all"`` row weights
    each slice by how many queries it has. Rows come in first-seen order, ``"all"``
    last. ``per_query`` ids that are not in ``queries`` are an error.
    """
    known = {q.query_id for q in queries}
    stray = [qid for qid in per_query if qid not in known]
    if stray:
        raise InvalidInputError(
            f"{len(stray)} scored query ids are not in the judged set (e.g. {stray[0]!r})"
        )

    groups: dict[str, list[JudgedQuery]] = {}
    for q in queries:
        groups.setdefault(_group_of(q, by), []).append(q)
    if ALL_SLICE in groups:
        raise InvalidInputError(f"a {by} may not be named {ALL_SLICE!r}")
    groups[ALL_SLICE] = list(queries)

    out: dict[str, dict[str, float]] = {}
    for name, members in groups.items():
        row: dict[str, float] = {
            N_QUERIES: float(len(members)),
            N_NOANSWER: float(sum(1 for q in members if q.is_noanswer)),
        }
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for q in members:
            for metric, value in per_query.get(q.query_id, {}).items():
                sums[metric] = sums.get(metric, 0.0) + float(value)
                counts[metric] = counts.get(metric, 0) + 1
        for metric in sums:
            row[metric] = sums[metric] / counts[metric]
        out[name] = row
    return out


#: fewer paired queries than this and a percentile bootstrap cannot decide anything: one
#: query resamples to a single point ([-0.13, -0.13] "excluded 0"), and with a handful the
#: interval is far narrower than the difference's real uncertainty
MIN_BOOTSTRAP_QUERIES = 10


class BootstrapResult(NamedTuple):
    """Paired bootstrap of ``b − a``: the observed mean difference, its interval, and the
    number of paired queries it resampled."""

    mean_diff: float
    low: float
    high: float
    n: int = MIN_BOOTSTRAP_QUERIES

    @property
    def too_few_queries(self) -> bool:
        """Under :data:`MIN_BOOTSTRAP_QUERIES` paired queries: the interval decides nothing."""
        return self.n < MIN_BOOTSTRAP_QUERIES

    @property
    def excludes_zero(self) -> bool:
        """True when the whole interval lies on one side of zero and there were enough
        queries for the interval to mean it."""
        return not self.too_few_queries and (self.low > 0.0 or self.high < 0.0)


def paired_bootstrap(
    a: Mapping[str, float],
    b: Mapping[str, float],
    n_resamples: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> BootstrapResult:
    """Percentile interval for the mean per-query difference ``b − a``.

    Both mappings must score the same query ids. Queries are resampled with
    replacement ``n_resamples`` times from a seeded generator, so the result is
    deterministic; the interval is the ``alpha/2`` and ``1 − alpha/2`` percentiles of the
    resampled means. Identical inputs give exactly ``(0.0, 0.0, 0.0, n)``. Under
    :data:`MIN_BOOTSTRAP_QUERIES` queries the interval is computed but ``excludes_zero``
    is False: it is too narrow to trust.
    """
    if set(a) != set(b):
        only_a = sorted(set(a) - set(b))
        only_b = sorted(set(b) - set(a))
        raise InvalidInputError(
            "paired bootstrap needs the same query ids on both sides: "
            f"{len(only_a)} only in a (e.g. {only_a[:1]}), {len(only_b)} only in b "
            f"(e.g. {only_b[:1]})"
        )
    if not a:
        raise InvalidInputError("paired bootstrap needs at least one query")
    _check_k(n_resamples, "n_resamples")
    if not 0.0 < alpha < 1.0:
        raise ConfigError("alpha", f"must be between 0 and 1, got {alpha!r}")

    ids = sorted(a)  # a fixed order, so the same seed draws the same queries
    diffs = np.array([float(b[q]) - float(a[q]) for q in ids], dtype=np.float64)
    if not np.all(np.isfinite(diffs)):
        raise InvalidInputError("paired bootstrap got a NaN or infinite per-query value")
    observed = float(diffs.mean())
    if np.all(diffs == diffs[0]):
        # every resample has the same mean; skip the float noise of summing it
        return BootstrapResult(observed, observed, observed, len(diffs))

    rng = np.random.default_rng(seed)
    n = len(diffs)
    means = np.empty(n_resamples, dtype=np.float64)
    chunk = max(1, 2_000_000 // n)  # bound memory on large query sets
    for start in range(0, n_resamples, chunk):
        stop = min(n_resamples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = diffs[idx].mean(axis=1)
    low, high = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0])
    return BootstrapResult(observed, float(low), float(high), n)


def _floor_text(floor: float) -> str:
    """A floor as the file gives it: ``0.8``, ``1``, and ``0.8000001`` whole (``:g``
    alone wrote it as 0.8)."""
    short = f"{floor:g}"
    return short if float(short) == floor else repr(floor)


@dataclass(frozen=True)
class FloorViolation:
    """A slice whose measured metric is below its floor (or was not measured)."""

    slice: str
    metric: str
    floor: float
    measured: float | None

    def __str__(self) -> str:
        if self.measured is None:
            return (
                f"slice {self.slice!r}: {self.metric} has a floor of {_floor_text(self.floor)} "
                "but was not measured"
            )
        # as many decimals as it takes to show it below the floor: 0.90649 against a
        # floor of 0.9065 read "0.9065 is below its floor of 0.9065"
        shown = f"{self.measured:.4f}"
        for decimals in range(5, 13):
            if float(shown) < self.floor:
                break
            shown = f"{self.measured:.{decimals}f}"
        return f"slice {self.slice!r}: {self.metric} = {shown} is below its floor of " \
            f"{_floor_text(self.floor)}"


#: how far below its floor a mean may be and still meet it: the rounding of a mean of
#: floats, never a query's worth (a floor of 0.8 failed on a measured 0.7999999999999999,
#: said as "0.8000 is below its floor of 0.8")
FLOOR_TOLERANCE = 1e-9


def check_floors(
    aggregates: Mapping[str, Mapping[str, float]],
    floors: Mapping[str, Mapping[str, float]],
) -> list[FloorViolation]:
    """Every (slice, metric) whose mean is below its floor, in the floors' order.

    A floor for a slice or metric that the aggregates lack is a violation with
    ``measured=None``: a gate must not pass because the queries it guards went missing.
    A mean within :data:`FLOOR_TOLERANCE` below its floor meets it: that much is the
    rounding of a sum of floats (recall 1, 1 and 0.4 average to 0.7999999999999999).
    """
    violations: list[FloorViolation] = []
    for slice_name, metric_floors in floors.items():
        row = aggregates.get(slice_name, {})
        for metric, floor in metric_floors.items():
            measured = row.get(metric)
            if measured is None or math.isnan(measured):
                violations.append(FloorViolation(slice_name, metric, float(floor), None))
            elif measured < floor - FLOOR_TOLERANCE:
                violations.append(FloorViolation(slice_name, metric, float(floor), measured))
    return violations


def load_floors(path: str | Path) -> dict[str, dict[str, float]]:
    """Read floors from JSON: ``{"slice": {"ndcg@10": 0.5, ...}, ...}``.

    Anything else (not an object, a non-numeric floor, a floor outside 0..1, where every
    metric lies, a file with no floor at all) is a :class:`ConfigError` for the parameter
    ``floors`` that names the file and the entry.
    """
    p = Path(path)
    try:
        raw: Any = json.loads(read_file_text(p).removeprefix("\ufeff"))
    except OSError as exc:
        raise ConfigError("floors", f"cannot read {p}: {exc}") from exc
    except (*JSON_ERRORS, UnicodeDecodeError) as exc:
        # a floors file spans lines: say where (json's message alone named no position)
        at = f" (line {exc.lineno}, column {exc.colno})" \
            if isinstance(exc, json.JSONDecodeError) else ""
        raise ConfigError("floors", f"{p} is not valid JSON{at}: {json_problem(exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError("floors", f"{p}: expected an object of slices")
    floors: dict[str, dict[str, float]] = {}
    for slice_name, metrics in raw.items():
        if not isinstance(metrics, dict):
            raise ConfigError(
                "floors", f"{p}: slice {slice_name!r} must map metric names to numbers"
            )
        row: dict[str, float] = {}
        for metric, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(
                    "floors",
                    f"{p}: slice {slice_name!r} metric {metric!r}: {value!r} is not a number",
                )
            if not math.isfinite(value):
                raise ConfigError(
                    "floors", f"{p}: slice {slice_name!r} metric {metric!r} is not finite"
                )
            if not 0.0 <= value <= 1.0:
                # every metric eval reports is a share: a floor of 85 (a percentage) could
                # never be met and failed every run; one of -1 could never fail
                raise ConfigError(
                    "floors",
                    f"{p}: slice {slice_name!r} metric {metric!r}: the floor {value!r} is not "
                    "between 0 and 1, as every metric eval reports is (85% is 0.85)",
                )
            row[metric] = float(value)
        floors[slice_name] = row
    if not any(floors.values()):
        # a gate of no floor passed every run ("floors: all 0 met"), whatever it measured
        raise ConfigError("floors", f"{p} names no floor: give at least one slice a metric "
                                    'and its minimum, e.g. {"all": {"ndcg@10": 0.5}}')
    return floors
