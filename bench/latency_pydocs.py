#!/usr/bin/env python3
"""Latency on the pydocs benchmark collection with real MiniLM vectors, peers in one run.

Run `python bench/pydocs.py run` first (it ingests collection `pydocs` and builds the
Supabase-style peer table). Then:

    python bench/latency_pydocs.py [--queries 150] [--repeats 3]
    python bench/latency_pydocs.py --collection pgdocs

Each query is timed once per system per repeat, systems interleaved on one warm
connection (the order rotating from query to query), each timed search right after an
untimed Supabase-style search of another query: every system starts from the caches
unrelated work left, as on a shared server, and machine noise hits all of them alike;
ratios are the result to read. A last row times
funnel_search again with the searches back to back and nothing between them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


PEER = "hybrid_search (Supabase-style)"


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


def _build_and_run(collection: str, data: Path) -> str:
    """The commands that make what this script measures (the docs benchmark's build and
    run, which ingests the collection and builds the peer table from it)."""
    script = f"bench/{collection}.py" if collection in ("pydocs", "pgdocs", "djangodocs") \
        else "bench/pydocs.py"
    return (f"python {script} build --out {data}, then python {script} run --data {data} "
            "(bench/README.md)")


def load_query_texts(data: Path, collection: str, n: int) -> list[str]:
    """The first ``n`` query texts of ``data/queries.jsonl``; exit saying what to run when
    the benchmark was not built there."""
    path = data / "queries.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path} not found: build the benchmark first: "
                         f"{_build_and_run(collection, data)}")
    return [json.loads(line)["query"] for line in path.read_text().splitlines()][:n]


def active_version(conn: Any, collection: str, data: Path) -> tuple[int, int, str, int]:
    """(version id, collection id, analyzer, chunks) of the collection's active version,
    after checking that the Supabase-style peer table holds that version's chunks; exit
    saying what to run when the database lacks the schema, the collection or the peer."""
    todo = _build_and_run(collection, data)
    if conn.execute("select to_regclass('pgfunnel.index_version')").fetchone()[0] is None:
        raise SystemExit(f"this database has no pgfunnel schema, so no collection "
                         f"{collection!r}: run {todo}")
    row = conn.execute(
        "select v.id, c.id, v.analyzer, v.chunk_count from pgfunnel.index_version v "
        "join pgfunnel.collection c on c.id = v.collection_id "
        "where c.name = %s and v.state = 'active'", (collection,)).fetchone()
    if row is None:
        raise SystemExit(f"no collection {collection!r} in this database: run {todo}")
    vid, cid, analyzer, n_chunks = int(row[0]), int(row[1]), str(row[2]), int(row[3])
    if not conn.execute("select to_regclass('bench_peer.docs') is not null and exists "
                        "(select 1 from pg_proc where pronamespace = "
                        "to_regnamespace('bench_peer') and proname = 'hybrid_search')"
                        ).fetchone()[0]:
        raise SystemExit("no Supabase-style peer (bench_peer.hybrid_search) in this "
                         f"database: run {todo}")
    peer_rows, foreign = conn.execute(
        "select count(*), count(*) filter (where not exists (select 1 from "
        "pgfunnel.embedding e where e.chunk_id = p.id and e.index_version_id = %s)) "
        "from bench_peer.docs p", (vid,)).fetchone()
    if foreign or peer_rows != n_chunks:
        raise SystemExit(f"the Supabase-style peer table (bench_peer.docs, {peer_rows} rows) "
                         f"does not hold collection {collection!r}'s {n_chunks} chunks (each docs "
                         "benchmark's run rebuilds it from its own collection: it was built "
                         f"from another one, or this one changed since): run {todo}")
    return vid, cid, analyzer, n_chunks


def target_rows(p50: dict[str, float], funnel_p95: float, legs_p50: float) -> list[str]:
    """The README's latency targets ("Measured", against the targets) as a table, each with
    this run's figure and whether it met it, so a run is read against them without
    looking each one up; `legs_p50` is the p50 of each query's lexical plus dense time."""
    funnel = p50["funnel_search"]
    rows = [
        ("funnel_search p50 <= 3 ms", f"{funnel:.2f} ms", funnel <= 3),
        ("funnel_search p95 <= 10 ms", f"{funnel_p95:.2f} ms", funnel_p95 <= 10),
        (">= 6x faster than hybrid_search (p50)", f"{p50[PEER] / funnel:.2f}x",
         p50[PEER] >= 6 * funnel),
        ("lexical leg p50 <= 2 ms", f"{p50['lexical leg']:.2f} ms", p50["lexical leg"] <= 2),
        ("funnel_search <= 1.3x (lexical leg + dense leg) (p50)", f"{funnel / legs_p50:.2f}x",
         funnel <= 1.3 * legs_p50),
    ]
    return ["| target | this run | met |", "|---|---:|---|",
            *(f"| {t} | {v} | {'yes' if ok else 'no'} |" for t, v, ok in rows)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None,
                    help="the benchmark's folder (default bench/data/COLLECTION)")
    ap.add_argument("--queries", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dsn", default=None)
    ap.add_argument("--collection", default="pydocs",
                    help="pgdocs for bench/pgdocs.py's collection, its queries from "
                         "bench/data/pgdocs")
    args = ap.parse_args(argv)
    if args.data is None:
        args.data = Path("bench/data") / args.collection

    from pgfunnel.db import connect
    from pgfunnel.embedder import Embedder

    queries = load_query_texts(args.data, args.collection, args.queries)
    with connect(args.dsn, autocommit=True) as conn:
        vid, cid, analyzer, n_chunks = active_version(conn, args.collection, args.data)
        vecs = Embedder().embed(queries)
        stmts = {
            "funnel_search": "select count(*) from funnel_search(%s, %b, collection => %s)",
            "lexical leg": ("select count(*) from pgfunnel._lexical_leg(%s, "
                            "pgfunnel.analyze(%s, %s, true), 40, 1.2, 0.75, '{}', null, null, "
                            "now(), null, %s)"),
            "dense leg": ("select count(*) from pgfunnel._dense_leg(%s, %b, 40, 100, '{}', "
                          "null, null, now(), null, %s)"),
            PEER: "select count(*) from bench_peer.hybrid_search(%s, %b, 10)",
        }

        def params(name: str, q: str, v: np.ndarray) -> tuple[Any, ...]:
            if name == "lexical leg":
                return (vid, q, analyzer, cid)
            if name == "dense leg":
                return (vid, v, cid)
            if name == "funnel_search":
                return (q, v, args.collection)
            return (q, v)

        times: dict[str, list[float]] = {k: [] for k in stmts}
        for q, v in zip(queries[:10], vecs[:10], strict=True):  # warm-up
            for name, stmt in stmts.items():
                conn.execute(stmt, params(name, q, v), prepare=True).fetchall()
        names = list(stmts)
        for _ in range(args.repeats):
            for i, (q, v) in enumerate(zip(queries, vecs, strict=True)):
                for name in names[i % len(names):] + names[:i % len(names)]:
                    # an unrelated peer search first, untimed, so every system starts
                    # from caches another query left: in a fixed rotation each system
                    # follows the same one, and the legs ran right after funnel_search for
                    # the same query, in the pages it had just warmed (the legs measured
                    # 0.76 -> 0.66 and 1.65 -> 1.23 ms for it, funnel_search the same)
                    other = (i + len(queries) // 2) % len(queries)
                    conn.execute(stmts[PEER], params(PEER, queries[other], vecs[other]),
                                 prepare=True).fetchall()
                    stmt = stmts[name]
                    t0 = time.perf_counter()
                    conn.execute(stmt, params(name, q, v), prepare=True).fetchall()
                    times[name].append((time.perf_counter() - t0) * 1000)
        # the same searches back to back, nothing in between: what a connection that
        # serves only searches sees (the peer's scans no longer evict the HNSW graph
        # from the CPU's caches between two searches)
        alone: list[float] = []
        stmt = stmts["funnel_search"]
        for _ in range(args.repeats):
            for q, v in zip(queries, vecs, strict=True):
                t0 = time.perf_counter()
                conn.execute(stmt, params("funnel_search", q, v), prepare=True).fetchall()
                alone.append((time.perf_counter() - t0) * 1000)
    p50 = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.collection} collection: {n_chunks} chunks, all-MiniLM-L6-v2 vectors (384-dim); "
          f"{len(queries)} index queries x {args.repeats} repeats, interleaved, one warm "
          "connection\n")
    print("| system | p50 ms | p95 ms | p50 vs funnel_search |")
    print("|---|---:|---:|---:|")
    for k, v in times.items():
        print(f"| {k} | {p50[k]:.2f} | {pct(v, 0.95):.2f} | "
              f"{p50[k] / p50['funnel_search']:.2f} |")
    print(f"| funnel_search, back to back (not interleaved) | {statistics.median(alone):.2f} | "
          f"{pct(alone, 0.95):.2f} | {statistics.median(alone) / p50['funnel_search']:.2f} |")
    both = [a + b for a, b in zip(times["lexical leg"], times["dense leg"], strict=True)]
    print(f"\nhybrid_search / funnel_search (p50): "
          f"{p50[PEER] / p50['funnel_search']:.2f}x")
    print(f"funnel_search / (lexical leg + dense leg) (p50): "
          f"{p50['funnel_search'] / statistics.median(both):.2f}")
    # the milliseconds follow the machine's load (README, "Measured"): a target missed
    # with the peer slower than usual is the hour, which the ratios show
    print()
    print("\n".join(target_rows(p50, pct(times["funnel_search"], 0.95),
                                 statistics.median(both))))


if __name__ == "__main__":
    main()
