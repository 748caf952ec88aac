#!/usr/bin/env python3
"""Search latency with and without row-level security, measured in one run.

Two databases with the same corpus (random vectors, no model): one without RLS
searched as the owner, one with `init --rls` searched as an application role in
pgfunnel_reader. Prints the medians and the ratio, writes bench/out/rls_latency.png.

    python bench/rls_latency.py --docs 5000 --queries 200
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
import warnings
from pathlib import Path

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
warnings.simplefilter("ignore")


def main() -> None:
    from _security_helpers import DIM, Doc, create_app_role, ingest_docs, unit

    from pgfunnel import schema
    from pgfunnel.db import connect, resolve_dsn
    from pgfunnel.search import Funnel

    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=5000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--dsn", default=None)
    args = ap.parse_args()
    server = resolve_dsn(args.dsn)
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(2000)]
    docs = [Doc(f"d{i:05d}", " ".join(rng.choice(vocab, 80)),
                readers=[] if i % 2 == 0 else [f"u{i % 10}"]) for i in range(args.docs)]
    dbs = {}
    for mode in ("plain", "rls"):
        name = f"bench_rls_{mode}_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(server, autocommit=True) as c:
            c.execute(psycopg.sql.SQL("create database {}").format(psycopg.sql.Identifier(name)))
        dsn = psycopg.conninfo.make_conninfo(server, dbname=name)
        schema.init(dsn, rls=mode == "rls")
        ingest_docs(dsn, docs, seed=1)
        dbs[mode] = (name, create_app_role(dsn) if mode == "rls" else dsn)
    queries = [(" ".join(rng.choice(vocab, 3)), unit(rng.normal(size=DIM)))
               for _ in range(args.queries)]
    times: dict[str, list[float]] = {"plain": [], "rls": []}
    conns = {m: connect(d, autocommit=True) for m, (_, d) in dbs.items()}
    funnels = {m: Funnel(c, embedder=None) for m, c in conns.items()}
    for rnd in range(2):  # round 0 warms caches; interleaved so drift hits both alike
        for text, vec in queries:
            for mode in ("plain", "rls"):
                t0 = time.perf_counter()
                funnels[mode].search(text, query_embedding=vec, principals=["u3"], k=10)
                if rnd:
                    times[mode].append((time.perf_counter() - t0) * 1000)
    med = {m: statistics.median(v) for m, v in times.items()}
    p95 = {m: float(np.percentile(v, 95)) for m, v in times.items()}
    print(f"| mode | median ms | p95 ms |\n|---|---|---|\n"
          f"| no RLS (owner) | {med['plain']:.2f} | {p95['plain']:.2f} |\n"
          f"| RLS (app role) | {med['rls']:.2f} | {p95['rls']:.2f} |")
    print(f"RLS/plain median ratio: {med['rls'] / med['plain']:.2f} "
          f"({args.docs} docs, {args.queries} queries)")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        out = Path(__file__).resolve().parent / "out"
        out.mkdir(exist_ok=True)
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.boxplot([times["plain"], times["rls"]], tick_labels=["no RLS", "RLS"])
        ax.set_ylabel("search latency (ms)")
        fig.tight_layout()
        fig.savefig(out / "rls_latency.png")
    except ImportError:
        pass
    for c in conns.values():
        c.close()
    with psycopg.connect(server, autocommit=True) as c:
        for name, _ in dbs.values():
            c.execute(psycopg.sql.SQL("drop database {} with (force)").format(
                psycopg.sql.Identifier(name)))


if __name__ == "__main__":
    main()
