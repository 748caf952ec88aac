#!/usr/bin/env python3
"""Cost of the rerank step: the whole search with rerank vs its bare parts.

    python bench/rerank_cost.py [--dsn DSN] [--queries 40] [--repeats 3] [--device cpu] [--fp16]

Model: the MiniLM-L6 cross-encoder architecture (``build_minilm_l6_cross_encoder``: 6
layers, 384 hidden, 12 heads, the real tokenizer) with random weights. The cost of a
forward pass does not depend on the weights' values, so this times what
``cross-encoder/ms-marco-MiniLM-L6-v2`` costs without downloading it.

Corpus: the sample help-center corpus in collection ``default`` (ingested first if the
database has none). Pools of 20 (k=5, overfetch=4) and 50 (k=10, overfetch=5).

Per query, interleaved in the same run so machine noise hits every row alike:

- ``search+rerank``: ``Funnel.search(query, rerank=True)`` (embed, candidate query,
  rerank of the whole pool, final query) -- per-stage times from ``timings_ms``;
- ``funnel_search``: the one-statement ``pgfunnel.funnel_search`` with the same vector;
- ``predict``: a bare ``CrossEncoder.predict`` on the same (query, snippet) pairs.

The ratio is ``(search+rerank minus embedding) / (predict + funnel_search)``; the
embedding is left out of both sides because the baseline has none (it is reported on
its own row). The target (<= 1.15) is judged on the paired ratio: the median over
queries of each query's ratio, both sides run back to back in alternating order, which
is what survives a machine whose load changes during the run.
Writes bench/out/rerank_cost.md and .png.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, TypedDict

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "out"
DATA = ROOT.parent / "pgfunnel" / "data"

class Knobs(TypedDict):
    """The search parameters that size one pool (k * overfetch candidates)."""

    k: int
    overfetch: int


POOLS: dict[int, Knobs] = {20: {"k": 5, "overfetch": 4}, 50: {"k": 10, "overfetch": 5}}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    idx = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[idx]


def helpcenter_queries(n: int) -> list[str]:
    """The first ``n`` judged help-center queries' text."""
    return [json.loads(line)["query"]
            for line in (DATA / "helpcenter_queries.jsonl").read_text().splitlines()
            if line.strip()][:n]


def ensure_corpus(dsn: str | None) -> None:
    from pgfunnel.db import connect
    from pgfunnel.ingest import Ingester
    from pgfunnel.schema import init
    from pgfunnel.sources import read_path

    with connect(dsn, autocommit=True) as conn:
        has_schema = conn.execute(
            "select to_regclass('pgfunnel.collection') is not null").fetchone()
        has = False
        if has_schema and has_schema[0]:
            row = conn.execute("select count(*) from pgfunnel.collection c join "
                               "pgfunnel.index_version v on v.collection_id = c.id "
                               "where c.name = 'default' and v.state = 'active'").fetchone()
            has = bool(row and row[0])
    if has:
        return
    if not (has_schema and has_schema[0]):
        init(dsn)
    print("ingesting the sample corpus into collection 'default' ...", file=sys.stderr)
    with connect(dsn, autocommit=True) as conn:
        Ingester(conn, "default").ingest(read_path(DATA / "helpcenter.jsonl"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=None)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="pairs per forward pass (default: the Reranker's, 64 on CUDA, 32 else)")
    ap.add_argument("--fp16", action="store_true",
                    help="half precision (CUDA only; full precision without it)")
    args = ap.parse_args(argv)

    warnings.simplefilter("ignore")
    from pgfunnel.db import connect
    from pgfunnel.rerank import Reranker
    from pgfunnel.search import _FUNNEL_SQL, Funnel, SearchParams
    from pgfunnel.tiny_models import build_minilm_l6_cross_encoder

    ensure_corpus(args.dsn)
    queries = helpcenter_queries(args.queries)

    with tempfile.TemporaryDirectory() as tmp:
        path = build_minilm_l6_cross_encoder(Path(tmp) / "minilm-l6-ce")
        reranker = Reranker(str(path), device=args.device, batch_size=args.batch_size,
                            fp16=True if args.fp16 else None)
    import torch

    threads = torch.get_num_threads()
    conn = connect(args.dsn, autocommit=True)
    funnel = Funnel(conn, embedder="auto", reranker=reranker)
    embedder = funnel.embedder_for(conn, "default")
    assert embedder is not None
    model = reranker._model  # the bare sentence-transformers CrossEncoder

    rows: list[dict[str, Any]] = []
    for pool, knobs in POOLS.items():
        stages: dict[str, list[float]] = {k: [] for k in
                                          ("embed", "candidates", "rerank", "final")}
        whole: list[float] = []   # search+rerank minus embedding
        base_fs: list[float] = []
        base_pred: list[float] = []
        pool_sizes: list[int] = []
        params = SearchParams.build(principals=[], **knobs)
        # warm-up: load paths, prepared statements, allocator
        for q in queries[:3]:
            funnel.search(q, principals=[], **knobs)
        paired: list[float] = []  # per query: whole / (predict + funnel_search)

        # the helpers are called within this iteration; defaults bind this pool's lists
        def run_search(q: str, knobs: Knobs = knobs,
                       stages: dict[str, list[float]] = stages, whole: list[float] = whole,
                       pool_sizes: list[int] = pool_sizes) -> Any:
            t0 = time.perf_counter()
            resp = funnel.search(q, principals=[], **knobs)
            total = (time.perf_counter() - t0) * 1000
            for key in stages:
                stages[key].append(resp.timings_ms.get(key, 0.0))
            whole.append(total - resp.timings_ms["embed"])
            pool_sizes.append(len(resp.pool))
            return resp

        def run_base(q: str, pool_texts: list[str], params: Any = params,
                     base_fs: list[float] = base_fs, base_pred: list[float] = base_pred) -> None:
            vec = embedder.embed_query(q)
            sql_args = params.sql_args()
            sql_args.update(query_text=q, query_embedding=vec, as_of=None, trace=False)
            t0 = time.perf_counter()
            with conn.transaction():
                conn.execute(_FUNNEL_SQL, sql_args, prepare=True).fetchall()
            base_fs.append((time.perf_counter() - t0) * 1000)
            pairs = [(q, reranker.snippet(t)) for t in pool_texts]
            t0 = time.perf_counter()
            if pairs:
                model.predict(pairs, batch_size=reranker.batch_size, show_progress_bar=False,
                              convert_to_numpy=True)
            base_pred.append((time.perf_counter() - t0) * 1000)

        for rep in range(args.repeats):
            for i, q in enumerate(queries):
                # alternate which side runs first, so load drift does not favour one side
                if (i + rep) % 2 == 0:
                    resp = run_search(q)
                    run_base(q, [c.text for c in resp.pool])
                else:
                    texts = [c.text for c in funnel.candidates(
                        conn, q, embedder.embed_query(q), params)]
                    run_base(q, texts)
                    run_search(q)
                paired.append(whole[-1] / (base_fs[-1] + base_pred[-1]))
        base = [a + b for a, b in zip(base_fs, base_pred, strict=True)]
        ratio_p50 = statistics.median(whole) / statistics.median(base)
        ratio_mean = statistics.fmean(whole) / statistics.fmean(base)
        rows.append({
            "pool": pool, "mean_pool": statistics.fmean(pool_sizes), "n": len(whole),
            **{f"{k}_p50": pct(v, 0.5) for k, v in stages.items()},
            **{f"{k}_p95": pct(v, 0.95) for k, v in stages.items()},
            "whole_p50": pct(whole, 0.5), "whole_p95": pct(whole, 0.95),
            "fs_p50": pct(base_fs, 0.5), "fs_p95": pct(base_fs, 0.95),
            "pred_p50": pct(base_pred, 0.5), "pred_p95": pct(base_pred, 0.95),
            "base_p50": pct(base, 0.5), "base_p95": pct(base, 0.95),
            "ratio_p50": ratio_p50, "ratio_mean": ratio_mean,
            "ratio_paired": statistics.median(paired),
        })
    conn.close()

    device = f"{reranker.device}{' fp16' if reranker.fp16 else ''}"
    lines = [
        f"Rerank cost, MiniLM-L6 cross-encoder architecture (random weights), device "
        f"{device}, torch threads {threads}, batch {reranker.batch_size}, "
        f"{len(queries)} queries x {args.repeats} repeats, sample help-center corpus.",
        "",
        "| pool | stage | p50 ms | p95 ms |",
        "|---:|---|---:|---:|",
    ]
    for r in rows:
        for label, key in (("embed (query)", "embed"), ("candidates", "candidates"),
                           ("rerank", "rerank"), ("final", "final"),
                           ("search+rerank (no embed)", "whole"),
                           ("funnel_search alone", "fs"), ("bare predict", "pred"),
                           ("predict + funnel_search", "base")):
            lines.append(f"| {r['pool']} | {label} | {r[key + '_p50']:.1f} | "
                         f"{r[key + '_p95']:.1f} |")
    lines += ["", "ratio = search+rerank (no embed) / (bare predict + funnel_search); "
              "paired = median over queries of the per-query ratio (both sides measured "
              "back to back, order alternated).", "",
              "| pool | mean pool size | ratio of p50s | ratio of means | paired ratio | "
              "target (paired) |",
              "|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        ok = "ok" if r["ratio_paired"] <= 1.15 else "MISSED"
        lines.append(f"| {r['pool']} | {r['mean_pool']:.1f} | {r['ratio_p50']:.3f} | "
                     f"{r['ratio_mean']:.3f} | {r['ratio_paired']:.3f} | <= 1.15 {ok} |")
    table = "\n".join(lines)
    print(table)
    OUT.mkdir(parents=True, exist_ok=True)
    suffix = "" if reranker.device == "cpu" else f"_{reranker.device.split(':')[0]}"
    if reranker.fp16:
        suffix += "_fp16"
    (OUT / f"rerank_cost{suffix}.md").write_text(table + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        labels = ["embed", "candidates", "rerank", "final"]
        for i, r in enumerate(rows):
            bottom = 0.0
            for j, key in enumerate(labels):
                ax.bar(i * 2, r[f"{key}_p50"], bottom=bottom, color=f"C{j}",
                       label=key if i == 0 else None)
                bottom += r[f"{key}_p50"]
            ax.bar(i * 2 + 0.8, r["fs_p50"], color="C5", label="funnel_search" if i == 0 else None)
            ax.bar(i * 2 + 0.8, r["pred_p50"], bottom=r["fs_p50"], color="C6",
                   label="bare predict" if i == 0 else None)
        ax.set_xticks([0.4, 2.4], [f"pool {r['pool']}" for r in rows])
        ax.set_ylabel("p50 ms")
        ax.set_title(f"search+rerank stages vs bare parts ({device})")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(OUT / f"rerank_cost{suffix}.png", dpi=120)
    except ImportError:
        print("(matplotlib not installed: no plot)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
