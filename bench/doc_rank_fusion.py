#!/usr/bin/env python3
"""Experiment: document-level leg ranks for fusion, measured by re-fusing the legs in Python.

A source with many similar chunks (a changelog) fills many of a leg's ranks. Two variants
give each leg's chunks a document-level position before fusion:

- ``A``: a chunk's leg position counts only the distinct citekeys ranked above it, plus
  one (a changelog's chunks at leg ranks 1 - 10 all sit at position 2 after the first,
  and the next document's chunk at rank 11 at position 2 too);
- ``B``: only a citekey's best chunk in each leg keeps its leg contribution; its other
  chunks get the leg's fill (0 under both ``minmax`` and ``rrf``);
- ``A dense`` / ``B dense`` (``minmax`` only): the variant in the dense leg alone, the
  lexical leg as the search ranks it.

Under ``rrf`` the position is the rank in ``1 / (rrf_k + rank)``; under ``minmax`` a chunk
at position p takes the min-max score of the leg's p-th row (the leg's own score curve,
read at the document rank).

For each query one ``candidates()`` call returns the union of both legs at the default
depths (set explicitly, so the pool is not widened into deeper legs), each row with its
leg ranks and scores and the fused score the search gave it (its per-query weights
included). The two weights are fitted to those fused scores by least squares (the residual
is printed: it is 0 to float precision when the re-fusion reproduces the search), then the
variant's leg contributions are fused with the same weights, the per-source cap applied and
the list cut to k. No SQL changes. ``default``, ``lexical`` and ``dense`` are run by the
eval harness as ``pgfunnel eval`` runs them; ``refit`` is the re-fusion with the search's
own contributions, the check that the re-fusion reproduces ``default``.

    python bench/doc_rank_fusion.py QUERIES.jsonl -c COLLECTION [--split dev|test]
        [--fusions minmax|minmax,rrf] [--floors pgfunnel/eval/floors_helpcenter.json]

Results (pydocs, the help center) and why neither variant landed: docs/tuning.md, "Which
fusion".
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from pgfunnel.db import connect
from pgfunnel.defaults import DEPTH_FLOOR, OVERFETCH, PER_SOURCE_CAP, RRF_K, K, default_depth
from pgfunnel.embedder import Embedder
from pgfunnel.errors import SearchNoticeWarning
from pgfunnel.eval.harness import DENSE_ONLY, LEXICAL_ONLY, EvalConfig, Harness, standalone_query
from pgfunnel.eval.metrics import collapse_to_documents
from pgfunnel.eval.qrels import load_queries, select_split
from pgfunnel.eval.report import build_report, to_markdown
from pgfunnel.query_plans import capped_first
from pgfunnel.search import Candidate, Funnel, SearchParams

Leg = tuple[str, str]  # (rank attribute, score attribute)
LEGS: tuple[Leg, Leg] = (("lexical_rank", "lexical_score"), ("dense_rank", "dense_score"))


def _leg_rows(pool: Sequence[Candidate], leg: Leg) -> list[Candidate]:
    return sorted((c for c in pool if getattr(c, leg[0]) is not None),
                  key=lambda c: getattr(c, leg[0]))


def _positions_a(rows: Sequence[Candidate]) -> dict[int, int]:
    # distinct citekeys above the chunk, plus one: a later chunk of a citekey already
    # seen counts that citekey among those above it, so it shares the position of the
    # next new document
    out: dict[int, int] = {}
    seen: set[str] = set()
    for c in rows:
        out[c.chunk_id] = len(seen) + 1
        seen.add(c.citekey)
    return out


def _contrib(pool: Sequence[Candidate], fusion: str, depth: int, variant: str
             ) -> np.ndarray:
    """(len(pool), 2): each chunk's unweighted contribution from each leg."""
    out = np.zeros((len(pool), 2))
    index = {c.chunk_id: i for i, c in enumerate(pool)}
    for j, leg in enumerate(LEGS):
        rows = _leg_rows(pool, leg)
        if not rows:
            continue
        scores = [float(getattr(c, leg[1])) for c in rows]
        if fusion == "minmax":
            hi = max(scores)
            # a short lexical list holds every match: below it BM25 is 0 (docs/sql.md)
            lo = 0.0 if j == 0 and len(rows) < depth else min(scores)
            curve = [1.0 if hi == lo else (s - lo) / (hi - lo) for s in scores]
        else:
            curve = [1.0 / (RRF_K + r) for r in range(1, len(rows) + 1)]
        # "A dense" / "B dense": the variant in the dense leg alone, the lexical leg as
        # the search ranks it
        kind, _, only = variant.partition(" ")
        if only == "dense" and j == 0:
            kind = "refit"
        if kind == "A":
            pos: dict[int, int | None] = dict(_positions_a(rows))
        elif kind == "B":
            pos = {}
            seen: set[str] = set()
            for at, c in enumerate(rows, start=1):
                pos[c.chunk_id] = at if c.citekey not in seen else None
                seen.add(c.citekey)
        else:
            pos = {c.chunk_id: at for at, c in enumerate(rows, start=1)}
        for c in rows:
            p = pos[c.chunk_id]
            out[index[c.chunk_id], j] = 0.0 if p is None else curve[p - 1]
    return out


def refused(pool: Sequence[Candidate], fusion: str, depth: int, variants: Sequence[str],
            k: int, cap: int) -> tuple[dict[str, list[str]], float]:
    """Each variant's final chunk keys, and the fit's largest residual."""
    if not pool:
        return {v: [] for v in variants}, 0.0
    base = _contrib(pool, fusion, depth, "refit")
    fused = np.array([c.fused_score for c in pool])
    w, *_ = np.linalg.lstsq(base, fused, rcond=None)
    resid = float(np.max(np.abs(base @ w - fused)))
    out: dict[str, list[str]] = {}
    for v in variants:
        score = _contrib(pool, fusion, depth, v) @ w
        order = sorted(range(len(pool)), key=lambda i: (-score[i], pool[i].chunk_id))
        kept = capped_first([pool[i] for i in order], k, cap, lambda c: c.citekey)
        out[v] = [f"{c.citekey}#{c.ordinal}" for c in kept]
    return out, resid


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("queries", type=Path)
    ap.add_argument("-c", "--collection", required=True)
    ap.add_argument("--split", choices=("dev", "test"), default=None)
    ap.add_argument("--dsn", default=None)
    ap.add_argument("--fusions", choices=("minmax", "minmax,rrf"), default="minmax,rrf",
                    help="the fusions to re-fuse under (minmax: the default's alone)")
    ap.add_argument("--floors", type=Path, default=None,
                    help="a floors JSON (pgfunnel/eval/floors_helpcenter.json): say which "
                         "configurations miss one")
    ap.add_argument("--out", type=Path, default=None, help="write the report's markdown here")
    args = ap.parse_args(argv)
    k = K
    depth = default_depth(k, OVERFETCH)
    assert depth == DEPTH_FLOOR
    judged = load_queries(args.queries)
    selected = judged if args.split is None else select_split(judged, args.split)
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    # the analyzer's notices (words not searched) are the same for every variant
    warnings.simplefilter("ignore", SearchNoticeWarning)
    embedder = Embedder()
    with connect(args.dsn, autocommit=True) as conn:
        harness = Harness(conn, args.collection, k=k, embedder=embedder)
        configs = [EvalConfig.from_dict("default", {}),
                   EvalConfig.from_dict("lexical", LEXICAL_ONLY),
                   EvalConfig.from_dict("dense", DENSE_ONLY)]
        result = harness.run(judged, configs, split=args.split)
        rankings: dict[str, dict[str, list[str]]] = {
            name: {qid: r.final for qid, r in by_q.items()}
            for name, by_q in result.runs.items()}
        level = result.report.judging_level
        funnel = Funnel(conn, args.collection, embedder=embedder)
        worst = {"minmax": 0.0, "rrf": 0.0}
        for q in selected:
            text = standalone_query(q)
            vector = embedder.embed_query(text) if text.strip() else None
            for fusion, names in (("minmax", ("refit", "A", "B", "A dense", "B dense")),
                                  ("rrf", ("refit", "A", "B")))[:len(args.fusions.split(","))]:
                p = SearchParams.build(collection=args.collection, k=2 * depth, overfetch=1,
                                       lexical_depth=depth, dense_depth=depth,
                                       fusion=fusion)
                pool = funnel.candidates(conn, text if text.strip() else None, vector, p)
                finals, resid = refused(pool, fusion, depth, names, k, PER_SOURCE_CAP)
                worst[fusion] = max(worst[fusion], resid)
                for v, keys in finals.items():
                    name = ("default " if fusion == "minmax" else "rrf ") + v
                    ranked = collapse_to_documents(keys) if level == "document" else keys
                    rankings.setdefault(name, {})[q.query_id] = ranked[:k]
        log(f"largest fit residual: minmax {worst['minmax']:.2e}, rrf {worst['rrf']:.2e}")
        same = sum(rankings["default"][q.query_id] == rankings["default refit"][q.query_id]
                   for q in selected)
        log(f"refit reproduces default on {same} of {len(selected)} queries")
    report = build_report(rankings, selected, k=k, baseline="default")
    md = to_markdown(report)
    if args.out is not None:
        args.out.write_text(md, encoding="utf-8")
    slices = report.slices + [s for s in ("all",) if s not in report.slices]
    print(f"nDCG@{k} per slice ({args.collection}, split {args.split or 'all'}); "
          "paired bootstrap against default, mean diff [95% interval]")
    print("| config | " + " | ".join(slices) + " |")
    print("|---|" + "---:|" * len(slices))
    for name, res in report.configs.items():
        cells = []
        for s in slices:
            val = res.aggregates.get(s, {}).get(f"ndcg@{k}")
            cell = "-" if val is None else f"{val:.3f}"
            cmp = report.comparisons.get(name, {}).get(f"ndcg@{k}", {}).get(s)
            if cmp is not None:
                cell += f" ({cmp.mean_diff:+.3f} [{cmp.low:+.3f}, {cmp.high:+.3f}])"
            cells.append(cell)
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.floors is not None:
        floors = json.loads(args.floors.read_text(encoding="utf-8"))
        for name, res in report.configs.items():
            missed = [f"{sl} {m} {res.aggregates[sl][m]:.3f} < {floor}"
                      for sl, by_metric in floors.items() for m, floor in by_metric.items()
                      if res.aggregates.get(sl, {}).get(m, 1.0) < floor]
            print(f"floors, {name}: " + ("all pass" if not missed else "; ".join(missed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
