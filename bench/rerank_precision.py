#!/usr/bin/env python3
"""fp16 against fp32 (or one batch size against another) for the rerank model: latency
and agreement, the two side by side in one run.

    python bench/rerank_precision.py [--dsn DSN] [--queries 40] [--repeats 3] [--device cuda]
                                     [--compare precision | --compare batch --batch-size 64]

Model: the MiniLM-L6 cross-encoder architecture with random weights (as in
rerank_cost.py: a forward pass costs the same whatever the weights). Pools: the
candidate pools of the sample help-center queries, 20 (k=5, overfetch=4) and 50 (k=10,
overfetch=5). `--compare precision` (the default) loads the model twice, fp32 and fp16, at
`--batch-size`; `--compare batch` loads it twice in fp32, at batch 32 and at
`--batch-size`, so a pool of 50 is scored in one forward pass instead of two. The two
variants are two Rerankers loaded side by side; per query they
score the same pairs back to back, the order alternating, so a change of load or clock
hits both. Repeat 1 is reported on its own: it is the first time the model sees each
padded batch shape, which is what a server sees for its first requests.

Agreement is read on the same pairs: the largest score difference, and how often the
top 5 of a pool are the same chunks in the same order. With random weights the scores
sit close together, so this is a harder test of fp16 than a trained model's spread gives.
Writes bench/out/rerank_precision.md (rerank_batch.md with ``--compare batch``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from rerank_cost import POOLS, ensure_corpus, helpcenter_queries, pct  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=None)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--compare", choices=("precision", "batch"), default="precision")
    args = ap.parse_args(argv)
    if args.repeats < 2:
        ap.error("--repeats must be at least 2 (repeat 1 is reported apart)")
    warnings.simplefilter("ignore")
    from pgfunnel.db import connect
    from pgfunnel.rerank import Reranker
    from pgfunnel.search import Funnel, SearchParams
    from pgfunnel.tiny_models import build_minilm_l6_cross_encoder

    ensure_corpus(args.dsn)
    queries = helpcenter_queries(args.queries)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_minilm_l6_cross_encoder(Path(tmp) / "minilm-l6-ce")
        # the first variant is the reference the second is compared with
        if args.compare == "precision":
            models = {
                "fp32": Reranker(path, device=args.device, fp16=False,
                                 batch_size=args.batch_size),
                "fp16": Reranker(path, device=args.device, fp16=True,
                                 batch_size=args.batch_size),
            }
        else:
            models = {
                f"batch {size}": Reranker(path, device=args.device, fp16=False, batch_size=size)
                for size in (32, args.batch_size)
            }
            if len(models) < 2:
                ap.error("--compare batch needs a --batch-size other than 32")
    reference, other = list(models)
    with connect(args.dsn, autocommit=True) as conn:
        funnel = Funnel(conn, embedder="auto")
        embedder = funnel.embedder_for(conn, "default")
        assert embedder is not None
        pools = {size: [[c.text for c in funnel.candidates(
                    conn, q, embedder.embed_query(q), SearchParams.build(principals=[], **knobs))]
                        for q in queries]
                 for size, knobs in POOLS.items()}

    setting = f"batch {args.batch_size}" if args.compare == "precision" else "fp32"
    lines = [f"Rerank {args.compare} on {args.device}, MiniLM-L6 cross-encoder architecture "
             f"(random weights), {setting}, {len(queries)} queries x "
             f"{args.repeats} repeats, sample help-center pools.", "",
             f"| pool | {args.compare} | repeat 1 p50 ms | repeat 1 p95 ms | later p50 ms | "
             "later p95 ms | later p99 ms |", "|---:|---|---:|---:|---:|---:|---:|"]
    agreement: list[str] = []
    for size, texts_per_query in pools.items():
        for model in models.values():  # load kernels before any timing
            model.predict(queries[0], texts_per_query[0])
        times: dict[str, dict[str, list[float]]] = {
            name: {"first": [], "later": []} for name in models}
        scores: dict[str, list[list[float]]] = {name: [] for name in models}
        for rep in range(args.repeats):
            for i, (query, texts) in enumerate(zip(queries, texts_per_query, strict=True)):
                order = list(models) if (i + rep) % 2 == 0 else list(reversed(models))
                for name in order:
                    t0 = time.perf_counter()
                    result = models[name].predict(query, texts)
                    times[name]["first" if rep == 0 else "later"].append(
                        (time.perf_counter() - t0) * 1000)
                    if rep == 0:
                        scores[name].append(result)
        for name in models:
            first, later = times[name]["first"], times[name]["later"]
            lines.append(f"| {size} | {name} | {pct(first, 0.5):.1f} | {pct(first, 0.95):.1f} "
                         f"| {pct(later, 0.5):.1f} | {pct(later, 0.95):.1f} | "
                         f"{pct(later, 0.99):.1f} |")
        paired = [a / b for a, b in zip(times[other]["later"], times[reference]["later"],
                                        strict=True)]
        diffs = [max(abs(a - b) for a, b in zip(mine, ref, strict=True))
                 for mine, ref in zip(scores[other], scores[reference], strict=True) if mine]
        same_top5 = sum(
            sorted(range(len(mine)), key=lambda j: -mine[j])[:5]
            == sorted(range(len(ref)), key=lambda j: -ref[j])[:5]
            for mine, ref in zip(scores[other], scores[reference], strict=True) if mine)
        spread = statistics.median(max(s) - min(s) for s in scores[reference] if s)
        agreement.append(
            f"| {size} | {statistics.median(paired):.2f} | {max(diffs):.2e} | "
            f"{spread:.2e} | {same_top5} / {len(diffs)} |")
    lines += ["", f"| pool | {other} / {reference} time, paired median (later repeats) | "
              f"largest score difference | median score spread in a pool ({reference}) | "
              "same top 5, same order |",
              "|---:|---:|---:|---:|---:|", *agreement]
    table = "\n".join(lines)
    print(table)
    out = ROOT / "out"
    out.mkdir(parents=True, exist_ok=True)
    name = "rerank_precision.md" if args.compare == "precision" else "rerank_batch.md"
    (out / name).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
